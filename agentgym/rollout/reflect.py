"""Reflect-then-retry (R³L): a failed episode is diagnosed in language, its failure turn located, and retried from that turn's snapshot.

:class:`ReflectRetry` is a runner job (``Runner(..., job=ReflectRetry(...).job)``). It runs one
linear episode, keeping an env snapshot at every turn boundary. If the episode ends without
success (and without an env error):

1. **Diagnosis**: a reviewer policy (by default the acting policy itself) is prompted with the
   task, every turn's action and result, and the grader's details (the last step's ``info``), and
   asked what went wrong and which turn first went wrong (``TURN: <n>``).
2. **Failure turn** (``locate``): ``"diagnosis"`` — the turn the reviewer named; ``"predictor"`` —
   the turn after which a :class:`~agentgym.rollout.tree.SuccessPredictor`'s P(success | prefix)
   dropped most (:func:`largest_drop`); ``"grader"`` — the first turn whose step reported an
   ``error``, else the last turn (the answer the grader rejected). An unusable answer from the
   first two falls back to the grader's.
3. **Retry**: a fork at the snapshot *before* the failure turn (no replay), the reflection added
   to its context as a user message, run to its end. With ``ReflectConfig(diagnose=False)`` there
   is no diagnosis and no note: the retry restarts from the failure turn in the policy's own
   context (on-policy), which separates what the restart point gives from what the language does.

The result is a :class:`~agentgym.rollout.trajectory.RolloutTree`: the failed path, and the retry
branching off it at the fork (a root of its own when the failure was the first turn).
``tree.metadata["reflection"]`` holds the diagnosis (None without one), the failure and fork turns,
the located-by source and the two leaves. **The retry's turns are stored without the reflection**: its tokens
are removed from their prompts (:func:`strip_span`), which is what a trainer trains on — the
policy must learn to act well without being told how. Their ``logprobs`` stay those of the
policy that sampled them *with* the reflection in context, so a trainer must treat the retry as
off-policy (TreeGRPO weights its tokens as SAO's decoupled objective does; see
``agentgym.trainers.advantages.importance_weights``). Token mode only: stripping is exact on
token ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentgym.core import AgentEnv
from agentgym.rollout.agent import Agent, Episode, EpisodeCheckpoint
from agentgym.rollout.policy import Policy, SamplingParams
from agentgym.rollout.runner import EpisodeRequest
from agentgym.rollout.trajectory import RolloutTree, Turn
from agentgym.rollout.tree import SuccessPredictor

__all__ = [
    "LOCATORS",
    "ReflectConfig",
    "ReflectRetry",
    "insertion_span",
    "largest_drop",
    "parse_failure_turn",
    "strip_span",
]

LOCATORS = ("diagnosis", "predictor", "grader")
NOTE = "A previous attempt at this task failed from here. What went wrong, and how to do it right: {diagnosis}"
PROMPT = (
    "An agent attempted the task below and failed.\n\nTask: {task}\n\n{turns}\n\nGrader: {grader}\n\n"
    "In one or two sentences, say what went wrong and how to do it right. "
    "Then name the first turn that went wrong as TURN: <number>."
)


def insertion_span(before: Sequence[int], after: Sequence[int]) -> tuple[int, int] | None:
    """``(start, length)`` when ``after`` is ``before`` with ``length`` ids inserted at ``start``; else None.

    The start is the longest common prefix (an insertion that repeats the ids around it is
    placed as early as it can be; removing it gives ``before`` either way).
    """
    length = len(after) - len(before)
    if length <= 0:
        return None
    start = 0
    while start < len(before) and before[start] == after[start]:
        start += 1
    return (start, length) if list(after[start + length :]) == list(before[start:]) else None


def strip_span(turn: Turn, span: tuple[int, int], inserted: Sequence[int]) -> Turn:
    """``turn`` with the ids ``inserted`` at ``span`` removed from its prompt (ValueError if they are not there)."""
    start, length = span
    if turn.prompt_ids[start : start + length] != list(inserted):
        raise ValueError(f"the turn's prompt does not hold the inserted ids at {span}")
    return replace(
        turn,
        prompt_ids=turn.prompt_ids[:start] + turn.prompt_ids[start + length :],
        prompt_mask=turn.prompt_mask[:start] + turn.prompt_mask[start + length :],
    )


def largest_drop(probabilities: Sequence[float]) -> int | None:
    """The turn (1-based) after which P(success) fell most: ``argmax_t p[t−1] − p[t]``, with ``p[0]`` before any turn.

    The earliest on a tie; None when it never falls.
    """
    best, turn = 0.0, None
    for t in range(1, len(probabilities)):
        drop = probabilities[t - 1] - probabilities[t]
        if drop > best:
            best, turn = drop, t
    return turn


def parse_failure_turn(text: str, turns: int) -> int | None:
    """The turn a diagnosis names (its last ``TURN: <n>``), if it is one of the episode's ``turns`` (1-based)."""
    named = re.findall(r"TURN\s*:?\s*(\d+)", text, flags=re.IGNORECASE)
    if not named:
        return None
    turn = int(named[-1])
    return turn if 1 <= turn <= turns else None


def grader_failure_turn(turns: Sequence[Turn]) -> int:
    """The first turn whose step reported an ``error`` (1-based), else the last one (the answer the grader rejected)."""
    for i, turn in enumerate(turns, 1):
        if turn.info.get("error"):
            return i
    return len(turns)


