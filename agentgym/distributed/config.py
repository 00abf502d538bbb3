"""RayConfig: the ``ray:`` section of trainer configs (``rollout_backend: ray``) and the settings behind ``agentgym eval --ray``.

In a trainer's YAML config::

    rollout_backend: ray
    ray:
      address: auto            # the cluster `ray start` runs here; or HEAD:6379
      env_workers: 4           # EnvWorker actors, spread over the nodes (null: one per node)
      envs_per_worker: 8       # envs each worker hosts at once
      policy_replicas: 2       # `agentgym serve` replicas sampling the rollouts
      replica_max_batch_size: 16

When the learner's weights reach the replicas is the trainer's own setting: tree GRPO is on-policy
and pushes before every generation; SAO pushes every ``sync_every`` steps, as it syncs its
in-process producer. Unknown keys are an error (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym.sections import from_section

__all__ = ["RayConfig"]


@dataclass(frozen=True)
class RayConfig:
    """Where the cluster is and how much of it a run uses (see the module docstring)."""

    address: str | None = "auto"
    env_workers: int | None = None
    envs_per_worker: int = 8
    policy_replicas: int = 1
    replica_max_batch_size: int = 16

    def __post_init__(self):
        if self.env_workers is not None and self.env_workers < 1:
            raise ValueError(f"ray: env_workers must be at least 1 (or null), got {self.env_workers}")
        for name in ("envs_per_worker", "policy_replicas", "replica_max_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ray: {name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, section: dict[str, Any] | None) -> RayConfig:
        """A config from a YAML ``ray:`` mapping (``None``: the defaults)."""
        if section is None:
            return cls()
        return from_section(cls, section, "ray")
