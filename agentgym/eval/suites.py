"""Evaluation suites: which env runs which tasks, and the category each task is reported under.

Built-in suites: ``humaneval``, ``repofix``, ``bfcl-base``, ``bfcl-miss_func``,
``bfcl-miss_param``, ``bfcl-long_context`` and ``bfcl`` (the four BFCL categories), ``web-shop``,
``web-mail`` and ``web-wiki`` (the self-hosted web apps, reported per task template) and
``miniwob`` (every MiniWoB++ task, one env each) and ``gui`` (the desktop tasks, reported per app). A custom suite
is a JSONL or YAML file listing tasks, one mapping each::

    {"env": "agentgym/HumanEval-v0", "task_id": "HumanEval/0", "category": "easy"}

(``category`` defaults to the env's name; an optional ``env_kwargs`` mapping is passed to
``gymnasium.make``). A YAML file holds a list of such mappings (or ``{"tasks": [...]}``).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BUILTIN_SUITES", "Suite", "SuiteTask", "load_suite"]

BFCL_CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
WEB_APPS = ("shop", "mail", "wiki")
BUILTIN_SUITES = (
    "humaneval",
    "repofix",
    *(f"bfcl-{c}" for c in BFCL_CATEGORIES),
    "bfcl",
    *(f"web-{app}" for app in WEB_APPS),
    "miniwob",
    "gui",
)


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: the env that runs it (id and ``gymnasium.make`` kwargs), its id, its reporting category."""

    env_id: str
    task_id: str
    category: str
    env_kwargs: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Suite:
    """A named list of tasks. Task ids are unique within a suite (results are keyed by them)."""

    name: str
    tasks: tuple[SuiteTask, ...]

    def __post_init__(self):
        seen: set[str] = set()
        duplicates = {t.task_id for t in self.tasks if t.task_id in seen or seen.add(t.task_id)}
        if duplicates:
            raise ValueError(f"suite {self.name!r} lists these task ids more than once: {sorted(duplicates)[:5]}")

    def filter(self, patterns: str | None) -> Suite:
        """The tasks whose id matches one of the comma-separated ids or globs (``None``: all of them)."""
        if not patterns:
            return self
        wanted = [p.strip() for p in patterns.split(",") if p.strip()]
        tasks = tuple(t for t in self.tasks if any(fnmatch.fnmatchcase(t.task_id, p) for p in wanted))
        if not tasks:
            raise ValueError(f"no task of suite {self.name!r} matches {patterns!r}")
        return Suite(self.name, tasks)

    def by_env(self) -> dict[tuple[str, str], list[SuiteTask]]:
        """Tasks grouped by env (id and kwargs, JSON-encoded so they can key a dict), in suite order."""
        groups: dict[tuple[str, str], list[SuiteTask]] = {}
        for task in self.tasks:
            groups.setdefault((task.env_id, json.dumps(task.env_kwargs, sort_keys=True)), []).append(task)
        return groups


def _bfcl_tasks(category: str) -> list[SuiteTask]:
    from agentgym.envs.tool.bfcl import load_tasks

    return [SuiteTask(f"agentgym/BFCL-multi-turn-{category}-v0", task_id, category) for task_id in load_tasks(category)]


def _builtin(name: str) -> Suite:
    if name == "humaneval":
        from agentgym.envs.code.humaneval import load_problems

        return Suite(name, tuple(SuiteTask("agentgym/HumanEval-v0", t, "humaneval") for t in load_problems()))
    if name == "repofix":
        from agentgym.envs.code import repofix_gen

        # Reported by the mutation operator that planted the bug (the generator records it per task).
        return Suite(
            name,
            tuple(
                SuiteTask("agentgym/RepoFix-v0", t["instance_id"], t["difficulty"]["operator"])
                for t in repofix_gen.load_tasks()
            ),
        )
    if name.startswith("web-"):
        from agentgym.envs.web.app_env import app_tasks

        app = name.removeprefix("web-")
        return Suite(
            name, tuple(SuiteTask(f"agentgym/web.{app}-v0", task.id, task.template) for task in app_tasks(app).values())
        )
    if name == "miniwob":
        from agentgym.envs.web.miniwob import miniwob_tasks

        return Suite(name, tuple(SuiteTask(f"agentgym/miniwob.{task}-v0", task, task) for task in miniwob_tasks()))
    if name == "gui":
        from agentgym.envs.gui.tasks import TASKS

        return Suite(name, tuple(SuiteTask("agentgym/Desktop-v0", task.id, task.app.name) for task in TASKS.values()))
    if name == "bfcl":
        return Suite(name, tuple(t for c in BFCL_CATEGORIES for t in _bfcl_tasks(c)))
    return Suite(name, tuple(_bfcl_tasks(name.removeprefix("bfcl-"))))


def _read_entries(path: Path) -> list:
    """The file's entries; text that is not YAML (or JSON lines) is a ValueError naming the file and line."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or []
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f":{mark.line + 1}" if mark is not None else ""
            raise ValueError(f"{path}{at}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
        data = data.get("tasks") if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise ValueError(f"{path}: a YAML suite is a list of tasks (or a mapping with a 'tasks' list)")
        return data
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON object: {exc.msg} (column {exc.colno})") from None
    return entries


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a custom suite from a JSONL/YAML file (see the module docstring)."""
    if name_or_path in BUILTIN_SUITES:
        return _builtin(name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"unknown suite {name_or_path!r}: not one of {', '.join(BUILTIN_SUITES)} nor a file")
    tasks = []
    for number, entry in enumerate(_read_entries(path), 1):
        if not isinstance(entry, dict) or "env" not in entry or "task_id" not in entry:
            raise ValueError(f"{path}: entry {number} needs 'env' and 'task_id', got {entry!r}")
        env_id = entry["env"] if "/" in entry["env"] else f"agentgym/{entry['env']}"
        category = entry.get("category") or env_id.removeprefix("agentgym/")
        tasks.append(SuiteTask(env_id, str(entry["task_id"]), str(category), dict(entry.get("env_kwargs") or {})))
    return Suite(path.stem, tuple(tasks))
