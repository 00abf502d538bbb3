"""Task: one thing an env can be asked to do — its id, goal, reporting category, metadata and an optional reference solution.

Every env lists its tasks with :meth:`agentgym.core.AgentEnv.tasks`; eval suites, oracle
policies, demos and tests read tasks and their solutions from there, so a task's definition,
its grader and its reference solution stay together in the env family that owns them.

::

    env = gymnasium.make("agentgym/tool.keychain-v0")
    task = env.unwrapped.tasks()[0]
    observation, info = env.reset(options={"task_id": task.id})
    for step in task.reference_solution():
        observation, reward, terminated, truncated, info = env.step(resolve_step(step, observation["text"]))

or, equivalently, :func:`run_solution`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Step", "Task", "call_text", "resolve_step", "run_solution"]

#: One step of a reference solution: the action text ``env.step`` accepts, or a function from the
#: latest observation's text to that action (for actions that name what the page shows, e.g. an
#: element id that differs between episodes).
Step = str | Callable[[str], str]


@dataclass(frozen=True)
class Task:
    """One task of an env: what ``reset(options={"task_id": task.id})`` starts.

    Like BrowserGym's tasks (whose ``cheat`` plays a known solution), a task may carry a
    reference solution: the actions that solve it from reset, each the raw text an agent would
    reply with (a tool call in the env's syntax, a plain-text reply where the env takes one).

    Attributes:
        id: the task id, unique within its env.
        goal: the instruction the agent is given (usually the text of the first observation or
            its core); empty where each episode draws its own goal (MiniWoB++'s utterance).
        category: what results are reported under (a template, an app, a benchmark category);
            empty when the env has none.
        metadata: anything else a reader may want (difficulty, the repository, the app), as
            JSON-serialisable values.
        solution: the reference solution as a sequence of :data:`Step`, or a function of no
            arguments that returns one (for solutions that are costly to build and only built
            when asked for), or ``None`` when the task has none. Read it through
            :meth:`reference_solution`.
    """

    id: str
    goal: str = ""
    category: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    solution: Sequence[Step] | Callable[[], Sequence[Step]] | None = field(
        default=None, repr=False, compare=False, hash=False
    )

    def reference_solution(self) -> list[Step] | None:
        """The steps that solve this task from reset, one per turn, or ``None`` when it has no known solution.

        Each step is an action text for ``env.step``, or a function from the latest observation's
        text to one (:func:`resolve_step`). A solution of the right kind (``fail()`` for an
        infeasible desktop task) is a solution too.
        """
        if self.solution is None:
            return None
        steps = self.solution() if callable(self.solution) else self.solution
        return list(steps)

    @property
    def has_reference_solution(self) -> bool:
        return self.solution is not None


def call_text(name: str, arguments: Mapping[str, Any] | None = None) -> str:
    """A tool call as Hermes ``<tool_call>`` text, which every env's ``step`` parses (for writing reference solutions)."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': dict(arguments or {})})}</tool_call>"


def resolve_step(step: Step, observation_text: str) -> str:
    """The action text of one solution step, given the latest observation's text."""
    return step(observation_text) if callable(step) else step


def run_solution(env: Any, task_id: str, solution: Sequence[Step]) -> tuple[dict, float, bool, dict]:
    """Play a solution through ``env`` from reset; returns the last (observation, reward, terminated, info).

    Raises :class:`AssertionError` with the observation when a step's action reports an error
    (``info["error"]``) or the episode ends before the solution does.
    """
    observation, info = env.reset(options={"task_id": task_id})
    reward, terminated = 0.0, False
    for index, step in enumerate(solution):
        if terminated:
            raise AssertionError(f"{task_id}: the episode ended before step {index}")
        action = resolve_step(step, observation["text"])
        observation, reward, terminated, truncated, info = env.step(action)
        if info["error"]:
            raise AssertionError(f"{task_id} step {index} {action!r}: {info['error']}\n{observation['text']}")
    return observation, reward, terminated, info
