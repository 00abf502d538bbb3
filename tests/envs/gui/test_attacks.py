"""Attacks on the desktop env from the policy's side (each must fail): actions that would run programs, a helper
channel the agent's processes could reach, unbounded reads on the host, a killed helper as a way out of a 0,
and modules the agent leaves for the checker to import.

The policy acts through ``env.step`` text; where an attack needs code running in the container (which no action
can start), the test runs it as the agent's user with ``sandbox.exec``, standing in for any such foothold.
"""

import zlib

import pytest

from agentgym.envs.gui.env import SandboxFiles
from agentgym.envs.gui.tasks import FILES_ROOT
from agentgym.sandbox import deskctl
from agentgym.sandbox import desktop as desktop_module
from agentgym.sandbox.base import SandboxError
from agentgym.sandbox.desktop import DesktopSandbox, Screen

pytestmark = pytest.mark.docker

# How the agent finds its helper: by its command line, which it can read (the channel it cannot).
HELPER = "helper=$(pgrep -f 'agentgym-desktop-[h]elper|deskctl[.]py serve' | head -1)"


def _no_file_named(env, name: str) -> bool:
    return env.desktop.sandbox.exec(f"find / -xdev -name {name} 2>/dev/null | head -1").stdout == ""


def test_key_and_type_actions_run_no_program(env):
    env.reset(options={"task_id": "xedit-append-todo"})
    # xdotool reads "exec" as a command of its own: key() once ran `touch pwned` as the agent's user.
    for reply in ('key("exec touch pwned")', 'key("ctrl+a exec touch pwned")', 'key("Return type exec touch pwned")'):
        observation, reward, terminated, truncated, info = env.step(reply)
        assert "No such key name" in info["error"] and not terminated and not truncated, reply
    # type() passes its text as one argument, which xdotool types whatever its words.
    _, _, _, _, info = env.step('type("exec touch pwned")')
    assert info["error"] is None
    assert _no_file_named(env, "pwned")


def test_the_helper_channel_is_out_of_reach_of_the_agent(env):
    env.reset(options={"task_id": "files-delete-todo"})
    # A forged answer: a small header claiming a screenshot, and a body that inflates to 300 MiB.
    bomb = zlib.compress(b"\0" * (300 << 20), 9)
    forged = b'{"size": %d, "windows": [], "focused": null, "pointer": [0, 0], "a11y": {}, "stable": true}\n' % len(
        bomb
    )
    env.desktop.sandbox.write_file("/tmp/forged", forged + bomb)
    result = env.desktop.sandbox.exec(
        f'{HELPER}; test -n "$helper" || exit 9\n'
        "cat /tmp/forged > /proc/$helper/fd/1 2>/dev/null || echo no-write\n"
        "echo '{}' > /proc/$helper/fd/0 2>/dev/null || echo no-request\n"
        "ls /proc/$helper/fd >/dev/null 2>&1 || echo no-list\n"
        "cat /proc/$helper/environ >/dev/null 2>&1 || echo no-environ\n"
        "python3 -c 'import ctypes,sys; print(ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))' $helper\n"
    )
    assert result.stdout.split() == ["no-write", "no-request", "no-list", "no-environ", "-1"], result
    # The channel is intact: the next step is a real observation of the app.
    observation, _, _, _, info = env.step("move(10, 11)")
    assert info["error"] is None and "env_error" not in info and "pointer at (10, 11)" in observation["text"]
    assert observation["image"].shape == (768, 1024, 3) and observation["image"].any()


def test_what_the_agent_writes_for_the_helper_is_bounded(env):
    env.reset(options={"task_id": "files-delete-todo"})
    sandbox = env.desktop.sandbox
    # The accessibility folder is the agent's (its apps write there): huge summaries, many of them, a fifo.
    sandbox.exec(
        "cd /tmp/agentgym/a11y && head -c 20000000 /dev/zero | tr '\\0' x > huge.txt && mkfifo a-stuck.txt"
        " && for n in $(seq 100); do echo $n > many-$n.txt; done"
    )
    observation, _, _, _, info = env.step("move(20, 21)")
    assert info["error"] is None and "env_error" not in info
    state = env.desktop.observe()
    assert len(state.a11y) <= deskctl.A11Y_FILES and "a-stuck" not in state.a11y
    assert len(state.a11y["huge"]) == deskctl.A11Y_BYTES
    assert len(observation["text"]) < 1 << 20


