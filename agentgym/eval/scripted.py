"""Scripted conversational agents for branching evaluation's tests and measurements: a careful one, and one with flaws that particular user behaviours trigger.

:class:`ScriptedConversationAgent` plays a conversational task (τ²-bench's: a customer-service
agent with a simulated user) from the task's reference solution, as the oracle does
(:class:`~agentgym.eval.oracles.ReferencePolicy`: the task from ``EPISODE_TASK``), but with the
protocol a customer-service policy asks for: it makes the reference's read-only calls, then
asks the user to confirm before the first call that writes, then makes the rest of the calls
and tells the user the outcome (the reference's last message). A tool is read-only when its
name starts with a read verb (:data:`READ_PREFIXES`: τ²'s retail and airline READ tools all do).

It reads the user's answers the way a careful agent does: consent is any clear yes ("yes",
"go ahead", "proceed", "sure", "just do it"); a hedge ("not sure", "I guess") makes it ask
again; demands for an exception are politely ignored; details given late or out of order are
fine. So with ``flaws=()`` it completes every task under every behaviour of
:data:`agentgym.envs.diverse_user.BEHAVIOURS`: a branching evaluator must find no failure.

Each flaw of :data:`FLAWS` makes it fail the way brittle agents do, under one kind of user behaviour:

* ``literal_yes``: only the word "yes" is consent; anything else is taken as a no, and it ends
  the conversation without acting (triggered by a rephrased or ambiguous answer);
* ``rushed``: once the user sounds impatient, it skips its remaining lookups and the
  confirmation, makes only the first write and closes without the outcome (acts before confirming);
* ``first_message_only``: it reads the request from the first sentence of the user's first
  message; details that come first or come later make it miss part of the request: it leaves
  out the last write (triggered by information in another order, or omitted and given later);
* ``gives_in``: a demand for an exception or a manager makes it transfer the user to a human
  agent instead of acting (pressure to break policy).

:data:`IMPERFECT` is all four: the imperfect agent of the tests and ``benchmarks/divert.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import cast

from agentgym.core import AgentEnv
from agentgym.eval.oracles import ReferencePolicy, _reply
from agentgym.rollout.chat import Message
from agentgym.rollout.policy import Completion, SamplingParams
from agentgym.task import Task, call_text

__all__ = ["FLAWS", "IMPERFECT", "READ_PREFIXES", "ScriptedConversationAgent", "scripted_agent_for"]

FLAWS = ("literal_yes", "rushed", "first_message_only", "gives_in")
IMPERFECT = FLAWS
#: Tool-name prefixes of read-only tools.
READ_PREFIXES = ("get_", "find_", "list_", "search_", "calculate", "think")

_QUESTION = "Shall I go ahead?"
_CONSENT = re.compile(r"\b(yes|go ahead|proceed|sure|just do it|please do)\b", re.I)
_HEDGE = re.compile(r"\b(not (really )?sure|i guess|maybe)\b", re.I)
_IMPATIENT = re.compile(r"\b(hurry|quick(ly)?|right away)\b", re.I)
_PRESSURE = re.compile(r"\b(exception|manager|insist)\b", re.I)
_DETAILS_FIRST = re.compile(r"^(you are|your user id|i am|my user id|my name)\b", re.I)
_LATE_DETAILS = re.compile(r"forgot to mention", re.I)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class ScriptedConversationAgent(ReferencePolicy):
    """A scripted customer-service agent over each task's reference solution, careful or with ``flaws`` (see the module docstring).

    Args:
        tasks: the env's ``tasks()`` (their ``solution``: tool-call steps, then a closing message).
        flaws: some of :data:`FLAWS` (none: the careful agent).
    """

    def __init__(self, tasks: Iterable[Task], flaws: Sequence[str] = ()):
        super().__init__(tasks)
        unknown = sorted(set(flaws) - set(FLAWS))
        if unknown:
            raise ValueError(f"unknown flaw(s) {unknown}; choose from {list(FLAWS)}")
        self.flaws = frozenset(flaws)
        self.name = "scripted-flawed" if self.flaws else "scripted-careful"

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        return _reply(self._next(messages), tools, self.version)

    def _next(self, messages: Sequence[Message]) -> str:
        steps = [str(step) for step in self.solution(self.task_id())]
        calls = [step for step in steps if _CALL.search(step)]
        closing = next((step for step in reversed(steps) if not _CALL.search(step)), "All done.")
        writes = [i for i, call in enumerate(calls) if not _call_name(call).startswith(READ_PREFIXES)]
        mine = [m for m in messages if m["role"] == "assistant"]
        made_calls = [name for m in mine for name in _names(m)]
        said = [_text(m) for m in mine if not _names(m)]
        heard = _user_texts(messages)
        if said and said[-1] in (closing, _DONE, _REFUSED, _TRANSFERRED):
            return "Thank you, everything is taken care of."  # the user spoke again after the end
        if _TRANSFER in made_calls:
            return _TRANSFERRED
        made = len(made_calls)
        if "first_message_only" in self.flaws and heard and _misread(heard) and writes:
            del calls[writes.pop()]
        if "rushed" in self.flaws and writes and any(_IMPATIENT.search(text) for text in heard):
            if not any(not name.startswith(READ_PREFIXES) for name in made_calls):
                return calls[writes[0]]  # acts before confirming, and only the first write
            return _DONE
        first_write = writes[0] if writes else len(calls)
        if made < first_write:
            return calls[made]
        if made == first_write and writes:
            asked = [text for text in said if _QUESTION in text]
            if not asked:
                return f"I can do this for you now: {_summary(calls[first_write:])}. {_QUESTION}"
            answer = heard[-1] if heard else ""
            if "gives_in" in self.flaws and any(_PRESSURE.search(text) for text in heard):
                return call_text(_TRANSFER, {"summary": "The customer insists on an exception to the policy."})
            if "literal_yes" in self.flaws:
                consent = bool(re.search(r"\byes\b", answer, re.I))
            else:
                if _HEDGE.search(answer) and len(asked) < 3:
                    return f"Just to be sure: {_QUESTION} Please answer yes or no."
                consent = bool(_CONSENT.search(answer))
            if not consent:
                return _REFUSED
        if made < len(calls):
            return calls[made]
        return closing


_DONE = "Done."
_REFUSED = "Understood, I won't make any changes. Have a nice day."
_TRANSFER = "transfer_to_human_agents"
_TRANSFERRED = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."


def _call_name(call: str) -> str:
    return json.loads(_CALL.search(call).group(1))["name"]


def _names(message: Message) -> list[str]:
    """The tools a reply of the agent called (native calls, or Hermes blocks in its text)."""
    if message.get("tool_calls"):
        return [c.get("function", c).get("name", "") for c in message["tool_calls"]]
    return [json.loads(body)["name"] for body in _CALL.findall(_text(message))]


def _text(message: Message) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content if isinstance(p, dict))


def _user_texts(messages: Sequence[Message]) -> list[str]:
    """What the user said, in order: the text after ``user:`` in the env's observations."""
    texts = []
    for message in messages:
        if message["role"] in ("assistant", "system"):
            continue
        text = _text(message)
        if "\nuser: " in text:
            texts.append(text.rsplit("\nuser: ", 1)[1])
        elif text.startswith("user: "):
            texts.append(text.removeprefix("user: "))
    return texts


def _misread(heard: list[str]) -> bool:
    """Whether a first-sentence reader misses part of the request: details came first, or came later."""
    return bool(_DETAILS_FIRST.match(heard[0].strip())) or any(_LATE_DETAILS.search(text) for text in heard[1:])


def _summary(calls: list[str]) -> str:
    parts = []
    for call in calls:
        body = json.loads(_CALL.search(call).group(1))
        if not body["name"].startswith(READ_PREFIXES):
            parts.append(f"{body['name']} with {json.dumps(body['arguments'])}")
    return "; ".join(parts)


def scripted_agent_for(flaws: Sequence[str] = ()):
    """A policy factory ``(env_id, env_kwargs) -> ScriptedConversationAgent`` over that env's tasks (as :func:`~agentgym.eval.oracles.oracle_for`)."""

    def make(env_id: str, env_kwargs: dict) -> ScriptedConversationAgent:
        import gymnasium

        import agentgym  # noqa: F401  (registers the envs)

        env = gymnasium.make(env_id, **env_kwargs)
        try:
            return ScriptedConversationAgent(cast(AgentEnv, env.unwrapped).tasks(), flaws)
        finally:
            env.close()

    make.__name__ = "scripted-flawed" if flaws else "scripted-careful"
    return make
