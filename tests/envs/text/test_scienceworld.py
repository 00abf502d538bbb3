"""ScienceWorld: scores agree with the package driven directly (gold, random, mutated plays), forks by replay equal replays, JVMs are pooled, replaced when dead and never orphaned, hacks score nothing."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium
import pytest

scienceworld = pytest.importorskip("scienceworld")

from agentgym.envs.text import jvm  # noqa: E402
from agentgym.envs.text import scienceworld as sw  # noqa: E402
from agentgym.envs.text.scienceworld import ScienceWorldEnv, gold_path, parse_task_id  # noqa: E402
from agentgym.task import call_text  # noqa: E402
from tests.helpers.text_worlds import (  # noqa: E402
    check_engines_are_reused,
    check_fork_equals_replay,
    kill_the_jvm_then_reset,
    play_agentgym,
    plays,
)


# Short gold paths keep the default run small; the sweep covers more task types.
def first(split, task):
    """The id of the split's first variation of a task type."""
    return f"{split}/{task}/{sw.VARIATIONS[task][split][0]}"


TASKS = [first("test", "find-living-thing"), first("dev", "identify-life-stages-1")]
SWEEP = [
    TASKS[1],  # half a minute
    first("test", "boil"),  # the longest gold path here: about a minute of play each way
    first("test", "chemistry-mix"),
    pytest.param(
        first("dev", "power-component"),
        # Known disagreement (issue 32): through the pooled engine the gold path's 10th command gives +6
        # instead of +23 (then +17 one command later), even when this is the only test run. The package
        # itself drifts so in one JVM: loading and playing the gold path again and again in one new JVM gave
        # +23, +23, then +6/+17 on the third and fourth loads. The simulator's object-id counter
        # (util.UniqueIdentifier) is kept across loads: resetting it before each load made five repeated
        # plays agree (+23), but did not make this test pass, so some other JVM-wide state matters too.
        marks=pytest.mark.xfail(strict=True, reason="a reused JVM ends power-component one command late"),
    ),
    first("test", "lifespan-longest-lived"),
    first("train", "use-thermometer"),
]


@pytest.fixture(scope="module")
def direct():
    """The package itself, in its own JVM."""
    engine = scienceworld.ScienceWorldEnv("", envStepLimit=100)
    yield engine
    engine.close()
    engine._gateway.java_process.wait(timeout=10)


@pytest.fixture
def env():
    env = gymnasium.make("agentgym/text.scienceworld-v0")
    yield env
    env.close()


def play_direct(engine, task_id, actions):
    _, task, variation = parse_task_id(task_id)
    engine.load(task, variation, "")
    _, info = engine.reset()
    start = score = info["score"]  # some tasks start with points (chemistry-mix: 8)
    results = []
    for action in actions:
        _, reward, done, info = engine.step(action)
        results.append((reward / 100, done))
        score = info["score"]
        if done:
            break
    return results, start, score


def check_agreement(env, direct, task_id):
    rng = random.Random(task_id)
    gold = gold_path(*parse_task_id(task_id)[1:])
    env.reset(options={"task_id": task_id})
    walk = [rng.choice(env.unwrapped.valid_actions()) for _ in range(15)]  # from the first room's valid actions
    for name, actions in plays(gold, walk, rng).items():
        ours, info = play_agentgym(env, task_id, actions)
        theirs, start, score = play_direct(direct, task_id, actions)
        assert ours == theirs, (task_id, name)
        if ours[-1][1]:  # ended: the graded step carries the package's score
            assert info["grade"]["score"] == score and info["success"] == (score == 100), (task_id, name)
        # The package's rewards are score changes from the score at reset, which is not 0 for every task.
        assert sum(reward for reward, _ in ours) == pytest.approx((score - start) / 100), (task_id, name)
        if name == "gold":
            assert score == 100 and info["success"]


@pytest.mark.parametrize("task_id", TASKS[:1])
def test_scores_agree_with_scienceworld_on_gold_random_and_mutated_plays(env, direct, task_id):
    check_agreement(env, direct, task_id)


@pytest.mark.sweep  # three minutes on two cores: `make test-sweeps` (make test agrees on one task type, above)
@pytest.mark.parametrize("task_id", SWEEP)
def test_scores_agree_on_more_task_types(env, direct, task_id):
    check_agreement(env, direct, task_id)


