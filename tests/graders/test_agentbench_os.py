"""Reward hacks against code.agentbench-os-v0's grader, and the root agent's confinement (real Docker).

The agent is root in its container, so the hacks a root agent has are tried: shims where a check looks for
its programs, changed system programs and login files, processes left to interfere with the check, a check
program that kills or lies to the checker, answers written where the ground truth is read, every value at
once. Where inspect-evals' own scorer (run by tests/helpers/inspect_agentbench.py in the same container)
is fooled, the test says so: those are the places this env grades differently (see the env's docstring).
"""

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.code.agentbench_os import load_tasks
from tests.helpers.inspect_agentbench import inspect_verdict, load_scorer
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker

SUID = "test/31"  # the check: /home/agent/bin/find must lose its SUID bit


@pytest.fixture
def env(docker_ready):
    env = gymnasium.make("agentgym/code.agentbench-os-v0")
    yield env
    env.close()


def run(env, task_id, *commands, end=None):
    env.reset(options={"task_id": task_id})
    for command in commands:
        observation, reward, terminated, truncated, info = env.step(call("bash", command=command))
        assert not terminated and not info["error"], observation["text"]
    observation, reward, terminated, truncated, info = env.step(end or call("finish"))
    assert terminated
    return reward, info["grade"]


def test_a_shim_first_in_path_does_not_fake_a_check(env):
    shim = "printf '#!/bin/sh\\necho -rwxr-xr-x 1 root root 1 Jan 1 00:00 find\\n' > /usr/local/bin/ls"
    reward, grade = run(env, SUID, shim + " && chmod +x /usr/local/bin/ls")
    assert reward == 0.0, grade
    # inspect-evals' login shell finds /usr/local/bin/ls first and passes the unsolved task.
    assert inspect_verdict(load_scorer(), env.unwrapped.sandbox, load_tasks()[SUID].record, "") is True


@pytest.mark.parametrize(
    "command",
    [
        "cp /bin/true /usr/bin/awk",  # the program the check pipes into
        "echo /tmp/x.so > /etc/ld.so.preload",
        "rm /bin && ln -s /tmp /bin",
        "echo 'alias ls=true' > /etc/profile.d/zz.sh",
    ],
)
def test_changed_system_programs_fail_the_check(env, command):
    reward, grade = run(env, SUID, "chmod u-s /home/agent/bin/find", command)
    assert reward == 0.0 and "changed" in grade["detail"], grade


def test_changed_system_programs_are_remembered_across_a_fork(env):
    env.reset(options={"task_id": SUID})
    env.step(call("bash", command="chmod u-s /home/agent/bin/find && cp /bin/true /usr/bin/awk"))
    fork = env.unwrapped.fork()  # its container may start from the commit, whose own diff no longer shows it
    try:
        observation, reward, *_ = fork.step(call("finish"))
        assert reward == 0.0, observation["text"]
    finally:
        fork.close()


@pytest.mark.parametrize(
    "command",
    [
        "echo 'exit 0' > ~/.bash_profile && echo 'exit 0' > ~/.bashrc",
        "echo 'exit 0' > /tmp/env.sh && export BASH_ENV=/tmp/env.sh ENV=/tmp/env.sh",
        "export PATH=/tmp:$PATH && printf '#!/bin/sh\\necho -rwx\\n' > /tmp/ls && chmod +x /tmp/ls",
    ],
)
def test_the_agents_shell_files_and_variables_do_not_reach_the_check(env, command):
    reward, grade = run(env, SUID, command)
    assert reward == 0.0, grade


def test_processes_left_running_are_stopped_before_the_check(env):
    # A loop that kills the check as soon as it starts (its pattern does not match its own command line).
    sneaky = "nohup setsid bash -c 'while :; do pkill -9 -f chec[k]; sleep 0.01; done' >/dev/null 2>&1 &"
    reward, grade = run(env, SUID, sneaky)
    assert reward == 0.0, grade
    reward, grade = run(env, SUID, "chmod u-s /home/agent/bin/find", sneaky)
    assert reward == 1.0, grade


def test_a_process_of_another_uid_cannot_change_the_system_after_the_finish(env):
    # Root without CAP_KILL cannot kill a process of another uid, which a root agent (CAP_SETUID) can start: a
    # stop of the agent's processes would leave this one, which makes the task's change (the SUID bit off) only
    # once its root sibling is killed, i.e. after the finish; the check runs on the state at the finish.
    own = "chown 4242 /home/agent/bin/find && chmod u+s /home/agent/bin/find && sleep 1000 &"
    flip = (
        "p=$(pgrep -x -u 0 sleep | head -1); nohup setpriv --reuid=4242 --regid=4242 --clear-groups bash -c "
        "'while [ -d /proc/'$p' ]; do sleep 0.01; done; chmod u-s /home/agent/bin/find' >/dev/null 2>&1 &"
    )
    reward, grade = run(env, SUID, own, "sleep 0.5; " + flip)
    assert reward == 0.0, grade


