"""MCPServer and MCP-backed ToolEnvs against real MCP servers over stdio: mcp-server-time, mcp-server-git, and a slow one built on the SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.actions import ToolSpec
from agentgym.envs.tool.mcp import MCPError, MCPServer, MCPToolEnv

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def git_server(repo) -> list[str]:
    return [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def time_server():
    with MCPServer(TIME_SERVER) as server:
        yield server


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "agent@example.com")
    git("config", "user.name", "Agent")
    (path / "hello.txt").write_text("hello\n")
    git("add", "hello.txt")
    git("commit", "-q", "-m", "first commit")
    (path / "untracked.txt").write_text("new\n")
    return path


def test_time_server_lists_its_tools_as_toolspecs(time_server):
    specs = {spec.name: spec for spec in time_server.tools()}
    assert {"get_current_time", "convert_time"} <= set(specs)
    convert = specs["convert_time"]
    assert isinstance(convert, ToolSpec)
    assert convert.description
    assert convert.parameters["type"] == "object"
    assert set(convert.required) == {"source_timezone", "time", "target_timezone"}


def test_time_server_calls_return_the_result_text(time_server):
    now = json.loads(time_server.call("get_current_time", {"timezone": "Asia/Tokyo"}))
    assert now["timezone"] == "Asia/Tokyo"
    assert now["datetime"].endswith("+09:00")

    converted = json.loads(
        time_server.call("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
    )
    assert converted["target"]["datetime"].endswith("T21:00:00+09:00")
    assert converted["time_difference"] == "+9.0h"


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        ("no_such_tool", {}, "no_such_tool"),
        ("get_current_time", {}, "timezone"),
        ("get_current_time", {"timezone": "Not/AZone"}, "Not/AZone"),
    ],
    ids=["unknown-tool", "missing-argument", "bad-argument"],
)
def test_tool_errors_come_back_as_error_text(time_server, name, arguments, expected):
    text = time_server.call(name, arguments)
    assert text.startswith("Error: ")
    assert expected in text
    # The session survives a failed call.
    assert "datetime" in time_server.call("get_current_time", {"timezone": "UTC"})


def test_calls_from_several_threads_share_one_session(time_server):
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(time_server.call("get_current_time", {"timezone": "UTC"})))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all('"timezone": "UTC"' in text for text in results)


def test_git_server_status_and_log_on_a_local_repo(repo):
    with MCPServer(git_server(repo)) as server:
        names = {spec.name for spec in server.tools()}
        assert {"git_status", "git_log"} <= names
        status = server.call("git_status", {"repo_path": str(repo)})
        assert "untracked.txt" in status
        log = server.call("git_log", {"repo_path": str(repo)})
        assert "first commit" in log
        outside = server.call("git_status", {"repo_path": str(repo.parent)})
        assert outside.startswith("Error: ")


def test_close_ends_the_process_and_the_loop_thread():
    threads_before = set(threading.enumerate())
    server = MCPServer(TIME_SERVER)
    pid = server.pid
    assert pid is not None and not gone(pid)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    assert gone(pid)
    assert set(threading.enumerate()) <= threads_before
    server.close()  # idempotent
    with pytest.raises(MCPError, match="closed"):
        server.call("get_current_time", {"timezone": "UTC"})


def test_a_missing_command_raises_mcperror_quickly():
    started = time.monotonic()
    with pytest.raises(MCPError, match="no-such-mcp-server"):
        MCPServer(["/nonexistent/no-such-mcp-server", "--stdio"])
    assert time.monotonic() - started < 2


def test_a_server_that_dies_at_start_reports_its_stderr():
    with pytest.raises(MCPError, match="(?s)failed to start.*missing credentials"):
        MCPServer([sys.executable, "-c", "import sys; sys.exit('missing credentials')"])


def test_a_server_that_never_answers_initialize_times_out():
    command = [sys.executable, "-c", "import sys, time; print('booting', file=sys.stderr, flush=True); time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(MCPError, match="(?s)no answer to initialize within 1s.*booting"):
        MCPServer(command, start_timeout=1.0)
    assert time.monotonic() - started < 8


SLOW_SERVER = textwrap.dedent(
    """
    import signal, sys, time
    from mcp.server.mcpserver import MCPServer

    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    server = MCPServer("slow")

    @server.tool()
    def nap(seconds: float) -> str:
        \"\"\"Sleeps, then says so.\"\"\"
        time.sleep(seconds)
        return f"slept {seconds}"

    server.run("stdio")
    """
)


def test_a_slow_call_raises_timeouterror_and_leaves_the_server_usable(tmp_path):
    script = tmp_path / "slow_server.py"
    script.write_text(SLOW_SERVER)
    with MCPServer([sys.executable, str(script)], call_timeout=1.0) as server:
        assert server.call("nap", {"seconds": 0}) == "slept 0.0"
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="'nap'.*1s"):
            server.call("nap", {"seconds": 3})
        assert time.monotonic() - started < 3
        assert not gone(server.pid)
        # Sync tools run in the server's worker threads, so a stuck call blocks nothing else.
        assert server.call("nap", {"seconds": 0}) == "slept 0.0"


def test_close_kills_a_server_that_will_not_exit(tmp_path):
    script = tmp_path / "stubborn_server.py"
    script.write_text(SLOW_SERVER)
    server = MCPServer([sys.executable, str(script), "--ignore-sigterm"], call_timeout=0.5)
    with pytest.raises(TimeoutError):
        server.call("nap", {"seconds": 30})  # keeps a worker thread, hence the process, alive
    pid = server.pid
    started = time.monotonic()
    server.close()
    assert gone(pid)
    assert time.monotonic() - started < 8  # stdin EOF, then SIGTERM (ignored), then SIGKILL


# --- MCP servers as an env's tools ---------------------------------------------------------


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


TIME_TASKS = {"tokyo": {"prompt": "What time is it in Tokyo? Use the tools, then submit.", "zone": "Asia/Tokyo"}}


def asked_the_right_zone(task, state, transcript):
    ok = any(
        step["tool"] == "get_current_time"
        and step["arguments"].get("timezone") == task["zone"]
        and task["zone"] in step["result"]
        for step in transcript
    )
    return float(ok), ok


def test_an_mcp_env_runs_an_episode_on_a_server_per_env_and_forks_start_their_own():
    env = MCPToolEnv(TIME_TASKS, command=TIME_SERVER, check=asked_the_right_zone)
    assert {"get_current_time", "convert_time", "submit"} <= {spec.name for spec in env.tools()}
    env.reset(options={"task_id": "tokyo"})
    observation, *_ = env.step(call("get_current_time", timezone="Asia/Tokyo"))
    assert json.loads(observation["text"])["timezone"] == "Asia/Tokyo"
    fork = env.fork()
    assert fork.server.pid != env.server.pid
    assert env.step(call("submit"))[1:3] == (1.0, True)
    assert fork.step(call("convert_time", source_timezone="UTC", time="12:00", target_timezone="Nope/Zone"))[0][
        "text"
    ].startswith("Error")
    pids = [env.server.pid, fork.server.pid]
    env.close(), fork.close()
    assert all(gone(pid) for pid in pids)


def test_a_shared_server_outlives_the_envs_that_use_it(time_server):
    first = MCPToolEnv(TIME_TASKS, server=time_server, check=asked_the_right_zone)
    first.reset(options={"task_id": "tokyo"})
    second = first.fork()
    assert second.server is time_server
    first.close(), second.close()
    assert time_server.call("get_current_time", {"timezone": "UTC"}).startswith("{")


def test_an_mcp_env_passes_check_env_and_works_through_gymnasium_make(repo):
    from agentgym.registration import register_env

    register_env(
        "test-GitStatus-v0", MCPToolEnv, tasks={"status": "Report the repository status."}, command=git_server(repo)
    )
    env = gymnasium.make("agentgym/test-GitStatus-v0")
    try:
        check_env(env.unwrapped, skip_render_check=False, skip_close_check=True)
        env.reset(options={"task_id": "status"})
        text = env.step(call("git_status", repo_path=str(repo)))[0]["text"]
        assert "untracked.txt" in text
    finally:
        env.close()
        gymnasium.registry.pop("agentgym/test-GitStatus-v0")


def test_a_command_that_is_not_a_server_fails_at_construction():
    with pytest.raises(MCPError):
        MCPToolEnv(TIME_TASKS, command=["/nonexistent/mcp-server"])
    with pytest.raises(ValueError, match="exactly one"):
        MCPToolEnv(TIME_TASKS)
