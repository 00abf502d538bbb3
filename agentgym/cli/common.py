"""What every `agentgym` command shares: :class:`UsageError` (one ``agentgym <command>:`` line, exit 2), a local model directory checked, a server socket that cannot be bound, numbers printed alike."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Iterator

__all__ = ["UsageError", "fmt", "full_env_id", "listening", "model_dir"]


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


def full_env_id(text: str) -> str:
    """An env id from the command line as gymnasium takes it: ``agentgym/`` added where the namespace is left out.

    In gymnasium's ``module:id`` form (``guess_env:Guess-v0``) the module is imported first, from the
    working directory as under ``python -m``, so that an env a local file registers can be named; a module
    that cannot be imported is a usage error.
    """
    module, colon, name = text.rpartition(":")
    if colon:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UsageError(f"cannot import {module!r} for {text}: {exc}") from None
    return name if "/" in name else f"agentgym/{name}"


def model_dir(name: str, flag: str) -> str:
    """The directory of the model ``flag`` names: ``tiny``, ``tiny-vlm`` or a local model directory."""
    from agentgym.models import resolve_model

    try:
        return resolve_model(name)
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
