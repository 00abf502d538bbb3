"""code.repofix-v0 against the real Docker engine: every shipped task verified, full episodes, and SWE-bench instance files."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium
import pytest

import agentgym  # noqa: F401
from agentgym.envs.code import repofix_tasks
from agentgym.envs.code.repofix import grade_diff, reporter_command, workspace_tarball
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker

TASKS = repofix_tasks.load_tasks()


# Every shipped task, gold and unpatched, in sandboxes, is a whole-benchmark sweep (a minute on two cores):
# `make test-sweeps`; `make test` verifies every fifth.
@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.sweep, id="all"), pytest.param(5, id="sampled")])
def test_shipped_tasks_are_verified_in_the_sandbox(docker_ready, every):
    """The gold patch resolves each task and the unpatched repository does not (SWE-bench's validation)."""
    assert len(TASKS) >= 30

    def verify(task):
        gold, unpatched = grade_diff(task, task["patch"]), grade_diff(task, "")
        return task["instance_id"], gold, unpatched

    with ThreadPoolExecutor(4) as pool:
        for instance_id, gold, unpatched in pool.map(verify, TASKS[::every]):
            assert gold["resolved"] and gold["reporter"], (
                instance_id,
                gold["error"],
                gold["fail_to_pass"],
                gold["pass_to_pass"],
            )
            # A genuine failure, seen by the trusted reporter without any sign of tampering.
            assert unpatched["error"] is None, (instance_id, unpatched["error"])
            assert (
                not unpatched["resolved"] and unpatched["fail_to_pass"]["passed"] < unpatched["fail_to_pass"]["total"]
            ), instance_id


@pytest.fixture
def env(docker_ready):
    env = gymnasium.make("agentgym/code.repofix-v0")
    yield env
    env.close()


def test_an_agent_that_applies_the_fix_through_its_tools_is_rewarded(env):
    task = TASKS[0]
    obs, info = env.reset(options={"task_id": task["instance_id"]})
    assert task["problem_statement"].strip()[:40] in obs["text"]
    assert [t["function"]["name"] for t in info["tools"]][-2:] == ["run_tests", "submit"]
    obs, *_ = env.step(call("bash", command="git status --short && git log --oneline | wc -l"))
    assert obs["text"] == "1"  # a clean single-commit repository
    hidden = repofix_tasks.patched_files(task["test_patch"])
    obs, *_ = env.step(call("bash", command=f"ls {' '.join(hidden)}"))
    assert "No such file" in obs["text"]  # the FAIL_TO_PASS tests are hidden
    env.step(call("write_file", path="/tmp/fix.diff", content=task["patch"]))
    obs, *_ = env.step(call("bash", command="git apply /tmp/fix.diff && git diff --stat"))
    assert "1 file changed" in obs["text"]
    obs, reward, terminated, truncated, info = env.step(call("submit"))
    assert (reward, terminated, info["success"]) == (1.0, True, True), obs["text"]
    assert info["grade"]["fail_to_pass"]["passed"] == len(task["FAIL_TO_PASS"])


def test_planting_fake_hidden_tests_does_not_help(env):
    task = TASKS[1]
    env.reset(options={"task_id": task["instance_id"]})
    for path in repofix_tasks.patched_files(task["test_patch"]):
        env.step(call("write_file", path=path, content="def test_nothing():\n    pass\n"))
    obs, reward, *_, info = env.step(call("submit"))
    assert reward == 0.0 and info["grade"]["error"] is None


def test_a_conftest_that_forces_passes_is_not_graded(env):
    task = TASKS[4]
    env.reset(options={"task_id": task["instance_id"]})
    hack = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n"
    )
    env.step(call("write_file", path="conftest.py", content=hack))
    env.step(call("write_file", path="sub/conftest.py", content=hack))
    obs, *_ = env.step(call("run_tests", paths="-k no_test_matches_this"))
    diff = env.unwrapped.agent_diff()
    assert "conftest" not in diff
    obs, reward, *_, info = env.step(call("submit"))
    assert reward == 0.0 and info["grade"]["fail_to_pass"]["passed"] < len(task["FAIL_TO_PASS"])


def test_a_test_command_that_is_not_plain_pytest_is_graded_from_its_log(docker_ready):
    task = dict(TASKS[0], test_command=f"cd . && {TASKS[0]['test_command']}")
    gold, unpatched = grade_diff(task, task["patch"]), grade_diff(task, "")
    assert gold["resolved"] and not gold["reporter"] and not unpatched["resolved"]


