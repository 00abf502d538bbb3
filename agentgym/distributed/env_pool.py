"""EnvPool: EnvWorker actors spread over a cluster's nodes, and the zero-argument env factory that places RemoteEnvs (and their forks) on them.

::

    with EnvPool("agentgym/code.humaneval-v0", workers=4, envs_per_worker=8) as pool:
        runner = Runner(agent, pool)          # pool() -> a RemoteEnv on the least-loaded live worker
        result = await runner.run(tasks)

**Placement.** The workers are spread over the nodes that can host the family (in turn, with a
soft node affinity) and ask for the custom resource it needs
(:func:`~agentgym.distributed.cluster.worker_resources`: one unit of ``agentgym_docker`` per
code-env worker, so a node takes as many as it advertises); ``workers=None`` starts one per such node. Each worker takes ``envs_per_worker`` envs. A new
env goes to the live worker with the fewest envs. A fork stays on its snapshot's worker; when
that one is full it goes to another worker on the same node, and when the node is full to the
least-loaded worker elsewhere, the snapshot travelling as bytes through the object store
(:meth:`EnvWorker.export_snapshot` there, :meth:`EnvWorker.import_snapshot` here). When every
worker is full, ``pool()`` waits (up to ``placement_timeout``) for an env to close, and a fork
goes over capacity on its snapshot's worker (it is made on an event loop, which the closes that
would free a place need).

**Faults.** A worker whose calls fail with :class:`~agentgym.distributed.remote_env.EnvWorkerLost`
(its process or node died) gets no more envs until it answers again: Ray restarts it
(``max_restarts=-1``), and the pool probes it without waiting on each placement. Its envs are
gone (their calls raise EnvWorkerLost, which the ``Runner`` retries on a new env from the pool);
the restarted process reaps the containers its predecessor left on the node.

``close()`` closes every env and kills the actors (a context manager does it on exit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from agentgym.distributed.cluster import connect, kill_actors, worker_resources
from agentgym.distributed.env_worker import EnvWorker
from agentgym.distributed.remote_env import _LOST, RemoteEnv
from agentgym.extras import requires

with requires("distributed"):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = ["EnvPool", "WorkerSlot"]

# Seconds to wait for the workers to start (a code-env worker imports the sandbox stack and reaps its node).
START_TIMEOUT = 120.0
# Seconds close() waits for the workers to close their envs before it kills them.
SHUTDOWN_TIMEOUT = 30.0


@dataclass(eq=False)
class WorkerSlot:
    """One EnvWorker actor as the pool sees it: where it runs, the envs placed there, whether it answers."""

    actor: Any
    actor_id: str
    node_id: str
    pid: int
    handles: set[int] = field(default_factory=set)
    reserved: int = 0  # places promised to forks and opens in flight
    live: bool = True
    probe: Any = None  # a status() call in flight to a lost worker

    @property
    def load(self) -> int:
        return len(self.handles) + self.reserved


class EnvPool:
    """EnvWorker actors for one env id and a factory of RemoteEnvs placed on them (see the module docstring).

    Args:
        env_id: a registered id or a ``module:Class`` entry point (as :func:`~agentgym.registration.make_env_factory` takes).
        env_kwargs: constructor arguments of every env.
        workers: how many EnvWorker actors to start (None: one per node that can host the family).
        envs_per_worker: how many envs one worker hosts at once.
        wrap: applied on each worker to the env factory there (every env is made by what it returns), e.g. a
            memory section's ``MemoryConfig.wrap``; a callable with a stable repr (it keys the workers' templates).
        resources: extra Ray resources each worker asks for (e.g. a custom one that pins them to some nodes).
        placement_timeout: seconds ``pool()`` and forks wait for a place when every live worker is full.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict | None = None,
        *,
        workers: int | None = None,
        envs_per_worker: int = 8,
        wrap: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None,
        resources: dict[str, float] | None = None,
        placement_timeout: float = 60.0,
    ):
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1 (or None: one per node), got {workers}")
        if envs_per_worker < 1:
            raise ValueError(f"envs_per_worker must be at least 1, got {envs_per_worker}")
        connect()
        self.env_id = env_id
        self.spec = (env_id, dict(env_kwargs or {}), wrap)
        self.envs_per_worker = envs_per_worker
        self.placement_timeout = placement_timeout
        needs = {**worker_resources(env_id), **(resources or {})}
        nodes = _hosting_nodes(needs)
        if not nodes:
            raise RuntimeError(f"no node of the cluster has the resources an env worker of {env_id} needs: {needs}")
        actor_class = cast(Any, EnvWorker)  # ray.remote's ActorClass; typed as the plain class
        actors = [
            actor_class.options(scheduling_strategy=_spread(nodes, i), resources=needs).remote(envs_per_worker)
            for i in range(workers or len(nodes))
        ]
        self._lock = threading.Condition()
        self._closed = False
        try:
            statuses = ray.get([actor.status.remote() for actor in actors], timeout=START_TIMEOUT)
        except BaseException:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            raise
        self.slots = [
            WorkerSlot(actor, actor._actor_id.hex(), status["node_id"], status["pid"])
            for actor, status in zip(actors, statuses)
        ]

    # ------------------------------------------------------------------ the factory
    def __call__(self) -> RemoteEnv:
        """A new RemoteEnv on the least-loaded live worker (waits for a place when all are full)."""
        env_id, env_kwargs, wrap = self.spec
        while True:
            slot = self._reserve(lambda free: min(free, key=lambda s: s.load))
            try:
                opened = ray.get(slot.actor.open.remote(env_id, env_kwargs, wrap))
            except _LOST:
                self._released(slot, None)
                self._mark_lost(slot.actor_id)
                continue  # another worker takes it
            except BaseException:
                self._released(slot, None)
                raise
            self._placed(slot, opened["handle"])
            return RemoteEnv(slot, opened, self)

    def status(self) -> list[dict]:
        """Each worker's node, pid, live flag and the envs placed on it (from this pool's books, no call)."""
        with self._lock:
            return [
                {
                    "node_id": s.node_id,
                    "pid": s.pid,
                    "live": s.live,
                    "envs": len(s.handles),
                    "capacity": self.envs_per_worker,
                }
                for s in self.slots
            ]

    def close(self) -> None:
        """Close every env on every worker and kill the actors (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        # A worker Ray is still restarting (its node gone) may never answer: its envs died with it anyway.
        shutdowns = [slot.actor.shutdown.remote() for slot in self.slots]
        ray.wait(shutdowns, num_returns=len(shutdowns), timeout=SHUTDOWN_TIMEOUT)
        kill_actors([slot.actor for slot in self.slots], timeout=SHUTDOWN_TIMEOUT)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ placement (called by RemoteEnv)
    def _fork_slot(self, home: WorkerSlot) -> WorkerSlot:
        """Where a fork of a snapshot on ``home`` goes (a place reserved): home, else its node, else elsewhere."""

        def choose(free: list[WorkerSlot]) -> WorkerSlot:
            if home in free:
                return home
            same_node = [s for s in free if s.node_id == home.node_id]
            return min(same_node or free, key=lambda s: s.load)

        # A fork never waits: it is made on an event loop, which the closes that would free a place need.
        return self._reserve(choose, overflow=home)

    def _reserve(self, choose, overflow: WorkerSlot | None = None) -> WorkerSlot:
        """A live worker with a place (chosen among the free ones), reserved; when all are full, ``overflow``
        (if live, else the least-loaded live worker) goes over capacity, or without ``overflow`` this waits."""
        deadline = time.monotonic() + self.placement_timeout
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError("this EnvPool is closed")
                self._probe_lost()
                free = [s for s in self.slots if s.live and s.load < self.envs_per_worker]
                if free:
                    slot = choose(free)
                    slot.reserved += 1
                    return slot
                live = [s for s in self.slots if s.live]
                if overflow is not None and live:
                    slot = overflow if overflow.live else min(live, key=lambda s: s.load)
                    slot.reserved += 1
                    return slot
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no place for an env of {self.env_id} within {self.placement_timeout:g}s: {len(live)} of "
                        f"{len(self.slots)} workers live, each full at {self.envs_per_worker} envs "
                        "(close envs, or start the pool with more workers or envs_per_worker)"
                    )
                self._lock.wait(min(left, 0.5))  # woken by a close; the timeout also re-probes lost workers

    def _placed(self, slot: WorkerSlot, handle: int) -> None:
        with self._lock:
            slot.reserved -= 1
            slot.handles.add(handle)

    def _released(self, slot: WorkerSlot, handle: int | None) -> None:
        """An env closed (``handle``) or a reservation given up (None): the place is free again."""
        with self._lock:
            if handle is None:
                slot.reserved = max(0, slot.reserved - 1)
            else:
                slot.handles.discard(handle)
            self._lock.notify_all()

    def _mark_lost(self, actor_id: str | None) -> None:
        with self._lock:
            for slot in self.slots:
                if slot.actor_id == actor_id and slot.live:
                    slot.live, slot.probe = False, None

    def _probe_lost(self) -> None:
        """Give lost workers that answer again (restarted by Ray) back to placement; never waits (lock held)."""
        for slot in self.slots:
            if slot.live:
                continue
            if slot.probe is None:
                slot.probe = slot.actor.status.remote()
                continue
            ready, _ = ray.wait([slot.probe], timeout=0)
            if not ready:
                continue
            probe, slot.probe = slot.probe, None
            try:
                status = ray.get(probe)
            except _LOST:
                continue  # still restarting (or gone for good): probe again next time
            if status["pid"] != slot.pid:  # a new process: the old one's envs died with it
                slot.handles.clear()
            slot.node_id, slot.pid, slot.live = status["node_id"], status["pid"], True


def _hosting_nodes(needs: dict[str, float]) -> list[str]:
    """The ids of the alive nodes that have every resource in ``needs`` (all alive nodes when it is empty)."""
    return sorted(
        node["NodeID"]
        for node in ray.nodes()
        if node["Alive"] and all(node["Resources"].get(name, 0) >= amount for name, amount in needs.items())
    )


def _spread(nodes: list[str], index: int) -> NodeAffinitySchedulingStrategy:
    """Worker ``index``'s node, taking the hosting nodes in turn.

    Ray's ``"SPREAD"`` strategy is best effort: on a two-node cluster it put three of four workers
    on one node. A soft affinity puts them in turn and still lets Ray choose when that node is
    full, and when Ray restarts the worker after its node died.
    """
    return NodeAffinitySchedulingStrategy(nodes[index % len(nodes)], soft=True)
