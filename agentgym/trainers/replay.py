"""Success replay (RLEP): verified successes, kept per task with the policy versions that sampled them, mixed back into later batches.

A success is *verified* when the env graded it so (``success``) and no env error touched it. The
buffer holds the newest ``per_task`` of each task; it is filled from every rollout a trainer
makes and, on a resume, from the trajectory store (the records before the checkpoint's
position), so nothing learned is lost with the process. Every turn of a replayed trajectory
still carries the ``policy_version`` that sampled it and its sampling logprobs: the trainers
train it as an off-policy sample with SAO's decoupled objective (the learner's weights as the
proximal policy, each token weighted by ``min(cap, π_proximal / π_behaviour)``).

Where it is mixed in: TreeGRPO (linear groups) adds a task's newest replayed success to a group
whose episodes all failed — a zero-variance group that would otherwise give no gradient, the
plateau of tasks the policy always fails; SAO adds ``replay_per_step`` replayed successes to each
batch.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable

from agentgym.rollout.store import Record
from agentgym.rollout.trajectory import Trajectory

__all__ = ["SuccessReplay", "replay_age", "verified_success"]


def verified_success(trajectory: Trajectory) -> bool:
    """Whether a trajectory may be replayed: graded a success, no env error, at least one turn."""
    return bool(trajectory.success) and trajectory.error is None and bool(trajectory.turns)


class SuccessReplay:
    """The newest ``per_task`` verified successes of each task."""

    def __init__(self, per_task: int = 4):
        if per_task < 1:
            raise ValueError(f"per_task must be at least 1, got {per_task}")
        self.per_task = per_task
        self.buffer: dict[str, deque[Trajectory]] = {}

    def __len__(self) -> int:
        return sum(len(kept) for kept in self.buffer.values())

    def add(self, trajectory: Trajectory) -> bool:
        """Keep ``trajectory`` if it is a verified success; returns whether it was kept."""
        if not verified_success(trajectory):
            return False
        self.buffer.setdefault(trajectory.task_id, deque(maxlen=self.per_task)).append(trajectory)
        return True

    def add_records(self, records: Iterable[Record]) -> None:
        """Every path of ``records`` (trajectories, or trees' root-to-leaf paths)."""
        for record in records:
            for path in [record] if isinstance(record, Trajectory) else record.paths():
                self.add(path)

    def newest(self, task_id: str) -> Trajectory | None:
        kept = self.buffer.get(task_id)
        return kept[-1] if kept else None

    def sample(self, count: int, rng: random.Random) -> list[Trajectory]:
        """``count`` successes (fewer if fewer tasks have one): distinct tasks drawn uniformly, each task's newest."""
        tasks = sorted(task for task, kept in self.buffer.items() if kept)
        return [self.buffer[task][-1] for task in rng.sample(tasks, min(count, len(tasks)))]


def replay_age(trajectory: Trajectory, version: int) -> int:
    """How many policy versions behind ``version`` the trajectory's oldest turn was sampled."""
    return max(0, version - min(turn.policy_version for turn in trajectory.turns))
