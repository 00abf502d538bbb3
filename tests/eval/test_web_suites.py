"""Web suites through the eval harness on real Chromium: reference solutions score 100%, a random clicker scores its known rate on MiniWoB++, and screenshots reach the report."""

import json
import math

import pytest

from agentgym.eval.harness import evaluate
from agentgym.eval.oracles import RandomWebPolicy, oracle_for
from agentgym.eval.suites import Suite, SuiteTask, load_suite


def first_of_each_template(suite: Suite) -> Suite:
    seen: set[str] = set()
    return Suite(
        suite.name, tuple(task for task in suite.tasks if task.category not in seen and not seen.add(task.category))
    )


# The apps' own tests run every template's solution; here the harness path is what is tested
# (the oracle reading ids from chat messages), on a few templates of each app.
@pytest.mark.parametrize("app, templates", [("shop", 6), ("mail", 6), ("wiki", 6)])
async def test_reference_solutions_score_100_percent(app, templates, tmp_path):
    suite = first_of_each_template(load_suite(f"web-{app}"))
    assert len(suite.tasks) >= 20  # one task of every template
    suite = Suite(suite.name, suite.tasks[:templates])
    summary = await evaluate(suite, oracle_for, concurrency=4, out_dir=tmp_path, model="oracle", progress=False)
    failed = [
        json.loads(line)
        for line in (tmp_path / "results.jsonl").read_text().splitlines()
        if not json.loads(line)["success"]
    ]
    assert summary["metrics"]["success_rate"] == 1.0, [(r["task_id"], r.get("error")) for r in failed]
    assert summary["metrics"]["env_error_rate"] == 0.0


async def test_random_clicker_matches_its_known_rate_on_miniwob(tmp_path):
    """click-test-2 shows two buttons; clicking either ends the episode (+1 for the named one, -1
    for the other) and clicking anything else does nothing. A policy that clicks uniformly among
    the shown elements until a button is hit therefore succeeds with probability 1/2 — a little
    less in fact, since the buttons are placed at random and where TWO covers ONE's centre, ONE
    cannot be clicked — and on click-test (one button) with probability 1 given enough turns.
    (Published per-task random baselines are not reachable offline; these are exact expectations
    for this action space.)"""
    suite = Suite(
        "miniwob-random",
        (
            SuiteTask("agentgym/web.miniwob.click-test-2-v0", "click-test-2", "click-test-2"),
            SuiteTask("agentgym/web.miniwob.click-test-v0", "click-test", "click-test"),
        ),
    )
    samples = 30  # half a minute of Chromium on two cores; the interval below still excludes 0 and 1
    await evaluate(suite, RandomWebPolicy(), k=samples, max_turns=25, concurrency=6, out_dir=tmp_path, progress=False)
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rate = {
        task: sum(r["success"] for r in results if r["task_id"] == task) / samples
        for task in ("click-test-2", "click-test")
    }
    assert not any(r.get("error") for r in results)
    # 99.9% binomial interval around 1/2 for 30 samples: +- 3.29 * sqrt(0.25 / 30) = +- 0.30.
    assert abs(rate["click-test-2"] - 0.5) <= 3.29 * math.sqrt(0.25 / samples), rate
    assert rate["click-test"] >= 0.95, rate


async def test_screenshots_reach_the_report(tmp_path):
    task = first_of_each_template(load_suite("web-shop")).tasks[0]
    suite = Suite("shop-screens", (task,))
    out = tmp_path / "run"
    summary = await evaluate(suite, oracle_for, out_dir=out, model="oracle", progress=False, screenshots=True)
    assert summary["metrics"]["success_rate"] == 1.0
    report = (out / "report.html").read_text()
    assert report.count('class="screenshot"') >= 2 and "data:image/png;base64,iVBOR" in report
