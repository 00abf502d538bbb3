"""Tests for agentgym.eval.report: the HTML report opened in headless Chromium and checked through the DOM."""

import asyncio
import base64
import json
import os
import struct
import time
import zlib
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from agentgym.eval.metrics import summarize, summarize_by
from agentgym.eval.report import compare_report, write_report
from agentgym.rollout.trajectory import Trajectory, Turn

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE_ACTION = '<script>window.__pwned = 1</script>click("ok")'
HOSTILE_OBSERVATION = '<img src=x onerror="window.__pwned = 2"> & done'

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium at /usr/bin/chromium")


def _png_1x1() -> str:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode()


def _trajectory(task, success, turns, action=None, observation=None, turn_error=None, screenshot=False, error=None):
    steps = []
    for i in range(turns):
        info = {}
        if turn_error and i == turns - 1:
            info["error"] = turn_error
        if screenshot and i == 0:
            info["screenshot"] = _png_1x1()
        steps.append(
            Turn(
                prompt_ids=[1, 2],
                completion_ids=[3],
                logprobs=[-0.1],
                prompt_mask=[0, 0],
                action=action if action and i == 0 else f"{task} action {i}",
                observation=observation if observation and i == 0 else f"{task} observation {i}",
                reward=1.0 if success and i == turns - 1 else 0.0,
                info=info,
            )
        )
    return Trajectory(
        task_id=task,
        env_id="dummy",
        turns=steps,
        initial_observation=f"start {task}",
        reward=float(success),
        success=success,
        error=error,
    )


def _row(category, sample, trajectory, error=None):
    return {
        "suite": "smoke",
        "task_id": trajectory.task_id,
        "category": category,
        "sample": sample,
        "success": trajectory.success,
        "reward": trajectory.reward,
        "turns": len(trajectory.turns),
        "tokens_in": 100,
        "tokens_out": 20,
        "wall_s": 1.5,
        "error": error,
        "trajectory": trajectory.to_dict(),
    }


