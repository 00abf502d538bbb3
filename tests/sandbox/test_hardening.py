"""The default confinement, checked from inside the sandbox: no network, no privileges, bounded processes and memory."""

import time

import pytest

from agentgym.sandbox.docker import DockerSandbox, SandboxConfig

pytestmark = pytest.mark.docker


def _status(sandbox, field: str) -> str:
    return sandbox.exec(f"grep '^{field}:' /proc/self/status | cut -f2").stdout.strip()


def test_no_network(sandbox):
    probe = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "try:\n    s.connect(('1.1.1.1', 53)); print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    sandbox.write_file("/tmp/probe.py", probe)
    assert sandbox.exec("python3 /tmp/probe.py").stdout.startswith("refused")
    assert sandbox.exec("ls /sys/class/net").stdout.split() == ["lo"]


def test_runs_as_uid_1000_without_capabilities(sandbox):
    assert sandbox.exec("id -u; id -g").stdout == "1000\n1000\n"
    assert int(_status(sandbox, "CapEff"), 16) == 0
    assert int(_status(sandbox, "CapBnd"), 16) == 0  # dropped, not merely unused by a non-root user


def test_no_new_privileges(sandbox):
    assert _status(sandbox, "NoNewPrivs") == "1"
    # even a setuid-root binary stays uid 1000
    assert sandbox.exec("su -c id root </dev/null").exit_code != 0


def test_root_filesystem_is_not_writable_by_the_agent(sandbox):
    assert sandbox.exec("touch /etc/agentgym-probe").exit_code != 0
    assert sandbox.exec("touch /workspace/f /home/agent/f /tmp/f").ok


def test_pids_limit_stops_a_fork_flood(docker_ready):
    with DockerSandbox.create(docker_ready, config=SandboxConfig(pids_limit=64), warm=False) as box:
        # bash retries a failed fork with back-off, so the loop outlives the timeout; its log shows why.
        flood = box.exec("for i in $(seq 200); do sleep 30 & done 2>/tmp/flood.log; wait", timeout=5)
        assert flood.timed_out
        assert "Resource temporarily unavailable" in box.read_file("/tmp/flood.log").decode()
        assert box.exec("echo still here").stdout == "still here\n"


def test_memory_and_cpu_limits_are_set(sandbox):
    limit = sandbox.exec(
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
    ).stdout.strip()
    assert int(limit) == 1024**3
    hog = sandbox.exec("python3 -c 'b = bytearray(2 * 1024 ** 3)'", timeout=30)
    assert hog.exit_code != 0
    assert sandbox.exec("echo survived").stdout == "survived\n"


def test_the_per_file_size_limit_is_hard(sandbox):
    assert sandbox.exec("ulimit -Hf").stdout == f"{SandboxConfig().disk_limit // 1024}\n"  # in KiB
    assert sandbox.exec("ulimit -f unlimited").exit_code != 0  # raising it needs CAP_SYS_RESOURCE


def test_the_keep_alive_process_is_out_of_the_agents_reach(sandbox):
    assert sandbox.exec("ps -o user= -p 1").stdout == "nobody\n"
    assert "Operation not permitted" in sandbox.exec("kill -9 $(pgrep -x sleep)").stderr


# A root agent's sandbox (AgentBench OS): root with a few capabilities back, the keep-alive still out of reach.
ROOT = SandboxConfig(
    user="0:0", working_dir="/tmp", cap_add=("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"), lease=3
)
AS_NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"


def test_a_root_agent_has_its_capabilities_and_its_keep_alive_is_nobodys_pid_1(docker_ready):
    with DockerSandbox.create(docker_ready, config=ROOT, warm=False) as box:
        assert box.exec("id -u").stdout == "0\n"
        assert int(_status(box, "CapEff"), 16) == (1 << 0) | (1 << 1) | (1 << 3) | (1 << 6) | (1 << 7)
        assert box.exec("touch /home/agent/f && chown 1000 /home/agent/f").ok  # another user's directory
        assert box.exec("ps -o user= -p 1; ps -o args= -p 1").stdout.startswith("nobody\n/bin/bash -c ")
        # root without CAP_KILL cannot signal nobody; as nobody (SETUID), pid 1 takes no signal it does not handle
        assert "Operation not permitted" in box.exec("kill -9 1; kill -9 $(pgrep -u nobody)").stderr
        box.exec(f"{AS_NOBODY} bash -c 'for s in KILL TERM INT HUP QUIT; do kill -$s 1; done'")
        box.exec("sleep 100 & setsid bash -c 'sleep 0.1 &'; sleep 1")
        assert box.exec("ps -eo stat= | grep -c Z").stdout == "0\n"  # pid 1 reaped the orphan
        box.stop_processes()  # kill(-1) by root: every root process, never the keep-alive
        assert box.exec("pgrep -x sleep -u 0 | wc -l").stdout == "0\n"
        time.sleep(4.5)  # past the 3 s lease: the owner's SIGUSR1s reach pid 1 (no init to forward them)
        assert box.exec("echo alive").stdout == "alive\n"


@pytest.mark.parametrize(
    "user,cap_add",
    [("1000:1000", ("CHOWN", "SETUID", "SETGID")), ("0:0", ("CHOWN",)), ("0:0", ("SETUID", "SETGID", "KILL"))],
)
def test_capabilities_come_back_only_to_a_root_agent_whose_keep_alive_can_drop_to_nobody(user, cap_add):
    with pytest.raises(ValueError, match="cap_add is for a root agent"):
        SandboxConfig(user=user, cap_add=cap_add)
