"""The desktop tasks: what each asks, the files it starts from, the app it opens, its checker and its scripted reference solution.

Three apps: xedit (Debian's text editor from ``x11-apps``), Sheet (a small spreadsheet) and Files
(a file manager), the last two written for the project in Tk (``apps/``). Checkers read what the
app saved — the text file, the CSV, the folder tree under ``~/files`` — never pixels; a check
returns None when the task is done and otherwise says what is wrong. Reference solutions are
action strings in the env's call syntax, ending in ``done()`` (or ``fail()`` for the infeasible
tasks, whose right answer is to give up without changing anything); the tests run every one.

Coordinates in solutions come from the apps' fixed layouts (documented in each app's module);
openbox keeps every window at the screen's top-left with a one-pixel border.
"""

from __future__ import annotations

import csv
import io
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agentgym.envs.gui.apps import formula

__all__ = ["App", "DesktopTask", "TASKS", "Inspector", "HOME", "APPS_DIR", "FILES_ROOT"]

HOME = "/home/agent"
APPS_DIR = "/tmp/agentgym/apps"
FILES_ROOT = f"{HOME}/files"
DOCS = f"{HOME}/Documents"
Tree = dict[str, "str | None"]  # path relative to a root → file content, or None for a folder


class Inspector(Protocol):
    """How checkers see the desktop's files (implemented by the env over the sandbox)."""

    def read(self, path: str) -> str | None:
        """A text file's content, or None when it does not exist."""

    def read_bytes(self, path: str) -> bytes | None:
        """A file's bytes (an office file, an image), or None when it does not exist."""

    def tree(self, root: str) -> Tree:
        """Every file and folder below ``root`` (relative paths), file contents as text."""

    def listing(self, root: str) -> dict[str, dict] | None:
        """Every entry below ``root`` (relative paths) with its type, mode, size and, for files, SHA-256, symlinks
        not followed; None when ``root`` is not a folder."""


@dataclass(frozen=True)
class App:
    """A program a task opens. ``restores_state``: relaunched on a committed filesystem, it comes back
    on the exact screen it was on (the Tk apps, from their state files); otherwise forks replay actions.
    ``ready_title``: see :meth:`agentgym.sandbox.desktop.DesktopSandbox.launch`."""

    name: str
    argv: tuple[str, ...]
    restores_state: bool
    #: Part of the title of the window that shows the app is ready (None: its first window does).
    ready_title: str | None = None


def xedit(path: str) -> App:
    return App("xedit", ("xedit", "-geometry", "800x600+0+0", path), restores_state=False)


def sheet(path: str) -> App:
    return App("sheet", ("python3", f"{APPS_DIR}/sheet.py", path), restores_state=True)


FILES_APP = App("files", ("python3", f"{APPS_DIR}/files.py", FILES_ROOT), restores_state=True)


@dataclass(frozen=True)
class DesktopTask:
    """One desktop task. ``files`` are laid out under HOME before the app starts (None: an empty folder);
    ``setup`` steps (OSWorld's ``execute``, ``sleep``, ``activate_window``: see
    :mod:`agentgym.envs.gui.osworld`) run in order once the app is up. ``other_apps`` (a task on several
    apps, as OSWorld's with several ``open`` steps) start before ``app``, in order; ``app`` starts last
    and has the focus. ``postconfig`` steps (OSWorld's evaluator's, the same kinds as ``setup``) run when the
    agent ends the episode, before ``check`` (Chromium's tasks close the browser there, which writes its files).

    ``DesktopEnv.tasks()`` hands each out as an :class:`agentgym.Task` (category: the app) whose
    reference solution is ``solution``.
    """

    id: str
    instruction: str
    app: App
    files: Mapping[str, str | bytes | None]
    check: Callable[[Inspector], str | None]
    solution: tuple[str, ...]
    feasible: bool = True
    setup: tuple[dict, ...] = ()
    other_apps: tuple[App, ...] = ()
    postconfig: tuple[dict, ...] = ()


