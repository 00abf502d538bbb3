"""`agentgym eval` as a user runs it: its sampling settings reach the endpoint and run.json, a rerun with other
settings or another task set is refused, its summary and report cover the same episodes, a suite whose
prompts do not fit the model is said once, with advice that can help, and episodes retried after a failed attempt
are counted at the end.

The endpoint is :class:`tests.helpers.vlm_endpoint.RecordingVLM` (the real ``openai`` client against a small
loopback server that records each request), and the CLI runs as a subprocess, as a user runs it.
"""

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.helpers.vlm_endpoint import RecordingVLM

AGENTGYM = str(Path(sys.executable).with_name("agentgym"))
TASK = ["--suite", "bfcl-base", "--tasks", "multi_turn_base_2", "--max-turns", "1"]


async def agentgym(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (the stand-in endpoint keeps running in this event loop)."""
    process = await asyncio.create_subprocess_exec(
        AGENTGYM,
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "EMPTY"},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    return subprocess.CompletedProcess(args, process.returncode, stdout.decode(), stderr.decode())


async def test_sampling_flags_reach_the_endpoint_are_recorded_and_are_part_of_the_runs_identity(tmp_path):
    endpoint = RecordingVLM([[("ls", {})]])
    server = await endpoint.start()
    try:
        policy = ["--policy", endpoint.base_url, "--model", "m"]
        default = await agentgym("eval", *TASK, *policy, "--out", "default", cwd=tmp_path)
        assert default.returncode == 0, default.stderr
        (request,) = endpoint.requests
        assert (request["temperature"], request["max_tokens"], request["top_p"]) == (1.0, 1024, 1.0)

        greedy = [*TASK, *policy, "--temperature", "0", "--max-tokens", "64", "--top-p", "0.5", "--out", "greedy"]
        done = await agentgym("eval", *greedy, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        request = endpoint.requests[1]
        assert (request["temperature"], request["max_tokens"], request["top_p"]) == (0.0, 64, 0.5)
        sampling = json.loads((tmp_path / "greedy" / "run.json").read_text())["sampling"]
        assert (sampling["temperature"], sampling["max_tokens"], sampling["top_p"]) == (0.0, 64, 0.5)

        # The same settings resume (nothing is left to run); other ones are refused in one line.
        again = await agentgym("eval", *greedy, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        other = await agentgym("eval", *greedy, "--temperature", "0.7", cwd=tmp_path)
        assert other.returncode == 2
        assert other.stderr.count("\n") == 1 and "sampling.temperature: 0.0 → 0.7" in other.stderr
        assert len(endpoint.requests) == 2
    finally:
        await server.close()

    bad = await agentgym("eval", *TASK, "--policy", "oracle", "--top-p", "0", cwd=tmp_path)
    assert (bad.returncode, bad.stderr) == (2, "agentgym eval: --top-p must be in (0, 1], got 0\n")


async def test_a_run_directory_holds_one_task_set_and_reports_the_samples_asked_for(tmp_path):
    oracle = ["eval", "--suite", "bfcl-base", "--policy", "oracle", "--out", "run"]
    first = await agentgym(*oracle, "--tasks", "multi_turn_base_1", "-k", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    more = await agentgym(*oracle, "--tasks", "multi_turn_base_1,multi_turn_base_2", cwd=tmp_path)
    assert more.returncode == 2 and more.stderr.count("\n") == 1
    assert "tasks: 1 → 2, 1 new (another --tasks or suite file)" in more.stderr

    # k may shrink: the summary and the report cover sample 0 only.
    fewer = await agentgym(*oracle, "--tasks", "multi_turn_base_1", "-k", "1", cwd=tmp_path)
    assert fewer.returncode == 0, fewer.stderr
    assert "1 episodes of 1 tasks" in fewer.stdout
    html = (tmp_path / "run" / "report.html").read_text()
    assert 'id="episode-0"' in html and 'id="episode-1"' not in html


async def test_a_suite_that_does_not_fit_the_model_is_said_once_with_advice_that_can_help(tmp_path):
    # What `agentgym serve` answers when a prompt plus max_tokens exceeds the window (vLLM words it alike).
    too_long = "This model's maximum context length is 4096 tokens, but the prompt has 5828 tokens."
    endpoint = RecordingVLM([[("ls", {})]], refuse=lambda body: (400, too_long))
    server = await endpoint.start()
    try:
        run = await agentgym(
            "eval", "--suite", "bfcl-base", "--tasks", "multi_turn_base_1?", "--policy", endpoint.base_url,
            "--model", "m", "--out", "run", cwd=tmp_path,
        )  # fmt: skip
    finally:
        await server.close()
    assert run.returncode == 0, run.stderr
    assert {r["max_tokens"] for r in endpoint.requests} == {1024}
    (warning,) = run.stderr.splitlines()  # one line for ten episodes, not one per episode
    assert "first request of task multi_turn_base_1" in warning and "4096 tokens" in warning
    assert "failed episodes by error: context_overflow 10" in run.stdout
    advice = [line for line in run.stdout.splitlines() if "context window" in line]
    assert len(advice) == 1 and "--max-turns" not in advice[0]
    assert "no turn limit" in advice[0] and "--max-tokens" in advice[0]


FLAKY_ENV = '''
from agentgym import register_env
from agentgym.envs.tool.keychain import KeyChainEnv


class FirstResetFails(KeyChainEnv):
    """KeyChain whose first episode in a process fails at reset, as one on a worker whose node is lost does."""

    failed = False

    def _setup(self, task_id):
        if not FirstResetFails.failed:
            FirstResetFails.failed = True
            raise RuntimeError("the worker's node was lost")
        return super()._setup(task_id)


register_env("FlakyKeyChain-v0", FirstResetFails)
'''


async def test_a_run_that_retried_episodes_says_so(tmp_path, monkeypatch):
    # The env is named module:id (gymnasium imports flaky_env first), from a suite file, as a user's own env is.
    (tmp_path / "flaky_env.py").write_text(FLAKY_ENV)
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        "\n".join(
            json.dumps({"env": "flaky_env:agentgym/FlakyKeyChain-v0", "task_id": t}) for t in ("train-0", "train-1")
        )
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    done = await agentgym("eval", "--suite", str(suite), "--policy", "oracle", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 episode(s) were retried after a failed attempt" in done.stdout, done.stdout
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert all(row["success"] for row in rows) and len(rows) == 2
    failures = [row["trajectory"]["metadata"].get("failures") for row in rows]
    assert sum(bool(f) for f in failures) == 1 and "node was lost" in json.dumps(failures)


def test_the_readmes_serve_and_eval_run_as_written_with_the_local_tiny_model(tmp_path):
    """docs/cli.md's `agentgym serve --model PATH`, with `tiny`, behind the README's BFCL eval line (a subset of tasks):
    the served name is the one given, and BFCL's first prompts, longer than tiny's 4,096-token window, are said once
    with advice that can help."""
    from tests.helpers.serving import ServerProcess

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if line.startswith("agentgym eval --suite bfcl-base --policy http")]
    command = shlex.split(line.split("#")[0])
    with ServerProcess("tiny", served_model_name=None, max_batch_size=4) as server:
        command = [server.base_url if word == "http://localhost:8000/v1" else word for word in command]
        command = ["tiny" if word == "my-model" else word for word in command]
        done = subprocess.run(
            [AGENTGYM, *command[1:], "--tasks", "multi_turn_base_1?", "--out", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "OPENAI_API_KEY": "EMPTY"},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    (warning,) = done.stderr.splitlines()  # one line for 40 episodes
    assert "first request of task multi_turn_base_1" in warning and "4096 tokens" in warning, warning
    assert "failed episodes by error: context_overflow 40" in done.stdout, done.stdout
    (advice,) = [line for line in done.stdout.splitlines() if "context window" in line]
    assert "--max-turns" not in advice and "--max-tokens" in advice
