"""MemoryConfig: the memory section of trainer configs and of ``agentgym eval --memory``, and the env-factory wrapping it implies.

In a trainer's YAML config::

    memory:
      path: runs/keychain/memory.db   # the store (created in learn mode)
      mode: learn                      # or read
      k_skills: 3
      k_episodes: 2
      min_utility: null
      write_forks: false               # tree rollouts: whether every branch writes an episode
      shared: false                    # true: the Ray cluster's one bank for this path (below)

Every env the runner makes is then wrapped in a :class:`~agentgym.memory.wrapper.MemoryWrapper`
over one bank per process (the store handles concurrent writers across processes).

``shared: true`` is for runs on a Ray cluster, whose env workers run on several machines: every
env, on any node, is wrapped over a :class:`~agentgym.memory.remote.RemoteBank` to the one
:class:`~agentgym.memory.remote.BankActor` that owns the store at ``path`` on the head node
(created by the first process that asks, found by every other; see :mod:`agentgym.memory.remote`).
The path is then the head node's, so read mode's check that the store exists happens there, when
the bank opens. A process not yet on a cluster joins the one ``ray start`` runs on its machine.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym.memory.bank import MemoryBank
from agentgym.memory.wrapper import MODES
from agentgym.sections import from_section

if TYPE_CHECKING:
    from agentgym.memory.remote import RemoteBank

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
    shared: bool = False

    def __post_init__(self):
        if not self.path:
            raise ValueError("memory: 'path' (the store file) is required")
        if self.mode not in MODES:
            raise ValueError(f"memory: mode must be one of {MODES}, got {self.mode!r}")
        if self.k_skills < 0 or self.k_episodes < 0:
            raise ValueError("memory: k_skills and k_episodes cannot be negative")
        if not isinstance(self.shared, bool):
            raise ValueError(f"memory: shared must be true or false, got {self.shared!r}")
        if self.mode == "read" and not self.shared and not Path(self.path).is_file():
            raise ValueError(
                f"memory: {self.path} does not exist; read mode needs an existing store (learn mode creates one)"
            )

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> MemoryConfig:
        """A config from a YAML ``memory:`` mapping; unknown keys are an error, not silently ignored."""
        return from_section(cls, section, "memory")

    def on_cluster(self) -> MemoryConfig:
        """This section for a run's envs on a Ray cluster: ``shared``, and the path made absolute (the head node opens it)."""
        return dataclasses.replace(self, path=str(Path(self.path).resolve()), shared=True)

    def open_bank(self) -> MemoryBank | RemoteBank:
        """The bank this section names: this process's MemoryBank of the store, or (``shared``) a RemoteBank to the cluster's."""
        if not self.shared:
            return MemoryBank(self.path, read_only=self.mode == "read")
        from agentgym.distributed.cluster import connect
        from agentgym.memory.remote import RemoteBank

        connect("auto")
        return RemoteBank(self.path, read_only=self.mode == "read")

    def wrap(self, env_factory: Callable[[], Any]) -> Callable[[], Any]:
        """``env_factory`` whose envs are wrapped in a MemoryWrapper over one shared bank (opened on first use)."""
        from agentgym.memory.wrapper import MemoryWrapper

        lock = threading.Lock()  # runners call factories from worker threads
        opened: list[MemoryBank | RemoteBank] = []

        def make():
            with lock:
                if not opened:
                    opened.append(self.open_bank())
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
