"""DockerSandbox: a hardened Docker container that environments run shell commands in, snapshot, restore and fork.

State is the container's filesystem plus the shell's cwd and exported variables, which the
exec wrapper (:mod:`agentgym.sandbox.shell`) keeps in a file inside the container; so
``docker commit`` is a complete snapshot. A fork or restore lands in a warm pooled container of
the sandbox's start image that receives the commit's own layer (:mod:`agentgym.sandbox.fs_diff`:
no container start to wait for), else in a new container from the committed image.
Commands reach the container through its command server (:mod:`agentgym.sandbox.command_server`,
one ``docker exec`` per container), or one ``docker exec`` each where none can run.

The sandbox treats whatever runs in it as an adversary:

* **confinement** — no network, all capabilities dropped, no-new-privileges, an init process
  that reaps orphans; every command and every file operation (read, write, ``put_tree``) runs
  as ``config.user`` (uid 1000), so a file tool can do nothing the agent's own shell could not.
  The container's keep-alive process runs as ``nobody``, which neither the agent nor root
  without CAP_KILL can signal: an agent cannot stop its own container.
* **limits** (:class:`SandboxConfig`, defaults) — 256 processes, 1 GiB of memory (no swap),
  one CPU, a 2 GiB disk limit (:mod:`agentgym.sandbox.disk`: the engine's quota where it has
  one, else a 2 GiB per-file ulimit and a measurement of the writable layer after each command,
  :class:`~agentgym.sandbox.base.DiskLimitError` past it), a wall-clock timeout per command
  enforced inside the container (60 s default), 64 KiB of output per stream and 16 MiB per file
  read back, 1 MiB of shell state.
* **processes** — a command that times out has its whole tree killed, what left its process
  group or session included; :meth:`DockerSandbox.stop_processes` kills everything the agent
  runs (call it before grading); a process table that stays full raises
  :class:`~agentgym.sandbox.base.SandboxSaturatedError`.
* **faults** — a container that dies under a command raises SandboxError on that command (an
  OOM kill inside a live container stays an ordinary exit status 137); the warm pool checks a
  container is alive when it hands it out.

Containers carry owner labels, so that this process removes them at exit or on SIGTERM and a
later process (or ``agentgym sandbox gc``) reaps them after a crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import io
import os
import posixpath
import queue
import secrets
import socket
import tarfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import requests.exceptions

from agentgym.sandbox import cleanup, command_server, disk, engine, fs_diff, labels, shell
from agentgym.sandbox.base import (
    DiskLimitError,
    ExecResult,
    FileTooLargeError,
    SandboxError,
    SandboxSaturatedError,
    SandboxSnapshot,
)
from agentgym.sandbox.cleanup import GcReport, gc
from agentgym.sandbox.containers import SandboxConfig, create_container, start_container
from agentgym.sandbox.images import require_base_image
from agentgym.sandbox.pool import WarmPool, default_pool, set_preparer

__all__ = ["DockerSandbox", "DockerSnapshot", "SandboxConfig", "GcReport", "gc"]

# One argv string may not exceed 128 KiB (MAX_ARG_STRLEN); longer commands travel as a file.
_MAX_INLINE_COMMAND = 100_000
# How long an exec whose stream ended without its trailer waits for the engine to report the
# container stopped: the stream can end a moment before the engine has noticed the container died.
_DEATH_NOTICE_S = 1.0
# How long stop_processes may take before the sandbox counts as saturated.
_STOP_TIMEOUT_S = 10.0
# How often a running command's writable layer is measured where the engine has no disk quota: a command
# writes past the limit what the disk takes in this time (plus one walk) before its processes are killed.
_DISK_WATCH_S = 0.1
# An exec's exit status when the runtime could not start its process (here: no free process slot).
_NOT_STARTED = 126
# The note of a command whose command server was killed under it.
_LOST = b"lost"


def _remove_when_started(container_id: str, starting: Future | None) -> None:
    if starting is not None:
        starting.exception()  # a failed start still leaves a container to remove
    cleanup.remove_container(container_id)


@dataclass
class _Held:
    """The container a sandbox holds now (:meth:`DockerSandbox.restore` replaces it), as its finalizer sees it."""

    container_id: str
    starting: Future | None
    pid: int = field(default_factory=os.getpid)


# Containers of sandboxes collected unclosed, for the reaper thread to remove. A finalizer runs wherever the collector
# ran, maybe inside a lock the removal would take (the executor's): it only puts here, which is reentrant-safe.
_unclosed: queue.SimpleQueue[_Held] = queue.SimpleQueue()
_reaper_pid: int | None = None
_reaper_lock = threading.Lock()


def _start_reaper() -> None:
    """The thread that removes what :func:`_remove_unclosed` queues, one per process; started with the first sandbox
    (never from a finalizer: starting a thread takes locks)."""
    global _reaper_pid
    if _reaper_pid != os.getpid():
        with _reaper_lock:
            if _reaper_pid != os.getpid():
                threading.Thread(target=_reap, daemon=True, name="agentgym-unclosed").start()
                _reaper_pid = os.getpid()


def _reap() -> None:
    while True:
        held = _unclosed.get()
        engine.submit(_remove_when_started, held.container_id, held.starting)


def _remove_unclosed(held: _Held) -> None:
    """A sandbox was garbage-collected without close(): its container goes now rather than when the process exits
    (a training run that drops sandboxes would pile them up), with a ResourceWarning, as an unclosed file gets."""
    if held.pid != os.getpid():  # a forked child collecting its parent's objects: the parent's containers stay
        return
    _unclosed.put(held)
    warnings.warn(
        f"a DockerSandbox was garbage-collected without close(); its container {held.container_id[:12]} is removed",
        ResourceWarning,
        stacklevel=1,
    )


def _snapshot_state(snapshot: SandboxSnapshot) -> shell.ShellState:
    return shell.ShellState(snapshot.cwd, dict(snapshot.env))


def label_change(values: dict[str, str]) -> str:
    """The ``docker commit`` change that sets these labels on the committed image."""
    return "LABEL " + " ".join(f'{k}="{v}"' for k, v in values.items())


@dataclass
class DockerSnapshot(SandboxSnapshot):
    """A committed image of a sandbox; ``release()`` removes it once no container or child snapshot uses it.

    ``pool`` and ``start`` (the warm pool of the sandbox it came from and that sandbox's start
    image, as the pool names it) let forks land in a warm container (:mod:`agentgym.sandbox.fs_diff`);
    they stay in this process (an exported snapshot carries neither).
    """

    pool: WarmPool | None = field(default=None, repr=False, compare=False)
    start: str | None = None

    def release(self) -> None:
        fs_diff.forget(self.ref)
        cleanup.release_image(self.ref)


class DockerSandbox:
    """A hardened container with a persistent shell state; see the module docstring.

    Get one with :meth:`create`. Commands run one at a time (concurrent calls queue);
    :meth:`close` may be called from any thread and is idempotent.
    """

    def __init__(
        self,
        container_id: str,
        image: str,
        config: SandboxConfig,
        *,
        state: shell.ShellState | None = None,
        starting: Future | None = None,
        disk_used: int = 0,
        pool: WarmPool | None = None,
        start: str | None = None,
    ):
        self.image = image
        self.config = config
        # Where warm containers for this sandbox's forks come from, and the image they run (see fs_diff).
        self._pool, self._start_image = pool, start
        self._held = _Held(container_id, starting)
        # Closing detaches it; a sandbox dropped unclosed has its container removed when it is collected. Not at
        # exit: the exit sweep removes every container this process holds, in one pass.
        self._finalizer = weakref.finalize(self, _remove_unclosed, self._held)
        self._finalizer.atexit = False
        _start_reaper()
        self._state = state or shell.ShellState(config.working_dir)
        self._disk_used = disk_used  # what the image's snapshot layers hold, written by this sandbox's ancestors
        self._meter: disk.DiskMeter | None = None
        self._server: command_server.CommandServer | None = None  # the last one started (maybe dead since)
        self._serverless: str | None = None  # a container where no command server can start
        self._lock = threading.RLock()
        self._close_lock = threading.Lock()
        self._closed = False

    @classmethod
    def create(
        cls,
        image: str | None = None,
        *,
        config: SandboxConfig | None = None,
        pool: WarmPool | None = None,
        warm: bool = True,
    ) -> DockerSandbox:
        """A sandbox from ``image`` (default: the base image), taken from a warm pool unless ``warm=False``.

        ``pool`` defaults to :func:`agentgym.sandbox.pool.default_pool`. A pooled container is
        checked to be running when it is handed out (an idle one may have been killed); with none
        ready, the sandbox starts cold.
        """
        image = image or require_base_image()
        config = config or SandboxConfig()
        pool = (pool or default_pool()) if warm else None
        taken = pool.take_prepared(image, config) if pool is not None else None
        if taken is None:
            return cls.launch(image, config, pool=pool, start=image)
        sandbox = cls(taken[0], image, config, pool=pool, start=image)
        sandbox._adopt(taken[1])
        return sandbox

    @classmethod
    def launch(
        cls,
        image: str,
        config: SandboxConfig,
        *,
        state: shell.ShellState | None = None,
        disk_used: int = 0,
        pool: WarmPool | None = None,
        start: str | None = None,
    ) -> DockerSandbox:
        """A cold start: the container is created now and started in the background; the first operation
        on the sandbox waits for the start, so callers can overlap it with other work (a model call)."""
        container_id = create_container(image, config, labels.KIND_SANDBOX, disk_used=disk_used)
        return cls(
            container_id,
            image,
            config,
            state=state,
            starting=engine.submit(start_container, container_id),
            disk_used=disk_used,
            pool=pool,
            start=start,
        )

    @classmethod
    def from_snapshot(cls, snapshot: SandboxSnapshot, *, config: SandboxConfig | None = None) -> DockerSandbox:
        """A new sandbox at ``snapshot``'s state (a fork when the sandbox it came from is gone or elsewhere).

        It is a warm container of the snapshot's start image that received the snapshot's diff
        (:mod:`agentgym.sandbox.fs_diff`) where one is ready and the diff qualifies; else a container
        started from the committed image. Either holds the same files, cwd and variables.
        """
        config = config or SandboxConfig()
        warm = cls._warm_sandbox(snapshot, config)
        if warm is not None:
            return warm
        pool, start = getattr(snapshot, "pool", None), getattr(snapshot, "start", None)
        return cls.launch(
            snapshot.ref,
            config,
            state=_snapshot_state(snapshot),
            disk_used=snapshot.metadata.get("disk_used", 0),
            pool=pool,
            start=start,
        )

    @classmethod
    def _warm_sandbox(cls, snapshot: SandboxSnapshot, config: SandboxConfig) -> DockerSandbox | None:
        """A sandbox at ``snapshot``'s state in a warm container of its start image that received the
        snapshot's diff, or None (no diff, no warm container, or applying it failed: use the committed image).

        The container counts as a user of the snapshot image, as a container started from it would: the
        snapshot's release waits for it, and a snapshot of it is the image's child in the bookkeeping.
        """
        pool, start = getattr(snapshot, "pool", None), getattr(snapshot, "start", None)
        if pool is None or start is None:
            return None
        diff = fs_diff.diff_of(snapshot.ref)
        usable = diff is not None and diff.owner == config.uid_gid
        taken = pool.take_prepared(start, config, only_if_kept=True) if usable else None
        if taken is None:
            return None
        container_id, prepared = taken
        cleanup.track_container(container_id, snapshot.ref)
        sandbox = cls(container_id, snapshot.ref, config, state=_snapshot_state(snapshot), pool=pool, start=start)
        sandbox._adopt(prepared)
        try:
            sandbox._receive(container_id, diff)
        except BaseException as exc:
            sandbox.close(wait=False)
            if isinstance(exc, (SandboxError, OSError)):  # e.g. the pooled container died meanwhile
                return None
            raise
        return sandbox

    def _adopt(self, prepared: object) -> None:
        """Take over what the warm pool's preparer made for this sandbox's container: its command server."""
        if isinstance(prepared, command_server.CommandServer) and prepared.container_id == self._container_id:
            self._server = prepared

    def _receive(self, container_id: str, diff: fs_diff.LayerDiff) -> None:
        """Apply a snapshot's diff to this (fresh, warm) container as the sandbox user: its deletions, then its
        files, extracted as :meth:`put_tree` does (so they land only where the agent could write them)."""
        if diff.deletions:
            code, _, err = self._call(
                container_id,
                ["/bin/bash", "-c", fs_diff.DELETE_SCRIPT],
                what="deleting what the snapshot deleted",
                max_bytes=64 * 1024,
                stdin=b"".join(path.encode() + b"\0" for path in diff.deletions),
            )
            if code != 0:
                raise SandboxError(f"deleting what the snapshot deleted: {err.decode(errors='replace')[-300:]}")
        code, _, err = self._call(
            container_id,
            ["/bin/sh", "-c", _EXTRACT, "agentgym", "/"],
            what="extracting a snapshot's files",
            max_bytes=64 * 1024,
            stdin=diff.archive,
        )
        if code != 0:
            raise SandboxError(f"extracting a snapshot's files: {err.decode(errors='replace')[-300:]}")

    @property
    def id(self) -> str:
        return self._container_id

    # The container and its start live in _held, which the finalizer shares; a restore replaces both.
    @property
    def _container_id(self) -> str:
        return self._held.container_id

    @_container_id.setter
    def _container_id(self, container_id: str) -> None:
        self._held.container_id = container_id

    @property
    def _starting(self) -> Future | None:
        return self._held.starting

    @_starting.setter
    def _starting(self, starting: Future | None) -> None:
        self._held.starting = starting

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

    def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | bytes | None = None,
    ) -> ExecResult:
        """Run ``command`` in bash; ``cd`` and ``export`` carry over to later commands.

        ``timeout`` (default ``config.default_timeout``) is enforced inside the container
        (``timeout -k``): a command that runs over gets exit code 124 and ``timed_out=True``,
        and every process it started is killed, those that left its process group included.
        ``workdir`` and ``env`` apply to this command only. stdout and stderr are each capped
        at ``config.max_output`` bytes, keeping the head and the tail. Failing or hanging
        commands return a result; SandboxError means that the sandbox cannot go on: the
        container died, its process table stays full (SandboxSaturatedError), or it wrote more
        than its disk limit (DiskLimitError).
        """
        limit = self.config.default_timeout if timeout is None else float(timeout)
        if limit <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")  # `timeout 0` would mean no limit at all
        with self._lock:
            container_id = self._running_id()
            command = self._inline(container_id, command)
            spec = shell.exec_command(
                command,
                timeout=limit,
                kill_grace=self.config.kill_grace,
                state_file=self.config.state_file,
                workdir=workdir and self._absolute(workdir),
                env=env,
            )
            with self._watching_disk(container_id):
                result = self._run(container_id, spec, stdin, limit)
            self._check_disk(container_id)
            return result

    def _inline(self, container_id: str, command: str) -> str:
        if len(command.encode()) <= _MAX_INLINE_COMMAND:
            return command
        path = f"/tmp/.agentgym-command-{secrets.token_hex(8)}"
        self._write(container_id, path, command.encode(), 0o600)
        return f'__ag_src=$(<{path}); rm -f {path}; eval "$__ag_src"'

    def _run(
        self, container_id: str, spec: shell.ExecCommand, stdin: str | bytes | None, limit: float, *, retry: bool = True
    ) -> ExecResult:
        started = time.monotonic()
        deadline = started + limit + self.config.kill_grace + self.config.backstop_grace
        try:
            exec_id, streams = self._stream(
                container_id, spec, stdin, deadline, lambda: shell.OutputCapture(self.config.max_output)
            )
        except shell.Backstop:
            self._raise_if_dead(container_id)
            return ExecResult(
                124,
                "",
                f"[agentgym: the sandbox did not answer within {deadline - started:.0f}s; the command was abandoned]",
                timed_out=True,
                duration_s=time.monotonic() - started,
            )
        records = streams.records
        note = b""
        if len(records) >= 2:
            exit_code, note = int(records[0]), records[1]
            self._state = shell.ShellState.parse(records[2:], self._state)
        else:  # the wrapper itself died (the container stopped, or the OOM killer or the agent killed it)
            exit_code = self._exit_without_trailer(container_id, exec_id)
        if note == b"refused" or (not records and exit_code == _NOT_STARTED):
            self._kill_all(container_id)
            if not retry:
                raise SandboxSaturatedError(
                    f"the sandbox's process table (pids limit {self.config.pids_limit}) "
                    "refills as soon as it is cleared"
                )
            result = self._run(container_id, spec, stdin, limit, retry=False)  # it did not run: now there is room
            return dataclasses.replace(result, stderr=result.stderr + self._cleared_note())
        stderr = streams.stderr.text()
        if note == b"full":
            self._kill_all(container_id)
            stderr += self._cleared_note()
        if note == _LOST:
            stderr += "\n[agentgym: the command server was killed during the command; its result is lost]"
        duration = time.monotonic() - started
        timed_out = exit_code == 124 or (exit_code == 137 and duration >= limit)
        return ExecResult(
            124 if timed_out else exit_code,
            streams.stdout.text(),
            stderr,
            timed_out=timed_out,
            truncated=bool(streams.stdout.dropped or streams.stderr.dropped),
            duration_s=duration,
        )

    def _cleared_note(self) -> str:
        return (
            f"\n[agentgym: the process table (pids limit {self.config.pids_limit}) was full; "
            "every process in the sandbox was killed]"
        )

    def _stream(
        self,
        container_id: str,
        spec: shell.ExecCommand,
        stdin: str | bytes | None,
        deadline: float,
        capture: Callable[[], shell.Capture],
    ) -> tuple[str, shell.StreamResult[shell.Capture]]:
        """Run ``spec`` as the sandbox user, through the command server where one runs (else in an exec of its
        own), and read its output until its trailers, the end or a full capture."""
        for _ in range(2):  # a server that ended before it took the command is restarted once
            server = self._command_server(container_id) if spec.program else None
            if server is None:
                break
            try:
                return server.exec_id, server.run(spec, stdin, deadline, capture)
            except command_server.Lost as lost:
                if lost.started:  # it may have run in part: a failure, never a success
                    code = self._exit_without_trailer(container_id, server.exec_id) or -1
                    return server.exec_id, shell.StreamResult(capture(), capture(), [str(code).encode(), _LOST])
        exec_id, response, reader, sock = self._open_exec(container_id, spec.argv, stdin=stdin is not None)
        try:
            if stdin is not None:
                _feed_stdin(sock, stdin.encode() if isinstance(stdin, str) else stdin)
            return exec_id, shell.read_exec_stream(reader, sock, deadline, capture, spec.begin, spec.end)
        finally:
            response.close()

    def _open_exec(self, container_id: str, argv: list[str], *, stdin: bool = True) -> tuple:
        """An attached exec of ``argv`` as the sandbox user: (exec id, response, buffered reader, socket)."""
        client = engine.api()
        with engine.engine_errors("exec in the sandbox"):
            exec_id = client.exec_create(
                container_id, argv, stdin=stdin, user=self.config.user, workdir=self.config.working_dir
            )["Id"]
            return (exec_id, *_hijack(client, exec_id))

    def start_command_server(self) -> bool:
        """Start the sandbox's command server unless it runs (idempotent; the first command would start it
        anyway): whether commands now go through one (False: the image has no ``/usr/bin/python3``, or
        ``config.command_server`` is off). For warm pools, which start it before the sandbox is handed out."""
        with self._lock:
            return self._command_server(self._running_id()) is not None

    def _live_server(self, container_id: str) -> command_server.CommandServer | None:
        server = self._server
        return server if server is not None and server.container_id == container_id and server.alive() else None

    def _command_server(self, container_id: str) -> command_server.CommandServer | None:
        """The container's running command server, started if need be; None where none can run."""
        server = self._live_server(container_id)
        if server is not None or not self.config.command_server or self._serverless == container_id:
            return server
        if self._server is not None and self._server.container_id == container_id:
            # One ran here and ended (the agent may have killed it): a process of the agent's could be waiting
            # to open the new one's pipes in the moment before it makes itself non-dumpable.
            self._server = None
            self._stop_by_exec(container_id)
        try:
            self._server = command_server.CommandServer.start(container_id, self._open_exec)
        except command_server.Unavailable as exc:
            if exc.permanent:
                self._serverless = container_id
            return None
        return self._server

    def _exit_without_trailer(self, container_id: str, exec_id: str) -> int:
        """The exit status of an exec that ended without its trailer: SandboxError when the container died
        (that is not the command's failure); :data:`_NOT_STARTED` when the runtime could not start it (no
        free process slot); else what the engine recorded (the OOM killer or the agent killed the wrapper)."""
        with engine.engine_errors("inspecting an exec"):
            exit_code = engine.api().exec_inspect(exec_id).get("ExitCode")
        self._raise_if_dead(container_id, notice=0.0 if exit_code == _NOT_STARTED else _DEATH_NOTICE_S)
        return -1 if exit_code is None else exit_code

    def _raise_if_dead(self, container_id: str, *, notice: float = 0.0) -> None:
        """SandboxError unless the container is running; ``notice``: how long the engine may take to notice
        that it stopped."""
        client = engine.api()
        with engine.engine_errors("inspecting the sandbox container"):
            try:
                if notice:
                    try:
                        client.wait(container_id, timeout=notice, condition="not-running")
                    except requests.exceptions.RequestException:
                        pass  # still running when the wait gave up
                status = client.inspect_container(container_id)["State"]
            except docker.errors.NotFound:
                raise SandboxError(f"the sandbox container {container_id[:12]} was removed") from None
        if not status.get("Running"):
            raise SandboxError(
                f"the sandbox container {container_id[:12]} stopped "
                f"(exit {status.get('ExitCode')}, OOMKilled={status.get('OOMKilled')})"
            )

    def _call(
        self,
        container_id: str,
        argv: list[str],
        *,
        what: str,
        max_bytes: int,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run a helper program as the sandbox user under :data:`shell.PLAIN` (shell state untouched):
        ``(exit status, stdout, stderr)``, each stream at most ``max_bytes`` (more: FileTooLargeError)."""
        limit = self.config.default_timeout if timeout is None else timeout
        result = self._call_once(container_id, argv, what, max_bytes, stdin, limit)
        if result is None:  # no free process slot for the helper: clear the table once
            self._kill_all(container_id)
            result = self._call_once(container_id, argv, what, max_bytes, stdin, limit)
        if result is None:
            raise SandboxSaturatedError(f"{what}: the sandbox's process table refills as soon as it is cleared")
        return result

    def _call_once(
        self, container_id: str, argv: list[str], what: str, max_bytes: int, stdin: bytes | None, limit: float
    ) -> tuple[int, bytes, bytes] | None:
        """One try of :meth:`_call`; None when the runtime could not start the helper."""
        spec = shell.plain_command(argv, timeout=limit, kill_grace=self.config.kill_grace)
        wait = limit + self.config.kill_grace + self.config.backstop_grace
        try:
            exec_id, streams = self._stream(
                container_id, spec, stdin, time.monotonic() + wait, lambda: shell.BoundedBuffer(max_bytes)
            )
        except shell.Backstop:
            self._raise_if_dead(container_id)
            raise SandboxError(f"{what}: the sandbox did not answer within {wait:.0f}s") from None
        if streams.full:
            raise FileTooLargeError(what, None, max_bytes)
        records = streams.records
        exit_code = int(records[0]) if records else self._exit_without_trailer(container_id, exec_id)
        if records[1:2] == [b"refused"] or (not records and exit_code == _NOT_STARTED):
            return None
        return exit_code, bytes(streams.stdout.data), bytes(streams.stderr.data)

    def run_argv(
        self, argv: list[str], *, timeout: float | None = None, max_bytes: int | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run a program directly as the sandbox user, outside the shell wrapper (shell state untouched),
        and return ``(exit code, stdout bytes, stderr bytes)``; for helpers whose output is binary (the
        desktop sandbox's screenshots). ``timeout`` is enforced in the container as for :meth:`exec`.
        Each stream brings back at most ``max_bytes`` (default ``config.max_read_bytes``); more raises
        :class:`~agentgym.sandbox.base.FileTooLargeError`. $PATH holds only the system directories."""
        limit = self.config.default_timeout if timeout is None else float(timeout)
        with self._lock:
            container_id = self._running_id()
            return self._call(
                container_id,
                argv,
                what=f"the output of {argv[0]}",
                timeout=limit,
                max_bytes=self.config.max_read_bytes if max_bytes is None else max_bytes,
            )

    def stop_processes(self) -> None:
        """Kill every process the sandbox user runs (what commands left in the background, daemons that
        left their session, a fork bomb), then check the disk limit. Call it before grading reads the
        sandbox, so that nothing can change the work after it was submitted.

        Raises SandboxSaturatedError when processes survive a second of that.
        """
        with self._lock:
            container_id = self._running_id()
            self._kill_all(container_id)
            self._check_disk(container_id, force=True)

    def _kill_all(self, container_id: str) -> None:
        """Kill every process of the sandbox user: through the command server where one runs (which spares
        itself), else with :data:`shell.STOP`."""
        server = self._live_server(container_id)
        if server is not None:
            try:
                busy = server.stop(time.monotonic() + _STOP_TIMEOUT_S)
            except command_server.Lost:
                busy = None  # the agent killed it meanwhile: STOP does the same
            except shell.Backstop:
                self._raise_if_dead(container_id)
                raise SandboxSaturatedError(
                    f"killing the sandbox's processes took over {_STOP_TIMEOUT_S:.0f}s"
                ) from None
            if busy:
                raise SandboxSaturatedError("the sandbox's processes survived being killed for a second")
            if busy is not None:
                return
        self._stop_by_exec(container_id)

    def _stop_by_exec(self, container_id: str) -> None:
        """Run :data:`shell.STOP` in an exec of its own (retried while the runtime finds no process slot to start
        it in); a command server dies with the rest."""
        for _ in range(3):
            try:
                exec_id, streams = self._stream(
                    container_id,
                    shell.stop_command(),
                    None,
                    time.monotonic() + _STOP_TIMEOUT_S,
                    lambda: shell.OutputCapture(1024),
                )
            except shell.Backstop:
                self._raise_if_dead(container_id)
                raise SandboxSaturatedError(
                    f"killing the sandbox's processes took over {_STOP_TIMEOUT_S:.0f}s"
                ) from None
            records = streams.records
            if records:
                if records[0] == b"busy":
                    raise SandboxSaturatedError("the sandbox's processes survived being killed for a second")
                return
            if self._exit_without_trailer(container_id, exec_id) != _NOT_STARTED:
                break
            time.sleep(0.2)
        raise SandboxSaturatedError(
            f"the sandbox's process table (pids limit {self.config.pids_limit}) stays "
            f"full: no process could be started to clear it ({streams.stdout.text()[:200]})"
        )

    @contextlib.contextmanager
    def _watching_disk(self, container_id: str) -> Iterator[None]:
        """Measure the writable layer every :data:`_DISK_WATCH_S` while a command runs, and kill the agent's
        processes once it is over the limit. A check after the command alone let one command write without
        bound before anything measured (five 1.9 GB files at once put 9.3 GB on the host against a 2 GiB
        limit); now a command gets as far past the limit as the disk writes in one poll and one walk. Only
        where the engine enforces no quota and the layer is read here (polls cost one ``statvfs``)."""
        if self.config.disk_limit is None or disk.engine_enforces_size(self.image):
            yield
            return
        meter = self._meter_for(container_id)
        if not meter.watchable:
            yield
            return
        stop = threading.Event()

        def watch() -> None:
            try:
                while not stop.wait(_DISK_WATCH_S):
                    if meter.over_while_running():
                        self._kill_agent_processes(container_id)
                        return
            except (OSError, DiskLimitError):
                return  # the check after the command measures again, and raises, in the command's own thread

        thread = threading.Thread(target=watch, name="agentgym-disk-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _kill_agent_processes(self, container_id: str) -> None:
        """``kill -9 -1`` as the sandbox user in an exec of its own: the command server is busy with the
        command being stopped, and its reply (the processes gone) ends that command."""
        client = engine.api()
        try:
            exec_id = client.exec_create(container_id, ["/bin/sh", "-c", "kill -9 -1"], user=self.config.user)["Id"]
            client.exec_start(exec_id)
        except (docker.errors.APIError, requests.exceptions.RequestException):
            pass  # no process slot for the kill: the check after the command still ends the episode

    def _meter_for(self, container_id: str) -> disk.DiskMeter:
        """The meter of the container's writable layer (made anew for a new container)."""
        assert self.config.disk_limit is not None
        if self._meter is None or self._meter.container_id != container_id:
            self._meter = disk.DiskMeter(container_id, self.config.disk_limit, self._disk_used)
        return self._meter

    def _check_disk(self, container_id: str, *, force: bool = False, snapshot: bool = False) -> int:
        """Raise DiskLimitError when the sandbox has written more than its limit; the bytes written (0 where
        there is no limit). Where the engine enforces the limit (a quota) nothing is checked, and only a
        ``snapshot`` measures: its forks' quotas leave out what its layers hold."""
        if self.config.disk_limit is None:
            return 0
        quota = disk.engine_enforces_size(self.image)
        if quota and not snapshot:
            return 0
        meter = self._meter_for(container_id)
        if quota:
            return meter.measure(force=True)
        meter.check(force=force)
        return meter.size

    # ------------------------------------------------------------------ files

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular file, read as the sandbox user (symlinks followed); FileNotFoundError,
        PermissionError or IsADirectoryError as the agent would get them.

        At most ``max_bytes`` (default ``config.max_read_bytes``) come back: a larger file raises
        :class:`~agentgym.sandbox.base.FileTooLargeError` before its content is transferred.
        """
        limit = self.config.max_read_bytes if max_bytes is None else max_bytes
        with self._lock:
            container_id = self._running_id()
            path = self._absolute(path)
            code, out, err = self._call(
                container_id, ["/bin/sh", "-c", _READ, "agentgym", path, str(limit)], what=path, max_bytes=limit
            )
        if code == _TOO_LARGE:
            raise FileTooLargeError(path, int(out), limit)
        if code != 0:
            raise _os_error(path, code, err)
        return out

    def read_lines(
        self, path: str, start: int = 1, end: int | None = None, *, max_bytes: int = 64 * 1024
    ) -> tuple[bytes, int, bool]:
        """Lines ``start``..``end`` (1-based, inclusive; ``end=None``: to the end) of a file, read as the
        sandbox user and cut in the container after ``max_bytes``: ``(bytes, the file's line count,
        whether they were cut)``. Pages through a file of any size, or with lines of any length, at the
        cost of reading it once in the container to count its lines."""
        if start < 1 or (end is not None and end < start):
            raise ValueError(f"bad line range {start}..{end}")
        count = "" if end is None else str(end - start + 1)
        with self._lock:
            container_id = self._running_id()
            path = self._absolute(path)
            argv = ["/bin/sh", "-c", _READ_LINES, "agentgym", path, str(start), count, str(max_bytes)]
            code, out, err = self._call(container_id, argv, what=path, max_bytes=max_bytes + 64)
        if code != 0:
            raise _os_error(path, code, err)
        total, _, data = out.partition(b"\n")
        return data[:max_bytes], int(total), len(data) > max_bytes

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        """Write a file as the sandbox user, creating missing parent directories as that user. Fails with
        the OSError the agent's own shell would get (PermissionError in /etc, EFBIG past the disk
        limit, ...). ``mode`` is applied when given; else a new file gets 0644, an existing one keeps its own."""
        payload = data.encode() if isinstance(data, str) else data
        with self._lock:
            self._write(self._running_id(), self._absolute(path), payload, mode)

    def _write(self, container_id: str, path: str, payload: bytes, mode: int | None) -> None:
        argv = ["/bin/sh", "-c", _WRITE, "agentgym", path, posixpath.dirname(path), "" if mode is None else f"{mode:o}"]
        code, _, err = self._call(container_id, argv, what=path, max_bytes=64 * 1024, stdin=payload)
        if code != 0:
            raise _os_error(path, code, err)

    def put_tree(self, dest_dir: str, source: str | Path | bytes) -> None:
        """Copy a host directory into ``dest_dir`` (created if missing), or extract tar bytes there, in one
        call. The archive is extracted by the sandbox user (modes and times kept), so it lands only where
        the agent could write itself, whatever links the agent left on the way."""
        data = source if isinstance(source, bytes) else tar_directory(Path(source), self.config)
        with self._lock:
            container_id = self._running_id()
            dest = self._absolute(dest_dir)
            code, _, err = self._call(
                container_id, ["/bin/sh", "-c", _EXTRACT, "agentgym", dest], what=dest, max_bytes=64 * 1024, stdin=data
            )
        if code != 0:
            raise SandboxError(f"extracting into {dest}: {err.decode(errors='replace').strip()[-500:]}")

    def fs_hash(self, paths: Iterable[str] = ("/workspace",)) -> str:
        """A digest of the trees at ``paths``: relative paths, types, modes, file contents and symlink
        targets; owners and mtimes are left out, so equal work in two sandboxes gives equal digests.
        The trees stream through the hash: their size does not weigh on the host's memory."""
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
                for entry in sorted(_tree_entries(chunks)):
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

    # ------------------------------------------------------------------ branching

    def snapshot(self) -> DockerSnapshot:
        """Commit the container (paused for consistency) to an image labelled as a snapshot."""
        with self._lock:
            container_id = self._running_id()
            # What the commit holds counts against the disk limit of every sandbox started from it.
            disk_used = self._check_disk(container_id, force=True, snapshot=True)
            change = label_change(labels.owner_labels(labels.KIND_SNAPSHOT))
            with engine.engine_errors("committing a snapshot"):
                image_id = engine.api().commit(container_id, changes=[change], pause=True)["Id"]
            cleanup.track_snapshot(image_id, parent=self.image)
            if self._pool is not None and self._start_image is not None:
                # Read while the caller goes on, for fast forks.
                fs_diff.prepare(image_id, self._start_image, self.config.uid_gid)
            return DockerSnapshot(
                ref=image_id,
                cwd=self._state.cwd,
                env=dict(self._state.env),
                metadata={"image": image_id, "parent": self.image, "disk_used": disk_used},
                pool=self._pool,
                start=self._start_image,
            )

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Pause every process in the container (the engine's freezer) for the block, so that what the host reads
        of it meanwhile (the engine's diff, then a :meth:`snapshot`) is one moment of it, whatever its processes
        would do between the two. Commands wait until the block ends."""
        with self._lock:
            container_id = self._running_id()
            with engine.engine_errors("pausing the sandbox"):
                engine.api().pause(container_id)
            try:
                yield
            finally:
                with engine.engine_errors("resuming the sandbox"):
                    engine.api().unpause(container_id)

    def restore(self, snapshot: SandboxSnapshot) -> None:
        """Replace this sandbox's container by one at ``snapshot``'s state, as :meth:`from_snapshot` makes it
        (the old one goes in the background)."""
        with self._lock:
            self._running_id()
            old_id, old_starting, old_server = self._container_id, self._starting, self._server
            warm = self._warm_sandbox(snapshot, self.config)
            if warm is not None:
                self._container_id, self._starting, self._disk_used = warm._container_id, None, 0
                self._server, warm._closed = warm._server, True  # its container and server are this sandbox's now
                warm._finalizer.detach()
            else:
                replacement = create_container(
                    snapshot.ref, self.config, labels.KIND_SANDBOX, disk_used=snapshot.metadata.get("disk_used", 0)
                )
                self._container_id, self._starting = replacement, engine.submit(start_container, replacement)
                self._disk_used = snapshot.metadata.get("disk_used", 0)
            self.image = snapshot.ref
            self._state = _snapshot_state(snapshot)
        try:
            if warm is not None and old_server is not None:
                old_server.close()
        finally:  # nothing else holds the old container now
            engine.submit(_remove_when_started, old_id, old_starting)

    def fork(self, snapshot: SandboxSnapshot | None = None) -> DockerSandbox:
        """An independent sandbox at ``snapshot`` (default: this sandbox's state now); this one goes on unchanged."""
        source = snapshot or self.snapshot()
        try:
            return DockerSandbox.from_snapshot(source, config=self.config)
        finally:
            if snapshot is None:
                source.release()  # deferred by the engine bookkeeping until the fork is closed

    def close(self, wait: bool = True) -> None:
        """Remove the container (idempotent), which ends every process in it; ``wait=False`` removes it
        in the background."""
        with self._close_lock:  # not the command lock: closing must not wait for a running command
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()
        try:
            if self._server is not None:
                self._server.close()
        finally:  # the container goes whatever closing its channel raised: nothing else would remove it
            removal = engine.submit(_remove_when_started, self._container_id, self._starting)
        if wait:
            removal.result()

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"cwd={self.cwd!r}"
        return f"DockerSandbox({self._container_id[:12]}, image={self.image!r}, {state})"


def _start_command_server(container_id: str, image: str, config: SandboxConfig) -> object:
    """The warm pool's preparer: a pooled container's command server, started before anyone takes it."""
    sandbox = DockerSandbox(container_id, image, config)
    sandbox._finalizer.detach()  # never closed: the container stays in the pool for its taker
    return sandbox._server if sandbox.start_command_server() else None


set_preparer(_start_command_server)


# File operations run as the sandbox user through these scripts (under shell.PLAIN, so only system
# directories are on $PATH): a file tool then does nothing the agent's own shell could not, since
# the kernel checks every permission and resolves every symlink as it would for the agent, at the
# moment of the access (no check-then-write race). $1 is an absolute path.
_READABLE = r"""
[ -d "$1" ] && { echo "Is a directory" >&2; exit 1; }
[ -e "$1" ] && ! [ -f "$1" ] && { echo "not a regular file" >&2; exit 1; }
true <"$1" || exit 1
"""
_TOO_LARGE = 3  # _READ's exit status for a file over the limit (its size on stdout)
# $2: the most bytes to send; a file that grows meanwhile still sends at most one byte more.
_READ = (
    _READABLE
    + r"""
size=$(stat -L -c %s -- "$1") || exit 1
[ "$size" -gt "$2" ] && { printf %s "$size"; exit 3; }
exec head -c "$(($2 + 1))" -- "$1"
"""
)
# $2 the first line, $3 how many ("": to the end), $4 the most bytes to send; the line count first.
# tail and head stream, so neither a huge file nor a huge line is held in memory.
_READ_LINES = (
    _READABLE
    + r"""
n=$(wc -l <"$1") || exit 1
[ -s "$1" ] && [ "$(tail -c 1 -- "$1" | wc -l)" = 0 ] && n=$((n + 1))
echo "$n"
if [ -n "$3" ]; then tail -n "+$2" -- "$1" | head -n "$3"; else tail -n "+$2" -- "$1"; fi | head -c "$(($4 + 1))"
"""
)
# $2 the parent directory, $3 an octal mode or ""; the content comes on stdin.
_WRITE = r"""
[ -d "$1" ] && { echo "Is a directory" >&2; exit 1; }
mkdir -p -- "$2" && cat >"$1" || exit 1
[ -z "$3" ] || chmod -- "$3" "$1"
"""
_EXTRACT = r"""
mkdir -p -- "$1" && cd -- "$1" && exec tar -x -p --no-same-owner -f -
"""
# The errors that file operations report, as the OSError subclasses Python gives them, found by
# their strerror text (which the container's libc and this one spell alike; dash shortens ENOENT).
_ERROR_TEXTS = [
    (os.strerror(code), code)
    for code in (
        errno.EACCES,
        errno.EPERM,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.EFBIG,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.ELOOP,
        errno.ENAMETOOLONG,
        errno.ETXTBSY,
    )
] + [("No such file", errno.ENOENT)]
_SIGXFSZ_EXIT = 128 + 25  # killed for writing past the per-file size limit


def _os_error(path: str, exit_code: int, stderr: bytes) -> OSError:
    text = stderr.decode(errors="replace").strip()
    if exit_code == _SIGXFSZ_EXIT:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), path)
    for message, code in _ERROR_TEXTS:
        if message in text:
            return OSError(code, os.strerror(code), path)
    return OSError(f"{path}: {text.splitlines()[-1] if text else f'failed with exit status {exit_code}'}")


def _hijack(client: docker.APIClient, exec_id: str):
    """Start an exec on an upgraded connection: (response, buffered reader, socket)."""
    # docker-py's socket=True hands back the raw socket and so loses whatever http.client
    # buffered past the 101 headers; reading through the buffered reader keeps those bytes.
    response = client._post_json(
        client._url("/exec/{0}/start", exec_id),
        data={"Tty": False, "Detach": False},
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        stream=True,
    )
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


class _ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (Docker's archive stream), for tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._chunk:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk = memoryview(chunk)
        n = min(len(buffer), len(self._chunk))
        buffer[:n] = self._chunk[:n]
        self._chunk = self._chunk[n:]
        return n


def _tree_entries(chunks: Iterable[bytes]) -> Iterable[tuple[str, str, int, str]]:
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks), 1 << 16), mode="r|") as tar:
        for member in tar:
            # Docker names entries after the requested path's basename; drop it.
            relative = member.name.partition("/")[2]
            if member.isfile():
                content = hashlib.sha256()
                stream = tar.extractfile(member)
                for block in iter(functools.partial(stream.read, 1 << 20), b""):
                    content.update(block)
                digest = content.hexdigest()
            else:
                digest = member.linkname.partition("/")[2] if member.islnk() else member.linkname
            yield relative, member.type.decode(), member.mode, digest
