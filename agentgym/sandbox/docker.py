"""DockerSandbox: a hardened Docker container that environments run shell commands in, snapshot, restore and fork.

State is the container's filesystem plus the shell's cwd and exported variables, which the
exec wrapper (:mod:`agentgym.sandbox.shell`) keeps in a file inside the container; so
``docker commit`` is a complete snapshot and a fork is a new container from the committed image.

Containers start hardened (no network, no capabilities, no-new-privileges, pids/memory/CPU
limits, uid 1000, an init process) and carry owner labels, so that this process removes them
at exit or on SIGTERM and a later process (or ``agentgym sandbox gc``) reaps them after a crash.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import socket
import tarfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

import docker.errors

from agentgym.sandbox import cleanup, engine, labels, shell
from agentgym.sandbox.base import ExecResult, FileTooLargeError, SandboxError, SandboxSnapshot, SandboxUnavailableError
from agentgym.sandbox.cleanup import GcReport, gc
from agentgym.sandbox.images import require_base_image

if TYPE_CHECKING:
    from agentgym.sandbox.pool import WarmPool

__all__ = ["DockerSandbox", "DockerSnapshot", "SandboxConfig", "GcReport", "gc"]

# One argv string may not exceed 128 KiB (MAX_ARG_STRLEN); longer commands travel as a file.
_MAX_INLINE_COMMAND = 100_000
_MAX_SYMLINKS = 16
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27


@dataclass(frozen=True)
class SandboxConfig:
    """How a sandbox container is confined and how commands run in it; the defaults are the hardened ones."""

    user: str = "1000:1000"
    working_dir: str = "/workspace"
    # A fixed hostname keeps forked and replayed sandboxes indistinguishable.
    hostname: str = "sandbox"
    network_mode: str = "none"
    cap_drop: tuple[str, ...] = ("ALL",)
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

    def __post_init__(self):
        if not all(part.isdigit() for part in self.user.split(":")):
            raise ValueError(f"user must be numeric 'uid:gid', got {self.user!r}")
        if self.max_output < 1024:
            raise ValueError("max_output must be at least 1024 bytes")

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)

    def host_config(self) -> dict:
        return engine.api().create_host_config(
            network_mode=self.network_mode, cap_drop=list(self.cap_drop), security_opt=list(self.security_opt),
            pids_limit=self.pids_limit, mem_limit=self.mem_limit, memswap_limit=self.mem_limit,
            nano_cpus=int(self.cpus * 1e9), init=self.init)


def create_container(image: str, config: SandboxConfig, kind: str) -> str:
    """Create (not start) a labelled, hardened container that idles until commands are exec'd into it."""
    cleanup.ensure_installed()
    client = engine.api()
    try:
        container_id = client.create_container(
            image, ["sleep", "infinity"], user=config.user, working_dir=config.working_dir,
            hostname=config.hostname, environment=dict(config.environment) or None,
            labels=labels.owner_labels(kind), host_config=config.host_config())["Id"]
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailableError(
            f"image {image!r} not found (base images come from `agentgym images build`; "
            "snapshot images are gone once released)") from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"creating a container from {image!r}: {engine.explain(exc)}") from exc
    cleanup.track_container(container_id, image)
    return container_id


def start_container(container_id: str) -> None:
    with engine.engine_errors("starting the sandbox container"):
        engine.api().start(container_id)


def _remove_when_started(container_id: str, starting: Future | None) -> None:
    if starting is not None:
        starting.exception()  # a failed start still leaves a container to remove
    cleanup.remove_container(container_id)


@dataclass
class DockerSnapshot(SandboxSnapshot):
    """A committed image of a sandbox; ``release()`` removes it once no container or child snapshot uses it."""

    def release(self) -> None:
        cleanup.release_image(self.ref)


