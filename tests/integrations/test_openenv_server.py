"""agentgym envs served over OpenEnv, driven by OpenEnv's own EnvClient: HumanEval, BFCL and a web env, session isolation and capacity, disconnects that free the env, the branching extension, and the CLI.

The server is OpenEnv's real app (``create_app``) under uvicorn in a thread of the test process, so
the tests can look at what it holds (its sessions, its handle table, a session's container or
browser context). The clients are OpenEnv's ``GenericEnvClient`` (a plain client that knows nothing
of agentgym) and :class:`AgentGymEnvClient` (an ``EnvClient`` with the branching methods).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from openenv.cli._validation import validate_multi_mode_deployment, validate_running_environment
from openenv.core import GenericEnvClient

import agentgym  # noqa: F401  (registers the envs)
from agentgym.cli import main
from agentgym.cli.common import UsageError
from agentgym.integrations.openenv.protocol import AgentGymEnvClient, BranchingError
from agentgym.integrations.openenv.server import AgentGymEnvironment, create_openenv_app
from agentgym.task import resolve_step
from tests.helpers.serving import LoggedProcess, free_port, served

KEYCHAIN = "agentgym/tool.keychain-v0"
BFCL = "agentgym/tool.bfcl-multi-turn-base-v0"
HUMANEVAL = "agentgym/code.humaneval-v0"
SHOP = "agentgym/web.shop-v0"


def solution(env_id: str, task_id: str) -> list:
    env = gymnasium.make(env_id)
    try:
        task = next(task for task in env.unwrapped.tasks() if task.id == task_id)
    finally:
        env.close()
    return task.reference_solution()


async def play(client, steps: list) -> list:
    """Each step's (text, reward, done, info without tools) through ``client``; steps may depend on the last text."""
    results, text = [], client.last_text
    for step in steps:
        result = await client.step({"text": resolve_step(step, text)})
        text = result.observation["text"] if isinstance(result.observation, dict) else result.observation.text
        info = result.observation["info"] if isinstance(result.observation, dict) else result.observation.info
        results.append((text, result.reward, result.done, {k: v for k, v in info.items() if k != "tools"}))
    client.last_text = text
    return results


async def reset(client, **kwargs):
    result = await client.reset(**kwargs)
    observation = result.observation
    client.last_text = observation["text"] if isinstance(observation, dict) else observation.text
    return result


async def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


def abort(client) -> None:
    """Drop the client's connection without OpenEnv's close message (a crashed or vanished client)."""
    client._ws.transport.abort()
    client._ws = None


# ------------------------------------------------------------------ plain OpenEnv clients


async def test_a_plain_openenv_client_plays_an_episode_and_openenv_validates_the_server():
    steps = solution(KEYCHAIN, "train-0")
    with served(KEYCHAIN, max_sessions=2) as (url, state):
        async with GenericEnvClient(base_url=url) as client:
            first = await reset(client, task_id="train-0")
            assert set(first.observation) == {"text", "image", "info", "terminated", "truncated"}
            assert first.observation["info"]["task_id"] == "train-0" and first.observation["image"] is None
            assert {tool["function"]["name"] for tool in first.observation["info"]["tools"]} == {"lookup", "submit"}
            results = await play(client, steps)
            assert results[-1][1:3] == (1.0, True) and results[-1][3]["success"] is True
            assert all(reward == 0.0 and not done for _, reward, done, _ in results[:-1])
            # bad model output is normal input: an error observation, the session goes on
            bad = await client.step({"text": "no tool call here"})
            assert bad.observation["info"]["error"] and bad.reward == 0.0
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR|EXECUTION_ERROR"):
                await client.step({"text": "x", "unknown_field": 1})
            with pytest.raises(RuntimeError, match="takes no"):
                await client.reset(level=3)
            assert (await client.state())["env_id"] == KEYCHAIN
        report = await asyncio.to_thread(validate_running_environment, url)
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
        await wait_until(lambda: len(state.sessions) == 0)


async def test_tool_calls_are_actions_too():
    with served(KEYCHAIN) as (url, _):
        async with AgentGymEnvClient(base_url=url) as client:
            first = await client.reset(task_id="train-0")
            key = first.observation.text.split('"')[1]
            as_call = await client.step({"tool_calls": [{"name": "lookup", "arguments": {"key": key}}]})
            as_openai = await client.step(
                {"tool_calls": [{"function": {"name": "lookup", "arguments": f'{{"key": "{key}"}}'}}]}
            )
            assert as_call.observation.text == as_openai.observation.text and not as_call.observation.info["error"]


