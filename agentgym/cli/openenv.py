"""`agentgym openenv serve` and `agentgym openenv init`: an agentgym env over OpenEnv's protocol, or a deployable env directory."""

from __future__ import annotations

import argparse

from agentgym.cli.common import UsageError, listening


def _openenv_serve(args: argparse.Namespace) -> int:
    from agentgym.integrations.openenv.server import check_env_builds, resolve_env_id, serve

    if args.max_sessions < 1:
        raise UsageError(f"--max-sessions must be at least 1, got {args.max_sessions}")
    if args.fork_ttl <= 0:
        raise UsageError(f"--fork-ttl must be positive, got {args.fork_ttl:g}")
    try:
        env_id = resolve_env_id(args.env_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        check_env_builds(env_id)
    except Exception as exc:  # an env that needs what this machine lacks: say so in one line
        raise UsageError(f"cannot build {env_id}: {type(exc).__name__}: {exc}") from None
    with listening(args.host, args.port):
        serve(
            env_id,
            host=args.host,
            port=args.port,
            max_sessions=args.max_sessions,
            images=not args.no_images,
            fork_ttl=args.fork_ttl,
            idle_timeout=args.idle_timeout,
        )
    return 0


def _openenv_init(args: argparse.Namespace) -> int:
    from agentgym.integrations.openenv.server import write_env_dir

    try:
        written = write_env_dir(args.env_id, args.dir, max_sessions=args.max_sessions, port=args.port)
    except (ValueError, FileExistsError) as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(path)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    openenv = commands.add_parser(
        "openenv", help="serve an agentgym env as an OpenEnv environment, or write a deployable env directory"
    ).add_subparsers(dest="action", required=True)
    openenv_serve = openenv.add_parser(
        "serve",
        help="serve a registered env with OpenEnv's server (WebSocket sessions, each with its own env; "
        "branching through the snapshot/restore/release/fork MCP tools)",
    )
    openenv_serve.add_argument(
        "env_id", help="a registered id, e.g. agentgym/code.humaneval-v0 (agentgym/ may be left out)"
    )
    openenv_serve.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    openenv_serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    openenv_serve.add_argument(
        "--max-sessions", type=int, default=8, help="concurrent sessions, each with its own env (default: %(default)s)"
    )
    openenv_serve.add_argument("--no-images", action="store_true", help="leave screenshots out of observations")
    openenv_serve.add_argument(
        "--fork-ttl", type=float, default=300.0, help="seconds an unclaimed fork id is kept (default: %(default)s)"
    )
    openenv_serve.add_argument(
        "--idle-timeout", type=float, help="close a session that sent nothing for this many seconds (default: never)"
    )
    openenv_serve.set_defaults(run=_openenv_serve)
    openenv_init = openenv.add_parser(
        "init", help="write a deployable OpenEnv env directory (openenv.yaml, server/app.py, pyproject.toml)"
    )
    openenv_init.add_argument("env_id", help="a registered id (agentgym/ may be left out)")
    openenv_init.add_argument("dir", help="the directory to create (must not exist, or be empty)")
    openenv_init.add_argument("--max-sessions", type=int, default=8, help="(default: %(default)s)")
    openenv_init.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    openenv_init.set_defaults(run=_openenv_init)
