"""Reference policies that bracket what a model can score: an oracle that replays each task's reference solution, and a gibberish policy.

* :class:`ReferencePolicy` (the ``oracle`` policy of ``agentgym eval``) plays
  ``task.reference_solution()`` of the episode's task (see :class:`agentgym.Task`), one step
  per turn; a step that reads the page gets the latest observation's text. Every built-in env
  with known solutions hands them out through ``env.tasks()``: HumanEval's canonical solutions,
  RepoFix's gold patches, BFCL's ground truth, the web apps' and the desktop's scripted
  solutions, KeyChain's demonstrations.
* :class:`NonsensePolicy` always answers gibberish (a suite's 0% check).
* :class:`RandomWebPolicy` clicks a uniformly random element of the page each turn (the random
  baseline of web suites).

**How an oracle knows its task.** A policy only sees the conversation, and initial observations
do not identify tasks uniquely (BFCL has tasks sharing a first user turn). So the episode tells
it: :class:`EpisodeAgent` (the agent the eval harness runs with) sets the :data:`EPISODE_TASK`
context variable to the episode's task id around each sample, and the oracle reads it. Outside
the harness, set it yourself (``EPISODE_TASK.set(task_id)``) before calling ``chat``. Where the
oracle is within the solution comes from the conversation: the replies it already made.

The oracle replies with native tool calls when the request carries tool schemas (the solution
step parsed against them), else with the step's text as it is, so it works with either
``AgentConfig.native_tools`` setting.
"""

from __future__ import annotations

import contextvars
import random
from collections.abc import Iterable, Sequence
from typing import cast

from agentgym.actions import ToolCall, parse_action, tool_specs_from_openai
from agentgym.core import AgentEnv
from agentgym.rollout.agent import Agent, Episode
from agentgym.rollout.chat import Message
from agentgym.rollout.policy import Completion, Policy, SamplingParams
from agentgym.task import Step, Task, call_text, resolve_step

__all__ = [
    "EPISODE_TASK",
    "EpisodeAgent",
    "NonsensePolicy",
    "OraclePolicy",
    "ReferencePolicy",
    "RandomWebPolicy",
    "hermes",
    "oracle_for",
]

#: The task id of the episode being sampled (set by :class:`EpisodeAgent`).
EPISODE_TASK: contextvars.ContextVar[str] = contextvars.ContextVar("agentgym_episode_task")


class EpisodeAgent(Agent):
    """An :class:`Agent` that publishes the episode's task id in :data:`EPISODE_TASK` while it samples."""

    async def sample(self, episode: Episode, sampling: SamplingParams | None = None) -> Completion:
        # The runner awaits this in its own asyncio task, so the value is private to this episode.
        token = EPISODE_TASK.set(episode.task_id)
        try:
            return await super().sample(episode, sampling)
        finally:
            EPISODE_TASK.reset(token)


def hermes(call: ToolCall) -> str:
    """A call as Hermes ``<tool_call>`` text."""
    return call_text(call.name, call.arguments)


def _reply(action: str, tools: list[dict] | None, version: int) -> Completion:
    """A completion that makes ``action``: native tool calls when the request has tools and the action is calls, else its text."""
    if tools:
        calls = parse_action(action, tool_specs_from_openai(tools), allow_text=True).calls
        if calls:
            return Completion(
                text="",
                finish_reason="tool_calls",
                policy_version=version,
                tool_calls=[call.to_openai() for call in calls],
            )
    return Completion(text=action, policy_version=version)


class OraclePolicy(Policy):
    """Base of the oracles: chat mode only, the task from :data:`EPISODE_TASK`."""

    name = "oracle"

    def task_id(self) -> str:
        try:
            return EPISODE_TASK.get()
        except LookupError:
            raise RuntimeError(
                f"{type(self).__name__} needs the episode's task id: run it with EpisodeAgent "
                "or set agentgym.eval.oracles.EPISODE_TASK"
            ) from None


class ReferencePolicy(OraclePolicy):
    """Plays each task's reference solution (see the module docstring); ``tasks`` are an env's ``tasks()``.

    Past the end of a solution (the env wants more), it repeats the last step: submitting again
    is the only sensible reply.
    """

    def __init__(self, tasks: Iterable[Task]):
        self.tasks = {task.id: task for task in tasks if task.has_reference_solution}
        self._solutions: dict[str, list[Step]] = {}

    def solution(self, task_id: str) -> list[Step]:
        """The task's reference solution (built once per task)."""
        if task_id not in self._solutions:
            if task_id not in self.tasks:
                raise KeyError(f"task {task_id!r} has no reference solution")
            self._solutions[task_id] = self.tasks[task_id].reference_solution() or []
        return self._solutions[task_id]

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        steps = self.solution(self.task_id())
        done = sum(m["role"] == "assistant" for m in messages)
        action = resolve_step(steps[min(done, len(steps) - 1)], _text_of(_latest_observation(messages)))
        return _reply(action, tools, self.version)


def _latest_observation(messages: Sequence[Message]) -> Message:
    """The messages since the last reply, as one: a tool result and, with images, the screenshot's message after it."""
    texts = []
    for message in reversed(messages):
        if message["role"] in ("assistant", "system"):
            break
        texts.append(_text_of(message))
    return {"role": "user", "content": "\n".join(reversed(texts))}


def _text_of(message: Message) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))


class RandomWebPolicy(Policy):
    """Each turn clicks one of the page's shown element ids, uniformly at random.

    Draws come from one generator seeded at construction, so samples are independent (task
    instances can look alike in text) and a run at concurrency 1 repeats exactly.
    """

    name = "random-web"

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        from agentgym.envs.web.observation import elements

        ids = [element["id"] for element in elements(_text_of(_latest_observation(messages)))]
        if not ids:
            return _reply(call_text("noop"), tools, self.version)
        return _reply(call_text("click", {"id": self._rng.choice(ids)}), tools, self.version)


class NonsensePolicy(Policy):
    """Answers every request with random words (seeded by the conversation's length, so runs repeat)."""

    name = "nonsense"
    WORDS = ("blorp", "quux", "zanth", "miffle", "groak", "tenebrous", "snizzle", "vorp", "wub", "plinth")

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        rng = random.Random(len(messages))
        return Completion(text=" ".join(rng.choice(self.WORDS) for _ in range(12)), policy_version=self.version)


def oracle_for(env_id: str, env_kwargs: dict) -> ReferencePolicy:
    """The oracle of one env (``gymnasium.make(env_id, **env_kwargs)``): a :class:`ReferencePolicy` over its tasks.

    The env is built to read its ``tasks()`` and closed again (constructors are cheap: sandboxes
    start at reset). An env none of whose tasks has a reference solution has no oracle
    (:class:`ValueError`).
    """
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    env = gymnasium.make(env_id, **env_kwargs)
    try:
        policy = ReferencePolicy(cast(AgentEnv, env.unwrapped).tasks())
    finally:
        env.close()
    if not policy.tasks:
        raise ValueError(f"no oracle for {env_id}: none of its tasks has a reference solution")
    return policy
