"""Attacks on the sandbox from inside it (what a policy under RL finds), against the real engine: each must fail.

The first part drives DockerSandbox directly; the second drives a code env through its tools,
as a model would, and checks what the step reports.
"""

import re
import threading
import time

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.sandbox import disk, engine, labels
from agentgym.sandbox.base import DiskLimitError, FileTooLargeError, SandboxError
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
from agentgym.sandbox.pool import WarmPool
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker

MiB = 1024**2


def _alive(box, word: str) -> str:
    """The command lines of the sandbox's processes that contain ``word``."""
    # As a regex [a]bc matches "abc" but not the command line that holds "[a]bc" (this one's).
    return box.exec(f"pgrep -af -- '[{word[0]}]{word[1:]}' || true").stdout


def _rss_peak_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


def _reset_rss_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


# ---------------------------------------------------------------- file tools act as the agent


def test_write_file_cannot_write_where_the_agent_cannot(sandbox):
    sandbox.exec("ln -s /etc /workspace/etc-link")
    for path in ("/etc/agentgym-probe", "/usr/local/bin/timeout", "/workspace/etc-link/agentgym-probe"):
        with pytest.raises(PermissionError):
            sandbox.write_file(path, '#!/bin/sh\nexec "$@"\n', mode=0o755)
    assert sandbox.exec("ls /etc/agentgym-probe /usr/local/bin/timeout").exit_code == 2
    sandbox.write_file("/workspace/ok/fine.txt", "fine")
    assert sandbox.exec("stat -c '%u %a' ok/fine.txt").stdout == "1000 644\n"


def test_put_tree_lands_only_where_the_agent_could_write(sandbox, tmp_path):
    (tmp_path / "timeout").write_text('#!/bin/sh\nexec "$@"\n')
    sandbox.exec("ln -s /usr/local/bin /workspace/bin-link")
    with pytest.raises(SandboxError):
        sandbox.put_tree("/workspace/bin-link", tmp_path)
    assert sandbox.exec("ls /usr/local/bin/timeout").exit_code == 2


def test_read_file_reads_as_the_agent(sandbox):
    with pytest.raises(PermissionError):
        sandbox.read_file("/etc/shadow")
    with pytest.raises(OSError, match="not a regular file"):
        sandbox.read_file("/dev/zero")  # nor does it block on a device or a FIFO


def test_programs_first_on_path_cannot_replace_the_wrappers(sandbox):
    # ~/.local/bin comes first on $PATH and belongs to the agent: a `timeout` there that drops its
    # options ("-k GRACE LIMIT") would run every later command without a limit.
    sandbox.write_file("/home/agent/.local/bin/timeout", '#!/bin/sh\nshift 3\nexec "$@"\n', mode=0o755)
    for name in ("cat", "head", "stat", "tar"):
        sandbox.write_file(f"/home/agent/.local/bin/{name}", "#!/bin/sh\necho forged\n", mode=0o755)
    started = time.monotonic()
    result = sandbox.exec("/bin/sleep 6", timeout=1)
    assert result.timed_out and time.monotonic() - started < 5
    sandbox.write_file("/workspace/f", "content")
    assert sandbox.read_file("/workspace/f") == b"content"


# ---------------------------------------------------------------- process trees


def test_a_timeout_kills_what_left_the_session(sandbox):
    result = sandbox.exec(
        "setsid nohup bash -c 'while :; do sleep 0.2; done # agentgym-loop' >/dev/null 2>&1 & sleep 100", timeout=2
    )
    assert result.timed_out
    assert "agentgym-loop" not in _alive(sandbox, "agentgym-loop")


def test_stop_processes_kills_everything_the_agent_left(sandbox):
    sandbox.exec("setsid nohup bash -c 'while :; do sleep 0.2; done # agentgym-loop' >/dev/null 2>&1 &")
    sandbox.exec("sleep 1000 &")
    assert "agentgym-loop" in _alive(sandbox, "agentgym-loop")
    sandbox.stop_processes()
    assert _alive(sandbox, "agentgym-loop") == _alive(sandbox, "sleep 1000") == ""
    assert sandbox.exec("echo still here").stdout == "still here\n"


def test_the_agent_cannot_kill_its_container(sandbox):
    sandbox.exec("kill -9 1; kill -9 -1")  # kills the command's own wrapper too: an ordinary result
    assert sandbox.exec("echo alive").stdout == "alive\n"


