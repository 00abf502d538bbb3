"""The Sandbox protocol: what every isolated execution backend (Docker, desktop) offers to environments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentgym.core import ResourceLimitExceeded


class SandboxError(RuntimeError):
    """A sandbox operation failed for a reason the caller cannot fix by retrying the same call."""


class SandboxUnavailableError(SandboxError):
    """The backend (engine, image) is missing; the message names the command that provides it."""


class SandboxSaturatedError(SandboxError, ResourceLimitExceeded):
    """The sandbox's process table stays full after its processes were swept (a fork bomb left running
    in the background): no command can run in it any more. The agent's doing, so an env step scores it
    as a failure (:class:`~agentgym.core.ResourceLimitExceeded`), not an env error."""


class DiskLimitError(SandboxError, ResourceLimitExceeded):
    """The sandbox wrote more than ``SandboxConfig.disk_limit`` where the engine has no quota to stop it
    (see :mod:`agentgym.sandbox.disk`); the episode cannot go on, and it is the agent's failure."""


class FileTooLargeError(OSError):
    """A file in the sandbox is larger than the host agreed to read back (the sandbox is fine).

    Every byte the host reads from a sandbox is bounded, so that an agent cannot exhaust the
    harness's memory with one huge (or sparse) file; callers say so to the agent or fail a grade.
    """

    def __init__(self, path: str, size: int | None, limit: int):
        amount = "" if size is None else f" {size} bytes,"
        super().__init__(f"{path} is{amount} over the {limit}-byte limit on what is read back from the sandbox")
        self.path, self.size, self.limit = path, size, limit  # size: None when the read stopped at the limit


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command: exit code, captured output and whether a limit cut it short.

    ``exit_code`` is 124 when the wall-clock timeout killed the command (the coreutils
    convention). ``truncated`` is true when output exceeded the cap; the kept output then
    contains a note saying how many bytes were dropped.
    """

    exit_code: int
    stdout: str
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout and stderr together, in the form an agent observation shows them."""
        if self.stderr and self.stdout:
            return f"{self.stdout.rstrip()}\n{self.stderr}"
        return self.stdout or self.stderr


@dataclass
class SandboxSnapshot:
    """A backend's handle to a captured sandbox state (for Docker: a committed image id).

    ``release()`` frees the backend resource; it is idempotent. Environments wrap this in the
    reference-counted :class:`agentgym.snapshot.Snapshot`; callers do not use it directly.
    """

    ref: str
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)

    def release(self) -> None:  # pragma: no cover - backends override via their subclass
        raise NotImplementedError


@runtime_checkable
class Sandbox(Protocol):
    """An isolated machine an environment runs commands in and captures state from."""

    cwd: str
    env: dict[str, str]

    def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run a shell command in bash with a wall-clock timeout; ``cd`` and exported variables carry
        over to later commands. Never raises for a failing or hanging command, only for a dead sandbox."""

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes: ...

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None: ...

    def snapshot(self) -> SandboxSnapshot: ...

    def restore(self, snapshot: SandboxSnapshot) -> None: ...

    def fork(self, snapshot: SandboxSnapshot | None = None) -> Sandbox: ...

    def close(self) -> None: ...
