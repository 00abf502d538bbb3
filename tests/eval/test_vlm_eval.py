"""`agentgym eval --images` on a real MiniWoB++ env (Chromium): Set-of-Marks screenshots reach a vision endpoint and the report shows what the model saw.

The endpoint is :class:`tests.helpers.vlm_endpoint.RecordingVLM`, which stands in for a hosted vision model
(none can be downloaded here): it records the requests the real ``openai`` client sent and answers
with a scripted click on an element that does not exist, so each episode runs its two turns.
"""

import asyncio
import base64
import hashlib
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from playwright.async_api import async_playwright

from agentgym.eval.harness import _screen_kwargs
from agentgym.rollout.trajectory import Trajectory
from tests.helpers.vlm_endpoint import TEXT_ONLY_MODEL, RecordingVLM, images_in

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium at /usr/bin/chromium")

CLICK_NOTHING = [[("click", {"id": 9999})]]


async def agentgym_eval(*args: str) -> tuple[int, str]:
    """The real CLI in a subprocess (the stand-in endpoint keeps running in this event loop); exit code and stderr."""
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("agentgym")),
        "eval",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "EMPTY"},
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 300)
    return process.returncode, stderr.decode()


def test_envs_with_a_screen_are_made_with_screenshots():
    assert _screen_kwargs("agentgym/web.miniwob.click-test-v0", {}) == {"set_of_marks": True}
    assert _screen_kwargs("agentgym/web.shop-v0", {"app": "shop", "set_of_marks": False}) == {
        "app": "shop",
        "set_of_marks": False,
    }
    assert _screen_kwargs("agentgym/gui.desktop-v0", {}) == {"screenshot": True}
    assert _screen_kwargs("agentgym/code.humaneval-v0", {}) == {}


@pytest.mark.slow
async def test_screenshots_reach_the_endpoint_and_the_report(tmp_path):
    endpoint = RecordingVLM(CLICK_NOTHING)
    server = await endpoint.start()
    out = tmp_path / "run"
    try:
        code, stderr = await agentgym_eval(
            "--suite", "miniwob", "--tasks", "click-test", "--policy", endpoint.base_url, "--model", "vlm",
            "--images", "--image-max-side", "128", "--max-turns", "2", "--out", str(out),
        )  # fmt: skip
    finally:
        await server.close()
    assert code == 0, stderr
    assert len(endpoint.requests) == 2
    sent = [images_in(request["messages"][-1]) for request in endpoint.requests]
    for request, (png,) in zip(endpoint.requests, sent):
        assert sum(len(images_in(m)) for m in request["messages"]) == 1  # keep_last 1: the older one is a stub
        image = np.asarray(Image.open(io.BytesIO(png)))
        assert image.shape == (128, 98, 3)  # MiniWoB's 160 × 210 task area: 160 × 128/210 = 97.5
        assert image.std() > 10  # a page, not a blank frame
    assert "[screenshot of turn 0 removed to save context]" in json.dumps(endpoint.requests[1]["messages"])

    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    trajectory = Trajectory.from_dict(row["trajectory"])
    hashes = [hashlib.sha256(png).hexdigest() for (png,) in sent]
    assert [turn.image_hashes for turn in trajectory.turns] == [[h] for h in hashes]
    thumbnails = trajectory.metadata["image_thumbnails"]
    assert set(thumbnails) == set(hashes)
    assert json.loads((out / "run.json").read_text())["images"]["max_side"] == 128

    html = (out / "report.html").read_text()
    assert html.count('class="model-image"') == 2
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page()
            await page.goto((out / "report.html").as_uri())
            shown = page.locator("#episode-0 img.model-image")
            assert await shown.count() == 2
            assert [await shown.nth(i).get_attribute("data-hash") for i in range(2)] == hashes
            # The thumbnails load under the report's CSP: JPEGs no larger than what was sent.
            assert await shown.first.evaluate("img => img.complete && img.naturalWidth") == 98
            src = await shown.first.get_attribute("src")
            assert src == f"data:image/jpeg;base64,{thumbnails[hashes[0]]}"
        finally:
            await browser.close()
    thumbnail = Image.open(io.BytesIO(base64.b64decode(thumbnails[hashes[0]])))
    assert (thumbnail.format, thumbnail.size) == ("JPEG", (98, 128))


