"""Measures what tree rollouts save over linear episodes at an equal number of leaves: env steps and generated tokens, measured against the tree shape's theoretical saving.

For each task a tree is grown; then as many independent linear episodes as the tree has leaves
are run. The measured saving is ``1 − tree cost / linear cost``; the theoretical one is
:func:`~agentgym.rollout.tree_values.prefix_sharing_saving` of the tree's own shape (what it would
save if every linear episode were exactly as long as the tree path it stands for). Their ratio
is 1 when linear episodes are as long as tree paths; it drifts when episode lengths vary.

    .venv/bin/python benchmarks/rollout_tree.py [--env counter humaneval] [--strategy uniform] \
        [--leaves 8] [--roots 2] [--tasks 2] [--max-turns 6] [--max-tokens 16]

Both envs run the tiny local model (random weights: mostly malformed actions, so episodes tend to
run to the turn cap); HumanEval needs Docker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.core import AgentEnv  # noqa: E402
from agentgym.rollout.agent import Agent, AgentConfig  # noqa: E402
from agentgym.rollout.policy import SamplingParams  # noqa: E402
from agentgym.rollout.trajectory import Trajectory  # noqa: E402
from agentgym.rollout.tree import STRATEGIES, TreeConfig, TreeRollout  # noqa: E402
from agentgym.rollout.tree_values import prefix_sharing_saving  # noqa: E402


async def measure_tree_vs_linear(env_factory: Callable[[], AgentEnv], agent: Agent, task_ids: Sequence[str],
                                 tree_config: TreeConfig) -> dict:
    """Trees vs as many linear episodes as they have leaves, per task and in total (see the module docstring).

    ``env_factory`` builds a fresh env; every env built here is closed here. Returns
    ``{"tasks": [...], "total": {...}}`` with env steps, generated tokens, wall times, the
    measured and theoretical savings and measured/theoretical, for steps and for tokens.
    """
    rollout = TreeRollout(agent, tree_config)
    tasks = []
    for task_id in task_ids:
        env = env_factory()
        try:
            started = time.perf_counter()
            tree = await rollout.run(env, task_id)
            tree_s = time.perf_counter() - started
        finally:
            await env.aclose()
        started = time.perf_counter()
        linear = await _linear_episodes(env_factory, agent, task_id, len(tree.leaves), tree_config.concurrency)
        linear_s = time.perf_counter() - started
        tasks.append({
            "task_id": task_id, "leaves": len(tree.leaves),
            "tree_steps": tree.num_env_steps, "linear_steps": sum(t.num_env_steps for t in linear),
            "tree_tokens": tree.num_generated_tokens, "linear_tokens": sum(t.num_generated_tokens for t in linear),
            # The tree's shape replayed linearly: each leaf's path length, in steps and in tokens.
            "shape_linear_steps": sum(len(tree.path(leaf.id)) for leaf in tree.leaves),
            "shape_linear_tokens": sum(len(n.turn.completion_ids) for leaf in tree.leaves for n in tree.path(leaf.id)),
            "theoretical_step_saving": prefix_sharing_saving(tree),
            "theoretical_token_saving": prefix_sharing_saving(tree, "tokens"),
            "tree_s": round(tree_s, 3), "linear_s": round(linear_s, 3),
            "resamples": tree.metadata["resamples"]})
    for row in tasks:
        row.update(_savings(row))
    total = {key: sum(row[key] for row in tasks) for key in (
        "leaves", "tree_steps", "linear_steps", "tree_tokens", "linear_tokens",
        "shape_linear_steps", "shape_linear_tokens", "tree_s", "linear_s", "resamples")}
    total["task_id"] = "total"
    total["theoretical_step_saving"] = _saving(total["tree_steps"], total["shape_linear_steps"])
    total["theoretical_token_saving"] = _saving(total["tree_tokens"], total["shape_linear_tokens"])
    total.update(_savings(total))
    return {"strategy": tree_config.strategy, "tasks": tasks, "total": total}


async def _linear_episodes(env_factory: Callable[[], AgentEnv], agent: Agent, task_id: str, count: int,
                           concurrency: int) -> list[Trajectory]:
    slots = asyncio.Semaphore(concurrency)

    async def one() -> Trajectory:
        async with slots:
            env = env_factory()
            try:
                return await agent.run(env, task_id)
            finally:
                await env.aclose()

    return list(await asyncio.gather(*(one() for _ in range(count))))


def _saving(cost: float, linear_cost: float) -> float:
    return 1.0 - cost / linear_cost if linear_cost else 0.0


def _savings(row: dict) -> dict:
    steps = _saving(row["tree_steps"], row["linear_steps"])
    tokens = _saving(row["tree_tokens"], row["linear_tokens"])
    return {"measured_step_saving": steps, "measured_token_saving": tokens,
            "step_ratio": _ratio(steps, row["theoretical_step_saving"]),
            "token_ratio": _ratio(tokens, row["theoretical_token_saving"])}


def _ratio(measured: float, theoretical: float) -> float | None:
    return measured / theoretical if theoretical else None


def format_table(name: str, result: dict) -> str:
    """A Markdown table of a :func:`measure_tree_vs_linear` result."""
    lines = [f"### {name} ({result['strategy']})", "",
             "| task | leaves | env steps tree / linear | saving measured / theoretical (ratio) "
             "| tokens tree / linear | saving measured / theoretical (ratio) | wall s tree / linear |",
             "|---|---|---|---|---|---|---|"]

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    def ratio(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    for row in [*result["tasks"], result["total"]]:
        lines.append(
            f"| {row['task_id']} | {row['leaves']} | {row['tree_steps']} / {row['linear_steps']} "
            f"| {pct(row['measured_step_saving'])} / {pct(row['theoretical_step_saving'])} ({ratio(row['step_ratio'])}) "
            f"| {row['tree_tokens']} / {row['linear_tokens']} "
            f"| {pct(row['measured_token_saving'])} / {pct(row['theoretical_token_saving'])} ({ratio(row['token_ratio'])}) "
            f"| {row['tree_s']:.1f} / {row['linear_s']:.1f} |")
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> None:
    from agentgym.models import tiny_model_path
    from agentgym.rollout.hf_policy import HFPolicy

    config = TreeConfig(strategy=args.strategy, roots=args.roots, max_leaves=args.leaves,
                        branch_every=args.branch_every, branches=args.branches, concurrency=args.leaves)
    async with HFPolicy(tiny_model_path(), device="cpu") as policy:
        agent = Agent(policy, AgentConfig(max_turns=args.max_turns, sampling=SamplingParams(max_tokens=args.max_tokens)))
        for name in args.env:
            if name == "counter":
                from tests.envs.counter import CounterEnv

                factory, task_ids = CounterEnv, list(CounterEnv().task_ids())[:args.tasks]
            else:
                from agentgym.envs.code.humaneval import HumanEvalEnv, load_problems

                factory, task_ids = HumanEvalEnv, list(load_problems())[:args.tasks]
            result = await measure_tree_vs_linear(factory, agent, task_ids, config)
            print(format_table(name, result) + "\n")
            print(json.dumps({"env": name, **result["total"]}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="+", choices=["counter", "humaneval"], default=["counter", "humaneval"])
    parser.add_argument("--strategy", choices=STRATEGIES, default="uniform")
    parser.add_argument("--leaves", type=int, default=8)
    parser.add_argument("--roots", type=int, default=2)
    parser.add_argument("--branch-every", type=int, default=2)
    parser.add_argument("--branches", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
