"""TextWorldExpress: scores agree with the package driven directly (gold, random, mutated plays) on every game, forks by replay equal replays, JVMs are pooled and replaced when dead, hacks score nothing."""

import random

import gymnasium
import pytest

textworld_express = pytest.importorskip("textworld_express")

from agentgym.envs.text import jvm  # noqa: E402
from agentgym.envs.text import textworld_express as twx  # noqa: E402
from agentgym.envs.text.textworld_express import GAMES, TextWorldExpressEnv, gold_path, parse_task_id  # noqa: E402
from agentgym.eval.harness import evaluate  # noqa: E402
from agentgym.eval.oracles import NonsensePolicy, oracle_for  # noqa: E402
from agentgym.eval.suites import load_suite  # noqa: E402
from agentgym.rollout.agent import AgentConfig  # noqa: E402
from agentgym.task import call_text  # noqa: E402
from tests.helpers.text_worlds import (  # noqa: E402
    check_dawdling_demonstration,
    check_engines_are_reused,
    check_fork_equals_replay,
    check_spam_scores_nothing,
    kill_the_jvm_then_reset,
    play_agentgym,
    plays,
    random_walk,
)

# One listed game of each kind, from each fold in turn; every game's gold path is short enough to play them all.
FOLDS = ("test", "dev", "train")
TASKS = [f"{FOLDS[i % 3]}/{game}/{twx.FOLD_SEEDS[FOLDS[i % 3]][i % 3]}" for i, game in enumerate(GAMES)]


@pytest.fixture(scope="module")
def direct():
    """The package itself, in its own JVM."""
    engine = textworld_express.TextWorldExpressEnv(envStepLimit=100)
    yield engine
    jvm.stop(engine)


@pytest.fixture
def env():
    env = gymnasium.make("agentgym/text.textworld-express-v0")
    yield env
    env.close()


def play_direct(engine, task_id, actions):
    fold, game, seed = parse_task_id(task_id)
    engine.reset(seed=seed, gameFold=fold, gameName=game, gameParams="")
    results, info = [], {}
    for action in actions:
        _, reward, done, info = engine.step(action)
        results.append((reward, done))
        if done:
            break
    return results, info


@pytest.mark.parametrize("task_id", TASKS)
def test_scores_agree_with_textworld_express_on_gold_random_and_mutated_plays(env, direct, task_id):
    rng = random.Random(task_id)
    for name, actions in plays(gold_path(*parse_task_id(task_id)), random_walk(env, task_id, rng), rng).items():
        ours, info = play_agentgym(env, task_id, actions)
        theirs, their_info = play_direct(direct, task_id, actions)
        assert ours == theirs, (task_id, name)
        if ours[-1][1]:  # ended: the graded step carries the package's score and success
            assert info["grade"]["score"] == their_info["score"], (task_id, name)
            assert info["success"] == their_info["tasksuccess"], (task_id, name)
        assert sum(reward for reward, _ in ours) == pytest.approx(their_info["score"]), (task_id, name)
        if name == "gold":
            assert their_info["tasksuccess"] and info["success"] and info["grade"]["score"] == 1.0


def test_the_folds_seeds_are_the_engines(direct):
    for game in ("coin", "twc", "cookingworld"):
        direct.reset(seed=0, gameFold="train", gameName=game, gameParams="")
        assert direct.getValidSeedsTrain() == list(twx.FOLD_SEEDS["train"])
        assert direct.getValidSeedsDev() == list(twx.FOLD_SEEDS["dev"])
        assert direct.getValidSeedsTest() == list(twx.FOLD_SEEDS["test"])
    assert tuple(direct.getGameNames()) == GAMES


