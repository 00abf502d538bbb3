"""Measures the real-app desktop (LibreOffice or GIMP in the desktop-apps image): reset, step with and without the accessibility tree, and fork vs. replay at turns 5 and 15; or each app's first-window time.

Prints a Markdown table (docs/results.md's) and a JSON line; every ratio is measured in this one run.

    .venv/bin/python benchmarks/gui_apps.py [--repeats 3] [--task calc-product-1 | gimp-mirror-0]
    .venv/bin/python benchmarks/gui_apps.py --launch [--image TAG] [--tasks ID ...] [--repeats 3]
    .venv/bin/python benchmarks/gui_apps.py --concurrency 3 [--seconds 40] [--task calc-product-1]

``--launch`` times, per app, the start of the app on a task's file in a fresh desktop (a warm
container with X, D-Bus and the window manager up, the task's files laid out): from the launch until
the task's window has the focus and the screen has settled (what a reset waits for), with a limit of
``--limit`` seconds instead of a reset's 60, so that an image whose app starts slower still gets a
number. ``--image`` measures another build of the image (an older recipe, say).

``--concurrency N`` runs 1, 2, ... N desktops at once (threads, each on the task, stepping through the prefix's
cycle for ``--seconds``, resets excluded) and prints each level's slowest and mean steps per second and the
desktops' memory (the engine's figure for each container, at the end of the level): how many real-app desktops
this machine runs at once, which :meth:`DesktopEnv.concurrency_bound` answers from the cores and memory.

The task is a Calc one (``calc-product-1``) unless ``--task`` names another Calc or GIMP task; the
prefix cycles through keyboard steps (they need not solve it): in Calc, steps that move the cell
cursor and type into cells; in GIMP, a command run through its search (a flip of the image), undone
and redone. Both apps keep an unsaved edit only in their memory, so a fork of this env replays the
action prefix (a commit would not hold it): fork and replay differ only by the snapshot's bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import summary, timed  # noqa: E402

from agentgym.envs.gui import DesktopAppsEnv  # noqa: E402
from agentgym.envs.gui.generators import generate  # noqa: E402
from agentgym.envs.gui.osworld import load_task  # noqa: E402
from agentgym.envs.gui.tasks import HOME  # noqa: E402
from agentgym.sandbox import engine  # noqa: E402
from agentgym.sandbox.desktop import DesktopSandbox, tar_tree  # noqa: E402

TASK = "calc-product-1"
#: One task per app for --launch.
LAUNCH_TASKS = ("calc-sum-0", "writer-append-0", "impress-title-0", "text-append-0", "gimp-mirror-0")
#: Per app, the steps a prefix cycles through.
CYCLES = {
    "calc": [
        'key("ctrl+Home Right Right Right")',
        'type("Cost\\n")',
        'key("Down")',
        'type("=B3*C3\\n")',
        'key("Up Up")',
    ],
    "gimp": ['key("slash")', 'type("Flip image horizontally")', 'key("Return")', 'key("ctrl+z")', 'key("ctrl+y")'],
}


def prefix(task_id: str, turns: int) -> list[str]:
    cycle = CYCLES[task_id.split("-")[0]]
    return [cycle[i % len(cycle)] for i in range(turns)]


def play(env, steps: list[str]) -> None:
    for step in steps:
        *_, info = env.step(step)
        if info["error"]:
            raise RuntimeError(f"{step}: {info['error']}")


def launch_times(image: str | None, task_ids: list[str], repeats: int, limit: float) -> None:
    """Per task's app, the launch on the task's file in a fresh desktop until its window is focused and settled."""
    rows, numbers = [], {}
    for task_id in task_ids:
        app, kind, seed = task_id.split("-")
        task, samples = load_task(*generate(app, kind, int(seed))), []
        for _ in range(repeats):
            with DesktopSandbox.create(image, a11y_tree=True) as desktop:
                desktop.sandbox.put_tree(HOME, tar_tree(dict(task.files), desktop.sandbox.config))
                argv, title = list(task.app.argv), task.app.ready_title
                samples.append(timed(lambda: desktop.launch(task.app.name, argv, ready_title=title, timeout=limit))[0])
        numbers[task.app.name] = summary(samples)
        rows.append((f"{task.app.name} ({task_id})", samples))
    print("| app: first window, focused and settled | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, values in rows:
        stats = summary(values)
        print(f"| {name} | {stats['p50']:.0f} | {stats['p95']:.0f} |")
    print(json.dumps(numbers))


def concurrency(task_id: str, desktops: int, seconds: float) -> dict:
    """``desktops`` envs stepping at once for ``seconds``: each one's steps per second, and their containers' memory."""
    envs = [DesktopAppsEnv(max_turns=1_000_000) for _ in range(desktops)]  # the episode must not end mid-measurement
    barrier, steps = threading.Barrier(desktops), prefix(task_id, len(CYCLES[task_id.split("-")[0]]))

    def run(env) -> float:
        env.reset(options={"task_id": task_id})
        barrier.wait()
        started, done = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            play(env, [steps[done % len(steps)]])
            done += 1
        return done / (time.perf_counter() - started)

    try:
        with ThreadPoolExecutor(desktops) as pool:
            rates = list(pool.map(run, envs))
        memory = [engine.api().stats(env.desktop.sandbox.id, stream=False)["memory_stats"]["usage"] for env in envs]
    finally:
        for env in envs:
            env.close()
    return {
        "desktops": desktops,
        "min_steps_per_s": min(rates),
        "mean_steps_per_s": statistics.mean(rates),
        "max_memory_mib": max(memory) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--task", default=TASK, help=f"the task to reset and fork (an app of {sorted(CYCLES)})")
    parser.add_argument("--launch", action="store_true", help="time each app's first window instead")
    parser.add_argument("--image", help="the desktop-apps image to measure (default: the current recipe's)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a --launch may take")
    parser.add_argument(
        "--tasks", nargs="+", default=list(LAUNCH_TASKS), help="--launch: the tasks whose apps to start"
    )
    parser.add_argument("--concurrency", type=int, help="run 1..N desktops at once instead (steps per second, memory)")
    parser.add_argument("--seconds", type=float, default=40.0, help="--concurrency: seconds each level steps")
    args = parser.parse_args()
    if args.task.split("-")[0] not in CYCLES:
        parser.error(f"--task must be a task of {sorted(CYCLES)}, not {args.task!r}")
    if args.launch:
        launch_times(args.image, args.tasks, args.repeats, args.limit)
        return
    if args.concurrency:
        with DesktopAppsEnv() as env:
            bound = env.concurrency_bound()
        levels = [concurrency(args.task, n, args.seconds) for n in range(1, args.concurrency + 1)]
        print(
            f"| desktops at once ({args.task}; concurrency_bound here: {bound}) | slowest steps/s | mean steps/s "
            "| memory per desktop, max MiB |\n|---:|---:|---:|---:|"
        )
        for level in levels:
            print(
                f"| {level['desktops']} | {level['min_steps_per_s']:.2f} | {level['mean_steps_per_s']:.2f} "
                f"| {level['max_memory_mib']:.0f} |"
            )
        print(json.dumps({"concurrency_bound": bound, "levels": levels}))
        return
    rows, numbers = [], {}
    with DesktopAppsEnv() as env:
        resets, steps = [], []
        for _ in range(args.repeats):
            resets.append(timed(lambda: env.reset(options={"task_id": args.task}))[0])
            for step in prefix(args.task, 5):
                steps.append(timed(lambda step=step: env.step(step))[0])
        numbers["reset"], numbers["step"] = summary(resets), summary(steps)
        rows += [
            (f"reset ({args.task}: container, X, D-Bus, the app on the task's file)", resets),
            ("step (key/type, settle, tree)", steps),
        ]
        trees = []
        for _ in range(args.repeats):
            with_tree = timed(env.desktop.observe)[0]
            env.desktop.a11y_tree = False
            without = timed(env.desktop.observe)[0]
            env.desktop.a11y_tree = True
            trees.append(with_tree - without)
        numbers["tree"] = summary(trees)
        rows.append(("accessibility tree walk (observe with − without)", trees))
        for turns in (5, 15):
            forks, replays = [], []
            for _ in range(args.repeats):
                env.reset(options={"task_id": args.task})
                play(env, prefix(args.task, turns))
                with env.snapshot() as snapshot:
                    took, fork = timed(lambda snapshot=snapshot: env.fork(snapshot))
                    forks.append(took)
                    fork.close()
                with DesktopAppsEnv() as other:
                    replays.append(
                        timed(
                            lambda other=other: (
                                other.reset(options={"task_id": args.task}),
                                play(other, prefix(args.task, turns)),
                            )
                        )[0]
                    )
            numbers[f"fork_{turns}"], numbers[f"replay_{turns}"] = summary(forks), summary(replays)
            rows += [
                (f"fork at turn {turns} (replay of the prefix)", forks),
                (f"reset + replay to turn {turns}", replays),
            ]
    print("| operation | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, values in rows:
        stats = summary(values)
        print(f"| {name} | {stats['p50']:.0f} | {stats['p95']:.0f} |")
    print(json.dumps(numbers))


if __name__ == "__main__":
    main()
