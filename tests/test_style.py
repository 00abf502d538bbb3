"""Ruff's lint and format checks and mypy over the repository, so that CI (`make test`) keeps them clean (the same three as `make lint` and .pre-commit-config.yaml)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
MYPY = Path(sys.executable).with_name("mypy")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_is_clean(command):
    if not RUFF.exists():
        pytest.skip("ruff is in the dev extra")
    result = subprocess.run([str(RUFF), *command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# Slow only when cold (about half a minute of CPU: the big ML libraries are not read, see pyproject.toml's mypy
# overrides); mypy's cache (.mypy_cache, one SQLite file) makes a later run take seconds.
@pytest.mark.slow
def test_mypy_is_clean():
    if not MYPY.exists():
        pytest.skip("mypy is in the dev extra")
    result = subprocess.run([str(MYPY)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
