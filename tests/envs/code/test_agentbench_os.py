"""code.agentbench-os-v0: inspect-evals' AgentBench OS tasks in real Docker, graded in agreement with inspect-evals'
own scorer (its code, run against the same container) on gold, wrong and mutated answers; forks equal replays.

A few tasks of each kind run in `make test`; ``test_sweep`` (marked ``sweep``) plays every task."""

import json

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.code.agentbench_os import (
    SPLITS,
    agent_home_paths,
    compare,
    data_dir,
    left_out_tasks,
    load_tasks,
    tampered,
)
from agentgym.eval.harness import evaluate
from agentgym.eval.oracles import NonsensePolicy, oracle_for
from agentgym.eval.suites import load_suite
from agentgym.rollout.agent import AgentConfig
from agentgym.task import resolve_step
from tests.helpers.inspect_agentbench import inspect_function, inspect_verdict, load_scorer
from tests.helpers.tool_calls import call

# One of each: a match with a start program (dev/0), a check with an example script (dev/3), a dev comparison
# (dev/21), test comparisons with an init_at_start script (test/27) and with users (test/20), a check of a
# SUID bit (test/31), a match whose set-up switches user (test/28).
SAMPLE = ["dev/0", "dev/3", "dev/21", "test/20", "test/27", "test/31", "test/28"]


def test_tasks_come_from_the_package_and_the_left_out_are_counted():
    records = {split: json.loads((data_dir() / name).read_text()) for split, name in SPLITS.items()}
    assert (len(records["dev"]), len(records["test"])) == (26, 119)
    usable, left = load_tasks(), left_out_tasks()
    assert len(usable) + len(left) == 145 and not set(usable) & set(left)
    github = {task_id for task_id, why in left.items() if "GitHub" in why}
    assert github == {"dev/25", *(f"test/{n}" for n in (0, 1, 2, 3, 4, 5, 6, 9, 10, 11))}
    assert "dev/24" in left and "user" in left["dev/24"]
    assert {task_id for task_id, why in left.items() if "apt" in why} == {"test/33", "test/34"}  # install sudo
    image_facts = {task_id for task_id, why in left.items() if "is a fact of" in why}
    assert image_facts == {f"dev/{n}" for n in (8, 9, 10, 11, 13, 14, 15, 17, 18, 23)}  # the sweep found them
    assert {task_id for task_id, why in left.items() if "processes" in why} == {"test/37", "test/112"}
    env = gymnasium.make("agentgym/code.agentbench-os-v0", tasks="test/*")
    try:
        assert {task.category for task in env.unwrapped.tasks()} == {"test"}
        assert all(task.has_reference_solution for task in env.unwrapped.tasks())
    finally:
        env.close()


def test_paths_are_rewritten_as_inspect_evals_does():
    theirs = inspect_function("recursively_set_agent_home")
    for split, name in SPLITS.items():
        for record in json.loads((data_dir() / name).read_text()):
            assert agent_home_paths(record) == {k: theirs(v) for k, v in record.items()}, (split, record["id"])


@pytest.mark.parametrize(
    "script,answer,expected,passed",
    [
        ("check/integer-match.py", "5", "5", True),
        ("check/integer-match.py", "05", "5", True),
        ("check/integer-match.py", " 5\n", "5", True),
        ("check/integer-match.py", "5 6", "5", False),
        ("check/integer-match.py", "five", "5", False),
        ("check/string-match.py", "log\r\n", "log", True),
        ("check/string-match.py", "Log", "log", False),
        ("check/size-match.py", "4.0K", "4096", True),
        ("check/size-match.py", "4K", "4M", False),
        ("check/integer-match.py", "5\x00", "5", False),
    ],
)
def test_the_benchmarks_comparison_scripts_run_on_the_host(script, answer, expected, passed):
    assert compare(script, answer, expected) is passed


@pytest.mark.parametrize(
    "path,kind,is_tampering",
    [
        ("/usr/bin/ls", 0, True),
        ("/usr/lib/python3.11/sitecustomize.py", 1, True),
        ("/usr/local/bin/calc", 1, False),
        ("/usr/local/bin", 0, False),
        ("/usr/local", 0, False),
        ("/usr", 0, False),
        ("/usr", 2, True),
        ("/usr/local/lib/python3.11/dist-packages/x.pth", 1, True),
        ("/bin", 0, True),
        ("/lib64", 2, True),
        ("/etc/ld.so.preload", 1, True),
        ("/etc/profile.d/x.sh", 1, True),
        ("/etc/passwd", 0, False),
        ("/home/agent/bin/find", 0, False),
        ("/binary", 1, False),
    ],
)
def test_what_counts_as_changing_the_systems_programs(path, kind, is_tampering):
    assert tampered(path, kind) is is_tampering


# ---------------------------------------------------------------------------------------------- Docker


@pytest.fixture(scope="module")
def scorer():
    return load_scorer()


@pytest.fixture
def env(docker_ready):
    env = gymnasium.make("agentgym/code.agentbench-os-v0")
    yield env
    env.close()