@pytest.mark.parametrize("bomb", [":(){ :|:& };:", "setsid bash -c 'while :; do sleep 100 & done' >/dev/null 2>&1 &"])
def test_a_fork_bomb_does_not_outlive_its_command(docker_ready, bomb):
    with DockerSandbox.create(docker_ready, config=SandboxConfig(pids_limit=64), warm=False) as box:
        box.exec(bomb, timeout=3)
        time.sleep(1)  # a bomb that backgrounded itself fills the table meanwhile
        result = box.exec("echo ok", timeout=5)
        assert result.stdout == "ok\n"
        assert int(box.exec("cat /sys/fs/cgroup/pids/pids.current").stdout) < 16


# ---------------------------------------------------------------- disk


def test_a_file_cannot_outgrow_the_disk_limit(sandbox):
    result = sandbox.exec("fallocate -l 3G /workspace/big; echo $?; stat -c %s /workspace/big")
    assert result.stdout.split() == ["153", "0"], result  # SIGXFSZ: past the per-file limit
    assert (
        sandbox.exec("head -c 3000000 /dev/zero > /workspace/small && stat -c %s /workspace/small").stdout
        == "3000000\n"
    )


@pytest.fixture
def metered_sandbox(docker_ready):
    """A sandbox with a 64 MiB disk limit that the writable-layer meter enforces (not an engine quota)."""
    if disk.engine_enforces_size(docker_ready):
        pytest.skip("this engine enforces the size itself: the writes fail with ENOSPC instead")
    with DockerSandbox.create(docker_ready, config=SandboxConfig(disk_limit=64 * MiB), warm=False) as box:
        yield box


def test_many_files_over_the_limit_end_the_sandbox(metered_sandbox):
    metered_sandbox.exec("fallocate -l 40M /workspace/a")
    with pytest.raises(DiskLimitError, match="disk limit"):
        metered_sandbox.exec("for i in 1 2 3; do fallocate -l 20M /tmp/f$i; done")


def test_one_command_cannot_write_far_past_the_limit_before_it_is_measured(metered_sandbox):
    # 40 files of 32 MiB (1.25 GiB) in one command: a meter that measured only after the command let it all
    # land on the host. Measured while it runs, its processes are killed a few files past the 64 MiB limit.
    with pytest.raises(DiskLimitError, match="disk limit"):
        metered_sandbox.exec("for i in $(seq 40); do fallocate -l 32M /tmp/f$i; sleep 0.1; done")
    assert _layer_bytes(metered_sandbox) <= 64 * MiB + 8 * 32 * MiB  # 0.8 s of the loop at most, not 1.25 GiB


def test_files_nested_past_path_max_count_against_the_limit(metered_sandbox):
    # 30 levels of 200-character names: no path reaches the bottom (PATH_MAX is 4,096 bytes), so a meter that
    # walks by path would not see the 40 MiB there.
    metered_sandbox.exec(f"for i in $(seq 30); do mkdir {'d' * 200} && cd {'d' * 200}; done; fallocate -l 40M f")
    with pytest.raises(DiskLimitError, match="disk limit"):
        metered_sandbox.exec("fallocate -l 30M /workspace/g")


def test_snapshot_layers_count_against_the_forks_limit(metered_sandbox):
    metered_sandbox.exec("fallocate -l 40M /workspace/a")
    with metered_sandbox.fork() as fork:
        with pytest.raises(DiskLimitError):
            fork.exec("fallocate -l 40M /workspace/b")


@pytest.fixture
def quota_sandbox(docker_ready):
    """A sandbox with a 64 MiB disk limit that the engine enforces (overlay2 on XFS with project quotas: the
    data root scripts/setup.sh gives the dockerd it starts, see scripts/docker-xfs-root.sh)."""
    if not disk.engine_enforces_size(docker_ready):
        pytest.skip("this engine has no size quota (overlay2 not on XFS with pquota): the meter enforces the limit")
    with DockerSandbox.create(docker_ready, config=SandboxConfig(disk_limit=64 * MiB), warm=False) as box:
        yield box


def _layer_bytes(box) -> int:
    return disk.DiskMeter(box.id, box.config.disk_limit).measure(force=True)


