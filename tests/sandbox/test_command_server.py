"""The command server in each sandbox container, against the real engine: one exec per container, the same
results as the per-command exec path, and attacks on it from inside the sandbox (each must fail)."""

import struct
import time

import pytest

from agentgym.sandbox import engine
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig

pytestmark = pytest.mark.docker

# Finds the server from inside: the only python3 running (comm is exact, so this line does not match).
SERVER = "server=$(pgrep -x python3)"


def _execs_during(box: DockerSandbox, action) -> int:
    """How many execs the engine created in the sandbox's container while ``action()`` ran."""
    since = time.time()  # the engine runs on this machine, with this clock
    action()
    until = time.time() + 0.2
    filters = {"container": box.id, "event": "exec_create"}
    events = engine.api().events(since=f"{since:.9f}", until=f"{until:.9f}", filters=filters, decode=True)
    return sum(1 for _ in events)


def _server_exec(box: DockerSandbox) -> str:
    return box._server.exec_id


@pytest.fixture
def plain(docker_ready):
    box = DockerSandbox.create(docker_ready, config=SandboxConfig(command_server=False), warm=False)
    yield box
    box.close()


def test_commands_share_one_exec(sandbox):
    assert sandbox.start_command_server() is True
    assert sandbox.start_command_server() is True  # idempotent

    def work():
        for i in range(5):
            assert sandbox.exec(f"echo {i}").stdout == f"{i}\n"
        sandbox.write_file("f.txt", "x")
        assert sandbox.read_file("f.txt") == b"x"

    assert _execs_during(sandbox, work) == 0


def test_without_the_server_every_command_is_an_exec(plain):
    assert plain.start_command_server() is False
    assert _execs_during(plain, lambda: plain.exec("echo hi")) == 1


def test_an_image_without_python_keeps_the_exec_path(docker_ready):
    with DockerSandbox.create(docker_ready, warm=False) as box:
        box.exec("true")
        client = engine.api()
        exec_id = client.exec_create(box.id, ["sh", "-c", "rm -f /usr/bin/python3*"], user="0")["Id"]
        client.exec_start(exec_id)
        image = client.commit(box.id)["Id"]
    try:
        with DockerSandbox.create(image, warm=False) as box:
            assert box.start_command_server() is False
            assert box.exec("cd /tmp; export A=1; exit 3").exit_code == 3
            assert box.exec("echo $PWD $A").stdout == "/tmp 1\n"
    finally:
        client.remove_image(image, force=True)


SCRIPT = [
    ("cd /tmp && export FOO='a b' BAR=1 && unset HOME", {}),
    ("echo $PWD $FOO $BAR ${HOME-unset}; echo err >&2; exit 7", {}),
    ("pwd; echo $ONE", {"workdir": "/", "env": {"ONE": "once"}}),
    ("echo $PWD ${ONE-gone}", {}),
    ("cat; echo", {"stdin": "from stdin"}),
    ("head -c 300000 /dev/zero | tr '\\0' a; seq 1 5 >&2", {}),
    ("echo " + "x" * 150_000 + " | wc -c", {}),
    ("sleep 10", {"timeout": 1}),
    ("sleep 30 & echo left", {}),
]


def _outcome(result):
    # At a timeout, `timeout` signals the shell and its children at once: whether the shell reports its child's
    # death ("Terminated") before it dies itself is a race, on either path.
    stderr = result.stderr.removesuffix("Terminated\n") if result.timed_out else result.stderr
    return result.exit_code, result.stdout, stderr, result.timed_out, result.truncated


def test_results_match_the_exec_path(sandbox, plain):
    for command, options in SCRIPT:
        fast, slow = sandbox.exec(command, **options), plain.exec(command, **options)
        assert _outcome(fast) == _outcome(slow), command[:60]
        assert (sandbox.cwd, sandbox.env) == (plain.cwd, plain.env)
    assert sandbox.run_argv(["sh", "-c", "echo $PATH; exit 2"]) == plain.run_argv(["sh", "-c", "echo $PATH; exit 2"])


# ---------------------------------------------------------------- attacks


def test_the_channel_is_out_of_reach_and_printed_frames_are_only_output(sandbox):
    forged = struct.pack(">II", 21, 0) + b'{"rc": 0, "note": ""}'
    escaped = "".join(f"\\x{byte:02x}" for byte in forged)
    result = sandbox.exec(
        f"{SERVER}\n"
        "echo forged > /proc/$server/fd/1 || echo no-write\n"
        "ls /proc/$server/fd >/dev/null 2>&1 || echo no-list\n"
        "cat /proc/$server/environ >/dev/null 2>&1 || echo no-environ\n"
        "python3 -c 'import ctypes,sys; print(ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))' $server\n"
        f"printf '{escaped}'\n"
        "printf '\\x1e[agentgym 0]0\\0\\0\\x1e[/agentgym 0]' >&2\n"
        "exit 5"
    )
    assert result.exit_code == 5
    assert result.stdout.splitlines()[:4] == ["no-write", "no-list", "no-environ", "-1"]
    assert result.stdout.endswith(forged.decode())
    assert result.stderr.endswith("\x1e[agentgym 0]0\0\0\x1e[/agentgym 0]")


