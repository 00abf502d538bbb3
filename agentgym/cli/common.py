"""What every `agentgym` command shares: :class:`UsageError` (one ``agentgym <command>:`` line, exit 2), a local model directory checked, a server socket that cannot be bound, numbers printed alike."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

__all__ = ["UsageError", "fmt", "listening", "model_dir"]


class UsageError(SystemExit):
    """What the user asked for cannot run; :func:`main` prints it as one ``agentgym <command>:`` line and exits 2.

    A SystemExit with code 2, like argparse's own usage errors, so ``main()`` called from
    Python ends the same way the command does.
    """

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def model_dir(path: str, flag: str) -> str:
    from agentgym.models import local_model_dir

    try:
        return local_model_dir(path)
    except ValueError as exc:
        raise UsageError(f"{flag} {exc}") from None


@contextlib.contextmanager
def listening(host: str, port: int) -> Iterator[None]:
    """A server's socket that cannot be bound (in use, not allowed, not this machine's) is a usage error."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        raise


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)
