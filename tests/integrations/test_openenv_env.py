"""OpenEnv servers as agentgym envs (``agentgym/OpenEnv-v0``): real OpenEnv servers in subprocesses, reached over loopback.

The servers are envs written with OpenEnv's own base classes and ``create_app``
(tests/helpers/openenv_apps.py), and an agentgym env served by ``agentgym openenv serve``
(the branching extension). Nothing is mocked; the policy in the runner test is scripted
(it stands in for sampling only, with the real tiny tokenizer).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers agentgym/OpenEnv-v0)
from agentgym.integrations.openenv.client_env import OpenEnvEnv, OpenEnvError
from agentgym.rollout.agent import Agent
from agentgym.rollout.chat import ChatFormat
from agentgym.rollout.policy import Completion, Policy
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from agentgym.rollout.trajectory import RolloutTree
from agentgym.rollout.tree import TreeConfig, TreeRollout
from agentgym.snapshot import SnapshotError
from tests.helpers.openenv_counter import play_counter, solve_counter
from tests.helpers.serving import LoggedProcess, free_port
from tests.helpers.tool_calls import call

ROOT = Path(__file__).parents[2]


@contextlib.contextmanager
def server_process(*command: str) -> Iterator[tuple[str, LoggedProcess]]:
    """``command`` (given ``{port}``) as a child process serving OpenEnv on a free loopback port: (base URL, process).

    Waits for ``/health``; on exit the process is terminated by its pid (killed after 10 s).
    """
    port = free_port()
    process = LoggedProcess([part.format(port=port) for part in command], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the server exited: {process.output()}"
            assert time.monotonic() < deadline, "the server did not answer /health within 60 s"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        yield url, process
    finally:
        process.stop()


def openenv_app(name: str):
    return server_process(sys.executable, "-m", "tests.helpers.openenv_apps", name, "{port}")


@pytest.fixture(scope="module")
def counter_url():
    with openenv_app("counter") as (url, _):
        yield url


@pytest.fixture(scope="module")
def moves_url():
    with openenv_app("moves") as (url, _):
        yield url


@pytest.fixture(scope="module")
def keychain_url():
    agentgym_cli = str(Path(sys.executable).with_name("agentgym"))
    with server_process(
        agentgym_cli, "openenv", "serve", "tool.keychain-v0", "--port", "{port}", "--max-sessions", "16"
    ) as (
        url,
        _,
    ):
        yield url


@pytest.mark.slow  # an OpenEnv server process starts (seconds; tens under load)
def test_an_openenv_env_is_an_agentgym_env_that_passes_check_env_and_plays_to_success(counter_url):
    env = gymnasium.make("agentgym/OpenEnv-v0", url=counter_url)
    try:
        check_env(env, skip_render_check=True, skip_close_check=True)
        observation, info = env.reset(seed=11)
        assert info["tools"] == [] and env.unwrapped.action_field == "message"
        observation, reward, terminated, truncated, info = play_counter(env, observation["text"])
        assert terminated and reward == 1.0 and info["success"] and "success" in observation["text"]
        # A wrong submission is a failure, with reward 0: the reward is the server's evidence.
        env.reset(seed=11)
        assert env.step("submit")[1:3] == (0.0, True) and not env.step("add 1")[4]["success"]
    finally:
        env.close()


@pytest.mark.slow
def test_reset_options_reach_the_server_and_tasks_are_sent_as_task_ids(counter_url):
    env = OpenEnvEnv(counter_url, tasks=["reach-9", "reach-21"])
    try:
        assert env.reset(options={"task_id": "reach-21"})[0]["text"] == "Reach 21. Counter: 0"
        assert env.reset(seed=0)[0]["text"] in ("Reach 9. Counter: 0", "Reach 21. Counter: 0")
        with pytest.raises(ValueError, match="unknown task_id"):
            env.reset(options={"task_id": "reach-5"})
    finally:
        env.close()
    env = OpenEnvEnv(counter_url)
    try:  # the same seed, the same server-side draw; other options are the server's reset keywords
        assert env.reset(seed=5)[0] == env.reset(seed=5)[0]
        texts = {env.reset(seed=5, options={"unseeded": True})[0]["text"] for _ in range(8)}
        assert len(texts) > 1
    finally:
        env.close()


@pytest.mark.slow
def test_structured_actions_are_one_tool_and_a_rejected_action_is_the_models_error(moves_url):
    env = gymnasium.make("agentgym/OpenEnv-v0", url=moves_url)
    try:
        observation, info = env.reset(seed=2)
        (tool,) = info["tools"]
        assert tool["function"]["name"] == "move" and tool["function"]["parameters"]["required"] == ["op"]
        assert set(tool["function"]["parameters"]["properties"]) == {"op", "n"}  # OpenEnv's metadata is not the model's
        observation, reward, terminated, truncated, info = env.step(call("move", op="add", n=4))
        assert observation["text"] == "Counter: 4" and not info["error"]
        # Past the schema's maximum: the server rejects it, the episode goes on.
        observation, _, terminated, truncated, info = env.step(call("move", op="add", n=40))
        assert "rejected" in observation["text"] and "less than or equal to 10" in info["error"]
        assert not (terminated or truncated) and "env_error" not in info
        assert "no tool call" in env.step("add 3")[4]["error"]
        observation, reward, terminated, truncated, info = play_counter(
            env, env.unwrapped.reset(seed=2)[0]["text"], True
        )
        assert terminated and reward == 1.0 and info["success"]
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("app,tool_replies", [("counter", False), ("moves", True)])
def test_a_fork_by_replay_equals_replaying_the_same_actions(app, tool_replies, counter_url, moves_url):
    url = counter_url if app == "counter" else moves_url
    parent, replayed = OpenEnvEnv(url), OpenEnvEnv(url)
    forks = []
    try:
        text = parent.reset(seed=7)[0]["text"]
        replies = []
        for _ in range(2):
            replies.append(solve_counter(text, tool_replies))
            text += "\n" + parent.step(replies[-1])[0]["text"]
        snapshot = parent.snapshot()
        parent.step("add 1" if not tool_replies else call("move", op="add", n=1))  # the parent moves on
        fork = parent.fork(snapshot)
        forks.append(fork)
        assert fork.last_restore == "replay" and fork.turn == 2
        replayed.reset(seed=7)
        for reply in replies:
            replayed.step(reply)
        first = None
        for reply in [solve_counter(text, tool_replies)] * 2:
            result = fork.step(reply)
            assert result == replayed.step(reply)
            first = first or result
        parent.restore(snapshot)  # restore replays too, on the env's own session
        assert parent.last_restore == "replay" and parent.turn == 2
        assert parent.step(solve_counter(text, tool_replies)) == first
        snapshot.release()
    finally:
        for env in (parent, replayed, *forks):
            env.close()


@pytest.mark.slow
def test_a_server_that_does_not_replay_deterministically_cannot_be_forked(counter_url):
    env = OpenEnvEnv(counter_url)
    try:
        env.reset(options={"unseeded": True})  # the server draws its target without the seed
        env.step("add 2")
        with pytest.raises(SnapshotError, match="diverged at reset"):
            for _ in range(5):  # a fork could draw the same target by chance; five in a row will not
                env.fork().close()
    finally:
        env.close()


@pytest.mark.slow
async def test_the_runner_and_tree_rollouts_run_on_an_openenv_server(counter_url):
    from transformers import AutoTokenizer

    from agentgym.models import tiny_model_path

    class CounterTextSolver(Policy):
        """Replies "add N"/"submit" from the prompt's target and counter, encoded with the real tiny tokenizer."""

        name = "counter-text-solver"

        def __init__(self):
            self.chat_format = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_path()))

        async def generate(self, prompt_ids, sampling):
            reply = solve_counter(self.chat_format.tokenizer.decode(prompt_ids))
            ids = self.chat_format.encode(reply) + [self.chat_format.eos_token_id]
            return Completion(text=reply, token_ids=ids, logprobs=[-0.5] * len(ids), policy_version=self.version)

    made = []

    def factory():
        # a 30 s connect budget: trees fork into new sessions while the runner's other episodes
        # load the two cores, and the counter server is one more process on them
        made.append(gymnasium.make("agentgym/OpenEnv-v0", url=counter_url, max_turns=8, connect_timeout=30.0))
        return made[-1]

    agent = Agent(CounterTextSolver())
    requests = [EpisodeRequest("default", seed=seed) for seed in range(4)]
    result = await Runner(agent, factory, RunnerConfig(concurrency=2, progress=False)).run(requests)
    assert len(result.records) == 4 and not result.failures
    assert all(r.success and r.reward == 1.0 for r in result.records)
    job = lambda agent, env, request: TreeRollout(agent, TreeConfig(max_leaves=3, branch_every=1)).run(  # noqa: E731
        env, request.task_id, request.seed
    )
    trees = await Runner(agent, factory, RunnerConfig(concurrency=2, progress=False), job=job).run(requests[:2])
    assert all(isinstance(tree, RolloutTree) and tree.leaves for tree in trees.records) and not trees.failures
    assert all(path.success and path.reward == 1.0 for tree in trees.records for path in tree.paths())
    assert all(env.unwrapped._closed for env in made)