def answer_of(action: str) -> str:
    return json.loads(action.removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"]["answer"]


def mutations(gold: str) -> list[tuple[str, bool]]:
    """Answers and whether each must fail: nonsense, empty, the gold answer with a suffix or off by one, and
    variants a lenient comparison may accept (a newline, a leading space): those need only agree."""
    answers = [("no idea", True), ("", True), (gold + "x", True), (gold + "\n", False), (" " + gold, False)]
    if gold.strip().lstrip("-").isdigit():
        answers += [(str(int(gold) + 1), True), (f"{gold} {int(gold) + 1}", True)]
    return answers


def check_task(env, scorer, task_id):
    """Gold scores 1, wrong and mutated answers 0, each as inspect-evals' own scorer says in the same container.

    The wrong answers are given from a snapshot of the task's start (restored for each), not a reset each."""
    task = load_tasks()[task_id]
    observation, _ = env.reset(options={"task_id": task_id})
    start = env.unwrapped.snapshot()
    try:
        actions = []
        for step in task.reference_solution():
            actions.append(resolve_step(step, observation["text"]))
            observation, reward, terminated, _, info = env.step(actions[-1])
        assert terminated and reward == 1.0, (task_id, actions, observation["text"])
        sandbox = env.unwrapped.sandbox
        if task.kind == "check":
            assert inspect_verdict(scorer, sandbox, task.record, "") is True, task_id
            env.unwrapped.restore(start)
            observation, reward, *_ = env.step(call("finish"))  # the change not made
            assert reward == 0.0, (task_id, observation["text"])
            assert inspect_verdict(scorer, env.unwrapped.sandbox, task.record, "") is False, task_id
            return
        gold = answer_of(actions[-1])
        assert inspect_verdict(scorer, sandbox, task.record, gold) is True, (task_id, gold)
        for answer, must_fail in mutations(gold):
            env.unwrapped.restore(start)
            observation, reward, *_ = env.step(call("answer", answer=answer))
            theirs = inspect_verdict(scorer, env.unwrapped.sandbox, task.record, answer)
            assert reward == float(theirs), (task_id, answer, observation["text"])
            assert not (must_fail and reward), (task_id, answer)
    finally:
        start.release()


@pytest.mark.parametrize("task_id", SAMPLE)
def test_gold_wrong_and_mutated_answers_agree_with_inspect_evals(env, scorer, task_id):
    check_task(env, scorer, task_id)


@pytest.fixture(scope="module")
def sweep_env(docker_ready):
    env = gymnasium.make("agentgym/code.agentbench-os-v0")
    yield env
    env.close()


@pytest.mark.sweep
@pytest.mark.parametrize("task_id", sorted(load_tasks(), key=lambda task_id: (task_id[0], int(task_id.split("/")[1]))))
def test_sweep(sweep_env, scorer, task_id):
    """Every task: its reference solution scores 1, wrong and mutated answers 0, as inspect-evals' scorer says."""
    check_task(sweep_env, scorer, task_id)


def test_the_start_program_runs_and_a_fork_starts_it_again(env):
    env.reset(options={"task_id": "dev/0"})  # a program appends "succeed" to /home/agent/log every second
    count = call("bash", command="sleep 2.5; wc -l < /home/agent/log")
    assert int(env.step(count)[0]["text"]) >= 2
    fork = env.unwrapped.fork()
    try:
        first = int(fork.step(call("bash", command="wc -l < /home/agent/log"))[0]["text"])
        later = int(fork.step(count)[0]["text"])
        assert later >= first + 2  # the fork's own writer runs
    finally:
        fork.close()


HASHED = ("/home", "/tmp", "/etc")
PREFIX = [
    call("bash", command="mkdir -p notes && cd notes && export STAGE=two && useradd -m bob"),
    call("bash", command="echo $STAGE > a.txt && chown bob a.txt && chmod 640 a.txt && ln -s a.txt link"),
]
NEXT = call("bash", command="pwd; echo $STAGE; cat link; stat -c '%U %a' a.txt; id -u bob")


def test_fork_at_turn_k_equals_replay(docker_ready):
    original, replayed = (gymnasium.make("agentgym/code.agentbench-os-v0") for _ in range(2))
    try:
        for env in (original, replayed):
            env.reset(seed=7, options={"task_id": "test/31"})
            for action in PREFIX:
                env.step(action)
        fork = original.fork()
        try:
            assert fork.unwrapped.sandbox.fs_hash(HASHED) == replayed.unwrapped.sandbox.fs_hash(HASHED)
            original.step(call("bash", command="rm -rf /home/agent/notes"))
            fork_step, replay_step = fork.step(NEXT), replayed.step(NEXT)
            assert fork_step[0]["text"] == replay_step[0]["text"]
            assert "/home/agent/notes\ntwo\ntwo\nbob 640" in fork_step[0]["text"]
            fixed = call("bash", command="chmod u-s /home/agent/bin/find")
            for env in (fork, replayed):
                env.step(fixed)
            assert fork.step(call("finish"))[1:4] == replayed.step(call("finish"))[1:4] == (1.0, True, False)
        finally:
            fork.close()
    finally:
        original.close()
        replayed.close()


async def test_the_suite_reports_by_split_and_the_oracle_solves_while_nonsense_does_not(docker_ready, tmp_path):
    suite = load_suite("agentbench-os")
    assert {task.category for task in suite.tasks} == {"dev", "test"} and len(suite.tasks) == len(load_tasks()) == 119
    chosen = suite.filter("dev/0,test/31")  # an exact match, a check of the system
    oracle = await evaluate(chosen, oracle_for, out_dir=tmp_path / "oracle", agent_config=AgentConfig(), progress=False)
    assert oracle["metrics"]["success_rate"] == 1.0 and set(oracle["by_category"]) == {"dev", "test"}
    nonsense = await evaluate(
        chosen, NonsensePolicy(), out_dir=tmp_path / "nonsense", agent_config=AgentConfig(max_turns=3), progress=False
    )
    assert nonsense["metrics"]["success_rate"] == 0.0 and nonsense["metrics"]["env_error_rate"] == 0.0
