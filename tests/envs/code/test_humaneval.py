"""code.humaneval-v0 against the real Docker engine: tools, grading with the official tests, and known answers;
and the grader's plain-data encoding (the hacks it stops are in tests/graders/test_humaneval.py)."""

import json
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.code.humaneval import SOLUTION_PATH, load_problems, run_official_tests
from agentgym.envs.code.humaneval_harness import NotPlainData, ProtocolError, decode, encode
from tests.helpers.tool_calls import call


@pytest.fixture
def env(docker_ready):
    env = gymnasium.make("agentgym/code.humaneval-v0")
    yield env
    env.close()


def solve(env, task_id, body):
    problem = load_problems()[task_id]
    obs, info = env.reset(options={"task_id": task_id})
    assert problem["entry_point"] in obs["text"] and info["task_id"] == task_id
    env.step(call("write_file", path=SOLUTION_PATH, content=problem["prompt"] + body))
    return env.step(call("submit"))


@pytest.mark.docker
def test_tools_run_in_the_sandbox(env):
    env.reset(options={"task_id": "HumanEval/0"})
    obs, *_ = env.step(call("bash", command="cd /tmp && export GREETING=hi"))
    obs, *_ = env.step(call("bash", command="echo $GREETING from $(pwd); exit 3"))
    assert obs["text"] == "hi from /tmp\n[exit code 3]"
    obs, *_ = env.step("Let me check:\n```python\nimport sys\nprint(sys.version_info[:2])\n```")
    assert obs["text"] == "(3, 11)"
    obs, *_ = env.step(call("read_file", path=SOLUTION_PATH, start_line=1, end_line=2))
    assert obs["text"].startswith("     1\tfrom typing import List")
    obs, *_, info = env.step(call("str_replace", path=SOLUTION_PATH, old="List", new="list"))
    assert "exactly once" in info["error"]
    obs, *_, info = env.step(call("read_file", path="/nope.txt"))
    assert "no such file" in info["error"]
    obs, *_, info = env.step(call("bash", command="sleep 60", timeout=1))
    assert "killed after its timeout" in obs["text"] and info["exit_code"] == 124


# The whole benchmark is a sweep (`make test-sweeps`); `make test` plays every 16th problem.
EVERY = [pytest.param(1, marks=pytest.mark.sweep, id="all-164"), pytest.param(16, id="every-16th")]


@pytest.mark.docker
@pytest.mark.parametrize("stride", EVERY)
def test_canonical_solutions_score_1(docker_ready, stride):
    problems = load_problems()
    assert len(problems) == 164

    def run(task_ids):
        env = gymnasium.make("agentgym/code.humaneval-v0")
        try:
            return [solve(env, t, problems[t]["canonical_solution"])[1] for t in task_ids]
        finally:
            env.close()

    ids = list(problems)[::stride]
    with ThreadPoolExecutor(4) as pool:
        rewards = [r for chunk in pool.map(run, [ids[i::4] for i in range(4)]) for r in chunk]
    assert sum(rewards) == len(ids)


@pytest.mark.docker
@pytest.mark.parametrize("stride", EVERY)
def test_empty_bodies_score_0(docker_ready, stride):
    problems = list(load_problems().values())[::stride]
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda p: run_official_tests(p, p["prompt"] + "    pass\n")[0], problems))
    assert sum(verdicts) == 0


@pytest.mark.docker
def test_failed_submission_reports_why(env):
    obs, reward, terminated, _, info = solve(env, "HumanEval/2", "    return 0.0\n")
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert "AssertionError" in info["grade"]["detail"]


@pytest.mark.docker
def test_deleted_solution_scores_zero(env):
    env.reset(options={"task_id": "HumanEval/1"})
    env.step(call("bash", command=f"rm {SOLUTION_PATH}"))
    obs, reward, terminated, *_ = env.step(call("submit"))
    assert reward == 0.0 and terminated and "does not exist" in obs["text"]


@pytest.mark.docker
def test_a_killed_container_ends_the_episode_cleanly_and_reset_recovers(env):
    from agentgym.sandbox import engine

    env.reset(options={"task_id": "HumanEval/4"})
    engine.api().remove_container(env.unwrapped.sandbox.id, force=True)  # as if the engine lost it (OOM, restart)
    obs, reward, terminated, truncated, info = env.step(call("bash", command="ls"))
    assert truncated and not terminated and reward == 0.0
    assert "Environment error" in obs["text"] and "SandboxError" in info["env_error"]
    obs, info = env.reset(options={"task_id": "HumanEval/4"})
    assert env.step(call("bash", command="ls /workspace"))[0]["text"] == "solution.py"


PLAIN = [
    None,
    True,
    False,
    0,
    -7,
    2**300,
    -(3**5000),
    0.1,
    -0.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    1 - 2.5j,
    "",
    "h\u00e9llo \ud800",
    b"\x00\xff",
    [1, [True, (2.0,)]],
    (),
    ("a", ["b"]),
    {"k": {1: (2, frozenset({3}))}, (1, "x"): None, False: b""},
    set(),
    {1, "x", (2, 3)},
    frozenset({()}),
]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_data_crosses_the_pipe_exactly(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert repr(back) == repr(value)  # repr: types nested anywhere (True vs 1, tuple vs list), nan and -0.0


class AlwaysEqual:
    def __eq__(self, other):
        return True


class Int(int):
    pass


@pytest.mark.parametrize(
    "value",
    [AlwaysEqual(), Int(1), (x for x in "ab"), [1, object()], {"k": AlwaysEqual()}, len, bytearray(b"x"), {Int(2)}],
    ids=repr,
)
def test_only_plain_data_is_encoded(value):
    with pytest.raises(NotPlainData):
        encode(value)


def _deep(depth):
    tree = ["N"]
    for _ in range(depth):
        tree = ["L", [tree]]
    return tree


@pytest.mark.parametrize(
    "tree",
    [
        ["X"],
        ["I", 5],
        ["I", "zz"],
        ["B", 1],
        ["S"],
        ["N", 1],
        ["F", "one"],
        [],
        "str",
        3,
        None,
        ["L", ["I", "1"]],
        ["D", [["N"]]],
        ["D", [[["L", []], ["N"]]]],
        ["E", [["L", []]]],
        _deep(100_000),
    ],
)
def test_malformed_plain_data_is_refused(tree):
    with pytest.raises(ProtocolError):
        decode(tree)