class DockerSandbox:
    """A hardened container with a persistent shell state; see the module docstring.

    Get one with :meth:`create`. Commands run one at a time (concurrent calls queue);
    :meth:`close` may be called from any thread and is idempotent.
    """

    def __init__(self, container_id: str, image: str, config: SandboxConfig, *,
                 state: shell.ShellState | None = None, starting: Future | None = None):
        self.image = image
        self.config = config
        self._container_id = container_id
        self._starting = starting
        self._state = state or shell.ShellState(config.working_dir)
        self._lock = threading.RLock()
        self._close_lock = threading.Lock()
        self._closed = False

    @classmethod
    def create(cls, image: str | None = None, *, config: SandboxConfig | None = None,
               pool: WarmPool | None = None, warm: bool = True) -> "DockerSandbox":
        """A sandbox from ``image`` (default: the base image), taken from a warm pool unless ``warm=False``.

        ``pool`` defaults to :func:`agentgym.sandbox.pool.default_pool`.
        """
        image = image or require_base_image()
        config = config or SandboxConfig()
        if not warm:
            return cls.launch(image, config)
        from agentgym.sandbox.pool import default_pool  # the pool module builds on this one

        return (pool or default_pool()).acquire(image, config=config)

    @classmethod
    def launch(cls, image: str, config: SandboxConfig, *, state: shell.ShellState | None = None) -> "DockerSandbox":
        """A cold start: the container is created now and started in the background; the first operation
        on the sandbox waits for the start, so callers can overlap it with other work (a model call)."""
        container_id = create_container(image, config, labels.KIND_SANDBOX)
        return cls(container_id, image, config, state=state, starting=engine.submit(start_container, container_id))

    @classmethod
    def from_snapshot(cls, snapshot: SandboxSnapshot, *, config: SandboxConfig | None = None) -> "DockerSandbox":
        """A new sandbox at ``snapshot``'s state (a fork when the sandbox it came from is gone or elsewhere)."""
        return cls.launch(snapshot.ref, config or SandboxConfig(),
                          state=shell.ShellState(snapshot.cwd, dict(snapshot.env)))

    @property
    def id(self) -> str:
        return self._container_id

    @property
    def cwd(self) -> str:
        """The shell's working directory after the last command."""
        return self._state.cwd

    @property
    def env(self) -> dict[str, str]:
        """Variables the commands exported (or changed) relative to the container's own environment."""
        return dict(self._state.env)

    def _running_id(self) -> str:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._starting is not None:
            try:
                self._starting.result()
            except SandboxError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever stopped the start, the sandbox is unusable
                raise SandboxError(f"the sandbox container did not start: {exc}") from exc
            self._starting = None
        return self._container_id

    # ------------------------------------------------------------------ commands

    def exec(self, command: str, *, timeout: float | None = None, workdir: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        """Run ``command`` in bash; ``cd`` and ``export`` carry over to later commands.

        ``timeout`` (default ``config.default_timeout``) is enforced inside the container
        (``timeout -k``): a command that runs over gets exit code 124 and ``timed_out=True``.
        ``workdir`` and ``env`` apply to this command only. stdout and stderr are each capped
        at ``config.max_output`` bytes, keeping the head and the tail. Only a dead sandbox
        raises (SandboxError); failing or hanging commands return a result.
        """
        limit = self.config.default_timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")  # `timeout 0` would mean no limit at all
        with self._lock:
            container_id = self._running_id()
            command = self._inline(container_id, command)
            spec = shell.exec_command(command, timeout=limit, kill_grace=self.config.kill_grace,
                                      state_file=self.config.state_file,
                                      workdir=workdir and self._absolute(workdir), env=env)
            return self._run(container_id, spec, stdin, limit)

    def _inline(self, container_id: str, command: str) -> str:
        if len(command.encode()) <= _MAX_INLINE_COMMAND:
            return command
        path = f"/tmp/.agentgym-command-{time.monotonic_ns()}"
        self._put_archive(container_id, "/tmp", _tar_files([(path[5:], command.encode(), 0o600)], self.config))
        return f'__ag_src=$(<{path}); rm -f {path}; eval "$__ag_src"'

    def _run(self, container_id: str, spec: shell.ExecCommand, stdin: str | bytes | None, limit: float) -> ExecResult:
        started = time.monotonic()
        client = engine.api()
        with engine.engine_errors("exec in the sandbox"):
            exec_id = client.exec_create(container_id, spec.argv, stdin=stdin is not None,
                                         user=self.config.user, workdir=self.config.working_dir)["Id"]
            response, reader, sock = _hijack(client, exec_id)
        deadline = started + limit + self.config.kill_grace + self.config.backstop_grace
        try:
            if stdin is not None:
                _feed_stdin(sock, stdin.encode() if isinstance(stdin, str) else stdin)
            streams = shell.read_exec_stream(reader, sock, deadline, self.config.max_output, spec.begin, spec.end)
        except shell.Backstop:
            self._raise_if_dead(container_id)
            return ExecResult(124, "", f"[agentgym: the sandbox did not answer within {deadline - started:.0f}s; "
                              "the command was abandoned]", timed_out=True, duration_s=time.monotonic() - started)
        finally:
            response.close()
        records = streams.trailer.records()
        if records:
            exit_code = int(records[0])
            self._state = shell.ShellState.parse(records[1:], self._state)
        else:  # the wrapper itself died (the container stopped, or the OOM killer chose it)
            self._raise_if_dead(container_id)
            exit_code = client.exec_inspect(exec_id).get("ExitCode")
            exit_code = -1 if exit_code is None else exit_code
        duration = time.monotonic() - started
        timed_out = exit_code == 124 or (exit_code == 137 and duration >= limit)
        return ExecResult(124 if timed_out else exit_code, streams.stdout.text(), streams.stderr.text(),
                          timed_out=timed_out, truncated=bool(streams.stdout.dropped or streams.stderr.dropped),
                          duration_s=duration)

    def _raise_if_dead(self, container_id: str) -> None:
        try:
            status = engine.api().inspect_container(container_id)["State"]
        except docker.errors.NotFound:
            raise SandboxError(f"the sandbox container {container_id[:12]} was removed") from None
        if not status.get("Running"):
            raise SandboxError(f"the sandbox container {container_id[:12]} stopped "
                               f"(exit {status.get('ExitCode')}, OOMKilled={status.get('OOMKilled')})")

    def run_argv(self, argv: list[str], *, timeout: float | None = None) -> tuple[int, bytes, bytes]:
        """Run a program directly as the sandbox user, outside the shell wrapper (shell state untouched),
        and return ``(exit code, stdout bytes, stderr bytes)`` uncapped; for helpers whose output is binary
        (the desktop sandbox's screenshots). ``timeout`` is enforced in the container as for :meth:`exec`."""
        limit = self.config.default_timeout if timeout is None else float(timeout)
        argv = ["timeout", "-k", str(self.config.kill_grace), str(limit), *argv]
        with self._lock:
            container_id = self._running_id()
            client = engine.api()
            with engine.engine_errors("exec in the sandbox"):
                exec_id = client.exec_create(container_id, argv, user=self.config.user)["Id"]
                stdout, stderr = client.exec_start(exec_id, demux=True)
                exit_code = client.exec_inspect(exec_id)["ExitCode"]
            if exit_code is None or exit_code < 0:
                self._raise_if_dead(container_id)
            return exit_code if exit_code is not None else -1, stdout or b"", stderr or b""

    def _run_plain(self, container_id: str, argv: list[str]) -> tuple[int, str]:
        """Run a helper command as the sandbox user without the shell wrapper (so shell state is untouched)."""
        client = engine.api()
        with engine.engine_errors("exec in the sandbox"):
            exec_id = client.exec_create(container_id, argv, user=self.config.user)["Id"]
            output = client.exec_start(exec_id)
            return client.exec_inspect(exec_id)["ExitCode"], output.decode(errors="replace")

    # ------------------------------------------------------------------ files

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular file (symlinks followed); FileNotFoundError when it is missing.

        At most ``max_bytes`` (default ``config.max_read_bytes``) come back: a larger file raises
        :class:`~agentgym.sandbox.base.FileTooLargeError` before its content is transferred.
        """
        limit = self.config.max_read_bytes if max_bytes is None else max_bytes
        with self._lock:
            container_id = self._running_id()
            path = self._absolute(path)
            for _ in range(_MAX_SYMLINKS):
                chunks, stat = self._get_archive(container_id, path)
                if stat["mode"] & _GO_MODE_SYMLINK:
                    chunks.close()
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), stat["linkTarget"]))
                    continue
                if stat["mode"] & _GO_MODE_DIR:
                    chunks.close()
                    raise IsADirectoryError(path)
                if stat["size"] > limit:
                    chunks.close()
                    raise FileTooLargeError(path, stat["size"], limit)
                with tarfile.open(fileobj=io.BytesIO(_bounded_join(chunks, limit, path))) as tar:
                    member = tar.next()
                    return tar.extractfile(member).read()
            raise SandboxError(f"too many levels of symbolic links: {path}")

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file owned by the sandbox user, creating missing parent directories as that user."""
        payload = data.encode() if isinstance(data, str) else data
        with self._lock:
            container_id = self._running_id()
            directory, name = posixpath.split(self._absolute(path))
            self._put_archive(container_id, directory, _tar_files([(name, payload, mode)], self.config))

    def put_tree(self, dest_dir: str, source: str | Path | bytes) -> None:
        """Copy a host directory into ``dest_dir`` in one archive call (owned by the sandbox user),
        or extract tar bytes there as they are."""
        data = source if isinstance(source, bytes) else tar_directory(Path(source), self.config)
        with self._lock:
            container_id = self._running_id()
            self._put_archive(container_id, self._absolute(dest_dir), data)

    def fs_hash(self, paths: Iterable[str] = ("/workspace",)) -> str:
        """A digest of the trees at ``paths``: relative paths, types, modes, file contents and symlink
        targets; owners and mtimes are left out, so equal work in two sandboxes gives equal digests."""
        digest = hashlib.sha256()
        with self._lock:
            container_id = self._running_id()
            for root in paths:
                digest.update(f"root {root}\0".encode())
                try:
                    chunks, _ = self._get_archive(container_id, self._absolute(root))
                except FileNotFoundError:
                    digest.update(b"missing\0")
                    continue
                for entry in sorted(_tree_entries(b"".join(chunks))):
                    digest.update(repr(entry).encode() + b"\0")
        return digest.hexdigest()

    def _absolute(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.cwd, path))

    def _get_archive(self, container_id: str, path: str):
        try:
            return engine.api().get_archive(container_id, path)
        except docker.errors.NotFound:
            self._raise_if_dead(container_id)
            raise FileNotFoundError(path) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"reading {path}: {engine.explain(exc)}") from exc

    def _put_archive(self, container_id: str, directory: str, data: bytes) -> None:
        client = engine.api()
        with engine.engine_errors(f"writing into {directory}"):
            try:
                client.put_archive(container_id, directory, data)
                return
            except docker.errors.NotFound:
                self._raise_if_dead(container_id)
            # Created by the sandbox user, so the agent can write there and cannot gain access
            # to places it could not reach itself.
            code, output = self._run_plain(container_id, ["mkdir", "-p", "--", directory])
            if code != 0:
                raise SandboxError(f"cannot create {directory}: {output.strip()}")
            client.put_archive(container_id, directory, data)

    # ------------------------------------------------------------------ branching

    def snapshot(self) -> DockerSnapshot:
        """Commit the container (paused for consistency) to an image labelled as a snapshot."""
        with self._lock:
            container_id = self._running_id()
            change = "LABEL " + " ".join(f'{k}="{v}"' for k, v in labels.owner_labels(labels.KIND_SNAPSHOT).items())
            with engine.engine_errors("committing a snapshot"):
                image_id = engine.api().commit(container_id, changes=[change], pause=True)["Id"]
            cleanup.track_snapshot(image_id, parent=self.image)
            return DockerSnapshot(ref=image_id, cwd=self._state.cwd, env=dict(self._state.env),
                                  metadata={"image": image_id, "parent": self.image})

    def restore(self, snapshot: SandboxSnapshot) -> None:
        """Replace this sandbox's container by one started from ``snapshot`` (the old one goes in the background)."""
        with self._lock:
            self._running_id()
            replacement = create_container(snapshot.ref, self.config, labels.KIND_SANDBOX)
            old_id, old_starting = self._container_id, self._starting
            self._container_id, self._starting = replacement, engine.submit(start_container, replacement)
            self.image = snapshot.ref
            self._state = shell.ShellState(snapshot.cwd, dict(snapshot.env))
        engine.submit(_remove_when_started, old_id, old_starting)

    def fork(self, snapshot: SandboxSnapshot | None = None) -> "DockerSandbox":
        """An independent sandbox at ``snapshot`` (default: this sandbox's state now); this one goes on unchanged."""
        source = snapshot or self.snapshot()
        try:
            return DockerSandbox.from_snapshot(source, config=self.config)
        finally:
            if snapshot is None:
                source.release()  # deferred by the engine bookkeeping until the fork is closed

    def close(self, wait: bool = True) -> None:
        """Remove the container (idempotent). ``wait=False`` removes it in the background."""
        with self._close_lock:  # not the command lock: closing must not wait for a running command
            if self._closed:
                return
            self._closed = True
        removal = engine.submit(_remove_when_started, self._container_id, self._starting)
        if wait:
            removal.result()

    def __enter__(self) -> "DockerSandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"cwd={self.cwd!r}"
        return f"DockerSandbox({self._container_id[:12]}, image={self.image!r}, {state})"


