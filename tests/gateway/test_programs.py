"""Unmodified agent programs (the `openai` client + MCP, the OpenAI Agents SDK, smolagents, a command) solve agentgym
tasks through the gateway, the env as their tools (MCP) and grader; failures of the program are its own; the eval
harness runs them. Backends: a scripted policy that solves the tasks (it stands in for a capable model) and the tiny
model."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from agentgym.envs.tool.keychain import KeyChainEnv, make_task
from agentgym.gateway import Gateway, GatewayJob, SessionLimits, run_episode
from agentgym.models import tiny_model_path
from agentgym.rollout.policy import SamplingParams
from tests.helpers import gateway_programs as programs
from tests.helpers.scripted import ScriptedPolicy

AGENTS = [programs.openai_program, programs.agents_sdk_program]
COMMAND = [sys.executable, "-m", "tests.helpers.gateway_programs"]


@pytest.fixture(scope="module")
def keychain_policy():
    return ScriptedPolicy(programs.keychain_replies)


@pytest.mark.parametrize("program", AGENTS + [COMMAND], ids=["openai", "openai-agents", "command"])
async def test_an_unmodified_program_solves_a_tool_env_task_through_the_gateway(keychain_policy, program):
    env = KeyChainEnv(max_hops=2)
    try:
        async with Gateway(keychain_policy) as gateway:
            trajectory = await run_episode(gateway, env, program, task_id="train-3", timeout=60)
            assert not gateway.sessions  # closed: its key is refused from now on
    finally:
        env.close()
    task = make_task("train-3")
    assert trajectory.success and trajectory.reward == 1.0
    assert trajectory.metadata["graded_by"] == "program" and trajectory.metadata["program_error"] is None
    assert trajectory.metadata["gateway"]["calls"] == task["hops"] + 2  # lookups, the submit, the final words
    assert len(trajectory.sequences()) == 1  # append-only: one training sequence
    assert trajectory.turns[-2].reward == 1.0  # the submit's reward is on the call that made it


async def test_a_smolagents_agent_solves_a_tool_env_task_through_the_gateway():
    """smolagents rewrites its history on every call (a tool call becomes the text "Calling tools: ...", a tool result
    a user turn "Observation: ..."): every call is a sequence of its own, counted, each token-exact."""
    policy = ScriptedPolicy(programs.for_smolagents(programs.keychain_replies))
    env = KeyChainEnv(max_hops=2)
    try:
        async with Gateway(policy) as gateway:
            trajectory = await run_episode(gateway, env, programs.smolagents_program, task_id="train-3", timeout=60)
    finally:
        env.close()
    task = make_task("train-3")
    assert trajectory.success and trajectory.reward == 1.0
    assert trajectory.metadata["graded_by"] == "program" and trajectory.metadata["program_error"] is None
    calls = task["hops"] + 2  # lookups, the submit, its final_answer tool
    stats = trajectory.metadata["gateway"]
    assert stats["calls"] == calls and stats["sequences"] == calls and stats["not_appended"] == calls - 1
    assert [t.prompt_ids for t in trajectory.turns] == policy.prompts  # each call's prompt is what the model saw


@pytest.mark.parametrize(
    "program", [*AGENTS, programs.smolagents_program], ids=["openai", "openai-agents", "smolagents"]
)
async def test_an_unmodified_program_solves_a_code_env_task_through_the_gateway(docker_ready, program):
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    env = gymnasium.make("agentgym/code.humaneval-v0")
    replies = programs.humaneval_replies
    policy = ScriptedPolicy(programs.for_smolagents(replies) if program is programs.smolagents_program else replies)
    policy.context_window = 4096  # the solution is one long reply: room for it when the program sets no max_tokens
    try:
        async with Gateway(policy) as gateway:
            trajectory = await run_episode(gateway, env, program, task_id="HumanEval/0", timeout=120)
    finally:
        env.close()
    assert trajectory.success and trajectory.reward == 1.0 and trajectory.metadata["graded_by"] == "program"
    stats = trajectory.metadata["gateway"]
    assert stats["not_appended"] == (stats["calls"] - 1 if program is programs.smolagents_program else 0)


async def test_with_the_tiny_model_episodes_are_token_exact(tmp_path):
    """The real model samples; every recorded id is what it sampled, given exactly the recorded prompt."""
    from agentgym.rollout.hf_policy import HFPolicy

    sampled = []

    class Recorded(HFPolicy):
        async def generate(self, prompt_ids, sampling):
            completion = await super().generate(prompt_ids, sampling)
            sampled.append((list(prompt_ids), list(completion.token_ids), list(completion.logprobs)))
            return completion

    policy = Recorded(str(tiny_model_path()), device="cpu", seed=0)
    env = KeyChainEnv()
    try:  # as a trainer runs it: its sampling settings (16 tokens a turn) replace the programs'
        async with Gateway(policy, sampling=SamplingParams(max_tokens=16)) as gateway:
            # smolagents retries a reply without a tool call until its step limit; three calls show enough of it.
            for program, calls in [*((p, 64) for p in AGENTS), (programs.smolagents_program, 3)]:
                sampled.clear()
                limits = SessionLimits(max_calls=calls)
                trajectory = await run_episode(gateway, env, program, task_id="train-1", timeout=120, limits=limits)
                assert sampled and [(t.prompt_ids, t.completion_ids, t.logprobs) for t in trajectory.turns] == sampled
                assert not trajectory.success  # the tiny model does not solve it
                error = trajectory.metadata["program_error"]
                if error is not None and program is not programs.smolagents_program:
                    # the Agents SDK refuses a reply cut at the length limit, as it would OpenAI's
                    assert "incomplete" in error and trajectory.metadata["graded_by"] is None
    finally:
        env.close()
        await policy.aclose()


async def test_a_program_that_answers_without_submitting_is_graded_on_its_answer(keychain_policy):
    task = make_task("train-3")

    def honest(context):  # a program with its own tools (none here): it just answers
        return task["answer"]

    def wrong(context):
        return "-1"

    env = KeyChainEnv()
    try:
        async with Gateway(keychain_policy) as gateway:
            right = await run_episode(gateway, env, honest, task_id="train-3")
            bad = await run_episode(gateway, env, wrong, task_id="train-3")
            silent = await run_episode(gateway, env, lambda context: None, task_id="train-3")
    finally:
        env.close()
    assert (right.success, right.reward, right.metadata["graded_by"]) == (True, 1.0, "gateway")
    assert (bad.success, bad.reward, bad.metadata["graded_by"]) == (False, 0.0, "gateway")
    assert (silent.success, silent.reward, silent.metadata["graded_by"]) == (False, 0.0, None)


async def test_a_program_that_crashes_or_hangs_fails_on_its_own_and_nothing_hangs(keychain_policy, tmp_path):
    marker = tmp_path / "child.pid"
    hang = [
        sys.executable,
        "-c",
        f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    ]
    crash = [sys.executable, "-c", "import sys; print('partial'); sys.exit(3)"]

    async def slow(context):
        import asyncio

        await asyncio.sleep(600)

    def raises(context):
        raise RuntimeError("the program's own bug")

    env = KeyChainEnv()
    try:
        async with Gateway(keychain_policy) as gateway:
            started = time.monotonic()
            hung = await run_episode(gateway, env, hang, task_id="train-3", timeout=2)
            slept = await run_episode(gateway, env, slow, task_id="train-3", timeout=1)
            assert time.monotonic() - started < 20
            crashed = await run_episode(gateway, env, crash, task_id="train-3")
            raised = await run_episode(gateway, env, raises, task_id="train-3")
    finally:
        env.close()
    assert hung.metadata["program_error"].startswith("timeout") and slept.metadata["program_error"].startswith(
        "timeout"
    )
    assert crashed.metadata["program_error"].startswith("program exited with status 3")
    assert raised.metadata["program_error"] == "program raised RuntimeError: the program's own bug"
    for record in (hung, slept, crashed, raised):
        assert (record.reward, record.success, record.error) == (0.0, False, None)
    with pytest.raises(ProcessLookupError):  # the hung command's process was killed with its group
        os.kill(int(marker.read_text()), 0)


async def test_an_env_that_breaks_in_a_tool_call_is_an_env_failure_retried_not_the_programs(keychain_policy):
    from agentgym.rollout.agent import Agent
    from agentgym.rollout.runner import Runner, RunnerConfig

    class Breaking(KeyChainEnv):  # its first env breaks on every tool call (a sandbox that died); later ones work
        made = 0

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            Breaking.made += 1
            self.broken = Breaking.made == 1

        def _call_tool(self, call):
            if self.broken:
                raise OSError("the sandbox is gone")
            return super()._call_tool(call)

    env = Breaking()
    try:
        async with Gateway(keychain_policy) as gateway:
            with pytest.raises(RuntimeError, match="env broke during a tool call.*sandbox is gone"):
                await run_episode(gateway, env, programs.openai_program, task_id="train-3", timeout=60)
            assert not gateway.sessions
    finally:
        env.close()
    # Through the runner: the failure is the env's, the episode is retried on a fresh env and solved there.
    job = GatewayJob(programs.openai_program, timeout=60)
    runner = Runner(Agent(keychain_policy), Breaking, RunnerConfig(progress=False, max_env_retries=1), job=job)
    Breaking.made = 0
    (record,) = (await runner.run(["train-3"])).records
    assert record.success and record.error is None
    assert [f["kind"] for f in record.metadata["failures"]] == ["env"]


async def test_the_mcp_server_serves_only_the_sessions_own_env_and_refuses_bad_calls(keychain_policy):
    import aiohttp

    first, second = KeyChainEnv(), KeyChainEnv()
    try:
        async with Gateway(keychain_policy) as gateway:
            first.reset(options={"task_id": "train-3"})
            second.reset(options={"task_id": "train-4"})
            a = gateway.open_session("train-3", env=first)
            b = gateway.open_session("train-4", env=second)

            async def rpc(key, message):
                async with aiohttp.ClientSession() as http:
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    async with http.post(gateway.mcp_url, json=message, headers=headers) as answer:
                        return answer.status, await answer.json()

            start_a, start_b = make_task("train-3")["start"], make_task("train-4")["start"]
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            _, lookup_a = await rpc(a.key, {**call, "params": {"name": "lookup", "arguments": {"key": start_a}}})
            _, lookup_b = await rpc(b.key, {**call, "params": {"name": "lookup", "arguments": {"key": start_b}}})
            table_a, table_b = make_task("train-3")["table"], make_task("train-4")["table"]
            assert lookup_a["result"]["content"][0]["text"] == f"{start_a}: {table_a[start_a]}"
            assert lookup_b["result"]["content"][0]["text"] == f"{start_b}: {table_b[start_b]}"
            _, unknown = await rpc(a.key, {**call, "params": {"name": "rm_rf", "arguments": {}}})
            assert unknown["result"]["isError"] and "rm_rf" in unknown["result"]["content"][0]["text"]
            _, typo = await rpc(a.key, {**call, "params": {"name": "lookup", "arguments": {"kye": "amber"}}})
            assert typo["result"]["isError"]
            status, _ = await rpc(None, {**call, "params": {"name": "lookup", "arguments": {"key": start_a}}})
            assert status == 401
            status, garbage = await rpc(a.key, {"id": 2, "method": 7})
            assert status == 400 and garbage["error"]["code"] == -32600
            _, missing = await rpc(a.key, {"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
            assert missing["error"]["code"] == -32601
            # Steps were the sessions' own: each env saw its own calls only.
            assert len(a.turns) == len(b.turns) == 0 and (a.env_done, b.env_done) == (False, False)
            assert [c["arguments"] for c in first.unwrapped.transcript] == [{"key": start_a}]  # the typo did not run
            assert [c["arguments"] for c in second.unwrapped.transcript] == [{"key": start_b}]
    finally:
        first.close()
        second.close()


async def test_the_eval_harness_evaluates_a_program(tmp_path, keychain_policy):
    from agentgym.eval.harness import evaluate
    from agentgym.eval.suites import load_suite

    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text(
        "\n".join(json.dumps({"env": "agentgym/tool.keychain-v0", "task_id": f"train-{i}"}) for i in range(3))
    )
    summary = await evaluate(
        load_suite(str(suite_file)),
        keychain_policy,
        k=2,
        out_dir=tmp_path / "run",
        program=programs.openai_program,
        timeout=60,
        progress=False,
    )
    assert summary["episodes"] == 6 and summary["metrics"]["success_rate"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert all(row["trajectory"]["metadata"]["gateway"]["calls"] >= 3 for row in rows)


def test_a_job_serves_one_gateway_per_loop_while_episodes_run():
    import asyncio

    from agentgym.rollout.agent import Agent
    from agentgym.rollout.runner import Runner, RunnerConfig

    job = GatewayJob(programs.openai_program, timeout=60)
    policy = ScriptedPolicy(programs.keychain_replies)
    runner = Runner(Agent(policy), KeyChainEnv, RunnerConfig(concurrency=3, progress=False), job=job)
    result = asyncio.run(runner.run([f"train-{i}" for i in range(4)]))
    assert [r.success for r in result.records] == [True] * 4
    assert not job._gateways  # the last episode closed it
