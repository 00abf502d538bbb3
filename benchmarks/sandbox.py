"""Measures the Docker sandbox on RepoFix: exec overhead, reset (warm pool vs cold), snapshot, fork, restore, replay, and 16 concurrent envs.

Prints a Markdown table (docs/results.md's) and a JSON line. Every ratio is measured in this one run.

    .venv/bin/python benchmarks/sandbox.py [--repeats 7] [--concurrency 16]

The action prefix at turn k is a realistic agent mix that cycles through: a grep, a file read,
an edit, a Python one-liner, and (every fifth turn) a visible-test run; replay cost is a reset
followed by that same prefix, which is what a system without snapshots must do to branch.
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
from agentgym.sandbox import engine  # noqa: E402
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig  # noqa: E402

TURNS = (1, 5, 10, 20)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def prefix_action(turn: int) -> str:
    cycle = [
        call("bash", command="grep -rn 'def ' --include=*.py . | head -20"),
        call("read_file", path="README.md", start_line=1, end_line=40),
        call("write_file", path=f"notes/turn{turn}.txt", content=f"turn {turn}\n" * 50),
        call("python", code="import os; print(sorted(os.listdir('.'))[:5])"),
        call("run_tests"),
    ]
    return cycle[(turn - 1) % len(cycle)]


def ready(env):
    """Wait until the env's sandbox runs commands (its container may still be starting)."""
    env.unwrapped.sandbox.exec("true")
    return env


def in_warm_container(env) -> bool:
    """Whether the env's sandbox is a warm pooled container that received a snapshot's diff (not a container
    started from the committed image): the image it runs is not the snapshot's."""
    sandbox = env.unwrapped.sandbox
    return engine.api().inspect_container(sandbox.id)["Config"]["Image"] != sandbox.image


def restore_ready(env, snapshot):
    env.restore(snapshot)
    return ready(env)


def play_prefix(env, task_id: str, turns: int) -> None:
    env.reset(options={"task_id": task_id})
    env.step(call("bash", command="mkdir -p notes"))
    for turn in range(2, turns + 1):
        env.step(prefix_action(turn))


def measure_exec(repeats: int) -> dict:
    """`true` through the command server, through an exec of its own (the server off), and as a bare
    `docker exec` (what the SDK's `exec_run("true")` does), interleaved so that load hits all three alike."""
    server = DockerSandbox.create()
    plain = DockerSandbox.create(config=SandboxConfig(command_server=False))
    client = engine.api()

    def bare():
        client.exec_start(client.exec_create(server.id, ["true"], user=server.config.user)["Id"])

    try:
        server.exec("true")
        plain.exec("true")
        samples = {"server": [], "exec": [], "bare": []}
        for _ in range(repeats * 5):
            samples["server"].append(timed(lambda: server.exec("true"))[0])
            samples["exec"].append(timed(lambda: plain.exec("true"))[0])
            samples["bare"].append(timed(bare)[0])
    finally:
        server.close()
        plain.close()
    rows = {name: summary(values) for name, values in samples.items()}
    rows["bare_over_server"] = rows["bare"]["p50"] / rows["server"]["p50"]
    return rows


def measure_reset(env, task_id: str, repeats: int) -> tuple[dict, dict]:
    warm = []
    for _ in range(repeats):
        time.sleep(1.0)  # let the pool refill, as it does between episodes in a real run
        warm.append(timed(lambda: env.reset(options={"task_id": task_id}))[0])
    cold_env = gymnasium.make("agentgym/code.repofix-v0", warm_pool=False)
    cold = []
    try:
        for _ in range(repeats):
            cold.append(timed(lambda: cold_env.reset(options={"task_id": task_id}))[0])
    finally:
        cold_env.close()
    return summary(warm), summary(cold)


