"""A gateway session: one episode of an outside agent program, recorded call by call as token-exact turns.

Every model call of the session becomes a :class:`~agentgym.rollout.trajectory.Turn` holding the
prompt ids the policy was conditioned on and the completion ids it sampled, with their logprobs
and the weights' version: the ids the backend used, never text tokenized again.

**Appending.** A call whose messages are the previous call's messages, then the assistant reply
the gateway gave (same text, same tool calls; ids may differ), then new messages (tool results,
a user turn) *continues* the previous call: its prompt is the previous prompt + the sampled
completion ids + the env tokens the chat template adds for the new messages
(:meth:`~agentgym.rollout.chat.ChatFormat.continuation_ids`), so the program's re-serialised copy
of the reply (parsed tool calls written back as JSON) is never what the model is trained on. Such
a turn's ``prompt_mask`` carries the earlier completions as 1s, and
:meth:`~agentgym.rollout.trajectory.Trajectory.sequences` joins the turns into one sequence.

**Rewritten histories.** A call that does not continue the previous one (the program compacted
its context, dropped or edited a message, changed its tools, or runs two conversations) is
rendered afresh from its messages and starts a new sequence of the same episode (mask 0 over its
whole prompt); :attr:`Session.not_appended` counts those calls. Every sequence of the episode
gets the episode's reward (the trainers' advantages are per trajectory).

**Token fidelity.** For each call the gateway also renders the program's messages afresh, which
is what a gateway that re-tokenizes would record; :attr:`Session.retokenized_mismatches` counts
the calls where that differs from the ids actually used (the sampled reply re-serialised by the
program, or a BPE merge across a message boundary): the error such a gateway would have trained on.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from agentgym.rollout.chat import ChatFormat, TemplateError
from agentgym.rollout.policy import Completion
from agentgym.rollout.trajectory import Trajectory, Turn

__all__ = ["Session", "SessionLimits"]


@dataclass(frozen=True)
class SessionLimits:
    """How much one session may ask of the gateway.

    Attributes:
        max_calls: model calls per session; later calls are refused (HTTP 403).
        max_concurrent: model calls of one session in flight at once; more are refused (HTTP 429).
    """

    max_calls: int = 64
    max_concurrent: int = 4

    def __post_init__(self):
        if self.max_calls < 1 or self.max_concurrent < 1:
            raise ValueError("max_calls and max_concurrent must be at least 1")


@dataclass(frozen=True)
class ToolStep:
    """One env step the program took through MCP: after which model call, what it called, what it got back."""

    after_call: int  # the number of model calls made before it
    name: str
    arguments: dict
    text: str
    is_error: bool
    reward: float = 0.0


@dataclass
class _Last:
    """The previous call: what it was asked (normalised), the reply it gave, and its turn."""

    messages: list[dict]
    tools: Any
    reply: dict
    turn: Turn
    rendered: str | None  # the messages' rendering (with the generation prompt): continuing renders it once, not twice


@dataclass
class Session:
    """One episode of an agent program: its key, its env (if any), its recorded turns and counters.

    Made by :meth:`Gateway.open_session <agentgym.gateway.server.Gateway.open_session>`; the
    program sends ``Authorization: Bearer <key>`` (the OpenAI client's ``api_key``).
    """

    task_id: str | None = None
    env_id: str = ""
    env: Any = None
    limits: SessionLimits = field(default_factory=SessionLimits)
    key: str = field(default_factory=lambda: "ag-" + secrets.token_urlsafe(24))
    turns: list[Turn] = field(default_factory=list)
    calls: int = 0  # calls admitted (a refused call is not counted)
    in_flight: int = 0
    not_appended: int = 0
    retokenized_mismatches: int = 0
    refused_calls: int = 0
    env_error: str | None = None  # the env broke during a tool call (its info["env_error"]): an env failure
    backend_errors: int = 0  # model calls the gateway's backend failed (PolicyError)
    backend_error: str | None = None  # the first of them
    reward: float = 0.0
    success: bool = False
    env_done: bool = False
    initial_observation: str = ""
    closed: bool = False
    started: float = field(default_factory=time.monotonic)
    steps: list[ToolStep] = field(default_factory=list)
    branching: bool = False  # snapshot the env at every model call (see agentgym.gateway.branching)
    snapshots: list[Any] = field(default_factory=list)  # with branching: the env's state when call i was made
    replay: Any = None  # a fork being replayed up to its fork point (agentgym.gateway.branching.Replay)
    _last: _Last | None = None

    # -- called by the gateway for each model call ---------------------------------------------

    def prompt_ids(self, fmt: ChatFormat, messages: list[dict], tools: Any, fresh: list[int]) -> list[int]:
        """The ids to sample this call from: the previous sequence continued when the call extends it, else ``fresh``."""
        last = self._last
        k = len(last.messages) if last is not None else 0
        if (
            last is not None
            and tools == last.tools
            and len(messages) > k + 1
            and [_key(m) for m in messages[:k]] == [_key(m) for m in last.messages]
            and _key(messages[k]) == last.reply
        ):
            try:
                tail, _ = fmt.continuation_ids(
                    last.messages, last.turn.completion_ids, messages[k + 1 :], tools, rendered=last.rendered
                )
            except TemplateError:
                tail = None
            if tail is not None:
                ids = last.turn.input_ids + tail
                self.retokenized_mismatches += ids != fresh
                return ids
        return fresh

    def record(
        self,
        messages: list[dict] | None,
        tools: Any,
        prompt_ids: list[int],
        completion: Completion,
        reply: dict | None,
        rendered: str | None = None,
    ) -> Turn:
        """Add the call's turn; ``reply`` is the assistant message returned (None: a raw completions call), ``rendered``
        the messages' rendering with the generation prompt."""
        previous = self.turns[-1] if self.turns else None
        probe = Turn(prompt_ids, [], [], [0] * len(prompt_ids))
        if previous is not None and probe.extends(previous):
            mask = previous.mask + [0] * (len(prompt_ids) - len(previous.input_ids))
        else:
            mask = [0] * len(prompt_ids)
            self.not_appended += previous is not None
        turn = Turn(
            prompt_ids=list(prompt_ids),
            completion_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            prompt_mask=mask,
            policy_version=completion.policy_version,
            action=completion.text,
            finish_reason=completion.finish_reason,
            entropy=completion.entropy,
            replica=completion.replica,
        )
        self.turns.append(turn)
        self._last = None if messages is None or reply is None else _Last(messages, tools, _key(reply), turn, rendered)
        return turn

    # -- the env's side ------------------------------------------------------------------------

    def add_step(
        self,
        observation: str,
        reward: float,
        done: bool,
        success: bool | None,
        call: tuple[str, dict, bool] | None = None,
    ) -> None:
        """An env step the program took (``call``: a tool call's name, arguments, whether it erred): its reward goes
        to the latest model call."""
        if call is not None:
            self.steps.append(ToolStep(len(self.turns), call[0], call[1], observation, call[2], reward))
        self.reward += reward
        if self.turns:
            turn = self.turns[-1]
            turn.reward += reward
            turn.observation = f"{turn.observation}\n{observation}" if turn.observation else observation
        if success is not None:
            self.success = bool(success)
        self.env_done = self.env_done or done

    def trajectory(self, *, error: str | None = None, metadata: dict | None = None) -> Trajectory:
        """The episode as a :class:`Trajectory`: every call a turn, the episode's reward on it."""
        if self.turns:
            self.turns[-1].terminated = self.env_done
            self.turns[-1].truncated = not self.env_done
        return Trajectory(
            task_id=self.task_id or "",
            env_id=self.env_id,
            turns=list(self.turns),
            initial_observation=self.initial_observation,
            reward=self.reward,
            success=self.success,
            terminated=self.env_done,
            truncated=not self.env_done,
            error=error,
            metadata={"gateway": self.stats(), **(metadata or {})},
        )

    def release_snapshots(self) -> None:
        """Free the env snapshots taken for branching (each holds sandbox resources)."""
        for snapshot in self.snapshots:
            snapshot.release()
        self.snapshots.clear()

    def stats(self) -> dict:
        """The session's counters (they go into the trajectory's ``metadata["gateway"]``)."""
        sequences = sum(1 for i, t in enumerate(self.turns) if i == 0 or not t.extends(self.turns[i - 1]))
        return {
            "calls": len(self.turns),
            "sequences": sequences,
            "not_appended": self.not_appended,
            "retokenized_mismatches": self.retokenized_mismatches,
            "refused_calls": self.refused_calls,
            "backend_errors": self.backend_errors,
            "wall_s": time.monotonic() - self.started,
        }


def _key(message: dict) -> dict:
    """A message as compared between calls: tool-call ids left out (programs and SDKs may re-number them)."""
    key: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if calls:
        key["tool_calls"] = [(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in calls]
    return key


def _arguments(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