def test_writing_until_full_stops_at_the_quota_in_one_command(quota_sandbox, docker_ready):
    # The soft limit's hole: many files written in one command, all on the host before any measurement.
    # Under the quota the writes themselves fail (ENOSPC), as on a full disk, and the layer never holds more.
    result = quota_sandbox.exec(
        "for i in $(seq 20); do head -c 20M /dev/zero > /tmp/f$i || { echo full at $i; break; }; done"
    )
    # 60 MiB fit, 80 MiB do not: the write fails as on a full disk (XFS: ENOSPC; btrfs: EDQUOT).
    assert result.stdout == "full at 4\n" and re.search("No space left on device|Disk quota exceeded", result.stderr)
    assert _layer_bytes(quota_sandbox) <= 64 * MiB + disk._QUOTA_SLACK  # what a quota counts beyond file data
    with DockerSandbox.create(docker_ready, config=SandboxConfig(disk_limit=64 * MiB), warm=False) as other:
        assert other.exec("head -c 40M /dev/zero > /tmp/mine && echo ok").stdout == "ok\n"  # its own quota
    # As on a full disk, the agent may delete files and go on.
    assert quota_sandbox.exec("rm /tmp/f*; head -c 20M /dev/zero > /tmp/again && echo ok").stdout == "ok\n"


def test_a_forks_quota_leaves_out_what_its_snapshot_holds(quota_sandbox):
    quota_sandbox.exec("fallocate -l 40M /workspace/a")
    with quota_sandbox.fork() as fork:
        result = fork.exec("head -c 40M /dev/zero > /workspace/b || { echo full; rm /workspace/b; }")
        assert "full" in result.stdout  # 40 MiB in the snapshot + 40 MiB more is over 64 MiB
        assert fork.exec("head -c 10M /dev/zero > /workspace/c && echo ok").stdout == "ok\n"


# ---------------------------------------------------------------- host memory


def test_host_memory_stays_bounded_by_huge_sandbox_files(sandbox):
    sandbox.exec("truncate -s 300M /workspace/sparse && mkdir -p /workspace/t && truncate -s 300M /workspace/t/s")
    _reset_rss_peak()
    before = _rss_peak_kib()
    with pytest.raises(FileTooLargeError):
        sandbox.read_file("/workspace/sparse")
    data, total, cut = sandbox.read_lines("/workspace/sparse", 1, 1, max_bytes=20_000)
    assert (len(data), total, cut) == (20_000, 1, True)
    sandbox.fs_hash(["/workspace/t"])
    with pytest.raises(FileTooLargeError):
        sandbox.run_argv(["cat", "/workspace/sparse"], max_bytes=MiB)
    # The shell state file is the agent's: a command can fill it after its own save.
    sandbox.exec(
        "trap - EXIT; { printf '/workspace\\0BIG='; head -c 50000000 /dev/zero | tr '\\0' a; printf '\\0'; }"
        " > ~/.agentgym_shell"
    )
    assert len(sandbox.env.get("BIG", "")) <= 1 << 20
    assert _rss_peak_kib() - before < 60 * 1024


# ---------------------------------------------------------------- faults where they happen


def test_a_container_killed_under_a_command_raises(sandbox):
    sandbox.exec("true")
    threading.Timer(1.0, engine.api().kill, args=(sandbox.id,)).start()
    with pytest.raises(SandboxError, match="stopped|removed"):
        sandbox.exec("sleep 30")


def test_an_oom_kill_in_a_live_container_is_the_commands_result(docker_ready):
    with DockerSandbox.create(docker_ready, config=SandboxConfig(mem_limit="256m"), warm=False) as box:
        result = box.exec("python3 -c 'b = bytearray(1024 ** 3)'", timeout=30)
        assert result.exit_code == 137 and not result.timed_out
        assert box.exec("echo alive").stdout == "alive\n"


def test_the_pool_replaces_containers_that_died_while_idle(docker_ready):
    filters = {"label": [*labels.session_filter()["label"], f"{labels.KIND}={labels.KIND_POOL}"]}
    others = {c["Id"] for c in engine.api().containers(filters=filters)}  # the default pool's
    with WarmPool(2) as pool:
        pool.prewarm(docker_ready, wait=True)
        idle = [c["Id"] for c in engine.api().containers(filters=filters) if c["Id"] not in others]
        assert len(idle) == 2
        for container_id in idle:
            engine.api().kill(container_id)
        boxes = [DockerSandbox.create(docker_ready, pool=pool) for _ in range(4)]
        try:
            assert all(box.id not in idle for box in boxes)
            assert [box.exec("echo ok").stdout for box in boxes] == ["ok\n"] * 4
        finally:
            for box in boxes:
                box.close()


