"""Connecting to a Ray cluster, and the custom node resources that place env workers where their family can run.

A node that can host Docker sandboxes (the code and GUI envs) advertises ``agentgym_docker``, one
with Chromium ``agentgym_browser``; the number is how many env workers it takes::

    ray start --head --resources='{"agentgym_docker": 4, "agentgym_browser": 4}'
    ray start --address=HEAD:6379 --resources='{"agentgym_docker": 8}'

An env worker for a family that needs a resource asks for one unit of it when some node in the
cluster advertises it, and for nothing otherwise (a plain ``ray start`` cluster still runs
everything, one machine's way). Tool envs need neither.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from pathlib import Path

import gymnasium

from agentgym.extras import requires

__all__ = ["RESOURCES", "ClusterUnavailableError", "connect", "env_resource", "kill_actors", "worker_resources"]

log = logging.getLogger(__name__)

# Env family (the package of its entry point) -> the custom resource its workers need.
RESOURCES = {
    "agentgym.envs.code": "agentgym_docker",
    "agentgym.envs.gui": "agentgym_docker",
    "agentgym.envs.web": "agentgym_browser",
}


class ClusterUnavailableError(RuntimeError):
    """No Ray cluster answers at the address given (or Ray is not installed)."""


def connect(address: str | None = "auto") -> None:
    """Join the cluster at ``address`` (``"auto"``: the one ``ray start`` runs on this machine; ``None``: start a local one).

    Idempotent: a process already connected stays on its cluster.
    """
    with requires("distributed"):
        import ray
    if ray.is_initialized():
        return
    if address == "auto":
        address = _address_on_this_machine()
    if address is not None and address != "local" and not address.startswith("ray://"):
        _probe(address)  # ray.init retries a dead GCS address for minutes before it gives up
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterUnavailableError(f"no Ray cluster at {address!r}: {exc}") from exc


def _address_on_this_machine() -> str:
    """What ``"auto"`` means to Ray: ``$RAY_ADDRESS``, else the cluster ``ray start`` recorded on this machine."""
    if address := os.environ.get("RAY_ADDRESS"):
        return address
    record = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    address = record.read_text().strip() if record.is_file() else ""
    if not address:
        raise ClusterUnavailableError("no Ray cluster on this machine: start one with `ray start --head`")
    return address


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at the cluster's ``HOST:PORT``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnavailableError(f"bad Ray address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterUnavailableError(f"no Ray cluster at {address!r}: {exc.strerror or exc}") from None


def env_resource(env_id: str) -> str | None:
    """The custom resource an env worker for ``env_id`` needs (by its entry point's package), or None."""
    if ":" in env_id and "/" not in env_id.split(":")[0]:
        module = env_id.partition(":")[0]
    else:
        import agentgym  # noqa: F401 - registers the built-in ids

        entry = gymnasium.spec(env_id).entry_point
        module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    return next((res for family, res in RESOURCES.items() if module == family or module.startswith(family + ".")), None)


def worker_resources(env_id: str) -> dict[str, float]:
    """Ray ``resources=`` for one env worker of ``env_id``: a unit of its family's resource where the cluster has it."""
    import ray

    resource = env_resource(env_id)
    if resource is None or ray.cluster_resources().get(resource, 0) <= 0:
        return {}
    return {resource: 1.0}


def kill_actors(actors: list, timeout: float = 30.0) -> None:
    """Kill ``actors`` without restarts and wait (up to ``timeout`` s) until each is dead.

    ``ray.kill`` only asks the cluster to kill: a call queued before the kill lands still runs,
    so an actor can answer for a moment after it. Waiting here means that when a pool or replica
    set says it is closed, its CPUs and custom resources are free for whatever is placed next.
    """
    import ray

    for actor in actors:
        ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout
    pending = {actor.__ray_ready__.remote(): actor for actor in actors}
    while pending and time.monotonic() < deadline:
        answered, _ = ray.wait(list(pending), num_returns=len(pending), timeout=min(1.0, deadline - time.monotonic()))
        for ref in answered:
            actor = pending.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                continue  # dead
            time.sleep(0.05)  # answered from before the kill landed: ask again
            pending[actor.__ray_ready__.remote()] = actor
    if pending:
        log.warning("%d Ray actors not known dead %g s after they were killed", len(pending), timeout)
