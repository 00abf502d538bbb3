"""The eval harness end to end: oracles score 100%, gibberish 0%, runs resume without duplicates, files follow the contract, the CLI works and fails clearly."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.eval.harness import PolicyUnavailableError, evaluate, load_results
from agentgym.eval.oracles import NonsensePolicy, oracle_for
from agentgym.eval.suites import load_suite
from agentgym.rollout.policy import Completion, Policy, PolicyError
from agentgym.rollout.trajectory import Trajectory

AGENTGYM = Path(sys.executable).parent / "agentgym"
ROW_KEYS = {
    "suite",
    "task_id",
    "category",
    "sample",
    "success",
    "reward",
    "turns",
    "tokens_in",
    "tokens_out",
    "wall_s",
    "error",
    "trajectory",
}
SUMMARY_KEYS = {"schema_version", "suite", "model", "k", "tasks", "episodes", "errors", "metrics", "by_category"}


def check_contract(out: Path, suite_name: str, k: int, pairs: int) -> list[dict]:
    rows = load_results(out)
    assert len(rows) == pairs == len({(r["task_id"], r["sample"]) for r in rows})
    for row in rows:
        assert set(row) == ROW_KEYS and row["suite"] == suite_name
        assert isinstance(row["sample"], int) and 0 <= row["sample"] < k and isinstance(row["success"], bool)
        assert Trajectory.from_dict(row["trajectory"]).task_id == row["task_id"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS and summary["schema_version"] == 1 and summary["episodes"] == pairs
    assert (out / "report.html").exists()
    return rows


async def test_bfcl_ground_truth_scores_100_percent_on_all_of_base(tmp_path):
    # All 200 tasks: about 8 s on two cores.
    summary = await evaluate(load_suite("bfcl-base"), oracle_for, out_dir=tmp_path, model="oracle", progress=False)
    assert summary["tasks"] == summary["episodes"] == 200
    assert summary["metrics"]["success_rate"] == 1.0
    rows = check_contract(tmp_path, "bfcl-base", 1, 200)
    assert {r["category"] for r in rows} == {"base"} and not any(r["error"] for r in rows)


async def test_bfcl_ground_truth_as_hermes_text(tmp_path):
    from agentgym.rollout.agent import AgentConfig

    suite = load_suite("bfcl").filter("multi_turn_*_1")  # one task of each category
    summary = await evaluate(
        suite, oracle_for, out_dir=tmp_path, agent_config=AgentConfig(native_tools=False), progress=False
    )
    assert summary["metrics"]["success_rate"] == 1.0
    assert set(summary["by_category"]) == {"base", "miss_func", "miss_param", "long_context"}


async def test_nonsense_scores_zero_without_crashing(tmp_path):
    suite = load_suite("bfcl-base").filter("multi_turn_base_2*")
    summary = await evaluate(suite, NonsensePolicy(), k=2, out_dir=tmp_path, progress=False)
    assert summary["metrics"]["success_rate"] == 0.0 and summary["metrics"]["env_error_rate"] == 0.0
    check_contract(tmp_path, "bfcl-base", 2, 2 * len(suite.tasks))


class SlowOracle(Policy):
    """Delegates to a BFCL oracle, slowly, so a run can be cancelled midway."""

    def __init__(self, env_id, env_kwargs):
        self.inner = oracle_for(env_id, env_kwargs)
        self.name = "slow-oracle"

    async def chat(self, messages, tools, sampling) -> Completion:
        await asyncio.sleep(0.02)
        return await self.inner.chat(messages, tools, sampling)


async def test_a_cancelled_run_resumes_without_duplicates(tmp_path):
    suite = load_suite("bfcl-base").filter("multi_turn_base_3*")
    run = asyncio.create_task(
        evaluate(suite, SlowOracle, k=2, concurrency=4, out_dir=tmp_path, progress=False, model="oracle")
    )
    while len(load_results(tmp_path)) < 6:
        await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    partial = load_results(tmp_path)
    assert 6 <= len(partial) < 2 * len(suite.tasks)
    # A hard kill mid-write leaves a torn last line; the rerun must cut it, not build on it.
    with open(tmp_path / "results.jsonl", "a") as file:
        file.write('{"suite": "bfcl-base", "task_id": "multi_tu')

    summary = await evaluate(suite, oracle_for, k=2, out_dir=tmp_path, progress=False, model="oracle")
    rows = check_contract(tmp_path, "bfcl-base", 2, 2 * len(suite.tasks))
    assert rows[: len(partial)] == partial  # kept, not rerun
    assert summary["metrics"]["success_rate"] == 1.0
    # Resuming into this directory with another model would count its results as this one's.
    with pytest.raises(ValueError, match="model: 'oracle' → 'nonsense'"):
        await evaluate(suite, NonsensePolicy(), k=2, out_dir=tmp_path, progress=False, model="nonsense")


class OverflowingOracle(Policy):
    """A BFCL oracle behind an endpoint whose window is too small for some conversations (as vLLM answers them)."""

    name = "overflowing"

    def __init__(self, env_id, env_kwargs, too_long=2):
        self.inner, self.too_long = oracle_for(env_id, env_kwargs), too_long

    async def chat(self, messages, tools, sampling) -> Completion:
        if len(messages) > self.too_long:
            raise PolicyError(
                "OpenAI-compatible endpoint http://x/v1 answered HTTP 400: This model's maximum context "
                "length is 32 tokens. However, you requested 90 tokens"
            )
        return await self.inner.chat(messages, tools, sampling)


async def test_a_context_overflow_fails_the_episode_not_the_run(tmp_path):
    suite = load_suite("bfcl-base").filter("multi_turn_base_1,multi_turn_base_2,multi_turn_base_3")
    summary = await evaluate(suite, OverflowingOracle, out_dir=tmp_path, progress=False, model="m")
    rows = check_contract(tmp_path, "bfcl-base", 1, 3)  # every episode is a result; the run went on
    assert all(r["error"].startswith("context_overflow: ") and "maximum context length" in r["error"] for r in rows)
    assert summary["errors"] == {"context_overflow": 3} and summary["metrics"]["success_rate"] == 0.0


async def test_a_first_prompt_that_overflows_is_warned_about_once_at_once(tmp_path, capsys, caplog):
    suite = load_suite("bfcl-base").filter("multi_turn_base_1,multi_turn_base_2,multi_turn_base_3")
    factory = lambda env_id, env_kwargs: OverflowingOracle(env_id, env_kwargs, too_long=0)  # noqa: E731
    summary = await evaluate(suite, factory, out_dir=tmp_path, progress=False, model="m", concurrency=1)
    assert summary["errors"] == {"context_overflow": 3}
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "first request of task multi_turn_base_" in warnings[0]
    assert "maximum context length is 32 tokens" in warnings[0]
    assert not [r for r in caplog.records if "policy failure" in r.getMessage()]  # not one line per episode


async def test_an_overflow_later_in_the_conversation_is_not_a_first_prompt_warning(tmp_path, capsys):
    await evaluate(
        load_suite("bfcl-base").filter("multi_turn_base_1"),
        OverflowingOracle,
        out_dir=tmp_path,
        progress=False,
        model="m",
    )
    assert "warning" not in capsys.readouterr().err


class CountingNonsense(NonsensePolicy):
    """Nonsense from a chat endpoint that returns no token ids but reports its usage."""

    async def chat(self, messages, tools, sampling) -> Completion:
        completion = await super().chat(messages, tools, sampling)
        completion.usage = {"prompt_tokens": 100 * len(messages), "completion_tokens": 12}
        return completion


async def test_chat_mode_token_counts_come_from_the_reported_usage(tmp_path):
    await evaluate(
        load_suite("bfcl-base").filter("multi_turn_base_2"),
        CountingNonsense(),
        out_dir=tmp_path,
        max_turns=2,
        progress=False,
    )
    [row] = load_results(tmp_path)
    # Turn 1 sends the system prompt and the task (2 messages), turn 2 adds a reply and an observation.
    assert row["turns"] == 2 and (row["tokens_in"], row["tokens_out"]) == (200 + 400, 24)


def test_context_overflow_is_recognised_in_each_backends_words():
    from agentgym.eval.harness import is_context_overflow

    assert is_context_overflow("policy_error: ... HTTP 400: This model's maximum context length is 2048 tokens")
    assert is_context_overflow("policy_error: ... HTTP 400: {'code': 'context_length_exceeded'}")
    assert is_context_overflow("policy_error: prompt of 5000 tokens does not fit the model's context of 4096 positions")
    assert not is_context_overflow("policy_error: OpenAI-compatible endpoint http://x/v1 is unreachable")


def test_seeds_are_deterministic_per_task_and_sample():
    from agentgym.eval.harness import episode_seed

    assert episode_seed(0, "a", 1) == episode_seed(0, "a", 1)
    assert (
        len({episode_seed(0, "a", 0), episode_seed(0, "a", 1), episode_seed(0, "b", 0), episode_seed(1, "a", 0)}) == 4
    )


def test_custom_suite_file_and_task_filter(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        '{"env": "tool.bfcl-multi-turn-base-v0", "task_id": "multi_turn_base_0", "category": "files"}\n'
        '{"env": "agentgym/code.humaneval-v0", "task_id": "HumanEval/3"}\n'
    )
    suite = load_suite(str(path))
    assert [(t.env_id, t.category) for t in suite.tasks] == [
        ("agentgym/tool.bfcl-multi-turn-base-v0", "files"),
        ("agentgym/code.humaneval-v0", "code.humaneval-v0"),
    ]
    assert [t.task_id for t in suite.filter("HumanEval/*").tasks] == ["HumanEval/3"]
    with pytest.raises(ValueError, match="no task"):
        suite.filter("nothing*")


def test_cli_end_to_end_and_compare(tmp_path):
    run = subprocess.run(
        [
            str(AGENTGYM),
            "eval",
            "--suite",
            "bfcl-base",
            "--policy",
            "oracle",
            "--tasks",
            "multi_turn_base_1*",
            "-k",
            "2",
            "--out",
            "tmp",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "success_rate" in run.stdout
    check_contract(tmp_path / "tmp", "bfcl-base", 2, 2 * 111)  # the glob matches 1, 10-19 and 100-199
    nonsense = subprocess.run(
        [
            str(AGENTGYM),
            "eval",
            "--suite",
            "bfcl-base",
            "--policy",
            "nonsense",
            "--tasks",
            "multi_turn_base_1*",
            "--out",
            "gibberish",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert nonsense.returncode == 0, nonsense.stderr
    compared = subprocess.run(
        [str(AGENTGYM), "eval", "compare", "tmp", "gibberish"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert compared.returncode == 0, compared.stderr
    assert "difference         1.000" in compared.stdout
    assert (tmp_path / "tmp" / "compare-gibberish.html").exists()


def test_cli_unreachable_endpoint_fails_clearly_and_keeps_results(tmp_path):
    # The same model name and tasks for both runs: a run directory only resumes with the settings it was made with.
    done = subprocess.run(
        [
            str(AGENTGYM),
            "eval",
            "--suite",
            "bfcl-base",
            "--policy",
            "oracle",
            "--model",
            "m",
            "--tasks",
            "multi_turn_base_2",
            "--out",
            "run",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # Port 9 (discard) has no listener here: every connection is refused at once.
    run = subprocess.run(
        [
            str(AGENTGYM),
            "eval",
            "--suite",
            "bfcl-base",
            "--policy",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tasks",
            "multi_turn_base_2",
            "-k",
            "2",  # k may grow in a run directory: sample 1 is left to run
            "--out",
            "run",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "unreachable" in run.stderr and "rerun the same command to resume" in run.stderr
    assert [r["task_id"] for r in load_results(tmp_path / "run")] == ["multi_turn_base_2"]


async def test_unreachable_endpoint_raises_policy_unavailable(tmp_path):
    from agentgym.rollout.openai_policy import OpenAIPolicy

    async with OpenAIPolicy("http://127.0.0.1:9/v1", "m", max_retries=0) as policy:
        with pytest.raises(PolicyUnavailableError, match="unreachable"):
            await evaluate(
                load_suite("bfcl-base").filter("multi_turn_base_4"), policy, out_dir=tmp_path, progress=False
            )
    assert load_results(tmp_path) == []


@pytest.mark.docker
async def test_humaneval_canonical_solutions_score_100_percent(docker_ready, tmp_path):
    suite = load_suite("humaneval").filter(",".join(f"HumanEval/{i}" for i in range(0, 160, 10)))
    assert len(suite.tasks) == 16
    summary = await evaluate(suite, oracle_for, concurrency=2, out_dir=tmp_path, timeout=120, progress=False)
    assert summary["metrics"]["success_rate"] == 1.0, [r["error"] for r in load_results(tmp_path)]
    check_contract(tmp_path, "humaneval", 1, 16)
