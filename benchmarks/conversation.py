"""Measures the τ²-bench envs: step overhead against τ²'s own environment calls, and fork against replay at turn 10.

Step overhead: the agent's reference tool calls of retail tasks, each once through
``Tau2Env.step`` (the reply as text: parsing, τ²'s ``Environment.get_response`` on the env's
copy-on-access database, τ²'s message records, the step's info) and once as τ²'s own call
(``get_response`` on the environment τ²'s constructor builds, at the same state, plus the
``AssistantMessage``/``ToolMessage`` records τ²'s orchestrator keeps), interleaved call by call
(alternating which goes first), so the two see the same load. Target: the env adds at most 10% (of the total; the p50 ratio is
printed too, since a garbage collection of the whole heap lands on a few calls of either side).

Fork vs replay: a retail episode played to turn 10 (reads and one write), then ``fork()`` (a
pickled copy of the conversation, the user's state and the database records the episode
changed) against a replay (``reset`` + the same 10 replies in a fresh env), alternated.

Each of ``--rounds`` rounds prints a row; the last rows are the medians over rounds.

    .venv/bin/python benchmarks/conversation.py [--tasks 30] [--repeats 15] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import summary  # noqa: E402

from agentgym.envs.conversation.tau2 import Tau2Env, tau2_environment, tau2_reference_replies  # noqa: E402
from agentgym.task import call_text  # noqa: E402


def step_overhead(env: Tau2Env, tasks: int) -> dict:
    from tau2.data_model.message import AssistantMessage, ToolCall

    # τ²'s own environment, as its constructor builds it (plain dicts of pydantic records), unpickled per task.
    plain = pickle.dumps(tau2_environment(env.domain)(), protocol=pickle.HIGHEST_PROTOCOL)
    ours, theirs = [], []
    for task_id in env.task_ids()[:tasks]:
        task = env.tau2_task(task_id)
        calls = [a for a in task.evaluation_criteria.actions or [] if a.requestor == "assistant"]
        env.reset(options={"task_id": task_id})
        direct = pickle.loads(plain)  # τ²'s environment at the task's start (these tasks have no initial state)
        records: list = []
        for index, action in enumerate(calls):
            reply = call_text(action.name, action.arguments)
            call = ToolCall(
                id=f"call_{index}", name=action.name, arguments=dict(action.arguments), requestor="assistant"
            )

            def tau2_call(call=call) -> None:
                records.append(AssistantMessage(role="assistant", tool_calls=[call]))
                records.append(direct.get_response(call))

            # Alternating which side goes first: the first to read a record pays for the cold cache.
            for side in ("ours", "theirs") if index % 2 == 0 else ("theirs", "ours"):
                started = time.perf_counter()
                env.step(reply) if side == "ours" else tau2_call()
                (ours if side == "ours" else theirs).append(time.perf_counter() - started)
    total_ours, total_theirs = sum(ours), sum(theirs)
    return {
        "calls": len(ours),
        "env_step_ms": summary([t * 1000 for t in ours]),
        "tau2_call_ms": summary([t * 1000 for t in theirs]),
        "added": total_ours / total_theirs - 1,
        "added_p50": statistics.median(ours) / statistics.median(theirs) - 1,
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
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    env = Tau2Env("retail")
    env.reset(options={"task_id": env.task_ids()[0]})  # warm: imports, the domain's parsed database
    print(
        "| round | step p50 / p95 ms: agentgym | τ² | added (total / p50) | turn 10: fork | replay p50 ms | speedup |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    rounds = []
    for index in range(args.rounds):
        overhead = step_overhead(env, args.tasks)
        forking = fork_vs_replay(args.repeats)
        rounds.append({"step_overhead": overhead, "fork_vs_replay": forking})
        step, call = overhead["env_step_ms"], overhead["tau2_call_ms"]
        fork, replay = forking["fork_ms"], forking["replay_ms"]
        print(
            f"| {index + 1} ({overhead['calls']} calls) | {step['p50']:.3f} / {step['p95']:.3f} "
            f"| {call['p50']:.3f} / {call['p95']:.3f} | {overhead['added']:+.1%} / {overhead['added_p50']:+.1%} "
            f"| {fork['p50']:.2f} | {replay['p50']:.2f} | {forking['speedup_p50']:.1f}x |"
        )
    env.close()

    def median(get) -> float:
        return statistics.median(get(r) for r in rounds)

    print(
        f"| median | | | {median(lambda r: r['step_overhead']['added']):+.1%} / "
        f"{median(lambda r: r['step_overhead']['added_p50']):+.1%} "
        f"| {median(lambda r: r['fork_vs_replay']['fork_ms']['p50']):.2f} "
        f"| {median(lambda r: r['fork_vs_replay']['replay_ms']['p50']):.2f} "
        f"| {median(lambda r: r['fork_vs_replay']['speedup_p50']):.1f}x |"
    )
    print(json.dumps(rounds))


if __name__ == "__main__":
    main()
