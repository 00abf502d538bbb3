"""Measures the rollout runner's throughput: episodes/s at several concurrency levels against a fixed-latency stub policy on CounterEnv.

The stub behaves like an inference server that is never the bottleneck: every call sleeps
``latency`` seconds (``asyncio.sleep``, so calls overlap) and returns the same tool call as
token ids. Each episode is ``turns`` calls long, so at concurrency c the ideal is c episodes
per ``turns × latency`` seconds (rounded up to whole waves); what is lost to that ideal is
overhead on the one event-loop thread. Every level runs the same number of episodes.

``--mode chat`` (the default) gives the stub no chat format, so the agent loop only appends
messages and the loss is the runner's own (scheduling, env steps in worker threads).
``--mode tokens`` adds the agent's token-mode work per turn (rendering the chat template and
tokenising the continuation with the tiny model's tokenizer), as in training.

    .venv/bin/python benchmarks/rollout_runner.py [--episodes 64] [--turns 3] [--latency 0.2] [--mode chat]

Prints a Markdown table and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.rollout.agent import Agent, AgentConfig  # noqa: E402
from agentgym.rollout.policy import Completion, Policy, SamplingParams  # noqa: E402
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig  # noqa: E402
from tests.helpers.counter import CounterEnv  # noqa: E402

REPLY = '<tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call>'


class LatencyStub(Policy):
    """Answers every call after ``latency`` seconds with the same tool call, as token ids.

    ``mode="tokens"`` uses the tiny model's tokenizer and chat template, so the agent loop does
    its real token-mode work (rendering continuations, exact prompt ids); ``mode="chat"`` has no
    chat format and isolates the runner's own overhead.
    """

    name = "latency-stub"

    def __init__(self, latency: float, mode: str = "chat"):
        self.latency = latency
        if mode == "tokens":
            from transformers import AutoTokenizer

            from agentgym.models import tiny_model_path
            from agentgym.rollout.chat import ChatFormat

            self.chat_format = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_path()))
            self.reply_ids = self.chat_format.encode(REPLY) + [self.chat_format.eos_token_id]
        elif mode == "chat":
            self.reply_ids = list(range(len(REPLY) // 4))  # stands in for a server's token ids
        else:
            raise ValueError(f"mode must be 'tokens' or 'chat', got {mode!r}")

    def _completion(self) -> Completion:
        return Completion(
            text=REPLY,
            token_ids=list(self.reply_ids),
            logprobs=[-0.5] * len(self.reply_ids),
            policy_version=self.version,
        )

    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(self.latency)
        return self._completion()

    async def chat(self, messages, tools, sampling):
        await asyncio.sleep(self.latency)
        return self._completion()


async def _episodes_per_second(policy: Policy, concurrency: int, episodes: int, turns: int) -> tuple[float, dict]:
    agent = Agent(policy, AgentConfig(sampling=SamplingParams(max_tokens=64)))
    runner = Runner(agent, lambda: CounterEnv(max_turns=turns), RunnerConfig(concurrency=concurrency, progress=False))
    tasks = [EpisodeRequest("reach-30", seed=i, repeat=i) for i in range(episodes)]
    started = time.perf_counter()
    result = await runner.run(tasks)
    elapsed = time.perf_counter() - started
    if len(result.records) != episodes or result.failures or any(len(r.turns) != turns for r in result.records):
        raise RuntimeError(f"the benchmark run went wrong: {len(result.records)} records, {result.failures[:3]}")
    return episodes / elapsed, {"env_steps": result.stats.env_steps, "wall_s": elapsed}


def measure_runner_throughput(
    concurrencies: tuple[int, ...] = (1, 8, 32),
    *,
    episodes: int = 64,
    turns: int = 3,
    latency: float = 0.2,
    mode: str = "chat",
) -> dict:
    """Episodes/s per concurrency level, the speed-up over concurrency 1, and the % of the ideal speed-up.

    The ideal speed-up at concurrency c is ``episodes / ceil(episodes / c)`` (whole waves of
    equal-length episodes). Returns ``{"settings": ..., "levels": [{"concurrency", "episodes_per_s",
    "speedup", "ideal_speedup", "efficiency_pct", "wall_s", "ideal_episodes_per_s"}, ...]}``.
    """
    policy = LatencyStub(latency, mode)
    levels = []
    for concurrency in concurrencies:
        rate, details = asyncio.run(_episodes_per_second(policy, concurrency, episodes, turns))
        levels.append(
            {
                "concurrency": concurrency,
                "episodes_per_s": rate,
                "wall_s": details["wall_s"],
                "ideal_episodes_per_s": episodes / (math.ceil(episodes / concurrency) * turns * latency),
            }
        )
    base = next((level["episodes_per_s"] for level in levels if level["concurrency"] == 1), None)
    for level in levels:
        ideal = episodes / math.ceil(episodes / level["concurrency"])
        speedup = level["episodes_per_s"] / base if base else None
        level.update(
            ideal_speedup=ideal, speedup=speedup, efficiency_pct=None if speedup is None else 100 * speedup / ideal
        )
    return {"settings": {"episodes": episodes, "turns": turns, "latency_s": latency, "mode": mode}, "levels": levels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per policy call")
    parser.add_argument("--mode", choices=("chat", "tokens"), default="chat")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    result = measure_runner_throughput(
        tuple(args.concurrency), episodes=args.episodes, turns=args.turns, latency=args.latency, mode=args.mode
    )
    settings = result["settings"]
    print(
        f"{settings['episodes']} episodes × {settings['turns']} turns, {settings['latency_s'] * 1000:g} ms per "
        f"policy call, {settings['mode']} mode\n"
    )
    print("| concurrency | episodes/s | ideal episodes/s | speed-up | ideal speed-up | % of ideal |")
    print("|---:|---:|---:|---:|---:|---:|")
    for level in result["levels"]:
        speedup = "n/a" if level["speedup"] is None else f"{level['speedup']:.1f}×"
        efficiency = "n/a" if level["efficiency_pct"] is None else f"{level['efficiency_pct']:.0f}%"
        print(
            f"| {level['concurrency']} | {level['episodes_per_s']:.2f} | {level['ideal_episodes_per_s']:.2f} | "
            f"{speedup} | {level['ideal_speedup']:.0f}× | {efficiency} |"
        )
    print()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