def _make_run(run_dir: Path) -> Path:
    # t1 solved twice (with a screenshot), t2 once (the failure is an env error), t3 never
    # (its first action and observation are hostile markup, one turn carries an error).
    rows = [
        _row("web", 0, _trajectory("t1", True, 2, screenshot=True)),
        _row("web", 1, _trajectory("t1", True, 3)),
        _row("web", 0, _trajectory("t2", False, 1, error="env_error: browser crashed"), "env_error: browser crashed"),
        _row("web", 1, _trajectory("t2", True, 2)),
        _row("code", 0, _trajectory("t3", False, 4, HOSTILE_ACTION, HOSTILE_OBSERVATION, "bad_action: <b>nope</b>")),
        _row("code", 1, _trajectory("t3", False, 1)),
    ]
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        "schema_version": 1,
        "suite": "smoke",
        "model": "scripted<b>",
        "k": 2,
        "tasks": 3,
        "episodes": 6,
        "metrics": summarize(rows, 2),
        "by_category": summarize_by(rows, "category", 2),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def _chromium_trees() -> dict[int, int]:
    """This process's Chromium descendants, each with the root of its browser's tree (its topmost Chromium
    ancestor): a renderer that another browser starts later is told apart from ours by its root."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), b"chromium" in cmdline)
    found = {}
    for pid, (_, is_chromium) in parents.items():
        ancestor, root = pid, None
        while ancestor in parents and ancestor != os.getpid():
            if parents[ancestor][1]:
                root = ancestor
            ancestor = parents[ancestor][0]
        if ancestor == os.getpid() and is_chromium:
            found[pid] = root
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_report_renders_in_browser(tmp_path):
    report = write_report(_make_run(tmp_path / "run"))
    assert report == tmp_path / "run" / "report.html"
    html = report.read_text()
    assert "<script>window.__pwned" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )

    # Other tests' shared browser (agentgym.sandbox.browser.BrowserHost) may be running: only ours counts.
    others = set(_chromium_trees().values())
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            requests, page_errors = [], []
            page.on("request", lambda request: requests.append(request.url))
            page.on("pageerror", lambda error: page_errors.append(error))
            await page.goto(report.as_uri())
            browser_pids = {pid for pid, root in _chromium_trees().items() if root not in others}

            # Summary: success rate (1 + .5 + 0)/3, pass@2 (1 + 1 + 0)/3, 13 turns over 6 episodes, 1/6 env errors.
            async def metric(key):
                return await page.text_content(f'#summary-table tr[data-metric="{key}"] td:nth-child(2)')

            assert await metric("success_rate") == "0.500"
            assert await metric("pass_at_1") == "0.500"
            assert await metric("pass_at_2") == "0.667"
            assert await metric("pass_hat_2") == "0.333"  # only the 2/2 task succeeds in both tries
            lo, hi = json.loads(await metric("pass_hat_2_ci95"))
            assert 0 <= lo <= 1 / 3 <= hi <= 1
            assert await metric("mean_turns") == "2.167"
            assert await metric("tokens_in") == "600"
            assert await metric("env_error_rate") == "0.167"
            lo, hi = json.loads(await metric("success_ci95"))
            assert 0 <= lo <= 0.5 <= hi <= 1
            assert "scripted<b>" in await page.text_content("h1")

            cells = await page.eval_on_selector_all(
                "#category-table tbody tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
            )
            assert [c[:4] + c[5:7] for c in cells] == [
                ["code", "1", "2", "0.000", "0.000", "0.000"],
                ["web", "2", "4", "0.750", "0.750", "1.000"],
            ]

            # Plots: one bar (and whisker) per category, one point per k, one histogram bar per turn count 1..4.
            assert await page.locator("#plot-category rect.bar").count() == 2
            assert await page.locator("#plot-category .whisker").count() == 2
            points = await page.eval_on_selector_all(
                "#plot-pass-at-k circle.point", "ps => ps.map(p => p.dataset.value)"
            )
            assert [round(float(v), 3) for v in points] == [0.5, 0.667]
            bars = await page.eval_on_selector_all("#plot-turns rect.bar", "bs => bs.map(b => b.dataset.value)")
            assert bars == ["2", "2", "1", "1"]  # turns: 2, 3, 1, 2, 4, 1

            # Viewer: the first failure (t2 #0) is open at load; a click shows another episode, all its turns.
            assert await page.locator("article.episode:visible").count() == 1
            assert await page.locator("#episode-2").is_visible()
            assert await page.get_attribute(".episode-link.selected", "data-episode") == "2"
            await page.click('.episode-link[data-episode="4"]')
            episode = page.locator("#episode-4")
            assert await episode.is_visible()
            assert await page.locator("article.episode:visible").count() == 1
            assert await episode.locator("li.turn").count() == 4
            assert await episode.locator("pre.action").first.text_content() == HOSTILE_ACTION
            assert await episode.locator("pre.observation").first.text_content() == HOSTILE_OBSERVATION
            assert await episode.locator("pre.turn-error").text_content() == "bad_action: <b>nope</b>"
            assert await page.evaluate("window.__pwned") is None
            assert await page.locator("#episode-detail script, #episode-detail b").count() == 0

            await page.click('.episode-link[data-episode="0"]')
            assert not await episode.is_visible()
            assert await page.locator("#episode-0 li.turn").count() == 2
            shot = page.locator("#episode-0 img.screenshot")
            assert await shot.count() == 1
            assert await shot.evaluate("img => img.complete && img.naturalWidth") == 1
            await page.click('.episode-link[data-episode="2"]')
            assert "env_error: browser crashed" in await page.text_content("#episode-2 pre.episode-error")

            # Filter: failed episodes only (t2 #0, t3 #0, t3 #1).
            await page.check('input[name="outcome"][value="fail"]')
            visible = await page.eval_on_selector_all(
                "#episode-list li", "lis => lis.filter(li => !li.hidden).map(li => li.textContent)"
            )
            assert visible == ["t2 #0", "t3 #0", "t3 #1"]
            await page.check('input[name="outcome"][value="all"]')
            assert await page.locator("#episode-list li:visible").count() == 6

            await page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            assert not page_errors
            assert all(url.startswith(("file:", "data:")) for url in requests), requests
        finally:
            await browser.close()

    assert browser_pids, "expected to see the browser's processes"
    # Renderer and zygote processes exit just after the browser process; give them a moment (on a
    # loaded two-core machine, seconds: they notice their parent is gone at their next poll).
    deadline = time.monotonic() + 30
    while any(map(_alive, browser_pids)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not [pid for pid in browser_pids if _alive(pid)], "chromium processes left running"
    assert (tmp_path / "report.png").stat().st_size > 0


def test_report_rejects_malformed_screenshots_and_tolerates_missing_trajectories(tmp_path):
    run_dir = _make_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    rows[0]["trajectory"]["turns"][0]["info"]["screenshot"] = 'AAAA" onerror="alert(1)'
    rows[1]["trajectory"] = None
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = write_report(run_dir).read_text()
    assert "alert(1)" not in html
    assert "screenshot is not valid base64" in html and "No trajectory recorded." in html


def test_compare_report_pairs_shared_tasks(tmp_path):
    run_a = _make_run(tmp_path / "a")
    rows = [json.loads(line) for line in (run_a / "results.jsonl").read_text().splitlines()]
    # B: t1 missing, t3 solved every time, an extra t9; t2 as in A.
    rows_b = [dict(r, success=True) if r["task_id"] == "t3" else r for r in rows if r["task_id"] != "t1"]
    rows_b.append(dict(rows[0], task_id="t9"))
    run_b = tmp_path / "b"
    run_b.mkdir()
    (run_b / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_b))
    summary_b = {
        "schema_version": 1,
        "suite": "smoke",
        "model": "other",
        "k": 2,
        "tasks": 3,
        "episodes": 5,
        "metrics": summarize(rows_b, 2),
        "by_category": summarize_by(rows_b, "category", 2),
    }
    (run_b / "summary.json").write_text(json.dumps(summary_b))

    html = compare_report(run_a, run_b).read_text()
    assert (run_a / "compare-b.html").exists()
    assert "2 shared tasks; 1 only in A, 1 only in B" in html
    # Shared: t2 (0.5 vs 0.5) and t3 (0 vs 1); exact sign-flip over 2 tasks gives p = 1.
    assert (
        '<tr data-category="(all)"><td>(all)</td><td>2</td><td>0.250</td><td>0.750</td><td>-0.500</td>'
        "<td>[-1.000, 0.000]</td><td>1.000</td></tr>"
    ) in html
    differing = html.split('id="differing-table"')[1]
    assert "<td>t3</td>" in differing and "<td>t2</td>" not in differing
    assert "scripted&lt;b&gt;" in html


async def test_a_large_k1_run_reads_well_in_the_browser(tmp_path):
    """30 categories, k = 1, episodes in finishing order, control characters from the model, a long model path."""
    rows = []
    for i in reversed(range(30)):  # finishing order: last task first
        category = f"category-{i:02d}-with-a-rather-long-template-name"
        action = "click(\x00\x07)" if i == 7 else None
        rows.append(_row(category, 0, _trajectory(f"task-{i}", i % 3 == 0, 1 + i % 4, action=action)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        "schema_version": 1,
        "suite": "big",
        "model": "/data/checkpoints/2026-11-30/qwen-7b-sft",
        "k": 1,
        "tasks": 30,
        "episodes": 30,
        "errors": {"context_overflow": 2},
        "metrics": summarize(rows, 1),
        "by_category": summarize_by(rows, "category", 1),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    report = write_report(run_dir)
    html = report.read_text()
    assert "\x00" not in html and "\x07" not in html

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await page.goto(report.as_uri())
            assert await page.title() == "agentgym eval: big / qwen-7b-sft"
            run_info = await page.text_content("#run-info")
            assert "/data/checkpoints/2026-11-30/qwen-7b-sft" in run_info and "context_overflow: 2" in run_info

            headers = await page.eval_on_selector_all("#category-table th", "hs => hs.map(h => h.textContent)")
            assert headers.count("pass@1") == 1

            # One bar per category, and no two category labels overlap on screen.
            assert await page.locator("#plot-category rect.bar").count() == 30
            boxes = [await label.bounding_box() for label in await page.locator("#plot-category .bar-label").all()]
            assert len(boxes) == 30
            assert all(a["y"] + a["height"] <= b["y"] + 0.5 for a, b in zip(boxes, boxes[1:]))

            # Episodes listed by task (numbers by value); the first failure is open without a click.
            listed = await page.eval_on_selector_all("#episode-list li", "lis => lis.map(li => li.textContent)")
            assert listed == [f"task-{i} #0" for i in range(30)]
            assert await page.locator("article.episode:visible h3").text_content() == "task-1 #0"

            await page.click('.episode-link:text("task-7 #0")')
            assert await page.locator("article.episode:visible pre.action").first.text_content() == "click(\\x00\\x07)"
            await page.screenshot(path=str(tmp_path / "large-report.png"), full_page=True)
        finally:
            await browser.close()
    assert (tmp_path / "large-report.png").stat().st_size > 0