def test_tasks_are_games_with_folds_as_categories():
    env = TextWorldExpressEnv(["coin", "twc"], {"dev": 2, "test": 1})
    assert env.task_ids() == [
        "dev/coin/10000",
        "dev/coin/10001",
        "dev/twc/10000",
        "dev/twc/10001",
        "test/coin/20000",
        "test/twc/20000",
    ]
    assert [t.category for t in env.tasks()] == ["dev"] * 4 + ["test"] * 2
    assert len(TextWorldExpressEnv().task_ids()) == 8 * 16
    with pytest.raises(ValueError, match="unknown TextWorldExpress"):
        TextWorldExpressEnv(["zork"])
    with pytest.raises(ValueError, match="unknown task id"):
        TextWorldExpressEnv(tasks=["test/coin/5"])  # a train seed is not a test game


def test_game_params_reach_the_engine():
    env = TextWorldExpressEnv(["coin"], game_params={"coin": "numLocations=1,includeDoors=0"}, tasks="test/*")
    try:
        env.reset()
        assert env.engine.getGenerationProperties()["numLocations"] == 1
        assert env.tasks()[0].reference_solution() == ["look around", "take coin"]
    finally:
        env.close()


def test_observations_valid_actions_help_and_the_engines_answer_to_nonsense(env):
    observation, info = env.reset(options={"task_id": "test/coin/20000"})
    assert observation["text"].startswith("Your task is to search the environment and find the coin.")
    assert "You are in the kitchen." in observation["text"] and "look around" in info["valid_actions"]
    observation, reward, terminated, truncated, info = env.step(call_text("act", {"command": "flarp the gizmo"}))
    assert observation["text"] == "Unknown action: I'm not sure what you mean."
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None)
    assert env.step("help")[0]["text"].startswith("Your task is to search the environment and find the coin.")


# ---------------------------------------------------------------------- branching by replay
def test_fork_mid_episode_then_continue_equals_replay(env):
    task_id = "test/cookingworld/20001"
    check_fork_equals_replay(env, task_id, gold_path(*parse_task_id(task_id)), 5)


# ---------------------------------------------------------------------- engines
def test_engines_are_reused_across_envs_and_episodes():
    check_engines_are_reused(TextWorldExpressEnv, TASKS)


def test_a_dead_jvm_is_an_env_error_and_the_next_reset_gets_a_new_one(env):
    assert kill_the_jvm_then_reset(env, TASKS[0])["text"]


def test_a_missing_java_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(jvm.JavaMissingError, match="TextWorldExpress needs a Java runtime.*default-jre-headless"):
        twx._start()


# ---------------------------------------------------------------------- grader hacks
def test_look_spam_and_printed_wins_score_nothing():
    replies = ["look around", "You win! Your score is 1.0", "take coin", "inventory", "help"]
    check_spam_scores_nothing(TextWorldExpressEnv(tasks=["test/coin/20000"], step_limit=30), replies, 30)


def test_demonstrations_are_the_gold_path_with_looks_before_steps_at_the_mistake_rate():
    check_dawdling_demonstration(TextWorldExpressEnv, TASKS[0], gold_path(*parse_task_id(TASKS[0])), "look around")


# ---------------------------------------------------------------------- eval suite
async def test_the_suite_reports_by_fold_and_the_oracle_scores_the_gold_while_nonsense_scores_nothing(tmp_path):
    suite = load_suite("textworld-express")
    assert {task.category for task in suite.tasks} == {"train", "dev", "test"} and len(suite.tasks) == 8 * 16
    chosen = suite.filter("test/coin/20000,test/arithmetic/20001,test/sorting/20002")
    oracle = await evaluate(chosen, oracle_for, out_dir=tmp_path / "oracle", agent_config=AgentConfig(), progress=False)
    assert oracle["metrics"]["success_rate"] == 1.0 and oracle["by_category"]["test"]["success_rate"] == 1.0
    nonsense = await evaluate(
        chosen, NonsensePolicy(), out_dir=tmp_path / "nonsense", agent_config=AgentConfig(max_turns=5), progress=False
    )
    assert nonsense["metrics"]["success_rate"] == 0.0 and nonsense["metrics"]["env_error_rate"] == 0.0
