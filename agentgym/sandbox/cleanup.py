"""Lifetime of what this process makes in the Docker engine: tracking, deferred image release, removal at exit
or on SIGTERM/SIGINT, lease renewal, and reaping (``gc``) of what dead processes left behind.

Every sandbox container holds a lease (:data:`~agentgym.sandbox.containers.LEASE_SCRIPT`): it ends, and the
engine removes it, unless this process renews it (a thread sends SIGUSR1 every third of the shortest lease
it holds). So a container outlives an owner that was killed, or hangs, by one lease at most, even where no
agentgym process runs on that engine again. ``gc`` removes the rest: snapshot images, containers from
before leases, and any container whose owner died on this host, at once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from typing import Literal, TypedDict

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import requests.exceptions

from agentgym.sandbox import engine, labels

_lock = threading.RLock()


class _Tracked:
    """Containers and snapshot images this process made, with the users that keep each image alive."""

    def __init__(self):
        self.containers: dict[str, str] = {}  # container id -> image it runs
        self.leases: dict[str, int] = {}  # container id -> its lease in seconds, renewed while it is tracked
        self.images: dict[str, str] = {}  # snapshot image id -> the image it was committed on top of
        self.users: dict[str, int] = {}  # snapshot image id -> our containers and child snapshots using it
        self.released: set[str] = set()
        self.failed: dict[str, str] = {}  # container id -> why its removal was given up on (remove_container)


_tracked = _Tracked()
_tracked_pid = os.getpid()
# Tries per removal (0.5, 1 and 2 s apart) before giving up on what the engine keeps refusing.
REMOVE_TRIES = 4
_shutdown_hooks: weakref.WeakSet = weakref.WeakSet()  # objects with .shutdown(), e.g. warm pools
_cleaning = False


def _state() -> _Tracked:
    """This process's records; a forked child starts empty rather than inheriting (and deleting) its parent's."""
    global _tracked, _tracked_pid
    if _tracked_pid != os.getpid():
        _tracked, _tracked_pid = _Tracked(), os.getpid()
    return _tracked


def track_container(container_id: str, image: str, *, lease: int | None = None) -> None:
    """Track a container this process made (and, with ``lease``, renew its lease until it is removed)."""
    with _lock:
        state = _state()
        state.containers[container_id] = image
        if lease is not None:
            state.leases[container_id] = lease
            _leases_changed.set()
        if image in state.users:
            state.users[image] += 1


def track_snapshot(image_id: str, parent: str) -> None:
    with _lock:
        state = _state()
        state.images[image_id] = parent
        state.users[image_id] = 0
        if parent in state.users:
            state.users[parent] += 1  # the engine refuses to delete an image that has children


def remove_container(container_id: str) -> None:
    """Force-remove a container (gone already is fine) and then free the images it alone kept alive.

    What a busy engine refuses for a while (a kill whose exit event came late, a mount still busy, a timeout) is
    tried again, :data:`REMOVE_TRIES` times in all; then the error is raised and recorded
    (:func:`failed_removals`), the container's lease is no longer renewed (it ends within one lease and the
    engine removes it) and the exit sweep tries once more."""
    for attempt in range(REMOVE_TRIES):
        try:
            engine.api().remove_container(container_id, force=True)
            break
        except docker.errors.NotFound:
            break
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            status = getattr(exc, "status_code", None)  # None for a timeout or a lost connection: tried again
            # A container that stopped is being removed by the engine itself (auto_remove, see the leases).
            if status == 409 and "already in progress" in str(exc):
                break
            if (status is not None and status < 500) or attempt == REMOVE_TRIES - 1:
                _give_up(container_id, exc)
                raise
        time.sleep(0.5 * 2**attempt)
    with _lock:
        image = _state().containers.pop(container_id, None)
        _state().leases.pop(container_id, None)
        _state().failed.pop(container_id, None)
    if image is not None:
        _drop_user(image)


def _give_up(container_id: str, exc: Exception) -> None:
    with _lock:
        _state().leases.pop(container_id, None)
        _state().failed[container_id] = f"{type(exc).__name__}: {exc}"


def failed_removals() -> dict[str, str]:
    """Containers whose removal this process gave up on (id -> the engine's last answer), until one succeeds."""
    with _lock:
        return dict(_state().failed)


def release_image(image_id: str) -> None:
    """Remove a snapshot image now, or as soon as the last container or child snapshot using it is gone."""
    with _lock:
        state = _state()
        if image_id not in state.images:
            return
        state.released.add(image_id)
    _remove_if_unused(image_id)


def _drop_user(image_id: str) -> None:
    with _lock:
        users = _state().users
        if image_id not in users:
            return
        users[image_id] -= 1
    _remove_if_unused(image_id)


def _remove_if_unused(image_id: str) -> None:
    with _lock:
        state = _state()
        if image_id not in state.released or state.users.get(image_id, 1) > 0:
            return
        parent = state.images.pop(image_id)
        state.users.pop(image_id)
        state.released.discard(image_id)
    if _remove_image(image_id):
        _drop_user(parent)
    else:  # still in use by something we do not track; the exit sweep tries again
        with _lock:
            state.images[image_id], state.users[image_id] = parent, 0


def _remove_image(image_id: str) -> bool:
    try:
        # noprune: an untagged parent may be a snapshot someone still holds.
        engine.api().remove_image(image_id, noprune=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError:
        return False
    return True


def on_shutdown(obj) -> None:
    """Call ``obj.shutdown()`` before the exit sweep, so that nothing (a pool refill) makes containers after it."""
    _shutdown_hooks.add(obj)


def cleanup_process() -> None:
    """Remove every container and image this process made: tracked ones, then anything else with its session label."""
    global _cleaning
    with _lock:
        if _cleaning or _tracked_pid != os.getpid() or not engine.started():
            return
        _cleaning = True
    try:
        for obj in list(_shutdown_hooks):
            obj.shutdown()
        state = _state()
        _parallel(remove_container, list(state.containers))
        client = engine.api()
        leftovers = [c["Id"] for c in client.containers(all=True, filters=labels.session_filter())]
        _parallel(remove_container, leftovers)
        images = list(reversed(state.images))  # children before parents
        images += [i["Id"] for i in client.images(filters=labels.session_filter()) if i["Id"] not in state.images]
        for image_id in images:
            _remove_image(image_id)
        state.images.clear()
        state.users.clear()
    except Exception:  # noqa: BLE001 - an exit path must not raise; `agentgym sandbox gc` catches the rest
        pass
    finally:
        _cleaning = False


def _parallel(fn: Callable[[str], None], items: list[str]) -> None:
    """Run engine removals side by side; plain threads, because executors refuse work during interpreter exit."""
    threads = [threading.Thread(target=_quietly, args=(fn, item)) for item in items]
    try:
        for thread in threads:
            thread.start()
    except RuntimeError:  # newer Pythons refuse new threads late in shutdown
        for thread, item in zip(threads, items):
            if thread.ident is None:
                _quietly(fn, item)
    for thread in threads:
        if thread.ident is not None:
            thread.join()


def _quietly(fn: Callable[[str], None], item: str) -> None:
    try:
        fn(item)
    except Exception:  # noqa: BLE001 - one failed removal must not stop the others
        pass


_installed_pid: int | None = None
_signals_installed = False


def ensure_installed() -> None:
    """Arm the exit handlers and reap dead owners' leftovers, once per process (cheap after the first call)."""
    global _installed_pid, _signals_installed
    if _installed_pid != os.getpid():
        with _lock:
            if _installed_pid != os.getpid():
                atexit.register(cleanup_process)
                threading.Thread(target=_reap, daemon=True, name="agentgym-reap").start()
                threading.Thread(target=_renew_leases, daemon=True, name="agentgym-leases").start()
                _installed_pid, _signals_installed = os.getpid(), False
    if not _signals_installed and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            _chain_signal(signum)
        _signals_installed = True


def _reap() -> None:
    try:
        gc()
    except Exception:  # noqa: BLE001 - reaping is a courtesy; `agentgym sandbox gc` reports failures
        pass


_leases_changed = threading.Event()  # set when this process takes a lease: the renewer plans again


def _renew_leases() -> None:
    """Renew each lease this process holds a third of its length after the last renewal (for as long as the
    process lives); a new container's lease is planned at once, whatever the others' are."""
    due: dict[str, float] = {}  # container id -> when its lease is renewed next (monotonic)
    while True:
        _leases_changed.clear()
        with _lock:
            leases = dict(_state().leases)
        now = time.monotonic()
        for container_id, lease in leases.items():
            if container_id in due and due[container_id] > now:
                continue
            if container_id in due:
                try:
                    engine.api().kill(container_id, "SIGUSR1")
                except Exception:  # noqa: BLE001 - stopped, paused for a commit, the engine away: the next one retries
                    pass
            due[container_id] = now + lease / 3
        for container_id in set(due) - set(leases):
            del due[container_id]
        _leases_changed.wait(min(due.values()) - now if due else None)


def _chain_signal(signum: int) -> None:
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None):  # ignored (or set outside Python): the process does not die of it
        return

    def handler(num, frame):
        if previous is signal.default_int_handler:
            # Plain Ctrl-C raises KeyboardInterrupt: a program may catch it and go on using its
            # sandboxes, and if it does not, the interpreter exits and atexit cleans up.
            return previous(num, frame)
        cleanup_process()
        if callable(previous):
            return previous(num, frame)
        if previous == signal.SIG_DFL:
            signal.signal(num, signal.SIG_DFL)
            os.kill(os.getpid(), num)
        return None

    signal.signal(signum, handler)


class GcReport(TypedDict):
    containers: list[str]
    images: list[str]
    browser_dirs: list[str]
    errors: list[str]


def gc(all: bool = False) -> GcReport:  # noqa: A002 - mirrors `agentgym sandbox gc --all`
    """Remove managed containers, snapshot images and browser profile directories whose owner process is dead on this host.

    ``all=True`` removes every managed container and snapshot image, whoever owns it (base
    images are never touched). A browser profile of a live process is always kept: its browser
    is using it.
    """
    report: GcReport = {"containers": [], "images": [], "browser_dirs": [], "errors": []}
    _remove_dead_browser_dirs(report)
    client = engine.api()
    for container in client.containers(all=True, filters=labels.MANAGED_FILTER):
        if all or labels.owner_is_dead(container["Labels"]):
            _collect(report, "containers", container["Id"], lambda cid: client.remove_container(cid, force=True))
    images = client.images(filters=labels.MANAGED_FILTER)
    for image in sorted(images, key=lambda i: i["Created"], reverse=True):  # children before parents
        image_labels = image.get("Labels") or {}
        if image_labels.get(labels.KIND) == labels.KIND_BASE:
            continue
        if all or labels.owner_is_dead(image_labels):
            _collect(report, "images", image["Id"], lambda iid: client.remove_image(iid, noprune=True))
    return report


def _remove_dead_browser_dirs(report: GcReport) -> None:
    root = tempfile.gettempdir()
    for name in sorted(os.listdir(root)):
        if labels.browser_dir_owner_is_dead(name):
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True)
            (report["errors"] if os.path.exists(path) else report["browser_dirs"]).append(path)


def _collect(
    report: GcReport, key: Literal["containers", "images"], item_id: str, remove: Callable[[str], None]
) -> None:
    try:
        remove(item_id)
        report[key].append(item_id)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        report["errors"].append(f"{item_id[:19]}: {engine.explain(exc)}")
