"""Measures the GUI envs' desktop: reset, screenshot, action, snapshot and fork latency, fork vs. replay at turn 10, and concurrent desktops.

Prints a Markdown table (docs/results.md's) and a JSON line. Every ratio is measured in this one run.

    .venv/bin/python benchmarks/gui.py [--repeats 7] [--max-desktops 6]

Two tasks stand for the two ways a desktop forks: a Sheet task (the app restores its state
from the committed filesystem: relaunch) and an xedit task (its buffer lives only in memory:
the action prefix is replayed). The turn-10 prefix is ten realistic steps (clicks into cells or
lines, typing, key combinations). Replay is what a system without snapshots does to branch: a
reset followed by the same prefix. Concurrency runs N desktops in threads, each stepping
through clicks and typing for a fixed time, and reports each one's steps per second.
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

import gymnasium  # noqa: E402
from timing import summary, timed  # noqa: E402

import agentgym  # noqa: E402,F401
from agentgym.envs.gui.tasks import cell_xy  # noqa: E402

SHEET_TASK, XEDIT_TASK = "sheet-line-totals", "xedit-insert-item"
TURNS = 10
TARGET_STEPS_PER_S = 2.0


def prefix(task_id: str, turns: int = TURNS) -> list[str]:
    """``turns`` realistic steps for the task's app (they need not solve it)."""
    if task_id.startswith("sheet"):
        cycle = []
        for row in range(2, 7):
            cycle += ["click({}, {})".format(*cell_xy(f"E{row}")), f'type("{row * 7}")']
    else:
        cycle = ["click(400, 300)", 'key("Home Down")', 'type("a new line\\n")', 'key("ctrl+e")', 'type(" more")']
    return [cycle[i % len(cycle)] for i in range(turns)]


def play(env, task_id: str, turns: int = TURNS) -> None:
    env.reset(options={"task_id": task_id})
    for step in prefix(task_id, turns):
        *_, info = env.step(step)
        if info["error"]:
            raise RuntimeError(f"{step}: {info['error']}")


def measure_basics(env, repeats: int) -> dict:
    resets, shots, actions = [], [], []
    for _ in range(repeats):
        time.sleep(1.0)  # let the warm pool refill, as it does between episodes
        resets.append(timed(lambda: env.reset(options={"task_id": SHEET_TASK}))[0])
        for step in prefix(SHEET_TASK, 6):
            actions.append(timed(lambda: env.step(step))[0])
        shots += [timed(env.unwrapped.desktop.observe)[0] for _ in range(3)]
    return {"reset": summary(resets), "screenshot": summary(shots), "action": summary(actions)}