async def test_sessions_are_capped_and_a_closed_one_makes_room():
    with served(KEYCHAIN, max_sessions=1) as (url, state):
        async with AgentGymEnvClient(base_url=url) as first:
            await first.reset(task_id="train-0")
            with pytest.raises(Exception, match="CAPACITY_REACHED|1000|closed"):
                async with GenericEnvClient(base_url=url) as second:
                    await second.reset()
            assert (await first.step('lookup("x")')).observation.info["turn"] == 1  # the first is unharmed
        await wait_until(lambda: len(state.sessions) == 0)
        async with GenericEnvClient(base_url=url) as third:
            assert (await third.reset(task_id="train-1")).observation["info"]["task_id"] == "train-1"


# ------------------------------------------------------------------ the branching extension


async def test_fork_over_the_protocol_equals_replay_and_tickets_are_used_once():
    steps = solution(BFCL, "multi_turn_base_3")
    half = len(steps) // 2
    with served(BFCL, max_sessions=3) as (url, state):
        async with AgentGymEnvClient(base_url=url) as parent, AgentGymEnvClient(base_url=url) as replay:
            await reset(parent, task_id="multi_turn_base_3")
            await play(parent, steps[:half])
            assert {tool["name"] for tool in await parent.list_tools()} == {"snapshot", "restore", "release", "fork"}
            fork_id = await parent.fork()
            async with AgentGymEnvClient(base_url=url) as child:
                claimed = await child.reset(fork_from=fork_id)
                assert claimed.observation.info["turn"] == half and (await child.state()).turn == half
                child.last_text = claimed.observation.text
                forked = await play(child, steps[half:])
                with pytest.raises(RuntimeError, match="unknown, used or expired fork id"):
                    await child.reset(fork_from=fork_id)
            await reset(replay, task_id="multi_turn_base_3")
            await play(replay, steps[:half])
            replayed = await play(replay, steps[half:])
            assert forked == replayed and forked[-1][1] == 1.0 and forked[-1][3]["success"]
            # the parent did not move: it goes on exactly like the fork did
            assert await play(parent, steps[half:]) == forked
        await wait_until(lambda: len(state.sessions) == 0)


async def test_snapshot_restore_release_and_handles_die_with_their_session():
    steps = solution(KEYCHAIN, "train-0")
    with served(KEYCHAIN, max_sessions=3) as (url, state):
        async with AgentGymEnvClient(base_url=url) as client:
            first = await reset(client, task_id="train-0")
            with pytest.raises(BranchingError, match="unknown or released handle"):
                await client.restore("nope")
            handle = await client.snapshot()
            assert (await client.state()).handles == [handle]
            played = await play(client, steps)
            back = await client.restore(handle)
            assert back.observation.text == first.observation.text and back.observation.info["turn"] == 0
            client.last_text = back.observation.text
            assert await play(client, steps) == played  # a restored episode replays identically
            # another session can fork a live handle; the handle stays with its owner
            async with AgentGymEnvClient(base_url=url) as other:
                assert (await other.reset(fork_from=handle)).observation.text == first.observation.text
                with pytest.raises(BranchingError, match="holds no handle"):
                    await other.release(handle)
            await client.release(handle)
            with pytest.raises(BranchingError):
                await client.release(handle)
            kept = await client.snapshot()
            ticket = await client.fork(kept)
            assert len(state.handles) == 2
            async with AgentGymEnvClient(base_url=url) as claimer:
                assert (await claimer.reset(fork_from=ticket)).observation.info["turn"] == len(steps)
            assert len(state.handles) == 1
            await client.fork(kept)
        # the session's handle and its unclaimed fork ticket went with it
        await wait_until(lambda: len(state.handles) == 0)


async def test_an_unclaimed_fork_ticket_expires():
    with served(KEYCHAIN, fork_ttl=0.5) as (url, state):
        async with AgentGymEnvClient(base_url=url) as client:
            await client.reset(task_id="train-0")
            ticket = await client.fork()
            await asyncio.sleep(0.6)
            with pytest.raises(RuntimeError, match="unknown, used or expired"):
                await client.reset(fork_from=ticket)
        assert len(state.handles) == 0


# ------------------------------------------------------------------ real sandboxes