# ---------------------------------------------------------------------------------------- xedit
XEDIT_TEXT = "click(400, 300)"  # into the text area (the cursor lands at the end of the text)
XEDIT_SAVE = "click(55, 10)"  # the Save button


def _text_check(path: str, expected: str) -> Callable[[Inspector], str | None]:
    def check(files: Inspector) -> str | None:
        text = files.read(path)
        if text is None:
            return f"{path} does not exist"
        # xedit keeps whatever final newline the text has; the task is about the lines.
        if text.rstrip("\n") != expected.rstrip("\n"):
            return f"{path} is {text!r}, expected {expected!r}"
        return None

    return check


def _xedit_task(task_id: str, name: str, before: str, after: str, instruction: str, keys: list[str]) -> DesktopTask:
    path = f"{DOCS}/{name}"
    return DesktopTask(
        f"xedit-{task_id}",
        f"{instruction} The file {path} is open in xedit; save it when you are done.",
        xedit(path),
        {f"Documents/{name}": before},
        _text_check(path, after),
        (XEDIT_TEXT, *keys, XEDIT_SAVE, "done()"),
    )


def _xedit_tasks() -> list[DesktopTask]:
    settings = "[app]\nname = demo\ndebug = false\nport = 8080\n"
    return [
        _xedit_task(
            "append-todo",
            "todo.txt",
            "- call Sam\n- pay rent\n",
            "- call Sam\n- pay rent\n- buy milk\n",
            "Add the line '- buy milk' at the end of the to-do list.",
            ['key("End")', 'type("- buy milk\\n")'],
        ),
        _xedit_task(
            "add-title",
            "notes.txt",
            "Budget review\nHiring plan\n",
            "# Meeting notes\nBudget review\nHiring plan\n",
            "Insert the line '# Meeting notes' as the first line of the notes.",
            ['key("Home")', 'type("# Meeting notes\\n")'],
        ),
        _xedit_task(
            "fix-typo",
            "letter.txt",
            "Dear Sam,\nI hope you recieve this soon.\nBest, Kim\n",
            "Dear Sam,\nI hope you receive this soon.\nBest, Kim\n",
            "Fix the spelling mistake in the letter ('recieve' should be 'receive').",
            ['key("Home Down ctrl+a ctrl+k")', 'type("I hope you receive this soon.")'],
        ),
        _xedit_task(
            "delete-draft-line",
            "memo.txt",
            "DRAFT - do not send\nThe office closes at 5pm on Friday.\n",
            "The office closes at 5pm on Friday.\n",
            "Delete the first line ('DRAFT - do not send') of the memo.",
            ['key("Home ctrl+k ctrl+k")'],
        ),
        _xedit_task(
            "enable-debug",
            "settings.ini",
            settings,
            settings.replace("debug = false", "debug = true"),
            "In settings.ini, change 'debug = false' to 'debug = true'.",
            ['key("Home Down Down ctrl+a ctrl+k")', 'type("debug = true")'],
        ),
        _xedit_task(
            "change-port",
            "server.ini",
            settings,
            settings.replace("8080", "9090"),
            "In server.ini, change the port from 8080 to 9090.",
            ['key("Home Down Down Down ctrl+a ctrl+k")', 'type("port = 9090")'],
        ),
        _xedit_task(
            "write-greeting",
            "hello.txt",
            "",
            "Hello, desktop!\n",
            "The file hello.txt is empty: write the single line 'Hello, desktop!' into it.",
            ['key("Home")', 'type("Hello, desktop!\\n")'],
        ),
        _xedit_task(
            "reorder-steps",
            "steps.txt",
            "1. boil water\n3. serve\n2. add pasta\n",
            "1. boil water\n2. add pasta\n3. serve\n",
            "Put the recipe steps in numerical order (1, 2, 3), one per line.",
            ['key("Home Down ctrl+k ctrl+k End")', 'type("3. serve\\n")'],
        ),
        _xedit_task(
            "insert-item",
            "shopping.txt",
            "- bread\n- eggs\n- apples\n",
            "- bread\n- eggs\n- butter\n- apples\n",
            "Add '- butter' to the shopping list right after '- eggs'.",
            ['key("Home Down Down")', 'type("- butter\\n")'],
        ),
        _xedit_task(
            "drop-postscript",
            "note.txt",
            "See you at noon.\nP.S. ignore this\n",
            "See you at noon.\n",
            "Remove the last line of the note (the one starting with 'P.S.').",
            ['key("Home Down ctrl+a ctrl+k ctrl+k")'],
        ),
        _xedit_task(
            "rename-recipient",
            "invite.txt",
            "Dear Bob,\nPlease join us on Saturday.\n",
            "Dear Alice,\nPlease join us on Saturday.\n",
            "The invitation is for Alice, not Bob: change the greeting to 'Dear Alice,'.",
            ['key("Home ctrl+k")', 'type("Dear Alice,")'],
        ),
    ]


