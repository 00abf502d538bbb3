"""A VLM agent on MiniWoB++ through ``agentgym serve``: screenshots (Set-of-Marks) go to a served vision-language model
as OpenAI ``image_url`` parts, through the real openai client.

The model is the tiny random-weight Qwen2-VL built offline (``tiny_vlm_path()``), so its actions are noise and its
reward is 0; pass a real VLM checkpoint (``--model``) for real runs, or point OpenAIPolicy at any vision endpoint.
Run: ``python examples/vlm_agent.py [--episodes 2] [--model PATH]``.
"""

import argparse
import asyncio
import io
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gymnasium
from PIL import Image

import agentgym  # noqa: F401  (registers the MiniWoB++ envs)
from agentgym.models import tiny_vlm_path
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.images import ImageConfig
from agentgym.rollout.openai_policy import OpenAIPolicy
from agentgym.rollout.policy import SamplingParams

ENV_ID = "agentgym/web.miniwob.click-button-v0"


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    """``agentgym serve`` on a free loopback port, once its /health answers; returns the process and its /v1 URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agentgym_cli = Path(sys.executable).with_name("agentgym")
    command = [str(agentgym_cli), "serve", "--model", model, "--served-model-name", "vlm", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"agentgym serve exited: {server.stderr.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as health:
                if json.load(health)["status"] == "ok":
                    return server, f"http://127.0.0.1:{port}/v1"
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("agentgym serve did not answer /health within 120 s") from None
            time.sleep(0.25)


async def run_episodes(base_url: str, episodes: int) -> list:
    policy = OpenAIPolicy(base_url, "vlm")  # the real openai client, chat mode
    config = AgentConfig(
        sampling=SamplingParams(max_tokens=24, temperature=1.0, seed=0),
        max_turns=2,
        mode="chat",
        images=ImageConfig(keep_last=1, max_side=160),  # the newest screenshot only, longer side 160 px, PNG
    )
    env = gymnasium.make(ENV_ID, set_of_marks=True)  # element ids drawn on the screenshot
    try:
        task_id = env.unwrapped.task_ids()[0]
        # MiniWoB tasks are generated from a seed: each episode is another instance of the task.
        return [await Agent(policy, config).run(env, task_id, seed=seed) for seed in range(episodes)]
    finally:
        env.close()
        await policy.aclose()


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description="A VLM agent on MiniWoB++ through agentgym serve.")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--model", default=None, help="a local VLM checkpoint (default: the tiny random Qwen2-VL)")
    args = parser.parse_args(argv)
    server, base_url = start_server(args.model or str(tiny_vlm_path()))
    try:
        trajectories = asyncio.run(run_episodes(base_url, args.episodes))
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    for trajectory in trajectories:
        print(
            f"{trajectory.task_id} (seed {trajectory.metadata.get('seed')}): reward {trajectory.reward} success {trajectory.success} error {trajectory.error}"
        )
        for i, turn in enumerate(trajectory.turns):
            sizes = ["{}x{}".format(*Image.open(io.BytesIO(trajectory.images[h])).size) for h in turn.image_hashes]
            usage = turn.usage or {}
            print(
                f"  turn {i}: images sent {sizes}, prompt tokens {usage.get('prompt_tokens')}, "
                f"completion tokens {usage.get('completion_tokens')}, action {turn.action[:60]!r}"
            )
    return trajectories


if __name__ == "__main__":
    main()
