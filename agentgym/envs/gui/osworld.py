"""OSWorld's task format for agentgym's desktop: load a task JSON (set-up steps, evaluator) as a :class:`DesktopTask`.

A task is a dict in OSWorld's shape::

    {"id": "calc-sum-0", "instruction": "...",
     "config": [{"type": "download", "parameters": {"files": [{"url": "budget.xlsx", "path": "/home/agent/budget.xlsx"}]}},
                {"type": "open", "parameters": {"path": "/home/agent/budget.xlsx"}}],
     "evaluator": {"func": "compare_table", "conj": "and",
                   "result": {"type": "vm_file", "path": "/home/agent/budget.xlsx", "dest": "budget.xlsx"},
                   "expected": {"type": "local_file", "path": "gold.xlsx"},
                   "options": {"formulas": ["B7"]}},
     "solution": ["key(\\"ctrl+Home\\")", "..."]}

Set-up steps (``config``), as OSWorld names them:

* ``download`` — ``files: [{url, path}]``: the file ``url`` names is laid out at ``path`` (under
  ``/home/agent``). agentgym downloads nothing: ``url`` is a key of the task's files (the seeded
  generators' bytes) or, for :func:`load_task_file`, a path relative to the JSON file.
* ``open`` — ``path``: the app for the file's type opens it (LibreOffice for sheets, documents and
  slides, GIMP for images, mousepad for text); ``launch`` — ``command`` (a list or a string): that
  program, and agentgym's optional ``ready_title``: the task starts once a window whose title contains
  it has the focus (Chromium maps its window before the page's title is in it). A task has one or more
  of them: the apps start in the steps' order, and the last one has the focus (the window manager
  switches windows with ``alt+Tab``).
* ``execute`` — ``command``: run as the agent's user after the app is up; ``sleep`` — ``seconds``;
  ``activate_window`` — ``window_name``. These run in order after the app has started.

The ``evaluator``: ``func`` (a name or a list; ``"infeasible"`` marks a task whose right answer is
``fail()``), ``conj`` (``and`` — the default — or ``or``), ``result`` and ``expected`` getters
(one each, or lists parallel to ``func``), and ``options`` (a dict, or a list parallel to ``func``).
Getters: ``vm_file`` (``path`` on the desktop, read as the agent's user), ``local_file`` (``path``
among the task's files), ``rule`` (``rules``, handed to the metric as is), and agentgym's ``vm_tree``
(``path``: the folder's listing, for ``check_file_tree``). Chromium's, as OSWorld names them, read its
``Default`` profile (:data:`CHROMIUM_PROFILE`): ``bookmarks`` (the ``Bookmarks`` file's bytes),
``chrome_font_size`` (the ``Preferences`` file's bytes), ``history`` (the ``History`` SQLite file with
its ``-journal`` or ``-wal`` file where Chromium left one: name → bytes) and ``enable_do_not_track``
(``"true"`` or ``"false"``, as OSWorld's, from ``Preferences``; None where the file is missing or not JSON);
and agentgym's ``chrome_preferences`` (the ``Preferences`` file's bytes, for ``check_chrome_prefs``).
The metrics parse the bytes. The evaluator's ``postconfig`` (OSWorld's: ``execute``, ``sleep``,
``activate_window`` steps) runs when the agent says ``done()`` or ``fail()``, before the getters: the
Chromium tasks close the browser gracefully there, so that what it keeps in memory reaches its files. The metric functions are
:data:`agentgym.envs.gui.metrics.METRICS`; any other name is refused when the task loads.

``solution`` (agentgym's addition) is the reference solution: action strings in the env's call
syntax, ending in ``done()`` or ``fail()``.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentgym.envs.gui.metrics import METRICS, chrome_preference
from agentgym.envs.gui.tasks import HOME, App, DesktopTask, Inspector

__all__ = ["CHROMIUM_PROFILE", "load_task", "load_task_file", "app_for"]

STEP_TYPES = ("download", "open", "launch", "execute", "sleep", "activate_window")
#: The steps an evaluator's ``postconfig`` may hold (run on the live desktop before grading).
POSTCONFIG_TYPES = ("execute", "sleep", "activate_window")
GETTERS = (
    "vm_file",
    "local_file",
    "rule",
    "vm_tree",
    "bookmarks",
    "chrome_font_size",
    "history",
    "enable_do_not_track",
    "chrome_preferences",
)
#: Chromium's profile on the desktop (the ``Default`` profile of the user data folder the tasks launch it with).
CHROMIUM_PROFILE = f"{HOME}/.config/chromium/Default"
#: The files of Chromium's History database that SQLite reads together (a rollback journal or a write-ahead log).
HISTORY_FILES = ("History", "History-journal", "History-wal")
_OFFICE = {
    "xlsx": "calc",
    "ods": "calc",
    "csv": "calc",
    "docx": "writer",
    "odt": "writer",
    "pptx": "impress",
    "odp": "impress",
}
_IMAGES = {"png", "jpg", "jpeg", "bmp", "gif", "tif", "tiff", "xcf"}


def app_for(path: str) -> App:
    """The app that OSWorld's ``open`` step would open ``path`` with, by its extension."""
    extension, name = path.rpartition(".")[2].lower(), posixpath.basename(path)
    if extension in _OFFICE:
        # --norestore: no recovery offer; --nologo: no splash. LibreOffice still maps a "LibreOffice 7.4"
        # window while it loads; keys sent then are lost, so the task starts once the document's window is up.
        argv = ("soffice", "--norestore", "--nologo", path)
        return App(_OFFICE[extension], argv, restores_state=False, ready_title=f"{name} - LibreOffice")
    if extension in _IMAGES:
        # GIMP's single window is titled "[stem] (imported)-..." once the image is in it: keys go there.
        return App(
            "gimp", ("gimp", "--no-splash", path), restores_state=False, ready_title=f"[{name.rpartition('.')[0]}]"
        )
    return App("mousepad", ("mousepad", path), restores_state=False, ready_title=name)