# ---------------------------------------------------------------------------------------- Sheet
def cell_xy(name: str) -> tuple[int, int]:
    """The screen centre of a Sheet cell (see apps/sheet.py: cells 140x32 from (60, 80), plus the border)."""
    column, row = formula.COLUMNS.index(name[0]), int(name[1:]) - 1
    return 61 + column * 140 + 70, 81 + row * 32 + 16


def set_cell(name: str, text: str, *, replace: bool = False) -> list[str]:
    x, y = cell_xy(name)
    clear = ['key("End shift+Home BackSpace")'] if replace else []
    return [f"click({x}, {y})", *clear, f"type({text!r})"]


def clear_cell(name: str) -> list[str]:
    return ["click({}, {})".format(*cell_xy(name)), 'key("End shift+Home BackSpace")']


SHEET_SAVE = 'key("ctrl+s")'


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _cells(text: str) -> dict[str, str]:
    cells = {}
    for row, values in enumerate(csv.reader(io.StringIO(text))):
        for column, value in enumerate(values[: len(formula.COLUMNS)]):
            if value and row < formula.ROWS:
                cells[formula.cell_name(row, column)] = value
    return cells


def _sheet_check(path: str, before: dict[str, str], expected: dict[str, float | str | None]):
    """Cells in ``expected`` must evaluate to their values (numbers within 1e-6, text case-insensitively,
    None: empty); every other cell must keep its original text."""

    def check(files: Inspector) -> str | None:
        text = files.read(path)
        if text is None:
            return f"{path} does not exist"
        cells = _cells(text)
        for name, want in expected.items():
            try:
                got = formula.evaluate(cells, name)
            except formula.FormulaError as exc:
                return f"{name}: {exc}"
            if isinstance(want, float) and not (isinstance(got, float) and abs(got - want) < 1e-6):
                return f"{name} is {formula.display(got)!r}, expected {formula.display(want)}"
            if isinstance(want, str) and not (isinstance(got, str) and got.strip().lower() == want.lower()):
                return f"{name} is {formula.display(got)!r}, expected {want!r}"
            if want is None and got is not None:
                return f"{name} should be empty, it holds {cells[name]!r}"
        changed = sorted(n for n in set(before) | set(cells) if n not in expected and before.get(n) != cells.get(n))
        return f"cells that should not change did: {', '.join(changed)}" if changed else None

    return check


def _sheet_task(
    task_id: str,
    name: str,
    rows: list[list[str]],
    instruction: str,
    expected: dict[str, float | str | None],
    steps: list[str],
    *,
    feasible: bool = True,
) -> DesktopTask:
    path = f"{DOCS}/{name}"
    content = _csv(rows)
    solution = (*steps, SHEET_SAVE, "done()") if feasible else ("fail()",)
    return DesktopTask(
        f"sheet-{task_id}",
        f"{instruction} The spreadsheet {path} is open in Sheet; save it (Save or Ctrl+S).",
        sheet(path),
        {f"Documents/{name}": content},
        _sheet_check(path, _cells(content), expected),
        solution,
        feasible=feasible,
    )