@pytest.mark.slow
def test_an_agentgym_server_branches_with_its_own_snapshots(keychain_url):
    from agentgym.envs.tool.keychain import KeyChainEnv

    local = KeyChainEnv()
    task = local.tasks()[0]
    solution = list(task.reference_solution())
    parent = gymnasium.make("agentgym/OpenEnv-v0", url=keychain_url, tasks=[task.id])
    replayed = OpenEnvEnv(keychain_url, tasks=[task.id])
    fork = None
    try:
        observation, info = parent.reset(seed=3)
        assert observation["text"] == local.reset(seed=3, options={"task_id": task.id})[0]["text"]
        assert {t["function"]["name"] for t in info["tools"]} == {
            t["function"]["name"] for t in local.reset(seed=3, options={"task_id": task.id})[1]["tools"]
        }
        parent.step(solution[0])
        snapshot = parent.snapshot()
        parent.step('<tool_call>{"name": "lookup", "arguments": {"key": "nothing-here"}}</tool_call>')
        fork = parent.fork(snapshot)
        assert fork.unwrapped.last_restore == "server" and fork.unwrapped.turn == 1
        replayed.reset(seed=3)
        replayed.step(solution[0])
        for step in solution[1:]:
            result = fork.step(step)
            assert result == replayed.step(step)
        assert (
            result[2] and result[1] == 1.0 and result[4]["success"]
        )  # the reference solution solved it, on the server
        parent.unwrapped.restore(snapshot)
        assert parent.unwrapped.last_restore == "server" and parent.unwrapped.turn == 1
        snapshot.release()
    finally:
        for env in (parent, replayed, fork, local):
            if env is not None:
                env.close()


