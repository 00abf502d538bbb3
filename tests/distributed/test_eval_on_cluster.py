"""`agentgym eval --ray`: the episodes of a BFCL and a HumanEval subset run on env workers on both nodes, with the results, resume and report of a local run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym.distributed.config import RayConfig
from agentgym.eval.harness import evaluate, load_results
from agentgym.eval.oracles import oracle_for
from agentgym.eval.suites import load_suite

BFCL_TASKS = "multi_turn_base_1*"  # 11 tasks, a few seconds each


def _scores(summary: dict) -> dict:
    """The summary's metrics without the timings (which differ between any two runs)."""
    return {name: value for name, value in summary["metrics"].items() if "wall" not in name and "_s" not in name[-2:]}


def _outcomes(folder) -> dict:
    return {
        (r["task_id"], r["sample"]): (r["success"], r["reward"], r["turns"])
        for r in load_results(folder / "results.jsonl")
    }


async def test_bfcl_on_the_cluster_equals_a_local_run_and_resumes(ray_cluster, tmp_path):
    suite = load_suite("bfcl-base").filter(BFCL_TASKS)
    ray = RayConfig(address=ray_cluster.address, env_workers=2, envs_per_worker=4)
    remote = await evaluate(suite, oracle_for, k=2, out_dir=tmp_path / "ray", progress=False, model="oracle", ray=ray)
    local = await evaluate(suite, oracle_for, k=2, out_dir=tmp_path / "local", progress=False, model="oracle")
    assert _scores(remote) == _scores(local)
    assert remote["metrics"]["success_rate"] == 1.0
    assert _outcomes(tmp_path / "ray") == _outcomes(tmp_path / "local")
    nodes = {
        r["trajectory"]["metadata"]["env_location"]["node"] for r in load_results(tmp_path / "ray" / "results.jsonl")
    }
    assert len(nodes) == 2, f"the episodes ran on both nodes: {nodes}"
    assert (tmp_path / "ray" / "report.html").exists()

    rows = len(load_results(tmp_path / "ray" / "results.jsonl"))
    again = await evaluate(suite, oracle_for, k=2, out_dir=tmp_path / "ray", progress=False, model="oracle", ray=ray)
    assert len(load_results(tmp_path / "ray" / "results.jsonl")) == rows, "a rerun resumes: nothing runs twice"
    assert _scores(again) == _scores(remote)


async def test_humaneval_subset_on_the_cluster(ray_cluster, docker_ready, tmp_path):
    suite = load_suite("humaneval").filter("HumanEval/0,HumanEval/1,HumanEval/2,HumanEval/3")
    ray = RayConfig(address=ray_cluster.address, env_workers=2, envs_per_worker=2)
    summary = await evaluate(
        suite, oracle_for, out_dir=tmp_path, progress=False, model="oracle", ray=ray, concurrency=4
    )
    assert summary["metrics"]["success_rate"] == 1.0
    assert summary["episodes"] == 4


def test_the_cli_runs_on_the_cluster(ray_cluster, tmp_path, capsys):
    from agentgym.cli import main

    out = tmp_path / "run"
    code = main(
        ["eval", "--suite", "bfcl-base", "--policy", "oracle", "--tasks", "multi_turn_base_10", "--out", str(out)]
        + ["--ray", ray_cluster.address, "--env-workers", "2"]
    )
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["metrics"]["success_rate"] == 1.0


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path):
    # A fresh process: this one is connected already (connect() would keep its cluster).
    command = [sys.executable, "-m", "agentgym.cli", "eval", "--suite", "bfcl-base", "--policy", "oracle"]
    done = subprocess.run(
        command + ["--tasks", "multi_turn_base_1", "--out", str(tmp_path), "--ray", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["agentgym: no Ray cluster at '127.0.0.1:1': Connection refused"]
    assert not (tmp_path / "results.jsonl").exists()


@pytest.mark.parametrize("argv", [["--env-workers", "2"], ["--ray", "auto", "--env-workers", "0"]])
def test_bad_cluster_flags_are_usage_errors(argv, capsys):
    from agentgym.cli import main

    with pytest.raises(SystemExit) as exit_:  # UsageError: one line, exit code 2
        main(["eval", "--suite", "bfcl-base", "--policy", "oracle", *argv])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("agentgym eval:")
