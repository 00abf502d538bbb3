"""`make demo`, part 2: the rollout engine end to end with the tiny local model — linear and tree rollouts on HumanEval, served over OpenAI's API, stored and exported.

1. `agentgym serve` is started on the tiny model (a random-weight Qwen2 built offline) and an
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
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import gymnasium

import agentgym  # noqa: F401  (registers the envs)
from agentgym.models import tiny_model_path
from agentgym.rollout import (Agent, AgentConfig, OpenAIPolicy, Runner, RunnerConfig, SamplingParams, Task,
                              TrajectoryStore, TreeConfig, TreeRollout, node_values, turn_advantages)


def start_server(model: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agentgym_cli = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen([str(agentgym_cli), "serve", "--model", str(model), "--port", str(port),
                                "--served-model-name", "tiny"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return process, f"http://127.0.0.1:{port}/v1"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("agentgym serve did not start")
            time.sleep(0.25)


async def demo(base_url: str, model: Path, workdir: Path) -> None:
    store = TrajectoryStore(workdir / "rollouts.jsonl")
    make_env = lambda: gymnasium.make("agentgym/HumanEval-v0")  # noqa: E731
    async with OpenAIPolicy(base_url, "tiny", tokenizer=model) as policy:
        agent = Agent(policy, AgentConfig(max_turns=4, sampling=SamplingParams(max_tokens=48)))

        started = time.perf_counter()
        linear = await Runner(agent, make_env, RunnerConfig(concurrency=4, store=store)).run(
            [Task(f"HumanEval/{i % 4}", seed=i) for i in range(8)])
        print(f"linear: {len(linear.records)} episodes, {linear.stats.env_steps} env steps, "
              f"{linear.stats.generated_tokens} tokens in {time.perf_counter() - started:.1f} s; "
              f"failures: {len(linear.failures)}")

        tree_config = TreeConfig(strategy="contrast", roots=2, max_leaves=6)
        started = time.perf_counter()
        trees = await Runner(agent, make_env, RunnerConfig(concurrency=2, store=store),
                             job=lambda agent, env, task: TreeRollout(agent, tree_config).run(env, task.task_id)
                             ).run([Task("HumanEval/0"), Task("HumanEval/1")])
        for tree in trees.records:
            shared = sum(len(tree.path(leaf.id)) for leaf in tree.leaves)
            print(f"tree {tree.task_id}: {len(tree.leaves)} leaves, {tree.num_env_steps} env steps "
                  f"({shared} if run linearly), branch points {tree.metadata['branch_points']}")
        print(f"trees took {time.perf_counter() - started:.1f} s")

    tree = trees.records[0]
    print("node values:", [round(v, 3) for v in node_values(tree)])
    print("per-turn advantages (node − parent):", [round(a, 3) for a in turn_advantages(tree)])

    records = list(store.read())
    dataset = store.to_dataset()
    sequences = store.sequences_dataset()
    print(f"store: {len(records)} records read back from {store.path} ({store.path.stat().st_size // 1024} KiB); "
          f"dataset {dataset.num_rows} rows, training view {sequences.num_rows} sequences")
    first = sequences[0]
    print(json.dumps({"input_ids": len(first["input_ids"]), "model_tokens": sum(first["mask"]),
                      "reward": first["reward"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentgym-rollouts-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model = tiny_model_path()
    process, base_url = start_server(model)
    try:
        asyncio.run(demo(base_url, model, workdir))
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
