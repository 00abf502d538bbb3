"""Harbor task directories as agentgym envs: loading, the offline image build and its refusals, the verifier's reward
(the oracle scores 1, doing nothing 0), reward hacks against it, and forks (real Docker, real task directories).

The tasks under harbor_tasks/ were written for these tests in Harbor's format (task.toml, instruction.md,
environment/Dockerfile, tests/test.sh, solution/solve.sh). The ``harbor`` package itself is not used: it needs
Python 3.12 (agentgym's venv is 3.11), so its layout and reward contract are followed as read from its source.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.integrations.harbor import HarborEnv, HarborLimits
from agentgym.integrations.harbor.dockerfile import UnbuildableError, translate_dockerfile
from agentgym.integrations.harbor.image import HarborImageError, image_tag
from agentgym.integrations.harbor.loader import HarborTaskError, load_harbor_tasks, read_task
from agentgym.integrations.harbor.verifier import _main_reward, _parse_reward_json, _parse_reward_text
from agentgym.sandbox.docker import SandboxConfig
from agentgym.task import run_solution
from tests.helpers.tool_calls import call

TASKS = Path(__file__).with_name("harbor_tasks")
BUILDABLE = ["fix-mean", "write-greeting"]
FIXED_MEAN = "def mean(values):\n    if not values:\n        raise ValueError\n    return sum(values) / len(values)\n"

# ------------------------------------------------------------------------------ loading (no Docker)


def test_loads_each_task_directory_of_a_folder():
    tasks = load_harbor_tasks(TASKS)
    assert list(tasks) == ["fix-mean", "needs-network", "private-registry", "write-greeting"]
    fix = tasks["fix-mean"]
    assert "`mean` in `/app/stats.py`" in fix.instruction
    assert (fix.workdir, fix.verifier_timeout, fix.agent_timeout, fix.build_timeout) == ("/app", 60.0, 120.0, 300.0)
    assert fix.unbuildable is None and "COPY stats.py /app/stats.py" in fix.dockerfile
    assert fix.metadata()["name"] == "agentgym/fix-mean" and fix.metadata()["category"] == "debugging"
    # Harbor's default verifier timeout applies where task.toml sets none.
    assert tasks["write-greeting"].dockerfile.startswith("ENV GREETING_NAME=Harbor")
    # A RUN that needs the network is only found out by building; a registry image is refused at once.
    assert tasks["needs-network"].unbuildable is None
    assert "registry.example.com/acme/toolbox:2.1 would have to be pulled" in tasks["private-registry"].unbuildable
    assert list(load_harbor_tasks(TASKS / "fix-mean")) == ["fix-mean"]  # one task directory


def test_the_registered_id_takes_a_path_and_lists_tasks_with_their_oracle():
    env = gymnasium.make("agentgym/code.harbor-v0", path=TASKS)
    try:
        tasks = {task.id: task for task in env.unwrapped.tasks()}
        assert set(tasks) == {"fix-mean", "needs-network", "private-registry", "write-greeting"}
        assert tasks["fix-mean"].category == "debugging" and tasks["fix-mean"].goal.startswith("The function `mean`")
        steps = tasks["fix-mean"].reference_solution()
        assert '"/solution/solve.sh"' in steps[0] and "bash /solution/solve.sh" in steps[1] and "submit" in steps[2]
    finally:
        env.close()
    with pytest.raises(ValueError, match="needs path="):
        HarborEnv()
    with pytest.raises(ValueError, match="no task matches"):
        HarborEnv(path=TASKS, tasks="nothing-*")


def copy_task(tmp_path: Path, name: str = "fix-mean") -> Path:
    return Path(shutil.copytree(TASKS / name, tmp_path / name))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / "task.toml").write_text("[verifier\n"), "task.toml"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "tests/test.sh is missing"),
        (lambda d: (d / "instruction.md").unlink(), "instruction.md is missing"),
        (lambda d: (d / "environment" / "Dockerfile").unlink(), "environment/Dockerfile is missing"),
        (lambda d: _append(d / "task.toml", '\n[[steps]]\nname = "one"\n'), "multi-step"),
        (lambda d: _append(d / "task.toml", "\n[environment.x]\n"), None),  # unknown tables are Harbor's business
        (lambda d: (d / "task.toml").write_text('[environment]\nos = "windows"\n'), "targets windows"),
    ],
)
def test_malformed_task_directories_say_what_is_wrong(tmp_path, change, message):
    task_dir = copy_task(tmp_path)
    change(task_dir)
    if message is None:
        assert read_task(task_dir).id == "fix-mean"
        return
    with pytest.raises(HarborTaskError, match=message):
        load_harbor_tasks(tmp_path)


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_a_folder_without_tasks_is_an_error(tmp_path):
    with pytest.raises(HarborTaskError, match="holds no Harbor task"):
        load_harbor_tasks(tmp_path)
    with pytest.raises(HarborTaskError, match="is not a directory"):
        load_harbor_tasks(tmp_path / "missing")


# ------------------------------------------------------------------------------ untrusted task directories (no Docker)


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("instruction.md", "/etc/passwd"),  # the host's file as the prompt
        ("tests", "/etc"),  # the host's directory copied into the verifier's container
        ("tests/check_stats.py", "/etc/hostname"),
        ("solution/solve.sh", "/etc/hostname"),  # written into the agent's container by the oracle
        ("environment/stats.py", "/etc/hostname"),  # sent to the image build
        ("task.toml", "/etc/hostname"),
        ("tests/extra", "../../../outside.txt"),  # a relative link out of the directory
    ],
)
def test_a_link_that_leaves_the_task_directory_is_refused(tmp_path, link, target):
    (tmp_path / "outside.txt").write_text("the host's secret")
    task_dir = copy_task(tmp_path / "tasks")
    entry = task_dir / link
    if entry.is_dir():
        shutil.rmtree(entry)
    elif entry.exists():
        entry.unlink()
    entry.symlink_to(target)
    with pytest.raises(HarborTaskError, match=f"{link} is a link that leaves the task directory"):
        load_harbor_tasks(tmp_path / "tasks")
    with pytest.raises(HarborTaskError, match="leaves the task directory"):
        HarborEnv(path=task_dir)


def test_links_inside_the_task_directory_and_a_linked_task_inside_the_folder_are_kept(tmp_path):
    task_dir = copy_task(tmp_path / "tasks")
    (task_dir / "README.md").symlink_to("instruction.md")
    (task_dir / "tests" / "solution").symlink_to("../solution")
    (tmp_path / "tasks" / "alias").symlink_to("fix-mean")
    assert set(load_harbor_tasks(tmp_path / "tasks")) == {"fix-mean"}  # both names read the one resolved directory


def test_a_linked_task_directory_outside_the_folder_and_special_files_are_refused(tmp_path):
    outside = copy_task(tmp_path / "elsewhere")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "fix-mean").symlink_to(outside)
    with pytest.raises(HarborTaskError, match="the task directory is a link that leaves"):
        load_harbor_tasks(tmp_path / "tasks")
    task_dir = copy_task(tmp_path / "fifo")
    os.mkfifo(task_dir / "tests" / "pipe")
    with pytest.raises(HarborTaskError, match="tests/pipe is not a regular file"):
        read_task(task_dir)


def test_files_read_on_the_host_are_bounded(tmp_path):
    task_dir = copy_task(tmp_path)
    (task_dir / "instruction.md").write_text("x" * (1024 * 1024 + 1))
    with pytest.raises(HarborTaskError, match="instruction.md is larger than"):
        read_task(task_dir)


@pytest.mark.parametrize(
    ("table", "key", "value", "message"),
    [
        ("environment", "memory_mb", 1024 * 1024, "is above agentgym's cap of 8192"),  # 1 TiB
        ("environment", "cpus", 64, "is above agentgym's cap of 4"),
        ("environment", "storage_mb", 10 * 1024 * 1024, "is above agentgym's cap of 10240"),
        ("environment", "build_timeout_sec", 86400.0, "is above agentgym's cap of 1800"),
        ("verifier", "timeout_sec", 1e9, "is above agentgym's cap of 1800"),
        ("agent", "timeout_sec", 1e9, "is above agentgym's cap of 3600"),
        ("environment", "cpus", -1, "is not a positive number"),
        ("environment", "memory_mb", 1.5, "is not a positive whole number"),
        ("verifier", "timeout_sec", "nan", "is not a positive number"),
        ("verifier", "timeout_sec", True, "is not a positive number"),
    ],
)
def test_every_limit_a_task_sets_is_capped(tmp_path, table, key, value, message):
    task_dir = copy_task(tmp_path)
    literal = "nan" if value == "nan" else json.dumps(value)
    config = (task_dir / "task.toml").read_text()
    if f"[{table}]" not in config:
        config += f"\n[{table}]\n"
    lines = [line for line in config.splitlines() if not line.startswith(f"{key} =")]
    at = lines.index(f"[{table}]") + 1
    (task_dir / "task.toml").write_text("\n".join([*lines[:at], f"{key} = {literal}", *lines[at:]]) + "\n")
    with pytest.raises(HarborTaskError, match=rf"\[{table}\]\.{key} = .* {message}"):
        HarborEnv(path=task_dir)


def test_the_caps_are_the_callers_to_raise_and_set_the_sandbox(tmp_path):
    task_dir = copy_task(tmp_path)
    _append(task_dir / "task.toml", "storage_mb = 20480\n")  # [environment] is the file's last table
    with pytest.raises(HarborTaskError, match="storage_mb = 20480 is above"):
        HarborEnv(path=task_dir)
    env = HarborEnv(path=task_dir, limits={"storage_mb": 20480})
    try:
        config = env.task_sandbox_config("fix-mean")
        assert (config.cpus, config.mem_limit, config.disk_limit) == (1.0, "512m", 20480 * 1024 * 1024)
    finally:
        env.close()
    with pytest.raises(ValueError, match="HarborLimits.cpus must be a positive number"):
        HarborLimits(cpus=0)


@pytest.mark.parametrize(
    "image",
    [
        "python:3.11",
        "python:3.11-slim",
        "python:3.11.9-slim-bookworm",
        "docker.io/library/python:3.11-bookworm",
        "debian:bookworm-slim",
        "debian:12",
        "debian:12.7-slim",
        "debian:bookworm-20240926-slim",
        "python:3.11-slim@sha256:" + "0" * 64,
        "agentgym/base:latest",
    ],
)
def test_debian_bookworm_and_python_311_bases_are_substituted(tmp_path, image):
    dockerfile, workdir = translate_dockerfile(f"FROM {image}\nRUN true\n", tmp_path)
    assert dockerfile == "RUN true" and workdir == "/workspace"


@pytest.mark.parametrize(
    ("dockerfile", "reason"),
    [
        ("FROM ubuntu:24.04", "ubuntu:24.04 would have to be pulled from a registry"),
        ("FROM python:3.12-slim", "python:3.12-slim would have to be pulled"),
        ("FROM python:3.11-alpine", "python:3.11-alpine would have to be pulled"),
        ("FROM ghcr.io/org/img:1", "ghcr.io/org/img:1 would have to be pulled"),
        ("FROM debian:bookworm AS build\nFROM debian:bookworm", "multi-stage builds"),
        ("FROM --platform=linux/amd64 debian:bookworm", "FROM flags"),
        ("RUN true", "before FROM"),
        ("FROM debian:bookworm\nCOPY --from=builder /x /x", "--from: not supported \\(it copies from another image"),
        ("FROM debian:bookworm\nADD https://example.com/a.tgz /a", "downloading at build time needs the network"),
        ("FROM debian:bookworm\nCOPY missing.txt /app/", "no such file in the task's environment/"),
        ("FROM debian:bookworm\nCOPY ../secret /app/", "outside the task's environment/"),
        ("FROM debian:bookworm\nRUN --mount=type=cache,target=/x true", "--mount"),
        ("FROM debian:bookworm\nRUN <<EOF\ntrue\nEOF", "heredocs"),
        ("FROM debian:bookworm\nVOLUME /data", "VOLUME is not supported \\(a volume is not part"),
        ("FROM debian:bookworm\nWORKDIR $HOME", "variables in WORKDIR"),
        ("# only a comment", "no FROM"),
    ],
)
def test_what_cannot_be_rebuilt_offline_says_why(tmp_path, dockerfile, reason):
    (tmp_path / "ctx").mkdir()
    (tmp_path / "secret").write_text("x")
    with pytest.raises(UnbuildableError, match=reason):
        translate_dockerfile(dockerfile, tmp_path / "ctx")


def test_continuations_comments_and_ignored_instructions(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    text = (
        "# syntax=docker/dockerfile:1\nFROM debian:bookworm-slim\nWORKDIR /srv\nWORKDIR app\n"
        "RUN echo one \\\n  # a comment inside\n  && echo two\nCOPY --chown=1000:1000 a.txt ./\n"
        'CMD ["sleep", "1"]\nEXPOSE 80\n'
    )
    dockerfile, workdir = translate_dockerfile(text, tmp_path)
    assert workdir == "/srv/app"
    assert dockerfile.splitlines() == [
        "WORKDIR /srv",
        "WORKDIR app",
        "RUN echo one && echo two",
        "COPY --chown=1000:1000 a.txt ./",
    ]


def test_a_system_working_directory_is_not_handed_to_the_agent(tmp_path):
    task_dir = copy_task(tmp_path)
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /usr/lib\n")
    assert "/usr/lib is a system directory" in read_task(task_dir).unbuildable


def test_the_image_tag_follows_the_content(tmp_path):
    task_dir = copy_task(tmp_path)
    tag = image_tag(read_task(task_dir), "sha256:base")
    assert tag == image_tag(read_task(task_dir), "sha256:base") and tag.startswith("agentgym/harbor:")
    assert image_tag(read_task(task_dir), "sha256:other") != tag
    (task_dir / "environment" / "stats.py").write_text("# changed\n")
    assert image_tag(read_task(task_dir), "sha256:base") != tag
    (task_dir / "instruction.md").write_text("Another instruction.")  # not part of the image
    assert image_tag(read_task(task_dir), "sha256:base") == image_tag(read_task(task_dir), "sha256:base")


def test_rewards_are_parsed_as_harbor_parses_them():
    assert _parse_reward_text(b"1\n") == {"reward": 1.0} and _parse_reward_text(b" 0.25 ") == {"reward": 0.25}
    assert _parse_reward_json(b'{"reward": 1, "style": 0.5}') == {"reward": 1.0, "style": 0.5}
    assert _main_reward({"reward": 0.5, "style": 1.0}) == 0.5 and _main_reward({"accuracy": 0.75}) == 0.75
    for bad in (b"", b"yes", b"\xff"):
        with pytest.raises(ValueError):
            _parse_reward_text(bad)
    for bad in (b"[1]", b"{}", b'{"reward": "1"}', b'{"reward": true}', b"{"):
        with pytest.raises(ValueError):
            _parse_reward_json(bad)
    for bad in ({"a": 1.0, "b": 1.0}, {"reward": float("nan")}, {"reward": float("inf")}):
        with pytest.raises(ValueError):
            _main_reward(bad)


# ------------------------------------------------------------------------------ episodes (Docker)


@pytest.fixture(scope="module")
def env(docker_ready):
    env = HarborEnv(path=TASKS, tasks=BUILDABLE)
    yield env
    env.close()


def submit(env, task_id: str, *actions: str) -> tuple[float, dict]:
    env.reset(options={"task_id": task_id})
    for action in actions:
        env.step(action)
    _, reward, terminated, truncated, info = env.step(call("submit"))
    assert terminated and not truncated and "env_error" not in info, info
    return reward, info


@pytest.mark.parametrize("task_id", BUILDABLE)
def test_the_oracle_scores_one_and_doing_nothing_zero(env, task_id):
    task = next(t for t in env.tasks() if t.id == task_id)
    _, reward, terminated, info = run_solution(env, task_id, task.reference_solution())
    assert (reward, terminated, info["success"], info["grade"]["error"]) == (1.0, True, True, None), info["grade"]
    reward, info = submit(env, task_id)
    assert (reward, info["success"], info["grade"]["reward"]) == (0.0, False, 0.0), info["grade"]
    assert info["grade"]["source"] and info["grade"]["error"] is None  # the tests ran and wrote 0


def test_a_correct_fix_by_the_agent_scores_one(env):
    reward, info = submit(env, "fix-mean", call("write_file", path="stats.py", content=FIXED_MEAN))
    assert reward == 1.0 and info["grade"]["log"].strip() == "all tests passed"


@pytest.mark.slow
def test_a_task_that_needs_the_network_to_build_says_why_at_reset(docker_ready):
    env = HarborEnv(path=TASKS, tasks=["needs-network", "private-registry"])
    try:
        with pytest.raises(HarborImageError) as raised:
            env.reset(options={"task_id": "needs-network"})
        message = str(raised.value)
        assert message.startswith("Harbor task needs-network cannot be built here: `RUN apt-get update")
        assert "failed with the network disabled" in message and "Unable to locate package jq" in message
        with pytest.raises(HarborImageError, match="private-registry cannot be built here: FROM registry.example"):
            env.reset(options={"task_id": "private-registry"})
    finally:
        env.close()


# ------------------------------------------------------------------------------ reward hacks (Docker)


def test_the_agent_sees_neither_tests_nor_solution_and_cannot_write_the_reward(env):
    env.reset(options={"task_id": "fix-mean"})
    obs, *_ = env.step(call("bash", command="id -u; ls -A /tests /solution /logs/verifier 2>&1; pwd"))
    assert obs["text"].splitlines()[0] == "1000" and "check_stats" not in obs["text"] and "solve.sh" not in obs["text"]
    assert "/tests': No such file" in obs["text"] and obs["text"].rstrip().endswith("/app")
    reward, info = submit(
        env,
        "fix-mean",
        call("bash", command="echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json"),
        call("write_file", path="/logs/verifier/reward.txt", content="1"),
    )
    assert reward == 0.0 and info["grade"]["source"] == "/logs/verifier/reward.txt"


def test_a_program_of_the_agent_first_on_path_is_not_what_the_tests_run(env):
    """The base image's PATH starts with ~/.local/bin; a fake python3 there would run as root in the verifier."""
    fake = "#!/bin/sh\necho '{\"reward\": 1}' > /logs/verifier/reward.json\necho all tests passed\n"
    planted = [
        call("write_file", path="/home/agent/.local/bin/python3", content=fake),
        call(
            "bash",
            command="chmod +x ~/.local/bin/python3 && cp ~/.local/bin/python3 ~/.local/bin/bash && which python3",
        ),
    ]
    env.reset(options={"task_id": "fix-mean"})
    for action in planted:
        obs, *_ = env.step(action)
    assert obs["text"].strip() == "/home/agent/.local/bin/python3"  # the agent's own shell finds it first
    reward, info = submit(env, "fix-mean", *planted)
    assert reward == 0.0 and "AssertionError" in info["grade"]["log"], info["grade"]