def measure_branching(task_id: str, repeats: int) -> dict:
    env = gymnasium.make("agentgym/gui.desktop-v0")
    replay_env = gymnasium.make("agentgym/gui.desktop-v0")
    snapshots, forks, replays = [], [], []
    try:
        play(env, task_id)
        for _ in range(repeats):
            ms, snapshot = timed(env.snapshot)
            snapshots.append(ms)
            ms, child = timed(lambda: env.fork(snapshot))
            forks.append(ms)
            child.close()
            snapshot.release()
        for _ in range(max(3, repeats // 2)):
            time.sleep(1.0)
            replays.append(timed(lambda: play(replay_env, task_id))[0])
        mode = env.snapshot()
        fork_mode = mode.metadata["fork"]
        mode.release()
    finally:
        env.close()
        replay_env.close()
    return {
        "task": task_id,
        "fork_mode": fork_mode,
        "snapshot": summary(snapshots),
        "fork": summary(forks),
        "replay": summary(replays),
        "replay_over_fork": statistics.median(replays) / statistics.median(forks),
        "replay_over_snapshot_fork": statistics.median(replays)
        / (statistics.median(forks) + statistics.median(snapshots)),
    }


def measure_concurrency(desktops: int, seconds: float = 15.0) -> dict:
    """N desktops stepping at once for ``seconds``: each one's steps per second (resets excluded)."""
    # A turn limit above what the run can reach: the episode must not end (and stop stepping) mid-measurement.
    envs = [gymnasium.make("agentgym/gui.desktop-v0", max_turns=1_000_000) for _ in range(desktops)]
    errors, lock, barrier = [], threading.Lock(), threading.Barrier(desktops)

    def run(env) -> float:
        env.reset(options={"task_id": SHEET_TASK})
        steps = prefix(SHEET_TASK, 10)
        barrier.wait()
        started, done = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            *_, info = env.step(steps[done % len(steps)])
            if info["error"] or "env_error" in info:
                with lock:
                    errors.append(info["error"] or info["env_error"])
            done += 1
        return done / (time.perf_counter() - started)

    try:
        with ThreadPoolExecutor(desktops) as pool:
            rates = list(pool.map(run, envs))
    finally:
        for env in envs:
            env.close()
    if errors:
        raise RuntimeError(f"{len(errors)} steps failed with {desktops} desktops, e.g. {errors[0]}")
    return {"desktops": desktops, "min_steps_per_s": min(rates), "mean_steps_per_s": statistics.mean(rates)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-desktops", type=int, default=6)
    args = parser.parse_args()

    env = gymnasium.make("agentgym/gui.desktop-v0")
    try:
        basics = measure_basics(env, args.repeats)
    finally:
        env.close()
    branching = [measure_branching(task, args.repeats) for task in (SHEET_TASK, XEDIT_TASK)]
    concurrency = []
    for desktops in range(1, args.max_desktops + 1):
        concurrency.append(measure_concurrency(desktops))
        if concurrency[-1]["min_steps_per_s"] < TARGET_STEPS_PER_S:
            break
    sustained = max([c["desktops"] for c in concurrency if c["min_steps_per_s"] >= TARGET_STEPS_PER_S], default=0)

    print("| operation (1024×768 desktop) | p50 ms | p95 ms |")
    print("|---|---:|---:|")
    print(
        f"| reset (warm pool: X server, window manager, task files, app on screen) | "
        f"{basics['reset']['p50']:.0f} | {basics['reset']['p95']:.0f} |"
    )
    print(
        f"| screenshot (settled screen + window list + accessibility text) | "
        f"{basics['screenshot']['p50']:.0f} | {basics['screenshot']['p95']:.0f} |"
    )
    print(
        f"| action (click / type / key, until the screen settles, with its screenshot) | "
        f"{basics['action']['p50']:.0f} | {basics['action']['p95']:.0f} |"
    )
    for row in branching:
        label = f"{row['task']} ({row['fork_mode']})"
        print(f"| snapshot at turn {TURNS}, {label} | {row['snapshot']['p50']:.0f} | {row['snapshot']['p95']:.0f} |")
        print(f"| fork at turn {TURNS}, {label} | {row['fork']['p50']:.0f} | {row['fork']['p95']:.0f} |")
        print(
            f"| replay to turn {TURNS} (reset + {TURNS} actions), {row['task']} | {row['replay']['p50']:.0f} | "
            f"{row['replay']['p95']:.0f} |"
        )
        print(
            f"| **replay ÷ fork** at turn {TURNS}, {label} | {row['replay_over_fork']:.1f}× "
            f"({row['replay_over_snapshot_fork']:.1f}× incl. snapshot) | |"
        )
    rates = ", ".join(f"{c['desktops']}: {c['min_steps_per_s']:.1f}" for c in concurrency)
    print(
        f"| concurrent desktops at ≥ {TARGET_STEPS_PER_S:g} steps/s each | **{sustained}** | "
        f"slowest desktop's steps/s by N = {rates} |"
    )
    print(json.dumps({"basics": basics, "branching": branching, "concurrency": concurrency, "sustained": sustained}))


if __name__ == "__main__":
    main()