def test_a_closed_port_is_a_clear_error_at_once():
    env = gymnasium.make("agentgym/OpenEnv-v0", url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(OpenEnvError, match="not reachable"):
        env.reset()
    assert time.monotonic() - started < 5
    env.close()
    with pytest.raises(ValueError, match="needs url="):
        gymnasium.make("agentgym/OpenEnv-v0", url="")


def test_a_server_that_is_not_openenv_is_a_clear_error():
    class NotOpenEnv(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"hello": "world"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotOpenEnv)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = OpenEnvEnv(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(OpenEnvError, match="not an OpenEnv schema"):
            env.reset()
    finally:
        env.close()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_hung_server_times_out_and_a_killed_one_ends_the_episode_with_an_env_error():
    with openenv_app("counter") as (url, process):
        env = OpenEnvEnv(url, message_timeout=1.0)
        try:
            env.reset(seed=1)
            started = time.monotonic()
            observation, reward, terminated, truncated, info = env.step("sleep")  # the server's step hangs for 60 s
            assert time.monotonic() - started < 5
            assert truncated and not terminated and "did not answer 'step' within 1 s" in info["env_error"]
            env.reset(seed=1)  # a new session: the hung one is dropped
            assert env.step("add 2")[0]["text"] == "Counter: 2"
            process.kill()
            process.wait()
            started = time.monotonic()
            observation, reward, terminated, truncated, info = env.step("add 2")
            assert truncated and "env_error" in info and "OpenEnv session" in info["env_error"]
            with pytest.raises(OpenEnvError):
                env.reset(seed=1)
            assert time.monotonic() - started < 10
        finally:
            env.close()
