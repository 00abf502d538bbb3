"""EnvWorker: a Ray async actor that hosts many envs of any registered id on its node and serves the AgentEnv contract by handle.

A worker is one process on one node. It makes envs with
:func:`~agentgym.registration.make_env_factory`, wrapped by the spec's ``wrap`` if it has one (a trainer's
memory section wraps them as a trainer's own are: the caller, a higher layer, passes ``MemoryConfig.wrap``), on
that node's Docker engine and browser, and keeps them and their snapshots in a table keyed by
handle and snapshot id; :class:`~agentgym.distributed.remote_env.RemoteEnv` is the client side.
Every env method runs in the shared env thread pool (the env's async twins), so slow steps of
many envs overlap while the actor's event loop stays free.

Handles and snapshot ids start at a random offset per process: after a restart (the actor is
created with ``max_restarts=-1``) the new process knows none of the old ones, and a call with an
old one raises :class:`UnknownHandleError` instead of reaching some new env that reused the number.
The new process first reaps what dead owners left on its node (containers, snapshot images,
browser profiles: :func:`agentgym.sandbox.cleanup.gc`), e.g. the containers of the process it replaces.

Snapshots stay in the worker that made them. :meth:`EnvWorker.export_snapshot` turns one into bytes
(through the env's wrappers, see :func:`agentgym.wrappers.export_snapshot`) and
:meth:`EnvWorker.import_snapshot` makes a snapshot of them in another worker, so a fork can move
to where there is room.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import sys
from collections.abc import Callable
from typing import Any

from agentgym.extras import requires

with requires("distributed"):
    import ray

__all__ = ["EnvWorker", "UnknownHandleError"]

logger = logging.getLogger(__name__)


class UnknownHandleError(LookupError):
    """A handle or snapshot id this worker process does not know: closed, released, or made by the process before a restart."""


# (env_id, env_kwargs, wrap): what make_env_factory makes, then wraps. ``wrap`` travels pickled to the worker and
# keys its templates by repr, so it is a callable with a stable repr (a bound method of a dataclass such as MemoryConfig.wrap).
Spec = tuple[str, dict, "Callable[[Callable[[], Any]], Callable[[], Any]] | None"]


class _Hosted:
    """An env this worker hosts and the spec that made it (a fork of it has the same spec)."""

    def __init__(self, env: Any, spec: Spec):
        self.env = env
        self.spec = spec


class _Kept:
    """A snapshot this worker holds, with the env that made (or imported) it: forks of it are made by that env."""

    def __init__(self, snapshot: Any, source: _Hosted):
        self.snapshot = snapshot
        self.source = source


@ray.remote(max_restarts=-1, max_task_retries=0)
class EnvWorker:
    """Hosts envs on one node (see the module docstring); started by :class:`~agentgym.distributed.env_pool.EnvPool`.

    Every method is a coroutine; ``h`` is a handle from :meth:`open` or :meth:`fork`, ``snap_id``
    one from :meth:`snapshot` or :meth:`import_snapshot`. ``capacity`` is informational here (the
    pool places by it); the worker never refuses an env.
    """

    def __init__(self, capacity: int = 8):
        self.capacity = capacity
        self._ids = itertools.count(random.randrange(1, 1 << 40))
        self._envs: dict[int, _Hosted] = {}
        self._snapshots: dict[int, _Kept] = {}
        self._templates: dict[str, _Hosted] = {}  # repr(spec) -> an env kept to import snapshots into
        self._reaped = _reap_dead_owners()

    # ------------------------------------------------------------------ envs
    async def open(self, env_id: str, env_kwargs: dict | None = None, wrap: Any = None) -> dict:
        """Make an env of ``env_id`` here (wrapped by ``wrap``); returns its handle and description (spaces, spec, kind, metadata, render mode)."""
        spec: Spec = (env_id, dict(env_kwargs or {}), wrap)
        env = await asyncio.to_thread(_make, spec)
        return self._host(env, spec)

    async def reset(self, h: int, seed: int | None = None, options: dict | None = None):
        return await self._env(h).areset(seed=seed, options=options)

    async def step(self, h: int, action: Any):
        return await self._env(h).astep(action)

    async def close(self, h: int) -> None:
        """Close the env; an unknown handle is fine (closed already, or lost with a restart)."""
        hosted = self._envs.pop(h, None)
        if hosted is not None:
            await hosted.env.aclose()

    async def call(self, h: int, name: str, *args: Any) -> Any:
        """One of the env's read-only methods (``tasks``, ``task_ids``, ``tools``, ``render``, ``parse``) on its unwrapped env."""
        if name not in _CALLABLE:
            raise ValueError(f"EnvWorker.call runs only {sorted(_CALLABLE)}, not {name!r}")
        env = self._env(h)
        target = env if name == "render" else env.unwrapped
        return await asyncio.to_thread(getattr(target, name), *args)

    # ------------------------------------------------------------------ snapshots and forks
    async def snapshot(self, h: int) -> dict:
        """Snapshot the env; returns ``{"id": snap_id, "metadata": ...}`` (the worker holds the reference until :meth:`release`)."""
        hosted = self._hosted(h)
        snap = await hosted.env.asnapshot()
        return self._keep(snap, hosted)

    async def restore(self, h: int, snap_id: int) -> None:
        await self._env(h).arestore(self._kept(snap_id).snapshot)

    async def fork(self, h: int | None, snap_id: int | None = None) -> dict:
        """A new env at ``snap_id``'s state (forked from the env that made it), or at env ``h``'s current state; like :meth:`open`."""
        if snap_id is None:
            if h is None:
                raise ValueError("fork needs a handle or a snapshot id")
            hosted = self._hosted(h)
            child = await hosted.env.afork()
            return self._host(child, hosted.spec)
        kept = self._kept(snap_id)
        child = await kept.source.env.afork(kept.snapshot)
        return self._host(child, kept.source.spec)

    async def release(self, snap_id: int) -> None:
        """Drop the worker's reference to a snapshot; an unknown id is fine (released already, or lost with a restart)."""
        kept = self._snapshots.pop(snap_id, None)
        if kept is not None:
            await asyncio.to_thread(kept.snapshot.release)

    async def export_snapshot(self, snap_id: int) -> bytes:
        """The snapshot as bytes for :meth:`import_snapshot` on another worker (the env's wrappers' states included)."""
        kept = self._kept(snap_id)
        return await asyncio.to_thread(kept.source.env.export_snapshot, kept.snapshot)

    async def import_snapshot(
        self, h_or_env_id: int | str, data: bytes, env_kwargs: dict | None = None, wrap: Any = None
    ) -> int:
        """A snapshot here from :meth:`export_snapshot`'s bytes; returns its id.

        It is imported into env ``h`` (an int), or into this worker's template env of
        ``(env_id, env_kwargs, wrap)`` (made once, never reset), from which :meth:`fork` then makes envs.
        """
        if isinstance(h_or_env_id, int):
            target = self._hosted(h_or_env_id)
        else:
            target = await self._template((h_or_env_id, dict(env_kwargs or {}), wrap))
        snap = await asyncio.to_thread(target.env.import_snapshot, data)
        return self._keep(snap, target)["id"]

    # ------------------------------------------------------------------ the worker
    async def status(self) -> dict:
        """Where this worker runs and what it holds: node id, pid, envs, capacity, snapshots (and what it reaped at start)."""
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "envs": len(self._envs),
            "capacity": self.capacity,
            "snapshots": len(self._snapshots),
            "reaped": self._reaped,
        }

    async def shutdown(self) -> None:
        """Close every env, release every snapshot and remove what the process made in the engine (before the pool kills it)."""
        for snap_id in list(self._snapshots):
            await self.release(snap_id)
        envs = [hosted.env for hosted in [*self._envs.values(), *self._templates.values()]]
        self._envs.clear()
        self._templates.clear()
        results = await asyncio.gather(*(env.aclose() for env in envs), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                logger.warning("closing an env failed: %s: %s", type(result).__name__, result)
        if "agentgym.sandbox.cleanup" in sys.modules:
            # What this process still has in the engine (warm pool containers): the kill that follows skips atexit.
            await asyncio.to_thread(sys.modules["agentgym.sandbox.cleanup"].cleanup_process)

    # ------------------------------------------------------------------ bookkeeping
    def _host(self, env: Any, spec: Spec) -> dict:
        h = next(self._ids)
        self._envs[h] = _Hosted(env, spec)
        base = env.unwrapped
        return {
            "handle": h,
            "kind": base.kind,
            "spec": env.spec,
            "metadata": dict(env.metadata),
            "render_mode": env.render_mode,
            "observation_space": env.observation_space,
            "action_space": env.action_space,
            "max_turns": getattr(base, "max_turns", None),
        }

    def _keep(self, snap: Any, source: _Hosted) -> dict:
        snap_id = next(self._ids)
        self._snapshots[snap_id] = _Kept(snap, source)
        return {"id": snap_id, "metadata": snap.metadata}

    async def _template(self, spec: Spec) -> _Hosted:
        key = repr(spec)
        if key not in self._templates:
            self._templates[key] = _Hosted(await asyncio.to_thread(_make, spec), spec)
        return self._templates[key]

    def _hosted(self, h: int) -> _Hosted:
        hosted = self._envs.get(h)
        if hosted is None:
            raise UnknownHandleError(f"env worker {os.getpid()} has no env {h} (closed, or made before a restart)")
        return hosted

    def _env(self, h: int) -> Any:
        return self._hosted(h).env

    def _kept(self, snap_id: int) -> _Kept:
        kept = self._snapshots.get(snap_id)
        if kept is None:
            raise UnknownHandleError(
                f"env worker {os.getpid()} has no snapshot {snap_id} (released, or taken before a restart)"
            )
        return kept


# What EnvWorker.call may run: the contract's read-only methods (everything else has a method of its own).
_CALLABLE = frozenset({"tasks", "task_ids", "tools", "render", "parse"})


def _make(spec: Spec) -> Any:
    from agentgym.registration import make_env_factory

    env_id, env_kwargs, wrap = spec
    factory = make_env_factory(env_id, env_kwargs)
    return (factory if wrap is None else wrap(factory))()


def _reap_dead_owners() -> dict:
    """Remove what dead processes left on this node (:func:`agentgym.sandbox.cleanup.gc`); nothing on a node without Docker."""
    try:
        from agentgym.sandbox import cleanup, engine

        engine.api().ping()
    except Exception:  # no sandbox extra or no engine on this node: nothing of ours can be there
        return {"containers": [], "images": []}
    report = cleanup.gc()
    if report["errors"]:
        logger.warning("reaping dead owners' leftovers: %s", "; ".join(report["errors"]))
    return {"containers": report["containers"], "images": report["images"]}
