"""Simulated users: the contract for envs whose turns partly come from a user (a script or any policy), and the scripted user.

An env with a user side (τ²-bench's customer-service domains are the first) holds a
:class:`UserSimulator` and, per episode, a :class:`UserState`. When the agent addresses the user
(a plain-text reply), the env calls :meth:`UserSimulator.reply` with the state and the
conversation *from the user's side*: OpenAI chat messages in which the agent's messages have
role ``user`` and the user's own have role ``assistant`` (τ²'s role flip), and results of the
user's own tool calls have role ``tool``. The simulator answers with a :class:`UserTurn`: text
for the agent, or calls of the user's tools (τ²'s telecom: the user's phone), whose results the
env appends before asking again, until the user says something. A turn whose text holds a stop
token (:data:`STOP_TOKENS`: τ²'s ``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``)
ends the conversation.

**The simulator is stateless; the state is the env's.** ``reply(state, conversation)`` returns
the turn and the next state (τ²'s ``generate_next_message`` has the same shape). The simulator
object (a policy behind an endpoint, a local model) is shared by an env and all its forks; the
:class:`UserState` is plain data that the env keeps in its branch state, so a fork's user is
exactly where the original's was, and a replay from reset reaches the same state.

**Steering** (what a branching evaluator needs): :meth:`UserState.steer` sets the user's next
reply outright (``reply=``: a different user turn at the same junction) and/or adds a standing
directive to the user's instructions (``directive=``: "be impatient", "give the order id only
when asked twice"). Both are state: snapshot the env before the agent's message, fork it, steer
the fork's user, and step the same agent message to branch on the user's reply.

**Kinds of simulators.** :class:`ScriptedUser` plays the turns the env derived from the task
(deterministic: tests, CPU runs); :class:`agentgym.rollout.user.PolicyUser` prompts any agentgym
policy (an OpenAI-compatible endpoint, a local Hugging Face model, ``agentgym serve``) with the
state's system prompt. An env author who adds a user side: give the env a ``user=`` option (a
:class:`UserSimulator`, default a :class:`ScriptedUser`), build the :class:`UserState` at
``_setup`` with :meth:`UserSimulator.start` (the user's instructions and scenario, the user's
tools, and a script for the scripted user), route plain-text replies through
:meth:`UserSimulator.reply`, and list the state in ``branch_attributes``
(docs/envs/conversation.md walks through it).
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STOP_TOKENS", "ScriptedUser", "UserSimulator", "UserState", "UserTurn", "is_stop"]

#: τ²'s user-side stop tokens: the user is satisfied (or gives up), was transferred to a human, or is out of scope.
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")


def is_stop(text: str) -> bool:
    """Whether a user's text ends the conversation (it holds one of :data:`STOP_TOKENS`, as τ²'s ``UserSimulator.is_stop``)."""
    return any(token in text for token in STOP_TOKENS)


@dataclass
class UserTurn:
    """One user turn: text for the agent, or calls of the user's own tools (``{"name", "arguments"}`` each).

    ``tokens`` is what the turn cost the simulator's model (prompt + completion, as its tokenizer
    or endpoint counted them); None for a simulator without a model (a script, a steered reply).
    """

    text: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    tokens: int | None = None

    @property
    def stop(self) -> bool:
        """Whether this turn ends the conversation (tool calls never do)."""
        return not self.tool_calls and is_stop(self.text)


@dataclass
class UserState:
    """A simulated user's per-episode state: plain data the env carries in snapshots and forks.

    ``system_prompt`` is what a policy user is told (instructions and scenario); ``tools`` the
    user's own tools (OpenAI function schemas); ``script`` the turns a scripted user plays;
    ``turns`` how many replies the user has given; ``directives`` standing instructions added to
    the system prompt and ``next_reply`` a reply that replaces the simulator's next one (both set
    by :meth:`steer`).
    """

    system_prompt: str
    tools: list[dict] = field(default_factory=list)
    script: list[UserTurn] = field(default_factory=list)
    turns: int = 0
    directives: list[str] = field(default_factory=list)
    next_reply: str | None = None

    def steer(self, *, reply: str | None = None, directive: str | None = None) -> None:
        """Make the next reply ``reply`` (as given, whatever the simulator would say), and/or add ``directive`` to the user's instructions from now on."""
        if reply is not None:
            self.next_reply = reply
        if directive:
            self.directives.append(directive)

    def instructions(self) -> str:
        """The user's system prompt with the standing directives appended."""
        if not self.directives:
            return self.system_prompt
        listed = "\n".join(f"- {directive}" for directive in self.directives)
        return f"{self.system_prompt}\n\n<directives>\nFrom now on, also:\n{listed}\n</directives>"


class UserSimulator(abc.ABC):
    """A user side of a conversation (see the module docstring): stateless, shared by an env and its forks."""

    #: A short label for reports.
    name: str = "user"

    def start(
        self, system_prompt: str, tools: Sequence[Mapping[str, Any]] = (), script: Sequence[UserTurn] = ()
    ) -> UserState:
        """The state of a new conversation."""
        return UserState(system_prompt, [dict(tool) for tool in tools], [copy.deepcopy(turn) for turn in script])

    def reply(self, state: UserState, conversation: Sequence[Mapping[str, Any]]) -> tuple[UserTurn, UserState]:
        """The user's next turn given ``conversation`` (the user's side, see the module docstring), and the next state.

        A steered reply (:meth:`UserState.steer`) is used once in place of the simulator's own.
        ``state`` is left unchanged.
        """
        state = copy.deepcopy(state)
        if state.next_reply is not None:
            turn, state.next_reply = UserTurn(state.next_reply), None
        else:
            turn = self._respond(state, conversation)
        state.turns += 1
        return turn, state

    @abc.abstractmethod
    def _respond(self, state: UserState, conversation: Sequence[Mapping[str, Any]]) -> UserTurn:
        """The simulator's own next turn (``state`` is a copy the simulator may update, e.g. a script position)."""


class ScriptedUser(UserSimulator):
    """A deterministic user that plays the state's script in order and then stops (``###STOP###``).

    The script is the env's (τ²: the task's opening request, then the user-side reference
    actions); the conversation's content is ignored, so a scripted user never adapts: it is for
    tests, CPU runs and reference plays, not for measuring an agent.
    """

    name = "scripted"

    def _respond(self, state: UserState, conversation: Sequence[Mapping[str, Any]]) -> UserTurn:
        # A steered reply took a script turn's place: the script goes on after it.
        if state.turns < len(state.script):
            return copy.deepcopy(state.script[state.turns])
        return UserTurn(STOP_TOKENS[0])
