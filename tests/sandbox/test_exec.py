"""DockerSandbox.exec against the real engine: results, limits, persistent shell state and failure modes."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgym.sandbox import engine
from agentgym.sandbox.base import SandboxError
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig

pytestmark = pytest.mark.docker


def test_exit_codes_stdout_and_stderr(sandbox):
    result = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok and not result.timed_out
    assert sandbox.exec("true").ok


def test_stdin_reaches_the_command_and_ends_with_eof(sandbox):
    assert sandbox.exec("cat", stdin="hello\nworld").stdout == "hello\nworld"
    big = "z" * 3_000_000  # larger than the socket buffers: written while output is read
    assert sandbox.exec("wc -c; echo done", stdin=big).stdout == "3000000\ndone\n"
    assert sandbox.exec("cat").stdout == ""  # no stdin: the command reads EOF at once


def test_timeout_kills_the_command_quickly(sandbox):
    started = time.monotonic()
    result = sandbox.exec("sleep 100", timeout=1)
    assert result.exit_code == 124 and result.timed_out
    assert time.monotonic() - started < 5
    assert sandbox.exec("echo alive").stdout == "alive\n"


def test_background_process_holding_the_output_does_not_block(sandbox):
    started = time.monotonic()
    result = sandbox.exec("sleep 60 & echo started", timeout=30)
    assert result.stdout == "started\n" and time.monotonic() - started < 5


def test_output_is_capped_keeping_head_and_tail(sandbox):
    started = time.monotonic()
    result = sandbox.exec("yes | head -c 50000000; echo; echo LAST")
    assert result.exit_code == 0 and result.truncated
    assert len(result.stdout) < 70_000
    assert result.stdout.startswith("y\ny\n") and result.stdout.endswith("LAST\n")
    assert "bytes of output truncated ...]" in result.stdout
    assert time.monotonic() - started < 20


def test_cd_and_export_persist_across_commands(sandbox):
    assert sandbox.cwd == "/workspace" and sandbox.env == {}
    sandbox.exec("mkdir -p /tmp/w && cd /tmp/w && export FOO='a b' BAR=1")
    assert sandbox.exec('pwd; echo "$FOO|$BAR"').stdout == "/tmp/w\na b|1\n"
    assert sandbox.cwd == "/tmp/w" and sandbox.env == {"FOO": "a b", "BAR": "1"}
    sandbox.exec("unset BAR; export PATH=/opt/bin:$PATH")
    assert sandbox.exec('echo "${BAR-unset}"; echo $PATH').stdout.startswith("unset\n/opt/bin:")
    assert "BAR" not in sandbox.env


def test_one_off_workdir_and_env_do_not_persist(sandbox):
    sandbox.exec("export KEEP=1")
    result = sandbox.exec('pwd; echo "$KEEP $ONCE"', workdir="/tmp", env={"ONCE": "x", "KEEP": "2"})
    assert result.stdout == "/tmp\n2 x\n"
    assert sandbox.exec('pwd; echo "$KEEP ${ONCE-none}"').stdout == "/workspace\n1 none\n"
    assert sandbox.exec("pwd", workdir="/does/not/exist").exit_code == 1


def test_state_of_a_failing_command_persists_like_in_a_terminal(sandbox):
    assert sandbox.exec("cd /tmp && false").exit_code == 1
    assert sandbox.cwd == "/tmp"


def test_commands_longer_than_one_argument_allows(sandbox):
    payload = "x" * 300_000
    result = sandbox.exec(f"v={payload}; echo ${{#v}}")
    assert result.stdout == "300000\n"


def test_a_removed_container_raises(sandbox):
    engine.api().remove_container(sandbox.id, force=True)
    with pytest.raises(SandboxError):
        sandbox.exec("true")


def test_a_frozen_container_does_not_hang_the_caller(docker_ready):
    config = SandboxConfig(kill_grace=1, backstop_grace=1)
    with DockerSandbox.create(docker_ready, config=config, warm=False) as box:
        box.exec("true")
        threading.Timer(0.5, engine.api().pause, args=(box.id,)).start()
        started = time.monotonic()
        try:
            result = box.exec("sleep 3; echo finished", timeout=1)
        finally:  # on cgroup v1 the engine cannot remove a paused container: it would hang every later call
            time.sleep(max(0.0, started + 0.6 - time.monotonic()))
            engine.api().unpause(box.id)
        assert result.timed_out and time.monotonic() - started < 6
        assert box.exec("echo back").stdout == "back\n"


def test_closed_sandbox_raises_and_close_is_idempotent(sandbox):
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxError):
        sandbox.exec("true")


def test_sixteen_concurrent_sandboxes(docker_ready):
    def episode(i: int) -> list[str]:
        with DockerSandbox.create(docker_ready, warm=False) as box:
            return [box.exec(f"echo {i}-{n}").stdout for n in range(5)]

    with ThreadPoolExecutor(16) as workers:
        outputs = list(workers.map(episode, range(16)))
    assert outputs == [[f"{i}-{n}\n" for n in range(5)] for i in range(16)]
