"""The `agentgym` command line: list envs and their tasks, build sandbox images, reap leftover sandboxes, serve a model over an OpenAI-compatible API, evaluate a model on a suite, train, inspect memory stores.

What cannot run as asked (a missing file, a malformed config, an unknown env, a port in use) is a
:class:`UsageError`: one ``agentgym <command>: ...`` line on stderr and exit code 2.

Each command group is a module of this package (:mod:`.envs`, :mod:`.sandbox`, :mod:`.serve`,
:mod:`.openenv`, :mod:`.eval`, :mod:`.memory`, :mod:`.train`) with the functions that run its
commands and an ``add_commands`` that adds them to the parser; :mod:`.common` holds what they share.
"""

from __future__ import annotations

import argparse
import os
import sys

from agentgym.cli import envs, memory, openenv, sandbox, serve, train
from agentgym.cli import eval as evaluation
from agentgym.cli.common import UsageError

__all__ = ["build_parser", "main"]

# The order of `agentgym --help`.
GROUPS = (envs, sandbox, serve, openenv, evaluation, memory, train)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__.split(":")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from agentgym.distributed.cluster import ClusterUnavailableError
    from agentgym.sandbox.base import SandboxUnavailableError

    try:
        code = args.run(args)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here, not at interpreter exit
        return code
    except UsageError as exc:
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"agentgym {command}: {' '.join(str(exc).split())}", file=sys.stderr)
        raise
    except (SandboxUnavailableError, ClusterUnavailableError) as exc:
        print(f"agentgym: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left early (`agentgym envs list | head`): stop quietly, as Unix tools do.
        # Pointing stdout at /dev/null keeps the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
