"""Reference policies that bracket what a model can score: oracles that replay each task's known solution, and a gibberish policy.

* HumanEval: write the canonical solution into ``solution.py``, import it once, submit.
* RepoFix: apply the gold patch with ``git apply``, run the visible tests, submit.
* desktop (GUI) tasks: play the task's scripted actions, one per turn.
* web apps: play the task's scripted reference solution, reading element ids from the latest
  observation (see :mod:`agentgym.envs.web.tasks`).
* BFCL multi-turn: per user turn, one reply with that turn's ground-truth calls, then a text
  reply that ends the turn (a turn without ground-truth calls gets the text reply only).
* :class:`NonsensePolicy` always answers gibberish (a suite's 0% check).
* :class:`RandomWebPolicy` clicks a uniformly random element of the page each turn (the random
  baseline of web suites).

**How an oracle knows its task.** A policy only sees the conversation, and initial observations
do not identify tasks uniquely (BFCL has tasks sharing a first user turn). So the episode tells
it: :class:`EpisodeAgent` (the agent the eval harness runs with) sets the :data:`EPISODE_TASK`
context variable to the episode's task id around each sample, and the oracle reads it. Outside
the harness, set it yourself (``EPISODE_TASK.set(task_id)``) before calling ``chat``. Where the
oracle is within the task comes from the conversation: the replies it already made.

Oracles reply with native tool calls when the request carries tool schemas, else with Hermes
``<tool_call>`` text, so they work with either ``AgentConfig.native_tools`` setting.
"""

from __future__ import annotations

import contextvars
import json
import random
from collections.abc import Sequence

from agentgym.actions import ToolCall
from agentgym.rollout.agent import Agent, Episode
from agentgym.rollout.chat import Message
from agentgym.rollout.policy import Completion, Policy, SamplingParams

