"""Task catalogs generated from their ids (``"train-12"``, ``"heldout-3"``): disjoint, reproducible splits without data files.

KeyChain and Calculator draw each task from a :class:`random.Random` seeded by its id, so any id of
either split is a valid task, the two splits never share one, and an env lists only the ids it
was asked for (``split``, ``num_tasks``, ``tasks=``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["SPLITS", "GeneratedTasks", "task_ids", "task_rng"]

SPLITS = {"train": 0, "heldout": 1_000_000}  # seed offsets: the splits never share a task


def task_rng(task_id: str) -> random.Random:
    """The generator a task is drawn from; ``task_id`` is ``"<split>-<n>"``."""
    split, _, number = task_id.rpartition("-")
    if split not in SPLITS or not number.isdigit():
        raise ValueError(f"task ids look like 'train-12' or 'heldout-3', got {task_id!r}")
    return random.Random(SPLITS[split] + int(number))


def task_ids(split: str, count: int) -> list[str]:
    return [f"{split}-{i}" for i in range(count)]


class GeneratedTasks(dict):
    """Task id → task, built on first use by ``make_task(task_id)``: any valid id is in it, iteration lists ``listed``."""

    def __init__(self, listed: list[str], make_task: Callable[[str], dict]):
        super().__init__()
        self.listed = listed
        self.make_task = make_task

    def __missing__(self, task_id: str) -> dict:
        self[task_id] = task = self.make_task(task_id)
        return task

    def __contains__(self, task_id: object) -> bool:
        try:
            self[task_id]
        except (ValueError, TypeError):
            return False
        return True

    def __iter__(self):
        return iter(self.listed)

    def __len__(self) -> int:
        return len(self.listed)
