"""Measures code.agentbench-os-v0: reset per kind of task (a match, a comparison whose expected answer comes from a
twin container, a check), grading per kind, and fork vs replay at turns 10 and 30.

Interleaved repeats on the warm pool of one process:

* **reset**: ``env.reset`` of ``dev/0`` (a match with a start program), ``test/27`` (a comparison: the set-up, a
  commit, a twin that runs the example) and ``test/31`` (a check);
* **grade**: the step that ends the episode with the reference solution's last action (host comparison for a
  match or comparison; for a check: the engine's diff and a commit with the container frozen, the check in a twin
  container started from it);
* **fork vs replay at turn N** (``test/31``): after N shell commands that write files, ``fork()`` + ``close``
  against a fresh env that resets and replays the N commands + ``close``.

Prints a Markdown table and a JSON line.

    .venv/bin/python benchmarks/agentbench_os.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium  # noqa: E402

import agentgym  # noqa: E402, F401
from agentgym.task import call_text, resolve_step  # noqa: E402
from benchmarks.timing import summary, timed  # noqa: E402

ENV_ID = "agentgym/code.agentbench-os-v0"
RESETS = {"match": "dev/0", "compare": "test/27", "check": "test/31"}
FORK_TASK = "test/31"


def prefix(turns: int) -> list[str]:
    return [
        call_text("bash", {"command": f"mkdir -p work && echo {turn} > work/{turn}.txt && ls work | wc -l"})
        for turn in range(turns)
    ]


def play(env, task_id: str, actions: list[str]) -> None:
    env.reset(options={"task_id": task_id})
    for action in actions:
        env.step(action)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = gymnasium.make(ENV_ID)
    tasks = {task.id: task for task in env.unwrapped.tasks()}
    resets: dict[str, list[float]] = {kind: [] for kind in RESETS}
    grades: dict[str, list[float]] = {kind: [] for kind in RESETS}
    forks: dict[int, list[float]] = {10: [], 30: []}
    replays: dict[int, list[float]] = {10: [], 30: []}
    try:
        for _ in range(args.repeats):
            for kind, task_id in RESETS.items():
                milliseconds, (observation, _info) = timed(lambda: env.reset(options={"task_id": task_id}))
                resets[kind].append(milliseconds)
                steps = tasks[task_id].reference_solution() or []
                for step in steps[:-1]:
                    observation = env.step(resolve_step(step, observation["text"]))[0]
                last = resolve_step(steps[-1], observation["text"])
                milliseconds, result = timed(lambda: env.step(last))
                assert result[1] == 1.0, result[0]["text"]
                grades[kind].append(milliseconds)
            for turns in forks:
                play(env, FORK_TASK, prefix(turns))
                forks[turns].append(timed(lambda: env.unwrapped.fork().close())[0])
                replayed = gymnasium.make(ENV_ID)
                try:
                    replays[turns].append(timed(lambda: play(replayed, FORK_TASK, prefix(turns)))[0])
                finally:
                    replayed.close()
    finally:
        env.close()
    results = {
        "reset_ms": {kind: summary(samples) for kind, samples in resets.items()},
        "grade_ms": {kind: summary(samples) for kind, samples in grades.items()},
        "fork_ms": {turns: summary(samples) for turns, samples in forks.items()},
        "replay_ms": {turns: summary(samples) for turns, samples in replays.items()},
    }
    print("| measure | p50 ms | p95 ms |\n|---|---|---|")
    for kind in RESETS:
        for name in ("reset", "grade"):
            row = results[f"{name}_ms"][kind]
            print(f"| {name}, {kind} ({RESETS[kind]}) | {row['p50']:.0f} | {row['p95']:.0f} |")
    for turns in forks:
        fork, replay = results["fork_ms"][turns], results["replay_ms"][turns]
        print(f"| fork, turn {turns} | {fork['p50']:.0f} | {fork['p95']:.0f} |")
        print(f"| replay, turn {turns} | {replay['p50']:.0f} | {replay['p95']:.0f} |")
        print(f"| replay ÷ fork, turn {turns} | {replay['p50'] / fork['p50']:.1f}× | |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