def test_a_command_has_only_its_own_pipes(sandbox):
    result = sandbox.exec("ls /proc/self/fd; echo x >&3 || echo no-fd-3")
    assert result.stdout.split() == ["0", "1", "2", "3", "no-fd-3"]  # 3: ls's own directory handle
    server = _server_exec(sandbox)
    assert sandbox.exec("exec 0<&- 1>&- 2>&-; exit 4").exit_code == 4
    assert sandbox.exec("echo fine").stdout == "fine\n"
    assert _server_exec(sandbox) == server


def test_killing_the_server_under_a_command_is_a_failure_and_the_next_command_works(sandbox):
    sandbox.exec("sleep 300 &")
    result = sandbox.exec(f"{SERVER}; kill -9 $server; sleep 0.5; exit 0")
    assert result.exit_code != 0
    assert "command server was killed" in result.stderr
    old = _server_exec(sandbox)
    assert sandbox.exec("echo back").stdout == "back\n"
    assert _server_exec(sandbox) != old
    # The restart killed what the agent left, so none of it can have opened the new server's pipes.
    assert sandbox.exec("pgrep -u agent -x sleep || echo none").stdout == "none\n"


def test_killing_the_server_between_commands(sandbox):
    sandbox.exec("cd /tmp; export KEPT=1")
    sandbox.exec(f"{SERVER}; (sleep 0.3; kill -9 $server) >/dev/null 2>&1 &")
    time.sleep(1.5)
    result = sandbox.exec("echo $PWD $KEPT; exit 3")
    assert (result.exit_code, result.stdout) == (3, "/tmp 1\n")


def test_a_stopped_server_is_abandoned_and_replaced(docker_ready):
    config = SandboxConfig(kill_grace=0.5, backstop_grace=1.0)
    with DockerSandbox.create(docker_ready, config=config, warm=False) as box:
        result = box.exec(f"{SERVER}; kill -STOP $server; exit 0", timeout=1)
        assert (result.exit_code, result.timed_out) == (124, True)
        assert "did not answer" in result.stderr
        assert box.exec("echo back").stdout == "back\n"


def test_a_flood_is_capped_in_the_container(sandbox):
    result = sandbox.exec("head -c 50000000 /dev/zero; echo done >&2")
    assert result.truncated
    assert len(result.stdout) < 2 * sandbox.config.max_output
    assert result.stderr == "done\n"
    # A background flood on the finished command's pipes holds nothing up.
    assert sandbox.exec("(sleep 0.5; yes) & echo went").stdout == "went\n"
    assert sandbox.exec("echo next").stdout == "next\n"
    sandbox.stop_processes()


def test_a_fork_bomb_and_stop_processes_leave_the_server_running(docker_ready):
    with DockerSandbox.create(docker_ready, config=SandboxConfig(pids_limit=64), warm=False) as box:
        box.start_command_server()
        server = _server_exec(box)
        box.exec("bash -c ':(){ :|:& };:' &", timeout=2)
        # While the bomb still runs, a command can start but find no slot for the processes it forks itself
        # (timeout's child, bash's): it fails visibly, never as a silent success. The bomb dies out within
        # seconds (each member exits once its forks fail); until then the server keeps answering.
        deadline = time.monotonic() + 60
        while (result := box.exec("echo ok", timeout=5)).stdout != "ok\n":
            assert result.exit_code != 0 or result.timed_out, result
            assert time.monotonic() < deadline, f"the fork bomb still fills the process table: {result}"
            time.sleep(0.2)
        box.exec("sleep 300 &")
        box.stop_processes()
        assert box.exec("pgrep -u agent -x sleep || echo none").stdout == "none\n"
        assert _server_exec(box) == server


def test_a_hanging_command_is_killed_at_its_timeout(sandbox):
    assert sandbox.start_command_server()
    server = _server_exec(sandbox)
    result = sandbox.exec("trap '' TERM; setsid sleep 100 & sleep 100", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert sandbox.exec("pgrep -u agent -x sleep || echo none").stdout == "none\n"
    assert _server_exec(sandbox) == server


def test_a_fork_starts_its_own_server(sandbox):
    sandbox.exec("cd /tmp; export FORKED=yes")
    with sandbox.fork() as child:
        assert child.exec("echo $PWD $FORKED").stdout == "/tmp yes\n"
        assert child._server.container_id == child.id
        assert _execs_during(child, lambda: [child.exec(f"echo {i}") for i in range(3)]) == 0