def test_a_zlib_bomb_is_refused_without_inflating_it():
    from agentgym.sandbox.desktop import _inflate

    bomb = zlib.compress(b"\0" * (300 << 20), 9)
    assert len(bomb) < 400 << 10
    with pytest.raises(SandboxError, match="inflates past"):
        _inflate(bomb, Screen().screenshot_bytes)
    with pytest.raises(SandboxError, match="does not inflate"):
        _inflate(b"not zlib", 100)


@pytest.mark.parametrize(
    "answer, problem",
    [
        # A screenshot that inflates to 300 MiB from a body of a few hundred KiB.
        (lambda bomb: b'{"size": %d}\n' % len(bomb) + bomb, "inflates past"),
        # A body far over what a screenshot of the screen can take: refused before it is read.
        (lambda bomb: b'{"size": %d}\n' % (1 << 31), "body of 2147483648 bytes"),
        # A header line that never ends.
        (lambda bomb: b"{" + b" " * (2 << 20), "header is over"),
    ],
)
def test_the_host_bounds_every_answer_of_the_helper(desktop_image, monkeypatch, answer, problem):
    """A helper that answers as a forger would (the real channel, a forging helper): the host refuses each."""
    bomb = zlib.compress(b"\0" * (300 << 20), 9)
    forger = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "sys.stdin.buffer.readline()\n"
        "out.write(b'{\"size\": 0}\\n'); out.flush()\n"  # the start
        "sys.stdin.buffer.readline()\n"
        f"out.write({answer(bomb)!r}); out.flush()\n"
        "sys.stdin.buffer.readline()\n"
    ).encode()
    monkeypatch.setattr(desktop_module, "_HELPER", forger)
    with DesktopSandbox.create(desktop_image, warm=False) as desktop:
        with pytest.raises(SandboxError, match=problem):
            desktop.observe()


def test_killing_the_helper_or_the_x_server_is_the_agents_failure(env):
    for kill in ("pkill -KILL -f 'agentgym-desktop-[h]elper|deskctl[.]py serve'", "pkill -KILL -x Xvfb"):
        env.reset(options={"task_id": "files-delete-todo"})
        env.desktop.sandbox.exec(kill)
        observation, reward, terminated, truncated, info = env.step("click(10, 10)")
        assert "env_error" not in info and "limit_exceeded" in info, (kill, info)
        assert (reward, terminated, info["success"]) == (0.0, True, False), kill
        assert "helper" in info["limit_exceeded"]


# A json module the agent leaves in its home: it drops todo.txt from whatever tree it is asked to print.
FORGED_JSON = r"""
def _string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dumps(tree):
    items = (_string(k) + ": " + ("null" if v is None else _string(v)) for k, v in tree.items() if "todo" not in k)
    return "{" + ", ".join(items) + "}"
"""


def test_the_checker_imports_nothing_of_the_agents(env):
    env.reset(options={"task_id": "files-delete-todo"})
    env.desktop.sandbox.write_file("/home/agent/json.py", FORGED_JSON)
    tree = SandboxFiles(env.desktop).tree(FILES_ROOT)
    assert tree["todo.txt"] == "- call Sam\n"
    # todo.txt is still there: claiming done() is a 0, however the checker's imports are dressed up.
    _, reward, terminated, _, info = env.step("done()")
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert "unexpected: todo.txt" in info["grade"]["problem"]


def test_files_made_unreadable_fail_the_check_and_are_no_env_error(env):
    env.reset(options={"task_id": "xedit-append-todo"})
    env.desktop.sandbox.exec("chmod 000 /home/agent/Documents/todo.txt")
    _, reward, terminated, _, info = env.step("done()")
    assert "env_error" not in info and (reward, terminated, info["success"]) == (0.0, True, False)
    assert "could not be checked" in info["grade"]["problem"]
    env.reset(options={"task_id": "files-delete-todo"})
    env.desktop.sandbox.exec(f"chmod 000 {FILES_ROOT}/notes.txt")
    _, reward, terminated, _, info = env.step("done()")
    assert "env_error" not in info and (reward, terminated, info["success"]) == (0.0, True, False)
    assert "could not be checked" in info["grade"]["problem"]
