"""Spreadsheet cell values: numbers, text and formulas (``=SUM(B1:B4)``, ``=A1*2+C3``, ``=SUMIF(A2:A5,D2,B2:B5)``), shared by the Sheet app and the task checkers.

Plain Python with no imports beyond the standard library (and agentgym's thread-safe ``parse_python`` where it exists),
because it runs both inside the desktop container (the app shows a focused cell's value) and on the
host (checkers evaluate the saved CSV the same way, so a formula and the number it computes are
equally right).
"""

import ast
import re
from collections.abc import Callable

try:
    # On the host checkers parse formulas in the runner's worker threads, beside replies being parsed: every AST
    # build in the process goes through parse_python (CPython gh-106905, see agentgym.actions).
    from agentgym.actions import parse_python
except ImportError:  # inside the desktop container: no agentgym package, and the Sheet app has one thread
    parse_python = ast.parse  # type: ignore[assignment]  # the same parse, with no other thread to wait for

COLUMNS = "ABCDE"
ROWS = 10
_REF = re.compile(r"\b([A-E])([1-9]|10)\b")
_RANGE = re.compile(r"\b([A-E])([1-9]|10):([A-E])([1-9]|10)\b")
_FUNCTIONS: dict[str, Callable[[list[float]], float]] = {
    "SUM": sum,
    "MIN": min,
    "MAX": max,
    "AVERAGE": lambda values: sum(values) / len(values),
    "COUNT": len,
}


class FormulaError(ValueError):
    """A cell's formula cannot be evaluated (bad syntax, a cycle, text in arithmetic)."""


def cell_name(row, column):
    """``cell_name(0, 1) == "B1"`` (row and column from 0)."""
    return f"{COLUMNS[column]}{row + 1}"


def evaluate(cells, name, _seen=(), _known=None):
    """The value of cell ``name`` in ``cells`` (a dict name → raw text): a float, a string, or None when empty.

    Checkers run this on the host over cells the agent wrote, so it must end quickly whatever
    they hold: each cell is computed once (``A2=A1+A1``, ``A3=A2+A2``, ... would otherwise take
    2^50 steps), and nesting too deep for Python is a :class:`FormulaError` like any other.
    """
    known = {} if _known is None else _known
    if name not in known:
        try:
            known[name] = _compute(cells, name, _seen, known)
        except (RecursionError, MemoryError) as exc:
            raise FormulaError(f"{name}: the formula is nested too deeply") from exc
    return known[name]


def _compute(cells, name, _seen, known):
    raw = cells.get(name, "").strip()
    if not raw:
        return None
    if not raw.startswith("="):
        try:
            return float(raw)
        except ValueError:
            return raw
    if name in _seen:
        raise FormulaError(f"{name} refers to itself")
    seen = (*_seen, name)
    # "$" marks an absolute reference ($A$2), which evaluates as the relative one.
    expression = _RANGE.sub(lambda m: "[" + ",".join(_range_names(*m.groups())) + "]", raw[1:].upper().replace("$", ""))
    try:
        tree = parse_python(expression, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"{name}: cannot read {raw!r}") from exc
    return _eval(tree.body, cells, seen, name, known)


def _range_names(c1, r1, c2, r2):
    columns = COLUMNS[min(COLUMNS.index(c1), COLUMNS.index(c2)) : max(COLUMNS.index(c1), COLUMNS.index(c2)) + 1]
    rows = range(min(int(r1), int(r2)), max(int(r1), int(r2)) + 1)
    return [f"{c}{r}" for r in rows for c in columns]


def _number(value, name):
    if isinstance(value, float):
        return value
    if value is None:
        return 0.0
    raise FormulaError(f"{name}: {value!r} is not a number")


def _scalar(value, name):
    if isinstance(value, list):
        raise FormulaError(f"{name}: a range can only be an argument of a function")
    return value


def _eval(node, cells, seen, name, known):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name) and _REF.fullmatch(node.id):
        return _number(evaluate(cells, node.id, seen, known), node.id)
    if isinstance(node, ast.List):
        return [_scalar(_eval(element, cells, seen, name, known), name) for element in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_scalar(_eval(node.operand, cells, seen, name, known), name)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        left = _scalar(_eval(node.left, cells, seen, name, known), name)
        right = _scalar(_eval(node.right, cells, seen, name, known), name)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise FormulaError(f"{name}: division by zero")
        return left / right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "SUMIF":
        return _sumif(node.args, cells, seen, name, known)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        values = []
        for argument in node.args:
            value = _eval(argument, cells, seen, name, known)
            values.extend(value if isinstance(value, list) else [value])
        if not values:
            raise FormulaError(f"{name}: {node.func.id} of nothing")
        return float(_FUNCTIONS[node.func.id](values))
    raise FormulaError(f"{name}: unsupported formula")


def _sumif(arguments, cells, seen, name, known):
    """``SUMIF(range, criterion[, sum_range])``: the sum of ``sum_range``'s cells (``range``'s when absent) beside
    the cells of ``range`` equal to ``criterion`` (a cell, a number or a text, which matches case-insensitively,
    as LibreOffice's whole-cell match does). Comparisons (``">5"``) and wildcards are not supported."""
    areas = [arguments[0], arguments[2 if len(arguments) == 3 else 0]] if len(arguments) in (2, 3) else []
    if not areas or not all(isinstance(a, ast.List) and all(isinstance(e, ast.Name) for e in a.elts) for a in areas):
        raise FormulaError(f"{name}: SUMIF takes a range, a criterion and an optional sum range of the same size")
    criteria, summed = areas[0].elts, areas[1].elts
    if len(criteria) != len(summed):
        raise FormulaError(f"{name}: SUMIF's ranges differ in size")
    criterion = arguments[1]
    if isinstance(criterion, ast.Constant) and isinstance(criterion.value, str):
        if criterion.value[:1] in ("<", ">", "=") or any(c in criterion.value for c in "*?~"):
            raise FormulaError(f"{name}: SUMIF's comparisons and wildcards are not supported")
        wanted = criterion.value
    elif isinstance(criterion, ast.Name) and _REF.fullmatch(criterion.id):
        wanted = evaluate(cells, criterion.id, seen, known)  # a text cell is a criterion too
    else:
        wanted = _scalar(_eval(criterion, cells, seen, name, known), name)
    total = 0.0
    for key, value in zip(criteria, summed):
        summand = evaluate(cells, value.id, seen, known)
        if _matches(evaluate(cells, key.id, seen, known), wanted) and isinstance(summand, float):
            total += summand  # text in the sum range counts as nothing, as in LibreOffice
    return total


def _matches(value, wanted):
    if isinstance(wanted, str) and isinstance(value, str):
        return value.strip().casefold() == wanted.strip().casefold()
    if isinstance(wanted, float) and isinstance(value, float):
        return value == wanted
    return False


def display(value):
    """How a value is shown: integers without a decimal point, other numbers with up to 4 decimals."""
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.4f}".rstrip("0")
    return value
