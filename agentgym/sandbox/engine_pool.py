"""EnginePool: warm game-engine processes (ScienceWorld's JVM) reused across episodes and envs, bounded by a memory budget, stopped at exit.

Starting a JVM costs seconds and ~400 MB; loading a task into a running one costs far less. So
an env takes an engine from its pool when it first needs one (:meth:`EnginePool.acquire`), loads
each episode's task into it, and gives it back when it closes (:meth:`EnginePool.release`),
for the next env to reuse. The pool keeps at most ``AGENTGYM_ENGINE_MEMORY_MB`` (default 2048)
worth of idle engines and stops the rest; engines in use are not counted (each belongs to an
open env, which frees it on close). An engine that died (:meth:`EnginePool.discard`) is stopped
and never handed out again; an idle engine found dead is dropped at the next acquire.

Orphans: the engines are child processes started so that they exit when their parent does,
even when it is SIGKILLed (py4j's ``die_on_exit`` makes the JVM exit when its stdin closes);
:meth:`EnginePool.shutdown` runs at interpreter exit for the ordinary case.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["EnginePool", "memory_budget_mb"]

E = TypeVar("E")

_pools: weakref.WeakSet[EnginePool] = weakref.WeakSet()


def memory_budget_mb() -> int:
    """The memory idle engines may hold, in MB (``AGENTGYM_ENGINE_MEMORY_MB``, default 2048)."""
    return int(os.environ.get("AGENTGYM_ENGINE_MEMORY_MB", "2048"))


class EnginePool(Generic[E]):
    """Idle engines of one kind, started by ``start`` and stopped by ``stop``; ``alive`` tells a dead one (see the module docstring).

    Args:
        start: starts one engine (blocking; a JVM takes about a second).
        stop: stops one engine and waits for its process to end.
        alive: whether an engine's process still runs.
        engine_mb: the memory one engine holds, which sizes the idle set against the budget.
    """

    def __init__(self, start: Callable[[], E], stop: Callable[[E], None], alive: Callable[[E], bool], engine_mb: int):
        self._start, self._stop, self._alive = start, stop, alive
        self.engine_mb = engine_mb
        self._idle: list[E] = []
        self._lock = threading.Lock()
        self.started = 0  # engines this pool started, for tests and measurements
        _pools.add(self)

    @property
    def max_idle(self) -> int:
        return max(0, memory_budget_mb() // self.engine_mb)

    def acquire(self) -> E:
        """An idle engine that is still alive, or a newly started one; the caller owns it until release or discard."""
        while True:
            with self._lock:
                engine = self._idle.pop() if self._idle else None
            if engine is None:
                self.started += 1
                return self._start()
            if self._alive(engine):
                return engine
            self._stop(engine)

    def release(self, engine: E) -> None:
        """Give a working engine back: kept idle within the budget, stopped beyond it."""
        with self._lock:
            keep = len(self._idle) < self.max_idle and self._alive(engine)
            if keep:
                self._idle.append(engine)
        if not keep:
            self._stop(engine)

    def discard(self, engine: E) -> None:
        """Stop an engine that failed (never handed out again)."""
        self._stop(engine)

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[E]:
        """An engine for a ``with`` block: released after it, discarded when the block raised (it may be broken)."""
        engine = self.acquire()
        try:
            yield engine
        except BaseException:
            self.discard(engine)
            raise
        self.release(engine)

    @property
    def idle(self) -> int:
        return len(self._idle)

    def shutdown(self) -> None:
        """Stop every idle engine (engines in use are their envs' to free)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for engine in idle:
            self._stop(engine)


@atexit.register
def _shutdown_all() -> None:
    for pool in list(_pools):
        pool.shutdown()
