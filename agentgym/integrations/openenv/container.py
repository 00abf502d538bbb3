"""OpenEnv servers started from a local Docker image, for ``OpenEnvEnv(image=...)``: a hardened container without a network, reached through a port forward.

:func:`acquire` starts the image's server (its own command, or ``command=``) in a container with
the sandbox's confinement (:class:`~agentgym.sandbox.containers.SandboxConfig`: no network, all
capabilities dropped, no-new-privileges, process, memory, CPU and disk limits) and agentgym's
owner labels, so that this process removes it at exit and ``agentgym sandbox gc`` reaps it after
a crash. Like every sandbox it holds a lease (``SandboxConfig.lease``): its main process is a
watchdog that runs the server and ends the container, which the engine then removes, once this
process has not renewed the lease for that long, so a killed or hung owner leaves nothing behind
even where no agentgym process ever runs again. It waits until the server listens on ``port`` inside the container, then forwards a
host loopback port to it (:class:`~agentgym.sandbox.port_forward.PortForward`: one ``docker
exec`` relay per connection, since a container without a network has no address and no
published port). The env talks to ``http://127.0.0.1:<forwarded port>`` as to any server.

Envs of one process that ask for the same image and options share one container, as envs given
one ``url=`` share a server (a fork opens a new session, i.e. a new connection, on its parent's
container): the server must allow as many concurrent sessions as there are envs (OpenEnv's
``create_app`` allows one unless given ``max_concurrent_envs``); ``shared=False`` starts a
container of the caller's own instead. The last
:meth:`OpenEnvContainer.release` removes the container, also when the server inside has died.

What the image needs: ``python3`` on its PATH (the relay and the watchdog run it; OpenEnv servers are Python), a
server listening on ``port`` (default 8000, OpenEnv's convention) on the container's loopback or
all addresses, and nothing from a network. Images are never pulled: one that is not in the local
engine is an error. ``volumes`` (host path -> container path, mounted read-only) and
``environment`` are for images that need files from the host, e.g. a host virtualenv's
site-packages on ``PYTHONPATH`` where the image cannot install its packages.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import docker.types
    import requests.exceptions

from agentgym.integrations.openenv.client_env import OpenEnvError
from agentgym.sandbox import cleanup, engine, labels
from agentgym.sandbox.base import SandboxUnavailableError
from agentgym.sandbox.containers import SandboxConfig, container_running, lease_step
from agentgym.sandbox.port_forward import PortForward

__all__ = ["DEFAULT_PORT", "KIND", "OpenEnvContainer", "ServerError", "ServerSpec", "acquire"]

#: The port OpenEnv's images serve on.
DEFAULT_PORT = 8000
#: The owner-label kind of a server container.
KIND = "openenv-server"
DEFAULT_START_TIMEOUT_S = 120.0
# Where the lease watchdog writes the server's exit status once the server has exited.
_EXIT_FILE = "/tmp/.agentgym-server-exit"
# The container's main process (python3, args: lease seconds, sleep step, exit file, the server's argv...): it
# runs the server as its child and ends, and with it the container, which the engine then removes
# (auto_remove), once no SIGUSR1 came for the lease; the owner renews it as it renews a sandbox's
# (agentgym.sandbox.containers.LEASE_SCRIPT, agentgym.sandbox.cleanup), so nothing outlives a dead owner by
# more than a lease. A server that exits leaves its status in the exit file and the container running (until
# its owner removes it, or the lease lapses), so that its status and last log lines can still be reported.
_WATCHDOG = """\
import os, signal, subprocess, sys, threading, time
lease, step, exit_file = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
renewed = time.monotonic()
def renew(signum, frame):
    global renewed
    renewed = time.monotonic()
signal.signal(signal.SIGUSR1, renew)
server = subprocess.Popen(sys.argv[4:])
def record():
    code = server.wait()
    code = 128 - code if code < 0 else code
    try:
        with open(exit_file + ".part", "w") as file:
            file.write(str(code))
        os.replace(exit_file + ".part", exit_file)
    except OSError:  # nowhere to leave it: the container ends (and goes) with the server
        os._exit(code)
threading.Thread(target=record, daemon=True).start()
while time.monotonic() - renewed < lease:
    time.sleep(step)
server.kill()
"""
# Runs in the container (the relay's interpreter): wait until something accepts on the port; exit 0 once it
# does, 3 at the deadline, 4 once the server has exited. One exec for the whole wait.
_PROBE = """\
import os, socket, sys, time
port, deadline, exit_file = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), sys.argv[3]
while time.monotonic() < deadline:
    if os.path.exists(exit_file):
        sys.exit(4)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(3)
