"""BabyAI as text: rewards agree with minigrid driven directly (gold, random, mutated plays), forks equal replays, hacks score nothing."""

import random

import gymnasium
import pytest

from agentgym.envs.text.babyai import ACTIONS, BabyAIEnv, bot_actions, describe, make_level, parse_task_id
from agentgym.task import call_text

# A few tasks per level kind in the default run; the slow sweep below covers every default level and split.
TASKS = ["test/GoToLocal/0", "dev/PickupLoc/1", "test/PutNextLocal/2", "train/Unlock/3", "test/SynthLoc/4"]


@pytest.fixture
def env():
    env = gymnasium.make("agentgym/text.babyai-v0")
    yield env
    env.close()


def direct(task_id, actions):
    """The same actions through minigrid itself: (reward, terminated, truncated) per step, until the level ends."""
    _, level, seed = parse_task_id(task_id)
    level_env = make_level(level, seed)
    results = []
    for action in actions:
        _, reward, terminated, truncated, _ = level_env.step(ACTIONS[action])
        results.append((float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return results


def through_agentgym(env, task_id, actions):
    env.reset(options={"task_id": task_id})
    results, info = [], {}
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        results.append((reward, terminated, truncated))
        if terminated or truncated:
            break
    return results, info


def mutations(actions, rng):
    """The gold play with one step dropped, two swapped, one repeated."""
    i, j = sorted(rng.sample(range(len(actions)), 2)) if len(actions) > 1 else (0, 0)
    swapped = list(actions)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    return {
        "dropped": actions[:i] + actions[i + 1 :],
        "swapped": swapped,
        "repeated": actions[: i + 1] + actions[i:],
    }


def plays(task_id, rng):
    gold = bot_actions(*parse_task_id(task_id)[1:])
    random_walk = [rng.choice(list(ACTIONS)) for _ in range(300)]
    return {"gold": gold, "random": random_walk, **mutations(gold, rng)}


def check_agreement(env, task_id, seed=0):
    for name, actions in plays(task_id, random.Random(seed)).items():
        ours, info = through_agentgym(env, task_id, actions)
        assert ours == direct(task_id, actions), (task_id, name)
        reward, terminated, truncated = ours[-1]
        assert info["success"] == (reward > 0), (task_id, name)
        if name == "gold":
            assert info["success"] and terminated and info["grade"]["minigrid_reward"] == reward


@pytest.mark.parametrize("task_id", TASKS)
def test_rewards_agree_with_minigrid_on_gold_random_and_mutated_plays(env, task_id):
    check_agreement(env, task_id)


@pytest.mark.slow
def test_rewards_agree_with_minigrid_on_every_default_level_and_split(env):
    for task_id in env.unwrapped.task_ids()[::7]:
        check_agreement(env, task_id, seed=len(task_id))


def test_tasks_are_level_seeds_with_splits_as_categories_and_the_bot_as_reference():
    env = BabyAIEnv(levels=["GoToLocal"], tasks_per_split={"train": 3, "test": 2})
    tasks = env.tasks()
    assert [t.id for t in tasks] == [f"train/GoToLocal/{n}" for n in range(3)] + [
        "test/GoToLocal/0",
        "test/GoToLocal/1",
    ]
    assert [t.category for t in tasks] == ["train"] * 3 + ["test"] * 2
    assert tasks[3].metadata == {"level": "GoToLocal", "seed": 2_000_000}
    assert tasks[3].reference_solution() == bot_actions("GoToLocal", 2_000_000)
    assert BabyAIEnv(tasks="test/*").task_ids()[0] == "test/GoToRedBallGrey/0"
    with pytest.raises(ValueError, match="unknown BabyAI levels"):
        BabyAIEnv(levels=["NoSuchLevel"])


def test_the_observation_describes_the_view_and_valid_actions_come_in_info_and_by_option(env):
    observation, info = env.reset(options={"task_id": "test/GoToLocal/0"})
    text = observation["text"]
    assert text.startswith("Mission: go to a blue ball\nYou see: ") and "a wall 4 steps forward" in text
    assert "Actions: turn left, turn right, go forward" in text and info["valid_actions"] == list(ACTIONS)
    assert "Valid actions" not in env.step("turn left")[0]["text"]
    shown = BabyAIEnv(show_valid_actions=True)
    try:
        assert shown.reset(options={"task_id": "test/GoToLocal/0"})[0]["text"].endswith(
            "Valid actions: " + ", ".join(ACTIONS)
        )
        observation, _, _, _, info = shown.step(call_text("act", {"command": "Go forward."}))
        assert info["error"] is None and observation["text"].endswith("Valid actions: " + ", ".join(ACTIONS))
    finally:
        shown.close()


def test_an_unknown_command_is_answered_and_does_not_reach_the_level(env):
    env.reset(options={"task_id": "test/GoToLocal/0"})
    level = env.unwrapped.level_env
    observation, reward, terminated, truncated, info = env.step("fly to the ball")
    assert "Unknown action 'fly to the ball'. The actions are: turn left" in observation["text"]
    assert info["error"] and (reward, terminated, truncated, level.step_count) == (0.0, False, False, 0)


def test_the_text_is_what_minigrid_shows_after_each_step(env):
    env.reset(options={"task_id": "train/GoToSeq/0"})
    level = make_level("GoToSeq", 0)
    for action in bot_actions("GoToSeq", 0)[:15]:
        level.step(ACTIONS[action])
        assert env.step(action)[0]["text"] == describe(level)


# ---------------------------------------------------------------------- branching
def test_fork_mid_episode_then_continue_equals_replay(env):
    task_id = "test/SynthLoc/4"
    gold = bot_actions(*parse_task_id(task_id)[1:])
    rng = random.Random(3)
    continuation = [rng.choice(list(ACTIONS)) for _ in range(10)] + gold
    env.reset(options={"task_id": task_id})
    for action in gold[:10]:
        env.step(action)
    with env.unwrapped.snapshot() as snapshot:
        fork = env.unwrapped.fork(snapshot)
        imported = env.unwrapped.fork(env.unwrapped.import_snapshot(env.unwrapped.export_snapshot(snapshot)))
    replay = gymnasium.make("agentgym/text.babyai-v0")
    try:
        replay.reset(options={"task_id": task_id})
        for action in gold[:10]:
            replay.step(action)
        runs = [[branch.step(action) for action in continuation] for branch in (fork, imported, replay, env)]
        assert runs[0] == runs[1] == runs[2] == runs[3]
    finally:
        for branch in (fork, imported, replay):
            branch.close()


def test_restore_goes_back_exactly(env):
    env.reset(options={"task_id": "test/GoToLocal/0"})
    env.step("turn left")
    snapshot = env.unwrapped.snapshot()
    first = [env.step(a) for a in ("go forward", "turn right", "go forward")]
    env.unwrapped.restore(snapshot)
    assert [env.step(a) for a in ("go forward", "turn right", "go forward")] == first
    snapshot.release()


# ---------------------------------------------------------------------- grader hacks
def test_done_spam_and_claims_of_success_score_nothing(env):
    env.reset(options={"task_id": "test/PutNextLocal/2"})
    for reply in ["You win! Mission complete.", "done", "<tool_call>{}</tool_call>", "go forward; done"] * 200:
        _, reward, terminated, truncated, info = env.step(reply)
        assert reward == 0.0 and not info["success"]
        if terminated or truncated:
            break
    # `done` is a no-op in BabyAI: spamming it runs the level out of steps, unrewarded.
    level = env.unwrapped.level_env
    assert truncated and not terminated and level.step_count == level.max_steps == 128


def test_several_calls_in_one_reply_are_several_level_steps_and_cannot_skip_the_count(env):
    task_id = "test/GoToLocal/2"
    gold = bot_actions(*parse_task_id(task_id)[1:])
    env.reset(options={"task_id": task_id})
    _, reward, terminated, _, info = env.step("".join(call_text("act", {"command": a}) for a in gold))
    assert terminated and info["success"] and reward == direct(task_id, gold)[-1][0]
    assert info["grade"]["steps"] == len(gold)


def test_demonstrations_with_mistakes_replan_and_still_solve():
    env = BabyAIEnv(levels=["GoToLocal", "PickupLoc"], tasks_per_split={"train": 4})
    try:
        for task_id in env.task_ids():
            clean = env.demonstration_replies(task_id)
            noisy = env.demonstration_replies(task_id, 0.3, random.Random(task_id))
            for replies in (clean, noisy):
                results, info = through_agentgym(env, task_id, replies)
                assert info["success"] and len(results) == len(replies)
            assert len(noisy) >= len(clean)
    finally:
        env.close()


def test_a_command_over_the_byte_limit_is_refused_whole_and_the_level_goes_on(env):
    """Every text world hands its engine at most ``max_command_bytes`` (1,000) of a command, refused whole, never cut."""
    env.reset(options={"task_id": "test/GoToLocal/0"})
    _, reward, terminated, truncated, info = env.step("go forward " * 100)
    assert info["error"] == "command too long: 1099 bytes, at most 1000" and reward == 0
    assert not (terminated or truncated) and env.unwrapped.level_env.step_count == 0
