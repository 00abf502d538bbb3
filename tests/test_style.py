"""Ruff's lint and format checks over the repository, so that CI (`make test`) keeps them clean; mypy runs in `make lint`."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_is_clean(command):
    if not RUFF.exists():
        pytest.skip("ruff is in the dev extra")
    result = subprocess.run([str(RUFF), *command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