@pytest.mark.slow
def test_a_root_agent_cannot_plant_the_reward_nor_keep_writing_it(docker_ready):
    """Even an agent that is root in its container (a caller's sandbox_config) gets no reward it did not earn: the
    verifier empties /logs/verifier first (a planted reward.json would win over the tests' reward.txt) and runs
    in a fresh container, where the agent's background writer does not exist."""
    root = HarborEnv(
        path=TASKS,
        tasks=["fix-mean"],
        sandbox_config=SandboxConfig(user="0:0", state_file="/root/.agentgym_shell"),
    )
    writer = "while :; do echo '{\"reward\": 1}' > /logs/verifier/reward.json; sleep 0.05; done"
    try:
        reward, info = submit(
            root,
            "fix-mean",
            call("bash", command="id -u && echo '{\"reward\": 1}' > /logs/verifier/reward.json"),
            call(
                "bash", command=f"nohup sh -c {writer!r} >/dev/null 2>&1 & mkdir -p /tests && echo 1 > /tests/test.sh"
            ),
        )
        assert reward == 0.0 and info["grade"]["source"] == "/logs/verifier/reward.txt", info["grade"]
    finally:
        root.close()


# ------------------------------------------------------------------------------ branching (Docker)


def test_a_fork_grades_like_the_original_would(env):
    env.reset(options={"task_id": "write-greeting"})
    env.step(call("bash", command='sed "s/{name}/$GREETING_NAME/" template.txt > out/greeting.txt'))
    fork = env.fork()
    try:
        env.step(call("bash", command="echo wrong > out/greeting.txt"))
        _, fork_reward, *_ = fork.step(call("submit"))
        _, reward, *_ = env.step(call("submit"))
        assert (fork_reward, reward) == (1.0, 0.0)
    finally:
        fork.close()
