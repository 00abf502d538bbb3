"""TRACE's allocation of one sampling budget over tasks: pure functions of predicted success rates, and the online per-task rates.

TRACE spends the rollout budget where mixed outcomes are most likely, over prompt roots *and*
intermediate prefixes, with a shared predictor of P(success | prefix). Here the budget of a step
is split across its tasks first (:func:`allocate_budget`), then each task's share is spent on
its tree's prefixes by the ``contrast`` strategy (:mod:`agentgym.rollout.tree`: p(1−p) of the
shared, online :class:`~agentgym.rollout.tree.SuccessPredictor`).

A task's P(success) at its root comes from its own recent outcomes (:class:`TaskOutcomes`:
exponentially forgotten counts, Beta(1, 1)-smoothed), not from the predictor: at a root there are
no turns, and the predictor's features are those of the turns.

**Across tasks.** With ``k ≥ 1`` independent episodes of success rate ``p``, the group has mixed
outcomes (a nonzero gradient for a group baseline) with probability ``1 − p^k − (1−p)^k``; the
``k+1``-th episode adds :func:`mixed_outcome_gain` ``= p^k (1−p) + (1−p)^k p`` to it, which falls
with ``k``. Handing out the budget one episode at a time to the task with the largest gain
(after every task has its ``minimum``) therefore maximises the expected number of groups with
signal. A task the policy always solves or always fails gets little beyond its minimum; an
uncertain one gets more. SAO has one episode per task and no groups: its producer samples tasks
with probability ∝ ``p(1−p) + floor`` (:func:`task_sampling_weights`), the variance of the
outcome a value baseline learns from.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

__all__ = ["TaskOutcomes", "allocate_budget", "mixed_outcome_gain", "task_sampling_weights"]


def mixed_outcome_gain(p: float, k: int) -> float:
    """How much a ``k+1``-th episode raises P(the group's outcomes are mixed), for ``k ≥ 1`` episodes of success rate ``p``."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    return p**k * (1.0 - p) + (1.0 - p) ** k * p


def allocate_budget(
    probabilities: Sequence[float], budget: int, minimum: int = 2, maximum: int | None = None
) -> list[int]:
    """Episodes (or leaves) per task: ``minimum`` each, the rest one by one to the largest :func:`mixed_outcome_gain`.

    Ties go to the earlier task. A task stops at ``maximum``; budget nobody can take is left
    unspent. ``budget`` must cover every task's minimum.
    """
    if minimum < 1:
        raise ValueError(f"minimum must be at least 1, got {minimum}")
    if budget < minimum * len(probabilities):
        raise ValueError(f"a budget of {budget} cannot give {len(probabilities)} tasks {minimum} each")
    counts = [minimum] * len(probabilities)
    heap = [(-mixed_outcome_gain(p, minimum), i) for i, p in enumerate(probabilities)]
    heapq.heapify(heap)
    left = budget - minimum * len(probabilities)
    while left and heap:
        _, i = heapq.heappop(heap)
        if maximum is not None and counts[i] >= maximum:
            continue
        counts[i] += 1
        left -= 1
        heapq.heappush(heap, (-mixed_outcome_gain(probabilities[i], counts[i]), i))
    return counts


def task_sampling_weights(probabilities: Sequence[float], floor: float = 0.05) -> list[float]:
    """SAO's task distribution: ``p(1−p) + floor`` per task, normalised (``floor`` keeps every task in play)."""
    if floor < 0:
        raise ValueError(f"floor must be >= 0, got {floor}")
    raw = [p * (1.0 - p) + floor for p in probabilities]
    total = math.fsum(raw)
    if total == 0:
        return [1.0 / len(raw)] * len(raw)
    return [w / total for w in raw]


class TaskOutcomes:
    """Each task's recent success rate, online: counts forgotten by ``decay`` per new outcome of the task, Beta(1, 1)-smoothed.

    ``decay`` < 1 follows a policy that changes under training (an outcome ``n`` episodes old
    counts ``decay**n``); an unseen task has rate 1/2, the most uncertain.
    """

    def __init__(self, decay: float = 0.8):
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.successes: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def update(self, task_id: str, success: bool) -> None:
        self.successes[task_id] = self.decay * self.successes.get(task_id, 0.0) + float(success)
        self.counts[task_id] = self.decay * self.counts.get(task_id, 0.0) + 1.0

    def rate(self, task_id: str) -> float:
        return (self.successes.get(task_id, 0.0) + 1.0) / (self.counts.get(task_id, 0.0) + 2.0)

    def state(self) -> dict:
        """JSON for a checkpoint."""
        return {"successes": dict(self.successes), "counts": dict(self.counts)}

    def load(self, state: dict) -> None:
        self.successes = dict(state["successes"])
        self.counts = dict(state["counts"])