__all__ = [
    "EPISODE_TASK",
    "EpisodeAgent",
    "NonsensePolicy",
    "OraclePolicy",
    "BFCLOracle",
    "CodeOracle",
    "WebOracle",
    "RandomWebPolicy",
    "hermes",
    "humaneval_reference",
    "repofix_reference",
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
    return f"<tool_call>{json.dumps({'name': call.name, 'arguments': call.arguments})}</tool_call>"


def humaneval_reference(task_id: str) -> list[list[ToolCall]]:
    """The replies that solve a HumanEval task with its canonical solution (one call per reply)."""
    from agentgym.envs.code.humaneval import SOLUTION_PATH, load_problems

    problem = load_problems()[task_id]
    return [
        [ToolCall("write_file", {"path": SOLUTION_PATH, "content": problem["prompt"] + problem["canonical_solution"]})],
        [
            ToolCall(
                "python",
                {"code": "import sys; sys.path.insert(0, '/workspace')\nimport solution\nprint('imports fine')"},
            )
        ],
        [ToolCall("submit")],
    ]


def repofix_reference(task: dict) -> list[list[ToolCall]]:
    """The replies that fix a RepoFix task (its instance dict) with its gold patch."""
    return [
        [ToolCall("write_file", {"path": "/tmp/fix.diff", "content": task["patch"]})],
        [ToolCall("bash", {"command": "git apply /tmp/fix.diff && git status --short"})],
        [ToolCall("run_tests")],
        [ToolCall("submit")],
    ]


def _calls_in(message: Message) -> bool:
    return bool(message.get("tool_calls")) or "<tool_call>" in str(message.get("content") or "")


def _reply(calls: list[ToolCall], tools: list[dict] | None, version: int) -> Completion:
    if tools:
        return Completion(
            text="", finish_reason="tool_calls", policy_version=version, tool_calls=[call.to_openai() for call in calls]
        )
    return Completion(text="\n".join(map(hermes, calls)), policy_version=version)


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


class CodeOracle(OraclePolicy):
    """Replays a fixed list of replies per task: ``script(task_id) -> [[ToolCall, ...], ...]``, one entry per turn."""

    def __init__(self, script):
        self.script = script

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        replies = self.script(self.task_id())
        done = sum(m["role"] == "assistant" for m in messages)
        # Past the script (the env wants more), submitting again is the only sensible reply.
        return _reply(replies[min(done, len(replies) - 1)], tools, self.version)


class BFCLOracle(OraclePolicy):
    """Replays BFCL ground truth for one category's tasks (see the module docstring)."""

    def __init__(self, category: str):
        from agentgym.envs.tool.bfcl import load_tasks

        self.tasks = load_tasks(category)

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        from agentgym.envs.tool.bfcl import from_bfcl_call

        task = self.tasks[self.task_id()]
        replies = [m for m in messages if m["role"] == "assistant"]
        # Every text reply ended a user turn; a reply with calls is answered by a text reply.
        turn = sum(not _calls_in(m) for m in replies)
        truth = task["ground_truth"][turn] if turn < len(task["ground_truth"]) else []
        if not truth or (replies and _calls_in(replies[-1])):
            return Completion(text="Done.", policy_version=self.version)
        calls = [from_bfcl_call(call, task["involved_classes"]) for call in truth]
        return _reply(calls, tools, self.version)


class WebOracle(OraclePolicy):
    """Plays each web-app task's reference solution; a step that reads ids gets the latest observation."""

    def __init__(self, app: str):
        from agentgym.envs.web.app_env import app_tasks

        self.tasks = app_tasks(app)

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        from agentgym.actions import parse_action
        from agentgym.envs.web.actions import web_tools

        steps = self.tasks[self.task_id()].solution
        done = sum(m["role"] == "assistant" for m in messages)
        step = steps[min(done, len(steps) - 1)]
        action = step(_text_of(_latest_observation(messages))) if callable(step) else step
        return _reply(parse_action(action, web_tools()).calls, tools, self.version)


def _latest_observation(messages: Sequence[Message]) -> Message:
    return next(m for m in reversed(messages) if m["role"] != "assistant")


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
            return _reply([ToolCall("noop", {})], tools, self.version)
        return _reply([ToolCall("click", {"id": self._rng.choice(ids)})], tools, self.version)


class NonsensePolicy(Policy):
    """Answers every request with random words (seeded by the conversation's length, so runs repeat)."""

    name = "nonsense"
    WORDS = ("blorp", "quux", "zanth", "miffle", "groak", "tenebrous", "snizzle", "vorp", "wub", "plinth")

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        rng = random.Random(len(messages))
        return Completion(text=" ".join(rng.choice(self.WORDS) for _ in range(12)), policy_version=self.version)


def oracle_for(env_id: str, env_kwargs: dict) -> OraclePolicy:
    """The oracle of one registered env (HumanEval, RepoFix, BFCL multi-turn, the desktop, and the web apps ``agentgym/web.*-v0``)."""
    name = env_id.removeprefix("agentgym/")
    if name == "HumanEval-v0":
        return CodeOracle(humaneval_reference)
    if name == "RepoFix-v0":
        from agentgym.envs.code import repofix_gen
        from agentgym.envs.code.repofix import load_swebench_instances

        instances = env_kwargs.get("instances")
        tasks = {
            t["instance_id"]: t for t in (load_swebench_instances(instances) if instances else repofix_gen.load_tasks())
        }
        return CodeOracle(lambda task_id: repofix_reference(tasks[task_id]))
    if name == "Desktop-v0":
        from agentgym.actions import parse_action
        from agentgym.envs.gui.actions import TOOLS
        from agentgym.envs.gui.tasks import TASKS

        return CodeOracle(lambda task_id: [parse_action(action, TOOLS).calls for action in TASKS[task_id].solution])
    if name.startswith("web.") and name.removeprefix("web.").removesuffix("-v0") in ("shop", "mail", "wiki"):
        import gymnasium

        return WebOracle(env_kwargs.get("app") or gymnasium.spec(env_id).kwargs["app"])
    if name.startswith("BFCL-multi-turn-"):
        import gymnasium

        return BFCLOracle(env_kwargs.get("category") or gymnasium.spec(env_id).kwargs["category"])
    raise ValueError(f"no oracle for {env_id}")
