"""WarmPool: pre-started sandbox containers per image, so that an environment reset does not wait for a cold start.

The pool deals in containers (:mod:`agentgym.sandbox.containers`);
:meth:`DockerSandbox.create <agentgym.sandbox.docker.DockerSandbox.create>` takes one from it
and wraps it in a sandbox, so this module does not depend on the sandbox's. The sandbox module
registers a preparer (:func:`set_preparer`) that readies each started container before it is
handed out (it starts the container's command server), so that the first command in a pooled
container, a reset's or a fork's, does not pay for that either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable

from agentgym.sandbox import cleanup, engine, labels
from agentgym.sandbox.containers import SandboxConfig, container_running, create_container, start_container
from agentgym.sandbox.images import require_base_image

__all__ = ["WarmPool", "default_pool", "set_preparer"]

DEFAULT_SIZE = 4
# Per-task images (SWE-bench style) would otherwise each keep `size` idle containers forever.
DEFAULT_MAX_IMAGES = 4
_Key = tuple[str, SandboxConfig]
# (container id, image, config) -> what the taker adopts with the container (a started command server).
Preparer = Callable[[str, str, SandboxConfig], object]
_preparer: Preparer | None = None
log = logging.getLogger(__name__)


def set_preparer(prepare: Preparer | None) -> None:
    """How every pool readies a started container before handing it out; its result comes back from
    :meth:`WarmPool.take_prepared` (a preparer that fails leaves the container as it was)."""
    global _preparer
    _preparer = prepare


class WarmPool:
    """Keeps ``size`` started, hardened containers ready for each (image, config) it has been asked for.

    :meth:`take` hands out a ready container at once and a background thread starts a
    replacement; when none is ready the caller starts one cold
    (``DockerSandbox.create(image, pool=pool)`` does both). Only the ``max_images`` most recently
    used (image, config) pairs are kept warm. Idle containers carry the same owner labels as
    every sandbox, so the exit sweep and ``agentgym sandbox gc`` remove them too.
    """

    def __init__(self, size: int = DEFAULT_SIZE, *, max_images: int = DEFAULT_MAX_IMAGES):
        self.size = size
        self.max_images = max_images
        self._ready: OrderedDict[_Key, deque[str]] = OrderedDict()  # least recently used first
        self._starting: Counter = Counter()
        self._failing: set[_Key] = set()  # not refilled (its last start failed) until it is asked for again
        self._prepared: dict[str, object] = {}  # container id -> what the preparer made for it
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        cleanup.on_shutdown(self)

    def take(self, image: str | None = None, config: SandboxConfig | None = None) -> str | None:
        """A started container of ``image`` (default: the base image) that is still running (checked
        now: an idle container may have been killed), or None when none is ready; now the caller's to close."""
        taken = self.take_prepared(image, config)
        return None if taken is None else taken[0]

    def take_prepared(
        self, image: str | None = None, config: SandboxConfig | None = None, *, only_if_kept: bool = False
    ) -> tuple[str, object] | None:
        """Like :meth:`take`, with what the preparer made for the container (None if nothing).

        ``only_if_kept``: None unless the pool already keeps ``image`` warm, rather than start keeping
        it (a fork looking for a warm container must not make the pool fill one for a cold sandbox).
        """
        key = self._key(image, config)
        while True:
            with self._cond:
                if self._closed:
                    raise RuntimeError("the warm pool is shut down")
                if only_if_kept and key not in self._ready:
                    return None
                ready = self._use(key)
                container_id = ready.popleft() if ready else None
                prepared = self._prepared.pop(container_id, None)
                self._wake()
            if container_id is None:
                return None
            if container_running(container_id):
                return container_id, prepared
            engine.submit(cleanup.remove_container, container_id)

    def prewarm(
        self,
        image: str | None = None,
        *,
        config: SandboxConfig | None = None,
        wait: bool = False,
        timeout: float = 120.0,
    ) -> None:
        """Start filling the pool for ``image``; with ``wait``, block until ``size`` containers are ready."""
        key = self._key(image, config)
        with self._cond:
            self._use(key)
            self._wake()
            if wait:
                self._cond.wait_for(lambda: len(self._ready.get(key, ())) >= self.size or self._closed, timeout)

    def available(self, image: str | None = None, *, config: SandboxConfig | None = None) -> int:
        """How many started containers are ready for ``image`` now."""
        with self._cond:
            return len(self._ready.get(self._key(image, config), ()))

    def shutdown(self) -> None:
        """Stop refilling and remove the idle containers (sandboxes already handed out stay)."""
        with self._cond:
            self._closed = True
            idle = [cid for ready in self._ready.values() for cid in ready]
            self._ready.clear()
            self._prepared.clear()
            self._cond.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=60)
        for container_id in idle:
            _remove_quietly(container_id)

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    @staticmethod
    def _key(image: str | None, config: SandboxConfig | None) -> _Key:
        return image or require_base_image(), config or SandboxConfig()

    def _use(self, key: _Key) -> deque[str]:
        """The ready queue for ``key``, now the most recently used; the least recent beyond max_images go."""
        ready = self._ready.setdefault(key, deque())
        self._ready.move_to_end(key)
        self._failing.discard(key)
        while len(self._ready) > self.max_images:
            evicted, idle = self._ready.popitem(last=False)
            self._failing.discard(evicted)
            for container_id in idle:
                self._prepared.pop(container_id, None)
                engine.submit(cleanup.remove_container, container_id)
        return ready

    def _wake(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._refill, daemon=True, name="agentgym-pool")
            self._worker.start()
        self._cond.notify_all()

    def _next_key(self) -> _Key | None:
        for key, ready in self._ready.items():
            if key not in self._failing and len(ready) + self._starting[key] < self.size:
                return key
        return None

    def _refill(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._next_key() is not None)
                if self._closed:
                    return
                key = self._next_key()
                self._starting[key] += 1
            container_id, prepared = self._start(key)
            with self._cond:
                self._starting[key] -= 1
                if container_id is None:
                    # Stop retrying a failing image until it is asked for again. Its ready containers stay: dropping
                    # them here left them running, held by nothing, until the process exited.
                    if key in self._ready:
                        self._failing.add(key)
                elif self._closed:  # at exit the executor takes no more work
                    _remove_quietly(container_id)
                elif key not in self._ready:  # evicted while it started
                    engine.submit(cleanup.remove_container, container_id)
                else:
                    self._ready[key].append(container_id)
                    self._prepared[container_id] = prepared
                self._cond.notify_all()

    @staticmethod
    def _start(key: _Key) -> tuple[str | None, object]:
        container_id = None
        try:
            container_id = create_container(*key, labels.KIND_POOL)
            start_container(container_id)
        except Exception as exc:  # noqa: BLE001 - take() then finds none ready: the cold start reports the error
            log.warning(
                "the warm pool could not start a container of %s (it starts cold until asked again): %s", key[0], exc
            )
            if container_id is not None:
                _remove_quietly(container_id)
            time.sleep(1.0)  # do not spin on an engine that keeps failing
            return None, None
        try:
            return container_id, _preparer(container_id, *key) if _preparer is not None else None
        except Exception:  # noqa: BLE001 - an unprepared container is still a good one: its taker prepares it
            return container_id, None


def _remove_quietly(container_id: str) -> None:
    """Remove a container where a failure must not stop the caller: it is recorded (cleanup.failed_removals), and the
    container's lease ends it."""
    with contextlib.suppress(Exception):
        cleanup.remove_container(container_id)


_default: WarmPool | None = None
_default_pid: int | None = None
_default_lock = threading.Lock()


def default_pool() -> WarmPool:
    """The process-wide pool (size from $AGENTGYM_POOL_SIZE, default 4); a forked child gets its own."""
    global _default, _default_pid
    with _default_lock:
        if _default is None or _default_pid != os.getpid():
            _default = WarmPool(int(os.environ.get("AGENTGYM_POOL_SIZE", DEFAULT_SIZE)))
            _default_pid = os.getpid()
        return _default
