"""`agentgym eval --program`: a user's own agent program evaluated on a suite from the command line (the installed
entry point, as a user runs it), and its usage errors in one line with exit code 2."""

from __future__ import annotations

import json
import sys

from tests.test_cli import _one_line_usage_error, run

SUITE = "\n".join(json.dumps({"env": "agentgym/tool.keychain-v0", "task_id": f"train-{i}"}) for i in range(2))


def test_eval_runs_a_command_program_through_the_gateway_on_the_tiny_model(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    program = f"{sys.executable} -m tests.helpers.gateway_programs"
    result = run("eval", "--suite", str(suite), "--policy", "tiny", "--program", program, "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        metadata = row["trajectory"]["metadata"]
        assert metadata["gateway"]["calls"] >= 1 and row["tokens_out"] > 0
        assert metadata["program_error"] is None or metadata["program_error"].startswith("program exited")
    assert json.loads((out / "run.json").read_text())["program"] == program.split()


def test_eval_program_errors_are_one_line(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(SUITE)
    result = run("eval", "--suite", str(suite), "--policy", "nonsense", "--program", "nomodule")
    _one_line_usage_error(result, "eval", "--program", "module:function")
    result = run("eval", "--suite", str(suite), "--policy", "oracle", "--program", "json:dumps")
    _one_line_usage_error(result, "eval", "token mode")


FAILING_PROGRAM = """
import os, signal, sys, time
task = os.environ["AGENTGYM_TASK_ID"]
if task == "train-0":
    print("partial answer")
    sys.exit(3)
if task == "train-1":
    time.sleep(600)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_eval_counts_a_program_that_crashes_hangs_or_is_killed_as_a_program_error_not_an_env_error(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        "\n".join(json.dumps({"env": "agentgym/tool.keychain-v0", "task_id": f"train-{i}"}) for i in range(3))
    )
    script = tmp_path / "failing.py"
    script.write_text(FAILING_PROGRAM)
    out = tmp_path / "run"
    program = f"{sys.executable} {script}"
    args = (
        "eval",
        "--suite",
        str(suite),
        "--policy",
        "tiny",
        "--program",
        program,
        "--timeout",
        "3",
        "--out",
        str(out),
    )
    result = run(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {row["task_id"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["train-0", "train-1", "train-2"]  # one row each: a program's failure is never retried
    assert rows["train-0"]["error"].startswith("program_error: program exited with status 3")
    assert rows["train-1"]["error"] == "program_error: timeout: the program ran past 3.0 s"
    assert rows["train-2"]["error"].startswith("program_error: program killed by signal SIGKILL")
    for row in rows.values():
        assert (row["success"], row["reward"]) == (False, 0.0)
        assert "failures" not in row["trajectory"]["metadata"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == {"program_error": 3}
    assert (summary["metrics"]["program_error_rate"], summary["metrics"]["env_error_rate"]) == (1.0, 0.0)
    assert "program_error_rate" in result.stdout and "program_error 3" in result.stdout
    report = (out / "report.html").read_text()
    assert "Agent program failure rate" in report and "program_error: 3" in report
