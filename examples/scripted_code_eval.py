"""`make demo`: evaluate scripted policies on the code envs and show mid-episode branching (until the trainer lands).

Two scripted policies bracket what a model can score: `reference` writes the task's known
solution (HumanEval's canonical body, RepoFix's gold patch) through the same tools a model
uses, tests it, and submits; `give-up` submits at once. Then one episode is branched: a
snapshot after the first turn is forked twice and each branch continues with a different
policy, as tree rollouts will do.

    python examples/scripted_code_eval.py --limit 10
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium

import agentgym  # noqa: F401  (registers the envs)
from agentgym.task import call_text


def call(name: str, **arguments) -> str:
    return call_text(name, arguments)


def reference_actions(env, task_id: str) -> list[str]:
    """The task's reference solution (``env.tasks()``), as the oracle policy plays it."""
    return next(task for task in env.unwrapped.tasks() if task.id == task_id).reference_solution()


def give_up_actions(env, task_id: str) -> list[str]:
    return [call("submit")]


POLICIES = {"reference": reference_actions, "give-up": give_up_actions}


def run_episode(env, task_id: str, actions: list[str]) -> tuple[float, int]:
    env.reset(options={"task_id": task_id})
    reward, turns = 0.0, 0
    for action in actions:
        _, reward, terminated, truncated, _ = env.step(action)
        turns += 1
        if terminated or truncated:
            break
    return reward, turns


def evaluate(env_id: str, limit: int) -> list[dict]:
    rows = []
    env = gymnasium.make(env_id)
    try:
        task_ids = env.unwrapped.task_ids()[:limit]
        for name, policy in POLICIES.items():
            started = time.perf_counter()
            results = [run_episode(env, t, policy(env, t)) for t in task_ids]
            rows.append(
                {
                    "env": env_id,
                    "policy": name,
                    "tasks": len(task_ids),
                    "success": sum(r for r, _ in results) / len(results),
                    "mean_turns": statistics.mean(t for _, t in results),
                    "seconds_per_episode": (time.perf_counter() - started) / len(results),
                }
            )
    finally:
        env.close()
    return rows


def branching_demo() -> None:
    env = gymnasium.make("agentgym/code.repofix-v0")
    task_id = env.unwrapped.task_ids()[0]
    try:
        env.reset(options={"task_id": task_id})
        env.step(call("bash", command="git log --oneline | head -1"))
        with env.snapshot() as snap:
            print(f"\nBranching {task_id} at turn {snap.turn} (snapshot image {snap.metadata['image'][:19]}):")
            for name, policy in POLICIES.items():
                started = time.perf_counter()
                branch = env.fork(snap)
                fork_ms = (time.perf_counter() - started) * 1000
                try:
                    for action in policy(env, task_id):
                        _, reward, terminated, truncated, info = branch.step(action)
                        if terminated or truncated:
                            break
                    print(
                        f"  branch {name:10} fork() returned in {fork_ms:4.0f} ms (its container starts in the "
                        f"background) -> reward {reward}, turn {info['turn']}"
                    )
                finally:
                    branch.close()
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=10, help="tasks per env")
    args = parser.parse_args()
    rows = [
        row
        for env_id in ("agentgym/code.humaneval-v0", "agentgym/code.repofix-v0")
        for row in evaluate(env_id, args.limit)
    ]
    print(f"{'env':24} {'policy':10} {'tasks':>5} {'success':>8} {'turns':>6} {'s/episode':>10}")
    for r in rows:
        print(
            f"{r['env']:24} {r['policy']:10} {r['tasks']:5d} {r['success']:8.2f} {r['mean_turns']:6.1f} "
            f"{r['seconds_per_episode']:10.2f}"
        )
    branching_demo()


if __name__ == "__main__":
    main()
