"""TextGameEnv: the text-world family's base — a game engine played by free-text commands, offered as a tool and as plain text, scored by the engine.

A text world (BabyAI played as text, ScienceWorld) takes one command per turn, the way the
benchmark takes it: the model replies either with the command as plain text (``go forward``) or
with a call of the one tool, ``act(command)``. The engine answers with text; what it could do
next (its valid actions) is in ``info["valid_actions"]`` on every reset and step, and also at
the end of the observation when the env is made with ``show_valid_actions=True``, as the papers'
agents get them. A command the engine does not understand gets the engine's own answer (or,
where the engine has no parser, a line naming the command set), never an exception.

**Family hooks** (the vocabulary of :mod:`agentgym.core`):

* ``_setup(task_id)`` — load the task into the engine; returns the first observation's text;
* ``_gold_path(task_id)`` — the engine's own solution of a task, built when called (the tasks' reference
  solutions and the demonstrations come from it);
* ``_play(command)`` — one command through the engine: a :class:`Played` (the engine's text,
  whether the game ended, whether the engine took the command);
* ``_grade(answer)`` — the verdict when the game ends (``answer`` is None: the engine ended it), from the engine's own score;
* ``valid_actions()`` — what the engine lists as possible now;
* ``_branch_state()`` / ``_load_branch_state(state)`` — the engine's state in snapshots;
* ``_teardown()`` — free the engine.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, final

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome, Verdict
from agentgym.task import Task

__all__ = ["ACT", "Played", "ReplayedGameEnv", "TextGameEnv", "parse_task_id"]

#: The one tool of a text world: a command, exactly as the engine takes it.
ACT = ToolSpec(
    "act",
    "Send one command to the game, e.g. `go forward` or `open door to kitchen`.",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command, as you would type it."}},
        "required": ["command"],
    },
)


def parse_task_id(task_id: str) -> tuple[str, str, int]:
    """``(split, name, number)`` of a text world's task id ``<split>/<name>/<number>`` (each family says what its
    name and number are: ScienceWorld's task type and variation, a TextWorld game kind and number ...)."""
    split, name, number = task_id.split("/")
    return split, name, int(number)


@dataclass
class Played:
    """What the engine did with one command: its text and reward, whether the game is over (``ended``) or ran out of its own steps (``timed_out``), and ``error`` when it did not take the command."""

    text: str
    ended: bool = False
    timed_out: bool = False
    error: str | None = None
    reward: float = 0.0