def _sheet_tasks() -> list[DesktopTask]:
    budget = [["Item", "Cost"], ["Rent", "1200"], ["Food", "340"], ["Travel", "150"], ["Books", "60"]]
    grades = [["Name", "Score"], ["Ana", "78"], ["Ben", "92"], ["Cy", "85"], ["Dee", "61"], ["Eve", "99"]]
    temps = [["Day", "High"], ["Mon", "21"], ["Tue", "25"], ["Wed", "19"], ["Thu", "27"], ["Fri", "23"]]
    prices = [["Fruit", "Price"], ["Apples", "1.5"], ["Pears", "2.57"], ["Plums", "3"]]
    order = [["Item", "Qty", "Price", "Total"], ["Pens", "10", "1.5"], ["Paper", "3", "4.25"], ["Ink", "2", "12"]]
    plan = [
        ["Team", "Budget", "Spent", "Left"],
        ["Web", "5000", "3200"],
        ["Data", "8000", "8100"],
        ["Ops", "2500", "900"],
    ]
    stock = [["Item", "Count"], ["Bolts", "120"], ["Widgets", "0"], ["Nuts", "75"]]
    return [
        _sheet_task(
            "budget-total",
            "budget.csv",
            budget,
            "Write 'Total' in A6 and the sum of the costs (B2:B5) in B6.",
            {"A6": "Total", "B6": 1750.0},
            [*set_cell("A6", "Total"), *set_cell("B6", "=SUM(B2:B5)")],
        ),
        _sheet_task(
            "average-score",
            "grades.csv",
            grades,
            "Put the average score of the five students in B7.",
            {"B7": 83.0},
            set_cell("B7", "=AVERAGE(B2:B6)"),
        ),
        _sheet_task(
            "max-temperature",
            "temps.csv",
            temps,
            "Write 'Max' in D1 and the highest temperature of the week in D2.",
            {"D1": "Max", "D2": 27.0},
            [*set_cell("D1", "Max"), *set_cell("D2", "=MAX(B2:B6)")],
        ),
        _sheet_task(
            "min-price",
            "fruit.csv",
            prices,
            "Write the lowest price (column B) in D2.",
            {"D2": 1.5},
            set_cell("D2", "1.5"),
        ),
        _sheet_task(
            "fix-price",
            "prices.csv",
            prices,
            "Pears cost 2.75, not 2.57: correct cell B3.",
            {"B3": 2.75},
            set_cell("B3", "2.75", replace=True),
        ),
        _sheet_task(
            "add-row",
            "shopping.csv",
            [["Item", "Qty"], ["Eggs", "12"], ["Bread", "1"]],
            "Add a row for Milk with quantity 2 (A4 and B4).",
            {"A4": "Milk", "B4": 2.0},
            [*set_cell("A4", "Milk"), *set_cell("B4", "2")],
        ),
        _sheet_task(
            "line-totals",
            "order.csv",
            order,
            "Fill D2:D4 with each line's total (Qty × Price).",
            {"D2": 15.0, "D3": 12.75, "D4": 24.0},
            [*set_cell("D2", "=B2*C2"), *set_cell("D3", "=B3*C3"), *set_cell("D4", "=B4*C4")],
        ),
        _sheet_task(
            "budget-left",
            "plan.csv",
            plan,
            "Fill D2:D4 with what is left of each team's budget (Budget - Spent).",
            {"D2": 1800.0, "D3": -100.0, "D4": 1600.0},
            [*set_cell("D2", "=B2-C2"), *set_cell("D3", "=B3-C3"), *set_cell("D4", "=B4-C4")],
        ),
        _sheet_task(
            "clear-discontinued",
            "stock.csv",
            stock,
            "Widgets are discontinued: clear both cells of their row (A3 and B3).",
            {"A3": None, "B3": None},
            [*clear_cell("A3"), *clear_cell("B3")],
        ),
        _sheet_task(
            "headers",
            "contacts.csv",
            [],
            "Enter the headers Name, Email and Phone in A1, B1 and C1.",
            {"A1": "Name", "B1": "Email", "C1": "Phone"},
            [*set_cell("A1", "Name"), 'key("Tab")', 'type("Email")', 'key("Tab")', 'type("Phone")'],
        ),
        _sheet_task(
            "count-students",
            "roster.csv",
            grades,
            "Write the number of students listed (rows 2-6) in D1.",
            {"D1": 5.0},
            set_cell("D1", "=COUNT(B2:B6)"),
        ),
        _sheet_task("column-f", "wide.csv", budget, "Put the sum of column F in cell F11.", {}, [], feasible=False),
    ]


