"""Pre-storage skill validation: a candidate skill is admitted only if matched rollouts with it beat rollouts without it.

The two groups are *matched*: the same tasks, the same reset seeds and the same retrieved
context (the bank's retrieval for each task, read-only), the only difference being one extra
skill — the candidate — shown in the prompt of the "with" group. Each (task, seed) gives one
pair of rewards, so the estimate is a paired difference:

* **gain** — the mean of ``reward_with − reward_without`` over the pairs (the candidate's
  context-dependent marginal utility);
* **confidence** — a one-sided lower confidence bound from the paired t statistic,
  ``gain − t_{confidence, n−1} · sd / √n``. Pairing removes the between-task variance (and,
  with a policy that is deterministic given its seed, the sampling noise shared by both arms),
  which is what makes small groups informative.

A candidate is admitted when that lower bound exceeds ``margin``: "the reward gain is above
``margin`` with ``confidence`` one-sided confidence". The gain is stored as the skill's utility
and the whole estimate in the skill's ``data["validation"]``. With binary rewards the t bound is
approximate (the paired differences take values in {−1, 0, 1}); with fewer than two pairs there
is no bound at all and nothing is admitted.

:func:`validate_candidate` runs the two groups through the rollout :class:`~agentgym.rollout.runner.Runner`;
:func:`admit_candidates` validates a list of candidates one by one against the bank as it grows
(so each is judged for what it adds to the skills already admitted) and stores the admitted ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from agentgym.extras import requires
from agentgym.rollout.trajectory import Trajectory

with requires("memory"):
    from scipy import stats

if TYPE_CHECKING:
    from agentgym.core import AgentEnv
    from agentgym.memory.bank import MemoryBank
    from agentgym.memory.induction import SkillDraft
    from agentgym.rollout.agent import Agent
    from agentgym.rollout.runner import EpisodeRequest

__all__ = ["GainEstimate", "admit_candidates", "paired_gain", "validate_candidate"]

METHOD = "paired-t, one-sided lower bound"


@dataclass(frozen=True)
class GainEstimate:
    """The reward gain of "with the candidate" over "without" on matched pairs, with its one-sided lower bound."""

    gain: float
    lower: float
    confidence: float
    n: int
    mean_with: float
    mean_without: float
    sd: float
    method: str = METHOD

    def admits(self, margin: float) -> bool:
        """Whether the gain is above ``margin`` at this estimate's confidence."""
        return self.lower > margin

    def to_dict(self) -> dict:
        data = asdict(self)
        if math.isinf(self.lower):  # JSON has no infinity
            data["lower"] = None
        return data


def paired_gain(
    with_rewards: Sequence[float], without_rewards: Sequence[float], confidence: float = 0.9
) -> GainEstimate:
    """The paired gain of ``with_rewards`` over ``without_rewards`` (pair i = the same task and seed).

    The lower bound is ``mean(d) − t · sd(d) / √n`` with ``t`` the ``confidence`` quantile of
    Student's t with n−1 degrees of freedom; ``-inf`` when n < 2 (no spread can be estimated).
    """
    if len(with_rewards) != len(without_rewards):
        raise ValueError(f"matched groups need equal sizes, got {len(with_rewards)} and {len(without_rewards)}")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    n = len(with_rewards)
    if n == 0:
        raise ValueError("no pairs to compare")
    diffs = [float(a) - float(b) for a, b in zip(with_rewards, without_rewards)]
    gain = math.fsum(diffs) / n
    mean_with = math.fsum(map(float, with_rewards)) / n
    mean_without = math.fsum(map(float, without_rewards)) / n
    if n < 2:
        return GainEstimate(gain, -math.inf, confidence, n, mean_with, mean_without, 0.0)
    sd = math.sqrt(math.fsum((d - gain) ** 2 for d in diffs) / (n - 1))
    lower = gain - float(stats.t.ppf(confidence, n - 1)) * sd / math.sqrt(n)
    return GainEstimate(gain, lower, confidence, n, mean_with, mean_without, sd)


async def validate_candidate(
    candidate: SkillDraft,
    bank: MemoryBank,
    agent: Agent,
    env_factory: Callable[[], AgentEnv],
    requests: Sequence[EpisodeRequest],
    *,
    confidence: float = 0.9,
    concurrency: int = 8,
    **wrapper_options,
) -> GainEstimate:
    """Run ``requests`` twice — retrieval from ``bank`` alone, and the same plus ``candidate`` — and estimate the gain.

    Both groups read the bank without writing (``mode="read"``), so they see the same retrieved
    context; ``requests`` should carry seeds, which both groups reuse, so that pair i is the same
    (task, seed). ``wrapper_options`` go to both groups' :class:`~agentgym.memory.wrapper.MemoryWrapper`.
    Episodes that ended in an env error are left out of the pairs (they say nothing about the skill).
    """
    from agentgym.memory.wrapper import MemoryWrapper
    from agentgym.rollout.runner import Runner, RunnerConfig

    async def rewards(extra: list) -> dict[tuple, float]:
        def factory():
            return MemoryWrapper(env_factory(), bank, mode="read", extra_skills=extra, **wrapper_options)

        runner = Runner(agent, factory, RunnerConfig(concurrency=concurrency, progress=False))
        result = await runner.run(list(requests))
        return {
            (r.task_id, r.metadata.get("seed"), r.metadata.get("repeat")): r.reward
            for r in result.records
            if isinstance(r, Trajectory) and not (r.error or "").startswith("env_error")  # linear runs: trajectories
        }

    without = await rewards([])
    with_candidate = await rewards([candidate])
    keys = [key for key in without if key in with_candidate]
    if not keys:
        raise RuntimeError("no matched pair finished without an env error; the candidate cannot be judged")
    return paired_gain([with_candidate[k] for k in keys], [without[k] for k in keys], confidence)


async def admit_candidates(
    candidates: Sequence[SkillDraft],
    bank: MemoryBank,
    agent: Agent,
    env_factory: Callable[[], AgentEnv],
    requests: Sequence[EpisodeRequest],
    *,
    margin: float = 0.0,
    confidence: float = 0.9,
    concurrency: int = 8,
    **wrapper_options,
) -> list[tuple[SkillDraft, GainEstimate, int | None]]:
    """Validate ``candidates`` in order, each against ``bank`` including those admitted before it; store the admitted.

    Returns ``(candidate, estimate, skill id or None)`` per candidate. An admitted skill's utility
    starts at its gain (:meth:`MemoryBank.add_skill` with the estimate as its validation).
    """
    decisions = []
    for candidate in candidates:
        estimate = await validate_candidate(
            candidate,
            bank,
            agent,
            env_factory,
            requests,
            confidence=confidence,
            concurrency=concurrency,
            **wrapper_options,
        )
        skill_id = bank.add_skill(candidate, validation=estimate.to_dict()) if estimate.admits(margin) else None
        decisions.append((candidate, estimate, skill_id))
    return decisions
