"""Measures the text worlds TextWorldExpress and TextWorld: agentgym's per-step overhead over the package's own step loop, reset time, and fork vs replay at turns 10 and 30.

For each world, one task, interleaved repeats:

* **step overhead**: the task's gold path played through the package itself (``TextWorldExpressEnv``,
  ``textworld.start``) and through ``agentgym/text.*-v0``, each from a fresh reset; the time of the
  steps alone, median per step, and agentgym's added share; and, within the agentgym run, the time
  spent outside the engine's own ``step`` over the time inside it (agentgym's own share, which the
  machine's load does not blur as much as two separate runs);
* **reset**: ``env.reset`` of the task on a warm engine;
* **fork vs replay at turn N**: after N commands that do not end the game (``look``/``inventory``
  alternating), ``fork(snapshot)`` + ``close`` against a fresh env that resets and replays the N
  commands + ``close``. TextWorldExpress forks by replay in a warm JVM (the ratio is what the warm
  engine saves); TextWorld forks exactly (the z-machine's and TextWorld's tracker state, no replay).

Prints a Markdown table and a JSON line.

    .venv/bin/python benchmarks/text_worlds.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium  # noqa: E402

import agentgym  # noqa: E402, F401
from agentgym.envs.text import textworld as tw  # noqa: E402
from agentgym.envs.text import textworld_express as twx  # noqa: E402

warnings.filterwarnings("ignore", message=".*is not fully supported.*")


def twx_package_steps(task_id: str, actions: list[str]) -> float:
    fold, game, seed = twx.parse_task_id(task_id)
    engine = twx.engine_pool().acquire()
    try:
        engine.reset(seed=seed, gameFold=fold, gameName=game, gameParams="")
        start = time.perf_counter()
        for action in actions:
            engine.step(action)
        return time.perf_counter() - start
    finally:
        twx.engine_pool().release(engine)


def tw_package_steps(task_id: str, actions: list[str]) -> float:
    import textworld

    game = textworld.start(str(tw.game_file(*tw.parse_task_id(task_id))), textworld.EnvInfos(**tw.INFOS))
    try:
        game.reset()
        start = time.perf_counter()
        for action in actions:
            game.step(action)
        return time.perf_counter() - start
    finally:
        game.close()


def agentgym_steps(env, task_id: str, actions: list[str]) -> tuple[float, float, float]:
    """Reset time, the steps' time, and the part of it spent inside the engine's own ``step``."""
    start = time.perf_counter()
    env.reset(options={"task_id": task_id})
    reset = time.perf_counter() - start
    engine = env.unwrapped.engine
    inside = [0.0]

    def timed_step(command, _step=engine.step):  # instrumentation of this run only
        begin = time.perf_counter()
        try:
            return _step(command)
        finally:
            inside[0] += time.perf_counter() - begin

    engine.step = timed_step
    try:
        start = time.perf_counter()
        for action in actions:
            env.step(action)
        return reset, time.perf_counter() - start, inside[0]
    finally:
        del engine.step


def fork_and_replay(env_id: str, task_id: str, turns: int, fillers: list[str]) -> tuple[float, float]:
    commands = [fillers[i % 2] for i in range(turns)]
    env = gymnasium.make(env_id, max_turns=turns + 5)
    try:
        env.reset(options={"task_id": task_id})
        for command in commands:
            env.step(command)
        with env.unwrapped.snapshot() as snapshot:
            start = time.perf_counter()
            env.unwrapped.fork(snapshot).close()
            fork = time.perf_counter() - start
    finally:
        env.close()
    start = time.perf_counter()
    replay = gymnasium.make(env_id, max_turns=turns + 5)
    replay.reset(options={"task_id": task_id})
    for command in commands:
        replay.step(command)
    replay.close()
    return fork, time.perf_counter() - start


WORLDS = {
    # world: (env id, task, package step loop, gold path, commands that do not end the game)
    "textworld-express": (
        "agentgym/text.textworld-express-v0",
        "test/cookingworld/20000",
        twx_package_steps,
        lambda task: twx.gold_path(*twx.parse_task_id(task)),
        ["look around", "inventory"],
    ),
    "textworld": (
        "agentgym/text.textworld-v0",
        "train/cooking/0",
        tw_package_steps,
        lambda task: tw.walkthrough(*tw.parse_task_id(task)),
        ["look", "inventory"],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    results = {}
    for world, (env_id, task_id, package_steps, gold, fillers) in WORLDS.items():
        actions = gold(task_id)
        env = gymnasium.make(env_id)
        package_step, agentgym_step, own, resets, forks = [], [], [], [], {10: [], 30: []}
        replays: dict[int, list[float]] = {10: [], 30: []}
        agentgym_steps(env, task_id, actions)  # warm the engine
        for _ in range(args.repeats):  # interleaved: the same machine load falls on both sides
            package_step.append(package_steps(task_id, actions) / len(actions))
            reset, steps, inside = agentgym_steps(env, task_id, actions)
            resets.append(reset)
            agentgym_step.append(steps / len(actions))
            own.append((steps - inside) / inside)
            for turns in (10, 30):
                fork, replay = fork_and_replay(env_id, task_id, turns, fillers)
                forks[turns].append(fork)
                replays[turns].append(replay)
        env.close()
        ms = lambda samples: round(statistics.median(samples) * 1000, 2)  # noqa: E731
        results[world] = {
            "task": task_id,
            "gold_steps": len(actions),
            "package_step_ms": ms(package_step),
            "agentgym_step_ms": ms(agentgym_step),
            "overhead_pct": round(100 * (statistics.median(agentgym_step) / statistics.median(package_step) - 1), 1),
            "own_time_pct": round(100 * statistics.median(own), 1),
            "reset_ms": ms(resets),
            **{f"fork_t{t}_ms": ms(forks[t]) for t in (10, 30)},
            **{f"replay_t{t}_ms": ms(replays[t]) for t in (10, 30)},
        }
    print(
        "| world | task | package step ms | agentgym step ms | overhead | reset ms | fork/replay t10 ms | fork/replay t30 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for world, r in results.items():
        print(
            f"| {world} | {r['task']} | {r['package_step_ms']} | {r['agentgym_step_ms']} | {r['overhead_pct']}% | "
            f"{r['own_time_pct']}% | "
            f"{r['reset_ms']} | {r['fork_t10_ms']} / {r['replay_t10_ms']} | {r['fork_t30_ms']} / {r['replay_t30_ms']} |"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