# ---------------------------------------------------------------- through a code env's tools


@pytest.fixture
def code_env(docker_ready):
    env = gymnasium.make("agentgym/code.humaneval-v0", exec_timeout=1, max_exec_timeout=2).unwrapped
    env.reset(options={"task_id": "HumanEval/0"})
    yield env
    env.close()


def test_file_tools_refuse_what_bash_could_not_do(code_env):
    code_env.sandbox.exec("ln -s /etc /workspace/etc-link")
    for path in ("/etc/x", "/usr/local/bin/timeout", "/workspace/etc-link/x"):
        obs, _, terminated, truncated, info = code_env.step(call("write_file", path=path, content="x"))
        assert "permission denied" in info["error"] and not (terminated or truncated), obs
        assert "env_error" not in info
    obs, *_, info = code_env.step(call("str_replace", path="/etc/passwd", old="root:x", new="root:"))
    assert "permission denied" in info["error"]
    obs, *_, info = code_env.step(call("read_file", path="/etc/shadow"))
    assert "permission denied" in info["error"]


def test_an_agent_chosen_timeout_is_capped(code_env):
    bash = next(tool for tool in code_env.tools() if tool.name == "bash")
    assert "at most 2" in bash.properties["timeout"]["description"]
    started = time.monotonic()
    obs, *_, info = code_env.step(call("bash", command="sleep 30", timeout=1000000))
    assert info["exit_code"] == 124 and time.monotonic() - started < 6
    assert "timeout capped at 2 s" in obs["text"]


def test_submit_stops_what_the_agent_left_running(code_env):
    code_env.step(
        call("bash", command="setsid nohup bash -c 'while :; do sleep 0.2; done # agentgym-loop' >/dev/null 2>&1 &")
    )
    _, _, terminated, _, info = code_env.step(call("submit"))
    assert terminated and "env_error" not in info
    assert "agentgym-loop" not in _alive(code_env.sandbox, "agentgym-loop")


def test_a_huge_file_gets_a_hint_not_the_host_memory(code_env):
    code_env.sandbox.exec("truncate -s 300M /workspace/sparse; seq 1 200000 > /workspace/long.txt")
    _reset_rss_peak()
    before = _rss_peak_kib()
    obs, *_, info = code_env.step(call("read_file", path="/workspace/sparse"))
    assert "env_error" not in info and "truncated after" in obs["text"]
    obs, *_, info = code_env.step(call("str_replace", path="/workspace/sparse", old="a", new="b"))
    assert "str_replace edits files of up to" in info["error"]
    assert _rss_peak_kib() - before < 60 * 1024
    obs, *_ = code_env.step(call("read_file", path="/workspace/long.txt", start_line=199999))
    assert obs["text"] == "199999\t199999\n200000\t200000"


def test_writing_past_the_disk_limit_ends_the_episode_as_the_agents_failure(docker_ready):
    if disk.engine_enforces_size(docker_ready):
        pytest.skip("this engine enforces the size itself")
    env = gymnasium.make(
        "agentgym/code.humaneval-v0", sandbox_config=SandboxConfig(disk_limit=64 * MiB), warm_pool=False
    ).unwrapped
    try:
        env.reset(options={"task_id": "HumanEval/0"})
        # Not an env error: that sample would be dropped or retried, and filling the disk would let a
        # policy about to fail escape its 0.
        _, reward, terminated, truncated, info = env.step(
            call("bash", command="for i in 1 2 3 4; do fallocate -l 20M f$i; done")
        )
        assert terminated and not truncated and reward == 0.0 and not info["success"]
        assert "disk limit" in info["limit_exceeded"] and "env_error" not in info
    finally:
        env.close()


def test_a_container_killed_under_a_step_is_an_env_error(code_env):
    threading.Timer(0.5, engine.api().kill, args=(code_env.sandbox.id,)).start()
    _, _, _, truncated, info = code_env.step(call("bash", command="sleep 1.5"))
    assert truncated and ("stopped" in info["env_error"] or "removed" in info["env_error"])
