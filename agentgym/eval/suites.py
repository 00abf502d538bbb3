"""Evaluation suites: which env runs which tasks, and the category each task is reported under.

A built-in suite is a set of registered envs, and its tasks are theirs: each env's ``tasks()``
(:class:`agentgym.Task`) gives the task ids and the categories results are reported under, so
what a suite runs is defined once, by the env family. The built-in suites:

* ``humaneval`` (``code.humaneval-v0``), ``repofix`` (``code.repofix-v0``, reported per
  mutation operator) and ``agentbench-os`` (``code.agentbench-os-v0``, reported per split: dev/test);
* ``bfcl-<category>`` for each BFCL multi-turn category (``tool.bfcl-multi-turn-<category>-v0``)
  and ``bfcl`` for all of them;
* ``web-<app>`` for each self-hosted web app (``web.<app>-v0``, reported per task template) and
  ``miniwob`` (every MiniWoB++ task, one env each);
* ``gui`` (``gui.desktop-v0``, reported per app) and ``desktop-apps`` (``gui.desktop-apps-v0``:
  LibreOffice Calc, Writer and Impress, GIMP, mousepad, xterm and Chromium, reported per app; tasks on
  several apps as ``multi_apps``);
* ``babyai`` (``text.babyai-v0``), ``scienceworld`` (``text.scienceworld-v0``), ``textworld``
  (``text.textworld-v0``) and ``textworld-express`` (``text.textworld-express-v0``), reported per
  split (train/dev/test): ``--tasks 'test/*'`` runs one split;
* ``tau2-<domain>`` for each τ²-bench domain (``conversation.tau2-<domain>-v0``: airline, retail,
  telecom), reported per τ² split (train/test). τ²'s task ids repeat across domains, so there is
  one suite per domain (a suite's ids are unique).

A custom suite is a JSONL or YAML file listing tasks, one mapping each::

    {"env": "agentgym/code.humaneval-v0", "task_id": "HumanEval/0", "category": "easy"}

(``category`` defaults to the env's name; an optional ``env_kwargs`` mapping is passed to
``gymnasium.make``). A YAML file holds a list of such mappings (or ``{"tasks": [...]}``).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from agentgym.registration import NAMESPACE, registered_env_ids

if TYPE_CHECKING:
    from agentgym.core import AgentEnv

__all__ = ["BUILTIN_SUITES", "Suite", "SuiteTask", "builtin_suite_envs", "load_suite"]

#: (suite name, env id pattern): ``*`` spans any part of an id, ``{}`` one dot-free part, which
#: names the suite (one suite per env that matches).
_SUITE_PATTERNS = (
    ("humaneval", "code.humaneval-v0"),
    ("repofix", "code.repofix-v0"),
    ("agentbench-os", "code.agentbench-os-v0"),
    ("bfcl-{}", "tool.bfcl-multi-turn-{}-v0"),
    ("bfcl", "tool.bfcl-multi-turn-*-v0"),
    ("web-{}", "web.{}-v0"),
    ("miniwob", "web.miniwob.*-v0"),
    ("gui", "gui.desktop-v0"),
    ("desktop-apps", "gui.desktop-apps-v0"),
    ("babyai", "text.babyai-v0"),
    ("scienceworld", "text.scienceworld-v0"),
    ("textworld", "text.textworld-v0"),
    ("textworld-express", "text.textworld-express-v0"),
    ("tau2-{}", "conversation.tau2-{}-v0"),
)


def builtin_suite_envs() -> dict[str, list[str]]:
    """Each built-in suite's env ids (``agentgym/...``), from the registered envs (see the module docstring)."""
    suites: dict[str, list[str]] = {}
    ids = [env_id.removeprefix(f"{NAMESPACE}/") for env_id in registered_env_ids()]
    for name, pattern in _SUITE_PATTERNS:
        regex = re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\{\}", "([^.]+)") + "$")
        for env_id in ids:
            match = regex.match(env_id)
            if match:
                suites.setdefault(name.format(*match.groups()), []).append(f"{NAMESPACE}/{env_id}")
    return suites


BUILTIN_SUITES = tuple(builtin_suite_envs())


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
        counts = Counter(t.task_id for t in self.tasks)
        duplicates = {task_id for task_id, count in counts.items() if count > 1}
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


def _builtin(name: str) -> Suite:
    import gymnasium

    tasks = []
    for env_id in builtin_suite_envs()[name]:
        env = gymnasium.make(env_id)  # constructors are cheap: sandboxes, browsers and desktops start at reset
        try:
            tasks += [
                SuiteTask(env_id, task.id, task.category or name) for task in cast("AgentEnv", env.unwrapped).tasks()
            ]
        finally:
            env.close()
    return Suite(name, tuple(tasks))


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
        env_id = entry["env"] if "/" in entry["env"] else f"{NAMESPACE}/{entry['env']}"
        category = entry.get("category") or env_id.removeprefix(f"{NAMESPACE}/")
        tasks.append(SuiteTask(env_id, str(entry["task_id"]), str(category), dict(entry.get("env_kwargs") or {})))
    return Suite(path.stem, tuple(tasks))
