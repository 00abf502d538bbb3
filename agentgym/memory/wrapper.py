"""MemoryWrapper: a Gymnasium wrapper that puts retrieved memories and skills into the first observation and writes the episode back.

At :meth:`~MemoryWrapper.reset` the wrapper searches the bank with the task statement (the
first observation's text) and prepends a delimited block (:data:`~agentgym.memory.bank.MEMORY_BEGIN`
… :data:`~agentgym.memory.bank.MEMORY_END`) to that text: past episodes of similar tasks and
skills. Every agent loop builds its first user message from that text, so any policy sees it.
``info["memory"]`` lists the ids retrieved.

At the end of an episode (the first terminated or truncated step), in ``mode="learn"``, it
writes one episodic memory (rule-based summary, :func:`~agentgym.memory.induction.summarize_episode`)
and credits the outcome to the retrieved skills (:meth:`MemoryBank.record_use`). In
``mode="read"`` nothing is written. A failing retrieval or write never fails the reset or the
step: it is logged and reported in ``info["memory_error"]``. The store is safe for several workers (threads or
processes) writing at once, so every env of a runner may wrap the same bank.

**Branching.** The wrapper is a :class:`~agentgym.wrappers.BranchingWrapper`, so tree rollouts
work through it. Its own per-episode context (the task statement, what was retrieved, the steps
so far) is saved with each snapshot:

* ``restore(snapshot)`` puts that context back: the env *is* that episode again, and it writes
  once more when it ends (a second attempt from the same state is a second episode);
* ``fork()`` returns a wrapped child with the same context and bank, but a fork is a *branch*
  of an episode already being recorded by its source: it writes only with ``write_forks=True``.
  The default avoids counting one tree's correlated leaves as independent episodes (and
  over-weighting tree-rollout tasks in the skills' utilities); set it for tree trainers that
  want every leaf in memory.

A snapshot taken from the inner env directly (not through the wrapper) carries no context:
restoring it keeps the wrapper's current context, and a fork from it continues a copy of that
context (as a branch).

Retrieval and writes run in the env's thread (``areset``/``astep`` run the sync methods in the
shared env pool, like :class:`~agentgym.core.AgentEnv`), so SQLite never blocks the event loop.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from agentgym.core import AgentEnv
from agentgym.memory.bank import MemoryBank, Retrieval
from agentgym.memory.induction import EpisodeRecord, SkillDraft, family_of, step_entry
from agentgym.snapshot import Snapshot
from agentgym.wrappers import BranchingWrapper

if TYPE_CHECKING:
    from agentgym.memory.remote import RemoteBank

__all__ = ["MODES", "MemoryWrapper"]

logger = logging.getLogger(__name__)

MODES = ("read", "learn")


@dataclass
class _Context:
    """The wrapper's state for the current episode (copied into snapshots and forks)."""

    task_id: str
    task: str
    retrieval: Retrieval
    steps: list[dict] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    branch: bool = False

    def copy(self) -> _Context:
        clone = copy.copy(self)
        clone.steps = list(self.steps)
        return clone