def load_task_file(path: str | Path) -> DesktopTask:
    """A task from a JSON file; ``download`` URLs name files relative to the JSON file's folder."""
    path = Path(path)
    spec = json.loads(path.read_text())
    urls = [
        entry["url"]
        for step in spec.get("config", ())
        if step.get("type") == "download"
        for entry in step.get("parameters", {}).get("files", ())
    ]
    getters = spec.get("evaluator", {}).get("expected", [])
    urls += [getter["path"] for getter in (getters if isinstance(getters, list) else [getters]) if _local(getter)]
    files = {}
    for url in urls:
        source = (path.parent / url).resolve()
        if not source.is_relative_to(path.parent.resolve()):
            raise ValueError(f"task {spec.get('id')!r}: {url!r} is outside the task's folder")
        files[url] = source.read_bytes()
    return load_task(spec, files)


def _local(getter: Any) -> bool:
    return isinstance(getter, dict) and getter.get("type") == "local_file"


def load_task(spec: Mapping[str, Any], files: Mapping[str, bytes]) -> DesktopTask:
    """An OSWorld-format task (see the module docstring) as a :class:`DesktopTask`; ``files`` are the bytes
    its ``download`` and ``local_file`` entries name. Anything the format does not allow raises ValueError."""
    task_id = spec.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("an OSWorld task needs an 'id'")

    def refuse(why: str) -> ValueError:
        return ValueError(f"task {task_id!r}: {why}")

    laid_out: dict[str, bytes] = {}
    apps: list[App] = []
    after: list[dict] = []
    for step in spec.get("config", ()):
        kind, parameters = step.get("type"), step.get("parameters", {})
        if kind not in STEP_TYPES:
            raise refuse(f"unknown set-up step {kind!r} (known: {', '.join(STEP_TYPES)})")
        if kind == "download":
            for entry in parameters.get("files", ()):
                if entry["url"] not in files:
                    raise refuse(f"{entry['url']!r} is not among the task's files (agentgym downloads nothing)")
                laid_out[_home_relative(entry["path"], refuse)] = files[entry["url"]]
        elif kind == "open":
            apps.append(app_for(parameters["path"]))
        elif kind == "launch":
            command = parameters["command"]
            argv = tuple(shlex.split(command) if isinstance(command, str) else command)
            ready = parameters.get("ready_title")
            apps.append(App(posixpath.basename(argv[0]), argv, restores_state=False, ready_title=ready))
        else:
            after.append({"type": kind, **parameters})
    if not apps:
        raise refuse("no open or launch step: which app does the task use?")
    evaluator = spec.get("evaluator")
    if not isinstance(evaluator, dict) or "func" not in evaluator:
        raise refuse("no evaluator with a 'func'")
    feasible = evaluator["func"] != "infeasible"
    check = _checker(evaluator, files, refuse) if feasible else _nothing_to_check
    postconfig = []
    for step in evaluator.get("postconfig", ()):
        if step.get("type") not in POSTCONFIG_TYPES:
            raise refuse(f"a postconfig step {step.get('type')!r} (known: {', '.join(POSTCONFIG_TYPES)})")
        postconfig.append({"type": step["type"], **step.get("parameters", {})})
    return DesktopTask(
        task_id,
        spec["instruction"],
        apps[-1],
        laid_out,
        check,
        tuple(spec.get("solution", ())),
        feasible=feasible,
        setup=tuple(after),
        other_apps=tuple(apps[:-1]),
        postconfig=tuple(postconfig),
    )


