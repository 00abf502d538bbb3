"""Scale-out on a Ray cluster: env workers on every node, remote envs, policy replicas with weight sync.

One machine stays the embedded default: nothing here is imported (and Ray is not needed) unless a
trainer's ``rollout_backend: ray``, ``agentgym eval --ray`` or user code asks for it. The parts:

* :mod:`~agentgym.distributed.cluster` — connecting to a cluster, and the custom resources that
  say which nodes can host which env families;
* :mod:`~agentgym.distributed.env_worker`, :mod:`~agentgym.distributed.remote_env`,
  :mod:`~agentgym.distributed.env_pool` — Ray actors hosting envs, the client-side env that speaks
  the AgentEnv contract, and the pool that places envs and forks on workers;
* :mod:`~agentgym.distributed.replicas` — ``agentgym serve`` replicas as Ray actors and the
  policy that balances over them and pushes new weights.

The cluster's one memory bank for every worker of a run lives with the memory layer
(:mod:`agentgym.memory.remote`), which builds on this one.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.distributed.cluster import RESOURCES, ClusterUnavailableError, connect
    from agentgym.distributed.env_pool import EnvPool
    from agentgym.distributed.env_worker import EnvWorker
    from agentgym.distributed.remote_env import EnvWorkerLost, RemoteEnv
    from agentgym.distributed.replicas import PolicyReplicas, ReplicaPolicy

_EXPORTS = {
    "ClusterUnavailableError": "cluster",
    "connect": "cluster",
    "RESOURCES": "cluster",
    "EnvWorker": "env_worker",
    "RemoteEnv": "remote_env",
    "EnvWorkerLost": "remote_env",
    "EnvPool": "env_pool",
    "PolicyReplicas": "replicas",
    "ReplicaPolicy": "replicas",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
