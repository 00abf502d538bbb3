"""KeyChain, the built-in CPU training env: its tasks, its scripted solutions, its errors and its long-tailed latency."""

import random

import pytest

from agentgym.envs.tool.keychain import KEYS, KeyChainEnv, demonstration, make_task, task_ids
from tests.helpers.episodes import play


def test_tasks_are_reproducible_and_the_splits_never_meet():
    assert make_task("train-7") == make_task("train-7")
    train = {repr(sorted(make_task(t)["table"].items())) + make_task(t)["prompt"] for t in task_ids("train", 300)}
    heldout = {repr(sorted(make_task(t)["table"].items())) + make_task(t)["prompt"] for t in task_ids("heldout", 300)}
    assert not train & heldout
    with pytest.raises(ValueError, match="train-12"):
        make_task("test-1")


def test_a_chain_of_hops_ends_at_the_answer_and_every_key_has_an_entry():
    task = make_task("train-3", max_hops=4)
    assert set(task["table"]) == set(KEYS)
    key, hops = task["start"], 0
    while task["table"][key].startswith("see "):
        key, hops = task["table"][key][len('see "') : -1], hops + 1
    assert task["table"][key] == task["answer"] and hops + 1 == task["hops"]


@pytest.mark.parametrize("task_id", task_ids("train", 10) + task_ids("heldout", 10))
def test_the_demonstration_solves_the_task(task_id):
    env = KeyChainEnv(split=task_id.split("-")[0], num_tasks=10)
    env.reset(options={"task_id": task_id})
    replies = demonstration(make_task(task_id))
    assert len(replies) == make_task(task_id)["hops"] + 1
    _, reward, terminated, info = play(env, replies)
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.close()


def test_an_early_answering_demonstrator_submits_the_pointed_key_at_its_rate():
    two_hop = next(t for t in task_ids("train", 20) if make_task(t)["hops"] == 2)
    one_hop = next(t for t in task_ids("train", 20) if make_task(t)["hops"] == 1)
    task = make_task(two_hop)
    pointed = task["table"][task["start"]][len('see "') : -1]
    assert demonstration(task, mistake_rate=1.0, rng=random.Random(0)) == [
        f'lookup("{task["start"]}")',
        f'submit("{pointed}")',
    ]
    # a one-hop task has no pointer to stop at: the demonstration is the solution whatever the rate
    assert demonstration(make_task(one_hop), mistake_rate=1.0, rng=random.Random(0)) == demonstration(
        make_task(one_hop)
    )
    rng = random.Random(0)
    first_draw = random.Random(0).random()  # the same seed's first draw decides whether the first one stops
    assert (len(demonstration(task, mistake_rate=0.5, rng=rng)) == 2) == (first_draw < 0.5)
    stops = sum(len(demonstration(task, mistake_rate=0.25, rng=rng)) == 2 for _ in range(2000))
    assert 400 <= stops <= 600  # 500 expected; a binomial(2000, 0.25) is within ±100 far beyond 4 sigma
    with pytest.raises(ValueError, match="rng"):
        demonstration(task, mistake_rate=0.5)


def test_an_early_answer_scores_zero():
    two_hop = next(t for t in task_ids("train", 20) if make_task(t)["hops"] == 2)
    env = KeyChainEnv()
    env.reset(options={"task_id": two_hop})
    _, reward, terminated, info = play(env, demonstration(make_task(two_hop), 1.0, random.Random(0)))
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.close()


def test_a_wrong_number_scores_zero_and_an_unknown_key_is_an_error_observation():
    env = KeyChainEnv()
    env.reset(options={"task_id": "train-0"})
    observation, reward, terminated, _, info = env.step('lookup("walnut")')
    assert not terminated and reward == 0.0
    assert "walnut" in str(observation) and "amber" in str(observation)  # says which keys exist
    wrong = str((int(make_task("train-0")["answer"]) + 1) % 90 + 10)
    _, reward, terminated, info = play(env, [f'submit("{wrong}")'])
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.close()


def test_latency_is_long_tailed_drawn_per_episode_and_reproduced_by_the_reset_seed(monkeypatch):
    slept = []
    monkeypatch.setattr("agentgym.envs.tool.keychain.time.sleep", slept.append)  # records the draws instead of waiting
    env = KeyChainEnv(step_latency=0.1, max_turns=40)
    key = make_task("train-1")["start"]

    def episode(seed):
        slept.clear()
        env.reset(seed=seed, options={"task_id": "train-1"})
        for _ in range(30):
            env.step(f'lookup("{key}")')
        return list(slept)

    first, again, other = episode(1), episode(1), episode(2)
    assert first == again and first != other  # one task, different episodes; a seed reproduces one
    draws = first + other
    assert len(draws) == 60 and all(0 < d <= 0.1 * 20 for d in draws)
    assert max(draws) > 4 * sorted(draws)[30]  # a long tail: the slowest lookup is many medians
    env.close()