# ---------------------------------------------------------------------------------------- Files
FILES_TREE: Tree = {
    "archive": None,
    "archive/2023-report.txt": "Annual report 2023\n",
    "photos": None,
    "photos/beach.jpg": "JPEG beach\n",
    "photos/cat.jpg": "JPEG cat\n",
    "budget.csv": "Item,Cost\nRent,1200\n",
    "notes.txt": "Meeting at 10\n",
    "report-draft.txt": "Draft of the report\n",
    "todo.txt": "- call Sam\n",
}
FILES_BUTTONS = {
    "Up": (681, 66),
    "Open": (681, 106),
    "Rename": (681, 146),
    "Move": (681, 186),
    "Delete": (681, 226),
    "New folder": (681, 266),
}
FILES_NAME_FIELD = (336, 516)


def listing(tree: Tree, folder: str = "") -> list[str]:
    """The Files app's order for ``folder``: folders first, then files, each by name."""
    prefix = f"{folder}/" if folder else ""
    names = [p[len(prefix) :] for p in tree if p.startswith(prefix) and "/" not in p[len(prefix) :]]
    return sorted(names, key=lambda n: (tree[prefix + n] is not None, n))


def row(tree: Tree, name: str, folder: str = "") -> tuple[int, int]:
    """The screen point of ``name`` in the Files list (rows are 19 pixels from y=61)."""
    return 100, 61 + 19 * listing(tree, folder).index(name)


def button(label: str) -> str:
    return "click({}, {})".format(*FILES_BUTTONS[label])


def name_field(text: str) -> list[str]:
    return ["click({}, {})".format(*FILES_NAME_FIELD), 'key("End shift+Home BackSpace")', f"type({text!r})"]


def _moved(tree: Tree, source: str, target: str) -> Tree:
    """``tree`` with ``source`` (and everything below it) renamed to ``target``."""
    moved = {}
    for path, content in tree.items():
        if path == source or path.startswith(source + "/"):
            path = target + path[len(source) :]
        moved[path] = content
    return moved


def _without(tree: Tree, path: str) -> Tree:
    return {p: c for p, c in tree.items() if p != path}


def _tree_check(expected: Tree) -> Callable[[Inspector], str | None]:
    def check(files: Inspector) -> str | None:
        tree = files.tree(FILES_ROOT)
        missing = sorted(set(expected) - set(tree))
        extra = sorted(set(tree) - set(expected))
        changed = sorted(p for p in set(tree) & set(expected) if tree[p] != expected[p])
        problems = [
            f"{label}: {', '.join(paths)}"
            for label, paths in (("missing", missing), ("unexpected", extra), ("changed", changed))
            if paths
        ]
        return "; ".join(problems) or None

    return check


def _files_task(
    task_id: str, instruction: str, expected: Tree, steps: list[str], *, start: Tree = FILES_TREE, feasible: bool = True
) -> DesktopTask:
    solution = (*steps, "done()") if feasible else ("fail()",)
    return DesktopTask(
        f"files-{task_id}",
        f"{instruction} The Files app shows the folder {FILES_ROOT}.",
        FILES_APP,
        {posixpath.join("files", p): c for p, c in start.items()},
        _tree_check(expected),
        solution,
        feasible=feasible,
    )


