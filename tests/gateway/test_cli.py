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
