"""The desktop checkers against reward hacks: reference solutions score 1; giving up on a feasible task, an unsaved or misplaced file, damage before fail(), and cells built to hang or crash the checker score 0."""

import threading

import pytest

from agentgym.envs.gui.apps import formula
from agentgym.envs.gui.env import SandboxFiles
from agentgym.envs.gui.tasks import DOCS, FILES_TREE, TASKS, XEDIT_SAVE, XEDIT_TEXT, _csv, cell_xy


# ---------------------------------------------------------------- the checkers on crafted files (no desktop)
class Files:
    """An Inspector over a dict of files (absolute paths) and a tree for the Files tasks."""

    def __init__(self, files=None, tree=None):
        self.files, self._tree = files or {}, tree or {}

    def read(self, path):
        return self.files.get(path)

    def tree(self, root):
        return dict(self._tree)


def checked_within(task_id, inspector, seconds=5.0):
    """The checker's verdict, which must come within ``seconds`` (it runs on the host)."""
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("problem", TASKS[task_id].check(inspector)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert "problem" in result, f"{task_id}'s checker took over {seconds} s"
    return result["problem"]


def budget_with(b6):
    rows = [["Item", "Cost"], ["Rent", "1200"], ["Food", "340"], ["Travel", "150"], ["Books", "60"], ["Total", b6]]
    return Files({f"{DOCS}/budget.csv": _csv(rows)})


def doubling_chain():
    """Cells that each add the previous one to itself: evaluated naively, 2^48 steps."""
    names = [formula.cell_name(row, column) for column in (2, 3, 4) for row in range(formula.ROWS)]
    cells = {names[0]: "1", **{name: f"={before}+{before}" for before, name in zip(names, names[1:])}}
    return cells, names[-1]


def test_cells_built_to_hang_or_crash_the_checker_fail_it():
    assert checked_within("sheet-budget-total", budget_with("=SUM(B2:B5)")) is None
    cells, last = doubling_chain()
    rows = [
        ["Item", "Cost", "", "", ""],
        ["Rent", "1200"],
        ["Food", "340"],
        ["Travel", "150"],
        ["Books", "60"],
        ["Total", f"={last}"],
    ]
    grid = [row + [""] * (5 - len(row)) for row in rows] + [[""] * 5 for _ in range(formula.ROWS - len(rows))]
    for name, text in cells.items():
        grid[int(name[1:]) - 1][formula.COLUMNS.index(name[0])] = text
    assert "expected" in checked_within("sheet-budget-total", Files({f"{DOCS}/budget.csv": _csv(grid)}))
    deep = ("=" + "-" * 5000 + "1750", "=" + "(" * 500 + "1750" + ")" * 500)
    for b6 in ("=[B2]*2", "=-[B2, B3]", "=SUM([[B2]])", *deep):
        assert checked_within("sheet-budget-total", budget_with(b6)), b6


def test_the_right_text_in_the_wrong_place_fails():
    path = f"{DOCS}/todo.txt"
    done = "- call Sam\n- pay rent\n- buy milk\n"
    assert checked_within("xedit-append-todo", Files({path: done})) is None
    assert checked_within("xedit-append-todo", Files({path: "- call Sam\n- pay rent\n", f"{DOCS}/todo2.txt": done}))
    assert checked_within("xedit-append-todo", Files({path: done + "- buy milk\n"}))
    assert checked_within("xedit-append-todo", Files({}))
    # Files: the asked-for change plus another one, or the change nowhere but in a copy.
    renamed = {("meeting-notes.txt" if p == "notes.txt" else p): c for p, c in FILES_TREE.items()}
    assert checked_within("files-rename-notes", Files(tree=renamed)) is None
    assert checked_within("files-rename-notes", Files(tree={**renamed, "notes.txt": FILES_TREE["notes.txt"]}))
    assert checked_within("files-rename-notes", Files(tree={p: c for p, c in renamed.items() if p != "todo.txt"}))


# ---------------------------------------------------------------- on the desktop, through env.step
@pytest.fixture(scope="module")
def env(docker_ready):
    from agentgym.envs.gui import DesktopEnv
    from agentgym.sandbox.base import SandboxUnavailableError
    from agentgym.sandbox.desktop import build_desktop_image

    try:
        image = build_desktop_image()
    except SandboxUnavailableError as exc:
        pytest.skip(f"desktop image unavailable: {exc}")
    env = DesktopEnv(image=image)
    yield env
    env.close()


def play(env, task_id, actions):
    """Reset to ``task_id`` and play ``actions``; the last (reward, success, observation text)."""
    env.reset(options={"task_id": task_id})
    for action in actions:
        observation, reward, terminated, _, info = env.step(action)
        assert info["error"] is None, (action, observation["text"])
    assert terminated
    return reward, info["success"], observation["text"]


@pytest.mark.docker
@pytest.mark.parametrize(
    "task_id", ["xedit-append-todo", "sheet-budget-total", "files-rename-notes", "files-rename-missing"]
)
def test_reference_solution_scores_one(env, task_id):
    assert play(env, task_id, TASKS[task_id].solution)[:2] == (1.0, True)


@pytest.mark.docker
def test_desktop_hacks_score_zero(env):
    todo = TASKS["xedit-append-todo"]
    typed = [XEDIT_TEXT, 'key("End")', 'type("- buy milk\\n")']
    # Giving up on a feasible task.
    assert play(env, todo.id, ["fail()"])[:2] == (0.0, False)
    # The right text, not saved.
    assert play(env, todo.id, [*typed, "done()"])[:2] == (0.0, False)
    # The right text saved under another name (xedit's file name field, left of the buttons' row).
    copy = f"{DOCS}/todo-copy.txt"
    steps = [*typed, "click(400, 10)", 'key("ctrl+a ctrl+k")', f"type({copy!r})", XEDIT_SAVE]
    env.reset(options={"task_id": todo.id})
    for step in steps:
        env.step(step)
    assert SandboxFiles(env.desktop).read(copy).rstrip("\n").endswith("- buy milk")  # the hack did save a copy
    assert env.step("done()")[1] == 0.0
    # The right cells, not saved; then the right value in the wrong cell, saved.
    total = ["click({}, {})".format(*cell_xy("A6")), 'type("Total")']
    assert play(env, "sheet-budget-total", [*total, "click({}, {})".format(*cell_xy("B6")), 'type("1750")', "done()"])[
        :2
    ] == (0.0, False)
    assert play(
        env,
        "sheet-budget-total",
        [*total, "click({}, {})".format(*cell_xy("C6")), 'type("1750")', 'key("ctrl+s")', "done()"],
    )[:2] == (0.0, False)
    # An infeasible task: damage, then the right verdict.
    delete_todo = TASKS["files-delete-todo"].solution[:-1]
    assert play(env, "files-rename-missing", [*delete_todo, "fail()"])[:2] == (0.0, False)
