"""examples/vlm_agent.py runs as a user runs it: `agentgym serve` on the tiny VLM, MiniWoB screenshots through the
real openai client, what was sent printed per turn."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.browser
def test_vlm_agent_example_sends_screenshots_to_a_served_vlm():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "vlm_agent.py"), "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    episodes = re.findall(r"^click-button \(seed (\d)\): reward [-\d.]+ success \w+ error None$", result.stdout, re.M)
    assert episodes == ["0", "1"], result.stdout
    turns = re.findall(r"turn \d: images sent \['(\d+)x(\d+)'\], prompt tokens (\d+)", result.stdout)
    assert len(turns) >= 2, result.stdout
    for width, height, prompt_tokens in turns:
        assert max(int(width), int(height)) == 160  # ImageConfig(max_side=160): shrunk, aspect kept
        assert int(prompt_tokens) > 0  # the server counted the prompt, image tokens included