@pytest.mark.slow
async def test_humaneval_sessions_are_isolated_and_a_disconnect_frees_the_container(docker_ready):
    from agentgym.sandbox import engine

    steps = solution(HUMANEVAL, "HumanEval/0")
    with served(HUMANEVAL, max_sessions=2) as (url, state):
        async with AgentGymEnvClient(base_url=url) as solver, GenericEnvClient(base_url=url) as other:
            await asyncio.gather(reset(solver, task_id="HumanEval/0"), reset(other, task_id="HumanEval/2"))
            # both sessions at once: each writes its own marker, and sees only its own
            mark = '<tool_call>{"name": "bash", "arguments": {"command": "echo %s > /tmp/mark; cat /tmp/mark"}}</tool_call>'
            a, b = await asyncio.gather(solver.step({"text": mark % "A"}), other.step({"text": mark % "B"}))
            assert (a.observation.text.strip(), b.observation["text"].strip()) == ("A", "B")
            containers = {session._env.unwrapped.sandbox.id for session in state.sessions}
            assert len(containers) == 2
            solved = await play(solver, steps)
            assert solved[-1][1:3] == (1.0, True) and solved[-1][3]["success"]
            abort(other)  # mid-episode, without a goodbye
            await wait_until(lambda: len(state.sessions) == 1)

            def remaining() -> set[str]:
                return {c["Id"] for c in engine.api().containers(all=True, filters={"id": list(containers)})}

            await wait_until(lambda: len(remaining()) == 1)
        await wait_until(lambda: not remaining())


@pytest.mark.slow
@pytest.mark.browser
async def test_a_web_env_sends_its_screenshot_and_a_disconnect_frees_the_browser_context():
    from agentgym.sandbox.browser import BrowserHost

    task_id = "cheapest_brand_in_category/0"
    steps = solution(SHOP, task_id)
    with served(SHOP, env_kwargs={"screenshot": True}) as (url, state):
        host = BrowserHost.shared()
        async with AgentGymEnvClient(base_url=url) as client:
            first = await reset(client, task_id=task_id)
            image = first.observation.image_array()
            assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8 and image.std() > 0
            results = await play(client, steps)
            assert results[-1][1:3] == (1.0, True)
            # the host keeps a spare context beside the sessions' (a new session takes it, a closed
            # one gives its context back as the spare): count sessions, then contexts once settled
            host.run(host.spares_ready())
            sessions, contexts = host.live_sessions, host.run(host.context_count())
            assert sessions == 1 and contexts >= 1
            async with GenericEnvClient(base_url=url) as leaver:
                await leaver.reset(task_id=task_id)
                assert host.live_sessions == sessions + 1
                abort(leaver)
                await wait_until(lambda: len(state.sessions) == 1)
                await wait_until(lambda: host.live_sessions == sessions)
                host.run(host.spares_ready())
                await wait_until(lambda: host.run(host.context_count()) == contexts)
    assert host.live_sessions == 0

    # the server flag that leaves images out
    quiet = AgentGymEnvironment(create_openenv_app(SHOP, images=False, env_kwargs={"screenshot": True}).state.agentgym)
    try:
        assert (await quiet.reset_async(task_id=task_id)).image is None
    finally:
        await asyncio.to_thread(quiet.close)


# ------------------------------------------------------------------ the CLI


def test_cli_errors_are_one_line_usage_errors(capsys, tmp_path):
    for argv, message in [
        (["openenv", "serve", "no-such-env-v0"], "doesn't exist"),
        (["openenv", "serve", "tool.keychain-v0", "--max-sessions", "0"], "--max-sessions must be at least 1"),
        (["openenv", "init", "no-such-env-v0", str(tmp_path / "x")], "doesn't exist"),
    ]:
        with pytest.raises(UsageError) as caught:
            main(argv)
        assert caught.value.code == 2 and message in str(caught.value)
        assert capsys.readouterr().err.count("\n") == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(UsageError, match="cannot listen on 127.0.0.1:\\d+: Address already in use"):
            main(["openenv", "serve", "tool.keychain-v0", "--port", str(busy.getsockname()[1])])


def test_cli_init_writes_a_directory_openenv_accepts_and_whose_app_serves(tmp_path, capsys):
    target = tmp_path / "keychain_env"
    assert main(["openenv", "init", "tool.keychain-v0", str(target), "--max-sessions", "3"]) == 0
    written = {Path(line).relative_to(target).as_posix() for line in capsys.readouterr().out.split()}
    assert written == {"openenv.yaml", "pyproject.toml", "server/__init__.py", "server/app.py", "README.md"}
    valid, issues = validate_multi_mode_deployment(target)
    # uv.lock is written by `uv lock`, which needs the deployment's package index; nothing else is missing
    assert issues == ["Missing uv.lock - run 'uv lock' to generate it"], issues
    assert "app: server.app:app" in (target / "openenv.yaml").read_text()
    spec = importlib.util.spec_from_file_location("written_app", target / "server" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Loopback only, as `agentgym openenv serve`: the env runs what its clients send.
    assert inspect.signature(module.main).parameters["host"].default == "127.0.0.1"
    usage = subprocess.run([sys.executable, "-m", "server.app", "--help"], cwd=target, capture_output=True, text=True)
    assert "(default: 127.0.0.1)" in usage.stdout, usage.stderr
    from fastapi.testclient import TestClient

    with TestClient(module.app) as http:
        assert http.get("/health").json()["status"] == "healthy"
        assert http.get("/metadata").json()["name"] == KEYCHAIN
        with http.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"task_id": "train-0"}})
            assert ws.receive_json()["data"]["observation"]["info"]["task_id"] == "train-0"
    with pytest.raises(UsageError, match="not an empty directory"):
        main(["openenv", "init", "tool.keychain-v0", str(target)])


