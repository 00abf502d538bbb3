"""Measures what tree rollouts save over linear episodes at an equal number of leaves: env steps and generated tokens, measured against the tree shape's theoretical saving.

For each task a tree is grown; then as many independent linear episodes as the tree has leaves
are run. The measured saving is ``1 − tree cost / linear cost``; the theoretical one is
:func:`~agentgym.rollout.tree_values.prefix_sharing_saving` of the tree's own shape (what it would
save if every linear episode were exactly as long as the tree path it stands for). Their ratio
is 1 when linear episodes are as long as tree paths; it drifts when episode lengths vary, and
falls when branching favours long episodes (only paths still running at a branch point branch,
so a tree's leaves are deeper on average than independent episodes). The "vs own leaves"
column compares what the tree paid (steps counted at the envs, every sampled token including
resampled duplicates) with replaying its own leaves linearly: it shows the overhead of
branching itself.

    .venv/bin/python benchmarks/rollout_tree.py [--env counter humaneval] [--strategy uniform] \
        [--leaves 8] [--roots 2] [--tasks 2] [--max-turns 6] [--max-tokens 16]

Both envs run the tiny local model (random weights: mostly malformed actions, so episodes tend to
run to the turn cap); HumanEval and RepoFix need Docker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.core import AgentEnv  # noqa: E402
from agentgym.rollout.agent import Agent, AgentConfig  # noqa: E402
from agentgym.rollout.chat import ChatFormat  # noqa: E402
from agentgym.rollout.policy import Completion, Policy, SamplingParams  # noqa: E402
from agentgym.rollout.trajectory import Trajectory  # noqa: E402
from agentgym.rollout.tree import STRATEGIES, TreeConfig, TreeRollout  # noqa: E402
from agentgym.rollout.tree_values import prefix_sharing_saving  # noqa: E402

ENVS = ("counter", "humaneval", "repofix")


async def measure_tree_vs_linear(
    env_factory: Callable[[], AgentEnv], agent: Agent, task_ids: Sequence[str], tree_config: TreeConfig
) -> dict:
    """Trees vs as many linear episodes as they have leaves, per task and in total (see the module docstring).

    ``env_factory`` builds a fresh env; every env built here is closed here. Returns
    ``{"tasks": [...], "total": {...}}`` with env steps, generated tokens, wall times, the
    measured and theoretical savings and measured/theoretical, for steps and for tokens.
    """
    rollout = TreeRollout(agent, tree_config)
    tasks = []
    for task_id in task_ids:
        env = env_factory()
        with counting_steps(type(env)) as tree_steps:
            try:
                started = time.perf_counter()
                tree = await rollout.run(env, task_id)
                tree_s = time.perf_counter() - started
            finally:
                await env.aclose()
        with counting_steps(type(env)) as linear_steps:
            started = time.perf_counter()
            linear = await _linear_episodes(env_factory, agent, task_id, len(tree.leaves), tree_config.concurrency)
            linear_s = time.perf_counter() - started
        tasks.append(
            {
                "task_id": task_id,
                "leaves": len(tree.leaves),
                # Costs as paid: steps counted at the envs (forks included), tokens as sampled
                # (duplicate siblings that were resampled away included).
                "tree_steps": tree_steps.count,
                "linear_steps": linear_steps.count,
                "tree_tokens": tree.metadata["generated_tokens"],
                "linear_tokens": sum(t.num_generated_tokens for t in linear),
                "tree_nodes": tree.num_env_steps,
                "tree_node_tokens": tree.num_generated_tokens,
                # The tree's shape replayed linearly: each leaf's path length, in steps and in tokens.
                "shape_linear_steps": sum(len(tree.path(leaf.id)) for leaf in tree.leaves),
                "shape_linear_tokens": sum(
                    len(n.turn.completion_ids) for leaf in tree.leaves for n in tree.path(leaf.id)
                ),
                "theoretical_step_saving": prefix_sharing_saving(tree),
                "theoretical_token_saving": prefix_sharing_saving(tree, "tokens"),
                "tree_s": round(tree_s, 3),
                "linear_s": round(linear_s, 3),
                "resamples": tree.metadata["resamples"],
            }
        )
    for row in tasks:
        row.update(_savings(row))
    total = {
        key: sum(row[key] for row in tasks)
        for key in (
            "leaves",
            "tree_steps",
            "linear_steps",
            "tree_tokens",
            "linear_tokens",
            "tree_nodes",
            "tree_node_tokens",
            "shape_linear_steps",
            "shape_linear_tokens",
            "tree_s",
            "linear_s",
            "resamples",
        )
    }
    total["task_id"] = "total"
    total["theoretical_step_saving"] = _saving(total["tree_nodes"], total["shape_linear_steps"])
    total["theoretical_token_saving"] = _saving(total["tree_node_tokens"], total["shape_linear_tokens"])
    total.update(_savings(total))
    return {"strategy": tree_config.strategy, "tasks": tasks, "total": total}


async def _linear_episodes(
    env_factory: Callable[[], AgentEnv], agent: Agent, task_id: str, count: int, concurrency: int
) -> list[Trajectory]:
    slots = asyncio.Semaphore(concurrency)

    async def one() -> Trajectory:
        async with slots:
            env = env_factory()
            try:
                return await agent.run(env, task_id)
            finally:
                await env.aclose()

    return list(await asyncio.gather(*(one() for _ in range(count))))


class counting_steps:
    """Counts ``step`` calls on every env of ``cls`` (forks are built as ``type(env)(...)``, so they count too)."""

    def __init__(self, cls: type[AgentEnv]):
        self.cls, self.count = cls, 0

    def __enter__(self) -> counting_steps:
        original = self.original = self.cls.step

        def step(env, action):
            self.count += 1
            return original(env, action)

        self.cls.step = step
        return self

    def __exit__(self, *exc) -> None:
        self.cls.step = self.original


def _saving(cost: float, linear_cost: float) -> float:
    return 1.0 - cost / linear_cost if linear_cost else 0.0


def _savings(row: dict) -> dict:
    steps = _saving(row["tree_steps"], row["linear_steps"])
    tokens = _saving(row["tree_tokens"], row["linear_tokens"])
    return {
        "measured_step_saving": steps,
        "measured_token_saving": tokens,
        "step_ratio": _ratio(steps, row["theoretical_step_saving"]),
        "token_ratio": _ratio(tokens, row["theoretical_token_saving"]),
        # What the tree paid against replaying its own leaves linearly: equals the theoretical
        # saving unless branching costs hidden steps or tokens (replays, discarded duplicates).
        "own_leaves_step_saving": _saving(row["tree_steps"], row["shape_linear_steps"]),
        "own_leaves_token_saving": _saving(row["tree_tokens"], row["shape_linear_tokens"]),
    }


def _ratio(measured: float, theoretical: float) -> float | None:
    return measured / theoretical if theoretical else None


def format_table(name: str, result: dict) -> str:
    """A Markdown table of a :func:`measure_tree_vs_linear` result."""
    lines = [
        f"### {name} ({result['strategy']})",
        "",
        "| task | leaves | env steps tree / linear | saving measured / theoretical (ratio) | saving vs own leaves "
        "| tokens tree / linear | saving measured / theoretical (ratio) | saving vs own leaves | wall s tree / linear |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    def ratio(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    for row in [*result["tasks"], result["total"]]:
        lines.append(
            f"| {row['task_id']} | {row['leaves']} | {row['tree_steps']} / {row['linear_steps']} "
            f"| {pct(row['measured_step_saving'])} / {pct(row['theoretical_step_saving'])} ({ratio(row['step_ratio'])}) "
            f"| {pct(row['own_leaves_step_saving'])} "
            f"| {row['tree_tokens']} / {row['linear_tokens']} "
            f"| {pct(row['measured_token_saving'])} / {pct(row['theoretical_token_saving'])} ({ratio(row['token_ratio'])}) "
            f"| {pct(row['own_leaves_token_saving'])} "
            f"| {row['tree_s']:.1f} / {row['linear_s']:.1f} |"
        )
    return "\n".join(lines)


class RandomValidActions(Policy):
    """CounterEnv's valid actions at random: ``add(1..10)``, or ``submit()`` with probability ``p_submit``.

    The tiny model's replies are nearly always malformed, so its episodes all run to the turn
    cap and a tree's paths are exactly as long as linear episodes. This sampler ends episodes at
    random depths, which is where measured and theoretical savings can differ.
    """

    name = "random-valid-actions"

    def __init__(self, p_submit: float = 0.2, seed: int = 0):
        from transformers import AutoTokenizer

        from agentgym.models import tiny_model_path

        self.chat_format = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_path()))
        self.p_submit = p_submit
        self.rng = random.Random(seed)

    async def generate(self, prompt_ids, sampling):
        if self.rng.random() < self.p_submit:
            call = {"name": "submit", "arguments": {}}
        else:
            call = {"name": "add", "arguments": {"n": self.rng.randint(1, 10)}}
        ids = self.chat_format.encode(f"<tool_call>{json.dumps(call)}</tool_call>") + [self.chat_format.eos_token_id]
        choices = 1 + 10  # submit or one of ten adds
        return Completion(
            text=self.chat_format.decode(ids),
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            entropy=math.log(choices),
            policy_version=self.version,
        )


async def _main(args: argparse.Namespace) -> None:
    from agentgym.models import tiny_model_path
    from agentgym.rollout.hf_policy import HFPolicy

    config = TreeConfig(
        strategy=args.strategy,
        roots=args.roots,
        max_leaves=args.leaves,
        branch_every=args.branch_every,
        branches=args.branches,
        concurrency=args.leaves,
    )
    policy = (
        RandomValidActions() if args.policy == "random-valid-actions" else HFPolicy(tiny_model_path(), device="cpu")
    )
    async with policy:
        agent = Agent(
            policy, AgentConfig(max_turns=args.max_turns, sampling=SamplingParams(max_tokens=args.max_tokens))
        )
        for name in args.env:
            if name == "counter":
                from tests.helpers.counter import CounterEnv

                factory, task_ids = CounterEnv, list(CounterEnv().task_ids())[: args.tasks]
            elif name == "humaneval":
                from agentgym.envs.code.humaneval import HumanEvalEnv, load_problems

                factory, task_ids = HumanEvalEnv, list(load_problems())[: args.tasks]
            else:
                from agentgym.envs.code.repofix import RepoFixEnv
                from agentgym.envs.code.repofix_tasks import load_tasks

                factory, task_ids = RepoFixEnv, [task["instance_id"] for task in load_tasks()][: args.tasks]
            result = await measure_tree_vs_linear(factory, agent, task_ids, config)
            print(format_table(f"{name}, {policy.name}", result) + "\n")
            print(json.dumps({"env": name, **result["total"]}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="+", choices=ENVS, default=["counter", "humaneval"])
    parser.add_argument("--strategy", choices=STRATEGIES, default="uniform")
    parser.add_argument("--leaves", type=int, default=8)
    parser.add_argument("--roots", type=int, default=2)
    parser.add_argument("--branch-every", type=int, default=2)
    parser.add_argument("--branches", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--policy",
        choices=["tiny", "random-valid-actions"],
        default="tiny",
        help="the tiny model, or random valid CounterEnv actions (episodes of varying length)",
    )
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