def _bounded_join(chunks, limit: int, path: str) -> bytes:
    """A tar stream's bytes, refusing to hold more than one file of ``limit`` bytes plus tar's framing
    (the size Docker reported may have grown while the archive streamed)."""
    cap = limit + 64 * 1024
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > cap:
            chunks.close()
            raise FileTooLargeError(path, len(data), limit)
    return bytes(data)


def _hijack(client: docker.APIClient, exec_id: str):
    """Start an exec on an upgraded connection: (response, buffered reader, socket)."""
    # docker-py's socket=True hands back the raw socket and so loses whatever http.client
    # buffered past the 101 headers; reading through the buffered reader keeps those bytes.
    response = client._post_json(client._url("/exec/{0}/start", exec_id), data={"Tty": False, "Detach": False},
                                 headers={"Connection": "Upgrade", "Upgrade": "tcp"}, stream=True)
    client._raise_for_status(response)
    reader = response.raw._fp.fp
    return response, reader, reader.raw._sock


def _feed_stdin(sock: socket.socket, data: bytes) -> None:
    """Write stdin, then half-close so the command sees EOF; in a thread, since a command may not read its
    input before its output fills the pipes."""

    def feed():
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the command exited without reading everything: that is its business

    threading.Thread(target=feed, daemon=True, name="agentgym-stdin").start()


def _owned(info: tarfile.TarInfo, config: SandboxConfig) -> tarfile.TarInfo:
    info.uid, info.gid = config.uid_gid
    info.uname = info.gname = ""
    return info


def _tar_files(files: list[tuple[str, bytes, int]], config: SandboxConfig) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in files:
            info = _owned(tarfile.TarInfo(name), config)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_directory(root: Path, config: SandboxConfig) -> bytes:
    """A directory's contents as a tar archive owned by the sandbox user, ready for :meth:`DockerSandbox.put_tree`."""
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        # Children one by one: an entry for "." would also re-own the destination directory.
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=lambda info: _owned(info, config))
    return buffer.getvalue()


def _tree_entries(archive: bytes) -> Iterable[tuple[str, str, int, str]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            # Docker names entries after the requested path's basename; drop it.
            relative = member.name.partition("/")[2]
            if member.isfile():
                content = hashlib.sha256(tar.extractfile(member).read()).hexdigest()
            else:
                content = member.linkname.partition("/")[2] if member.islnk() else member.linkname
            yield relative, member.type.decode(), member.mode, content
