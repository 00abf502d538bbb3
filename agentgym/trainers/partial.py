"""APRIL's partial rollouts for group training: over-provision a step's groups, stop once enough groups are finished, carry the rest over.

APRIL over-provisions rollout requests, stops a step as soon as its target is finished and
resumes the unfinished episodes in the next step, so a step never waits on its long tail. With
a group baseline the unit of training is a *group* (one task's episodes): a step runs its own
tasks' groups plus extra ones (``partial_over_provision`` × the step's tasks, fewer while groups
carried over from earlier steps are still open, so the work in flight stays bounded) and the
episodes carried over, and stops once as many groups as the step has tasks are complete. The
runner (:meth:`~agentgym.rollout.runner.Runner.run` with ``target=``, then
:meth:`~agentgym.rollout.runner.Runner.resume`) pauses every other episode at a turn boundary;
:class:`PartialGroups` keeps them and the finished members of incomplete groups for the next
step. Every turn keeps the ``policy_version`` that sampled it, so a resumed episode's earlier
turns and a group finished a step late are visibly off-policy; the trainer weights their tokens
as SAO's decoupled objective does.

The pure part: :func:`extra_groups` (how many groups to add) and :func:`episodes_to_complete`
(the fewest further finished episodes that could complete the groups still needed — the
runner's ``target``, so a step stops as soon as it can and not later).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentgym.rollout.runner import EpisodeRequest, PendingEpisode
from agentgym.rollout.store import Record

__all__ = ["PartialGroups", "episodes_to_complete", "extra_groups"]


def extra_groups(tasks: int, over_provision: float, open_groups: int) -> int:
    """Groups to add to a step of ``tasks`` tasks: ``ceil(tasks × over_provision)`` less the ``open_groups`` carried over."""
    if tasks < 0 or over_provision < 0 or open_groups < 0:
        raise ValueError("tasks, over_provision and open_groups cannot be negative")
    return max(0, math.ceil(tasks * over_provision - 1e-9) - open_groups)


def episodes_to_complete(remaining: Sequence[int], needed: int) -> int:
    """The fewest further finished episodes that could complete ``needed`` more groups, each needing ``remaining[i]`` (≥ 1).

    The ``needed`` groups closest to complete finish first at best; with fewer open groups than
    ``needed``, all of them.
    """
    if needed < 1:
        raise ValueError(f"needed must be at least 1, got {needed}")
    if any(r < 1 for r in remaining):
        raise ValueError(f"every open group needs at least one episode, got {list(remaining)}")
    return sum(sorted(remaining)[:needed])


class PartialGroups:
    """The groups in flight across steps: how many episodes each expects, its finished records, the paused episodes."""

    def __init__(self):
        self.expected: dict[str, int] = {}
        self.finished: dict[str, list[Record]] = {}
        self.pending: list[PendingEpisode] = []

    def open(self, requests: Sequence[EpisodeRequest]) -> list[PendingEpisode]:
        """Register new groups' requests; returns what a runner call works on: the carried episodes first, then these."""
        for request in requests:
            if request.group is None:
                raise ValueError("partial rollouts need every request in a group")
            self.expected[request.group] = self.expected.get(request.group, 0) + 1
        return self.pending + [PendingEpisode(r) for r in requests]

    def add(self, records: Sequence[Record], pending: Sequence[PendingEpisode]) -> None:
        """Take a runner call's finished records and what it left unfinished."""
        for record in records:
            self.finished.setdefault(record.metadata["group"], []).append(record)
        self.pending = list(pending)

    def complete(self) -> list[str]:
        """The groups whose every episode has finished, oldest first."""
        return [g for g, n in self.expected.items() if len(self.finished.get(g, ())) >= n]

    def remaining(self) -> list[int]:
        """For each open group, its episodes not finished yet."""
        return [
            n - len(self.finished.get(g, ())) for g, n in self.expected.items() if len(self.finished.get(g, ())) < n
        ]

    def take(self, groups: Sequence[str]) -> list[Record]:
        """Remove complete ``groups`` and return their records (group after group)."""
        records = []
        for group in groups:
            del self.expected[group]
            records += self.finished.pop(group, [])
        return records
