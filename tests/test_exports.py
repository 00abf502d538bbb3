"""Every package exports its public API: each name in each ``__all__`` resolves without a warning; heavy dependencies load only when used."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "agentgym"
# Not part of the Python API: the Tk apps that run inside the desktop container (the host imports
# only their formula module).
NOT_API = ("envs/gui/apps",)


def packages() -> list[str]:
    found = []
    for init in sorted(ROOT.rglob("__init__.py")):
        relative = init.parent.relative_to(ROOT.parent)
        if not any(init.parent.relative_to(ROOT).as_posix().startswith(skip) for skip in NOT_API):
            found.append(".".join(relative.parts))
    return found


def test_the_package_list_covers_the_families():
    assert {"agentgym", "agentgym.envs.code", "agentgym.envs.tool", "agentgym.memory", "agentgym.trainers"} <= set(
        packages()
    )


@pytest.mark.parametrize("name", packages())
def test_every_name_in_a_packages_all_resolves(name):
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    assert len(set(module.__all__)) == len(module.__all__), f"{name}.__all__ repeats a name"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no exported name is a deprecated one
        missing = [attribute for attribute in module.__all__ if getattr(module, attribute, None) is None]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    assert set(module.__all__) <= set(dir(module))


def lazy_packages() -> list[str]:
    return [name for name in packages() if "lazy_exports(" in _init_file(name).read_text()]


def _init_file(package: str) -> Path:
    return ROOT.parent.joinpath(*package.split("."), "__init__.py")


@pytest.mark.parametrize("name", lazy_packages())
def test_a_lazy_packages_type_checking_imports_are_its_lazy_names(name):
    """Type checkers and IDEs, which cannot run ``__getattr__``, see every lazy name imported from its module."""
    tree = ast.parse(_init_file(name).read_text())
    [block] = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    imported = {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    module = importlib.import_module(name)
    lazy = module._EXPORTS if hasattr(module, "_EXPORTS") else module._LAZY
    assert imported == {export: f"{name}.{submodule}" for export, submodule in lazy.items()}


def test_an_unknown_name_is_an_attribute_error():
    import agentgym.rollout

    # One Task type, agentgym.Task: the rollout package's request type is EpisodeRequest, under no other name.
    with pytest.raises(AttributeError, match="module 'agentgym.rollout' has no attribute 'Task'"):
        agentgym.rollout.Task  # noqa: B018


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split())


def test_importing_agentgym_and_its_packages_loads_no_heavy_dependency():
    heavy = {"torch", "transformers", "trl", "docker", "playwright", "mcp", "scipy", "sentence_transformers"}
    light = ["agentgym", "agentgym.rollout", "agentgym.trainers", "agentgym.memory", "agentgym.eval"]
    light += ["agentgym.sandbox", "agentgym.envs", "agentgym.envs.code", "agentgym.envs.gui", "agentgym.envs.tool"]
    assert not heavy & _imported_after("\n".join(f"import {name}" for name in light))


def test_the_warm_pool_does_not_import_the_sandbox_it_fills():
    # docker.py builds sandboxes from the pool's containers; the pool must not need docker.py back.
    modules = _imported_after("import agentgym.sandbox.pool")
    assert "agentgym.sandbox.containers" in modules and "agentgym.sandbox.docker" not in modules
