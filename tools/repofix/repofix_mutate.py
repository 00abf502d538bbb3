"""Bug-injection operators for RepoFix: each rewrites one small piece of a Python function the way a real slip would.

A mutation edits only the tokens involved (an operator, a constant, a name, a
whole statement's lines), so the resulting diff looks like a human's one-token
mistake rather than a reformatted function. Every mutation also carries the
AST it is meant to produce; `apply_mutation` re-parses the edited function and
rejects the edit unless the trees match, which catches precedence surprises
(``c and not (a or b)`` -> ``c and a or b``) before anything is run.

Positions are byte offsets into the UTF-8 source because that is what
``ast`` reports in ``col_offset``.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

Edit = tuple[int, int, str]  # (start byte, end byte, replacement text) in the original source
NodePath = tuple[tuple[str, "int | None"], ...]  # (field, list index) steps from a function node
Variant = tuple["ast.AST | None", tuple[tuple[Edit, ...], ...], str]  # replacement, edit alternatives, description
Function = ast.FunctionDef | ast.AsyncFunctionDef


class _Located(Protocol):
    """A node with a source position (expressions, statements, arguments, ...)."""

    lineno: int
    col_offset: int
    end_lineno: int | None
    end_col_offset: int | None


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: where it goes, what the code should parse to, and the text edits that get there."""

    operator: str
    function: str  # qualified name of the mutated function, e.g. "Version.bump_major"
    line: int  # 1-based line of the mutated code
    description: str  # e.g. "`<` -> `<=`", for metadata and debugging
    alternatives: tuple[tuple[Edit, ...], ...]  # tried in order; the first that parses to the expected AST wins
    target: NodePath
    replacement: ast.AST | None = field(compare=False, repr=False)  # None removes the target statement
    func: Function = field(compare=False, repr=False)
    region: tuple[int, int] = (0, 0)  # byte span of the function's whole lines (decorators included)


class _Source:
    """Byte-offset view of a module's source."""

    def __init__(self, source: str):
        self.data = source.encode("utf-8")
        self.line_starts = [0]
        for match in re.finditer(rb"\n", self.data):
            self.line_starts.append(match.end())

    def start(self, node: _Located) -> int:
        return self.line_starts[node.lineno - 1] + node.col_offset

    def end(self, node: _Located) -> int:
        return self.line_starts[node.end_lineno - 1] + node.end_col_offset

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def node_text(self, node: _Located) -> str:
        return self.text(self.start(node), self.end(node))

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Byte span of lines first..last (1-based, inclusive), newline included."""
        end = self.line_starts[last] if last < len(self.line_starts) else len(self.data)
        return self.line_starts[first - 1], end

    def find(self, start: int, end: int, pattern: str) -> tuple[int, int] | None:
        """Byte span of the first match of `pattern` between start and end (an operand gap)."""
        gap = self.text(start, end)
        match = re.search(pattern, gap)
        if match is None:
            return None
        return (start + len(gap[: match.start()].encode("utf-8")), start + len(gap[: match.end()].encode("utf-8")))


def _int_value(node: ast.AST) -> int | None:
    """The integer a literal like ``3`` or ``-1`` denotes (bools excluded), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    return None


def _int_node(value: int) -> ast.AST:
    # ast.parse never folds ``-1``, so a negative literal must be a USub node to compare equal.
    if value < 0:
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
    return ast.Constant(value=value)


def _parenthesized(edits: tuple[Edit, ...], start: int, end: int) -> tuple[Edit, ...]:
    return ((start, start, "("),) + edits + ((end, end, ")"),)


def _shift_bound(node: ast.expr, src: _Source) -> Iterator[Variant]:
    """Move an index or bound expression by one: ``3`` -> ``2``/``4``, ``n`` -> ``n + 1``/``n - 1``."""
    start, end = src.start(node), src.end(node)
    value = _int_value(node)
    if value is not None:
        for new in (value + 1, value - 1):
            yield _int_node(new), (((start, end, str(new)),),), f"`{value}` -> `{new}`"
    elif isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
        for op, sign in ((ast.Add(), "+"), (ast.Sub(), "-")):
            replacement = ast.BinOp(left=copy.deepcopy(node), op=op, right=ast.Constant(value=1))
            text = src.node_text(node)
            yield replacement, (((end, end, f" {sign} 1"),),), f"`{text}` -> `{text} {sign} 1`"


