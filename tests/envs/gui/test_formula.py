"""Spreadsheet formulas as the Sheet app and the checkers evaluate them, on hand-computed values."""

import threading

import pytest

from agentgym.actions import _AST_LOCK
from agentgym.envs.gui.apps import formula

CELLS = {
    "A1": "Item",
    "B1": "3",
    "B2": "4.5",
    "B3": "=B1*B2",
    "C1": "=SUM(B1:B2)",
    "C2": "=AVERAGE(B1:B3)",
    "C3": "=MAX(B1:B3)-MIN(B1:B2)",
    "D1": "=D1+1",
    "D2": "=A1*2",
    "D3": "=B1/(B2-4.5)",
    "E1": "=COUNT(B1:B3)",
    "E2": "=-B1 + 2*(B2 - 1)",
    "E3": "=nonsense(",
    "E4": "=C1+E5",
}


@pytest.mark.parametrize(
    "name, value",
    [
        ("A1", "Item"),
        ("B1", 3.0),
        ("B3", 13.5),
        ("C1", 7.5),
        ("C2", 7.0),
        ("C3", 10.5),
        ("E1", 3.0),
        ("E2", 4.0),
        ("E4", 7.5),
        ("A9", None),
    ],
)
def test_values(name, value):
    assert formula.evaluate(CELLS, name) == value


@pytest.mark.parametrize(
    "name, problem", [("D1", "itself"), ("D2", "not a number"), ("D3", "division by zero"), ("E3", "cannot read")]
)
def test_errors(name, problem):
    with pytest.raises(formula.FormulaError, match=problem):
        formula.evaluate(CELLS, name)


def test_display():
    assert [formula.display(v) for v in (None, 3.0, 2.75, 1 / 3, "x")] == ["", "3", "2.75", "0.3333", "x"]
    assert formula.cell_name(9, 4) == "E10"


def test_a_formula_waits_for_the_ast_lock_replies_are_parsed_under():
    # Checkers evaluate formulas in the runner's worker threads while other threads parse replies: two
    # overlapping AST builds corrupt CPython's recursion counter (gh-106905), so a formula's parse takes
    # the same lock as agentgym.actions' and waits while another build holds it.
    done = threading.Event()
    worker = threading.Thread(target=lambda: (formula.evaluate(CELLS, "B3"), done.set()))
    with _AST_LOCK:
        worker.start()
        assert not done.wait(0.3), "the formula was parsed while another thread held the AST lock"
    worker.join(5)
    assert done.is_set()


SUMMARY = {
    "A1": "Category",
    "A2": "Food",
    "A3": "Rent",
    "A4": "food",
    "A5": "Travel",
    "B1": "Amount",
    "B2": "12",
    "B3": "700",
    "B4": "=B2/4",
    "B5": "n/a",
    "D2": "Food",
    "D3": "Travel",
    "E2": "=SUMIF(A2:A5,D2,B2:B5)",
    "E3": "=SUMIF($A$2:$A$5,D3,$B$2:$B$5)",
    "E4": '=sumif(A2:A5,"rent",B2:B5)+1',
    "E5": "=SUMIF(B2:B4,12)",
    "E6": '=SUMIF(A2:A5,">5",B2:B5)',
    "E7": "=SUMIF(A2:A5,D2,B2:B4)",
    "E8": "=SUMIF(A2,D2,B2)",
    "E9": "=SUMIF(A2:A3,E9,B2:B3)",
}


@pytest.mark.parametrize(
    "name, value",
    [
        ("E2", 15.0),  # Food 12 and food (case-insensitive, as LibreOffice matches) 3
        ("E3", 0.0),  # absolute references; a text in the sum range counts as nothing
        ("E4", 701.0),  # a text criterion, lower case
        ("E5", 12.0),  # no sum range: the criterion's range is summed
    ],
)
def test_sumif(name, value):
    assert formula.evaluate(SUMMARY, name) == value


@pytest.mark.parametrize(
    "name, problem",
    [("E6", "comparisons"), ("E7", "differ in size"), ("E8", "takes a range"), ("E9", "itself")],
)
def test_sumif_errors(name, problem):
    with pytest.raises(formula.FormulaError, match=problem):
        formula.evaluate(SUMMARY, name)