class MemoryWrapper(BranchingWrapper):
    """Retrieves from ``bank`` into the first observation at reset; in ``"learn"`` mode writes the episode at its end.

    Args:
        env: an :class:`~agentgym.core.AgentEnv`, or a stack of wrappers over one (``gymnasium.make``).
        bank: a :class:`MemoryBank` (shared by every wrapped env), a
            :class:`~agentgym.memory.remote.RemoteBank` (a Ray cluster's), or a store path.
        mode: ``"read"`` (retrieve only) or ``"learn"`` (retrieve, then write episodes and skill usage).
        k_skills: how many skills go into the prompt.
        k_episodes: how many episode memories go into the prompt.
        min_utility: skills below this utility are not retrieved (None: no floor).
        extra_skills: unstored candidate skills shown after the retrieved ones (the "with" arm of
            validation); their use is not recorded.
        write_forks: whether forks write their own episode (see the module docstring).
        family: ``task_id -> family`` (default :func:`~agentgym.memory.induction.family_of`).
    """

    def __init__(
        self,
        env: AgentEnv | gym.Wrapper,
        bank: MemoryBank | RemoteBank | str,
        *,
        mode: str = "learn",
        k_skills: int = 3,
        k_episodes: int = 2,
        min_utility: float | None = None,
        extra_skills: Sequence[SkillDraft] = (),
        write_forks: bool = False,
        family: Callable[[str], str] = family_of,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        super().__init__(env)
        self.bank = MemoryBank(bank, read_only=mode == "read") if isinstance(bank, (str, os.PathLike)) else bank
        self.mode = mode
        self.options: dict[str, Any] = {"k_skills": k_skills, "k_episodes": k_episodes, "min_utility": min_utility}
        self.extra_skills = list(extra_skills)
        self.write_forks = write_forks
        self.family = family
        self._context: _Context | None = None

    # ------------------------------------------------------------------ the Gymnasium face
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        task = observation["text"]
        try:
            retrieval = self.bank.retrieve(task, env=self.kind, **self.options)
        except Exception as exc:  # noqa: BLE001 - an unreadable store costs the memories, not the episode
            logger.warning("memory retrieval for %s failed: %s", info["task_id"], exc)
            retrieval = Retrieval()
            info = {**info, "memory_error": f"{type(exc).__name__}: {exc}"}
        retrieval.extra = list(self.extra_skills)
        self._context = _Context(info["task_id"], task, retrieval)
        info = {
            **info,
            "memory": {
                "skills": retrieval.skill_ids,
                "episodes": [e.id for e in retrieval.episodes],
                "candidates": [d.name for d in retrieval.extra],
            },
        }
        return {**observation, "text": retrieval.render() + task}, info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        context = self._context
        if context is None or context.done:
            return observation, reward, terminated, truncated, info
        context.steps.append(
            step_entry(self.unwrapped.parse(action).calls, observation["text"], cast(float, reward), info.get("error"))
        )
        context.reward += float(reward)
        if terminated or truncated:
            context.done = True
            if self.mode == "learn" and (self.write_forks or not context.branch):
                try:
                    self._write(context, bool(info.get("success")), truncated and not terminated)
                except Exception as exc:  # noqa: BLE001 - memory must never break an episode
                    logger.warning("writing episode %s to memory failed: %s", context.task_id, exc)
                    info = {**info, "memory_error": f"{type(exc).__name__}: {exc}"}
        return observation, reward, terminated, truncated, info

    def _write(self, context: _Context, success: bool, truncated: bool) -> None:
        record = EpisodeRecord(
            env=self.kind,
            task_id=context.task_id,
            task=context.task,
            steps=context.steps,
            reward=context.reward,
            success=success,
            truncated=truncated,
            family=self.family(context.task_id),
            skills=context.retrieval.skill_ids,
        )
        self.bank.add_episode(record)
        self.bank.record_use(record.skills, record)

    # ------------------------------------------------------------------ the AgentEnv surface
    @property
    def unwrapped(self) -> AgentEnv:
        """The AgentEnv at the bottom of the stack (the wrapper requires one)."""
        return cast(AgentEnv, super().unwrapped)

    @property
    def kind(self) -> str:
        return self.unwrapped.kind

    @property
    def task_id(self) -> str | None:
        return self.unwrapped.task_id

    @property
    def turn(self) -> int:
        return self.unwrapped.turn

    def task_ids(self):
        return self.unwrapped.task_ids()

    def tools(self):
        return self.unwrapped.tools()

    def parse(self, action: Any):
        return self.unwrapped.parse(action)

    # ------------------------------------------------------------------ branching (see the module docstring)
    def _branch_state(self) -> _Context | None:
        return None if self._context is None else self._context.copy()

    def _load_branch_state(self, state: _Context | None) -> None:
        self._context = None if state is None else state.copy()

    def fork(self, snapshot: Snapshot | None = None) -> MemoryWrapper:
        child = cast(MemoryWrapper, super().fork(snapshot))  # a fork keeps the stack of wrappers
        if child._context is not None:
            child._context.branch = True
        return child

    def _rebuild(self, env: gym.Env) -> MemoryWrapper:
        # The bank this wrapper opened (not its path again): every fork writes through one connection pool.
        return MemoryWrapper(
            cast("AgentEnv | gym.Wrapper", env),
            self.bank,
            mode=self.mode,
            extra_skills=self.extra_skills,
            write_forks=self.write_forks,
            family=self.family,
            **self.options,
        )