@pytest.mark.slow
def test_cli_serve_runs_until_interrupted():
    port = free_port()
    process = LoggedProcess(
        [str(Path(sys.executable).with_name("agentgym")), "openenv", "serve", "tool.keychain-v0", "--port", str(port)]
    )
    try:

        async def episode():
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with AgentGymEnvClient(base_url=f"http://127.0.0.1:{port}") as client:
                        return (await client.reset(task_id="train-0")).observation.info["task_id"]
                except ConnectionError:
                    assert process.poll() is None and time.monotonic() < deadline, process.output()
                    await asyncio.sleep(0.25)

        assert asyncio.run(episode()) == "train-0"
    finally:
        output = process.stop(grace=30, signal_number=signal.SIGINT)
    assert process.returncode == 0, output
    assert f"over OpenEnv on ws://127.0.0.1:{port}/ws" in output


# ------------------------------------------------------------------ attacks: every resource a client can make is bounded


async def test_a_session_holds_at_most_max_handles_and_its_fork_tickets_die_with_it():
    with served(KEYCHAIN, max_handles=3) as (url, state):
        async with AgentGymEnvClient(base_url=url) as client:
            await client.reset(task_id="train-0")
            handle = await client.snapshot()
            tickets = [await client.fork(), await client.fork(handle)]
            for make in (client.fork, client.snapshot):
                with pytest.raises(BranchingError, match="holds 3 snapshot handles and fork ids"):
                    await make()
            assert len(state.handles) == 3
            await client.release(handle)
            await client.snapshot()  # room again
        # no fork ticket outlives the session that made it (each holds a committed image)
        await wait_until(lambda: len(state.handles) == 0)
        async with AgentGymEnvClient(base_url=url) as late:
            with pytest.raises(RuntimeError, match="unknown, used or expired"):
                await late.reset(fork_from=tickets[0])


def count_live_envs(state) -> list[int]:
    """[envs open now, the most open at once] of the app, kept as the server makes and closes them."""
    counts, make = [0, 0], state.make

    def counted_make():
        env = make()
        counts[0] += 1
        counts[1] = max(counts)
        close = env.close

        def counted_close():
            counts[0] -= 1
            close()

        env.close = counted_close
        return env

    state.make = counted_make
    return counts


async def test_stateless_resets_count_against_max_sessions():
    import httpx

    with served(KEYCHAIN, max_sessions=1) as (url, state):
        counts = count_live_envs(state)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            answers = await asyncio.gather(*(http.post("/reset", json={"task_id": "train-0"}) for _ in range(6)))
            assert 200 in {a.status_code for a in answers} and {a.status_code for a in answers} <= {200, 503}
            async with AgentGymEnvClient(base_url=url) as session:
                await session.reset(task_id="train-0")
                # the session holds the only env slot: every stateless reset is refused, none makes an env
                answers = await asyncio.gather(*(http.post("/reset", json={}) for _ in range(6)))
                assert [a.status_code for a in answers] == [503] * 6
                assert "max_sessions" in answers[0].json()["detail"]
                assert (await session.step('lookup("x")')).observation.info["turn"] == 1
            await wait_until(lambda: len(state.sessions) == 0)
            assert (await http.post("/reset", json={})).status_code == 200
        assert counts == [0, 1]  # never more than one env at once (main made one per request)


async def test_an_idle_http_mcp_session_is_closed_and_frees_its_slot():
    import httpx

    with served(KEYCHAIN, max_sessions=1, idle_timeout=1.0) as (url, state):
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
            created = (await http.post("/mcp", json=rpc)).json()
            assert "session_id" in created["result"]
            # it holds the only session and never sends again (plain HTTP: no connection whose end frees it)
            refused = (await http.post("/mcp", json=rpc)).json()
            assert "error" in refused
            await wait_until(lambda: "result" in httpx.post(f"{url}/mcp", json=rpc).json(), timeout=30)
    for bad in (None, 0, -1.0):
        with pytest.raises(ValueError, match="idle_timeout must be a positive number"):
            create_openenv_app(KEYCHAIN, idle_timeout=bad)
