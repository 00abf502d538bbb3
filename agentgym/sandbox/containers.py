"""Sandbox containers at the engine level: how one is confined (SandboxConfig), and creating, starting and checking one.

Below both :class:`~agentgym.sandbox.docker.DockerSandbox` (a container with a shell, snapshots
and forks) and :class:`~agentgym.sandbox.pool.WarmPool` (started containers kept ready), so that
neither imports the other's module to reach these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import docker.utils
    import requests.exceptions

from agentgym.sandbox import cleanup, disk, engine, labels
from agentgym.sandbox.base import SandboxError, SandboxUnavailableError

__all__ = [
    "KEEPALIVE_USER",
    "LEASE_SCRIPT",
    "ROOT_KEEPALIVE",
    "SandboxConfig",
    "container_running",
    "containers_that_fit",
    "create_container",
    "lease_step",
    "start_container",
]

# The container's own process (init and the lease watchdog) runs as nobody: neither the agent nor
# root without CAP_KILL may signal it, so nothing inside can stop the container (or renew its lease),
# and stop_processes' kill(-1) as the sandbox user spares it.
KEEPALIVE_USER = "65534:65534"
# A root agent's container (SandboxConfig.root_agent) runs as root, since the engine gives an exec its
# capabilities only where the container's own user is root (its process spec is the container's, with
# the exec's user put in), and a root exec without them cannot even write /home/agent. Its main process
# drops to nobody by these (setpriv needs SETUID and SETGID) and then is the lease watchdog itself, as
# the container's pid 1: no init, since an init (docker-init) would run as root and could forward the
# owner's SIGUSR1 to a nobody watchdog only with CAP_KILL, which the agent would then share. A root
# without CAP_KILL cannot signal a nobody process, and no process in the container can SIGKILL its pid 1.
# bash reaps the orphans it inherits: its `wait` reaps whichever child ended.
ROOT_KEEPALIVE = ("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
# The container's main process (bash, args: lease seconds, sleep step): it ends, and with it the container,
# which the engine then removes (auto_remove), once no SIGUSR1 came for the lease. The owner sends one every
# third of it (agentgym.sandbox.cleanup), so a container outlives a dead or hung owner by one lease at most,
# whether or not an agentgym process ever runs on that engine again. Time is bash's own clock ($SECONDS), not
# a count of sleeps: a sleep that cannot start (the agent filled the process table) does not end it early.
LEASE_SCRIPT = (
    'deadline=$((SECONDS + $1)); trap "deadline=\\$((SECONDS + $1))" USR1; '
    'while ((SECONDS < deadline)); do sleep "$2" & wait $!; done'
)


@dataclass(frozen=True)
class SandboxConfig:
    """How a sandbox container is confined and how commands run in it; the defaults are the hardened ones."""

    user: str = "1000:1000"
    working_dir: str = "/workspace"
    # A fixed hostname keeps forked and replayed sandboxes indistinguishable.
    hostname: str = "sandbox"
    network_mode: str = "none"
    cap_drop: tuple[str, ...] = ("ALL",)
    # Capabilities given back after the drop (none by default): a root agent's (user "0:0"; AgentBench OS),
    # the few its tasks need. It makes the sandbox a root agent's (see ROOT_KEEPALIVE): SETUID and SETGID
    # are required (its keep-alive drops to nobody by them) and KILL is refused (it could stop the keep-alive).
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ("no-new-privileges",)
    pids_limit: int = 256
    mem_limit: str = "1g"
    cpus: float = 1.0
    init: bool = True
    environment: Mapping[str, str] = field(default_factory=dict, hash=False)
    default_timeout: float = 60.0
    kill_grace: float = 2.0
    # How long past timeout + kill_grace the client waits on a silent container before giving up.
    backstop_grace: float = 10.0
    max_output: int = 64 * 1024
    # The most bytes one read_file brings back to the host (its default max_bytes).
    max_read_bytes: int = 16 * 1024 * 1024
    state_file: str = "/home/agent/.agentgym_shell"
    # Whether commands go through a long-lived server in the container (agentgym.sandbox.command_server)
    # rather than one `docker exec` each; off, or where it cannot start, every command is its own exec.
    command_server: bool = True
    # Bytes the sandbox may write (its snapshots' layers included); None: no limit. See agentgym.sandbox.disk.
    disk_limit: int | None = 2 * disk.GiB
    # Seconds the container lives on after its owner process last renewed its lease (see LEASE_SCRIPT).
    lease: int = 300

    def __post_init__(self):
        if not all(part.isdigit() for part in self.user.split(":")):
            raise ValueError(f"user must be numeric 'uid:gid', got {self.user!r}")
        if self.max_output < 1024:
            raise ValueError("max_output must be at least 1024 bytes")
        if self.disk_limit is not None and self.disk_limit < 1024**2:
            raise ValueError("disk_limit must be at least 1 MiB (or None)")
        if not isinstance(self.lease, int) or self.lease < 3:
            raise ValueError(f"lease must be a whole number of seconds, at least 3, got {self.lease!r}")
        if self.cap_add:
            added = {name.upper().removeprefix("CAP_") for name in self.cap_add}
            if self.uid_gid[0] != 0 or not {"SETUID", "SETGID"} <= added or added & {"KILL", "ALL"}:
                raise ValueError(
                    "cap_add is for a root agent: user '0:0', SETUID and SETGID among them (its keep-alive drops "
                    f"to nobody by them), and not KILL or ALL; got user {self.user!r}, cap_add {self.cap_add!r}"
                )

    @property
    def root_agent(self) -> bool:
        """Whether commands run as root with capabilities (``cap_add``): the container then runs as root too."""
        return bool(self.cap_add)

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)

    def host_config(self, *, size_quota: int | None = None, auto_remove: bool = False) -> dict:
        """The engine's host config; ``size_quota``: the bytes of the engine's ``storage_opt size``, where it
        enforces one; ``auto_remove``: the engine removes the container once it stops."""
        limits: dict[str, Any] = {}
        if self.disk_limit is not None:
            limits["ulimits"] = [disk.file_size_ulimit(self.disk_limit)]
            if size_quota is not None:
                limits["storage_opt"] = {"size": str(size_quota)}
        return engine.api().create_host_config(
            network_mode=self.network_mode,
            cap_drop=list(self.cap_drop),
            cap_add=list(self.cap_add) or None,
            security_opt=list(self.security_opt),
            pids_limit=self.pids_limit,
            mem_limit=self.mem_limit,
            memswap_limit=self.mem_limit,
            nano_cpus=int(self.cpus * 1e9),
            init=self.init and not self.root_agent,  # a root agent's keep-alive is pid 1 (ROOT_KEEPALIVE)
            auto_remove=auto_remove,
            **limits,
        )


def create_container(image: str, config: SandboxConfig, kind: str, *, disk_used: int = 0) -> str:
    """Create (not start) a labelled, hardened container that idles until commands are exec'd into it, and ends
    (and goes) by itself when its lease lapses. ``disk_used``: the bytes ``image``'s snapshot layers hold (written
    by the sandbox's ancestors), which an engine quota leaves out of the writable layer's limit."""
    cleanup.ensure_installed()
    client = engine.api()
    try:
        size_quota = None if config.disk_limit is None else disk.size_quota(image, config.disk_limit, disk_used)
        lease = ["/bin/bash", "-c", LEASE_SCRIPT, "agentgym-lease", str(config.lease), str(lease_step(config.lease))]
        container_id = client.create_container(
            image,
            [*ROOT_KEEPALIVE, *lease] if config.root_agent else lease,
            user="0:0" if config.root_agent else KEEPALIVE_USER,
            working_dir=config.working_dir,
            hostname=config.hostname,
            environment=dict(config.environment) or None,
            labels=labels.owner_labels(kind),
            host_config=config.host_config(size_quota=size_quota, auto_remove=True),
        )["Id"]
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailableError(
            f"image {image!r} not found (base images come from `agentgym images build`; "
            "snapshot images are gone once released)"
        ) from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"creating a container from {image!r}: {engine.explain(exc)}") from exc
    cleanup.track_container(container_id, image, lease=config.lease)
    return container_id


def lease_step(lease: int) -> int:
    """Seconds between a lease watchdog's looks at its clock: a lapsed lease ends the container this late at most."""
    return max(1, min(5, lease // 6))


def start_container(container_id: str) -> None:
    with engine.engine_errors("starting the sandbox container"):
        engine.api().start(container_id)


def container_running(container_id: str) -> bool:
    """Whether the engine reports the container running (False when it is gone or the engine does not answer)."""
    try:
        return bool(engine.api().inspect_container(container_id)["State"].get("Running"))
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return False


def containers_that_fit(config: SandboxConfig) -> int | None:
    """How many containers of ``config`` the engine's machine runs at once with each using all that its limits allow
    (the machine's cores over ``cpus``, its memory over ``mem_limit``), at least one; None when the engine does not
    answer. The engine's machine, not this process's: with ``DOCKER_HOST`` they differ."""
    try:
        info = engine.api().info()
    except (docker.errors.DockerException, requests.exceptions.RequestException, SandboxError):
        return None
    cores, memory = info.get("NCPU") or 1, info.get("MemTotal") or 0
    by_memory = memory // docker.utils.parse_bytes(config.mem_limit) if config.mem_limit and memory else cores
    return max(1, min(int(cores // config.cpus), by_memory))
