"""Web tasks for self-hosted apps: task templates instantiated from the seeded data, WebArena-style evaluators, and scripted reference solutions.

A :class:`WebTask` is one goal on one app: where it starts, who is logged in, how success is
checked, and a reference solution. Evaluators are the WebArena kinds:

* on the agent's answer — :class:`AnswerExact`, :class:`AnswerIncludes`, :class:`AnswerNumber`;
* on the final URL — :class:`UrlMatch`;
* on server state — :class:`DbCheck` (a query whose rows must equal the expected rows);
* combined — :class:`AllOf`.

A reference solution is a sequence of :data:`agentgym.task.Step`: an action string, or a function
from the current observation text to an action string (to look ids up with
:func:`agentgym.envs.web.observation.element_id`). ``WebAppEnv.tasks()`` hands them out as
:class:`agentgym.Task` reference solutions; :func:`agentgym.task.run_solution` plays one through an env.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from agentgym.envs.state import SQLiteState
from agentgym.task import Step, run_solution

__all__ = [
    "WebTask",
    "EvalContext",
    "Evaluator",
    "AnswerExact",
    "AnswerIncludes",
    "AnswerNumber",
    "UrlMatch",
    "DbCheck",
    "AllOf",
    "Step",
    "run_solution",
]


@dataclass
class EvalContext:
    """What an evaluator may look at when the agent answers."""

    answer: str
    url: str
    db: SQLiteState


class Evaluator:
    """A check of the final state; ``describe()`` says in words what it checks (for reports)."""

    def __call__(self, context: EvalContext) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".").lower()


@dataclass(frozen=True)
class AnswerExact(Evaluator):
    """The answer equals ``value`` (case, surrounding whitespace and a final period ignored)."""

    value: str

    def __call__(self, context: EvalContext) -> bool:
        return _normalise(context.answer) == _normalise(self.value)

    def describe(self) -> str:
        return f"answer is {self.value!r}"


def _mention(text: str) -> re.Pattern:
    """``text`` as a whole word or phrase ("19.49" is not in "119.49")."""
    return re.compile(rf"(?<!\w){re.escape(text)}(?!\w)")


@dataclass(frozen=True)
class AnswerIncludes(Evaluator):
    """The answer mentions every one of ``parts`` and none of ``excluded`` (case-insensitive, whole words).

    ``excluded`` are the question's other candidates (every other product, sender, phone number):
    an answer that lists all of them names no answer at all. A candidate inside an expected part
    ("Mug" when "Travel Mug" is expected) counts only where the answer says it apart from that
    part; one around an expected part ("Travel Mug" when "Mug" is) counts wherever it appears.
    """

    parts: tuple[str, ...]
    excluded: tuple[str, ...] = ()

    def __call__(self, context: EvalContext) -> bool:
        answer = _normalise(context.answer)
        parts = [_normalise(part) for part in self.parts]
        if not all(_mention(part).search(answer) for part in parts):
            return False
        apart = answer
        for part in sorted(parts, key=len, reverse=True):
            apart = _mention(part).sub(" ", apart)
        for other in {_normalise(candidate) for candidate in self.excluded} - set(parts):
            if _mention(other).search(answer if any(part in other for part in parts) else apart):
                return False
        return True

    def describe(self) -> str:
        others = f" and none of the other {len(self.excluded)} candidates" if self.excluded else ""
        return f"answer mentions {', '.join(map(repr, self.parts))}{others}"


@dataclass(frozen=True)
class AnswerNumber(Evaluator):
    """The answer's first number equals ``value`` within ``tolerance`` (``$1,234.50`` reads as 1234.5)."""

    value: float
    tolerance: float = 1e-6

    def __call__(self, context: EvalContext) -> bool:
        match = re.search(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+", context.answer)
        if not match:
            return False
        return math.isclose(float(match.group().replace(",", "")), self.value, abs_tol=self.tolerance)

    def describe(self) -> str:
        return f"answer is the number {self.value:g}"


@dataclass(frozen=True)
class UrlMatch(Evaluator):
    """The final URL has this path, and its query contains ``query`` (each key with exactly these values)."""

    path: str
    query: tuple[tuple[str, str], ...] = ()

    def __call__(self, context: EvalContext) -> bool:
        parts = urlsplit(context.url)
        if parts.path.rstrip("/") != self.path.rstrip("/"):
            return False
        found = parse_qs(parts.query)
        return all(found.get(key) == [value] for key, value in self.query)

    def describe(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.query)
        return f"final URL is {self.path}" + (f" with {query}" if query else "")


@dataclass(frozen=True)
class DbCheck(Evaluator):
    """``sql`` (with ``params``) returns exactly ``expected`` rows, in order."""

    sql: str
    expected: tuple[tuple, ...]
    params: tuple = ()
    description: str = ""

    def __call__(self, context: EvalContext) -> bool:
        rows = tuple(tuple(row) for row in context.db.query(self.sql, self.params))
        return rows == tuple(tuple(row) for row in self.expected)

    def describe(self) -> str:
        return self.description or f"{self.sql} returns {self.expected}"


@dataclass(frozen=True)
class AllOf(Evaluator):
    """Every evaluator passes."""

    evaluators: tuple[Evaluator, ...]

    def __call__(self, context: EvalContext) -> bool:
        return all(evaluator(context) for evaluator in self.evaluators)

    def describe(self) -> str:
        return " and ".join(evaluator.describe() for evaluator in self.evaluators)


@dataclass(frozen=True)
class WebTask:
    """One task on one app (``id`` is ``<template>/<n>``); ``solution`` is its reference solution, next to its evaluator."""

    id: str
    template: str
    goal: str
    evaluator: Evaluator
    solution: tuple[Step, ...]
    start_path: str = "/"
    user: str | None = None
    params: dict = field(default_factory=dict, compare=False)