def _nothing_to_check(files: Inspector) -> None:
    """OSWorld's ``infeasible``: the agent is right when it says so (``fail()``), whatever the files hold."""
    return None


def _home_relative(path: str, refuse: Callable[[str], ValueError]) -> str:
    normal = posixpath.normpath(path)
    if not normal.startswith(HOME + "/"):
        raise refuse(f"files go under {HOME}, not {path!r}")
    return normal[len(HOME) + 1 :]


def _parallel(value: Any, count: int, what: str, refuse: Callable[[str], ValueError]) -> list:
    if isinstance(value, list):
        if len(value) != count:
            raise refuse(f"{len(value)} {what} for {count} metric functions")
        return value
    return [value] * count


def _checker(
    evaluator: Mapping[str, Any], files: Mapping[str, bytes], refuse: Callable[[str], ValueError]
) -> Callable[[Inspector], str | None]:
    funcs = evaluator["func"] if isinstance(evaluator["func"], list) else [evaluator["func"]]
    for name in funcs:
        if name not in METRICS:
            raise refuse(f"unknown metric {name!r} (agentgym has {', '.join(sorted(METRICS))})")
    results = _parallel(evaluator.get("result"), len(funcs), "result getters", refuse)
    expected = _parallel(evaluator.get("expected"), len(funcs), "expected getters", refuse)
    options = _parallel(evaluator.get("options", {}), len(funcs), "option sets", refuse)
    conj = evaluator.get("conj", "and")
    if conj not in ("and", "or"):
        raise refuse(f"conj must be 'and' or 'or', not {conj!r}")
    for getter in (*results, *expected):
        if not isinstance(getter, dict) or getter.get("type") not in GETTERS:
            kind = getter.get("type") if isinstance(getter, dict) else getter
            raise refuse(f"a getter {kind!r} (known types: {', '.join(GETTERS)})")
        if _local(getter) and getter["path"] not in files:
            raise refuse(f"the expected file {getter['path']!r} is not among the task's files")

    def fetch(getter: dict, inspector: Inspector) -> Any:
        if getter["type"] == "vm_file":
            return inspector.read_bytes(getter["path"])
        if getter["type"] == "vm_tree":
            return inspector.listing(getter["path"])
        if getter["type"] == "local_file":
            return files[getter["path"]]
        if getter["type"] == "bookmarks":
            return inspector.read_bytes(f"{CHROMIUM_PROFILE}/Bookmarks")
        if getter["type"] in ("chrome_font_size", "chrome_preferences"):
            return inspector.read_bytes(f"{CHROMIUM_PROFILE}/Preferences")
        if getter["type"] == "enable_do_not_track":
            preferences = inspector.read_bytes(f"{CHROMIUM_PROFILE}/Preferences")
            value = chrome_preference(preferences, "enable_do_not_track", default=False)
            return None if value is None else "true" if value is True else "false"
        if getter["type"] == "history":
            database = {name: inspector.read_bytes(f"{CHROMIUM_PROFILE}/{name}") for name in HISTORY_FILES}
            return None if database["History"] is None else {k: v for k, v in database.items() if v is not None}
        return getter["rules"]

    def check(inspector: Inspector) -> str | None:
        problems = []
        for name, result, want, option in zip(funcs, results, expected, options):
            problem = METRICS[name](fetch(result, inspector), fetch(want, inspector), **option)
            if problem is None and conj == "or":
                return None
            if problem is not None:
                if conj == "and":
                    return problem
                problems.append(problem)
        return "; ".join(problems) or None

    return check