def measure_branching(env, task_id: str, repeats: int) -> dict:
    rows = {}
    for turns in TURNS:
        play_prefix(env, task_id, turns)
        snapshot_ms, fork_ms, snapshot_fork_ms, restore_ms, replay_ms = [], [], [], [], []
        warm = 0
        for _ in range(repeats):
            time.sleep(0.5)  # the time a model call takes between branchings, in which the pool refills
            ms, snap = timed(env.snapshot)
            snapshot_ms.append(ms)
            # Containers start in the background; a branch counts as forked once it ran a command.
            ms, child = timed(lambda: ready(env.fork(snap)))
            fork_ms.append(ms)
            warm += in_warm_container(child)
            child.close()
            restore_ms.append(timed(lambda: restore_ready(env, snap))[0])
            snap.release()
            ms, child = timed(lambda: ready(env.fork()))
            snapshot_fork_ms.append(ms)
            child.close()
        replay_env = gymnasium.make("agentgym/code.repofix-v0")
        try:
            for _ in range(max(3, repeats // 2)):
                replay_ms.append(timed(lambda: play_prefix(replay_env, task_id, turns))[0])
        finally:
            replay_env.close()
        rows[turns] = {
            "snapshot": summary(snapshot_ms),
            "fork": summary(fork_ms),
            "snapshot+fork": summary(snapshot_fork_ms),
            "restore": summary(restore_ms),
            "replay": summary(replay_ms),
            "replay_over_fork": statistics.median(replay_ms) / statistics.median(fork_ms),
            "forks_in_warm_containers": warm / repeats,
            "replay_over_snapshot_fork": statistics.median(replay_ms) / statistics.median(snapshot_fork_ms),
        }
    return rows


def measure_concurrency(task_ids: list[str], concurrency: int) -> dict:
    errors, lock = [], threading.Lock()

    def episode(i: int) -> float:
        env = gymnasium.make("agentgym/code.repofix-v0")
        started = time.perf_counter()
        try:
            task_id = task_ids[i % len(task_ids)]
            play_prefix(env, task_id, 5)
            with env.snapshot() as snap:
                env.fork(snap).close()
            *_, info = env.step(call("submit"))
            if "env_error" in info:
                raise RuntimeError(info["env_error"])
        except Exception as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            env.close()
        return time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        durations = list(pool.map(episode, range(concurrency)))
    return {
        "envs": concurrency,
        "errors": len(errors),
        "error_samples": errors[:3],
        "wall_s": time.perf_counter() - started,
        "episode_p50_s": statistics.median(durations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    env = gymnasium.make("agentgym/code.repofix-v0")
    task_id = env.unwrapped.task_ids()[0]
    try:
        exec_ms = measure_exec(args.repeats)
        warm, cold = measure_reset(env, task_id, args.repeats)
        branching = measure_branching(env, task_id, args.repeats)
    finally:
        env.close()
    concurrency = measure_concurrency(env.unwrapped.task_ids(), args.concurrency)

    print("| operation | p50 ms | p95 ms | target |")
    print("|---|---:|---:|---|")
    for name, label in (
        ("server", "exec (`true`) via the command server"),
        ("exec", "exec (`true`), one `docker exec` each (server off)"),
        ("bare", "bare `docker exec` of `true` (for comparison)"),
    ):
        target = "p50 ≤ 15" if name == "server" else ""
        print(f"| {label} | {exec_ms[name]['p50']:.1f} | {exec_ms[name]['p95']:.1f} | {target} |")
    print(f"| command via the command server vs bare docker exec | {exec_ms['bare_over_server']:.1f}× | | ≥ 4× |")
    print(f"| reset, warm pool | {warm['p50']:.0f} | {warm['p95']:.0f} | p50 ≤ 150 |")
    print(f"| reset, cold | {cold['p50']:.0f} | {cold['p95']:.0f} | (for comparison) |")
    for turns, row in branching.items():
        for op, label in (
            ("snapshot", "snapshot (docker commit)"),
            ("fork", "fork from a snapshot, until ready"),
            ("snapshot+fork", "fork() of the live env, until ready"),
            ("restore", "restore, until ready"),
            ("replay", "replay from reset"),
        ):
            target = "p50 ≤ 120 at turn 10" if op == "fork" and turns == 10 else ""
            if op == "fork":
                target += f" ({row['forks_in_warm_containers']:.0%} in warm containers)"
            print(f"| {label}, turn {turns} | {row[op]['p50']:.0f} | {row[op]['p95']:.0f} | {target} |")
        target = "≥ 8× at turn 10" if turns == 10 else ""
        print(
            f"| replay ÷ fork, turn {turns} | {row['replay_over_fork']:.1f}× "
            f"({row['replay_over_snapshot_fork']:.1f}× incl. snapshot) | | {target} |"
        )
    print(
        f"| {concurrency['envs']} concurrent envs (5 turns, snapshot, fork, submit) | "
        f"{concurrency['episode_p50_s'] * 1000:.0f} | | zero errors: {concurrency['errors']} errors, "
        f"{concurrency['wall_s']:.1f} s wall |"
    )
    print(
        json.dumps(
            {
                "exec": exec_ms,
                "reset_warm": warm,
                "reset_cold": cold,
                "branching": branching,
                "concurrency": concurrency,
            }
        )
    )


if __name__ == "__main__":
    main()
