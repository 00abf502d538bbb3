"""Measures the τ²-bench envs: step overhead against τ²'s own environment calls, and fork against replay at turn 10.

Step overhead: the agent's reference tool calls of retail tasks, each once through
``Tau2Env.step`` (the reply as text: parsing, τ²'s ``Environment.get_response``, τ²'s message
records, the step's info) and once as τ²'s own call (``get_response`` on a τ² environment at the
same state, plus the ``AssistantMessage``/``ToolMessage`` records τ²'s orchestrator keeps),
interleaved call by call, so the two see the same load. Target: the env adds at most 10%.

Fork vs replay: a retail episode played to turn 10 (reads and one write), then ``fork()`` (a
pickled copy of τ²'s environment, the conversation and the user's state) against a replay
(``reset`` + the same 10 replies in a fresh env), alternated.

    .venv/bin/python benchmarks/conversation.py [--tasks 30] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import summary  # noqa: E402

from agentgym.envs.conversation.tau2 import Tau2Env, tau2_reference_replies  # noqa: E402
from agentgym.task import call_text  # noqa: E402


def step_overhead(env: Tau2Env, tasks: int) -> dict:
    from tau2.data_model.message import AssistantMessage, ToolCall

    ours, theirs = [], []
    for task_id in env.task_ids()[:tasks]:
        task = env.tau2_task(task_id)
        calls = [a for a in task.evaluation_criteria.actions or [] if a.requestor == "assistant"]
        env.reset(options={"task_id": task_id})
        direct = env._constructor()  # τ²'s environment at the task's start (these tasks have no initial state)
        records: list = []
        for index, action in enumerate(calls):
            reply = call_text(action.name, action.arguments)
            started = time.perf_counter()
            env.step(reply)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            call = ToolCall(
                id=f"call_{index}", name=action.name, arguments=dict(action.arguments), requestor="assistant"
            )
            records.append(AssistantMessage(role="assistant", tool_calls=[call]))
            records.append(direct.get_response(call))
            theirs.append(time.perf_counter() - started)
    total_ours, total_theirs = sum(ours), sum(theirs)
    return {
        "calls": len(ours),
        "env_step_ms": summary([t * 1000 for t in ours]),
        "tau2_call_ms": summary([t * 1000 for t in theirs]),
        "added": total_ours / total_theirs - 1,
    }


def fork_vs_replay(repeats: int, turns: int = 10) -> dict:
    env = Tau2Env("retail", tasks=["2"])
    reference = tau2_reference_replies(env.tau2_task("2"))
    calls = [reply for reply in reference if reply.startswith("<tool_call>")]
    # Turn 10: the reference's calls, then reads of the same order to make up ten turns.
    replies = (calls + [calls[1]] * turns)[:turns]
    env.reset(options={"task_id": "2"})
    for reply in replies:
        env.step(reply)
    forks, replays = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        child = env.fork()
        forks.append(time.perf_counter() - started)
        child.close()
        started = time.perf_counter()
        replay = Tau2Env("retail", tasks=["2"])
        replay.reset(options={"task_id": "2"})
        for reply in replies:
            replay.step(reply)
        replays.append(time.perf_counter() - started)
        replay.close()
    env.close()
    fork_ms, replay_ms = summary([t * 1000 for t in forks]), summary([t * 1000 for t in replays])
    return {"turn": turns, "fork_ms": fork_ms, "replay_ms": replay_ms, "speedup_p50": replay_ms["p50"] / fork_ms["p50"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    env = Tau2Env("retail")
    env.reset(options={"task_id": env.task_ids()[0]})  # warm: imports, the pristine environment's pickle
    overhead = step_overhead(env, args.tasks)
    env.close()
    forking = fork_vs_replay(args.repeats)
    step, call = overhead["env_step_ms"], overhead["tau2_call_ms"]
    print("| measure | agentgym | τ² | ratio |\n|---|---:|---:|---:|")
    print(
        f"| tool-call step p50 / p95 ms ({overhead['calls']} calls) | {step['p50']:.2f} / {step['p95']:.2f} "
        f"| {call['p50']:.2f} / {call['p95']:.2f} | +{overhead['added']:.1%} total |"
    )
    fork, replay = forking["fork_ms"], forking["replay_ms"]
    print(
        f"| turn 10: fork vs replay p50 / p95 ms | {fork['p50']:.1f} / {fork['p95']:.1f} "
        f"| {replay['p50']:.1f} / {replay['p95']:.1f} (replay) | {forking['speedup_p50']:.1f}x |"
    )
    print(json.dumps({"step_overhead": overhead, "fork_vs_replay": forking}))


if __name__ == "__main__":
    main()
