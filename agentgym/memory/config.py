"""MemoryConfig: the memory section of trainer configs and of ``agentgym eval --memory``, and the env-factory wrapping it implies.

In a trainer's YAML config::

    memory:
      path: runs/keychain/memory.db   # the store (created in learn mode)
      mode: learn                      # or read
      k_skills: 3
      k_episodes: 2
      min_utility: null
      write_forks: false               # tree rollouts: whether every branch writes an episode

Every env the runner makes is then wrapped in a :class:`~agentgym.memory.wrapper.MemoryWrapper`
over one bank per process (the store handles concurrent writers across processes).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.memory.wrapper import MODES

__all__ = ["MemoryConfig"]


@dataclass(frozen=True)
class MemoryConfig:
    """Where the bank is and how envs use it (see the module docstring)."""

    path: str
    mode: str = "learn"
    k_skills: int = 3
    k_episodes: int = 2
    min_utility: float | None = None
    write_forks: bool = False

    def __post_init__(self):
        if not self.path:
            raise ValueError("memory: 'path' (the store file) is required")
        if self.mode not in MODES:
            raise ValueError(f"memory: mode must be one of {MODES}, got {self.mode!r}")
        if self.k_skills < 0 or self.k_episodes < 0:
            raise ValueError("memory: k_skills and k_episodes cannot be negative")
        if self.mode == "read" and not Path(self.path).is_file():
            raise ValueError(
                f"memory: {self.path} does not exist; read mode needs an existing store (learn mode creates one)"
            )

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> MemoryConfig:
        """A config from a YAML ``memory:`` mapping; unknown keys are an error, not silently ignored."""
        if not isinstance(section, dict):
            raise ValueError(f"memory: expected a mapping, got {type(section).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(f"memory: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**section)

    def wrap(self, env_factory: Callable[[], Any]) -> Callable[[], Any]:
        """``env_factory`` whose envs are wrapped in a MemoryWrapper over one shared bank (opened on first use)."""
        from agentgym.memory.bank import MemoryBank
        from agentgym.memory.wrapper import MemoryWrapper

        lock = threading.Lock()  # runners call factories from worker threads
        opened: list[MemoryBank] = []

        def make():
            with lock:
                if not opened:
                    opened.append(MemoryBank(self.path, read_only=self.mode == "read"))
            return MemoryWrapper(
                env_factory(),
                opened[0],
                mode=self.mode,
                k_skills=self.k_skills,
                k_episodes=self.k_episodes,
                min_utility=self.min_utility,
                write_forks=self.write_forks,
            )

        return make