# --- operators -------------------------------------------------------------------------------------
# Each takes (node, path, context) and yields Variants for that node; most ignore path and context.

_COMPARE_SWAPS = {
    ast.Lt: (r"<", ast.LtE, "<="),
    ast.LtE: (r"<=", ast.Lt, "<"),
    ast.Gt: (r">", ast.GtE, ">="),
    ast.GtE: (r">=", ast.Gt, ">"),
    ast.Eq: (r"==", ast.NotEq, "!="),
    ast.NotEq: (r"!=", ast.Eq, "=="),
    ast.Is: (r"\bis\b", ast.IsNot, "is not"),
    ast.IsNot: (r"\bis\s+not\b", ast.Is, "is"),
    ast.In: (r"\bin\b", ast.NotIn, "not in"),
    ast.NotIn: (r"\bnot\s+in\b", ast.In, "in"),
}


def flip_comparison(node, path, ctx) -> Iterator[Variant]:
    """``a < b`` -> ``a <= b``, ``==`` -> ``!=``, ``is`` -> ``is not``, ``in`` -> ``not in`` (and back)."""
    if not isinstance(node, ast.Compare):
        return
    src = ctx.src
    left = node.left
    for index, (op, right) in enumerate(zip(node.ops, node.comparators)):
        pattern, new_op, new_text = _COMPARE_SWAPS[type(op)]
        span = src.find(src.end(left), src.start(right), pattern)
        if span is not None:
            replacement = copy.deepcopy(node)
            replacement.ops[index] = new_op()
            old_text = src.text(*span)
            yield replacement, ((span + (new_text,),),), f"`{old_text}` -> `{new_text}`"
        left = right


def swap_and_or(node, path, ctx) -> Iterator[Variant]:
    """``a and b`` -> ``a or b`` and vice versa."""
    if not isinstance(node, ast.BoolOp):
        return
    src = ctx.src
    old, new, new_op = ("and", "or", ast.Or) if isinstance(node.op, ast.And) else ("or", "and", ast.And)
    edits: list[Edit] = []
    for left, right in zip(node.values, node.values[1:]):
        span = src.find(src.end(left), src.start(right), rf"\b{old}\b")
        if span is None:
            return
        edits.append(span + (new,))
    replacement = copy.deepcopy(node)
    replacement.op = new_op()
    spans = tuple(edits)
    yield replacement, (spans, _parenthesized(spans, src.start(node), src.end(node))), f"`{old}` -> `{new}`"