def _files_tasks() -> list[DesktopTask]:
    t = FILES_TREE
    with_scratch = {**t, "scratch": None}
    with_docs = {**t, "docs": None}
    after_docs_notes = _moved(with_docs, "notes.txt", "docs/notes.txt")
    return [
        _files_task(
            "rename-notes",
            "Rename notes.txt to meeting-notes.txt.",
            _moved(t, "notes.txt", "meeting-notes.txt"),
            [f"click{row(t, 'notes.txt')}", *name_field("meeting-notes.txt"), button("Rename")],
        ),
        _files_task(
            "delete-todo", "Delete todo.txt.", _without(t, "todo.txt"), [f"click{row(t, 'todo.txt')}", button("Delete")]
        ),
        _files_task(
            "new-folder",
            "Create a new folder named 'projects'.",
            {**t, "projects": None},
            [*name_field("projects"), button("New folder")],
        ),
        _files_task(
            "archive-budget",
            "Move budget.csv into the archive folder.",
            _moved(t, "budget.csv", "archive/budget.csv"),
            [f"click{row(t, 'budget.csv')}", *name_field("archive"), button("Move")],
        ),
        _files_task(
            "rename-folder",
            "Rename the folder photos to pictures.",
            _moved(t, "photos", "pictures"),
            [f"click{row(t, 'photos')}", *name_field("pictures"), button("Rename")],
        ),
        _files_task(
            "cat-to-top",
            "Move cat.jpg out of the photos folder into the top folder.",
            _moved(t, "photos/cat.jpg", "cat.jpg"),
            # Open, not a double-click: a click at the same spot right after a double-click would
            # count as a triple click, which Tk also delivers to the double-click binding.
            [
                f"click{row(t, 'photos')}",
                button("Open"),
                f"click{row(t, 'cat.jpg', 'photos')}",
                *name_field(".."),
                button("Move"),
            ],
        ),
        _files_task(
            "delete-old-report",
            "Delete 2023-report.txt from the archive folder (keep the folder).",
            _without(t, "archive/2023-report.txt"),
            [
                f"click{row(t, 'archive')}",
                button("Open"),
                f"click{row(t, '2023-report.txt', 'archive')}",
                button("Delete"),
            ],
        ),
        _files_task(
            "nested-folder",
            "Create a folder named 2024 inside the archive folder.",
            {**t, "archive/2024": None},
            [f"double_click{row(t, 'archive')}", *name_field("2024"), button("New folder")],
        ),
        _files_task(
            "finalize-report",
            "Rename report-draft.txt to report-final.txt and move it into the archive folder.",
            _moved(t, "report-draft.txt", "archive/report-final.txt"),
            [
                f"click{row(t, 'report-draft.txt')}",
                *name_field("report-final.txt"),
                button("Rename"),
                *name_field("archive"),
                button("Move"),
            ],
        ),
        _files_task(
            "docs-folder",
            "Create a folder named docs and move notes.txt and todo.txt into it.",
            _moved(after_docs_notes, "todo.txt", "docs/todo.txt"),
            [
                *name_field("docs"),
                button("New folder"),
                f"click{row(with_docs, 'notes.txt')}",
                *name_field("docs"),
                button("Move"),
                f"click{row(after_docs_notes, 'todo.txt')}",
                *name_field("docs"),
                button("Move"),
            ],
        ),
        _files_task(
            "delete-empty-folder",
            "Delete the empty folder scratch.",
            t,
            [f"click{row(with_scratch, 'scratch')}", button("Delete")],
            start=with_scratch,
        ),
        _files_task(
            "rename-photo",
            "In the photos folder, rename beach.jpg to beach-2024.jpg.",
            _moved(t, "photos/beach.jpg", "photos/beach-2024.jpg"),
            [
                f"double_click{row(t, 'photos')}",
                f"click{row(t, 'beach.jpg', 'photos')}",
                *name_field("beach-2024.jpg"),
                button("Rename"),
            ],
        ),
        _files_task("rename-missing", "Rename presentation.pptx to final.pptx.", t, [], feasible=False),
    ]


TASKS: dict[str, DesktopTask] = {task.id: task for task in (*_xedit_tasks(), *_sheet_tasks(), *_files_tasks())}