@dataclass(frozen=True)
class ReflectConfig:
    """How :class:`ReflectRetry` diagnoses and retries.

    Attributes:
        locate: how the failure turn is found: one of :data:`LOCATORS` (see the module docstring).
        max_tokens: the diagnosis's length.
        temperature: the diagnosis's sampling temperature.
        diagnose: False retries from the failure turn *without* a reflection (R³L's restart without its language):
            no diagnosis is asked for, and the retry acts in the context the policy always acts in, so its turns
            are on-policy. ``locate`` must then be ``"grader"`` or ``"predictor"``.
    """

    locate: str = "diagnosis"
    max_tokens: int = 64
    temperature: float = 0.7
    diagnose: bool = True

    def __post_init__(self):
        if self.locate not in LOCATORS:
            raise ValueError(f"locate must be one of {LOCATORS}, got {self.locate!r}")
        if not self.diagnose and self.locate == "diagnosis":
            raise ValueError("without a diagnosis the failure turn is located by 'grader' or 'predictor'")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")


class ReflectRetry:
    """The reflect-then-retry job (module docstring); ``reviewer`` diagnoses (default: the agent's policy)."""

    def __init__(
        self,
        agent: Agent,
        config: ReflectConfig = ReflectConfig(),
        reviewer: Policy | None = None,
        predictor: SuccessPredictor | None = None,
    ):
        if not agent.token_mode:
            raise ValueError("reflect-then-retry needs a token-mode agent (the reflection is removed by token id)")
        if config.locate == "predictor" and predictor is None:
            raise ValueError("locate='predictor' needs a SuccessPredictor")
        self.agent = agent
        self.config = config
        self.reviewer = reviewer or agent.policy
        self.predictor = predictor

    async def job(self, agent: Agent, env: AgentEnv, request: EpisodeRequest) -> RolloutTree:
        return await self.run(env, request.task_id, request.seed)

    async def run(self, env: AgentEnv, task_id: str | None = None, seed: int | None = None) -> RolloutTree:
        episode = await self.agent.start(env, task_id, seed)
        checkpoints: list[EpisodeCheckpoint] = []
        retry: Episode | None = None
        try:
            while not episode.done:
                checkpoints.append(await episode.checkpoint())  # the boundary before turn len(checkpoints)+1
                await self.agent.step(episode)
            tree = RolloutTree(
                task_id=episode.task_id, env_id=env.unwrapped.kind, initial_observation=episode.initial_observation
            )
            node = None
            nodes = []
            for turn in episode.turns:
                node = tree.add(node, turn).id
                nodes.append(node)
            if node is None:
                return tree
            tree.leaf_success[node] = episode.success
            if episode.error:
                tree.leaf_errors[node] = episode.error
            self._teach(episode)
            if episode.success or episode.error:
                return tree
            diagnosis = await self._diagnose(episode) if self.config.diagnose else None
            failure, source = self._locate(episode.turns, diagnosis or "")
            fork = failure - 1  # turns kept before the retry
            retry = await checkpoints[fork].fork()
            if diagnosis is not None:
                span, note = self.agent.add_note(retry, NOTE.format(diagnosis=diagnosis.strip()))
            while not retry.done:
                await self.agent.step(retry)
            parent = nodes[fork - 1] if fork else None
            for turn in retry.turns[fork:]:
                parent = tree.add(parent, turn if diagnosis is None else strip_span(turn, span, note)).id
            self._teach(retry)
            tree.leaf_success[parent] = retry.success
            if retry.error:
                tree.leaf_errors[parent] = retry.error
            if fork:
                tree.nodes[nodes[fork - 1]].branched = True
            tree.metadata["reflection"] = {
                "diagnosis": diagnosis,
                "failure_turn": failure,
                "fork_turn": fork,
                "located_by": source,
                "failed_leaf": node,
                "retry_leaf": parent,
                "reviewer": self.reviewer.name if diagnosis is not None else None,
            }
            return tree
        finally:
            for checkpoint in checkpoints:
                checkpoint.release()
            if retry is not None:
                await retry.aclose()

    def _teach(self, episode: Episode) -> None:
        """The predictor learns every prefix of an episode that ended by itself (as a tree's paths teach it)."""
        if self.predictor is not None and not episode.error:
            for i in range(1, len(episode.turns) + 1):
                self.predictor.update(episode.turns[:i], episode.success)

    async def _diagnose(self, episode: Episode) -> str:
        turns = "\n".join(
            f"Turn {i}: action: {turn.action[:300]}\nresult: {turn.observation[:300]}"
            for i, turn in enumerate(episode.turns, 1)
        )
        grader = json.dumps(episode.turns[-1].info, default=str)[:500]
        message = {
            "role": "user",
            "content": PROMPT.format(task=episode.initial_observation, turns=turns, grader=grader),
        }
        sampling = SamplingParams(max_tokens=self.config.max_tokens, temperature=self.config.temperature)
        if self.reviewer.supports_tokens:
            chat_format = self.reviewer.chat_format
            prompt = chat_format.encode(chat_format.render_prompt([message], None))
            completion = await self.reviewer.generate(prompt, sampling)
        else:
            completion = await self.reviewer.chat([message], None, sampling)
        return completion.text

    def _locate(self, turns: Sequence[Turn], diagnosis: str) -> tuple[int, str]:
        """The failure turn (1-based) and what located it."""
        if self.config.locate == "diagnosis":
            named = parse_failure_turn(diagnosis, len(turns))
            if named is not None:
                return named, "diagnosis"
        elif self.config.locate == "predictor" and self.predictor is not None and self.predictor.ready:
            dropped = largest_drop([self.predictor.predict(turns[:i]) for i in range(len(turns) + 1)])
            if dropped is not None:
                return dropped, "predictor"
        return grader_failure_turn(turns), "grader"