class TextGameEnv(AgentEnv):
    """Base of the text worlds: commands in, engine text out, the engine's score as the reward (see the module docstring).

    Args:
        show_valid_actions: append the engine's valid actions to every observation.
        max_turns: replies before the episode is truncated.
    """

    allow_text_replies = True
    #: What a task id's name and number are (``<split>/<name>/<number>``): the keys of its task's metadata.
    task_fields: tuple[str, str] = ("name", "number")
    #: A command that changes nothing: what a dawdling demonstrator plays before a step (:meth:`demonstration_replies`).
    idle_command = "look around"
    #: The longest command, in UTF-8 bytes, the engine is handed; a longer one is refused whole, never cut.
    max_command_bytes = 1000

    def __init__(self, *, show_valid_actions: bool = False, max_turns: int = 100, **kwargs: Any):
        super().__init__(max_turns=max_turns, **kwargs)
        self.show_valid_actions = show_valid_actions
        self._task_ids: list[str] = []  # the listed tasks, which each family's constructor selects

    def task_ids(self) -> list[str]:
        return self._task_ids

    def tasks(self) -> list[Task]:
        """Each listed task (category: its split), with the engine's own solution (:meth:`_gold_path`) as its reference."""
        tasks = []
        for task_id in self._task_ids:
            split, name, number = parse_task_id(task_id)
            metadata = dict(zip(self.task_fields, (name, number), strict=True))
            tasks.append(Task(task_id, "", split, metadata, self._gold_path(task_id)))
        return tasks

    def demonstration_replies(
        self, task_id: str, mistake_rate: float = 0.0, rng: random.Random | None = None
    ) -> list[str]:
        """The engine's solution of a task; with ``mistake_rate`` > 0, :attr:`idle_command` is played before a step
        that often (SFT warm starts call this).

        The demonstrator dawdles, it never skips: every step of the solution is still played, from the state it was
        made for, so each reply fits the observation it answers. (A step replaced by an idle command would leave the
        rest of the solution answering states the game is not in — a TextWorld walkthrough's later moves walking
        the wrong rooms — and teach the model that a reply does not depend on what it reads.) A dawdling play fails
        only when it runs past the episode's ``max_turns``: the wasted turns are the habit RL can remove.
        """
        if mistake_rate and rng is None:
            raise ValueError("a mistaken demonstration needs an rng to draw its mistakes from")
        replies = []
        for step in self._gold_path(task_id)():
            if mistake_rate and rng is not None and rng.random() < mistake_rate:
                replies.append(self.idle_command)
            replies.append(step)
        return replies

    # ------------------------------------------------------------------ AgentEnv hooks
    def tools(self) -> list[ToolSpec]:
        return [ACT]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observation, info = super().reset(seed=seed, options=options)
        info["valid_actions"] = self.valid_actions()
        return observation, info

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = super().step(action)
        # Every step says what the engine would take next, including steps that ended the game (then nothing).
        info.setdefault("valid_actions", [] if terminated or truncated else self.valid_actions())
        return observation, reward, terminated, truncated, info

    @final
    def _backend_start(self, task_id: str) -> str:
        return self._with_valid_actions(self._setup(task_id))

    def _call_tool(self, call: ToolCall) -> Outcome:
        return self._command(str(call.arguments["command"]))

    def _reply_without_calls(self, text: str) -> Outcome:
        return self._command(text)

    def _command(self, command: str) -> Outcome:
        command = command.strip()
        if "\\" in command or not command.isprintable():
            # One command is one line of plain text. A newline would hand the engine several commands for one
            # step (past the turn count), and interpreters read control text of their own: a line that starts
            # with a backslash is an escape command of jericho's dumb-frotz (``\\q`` ends the interpreter).
            error = f"not a single-line command: {command[:80]!r}"
            return Outcome(
                f"A command is one line of plain text, without backslashes; got {command[:80]!r}.", error=error
            )
        size = len(command.encode())
        if size > self.max_command_bytes:
            # An engine cuts or chokes on what it cannot take (jericho cuts at 198 bytes, inside a character if one
            # straddles the cut, and then fails decoding it): refused here, the command is not played in part.
            error = f"command too long: {size} bytes, at most {self.max_command_bytes}"
            return Outcome(f"A command is at most {self.max_command_bytes} bytes long; got {size}.", error=error)
        played = self._play(command)
        if played.timed_out:
            # The engine's own step limit is a time limit (truncation), not an ending the agent chose.
            self._require_episode().truncated = True
        if not (played.ended or played.timed_out):
            outcome = Outcome(played.text, reward=played.reward, error=played.error)
            outcome.text = self._with_valid_actions(outcome.text)
            outcome.info["valid_actions"] = self.valid_actions()
            return outcome
        verdict = self._grade(None)  # the engine ended the game; the agent gave no answer
        outcome = verdict.outcome(played.text, error=played.error)
        # The step's reward is the engine's; the verdict adds success and its details.
        outcome.reward, outcome.terminated = played.reward, played.ended
        outcome.info["valid_actions"] = []
        return outcome

    def _with_valid_actions(self, text: str) -> str:
        if not self.show_valid_actions:
            return text
        return f"{text}\n\nValid actions: {', '.join(self.valid_actions())}"

    # ------------------------------------------------------------------ family hooks
    @abc.abstractmethod
    def _setup(self, task_id: str) -> str:
        """Load ``task_id`` into the engine; return the first observation's text."""

    @abc.abstractmethod
    def _gold_path(self, task_id: str) -> Callable[[], list[str]]:
        """The engine's own solution of a task (gold path, walkthrough, bot), built when called: the family's module
        function with the task's arguments bound, so that a :class:`~agentgym.task.Task` holding it holds no env."""

    @abc.abstractmethod
    def _play(self, command: str) -> Played:
        """Run one command through the engine."""

    @abc.abstractmethod
    def valid_actions(self) -> Sequence[str]:
        """The commands the engine lists as possible now."""

    @abc.abstractmethod
    def _grade(self, answer: str | None) -> Verdict:
        """The verdict from the engine's own score (``answer`` is None: a text game ends by play, not by an answer)."""


class ReplayedGameEnv(TextGameEnv):
    """A text world that branches by replay: a snapshot is the task id and the commands played since reset, a fork loads the task and plays them again.

    For engines that cannot save and restore a game (ScienceWorld's and TextWorldExpress's JVMs):
    the games are deterministic given the task and the commands, which each family's
    fork-equals-replay test checks. ``_setup``
    must empty :attr:`commands` and ``_play`` append to it.
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.commands: list[str] = []

    def _branch_state(self) -> tuple[str, list[str]]:
        return self._require_episode().task_id, list(self.commands)

    def _load_branch_state(self, state: tuple[str, list[str]]) -> None:
        task_id, commands = state
        self._setup(task_id)
        for command in commands:
            self._play(command)