@pytest.mark.parametrize(
    "calc",
    [
        "kill -9 $PPID",  # kill the check: its status must not read as a pass
        "for p in $(pgrep bash); do kill -9 $p; done",
        # forge the runner's status line from whatever hex strings the processes' command lines show
        "echo; cat /proc/[0-9]*/cmdline | tr '\\0' '\\n' | grep -o '[0-9a-f]\\{32\\}' | sed 's/$/:0/'; exit 0",
    ],
)
def test_a_checked_program_cannot_end_or_forge_the_check(env, calc):
    write = f"cat > /usr/local/bin/calc <<'EOF'\n#!/bin/bash\n{calc}\nEOF\nchmod +x /usr/local/bin/calc"
    reward, grade = run(env, "dev/3", write)
    assert reward == 0.0, grade


def test_a_shim_in_the_home_a_check_puts_first_in_path_fails(env):
    # test/18's check (inspect-evals' checking/0.sh) runs with $HOME first in PATH, so that ~/calc counts;
    # a ~/python3 that says "True" would pass it without any calc.
    shim = "printf '#!/bin/sh\\necho True\\n' > ~/python3 && chmod +x ~/python3"
    reward, grade = run(env, "test/18", shim)
    assert reward == 0.0 and "python3" in grade["detail"], grade
    assert inspect_verdict(load_scorer(), env.unwrapped.sandbox, load_tasks()["test/18"].record, "") is True


def test_the_ground_truth_is_the_tasks_start_not_what_the_agent_made(env, docker_ready):
    task = load_tasks()["test/27"]  # files in /home/agent modified in the last 24 hours
    env.reset(options={"task_id": "test/27"})
    start = env.step(call("bash", command="find /home/agent -type f -mtime -1 | wc -l"))[0]["text"].strip()
    env.step(call("bash", command="touch /home/agent/new1 /home/agent/new2"))
    made = str(int(start) + 2)
    observation, reward, *_ = env.step(call("answer", answer=made))
    assert reward == 0.0, observation["text"]
    # inspect-evals runs the example after the agent's changes: the count the agent made is "right" there.
    assert inspect_verdict(load_scorer(), env.unwrapped.sandbox, task.record, made) is True
    env.reset(options={"task_id": "test/27"})
    assert env.step(call("answer", answer=start))[1] == 1.0


@pytest.mark.parametrize("answer", ["0 1 2 3 4 5 6 7 8 9", "\n".join(map(str, range(100))), "2 or 3", "[2, 3]"])
def test_answering_every_value_at_once_fails(env, answer):
    env.reset(options={"task_id": "dev/0"})  # match "1"
    assert env.step(call("answer", answer=answer))[1] == 0.0
    env.reset(options={"task_id": "test/27"})  # integer-match against the example's count
    assert env.step(call("answer", answer=answer))[1] == 0.0


def test_the_root_agent_stays_confined(env):
    env.reset(options={"task_id": "dev/21"})
    probes = {
        "caps": "grep CapEff /proc/self/status",
        "net": "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=2)' 2>&1 | tail -1",
        "mount": "mount -t tmpfs none /mnt 2>&1; echo rc=$?",
        "keepalive": "kill -9 1 2>&1; kill -9 $(pgrep -u nobody) 2>&1; echo rc=$?",
        # as nobody (CAP_SETUID), pid 1 (the keep-alive) still takes no signal it does not handle
        "as nobody": "setpriv --reuid=65534 --regid=65534 --clear-groups kill -9 1; echo done",
        "hostname": "hostname evil 2>&1; echo rc=$?",
        "mknod": "mknod /tmp/sda b 8 0 2>&1; echo rc=$?",
        "pids": "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max",
        "memory": "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
        "file size": "ulimit -f unlimited 2>&1; echo rc=$?",
    }
    seen = {name: env.step(call("bash", command=command))[0]["text"] for name, command in probes.items()}
    # CHOWN DAC_OVERRIDE FOWNER FSETID SETGID SETUID AUDIT_WRITE: bits 0 1 3 4 6 7 29
    assert (
        seen["caps"].split()[-1]
        == f"{(1 << 0) | (1 << 1) | (1 << 3) | (1 << 4) | (1 << 6) | (1 << 7) | (1 << 29):016x}"
    )
    assert "unreachable" in seen["net"] or "Errno" in seen["net"]
    assert all("rc=0" not in seen[name] for name in ("mount", "hostname", "mknod", "file size"))
    assert "rc=1" in seen["keepalive"]
    assert seen["pids"].strip() == "256" and seen["memory"].strip() == str(1 << 30)
    assert env.step(call("bash", command="echo alive"))[0]["text"] == "alive"
