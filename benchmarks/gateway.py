"""Measures the gateway: the time it adds per model call over calling the same backend directly, and episodes/s of agent programs.

**Overhead per call.** One backend (the scripted policy on the tiny model's tokenizer and chat
template: replies cost no sampling, so what is timed is the server) is served twice, by
``agentgym serve``'s app (:func:`agentgym.serve.make_app`: "the backend directly", already over HTTP
and the chat template) and by the gateway (which also checks the session, splices the sampled ids
into the prompt and records the call). A multi-turn conversation (each call appends the reply
and a tool result, ``--turns`` calls) is sent to each, interleaved call by call, from one aiohttp
client; the overhead is the p50 of (gateway − direct) over the calls (and per call position). Target: p50 ≤ 2 ms added.

**Episodes/s.** KeyChain episodes of an unmodified program on the `openai` client + the `mcp`
client (tests/helpers/gateway_programs.py: its tools over the gateway's MCP server, 4–5 model
calls and 3–4 tool calls each) with 1, 8 and 32 programs at once on one gateway.

    .venv/bin/python benchmarks/gateway.py [--turns 8] [--conversations 30] [--episodes 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import percentiles  # noqa: E402

from agentgym.envs.tool.keychain import KeyChainEnv  # noqa: E402
from agentgym.gateway import Gateway, SessionLimits, run_episode  # noqa: E402
from agentgym.serve import make_app  # noqa: E402
from agentgym.task import call_text  # noqa: E402
from tests.helpers import gateway_programs  # noqa: E402
from tests.helpers.scripted import ScriptedPolicy  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
]


async def _post(http, url: str, key: str, body: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as answer:
        data = await answer.json()
        assert answer.status == 200, data
    return (time.perf_counter() - started) * 1000, data


async def overhead(turns: int, conversations: int) -> dict:
    import aiohttp
    from aiohttp import web

    policy = ScriptedPolicy([call_text("lookup", {"key": "amber"})])
    runner = web.AppRunner(make_app(policy, "policy"), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    direct = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
    gaps, direct_ms, gateway_ms = [], [], []
    by_turn: dict[int, list[float]] = {}
    async with Gateway(policy, limits=SessionLimits(max_calls=turns + 1)) as gateway, aiohttp.ClientSession() as http:
        through = gateway.base_url + "/chat/completions"
        for c in range(conversations + 2):  # the first two warm both servers up and are not counted
            session = gateway.open_session("bench")
            messages: list[dict] = [{"role": "user", "content": f"Follow the keys from amber ({c})."}]
            for turn in range(turns):
                body = {"model": "policy", "messages": messages, "tools": TOOLS, "max_tokens": 64}
                # Interleaved, alternating which goes first, so load drifts hit both alike.
                order = [(direct, "direct"), (through, session.key)]
                if (c + turn) % 2:
                    order.reverse()
                timings = {}
                for url, key in order:
                    timings[url], data = await _post(http, url, key, body)
                reply = data["choices"][0]["message"]
                messages = messages + [reply]
                messages.append({"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "amber: 42"})
                if c >= 2:
                    direct_ms.append(timings[direct])
                    gateway_ms.append(timings[through])
                    gaps.append(timings[through] - timings[direct])
                    by_turn.setdefault(turn, []).append(timings[through] - timings[direct])
            assert session.not_appended == 0
            gateway.close_session(session)
    await runner.cleanup()
    return {
        "calls": len(gaps),
        "direct_p50_ms": statistics.median(direct_ms),
        "gateway_p50_ms": statistics.median(gateway_ms),
        "added_p50_ms": statistics.median(gaps),
        "added_p95_ms": percentiles(gaps)[1],
        "added_p50_ms_by_turn": [round(statistics.median(by_turn[t]), 3) for t in sorted(by_turn)],
    }


async def throughput(concurrency: int, episodes: int) -> dict:
    policy = ScriptedPolicy(gateway_programs.keychain_replies)
    envs = [KeyChainEnv() for _ in range(concurrency)]
    queue = list(range(episodes))
    results = []

    async with Gateway(policy) as gateway:

        async def worker(env) -> None:
            while queue:
                i = queue.pop()
                results.append(
                    await run_episode(
                        gateway, env, gateway_programs.openai_program, task_id=f"train-{i % 200}", timeout=120
                    )
                )

        started = time.perf_counter()
        await asyncio.gather(*(worker(env) for env in envs))
        wall = time.perf_counter() - started
    for env in envs:
        env.close()
    return {
        "concurrency": concurrency,
        "episodes": len(results),
        "solved": sum(r.success for r in results),
        "episodes_per_s": len(results) / wall,
        "calls_per_s": sum(len(r.turns) for r in results) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--concurrency", default="1,8,32")
    args = parser.parse_args()
    cost = asyncio.run(overhead(args.turns, args.conversations))
    print("| per call (multi-turn, tools) | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| backend directly (`agentgym serve`'s app) | {cost['direct_p50_ms']:.2f} | |")
    print(f"| through the gateway | {cost['gateway_p50_ms']:.2f} | |")
    print(f"| **added by the gateway** | **{cost['added_p50_ms']:.2f}** | {cost['added_p95_ms']:.2f} |")
    print(f"added p50 by call position in the conversation (ms): {cost['added_p50_ms_by_turn']}")
    rates = [asyncio.run(throughput(int(n), args.episodes)) for n in args.concurrency.split(",")]
    print("\n| programs at once | episodes | solved | episodes/s | model calls/s |\n|---:|---:|---:|---:|---:|")
    for r in rates:
        print(
            f"| {r['concurrency']} | {r['episodes']} | {r['solved']} | {r['episodes_per_s']:.1f} | {r['calls_per_s']:.1f} |"
        )
    print(json.dumps({"overhead": cost, "throughput": rates}))


if __name__ == "__main__":
    main()