@pytest.mark.slow
async def test_a_text_only_endpoint_stops_the_run_with_a_clear_error(tmp_path):
    endpoint = RecordingVLM(
        CLICK_NOTHING, refuse=lambda body: (400, TEXT_ONLY_MODEL) if "image_url" in str(body) else None
    )
    server = await endpoint.start()
    try:
        code, stderr = await agentgym_eval(
            "--suite", "miniwob", "--tasks", "click-test", "--policy", endpoint.base_url, "--model", "text",
            "--images", "--max-turns", "2", "--out", str(tmp_path / "run"),
        )  # fmt: skip
    finally:
        await server.close()
    assert code == 3, stderr
    assert TEXT_ONLY_MODEL in stderr and "text-only model" in stderr and "without --images" in stderr


async def test_image_options_need_images_and_valid_values(tmp_path):
    code, stderr = await agentgym_eval("--suite", "miniwob", "--policy", "oracle", "--image-keep", "2")
    assert code == 2 and "--image-keep needs --images" in stderr
    code, stderr = await agentgym_eval("--suite", "miniwob", "--policy", "oracle", "--images", "--image-quality", "0")
    assert code == 2 and "--images: quality must be 1-95" in stderr


@pytest.mark.docker
@pytest.mark.slow
async def test_the_desktop_suite_sends_its_screenshots(docker_ready, tmp_path):
    from agentgym.eval.harness import evaluate
    from agentgym.eval.suites import Suite, load_suite
    from agentgym.rollout.images import ImageConfig
    from agentgym.rollout.openai_policy import OpenAIPolicy

    task = next(task for task in load_suite("gui").tasks if task.category == "xedit")
    endpoint = RecordingVLM([[("wait", {"seconds": 0.5})]])
    server = await endpoint.start()
    policy = OpenAIPolicy(endpoint.base_url, "vlm", logprobs=False)
    out = tmp_path / "run"
    try:
        summary = await evaluate(
            Suite("gui-one", (task,)),
            policy,
            out_dir=out,
            max_turns=2,
            progress=False,
            images=ImageConfig(format="jpeg"),
        )
    finally:
        await policy.aclose()
        await server.close()
    assert summary["episodes"] == 1 and not summary["errors"], summary
    assert len(endpoint.requests) == 2
    for request in endpoint.requests:
        (jpeg,) = [data for message in request["messages"] for data in images_in(message)]
        assert jpeg[:2] == b"\xff\xd8"
        assert np.asarray(Image.open(io.BytesIO(jpeg))).shape == (576, 768, 3)  # the 1024 × 768 desktop at 3/4
    html = (out / "report.html").read_text()
    assert html.count('class="model-image"') == 2


@pytest.mark.slow
async def test_the_oracle_still_solves_web_tasks_with_images_on(tmp_path):
    # With native tool calls the screenshot follows the tool result in a message of its own: the
    # oracle must still read the page's ids from the tool result.
    from agentgym.eval.harness import evaluate
    from agentgym.eval.oracles import oracle_for
    from agentgym.eval.suites import Suite, load_suite
    from agentgym.rollout.images import ImageConfig

    task = load_suite("web-shop").tasks[0]
    summary = await evaluate(
        Suite("shop-one", (task,)), oracle_for, out_dir=tmp_path, model="oracle", progress=False, images=ImageConfig()
    )
    assert summary["metrics"]["success_rate"] == 1.0
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    trajectory = Trajectory.from_dict(row["trajectory"])
    assert all(len(turn.image_hashes) == 1 for turn in trajectory.turns)
