"""The layer contract (pyproject.toml's [tool.importlinter]): no module of agentgym imports a layer above its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(source_root: Path) -> subprocess.CompletedProcess:
    """import-linter over the agentgym package under ``source_root``, with the repository's contract."""
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo", REPO / "pyproject.toml"],
        cwd=source_root,
        env={**os.environ, "PYTHONPATH": str(source_root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_no_module_imports_a_layer_above_its_own():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_the_contract_catches_an_upward_import_and_an_unplaced_module(tmp_path):
    """On a copy of the package: the sandbox importing memory breaks it, and so does a top-level module the map does not place."""
    package = tmp_path / "agentgym"
    shutil.copytree(REPO / "agentgym", package, ignore=shutil.ignore_patterns("tasks", "__pycache__", "*.tar.gz"))
    with (package / "sandbox" / "base.py").open("a") as module:
        module.write("\nfrom agentgym.memory import store  # noqa: E402, F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "agentgym.sandbox is not allowed to import agentgym.memory" in result.stdout, result.stdout

    (package / "sandbox" / "base.py").write_text((REPO / "agentgym" / "sandbox" / "base.py").read_text())
    (package / "newcomer.py").write_text('"""A module no layer holds."""\n')
    result = lint_imports(tmp_path)
    assert result.returncode != 0 and "agentgym.newcomer" in result.stdout, result.stdout