def drop_not(node, path, ctx) -> Iterator[Variant]:
    """``not x`` -> ``x``."""
    if not (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return
    src = ctx.src
    start, end = src.start(node), src.end(node)
    # Keep whatever followed the keyword (parentheses included) so the operand reads as written.
    rest = src.text(start, end)[len("not") :].lstrip()
    edits = ((start, end, rest),)
    yield copy.deepcopy(node.operand), (edits, ((start, end, f"({rest})"),)), "drop `not`"


_ARITH_SWAPS = {
    ast.Add: ("+", ast.Sub, "-"),
    ast.Sub: ("-", ast.Add, "+"),
    ast.Mult: ("*", ast.Div, "/"),
    ast.Div: ("/", ast.Mult, "*"),
    ast.FloorDiv: ("//", ast.Div, "/"),
    ast.Mod: ("%", ast.FloorDiv, "//"),
    ast.Pow: ("**", ast.Mult, "*"),
}


def _is_sequence_literal(node: ast.AST) -> bool:
    """Operands that make ``+``/``%`` mean concatenation or formatting, where a swap is not a plausible slip."""
    return isinstance(node, (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


def wrong_arith(node, path, ctx) -> Iterator[Variant]:
    """``a + b`` -> ``a - b``, ``*`` -> ``/``, ``//`` -> ``/`` ..., also in augmented assignments."""
    src = ctx.src
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAPS:
        if _is_sequence_literal(node.left) or _is_sequence_literal(node.right):
            return
        left_end, right_start = src.end(node.left), src.start(node.right)
        suffix = ""
    elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH_SWAPS:
        if _is_sequence_literal(node.value):
            return
        left_end, right_start = src.end(node.target), src.start(node.value)
        suffix = "="
    else:
        return
    old, new_op, new = _ARITH_SWAPS[type(node.op)]
    gap = src.text(left_end, right_start)
    if gap.replace(old + suffix, "", 1).strip(" \t\n\\()") != "":
        return  # a comment or another token sits between the operands; leave such code alone
    span = src.find(left_end, right_start, re.escape(old + suffix))
    if span is None:
        return
    replacement = copy.deepcopy(node)
    replacement.op = new_op()
    yield replacement, ((span + (new + suffix,),),), f"`{old}{suffix}` -> `{new}{suffix}`"


def _is_range_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"


def off_by_one(node, path, ctx) -> Iterator[Variant]:
    """Shift an integer index, a ``range()`` bound, or drop a ``+ 1``/``- 1`` adjustment."""
    src = ctx.src
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        if _int_value(node.slice) is not None:  # only literal indexes: ``d[key]`` is usually a mapping
            for replacement, alternatives, description in _shift_bound(node.slice, src):
                whole = copy.deepcopy(node)
                whole.slice = cast(ast.expr, replacement)
                yield whole, alternatives, description
    elif _is_range_call(node):
        for index, arg in enumerate(node.args[:2]):  # start/stop; a step of +-1 is rarely the intended bug
            for replacement, alternatives, description in _shift_bound(arg, src):
                whole = copy.deepcopy(node)
                whole.args[index] = replacement
                yield whole, alternatives, description
    elif (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, (ast.Add, ast.Sub))
        and _int_value(node.right) == 1
        and not _is_sequence_literal(node.left)
    ):
        start, end = src.start(node), src.end(node)
        left_text = src.node_text(node.left)
        edits = ((start, end, left_text),)
        yield (
            copy.deepcopy(node.left),
            (edits, ((start, end, f"({left_text})"),)),
            f"`{src.node_text(node)}` -> `{left_text}`",
        )


def wrong_slice_bound(node, path, ctx) -> Iterator[Variant]:
    """Move a slice's start or stop by one: ``s[:n]`` -> ``s[:n + 1]``, ``s[1:]`` -> ``s[2:]``."""
    if not isinstance(node, ast.Slice):
        return
    for bound in (node.lower, node.upper):
        if bound is not None:
            for replacement, alternatives, description in _shift_bound(bound, ctx.src):
                whole = copy.deepcopy(node)
                setattr(whole, "lower" if bound is node.lower else "upper", replacement)
                yield whole, alternatives, description


def wrong_return(node, path, ctx) -> Iterator[Variant]:
    """``return result`` -> ``return other_local``; ``return True`` -> ``return False``."""
    if not isinstance(node, ast.Return) or node.value is None:
        return
    src = ctx.src
    value = node.value
    start, end = src.start(value), src.end(value)
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        new = not value.value
        replacement = ast.Return(value=ast.Constant(value=new))
        yield replacement, (((start, end, str(new)),),), f"`return {value.value}` -> `return {new}`"
    elif isinstance(value, ast.Name):
        for name in ctx.local_names:
            if name != value.id:
                replacement = ast.Return(value=ast.Name(id=name, ctx=ast.Load()))
                yield replacement, (((start, end, name),),), f"`return {value.id}` -> `return {name}`"


# Swapping these arguments gives an immediate TypeError, which no real bug looks like.
_NO_SWAP_CALLS = {"isinstance", "issubclass", "getattr", "setattr", "hasattr", "super", "print"}


def swap_args(node, path, ctx) -> Iterator[Variant]:
    """``f(a, b)`` -> ``f(b, a)`` for two adjacent positional arguments."""
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return
    if isinstance(node.func, ast.Name) and node.func.id in _NO_SWAP_CALLS:
        return
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        return
    src = ctx.src
    for index, (first, second) in enumerate(zip(node.args, node.args[1:])):
        first_text, second_text = src.node_text(first), src.node_text(second)
        if first_text == second_text:
            continue
        replacement = copy.deepcopy(node)
        replacement.args[index], replacement.args[index + 1] = replacement.args[index + 1], replacement.args[index]
        edits = (
            (src.start(first), src.end(first), second_text),
            (src.start(second), src.end(second), first_text),
        )
        yield replacement, (edits,), f"swap `{first_text}` and `{second_text}`"


def _is_guard(node: ast.AST) -> bool:
    """``if cond: return/raise/continue/break`` with no else: an early exit."""
    return (
        isinstance(node, ast.If)
        and not node.orelse
        and isinstance(node.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
    )


def delete_statement(node, path, ctx) -> Iterator[Variant]:
    """Remove a call statement (``out.append(x)``, ``self._reset()``) or an early-exit guard."""
    if not path or path[-1][1] is None:
        return  # not an element of a statement block
    if not ((isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)) or _is_guard(node)):
        return
    src = ctx.src
    line_start, line_end = src.line_span(node.lineno, node.end_lineno)
    before = src.text(line_start, src.start(node))
    after = src.text(src.end(node), line_end)
    if before.strip() or not (after.strip() == "" or after.strip().startswith("#")):
        return  # shares a line with other code; deleting whole lines would take that too
    block = ctx.parent_list(path)
    if len(block) == 1:
        # The block would be empty: a real slip leaves the placeholder behind.
        yield ast.Pass(), (((line_start, line_end, f"{before}pass\n"),),), "statement -> `pass`"
    else:
        first_line = src.text(line_start, line_end).splitlines()[0].strip()
        yield None, (((line_start, line_end, ""),),), f"delete `{first_line}`"


def wrong_default(node, path, ctx) -> Iterator[Variant]:
    """A parameter default that is off: ``strict=True`` -> ``strict=False``, ``width=0`` -> ``width=1``."""
    if path != ctx.defaults_marker:
        return
    src = ctx.src
    arguments = ctx.func.args
    slots = [("defaults", i, d) for i, d in enumerate(arguments.defaults)]
    slots += [("kw_defaults", i, d) for i, d in enumerate(arguments.kw_defaults) if d is not None]
    for field_name, index, default in slots:
        start, end = src.start(default), src.end(default)
        news: list[int]  # bools (a subclass of int) for a bool default
        if isinstance(default, ast.Constant) and isinstance(default.value, bool):
            news = [not default.value]
        elif _int_value(default) is not None:
            value = _int_value(default)
            news = [value + 1] + ([value - 1] if value > 0 else [])
        else:
            continue
        for new in news:
            replacement = copy.deepcopy(arguments)
            getattr(replacement, field_name)[index] = (
                ast.Constant(value=new) if isinstance(new, bool) else _int_node(new)
            )
            yield replacement, (((start, end, str(new)),),), f"default `{src.node_text(default)}` -> `{new}`"


OPERATORS: dict[str, Callable[..., Iterator[Variant]]] = {
    "flip_comparison": flip_comparison,
    "off_by_one": off_by_one,
    "wrong_slice_bound": wrong_slice_bound,
    "swap_and_or": swap_and_or,
    "drop_not": drop_not,
    "wrong_arith": wrong_arith,
    "wrong_return": wrong_return,
    "swap_args": swap_args,
    "delete_statement": delete_statement,
    "wrong_default": wrong_default,
}


# --- enumeration ------------------------------------------------------------------------------------


@dataclass
class _Context:
    src: _Source
    func: Function
    local_names: list[str]
    defaults_marker: NodePath = (("args", None),)

    def parent_list(self, path: NodePath) -> list:
        return getattr(_resolve(self.func, path[:-1]), path[-1][0])


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def functions(tree: ast.Module) -> Iterator[tuple[str, Function]]:
    """(qualified name, node) of every function and method, nested ones included, in source order."""

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child
                yield from visit(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def _body_nodes(func: Function) -> Iterator[tuple[NodePath, ast.AST]]:
    """Pre-order walk of a function's own body, skipping its docstring, nested scopes,
    annotations and f-strings (whose inner positions Python 3.11 reports unreliably)."""

    def walk(node, path):
        yield path, node
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "type_comment"):
                continue
            children = value if isinstance(value, list) else [value]
            for index, child in enumerate(children):
                if isinstance(child, ast.AST) and not isinstance(child, (*_SCOPES, ast.JoinedStr)):
                    yield from walk(child, path + ((name, index if isinstance(value, list) else None),))

    body = func.body
    start = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0
    for index in range(start, len(body)):
        if not isinstance(body[index], _SCOPES):
            yield from walk(body[index], (("body", index),))


def _local_names(func: Function) -> list[str]:
    """Parameters and assigned names of a function, sorted: what a wrong ``return`` could pick."""
    args = func.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    for path, node in _body_nodes(func):
        # Comprehension variables do not outlive the comprehension, so returning one is no plausible slip.
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and all(f != "generators" for f, _ in path):
            names.add(node.id)
    return sorted(names - {"self", "cls", "_"})


def _resolve(node: ast.AST, path: NodePath) -> ast.AST:
    current: Any = node
    for name, index in path:
        current = getattr(current, name)
        if index is not None:
            current = current[index]
    return current


def _replaced(func: ast.AST, path: NodePath, replacement: ast.AST | None) -> ast.AST:
    """A copy of `func` with the node at `path` replaced (or, for None, removed from its block)."""
    result = copy.deepcopy(func)
    parent = _resolve(result, path[:-1])
    name, index = path[-1]
    if index is None:
        setattr(parent, name, replacement)
    elif replacement is None:
        del getattr(parent, name)[index]
    else:
        getattr(parent, name)[index] = replacement
    return result


def find_mutations(source: str) -> list[Mutation]:
    """Every candidate mutation of every function in `source`, in a stable order
    (functions in source order, nodes pre-order, operators in OPERATORS order).
    Candidates are not yet checked: `apply_mutation` returns None for those whose edit misfires."""
    src = _Source(source)
    result = []
    for qualname, func in functions(ast.parse(source)):
        first_line = min([func.lineno] + [d.lineno for d in func.decorator_list])
        region = src.line_span(first_line, func.end_lineno)
        ctx = _Context(src=src, func=func, local_names=_local_names(func))
        sites = [(ctx.defaults_marker, func.args)] + list(_body_nodes(func))
        for path, node in sites:
            for name, operator in OPERATORS.items():
                for replacement, alternatives, description in operator(node, path, ctx):
                    result.append(
                        Mutation(
                            operator=name,
                            function=qualname,
                            line=getattr(node, "lineno", func.lineno),
                            description=description,
                            alternatives=alternatives,
                            target=path,
                            replacement=replacement,
                            func=func,
                            region=region,
                        )
                    )
    return result


def _apply_edits(data: bytes, edits: tuple[Edit, ...]) -> bytes:
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:start] + text.encode("utf-8") + data[end:]
    return data


def _function_dump(snippet: bytes) -> str | None:
    """ast.dump of the first function in a snippet of whole source lines, wherever it was indented."""
    indented = snippet[:1] in (b" ", b"\t")
    try:
        tree = ast.parse(b"if 1:\n" + snippet if indented else snippet)
    except SyntaxError:
        return None
    node = cast(ast.If, tree.body[0]).body[0] if indented else tree.body[0]
    return ast.dump(node)


def apply_mutation(source: str, mutation: Mutation) -> str | None:
    """`source` with the mutation applied, or None if no edit alternative yields exactly the intended AST."""
    data = source.encode("utf-8")
    expected = ast.dump(_replaced(mutation.func, mutation.target, mutation.replacement))
    low, high = mutation.region
    for edits in mutation.alternatives:
        new = _apply_edits(data, edits)
        if _function_dump(new[low : high + len(new) - len(data)]) == expected:
            return new.decode("utf-8")
    return None
