"""inspect-evals' own AgentBench OS scorer, run against an agentgym sandbox, for agreement tests.

inspect-evals' ``agent_bench_os_scorer.py`` imports inspect_ai (not installed: a model-serving stack). Its
scoring code only needs ``sandbox().exec``/``write_file``, ``ExecResult`` and a TaskState's ``metadata`` and
``output.completion``; this module loads the file unchanged with those few inspect_ai names stubbed, and the
sandbox calls bridged to a :class:`~agentgym.sandbox.docker.DockerSandbox` (as root, as inspect's are). The
one adaptation: inspect-evals' image (a Python image) has ``python``; Debian's has the same interpreter as
``python3``, which the bridge runs for it.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import posixpath
import shlex
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from agentgym.envs.code.agentbench_os import data_dir

T = TypeVar("T")


@dataclass
class ExecResult(Generic[T]):
    success: bool
    returncode: int
    stdout: T
    stderr: T


class _Bridge:
    """inspect_ai's sandbox API over a DockerSandbox."""

    def __init__(self, sandbox):
        self.sandbox = sandbox

    async def exec(self, cmd: list[str], user: str | None = None, timeout: int | None = None) -> ExecResult[str]:
        assert user == "root"  # every call the scorer makes; the sandbox's user is root
        if cmd[0] == "python":
            cmd = ["python3", *cmd[1:]]
        result = self.sandbox.exec(shlex.join(cmd), timeout=min(timeout or 120, 120))
        return ExecResult(result.exit_code == 0, result.exit_code, result.stdout, result.stderr)

    async def write_file(self, path: str, text: str) -> None:
        self.sandbox.exec(f"mkdir -p {shlex.quote(posixpath.dirname(path))}")
        self.sandbox.write_file(path, text)


def _stub(name: str, **names: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(names)
    return module


_current: list[_Bridge] = []


def load_scorer() -> types.ModuleType:
    """inspect-evals' scorer module, loaded from the installed package's file with inspect_ai's names stubbed."""
    path = data_dir().parent / "agent_bench_os_scorer.py"
    stubs = {
        "inspect_ai": _stub("inspect_ai"),
        "inspect_ai.scorer": _stub(
            "inspect_ai.scorer",
            Score=dict,
            Scorer=object,
            Target=object,
            accuracy=lambda: None,
            stderr=lambda: None,
            scorer=lambda **_: lambda function: function,
        ),
        "inspect_ai.solver": _stub("inspect_ai.solver", TaskState=object),
        "inspect_ai.util": _stub("inspect_ai.util", ExecResult=ExecResult, sandbox=lambda: _current[-1]),
        # The package's __init__ imports inspect_ai's agents: stand in for it, so only constants.py loads.
        "inspect_evals.agent_bench": types.ModuleType("inspect_evals.agent_bench"),
    }
    stubs["inspect_evals.agent_bench"].__path__ = [str(path.parent)]  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("inspect_agent_bench_os_scorer", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, module_before in saved.items():
            if module_before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_before
        sys.modules.pop("inspect_evals.agent_bench.constants", None)
    return module


def inspect_verdict(scorer: types.ModuleType, sandbox, record: dict, answer: str) -> bool:
    """inspect-evals' ``is_answer_correct`` on ``answer`` for a task (its record, paths rewritten), in ``sandbox``."""
    metadata = {key: record[key] for key in ["create", "start", "evaluation", "labels", "example"] if key in record}
    state = types.SimpleNamespace(metadata=metadata, output=types.SimpleNamespace(completion=answer))
    _current.append(_Bridge(sandbox))
    try:
        return asyncio.run(scorer.is_answer_correct(state))
    finally:
        _current.pop()


def inspect_function(name: str):
    """A pure function of inspect-evals' dataset module (its source, compiled alone: the module imports inspect_ai)."""
    path = data_dir().parent / "agent_bench_os_dataset.py"
    tree = ast.parse(Path(path).read_text())
    wanted = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in {name, "change_path_to_agent_home"}
    ]
    namespace: dict[str, Any] = {"AGENT_HOME_DIR": "/home/agent", "Any": Any}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]
