"""`make demo`, part 2: the rollout engine end to end with the tiny local model — linear and tree rollouts on HumanEval, served over OpenAI's API, stored and exported.

1. the tiny model (a random-weight Qwen2 built offline) is served over OpenAI's API by the app
   `agentgym serve` runs (`make_app`, here on a loopback port of this process) and an
   `OpenAIPolicy` talks to it in token mode, as a trainer talks to vLLM;
2. the runner does 8 linear episodes at concurrency 4, then 2 contrast trees (TRACE-style
   allocation) on live, forked HumanEval sandboxes;
3. every record goes to a JSONL store that is read back and exported to a `datasets.Dataset`;
   the tree's node values and per-turn advantages are printed.

The model's weights are random, so it scores 0: this shows the machinery, not a trained agent.

    python examples/rollouts.py [--workdir /tmp/agentgym-rollouts]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import time
from pathlib import Path

import gymnasium
from aiohttp import web

import agentgym  # noqa: F401  (registers the envs)
from agentgym.models import tiny_model_path
from agentgym.rollout import (
    Agent,
    AgentConfig,
    EpisodeRequest,
    HFPolicy,
    OpenAIPolicy,
    Runner,
    RunnerConfig,
    SamplingParams,
    TrajectoryStore,
    TreeConfig,
    TreeRollout,
    make_app,
    node_values,
    turn_advantages,
)


async def demo(base_url: str, model: Path, workdir: Path) -> None:
    store = TrajectoryStore(workdir / "rollouts.jsonl")
    make_env = lambda: gymnasium.make("agentgym/code.humaneval-v0")  # noqa: E731
    async with OpenAIPolicy(base_url, "tiny", tokenizer=model) as policy:
        agent = Agent(policy, AgentConfig(max_turns=4, sampling=SamplingParams(max_tokens=48)))

        started = time.perf_counter()
        linear = await Runner(agent, make_env, RunnerConfig(concurrency=4, store=store)).run(
            [EpisodeRequest(f"HumanEval/{i % 4}", seed=i) for i in range(8)]
        )
        print(
            f"linear: {len(linear.records)} episodes, {linear.stats.env_steps} env steps, "
            f"{linear.stats.generated_tokens} tokens in {time.perf_counter() - started:.1f} s; "
            f"failures: {len(linear.failures)}"
        )

        tree_config = TreeConfig(strategy="contrast", roots=2, max_leaves=6)
        started = time.perf_counter()
        trees = await Runner(
            agent,
            make_env,
            RunnerConfig(concurrency=2, store=store),
            job=lambda agent, env, request: TreeRollout(agent, tree_config).run(env, request.task_id),
        ).run([EpisodeRequest("HumanEval/0"), EpisodeRequest("HumanEval/1")])
        for tree in trees.records:
            shared = sum(len(tree.path(leaf.id)) for leaf in tree.leaves)
            print(
                f"tree {tree.task_id}: {len(tree.leaves)} leaves, {tree.num_env_steps} env steps "
                f"({shared} if run linearly), branch points {tree.metadata['branch_points']}"
            )
        print(f"trees took {time.perf_counter() - started:.1f} s")

    tree = trees.records[0]
    print("node values:", [None if v is None else round(v, 3) for v in node_values(tree)])
    print("per-turn advantages (node − mean of its other siblings):", [round(a, 3) for a in turn_advantages(tree)])

    records = list(store.read())
    dataset = store.to_dataset()
    sequences = store.sequences_dataset()
    print(
        f"store: {len(records)} records read back from {store.path} ({store.path.stat().st_size // 1024} KiB); "
        f"dataset {dataset.num_rows} rows, training view {sequences.num_rows} sequences"
    )
    first = sequences[0]
    print(
        json.dumps(
            {"input_ids": len(first["input_ids"]), "model_tokens": sum(first["mask"]), "reward": first["reward"]}
        )
    )


async def serve_and_demo(model: Path, workdir: Path) -> None:
    """Serve ``model`` on a free loopback port (as `agentgym serve --model MODEL` would) and run the demo against it."""
    async with HFPolicy(model, max_batch_size=16) as policy:
        server = web.AppRunner(make_app(policy, "tiny"))
        await server.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(server, sock).start()
        try:
            await demo(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", model, workdir)
        finally:
            await server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentgym-rollouts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve_and_demo(tiny_model_path(), workdir))


if __name__ == "__main__":
    main()
