"""Calculator: a tiny multi-turn tool-planning env (evaluate ``a + b * c`` with add and mul calls on named values, then submit), small enough to learn on CPU.

A task is an expression over three named numbers, ``a + b * c where a = 5, b = 4, c = 7``
(numbers 2–9, operators ``+`` or ``*``). The agent has ``add(x, y)`` and ``mul(x, y)``, which
take value names and store the result under the next free letter (``mul("b", "c")`` answers
``d = 28``), and submits the number, or the name of the value that holds it (``submit("e")``).
Reward 1 when that is the expression's value, else 0. Half of the tasks are ``a + b * c``, where the order of the calls matters: multiplying
first (``mul("b", "c")``, then ``add("a", "d")``) is right, evaluating left to right
(``add("a", "b")``, then ``mul("d", "c")``) is the classic mistake. Where KeyChain teaches
following pointers, this teaches planning: choosing each call and its operands from the
structure of the request, then reporting the result. Every episode has three turns.

:func:`demonstration` gives the scripted solution; with ``mistake_rate`` > 0 it evaluates
``a + b * c`` left to right that often (an explorable habit for SFT warm starts: the start
sometimes multiplies first when sampled, and RL is rewarded for it).

Tasks are generated from their id (``"<split>-<n>"``, :mod:`agentgym.envs.tool.generated`), so
``"train"`` and ``"heldout"`` are disjoint and reproducible without data files.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from agentgym.core import select_tasks
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.generated import GeneratedTasks, task_ids, task_rng
from agentgym.task import Task

__all__ = ["CalculatorEnv", "demonstration", "make_task"]

#: Operator patterns and their weights: the one where evaluation order matters is half the tasks.
PATTERNS = (("+", "*"), ("*", "+"), ("+", "+"), ("*", "*"))
WEIGHTS = (3, 1, 1, 1)
TOOL_OF = {"+": "add", "*": "mul"}
APPLY = {"+": lambda x, y: x + y, "*": lambda x, y: x * y}
#: Every value on the right path has at most two digits, as KeyChain's numbers do. Tried first:
#: tools on numbers (``mul(4, 7)``), the expression written with them (``Compute 5 + 14 * 7``, or
#: with named operands ``where a = 5, ...``): the tiny model's SFT start never learned to pick
#: the k-th number of the prompt (0.5%, 2.5% and 5% of held-out tasks; at last one reply for
#: every task). With value names the calls are chosen, not copied; submitting the number (copied
#: from the last result) still failed on most tasks after 7 epochs (8.5%), so the scripted
#: solution submits the value's name: the task is the plan, not the copy.
MAX_VALUE = 99


def make_task(task_id: str) -> dict:
    """The task ``"<split>-<n>"``: its numbers, operators, prompt and answer."""
    rng = task_rng(task_id)
    split = task_id.rpartition("-")[0]
    while True:  # about 1,700 expressions in all: draw until one of this task's split
        ops = rng.choices(PATTERNS, WEIGHTS)[0]
        numbers = [rng.randint(2, 9) for _ in range(3)]
        while _evaluate(numbers, ops) > MAX_VALUE:  # only a * b * c can exceed it
            numbers = [rng.randint(2, 9) for _ in range(3)]
        a, b, c = numbers
        expression = f"a {ops[0]} b {ops[1]} c where a = {a}, b = {b}, c = {c}"
        if split_of(expression) == split:
            break
    return {
        "prompt": f"Compute {expression}. Use add(x, y) and mul(x, y) on value names, one call per step. "
        "Then submit(answer).",
        "numbers": numbers,
        "ops": ops,
        "answer": str(_evaluate(numbers, ops)),
    }


def split_of(expression: str) -> str:
    """The split an expression belongs to: a fixed fifth of them (by hash) is held out, so no held-out task is ever a train task."""
    return "heldout" if int(hashlib.sha256(expression.encode()).hexdigest(), 16) % 5 == 0 else "train"


def _evaluate(numbers: list[int], ops: tuple[str, str]) -> int:
    a, b, c = numbers
    if ops == ("+", "*"):
        return a + b * c
    return APPLY[ops[1]](APPLY[ops[0]](a, b), c)


def demonstration(task: dict, mistake_rate: float = 0.0, rng: random.Random | None = None) -> list[str]:
    """The scripted solution's replies: two calls in precedence order, then the submit of the last value's name.

    ``mistake_rate`` > 0 scripts a worse demonstrator that evaluates ``a + b * c`` left to right
    with that probability (drawn from ``rng``), submitting the wrong value it computes.
    """
    if mistake_rate and rng is None:
        raise ValueError("a mistaken demonstration needs an rng to draw its choices from")
    ops = task["ops"]
    left_to_right = ops != ("+", "*") or (mistake_rate and rng is not None and rng.random() < mistake_rate)
    if left_to_right:
        calls = [f'{TOOL_OF[ops[0]]}("a", "b")', f'{TOOL_OF[ops[1]]}("d", "c")']
    else:  # a + b * c, multiplying first
        calls = ['mul("b", "c")', 'add("a", "d")']
    return [*calls, 'submit("e")']


def _apply(op: str, x: str, y: str, state: dict) -> str:
    values = state["values"]
    missing = [name for name in (x, y) if name not in values]
    if missing:
        raise KeyError(f"no value named {missing[0]!r}; the values are {', '.join(values)}")
    name = chr(ord("a") + len(values))
    values[name] = APPLY[op](values[x], values[y])
    return f"{name} = {values[name]}"


def add(x: str, y: str, state: dict) -> str:
    """Add two named values; the sum is stored under the next free letter."""
    return _apply("+", x, y, state)


def mul(x: str, y: str, state: dict) -> str:
    """Multiply two named values; the product is stored under the next free letter."""
    return _apply("*", x, y, state)


def _check(task: dict, state: dict, transcript: list) -> tuple[float, bool]:
    answers = [c["arguments"].get("answer") for c in transcript if c["tool"] == "submit"]
    if not answers:
        return 0.0, False
    answer = str(answers[-1]).strip()
    # A value's name stands for its value; anything else must be the number itself.
    submitted = str(state["values"][answer]) if answer in state["values"] else answer
    ok = submitted == task["answer"]
    return float(ok), ok


class CalculatorEnv(ToolEnv):
    """Evaluate a three-value expression with add and mul calls on named values, then submit it (see the module docstring).

    Args:
        split: the tasks ``reset()`` draws from when no task id is given (``"train"`` or ``"heldout"``).
        num_tasks: how many tasks of that split are listed.
        max_turns: replies before the episode is truncated.
        tasks: task ids of either split, or a pattern over the listed ones (default: the listed ones).
    """

    def __init__(
        self,
        split: str = "train",
        num_tasks: int = 200,
        max_turns: int = 5,
        tasks: str | Sequence[str] | None = None,
        **kwargs,
    ):
        catalog = GeneratedTasks(task_ids(split, num_tasks), make_task)
        catalog.listed = select_tasks(catalog, tasks)
        super().__init__(
            [add, mul],
            catalog,
            state_factory=lambda task: {"values": dict(zip("abc", task["numbers"]))},
            check=_check,
            max_turns=max_turns,
            call_timeout=None,
            allow_text_replies=False,
            variant="calculator",
            **kwargs,
        )

    def tasks(self) -> list[Task]:
        """The listed tasks (category: the operator pattern), each with :func:`demonstration` as its reference solution."""
        return [
            Task(
                task_id,
                task["prompt"],
                "a {} b {} c".format(*task["ops"]),
                {"split": task_id.rpartition("-")[0]},
                demonstration(task),
            )
            for task_id in self.task_ids()
            for task in [self.task_data[task_id]]
        ]

    def demonstration_replies(
        self, task_id: str, mistake_rate: float = 0.0, rng: random.Random | None = None
    ) -> list[str]:
        """:func:`demonstration` of a task by id; its mistake is left-to-right evaluation. SFT warm starts call this."""
        return demonstration(self.task_data[task_id], mistake_rate, rng)