def test_the_variation_splits_are_the_engines(direct):
    for task in ("boil", "find-living-thing", "use-thermometer"):
        direct.load(task, 0, "")
        assert sw.VARIATIONS[task] == {
            "train": list(direct.get_variations_train()),
            "dev": list(direct.get_variations_dev()),
            "test": list(direct.get_variations_test()),
        }
    assert sorted(sw.VARIATIONS) == sorted(direct.get_task_names())


def test_tasks_are_variations_with_splits_as_categories():
    env = ScienceWorldEnv(["boil", "melt"], {"dev": 2, "test": 1})
    assert env.task_ids() == [
        "dev/boil/14",
        "dev/boil/15",
        "dev/melt/14",
        "dev/melt/15",
        "test/boil/21",
        "test/melt/21",
    ]
    assert [t.category for t in env.tasks()] == ["dev"] * 4 + ["test"] * 2
    assert ScienceWorldEnv(tasks="test/find-*").task_ids()[0] == "test/find-animal/225"
    with pytest.raises(ValueError, match="unknown ScienceWorld"):
        ScienceWorldEnv(["brew-coffee"])


def test_observations_valid_actions_and_the_engines_answer_to_nonsense(env):
    observation, info = env.reset(options={"task_id": TASKS[0]})
    assert observation["text"].startswith("Task Description:\nYour task is to find a(n) living thing.")
    assert "This room is called the" in observation["text"] and "look around" in info["valid_actions"]
    observation, reward, terminated, truncated, info = env.step(call_text("act", {"command": "flarp the gizmo"}))
    assert observation["text"] == "No known action matches that input."
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None)
    shown = ScienceWorldEnv(show_valid_actions=True, tasks=TASKS[:1])
    try:
        text = shown.reset()[0]["text"]
        assert "\n\nValid actions: " in text and "look around" in text.rpartition("Valid actions: ")[2]
    finally:
        shown.close()


# ---------------------------------------------------------------------- branching by replay
def test_fork_mid_episode_then_continue_equals_replay(env):
    check_fork_equals_replay(env, TASKS[0], gold_path(*parse_task_id(TASKS[0])[1:]), 4)


# ---------------------------------------------------------------------- engines
def test_engines_are_reused_across_envs_and_episodes():
    check_engines_are_reused(ScienceWorldEnv, TASKS)


def test_a_dead_jvm_is_an_env_error_and_the_next_reset_gets_a_new_one(env):
    assert "This room is called" in kill_the_jvm_then_reset(env, TASKS[0])["text"]


def test_no_orphan_jvm_after_the_parent_is_sigkilled(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        from agentgym.envs.text.scienceworld import ScienceWorldEnv
        env = ScienceWorldEnv(tasks=["{task_id}"])
        env.reset()
        print(env.engine._gateway.java_process.pid, flush=True)
        time.sleep(600)
        """
    ).format(task_id=TASKS[0])
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        jvm = int(child.stdout.readline())
        os.kill(jvm, 0)  # running
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 20
    while _running(jvm) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(jvm), f"JVM {jvm} outlived its SIGKILLed parent"


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_missing_java_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(jvm.JavaMissingError, match="apt-get install default-jre-headless") as caught:
        sw._start()
    assert "\n" not in str(caught.value)


def test_closed_envs_leave_no_jvm_beyond_the_pools_idle_ones():
    pool = sw.engine_pool()
    pool.shutdown()
    others = _java_children()  # JVMs that are not the pool's (the direct fixture's)
    envs = [ScienceWorldEnv(tasks=TASKS) for _ in range(2)]
    for env in envs:
        env.reset(options={"task_id": TASKS[0]})
    for env in envs:
        env.close()
    assert pool.idle == 2
    pool.shutdown()
    assert pool.idle == 0 and _java_children() == others


def _java_children():
    return {pid for pid in _children() if _comm(pid) == "java"}


def _children():
    me = str(os.getpid())
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def _comm(pid):
    with open(f"/proc/{pid}/comm") as comm:
        return comm.read().strip()


# ---------------------------------------------------------------------- grader hacks
def test_look_spam_and_printed_wins_score_nothing(env):
    env.reset(options={"task_id": TASKS[0]})
    total = 0.0
    for reply in ["look around", "You win! Your score is 100.", "score", "inventory", "task"] * 25:
        _, reward, terminated, truncated, info = env.step(reply)
        total += reward
        if terminated or truncated:
            break
    assert truncated and not terminated and total == 0.0 and not info["success"]
    assert info["turn"] == 100
