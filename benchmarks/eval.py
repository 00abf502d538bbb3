"""Measures the eval harness: episodes/s on BFCL and HumanEval with stub (oracle) policies at concurrency 1, 8 and 32, and the harness's own overhead per episode.

The oracle policies answer instantly, so an episode's time is env time + harness time. Each
episode's env time (``areset``/``astep``) and policy time (``chat``) are clocked in the
episode's own asyncio task; the harness overhead is the episode's recorded wall time minus
both (the agent loop, the runner, writing results.jsonl). Target: p50 ≤ 20 ms per episode.
At concurrency > 1 episodes also wait for each other (2 cores, one event loop), so overhead is
reported at concurrency 1, where it is the harness's alone, and episodes/s at every level.

    .venv/bin/python benchmarks/eval.py [--bfcl-tasks 64] [--humaneval-tasks 16]

HumanEval needs Docker. Prints a Markdown table and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.core import AgentEnv  # noqa: E402
from agentgym.eval.harness import evaluate, load_results  # noqa: E402
from agentgym.eval.oracles import oracle_for  # noqa: E402
from agentgym.eval.suites import load_suite  # noqa: E402
from agentgym.rollout.agent import Agent  # noqa: E402

_clock: contextvars.ContextVar[dict] = contextvars.ContextVar("episode_clock")
clocks: dict[str, dict] = {}


def _timed(method, key: str):
    async def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return await method(self, *args, **kwargs)
        finally:
            clock = _clock.get(None)
            if clock is not None:
                clock[key] += time.perf_counter() - started

    return wrapper


def instrument() -> None:
    """Clock env and policy time per episode (the agent's start runs in the episode's own task)."""
    start = Agent.start

    async def timed_start(self, env, task_id=None, seed=None):
        clock = clocks.setdefault(task_id, {"env": 0.0, "policy": 0.0})
        _clock.set(clock)
        return await start(self, env, task_id, seed)

    Agent.start = _timed(timed_start, "env")  # reset is most of start
    AgentEnv.astep = _timed(AgentEnv.astep, "env")

    original_factory = oracle_for

    def factory(env_id, env_kwargs):
        policy = original_factory(env_id, env_kwargs)
        policy.chat = _timed(type(policy).chat, "policy").__get__(policy)
        return policy

    return factory


async def measure(suite_name: str, tasks: int, concurrency: int, factory) -> dict:
    suite = load_suite(suite_name)
    suite = type(suite)(suite.name, suite.tasks[:tasks])
    clocks.clear()
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        summary = await evaluate(
            suite, factory, k=1, concurrency=concurrency, out_dir=out, progress=False, model="oracle"
        )
        wall = time.perf_counter() - started
        rows = load_results(Path(out))
    overheads = [
        1000 * (row["wall_s"] - clocks[row["task_id"]]["env"] - clocks[row["task_id"]]["policy"]) for row in rows
    ]
    return {
        "suite": suite_name,
        "concurrency": concurrency,
        "episodes": len(rows),
        "success_rate": summary["metrics"]["success_rate"],
        "wall_s": round(wall, 2),
        "episodes_per_s": round(len(rows) / wall, 2),
        "overhead_p50_ms": round(statistics.median(overheads), 2),
        "overhead_p95_ms": round(sorted(overheads)[int(0.95 * (len(overheads) - 1))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bfcl-tasks", type=int, default=64)
    parser.add_argument("--humaneval-tasks", type=int, default=16)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    factory = instrument()
    rows = []
    for suite, tasks in (("bfcl-base", args.bfcl_tasks), ("humaneval", args.humaneval_tasks)):
        if tasks:
            for concurrency in args.concurrency:
                rows.append(asyncio.run(measure(suite, tasks, concurrency, factory)))
                print(f"measured {suite} at concurrency {concurrency}", file=sys.stderr)
    print("| suite | concurrency | episodes | success | episodes/s | harness overhead p50 / p95 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['suite']} | {row['concurrency']} | {row['episodes']} | {row['success_rate']:.0%} "
            f"| {row['episodes_per_s']} | {row['overhead_p50_ms']} / {row['overhead_p95_ms']} |"
        )
    print(json.dumps({"benchmark": "eval", "rows": rows}))


if __name__ == "__main__":
    main()
