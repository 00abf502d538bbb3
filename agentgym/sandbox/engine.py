"""The process-wide Docker engine connection, its worker threads, and engine failures turned into sandbox errors."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from agentgym.extras import requires

with requires("sandbox"):
    import docker
    import docker.errors
    import docker.utils
    import requests.exceptions

from agentgym.sandbox.base import SandboxError, SandboxUnavailableError

ENGINE_HINT = (
    "the Docker engine is not reachable ({reason}). Start it with `sudo systemctl start docker` "
    "(or `sudo dockerd &` where there is no systemd), install it with `sudo apt-get install docker.io`, "
    "or point DOCKER_HOST at a running engine"
)
# Each in-flight exec holds one hijacked connection and each call another; 16+ concurrent
# sandboxes would otherwise churn through urllib3's default pool of 10.
MAX_CONNECTIONS = 64
API_TIMEOUT_S = 300
BACKGROUND_WORKERS = 8

log = logging.getLogger(__name__)
_lock = threading.Lock()
_api: docker.APIClient | None = None
_executor: ThreadPoolExecutor | None = None
_pid: int | None = None


def api() -> docker.APIClient:
    """The low-level client (it skips the high-level models' extra inspect calls); one per process."""
    global _api, _executor, _pid
    if _pid != os.getpid():
        with _lock:
            if _pid != os.getpid():  # first use, or a forked child: sockets and threads do not survive fork
                try:
                    _api = docker.APIClient(
                        version="auto",
                        max_pool_size=MAX_CONNECTIONS,
                        timeout=API_TIMEOUT_S,
                        **docker.utils.kwargs_from_env(),
                    )
                except docker.errors.DockerException as exc:
                    raise SandboxUnavailableError(ENGINE_HINT.format(reason=exc)) from exc
                _executor = ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="agentgym-docker")
                _pid = os.getpid()
    return _api


def started() -> bool:
    """Whether this process has talked to the engine (exit cleanup has nothing to do otherwise)."""
    return _pid == os.getpid()


def submit(fn: Callable, *args) -> Future:
    """Run an engine call (a container start, a removal) in the background; every failure is logged, so that one
    whose future nobody reads is not lost."""
    api()
    future = _executor.submit(fn, *args)
    future.add_done_callback(functools.partial(_log_failure, fn))
    return future


def _log_failure(fn: Callable, future: Future) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.warning("background engine call %s failed: %s: %s", getattr(fn, "__name__", fn), type(exc).__name__, exc)


def explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Re-raise engine failures as SandboxError (or SandboxUnavailableError when the engine is gone)."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise SandboxError(f"{what}: {explain(exc)}") from exc
    except requests.exceptions.ConnectionError as exc:
        raise SandboxUnavailableError(ENGINE_HINT.format(reason=exc)) from exc
    except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
        raise SandboxError(f"{what}: {exc}") from exc
