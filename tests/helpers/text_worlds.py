"""Plays and checks the text-world tests share: an episode through agentgym, the random and mutated plays the
agreement tests compare with each package's own engine, the dawdling-demonstration check (TextWorld,
TextWorldExpress), and the replay families' (ScienceWorld, TextWorldExpress) fork and pooled-engine checks."""

import random

import gymnasium
import pytest

from agentgym.envs.text import jvm


def play_agentgym(env, task_id, actions):
    """Play ``actions`` after a reset onto ``task_id`` (None: on from where the episode is) until the episode ends:
    (reward, ended) per step, and the last step's info (the reset's when no step was played)."""
    info = {}
    if task_id is not None:
        _, info = env.reset(options={"task_id": task_id})
    results = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        results.append((reward, terminated or truncated))
        if terminated or truncated:
            break
    return results, info


def random_walk(env, task_id, rng, steps=20):
    """Up to ``steps`` commands from a reset onto ``task_id``, each drawn from the valid actions at that point."""
    _, info = env.reset(options={"task_id": task_id})
    walk = []
    for _ in range(steps):
        walk.append(rng.choice(info["valid_actions"]))
        _, _, terminated, truncated, info = env.step(walk[-1])
        if terminated or truncated:
            break
    return walk


def plays(gold, walk, rng):
    """The gold path, a random walk, and the gold path with a step dropped, two neighbours swapped, a step repeated."""
    i = rng.randrange(len(gold) - 1)
    swapped = list(gold)
    swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
    return {
        "gold": gold,
        "random": walk,
        "dropped": gold[:i] + gold[i + 1 :],
        "swapped": swapped,
        "repeated": gold[: i + 1] + gold[i:],
    }


def check_dawdling_demonstration(make_env, task_id, gold, idle):
    """A demonstration of ``task_id`` is the ``gold`` path; with a mistake rate, ``idle`` commands before some of its
    steps and nothing else (every step still played, in order, from the state it was made for), and that dawdling
    play still wins; a mistake rate without an rng is refused."""
    env = make_env(tasks=[task_id], max_turns=100)
    try:
        assert env.demonstration_replies(task_id) == gold
        noisy = env.demonstration_replies(task_id, 0.5, random.Random(0))
        added = len(noisy) - len(gold)
        assert 0 < added < len(gold) and noisy.count(idle) - gold.count(idle) == added
        rest = iter(noisy)
        assert all(any(step == reply for reply in rest) for step in gold)
        results, info = play_agentgym(env, task_id, noisy)
        assert len(results) == len(noisy) and info["success"]
        with pytest.raises(ValueError, match="needs an rng"):
            env.demonstration_replies(task_id, 0.5)
    finally:
        env.close()


def check_spam_scores_nothing(env, replies, turns):
    """Replies that look at the world or print a win (``replies``, cycled) until the episode is cut at ``turns``:
    no reward, no success, truncated rather than ended."""
    try:
        env.reset()
        total = 0.0
        for reply in replies * turns:
            _, reward, terminated, truncated, info = env.step(reply)
            total += reward
            if terminated or truncated:
                break
        assert truncated and not terminated and total == 0.0 and not info["success"] and info["turn"] == turns
    finally:
        env.close()


def check_fork_equals_replay(env, task_id, gold, cut):
    """Fork ``env`` after ``gold[:cut]`` and replay that in a new env of its id: the fork, the replay and ``env`` play
    ``look around``, ``inventory`` and the rest of the gold path alike, to success."""
    env.reset(options={"task_id": task_id})
    for action in gold[:cut]:
        env.step(action)
    with env.unwrapped.snapshot() as snapshot:
        fork = env.unwrapped.fork(snapshot)
    replay = gymnasium.make(env.spec.id)
    try:
        replay.reset(options={"task_id": task_id})
        for action in gold[:cut]:
            replay.step(action)
        continuation = ["look around", "inventory", *gold[cut:]]
        runs = [[branch.step(action) for action in continuation] for branch in (fork, replay, env)]
        assert runs[0] == runs[1] == runs[2] and runs[0][-1][4]["success"]
    finally:
        fork.close()
        replay.close()


def check_engines_are_reused(make_env, tasks):
    """A JVM env keeps its engine across resets, and the next env takes it from the pool once the first is closed,
    starting none."""
    first = make_env(tasks=tasks)
    first.reset(options={"task_id": tasks[0]})
    engine = first.engine
    first.reset(options={"task_id": tasks[1]})
    assert first.engine is engine
    first.close()
    pool = first.engine_pool()
    started = pool.started
    second = make_env(tasks=tasks)
    try:
        second.reset(options={"task_id": tasks[0]})
        assert second.engine is engine and pool.started == started
    finally:
        second.close()


def kill_the_jvm_then_reset(env, task_id):
    """Kill the JVM under ``env`` mid-episode: the next step is an env error (truncated, no reward) and the next reset
    plays on a new JVM; returns that reset's observation."""
    env.reset(options={"task_id": task_id})
    process = env.unwrapped.engine._gateway.java_process
    process.kill()
    process.wait()
    _, reward, terminated, truncated, info = env.step("look around")
    assert info["env_error"] and truncated and not terminated and reward == 0.0
    observation, _ = env.reset(options={"task_id": task_id})
    assert jvm.alive(env.unwrapped.engine) and env.unwrapped.engine._gateway.java_process is not process
    return observation