def test_plain_pytest_commands_run_under_the_launcher():
    assert (
        reporter_command("python3 -m pytest -rA -p no:cacheprovider t.py", "/g/l.py")
        == "python3 /g/l.py -rA -p no:cacheprovider t.py"
    )
    assert (
        reporter_command("FOO='1 2' python3.9 -W error -m pytest -rA -k 'a or b'", "/g/l.py")
        == "FOO='1 2' python3.9 -W error /g/l.py -rA -k 'a or b'"
    )
    assert reporter_command("/env/bin/pytest -rA t.py", "/g/l.py") == "/env/bin/python /g/l.py -rA t.py"
    for other in ("tox -e py", "python runtests.py", "pytest t.py; true", "pytest $TESTS", "python -c 'x' -m pytest"):
        assert reporter_command(other, "/g/l.py") is None, other


def test_run_tests_runs_pytest_in_the_repository(env):
    env.reset(options={"task_id": TASKS[0]["instance_id"]})
    env.step(
        call(
            "write_file",
            path="test_mine.py",
            content="def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2\n",
        )
    )
    obs, *_, info = env.step(call("run_tests", paths="test_mine.py"))
    assert "1 failed, 1 passed" in obs["text"] and info["exit_code"] == 1
    obs, *_ = env.step(call("run_tests", paths="no_such_dir_xyz"))
    assert "no_such_dir_xyz" in obs["text"]
    env.step(call("bash", command="rm test_mine.py"))
    obs, *_ = env.step(call("run_tests", paths="-k no_test_matches_this"))
    assert "the hidden tests run when you submit" in obs["text"]


def test_run_tests_stays_within_the_envs_command_limit(docker_ready):
    """The visible tests run for at most max_exec_timeout, by default and when the agent asks for more."""
    env = gymnasium.make("agentgym/code.repofix-v0", exec_timeout=2, max_exec_timeout=3)
    try:
        schema = next(tool for tool in env.unwrapped.tools() if tool.name == "run_tests")
        assert "default 3, at most 3" in schema.properties["timeout"]["description"]
        env.reset(options={"task_id": TASKS[0]["instance_id"]})
        slow = "import time\n\ndef test_slow():\n    time.sleep(30)\n"
        env.step(call("write_file", path="test_slow_mine.py", content=slow))
        for arguments in ({}, {"timeout": 60}):
            started = time.monotonic()
            obs, *_ = env.step(call("run_tests", paths="test_slow_mine.py", **arguments))
            assert "killed after its timeout" in obs["text"] and time.monotonic() - started < 20, obs["text"]
    finally:
        env.close()


def test_workspace_is_identical_across_resets(env):
    task_id = TASKS[2]["instance_id"]
    env.reset(options={"task_id": task_id})
    first = env.unwrapped.sandbox.fs_hash(["/workspace"])
    env.step(call("bash", command="echo change >> README.md; git commit -qam x || true"))
    env.reset(options={"task_id": task_id})
    assert env.unwrapped.sandbox.fs_hash(["/workspace"]) == first


def test_swebench_instance_file_with_an_image_at_testbed(docker_ready, tmp_path):
    """A SWE-bench-format file (JSON list, test lists as JSON strings) whose instance names an image with /testbed."""
    from agentgym.sandbox import engine
    from agentgym.sandbox.docker import DockerSandbox, SandboxConfig

    task = TASKS[3]
    builder = DockerSandbox.create(config=SandboxConfig(user="0:0", cap_drop=()), warm=False)
    try:
        builder.exec("mkdir /testbed")
        builder.put_tree(
            "/testbed", workspace_tarball(task["instance_id"], json.dumps(task, sort_keys=True), builder.config)
        )
        builder.exec("chown -R root:root /testbed")  # as in SWE-bench images
        image = engine.api().commit(builder.id, repository="agentgym-test/swebench", tag="t1")["Id"]
    finally:
        builder.close()
    try:
        instance = {k: v for k, v in task.items() if k not in ("repo", "bug_patch", "base_commit")}
        instance.update(
            image=image, FAIL_TO_PASS=json.dumps(task["FAIL_TO_PASS"]), PASS_TO_PASS=json.dumps(task["PASS_TO_PASS"])
        )
        path = tmp_path / "instances.json"
        path.write_text(json.dumps([instance]))
        env = gymnasium.make("agentgym/code.repofix-v0", instances=str(path))
        try:
            obs, _ = env.reset(options={"task_id": task["instance_id"]})
            assert "/testbed" in obs["text"]
            env.step(call("write_file", path="/tmp/fix.diff", content=task["patch"]))
            obs, *_ = env.step(call("bash", command="pwd && git apply /tmp/fix.diff"))
            assert obs["text"] == "/testbed"
            *_, info = env.step(call("submit"))
            assert info["success"], info
        finally:
            env.close()
    finally:
        engine.api().remove_image("agentgym-test/swebench:t1", force=True)


def test_instance_without_image_or_repo_is_rejected(tmp_path):
    from agentgym.envs.code.repofix import load_swebench_instances

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"instance_id": "x", "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}))
    with pytest.raises(ValueError, match="image or repo"):
        load_swebench_instances(path)