"""
# Runs in the container: print the server's exit status and exit 0, or exit 1 while the server runs.
_EXIT_STATUS = "import sys\ntry:\n    print(open(sys.argv[1]).read())\nexcept OSError:\n    sys.exit(1)\n"
_LOG_LINES = 8


class ServerError(OpenEnvError):
    """The server's container cannot be used: the image is missing, the server did not start, or it died."""


@dataclass(frozen=True)
class ServerSpec:
    """What a server container is made of; envs with equal specs share one container."""

    image: str
    port: int = DEFAULT_PORT
    command: tuple[str, ...] | None = None
    environment: tuple[tuple[str, str], ...] = ()
    volumes: tuple[tuple[str, str], ...] = ()  # (host path, container path), mounted read-only
    config: SandboxConfig = SandboxConfig()

    @classmethod
    def of(
        cls,
        image: str,
        *,
        port: int | None = None,
        command: str | Sequence[str] | None = None,
        environment: Mapping[str, str] | None = None,
        volumes: Mapping[str, str] | None = None,
        config: SandboxConfig | None = None,
    ) -> ServerSpec:
        """A checked spec; ValueError names what is wrong (a relative or missing host path, a networked config)."""
        if not isinstance(image, str) or not image.strip():
            raise ValueError(f"image= must name a local Docker image, got {image!r}")
        port = DEFAULT_PORT if port is None else port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be a TCP port number, got {port!r}")
        config = config or SandboxConfig()
        if config.network_mode != "none":
            raise ValueError(
                "an OpenEnv server container runs without a network; its config must keep network_mode='none'"
            )
        mounts = []
        for host, target in (volumes or {}).items():
            host_path = os.fspath(host)
            if not os.path.isabs(host_path) or not os.path.exists(host_path):
                raise ValueError(f"volumes: the host path {host_path!r} must be an absolute path that exists")
            if not isinstance(target, str) or not target.startswith("/"):
                raise ValueError(f"volumes: the container path for {host_path!r} must be absolute, got {target!r}")
            mounts.append((host_path, target))
        return cls(
            image=image,
            port=port,
            command=(command,) if isinstance(command, str) else tuple(command) if command is not None else None,
            environment=tuple(sorted((str(k), str(v)) for k, v in (environment or {}).items())),
            volumes=tuple(sorted(mounts)),
            config=config,
        )

    def describe(self) -> str:
        return f"image {self.image!r}"


