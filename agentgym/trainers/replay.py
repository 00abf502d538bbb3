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
plateau of tasks the policy always fails — and, with ``replay_branches``, also branches from
that success's prefixes: a fresh env is brought to the success's state after ``k`` turns by
re-applying its replies (:meth:`~agentgym.rollout.agent.Agent.replay`, which checks every
answer against the record) and the policy plays on from there, at the turns
:func:`prefix_fork_turns` spreads along the success. A branch is trained only on its own turns
(the prefix is context), in the group, where its outcome gives the baseline variance. SAO
adds ``replay_per_step`` replayed successes to each batch (it has no groups to branch for).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable

from agentgym.rollout.store import Record
from agentgym.rollout.trajectory import Trajectory

__all__ = ["SuccessReplay", "prefix_fork_turns", "replay_age", "verified_success"]


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


def prefix_fork_turns(turns: int, count: int) -> list[int]:
    """Where ``count`` branches fork off a ``turns``-turn success: evenly along it, each after 1 to ``turns − 1`` turns.

    Branch ``j`` (from 0) forks after ``round((j + 1) · turns / (count + 1))`` turns, clipped to that
    range; a one-turn success has no prefix to branch from (no forks).
    """
    if count < 0:
        raise ValueError(f"count cannot be negative, got {count}")
    if turns < 2:
        return []
    return [min(turns - 1, max(1, round((j + 1) * turns / (count + 1)))) for j in range(count)]
