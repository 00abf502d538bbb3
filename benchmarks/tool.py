"""Measures ToolEnv: step, snapshot and fork latency for Python-object and SQLite world states of 1, 10 and 100 MB, and BFCL episodes/s with 64 concurrent envs.

Prints a Markdown table and a JSON line. Python state is a dict of small account records (the
size is their pickled size); SQLite state is a table of 1 KB rows (the size is the database's).
Snapshot is ``snapshot()`` + ``release()``; fork is ``fork()`` + ``close()`` of the child; a
step is one tool call that reads and updates one record. The first few repeats are discarded:
they pay for the allocator growing the heap.

BFCL throughput: 64 BFCL multi-turn (base) envs, each replaying ground-truth episodes through
the async twins (``areset``/``astep``, the shared env thread pool) at once; every episode is
scored by BFCL's official checker. Episodes/s and steps/s over the whole run.

    .venv/bin/python benchmarks/tool.py [--sizes 1,10,100] [--repeats 30] [--steps 300] [--bfcl-episodes 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import percentiles  # noqa: E402

from agentgym.envs.tool import SQLiteState, ToolEnv  # noqa: E402

MB = 1 << 20
WARMUP = 3


def python_state(megabytes: int) -> dict:
    def records(count: int) -> dict:
        return {
            i: {"id": i, "owner": f"owner-{i:036d}", "balance": 0, "limits": [100, 200, i], "frozen": False}
            for i in range(count)
        }

    per_record = len(pickle.dumps(records(1000))) / 1000
    return records(int(megabytes * MB / per_record))


def sqlite_state(megabytes: int) -> SQLiteState:
    db = SQLiteState(script="CREATE TABLE accounts(id INTEGER PRIMARY KEY, balance INT, blob BLOB)")
    rows = megabytes * MB // 1024
    db.conn.executemany("INSERT INTO accounts(balance, blob) VALUES (0, ?)", ((os.urandom(1000),) for _ in range(rows)))
    return db


def bump_python(account: int, state: dict) -> int:
    """Add 1 to an account's balance."""
    state[account]["balance"] += 1
    return state[account]["balance"]


def bump_sqlite(account: int, state: SQLiteState) -> int:
    """Add 1 to an account's balance."""
    state.execute("UPDATE accounts SET balance = balance + 1 WHERE id = ?", (account,))
    return state.query("SELECT balance FROM accounts WHERE id = ?", (account,))[0][0]


def timings(action: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats + WARMUP):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples[WARMUP:]


def measure(backend: str, megabytes: int, repeats: int, steps: int) -> dict:
    started = time.perf_counter()
    state = python_state(megabytes) if backend == "python" else sqlite_state(megabytes)
    build_s = time.perf_counter() - started
    if backend == "sqlite":
        pages = state.query("PRAGMA page_count")[0][0] * state.query("PRAGMA page_size")[0][0]
        actual_mb = pages / MB
    else:
        actual_mb = len(pickle.dumps(state)) / MB
    tool = bump_python if backend == "python" else bump_sqlite
    # The factory hands out the prebuilt state: building 100 MB per reset would dominate the run.
    env = ToolEnv([tool], {"bench": "benchmark"}, state_factory=lambda task: state, max_turns=10**9)
    env.reset()
    accounts = iter(range(1, 10**9))
    step = timings(lambda: env.step({"name": tool.__name__, "arguments": {"account": next(accounts) % 500 + 1}}), steps)
    snapshot = timings(lambda: env.snapshot().release(), repeats)
    fork = timings(lambda: env.fork().close(), repeats)
    env.close()
    row = {"backend": backend, "size_mb": round(actual_mb, 1), "build_s": round(build_s, 2)}
    for name, samples in (("step", step), ("snapshot", snapshot), ("fork", fork)):
        p50, p95 = percentiles(samples)
        row[f"{name}_p50_ms"], row[f"{name}_p95_ms"] = round(p50, 3), round(p95, 3)
    return row


async def bfcl_throughput(envs: int = 64, episodes: int = 256) -> dict:
    """Episodes/s and steps/s of ``envs`` BFCL envs replaying ground truth concurrently (all scored successes)."""
    from agentgym.envs.tool.bfcl import BFCLMultiTurnEnv, from_bfcl_call

    pool = [BFCLMultiTurnEnv("base") for _ in range(envs)]
    task_ids = pool[0].task_ids()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(episodes):
        queue.put_nowait(task_ids[i % len(task_ids)])
    counts = {"episodes": 0, "steps": 0, "successes": 0}

    async def worker(env: BFCLMultiTurnEnv) -> None:
        while not queue.empty():
            task_id = queue.get_nowait()
            task = env.tasks[task_id]
            await env.areset(options={"task_id": task_id})
            for turn in task["ground_truth"]:
                if turn:
                    await env.astep([from_bfcl_call(call, task["involved_classes"]) for call in turn])
                    counts["steps"] += 1
                info = (await env.astep("Done."))[4]
                counts["steps"] += 1
            counts["episodes"] += 1
            counts["successes"] += info["success"]

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker(env) for env in pool))
    finally:
        for env in pool:
            env.close()
    wall = time.perf_counter() - started
    return {
        "envs": envs,
        **counts,
        "wall_s": round(wall, 2),
        "episodes_per_s": round(counts["episodes"] / wall, 1),
        "steps_per_s": round(counts["steps"] / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100", help="state sizes in MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=30, help="snapshots and forks per size (fewer at 100 MB)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--bfcl-episodes", type=int, default=256, help="episodes for the BFCL throughput run (0: skip)")
    args = parser.parse_args()
    rows = []
    for megabytes in (int(s) for s in args.sizes.split(",")):
        # Deep-copying 100 MB of Python objects takes seconds; a handful of repeats says enough.
        repeats = args.repeats if megabytes < 100 else max(5, args.repeats // 6)
        for backend in ("python", "sqlite"):
            rows.append(measure(backend, megabytes, repeats, args.steps))
            print(f"measured {backend} at {megabytes} MB", file=sys.stderr)
    print("| state | size (MB) | step p50 / p95 (ms) | snapshot p50 / p95 (ms) | fork p50 / p95 (ms) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['backend']} | {row['size_mb']} | {row['step_p50_ms']:.3f} / {row['step_p95_ms']:.3f} "
            f"| {row['snapshot_p50_ms']:.2f} / {row['snapshot_p95_ms']:.2f} "
            f"| {row['fork_p50_ms']:.2f} / {row['fork_p95_ms']:.2f} |"
        )
    bfcl = asyncio.run(bfcl_throughput(episodes=args.bfcl_episodes)) if args.bfcl_episodes else None
    if bfcl:
        print(
            f"\nBFCL multi-turn base, {bfcl['envs']} concurrent envs replaying ground truth: {bfcl['episodes']} episodes "
            f"({bfcl['successes']} scored successes), {bfcl['steps']} steps in {bfcl['wall_s']} s: "
            f"{bfcl['episodes_per_s']} episodes/s, {bfcl['steps_per_s']} steps/s"
        )
    print(json.dumps({"benchmark": "tool", "rows": rows, "bfcl": bfcl}))


if __name__ == "__main__":
    main()