class OpenEnvContainer:
    """A running server container and its port forward; see the module docstring. Get one with :func:`acquire`."""

    def __init__(self, spec: ServerSpec, container_id: str, forward: PortForward):
        self.spec = spec
        self.container_id = container_id
        self.forward = forward
        self._users = 1
        self._closed = False

    @property
    def url(self) -> str:
        """The server's base URL on this host (the forwarded loopback port)."""
        return self.forward.url

    @classmethod
    def start(cls, spec: ServerSpec, *, timeout: float = DEFAULT_START_TIMEOUT_S) -> OpenEnvContainer:
        """Start ``spec``'s server and wait until it listens (:class:`ServerError` when it does not); the caller owns it."""
        client = engine.api()
        try:
            client.inspect_image(spec.image)
        except docker.errors.ImageNotFound:
            raise ServerError(
                f"the image {spec.image!r} is not in the local Docker engine and agentgym does not pull images: "
                "build or load it first"
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise SandboxUnavailableError(engine.ENGINE_HINT.format(reason=exc)) from exc
        container_id = _create(spec)
        try:
            with engine.engine_errors(f"starting the OpenEnv server container of {spec.describe()}"):
                client.start(container_id)
            _wait_until_listening(spec, container_id, timeout)
            forward = PortForward(container_id, spec.port)
        except BaseException:
            cleanup.remove_container(container_id)
            raise
        return cls(spec, container_id, forward)

    def running(self) -> bool:
        """Whether the server still runs (False once it exited, its container is gone, or the engine does not answer)."""
        return container_running(self.container_id) and _exit_status(self.container_id) is None

    def failure(self) -> str | None:
        """Why the server is gone, for error messages (its exit status and last log lines); None while it runs."""
        if self._closed:
            return f"the OpenEnv server container of {self.spec.describe()} was removed"
        if self.running():
            return None
        return _exit_report(self.spec, self.container_id)

    def release(self) -> None:
        """Drop one user; the last one stops the forward and removes the container (idempotent once closed)."""
        with _lock:
            self._users -= 1
            last = self._users <= 0 and not self._closed
            if last:
                self._closed = True
                if _shared.get(self.spec) is self:
                    del _shared[self.spec]
        if last:
            self.forward.close()
            cleanup.remove_container(self.container_id)


_lock = threading.Lock()
_shared: dict[ServerSpec, OpenEnvContainer] = {}
_shared_pid = os.getpid()


def acquire(spec: ServerSpec, *, timeout: float = DEFAULT_START_TIMEOUT_S, shared: bool = True) -> OpenEnvContainer:
    """This process's running container for ``spec`` (one more user), started if there is none; release it when done.

    ``shared=False``: a new container of the caller's own, whatever runs already.
    """
    global _shared, _shared_pid
    if not shared:
        return OpenEnvContainer.start(spec, timeout=timeout)
    with _lock:  # held through a start: envs made at once share the one container rather than start one each
        if _shared_pid != os.getpid():  # a forked child owns neither its parent's containers nor their threads
            _shared, _shared_pid = {}, os.getpid()
        server = _shared.get(spec)
        if server is not None and server.running():
            server._users += 1
            return server
        _shared.pop(spec, None)  # a dead one stays with its users, who release it
        server = OpenEnvContainer.start(spec, timeout=timeout)
        _shared[spec] = server
        return server


def _create(spec: ServerSpec) -> str:
    cleanup.ensure_installed()
    client = engine.api()
    config = spec.config
    host_config = config.host_config(auto_remove=True)
    if spec.volumes:
        host_config["Mounts"] = [
            docker.types.Mount(target, host, type="bind", read_only=True) for host, target in spec.volumes
        ]
    image = client.inspect_image(spec.image)["Config"] or {}
    # The server's argv as the engine would run it (the image's entrypoint, then command= or its CMD), run
    # by the lease watchdog, which becomes the container's entrypoint.
    argv = [*(image.get("Entrypoint") or []), *(spec.command if spec.command is not None else image.get("Cmd") or [])]
    if not argv:
        raise ServerError(f"the image {spec.image!r} names no command to run its server: pass command=")
    watchdog = ["python3", "-I", "-S", "-c", _WATCHDOG, str(config.lease), str(lease_step(config.lease)), _EXIT_FILE]
    with engine.engine_errors(f"creating the OpenEnv server container of {spec.describe()}"):
        container_id = client.create_container(
            spec.image,
            argv,
            entrypoint=watchdog,
            hostname=config.hostname,
            environment={**config.environment, **dict(spec.environment)} or None,
            labels=labels.owner_labels(KIND),
            host_config=host_config,
        )["Id"]
    cleanup.track_container(container_id, spec.image, lease=config.lease)
    return container_id


def _wait_until_listening(spec: ServerSpec, container_id: str, timeout: float) -> None:
    client = engine.api()
    try:
        exec_id = client.exec_create(
            container_id, ["python3", "-I", "-S", "-c", _PROBE, str(spec.port), str(timeout), _EXIT_FILE]
        )["Id"]
        output = client.exec_start(exec_id)
        code = client.exec_inspect(exec_id).get("ExitCode")
    except docker.errors.APIError as exc:  # the container exited before (or while) the probe started
        code, output = None, engine.explain(exc).encode()
    if code == 0:
        return
    if code == 4 or not container_running(container_id):
        raise ServerError(_exit_report(spec, container_id))
    if code == 3:
        raise ServerError(
            f"the OpenEnv server of {spec.describe()} did not listen on port {spec.port} inside its container "
            f"within {timeout:g} s{_logs(container_id)}"
        )
    raise ServerError(
        f"cannot reach the OpenEnv server of {spec.describe()} inside its container: the image needs python3 on its "
        f"PATH for the port forward ({output.decode(errors='replace').strip()[-300:] or f'exit status {code}'})"
    )


def _exit_status(container_id: str) -> str | None:
    """The exit status the lease watchdog recorded for the server; None while the server runs (or unreadable)."""
    try:
        exec_id = engine.api().exec_create(container_id, ["python3", "-I", "-S", "-c", _EXIT_STATUS, _EXIT_FILE])["Id"]
        output = engine.api().exec_start(exec_id)
        if engine.api().exec_inspect(exec_id).get("ExitCode") != 0:
            return None
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return None
    return output.decode(errors="replace").strip()[:20]


def _exit_report(spec: ServerSpec, container_id: str) -> str:
    try:
        state = engine.api().inspect_container(container_id)["State"]
    except docker.errors.NotFound:
        # A stopped container is removed by the engine (auto_remove): it was killed, or its lease lapsed.
        return f"the OpenEnv server container of {spec.describe()} exited and is gone (killed, or its lease lapsed)"
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        return f"the OpenEnv server container of {spec.describe()} cannot be inspected: {exc}"
    status = _exit_status(container_id) if state.get("Running") else None
    if status is None:
        status = str(state.get("ExitCode"))
    return (
        f"the OpenEnv server of {spec.describe()} exited (status {status}"
        f"{', out of memory' if state.get('OOMKilled') else ''}){_logs(container_id)}"
    )


def _logs(container_id: str) -> str:
    try:
        text = engine.api().logs(container_id, tail=_LOG_LINES).decode(errors="replace").strip()
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return ""
    return f"; its last log lines:\n{text}" if text else "; it logged nothing"
