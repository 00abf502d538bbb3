"""RemoteEnv: the client side of an env hosted by an EnvWorker actor, speaking the AgentEnv contract (sync methods and native async twins).

A RemoteEnv is an :class:`~agentgym.core.AgentEnv` whose state lives in a worker process,
possibly on another node: ``reset``/``step``/... are Ray actor calls (the sync methods wait with
``ray.get``, the async twins ``await`` the reference, so an event loop never blocks), and
observations (``"text"``, an ``"image"`` array) and infos travel through Ray's object store.
``Runner``, ``TreeRollout``, the eval harness and wrappers (the memory wrapper) use it unchanged;
``unwrapped`` is the RemoteEnv itself.

Its snapshots are :class:`~agentgym.snapshot.Snapshot` objects whose payload names the worker and
the snapshot id there; releasing the last reference tells the worker (without waiting). A fork
is placed by the env's :class:`~agentgym.distributed.env_pool.EnvPool` (same worker, else same
node, else another node with the snapshot exported and imported); without a pool it stays on
the worker.

When the worker process or its node dies, every call raises :class:`EnvWorkerLost`; the
``Runner`` treats that as an env failure (it retries the episode on a new env from its factory),
and ``close()`` of such an env returns quietly (its state died with the worker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgym.actions import ParsedAction, ToolSpec
from agentgym.core import AgentEnv
from agentgym.distributed.env_worker import UnknownHandleError
from agentgym.extras import requires
from agentgym.snapshot import Snapshot, SnapshotError
from agentgym.task import Task

with requires("distributed"):
    import ray

if TYPE_CHECKING:
    from agentgym.distributed.env_pool import EnvPool, WorkerSlot

__all__ = ["EnvWorkerLost", "RemoteEnv"]

# Seconds close() waits for the worker: a worker that is restarting may never answer for the old env.
CLOSE_TIMEOUT = 30.0

_LOST = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.NodeDiedError, UnknownHandleError)


class EnvWorkerLost(RuntimeError):
    """The env's worker process (or its node) died, or restarted without the env: the env's state is gone."""


@dataclass(frozen=True)
class RemoteSnapshot:
    """A :class:`Snapshot` payload of a RemoteEnv: which worker holds the snapshot, under which id."""

    slot: WorkerSlot
    snap_id: int


class RemoteEnv(AgentEnv):
    """An env hosted by an :class:`~agentgym.distributed.env_worker.EnvWorker` (see the module docstring).

    Made by :class:`~agentgym.distributed.env_pool.EnvPool` (``pool()``), which passes the
    worker's slot and what :meth:`EnvWorker.open` returned. ``render_mode`` is the worker env's; it
    is a constructor argument only so that the value given is checked against the env's modes.
    """

    def __init__(
        self,
        slot: WorkerSlot,
        opened: dict,
        pool: EnvPool | None = None,
        *,
        render_mode: str | None = None,
    ):
        self.slot = slot
        self.handle: int = opened["handle"]
        self.pool = pool
        self.kind = opened["kind"]
        self.spec = opened["spec"]
        self.metadata = opened["metadata"]
        self.observation_space = opened["observation_space"]
        self.action_space = opened["action_space"]
        self.max_turns = opened["max_turns"]
        self.render_mode = self._checked_render_mode(render_mode or opened["render_mode"])
        self._task_id: str | None = None
        self._turn = 0
        self._task_ids: list[str] | None = None
        self._tasks: list[Task] | None = None
        self._closed = False
        self._lost: str | None = None

    @property
    def worker(self) -> Any:
        """The EnvWorker actor handle."""
        return self.slot.actor

    @property
    def location(self) -> dict[str, Any]:
        """Where the env runs (its worker's node and pid); the agent loop records it in each trajectory's metadata."""
        return {"node": self.slot.node_id, "worker_pid": self.slot.pid}

    # ------------------------------------------------------------------ the Gymnasium face
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self._track(self._wait(self._call("reset", self.handle, seed, options)))

    async def areset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self._track(await self._await(self._call("reset", self.handle, seed, options)))

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        return self._track(self._wait(self._call("step", self.handle, action)))

    async def astep(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        return self._track(await self._await(self._call("step", self.handle, action)))

    def render(self) -> Any:
        return self._wait(self._call("call", self.handle, "render"))

    def close(self) -> None:
        """Close the env on its worker (idempotent; quiet when the worker is gone)."""
        ref = self._closing()
        if ref is not None:
            try:
                ray.get(ref, timeout=CLOSE_TIMEOUT)
            except (*_LOST, ray.exceptions.GetTimeoutError):
                pass

    async def aclose(self) -> None:
        ref = self._closing()
        if ref is not None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(ref.future()), CLOSE_TIMEOUT)
            except (*_LOST, TimeoutError):
                pass

    # ------------------------------------------------------------------ what the env offers
    def task_ids(self) -> Sequence[str]:
        if self._task_ids is None:  # an env's tasks are fixed at construction
            self._task_ids = list(self._wait(self._call("call", self.handle, "task_ids")))
        return self._task_ids

    def tasks(self) -> Sequence[Task]:
        if self._tasks is None:
            self._tasks = list(self._wait(self._call("call", self.handle, "tasks")))
        return self._tasks

    def tools(self) -> list[ToolSpec]:
        return self._wait(self._call("call", self.handle, "tools"))

    def parse(self, action: Any) -> ParsedAction:
        return self._wait(self._call("call", self.handle, "parse", action))

    @property
    def task_id(self) -> str | None:
        return self._task_id

    @property
    def turn(self) -> int:
        return self._turn

    # ------------------------------------------------------------------ branching
    def snapshot(self) -> Snapshot:
        return self._snapshot(self._wait(self._call("snapshot", self.handle)))

    async def asnapshot(self) -> Snapshot:
        return self._snapshot(await self._await(self._call("snapshot", self.handle)))

    def restore(self, snapshot: Snapshot) -> None:
        snap_id, imported = self._here(snapshot)
        try:
            self._wait(self._call("restore", self.handle, snap_id))
        finally:
            self._release_imported(imported)
        self._task_id, self._turn = snapshot.task_id, snapshot.turn

    async def arestore(self, snapshot: Snapshot) -> None:
        snap_id, imported = self._here(snapshot)
        try:
            await self._await(self._call("restore", self.handle, snap_id))
        finally:
            self._release_imported(imported)
        self._task_id, self._turn = snapshot.task_id, snapshot.turn

    def fork(self, snapshot: Snapshot | None = None) -> RemoteEnv:
        """A new env at ``snapshot``'s state (default: this env's current one), placed by the pool (see the module docstring)."""
        target = self._fork_target(snapshot)
        try:
            if target is self.slot and snapshot is None:
                return self._forked(
                    target, self._wait(self._call("fork", self.handle, None)), self._task_id, self._turn
                )
            own = self.snapshot() if snapshot is None else None
            source = own or snapshot
            try:
                opened, imported = self._fork_refs(target, source)
                try:
                    return self._forked(target, self._wait(opened), source.task_id, source.turn)
                finally:
                    if imported is not None:
                        _release_on(target, imported)
            finally:
                if own is not None:
                    own.release()
        except BaseException:
            self._unplace(target)
            raise

    async def afork(self, snapshot: Snapshot | None = None) -> RemoteEnv:
        target = self._fork_target(snapshot)
        try:
            if target is self.slot and snapshot is None:
                opened = await self._await(self._call("fork", self.handle, None))
                return self._forked(target, opened, self._task_id, self._turn)
            own = await self.asnapshot() if snapshot is None else None
            source = own or snapshot
            try:
                opened_ref, imported = self._fork_refs(target, source)
                try:
                    return self._forked(target, await self._await(opened_ref), source.task_id, source.turn)
                finally:
                    if imported is not None:
                        _release_on(target, imported)
            finally:
                if own is not None:
                    own.release()
        except BaseException:
            self._unplace(target)
            raise

    def export_snapshot(self, snapshot: Snapshot) -> bytes:
        """The snapshot's bytes (exported on the worker that holds it)."""
        remote = _remote(snapshot)
        return self._wait(self._call_on(remote.slot, "export_snapshot", remote.snap_id))

    def import_snapshot(self, data: bytes) -> Snapshot:
        """A snapshot on this env's worker from exported bytes (it restores into and forks from this env)."""
        snap_id = self._wait(self._call("import_snapshot", self.handle, data))
        return self._kept_snapshot(self.slot, snap_id)

    # ------------------------------------------------------------------ calls and failures
    def _call(self, method: str, *args: Any) -> Any:
        self._check_usable()
        return self._call_on(self.slot, method, *args)

    def _call_on(self, slot: WorkerSlot, method: str, *args: Any) -> Any:
        return getattr(slot.actor, method).remote(*args)

    def _wait(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except _LOST as exc:
            raise self._worker_lost(exc) from exc

    async def _await(self, ref: Any) -> Any:
        try:
            return await ref
        except _LOST as exc:
            raise self._worker_lost(exc) from exc

    def _worker_lost(self, exc: BaseException) -> EnvWorkerLost:
        """Mark this env lost (and tell the pool which worker died) and say so."""
        if isinstance(exc, ray.exceptions.RayActorError) and self.pool is not None:
            self.pool._mark_lost(getattr(exc, "actor_id", None) or self.slot.actor_id)
        elif self.pool is not None:
            self.pool._mark_lost(self.slot.actor_id)
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self._lost = f"the env worker on node {self.slot.node_id[:8]} (pid {self.slot.pid}) was lost: {type(exc).__name__}: {first_line}"
        return EnvWorkerLost(self._lost)

    def _check_usable(self) -> None:
        self._check_open()
        if self._lost is not None:
            raise EnvWorkerLost(self._lost)

    def _closing(self) -> Any:
        """Mark the env closed, free its place in the pool, and start the worker's close (None: nothing to close)."""
        if self._closed:
            return None
        self._closed = True
        if self.pool is not None:
            self.pool._released(self.slot, self.handle)
        if self._lost is not None:
            return None
        try:
            return self.slot.actor.close.remote(self.handle)
        except Exception:  # noqa: BLE001 - Ray is shut down (interpreter exit): the worker went with it
            return None

    def __del__(self):
        # Best effort and never waiting (a collected env may be on an event loop's thread): free the place, tell the worker.
        try:
            self._closing()
        except Exception:  # noqa: BLE001 - an interpreter shutting down has taken Ray and the pool with it
            pass

    def _track(self, result: tuple) -> Any:
        info = result[-1]
        self._task_id, self._turn = info.get("task_id", self._task_id), info.get("turn", self._turn)
        return result

    # ------------------------------------------------------------------ snapshots and forks
    def _snapshot(self, made: dict) -> Snapshot:
        return self._kept_snapshot(self.slot, made["id"], made["metadata"])

    def _kept_snapshot(self, slot: WorkerSlot, snap_id: int, metadata: dict | None = None) -> Snapshot:
        metadata = dict(metadata or {})
        metadata.pop("id", None)  # the worker's own snapshot object's id; this handle has its own
        return Snapshot(
            kind=self.kind,
            task_id=metadata.get("task_id", self._task_id or ""),
            turn=metadata.get("turn", self._turn),
            payload=RemoteSnapshot(slot, snap_id),
            release=lambda: _release_on(slot, snap_id),
            metadata={**metadata, "worker_node": slot.node_id, "worker_pid": slot.pid},
        )

    def _here(self, snapshot: Snapshot) -> tuple[int, int | None]:
        """``snapshot``'s id on this env's worker: its own, or one imported from its worker (returned second, to release)."""
        remote = _remote(snapshot)
        if snapshot.kind != self.kind:
            self._check_restorable(snapshot)  # raises the contract's mismatch error
        if remote.slot.actor_id == self.slot.actor_id:
            return remote.snap_id, None
        data = self._call_on(remote.slot, "export_snapshot", remote.snap_id)
        imported = self._wait(self._call("import_snapshot", self.handle, data))
        return imported, imported

    def _release_imported(self, snap_id: int | None) -> None:
        if snap_id is not None:
            _release_on(self.slot, snap_id)

    def _fork_target(self, snapshot: Snapshot | None) -> WorkerSlot:
        """The worker a fork goes to, with a place there reserved (the snapshot's worker, else what the pool chooses)."""
        self._check_usable()
        home = self.slot if snapshot is None else _remote(snapshot).slot
        if snapshot is not None and snapshot.kind != self.kind:
            self._check_restorable(snapshot)
        return home if self.pool is None else self.pool._fork_slot(home)

    def _unplace(self, target: WorkerSlot) -> None:
        if self.pool is not None:
            self.pool._released(target, None)

    def _fork_refs(self, target: WorkerSlot, snapshot: Snapshot) -> tuple[Any, Any]:
        """References to :meth:`EnvWorker.fork`'s result on ``target`` and to the snapshot imported there for it (None: none was)."""
        remote = _remote(snapshot)
        if remote.slot.actor_id == target.actor_id:
            return self._call_on(target, "fork", None, remote.snap_id), None
        # The bytes go from the source worker's object store to the target's; this process never holds them.
        data = self._call_on(remote.slot, "export_snapshot", remote.snap_id)
        env_id, env_kwargs, wrap = self.pool.spec if self.pool is not None else (self.kind, None, None)
        imported = self._call_on(target, "import_snapshot", env_id, data, env_kwargs, wrap)
        return self._call_on(target, "fork", None, imported), imported

    def _forked(self, target: WorkerSlot, opened: dict, task_id: str | None, turn: int) -> RemoteEnv:
        if self.pool is not None:
            self.pool._placed(target, opened["handle"])
        child = RemoteEnv(target, opened, self.pool)
        child._task_id, child._turn = task_id, turn
        return child


def _remote(snapshot: Snapshot) -> RemoteSnapshot:
    payload = snapshot.payload  # raises SnapshotReleasedError for a released one
    if not isinstance(payload, RemoteSnapshot):
        raise SnapshotError(
            f"a {snapshot.kind} snapshot of a local env cannot be used by a RemoteEnv: "
            "export it (env.export_snapshot) and import it (remote_env.import_snapshot) instead"
        )
    return payload


def _release_on(slot: WorkerSlot, snap_id: int) -> None:
    """Tell the worker to drop a snapshot, without waiting (this runs in Snapshot.release, maybe on an event loop)."""
    try:
        slot.actor.release.remote(snap_id)
    except Exception:  # noqa: BLE001 - Ray is shut down (interpreter exit): the worker and its snapshots went with it
        pass
