"""`agentgym envs list` and `agentgym tasks`: the registered envs and one env's tasks."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from agentgym.core import AgentEnv

from agentgym.cli.common import UsageError, full_env_id


def _envs_list(args: argparse.Namespace) -> int:
    import fnmatch

    from agentgym.registration import describe_env, registered_env_ids

    pattern = args.pattern or "*"
    if not any(ch in pattern for ch in "*?["):
        pattern = f"*{pattern}*"  # a plain word matches anywhere in the id
    ids = [env_id for env_id in registered_env_ids() if fnmatch.fnmatch(env_id.lower(), pattern.lower())]
    if not ids:
        raise UsageError(f"no registered env id matches {args.pattern!r} (`agentgym envs list` shows them all)")
    rows = [(env_id, *describe_env(env_id, count_tasks=args.tasks)) for env_id in ids]
    width = max(len(env_id) for env_id, _, _ in rows)
    counts = f"{'tasks':>5}  " if args.tasks else ""
    print(f"{'id':{width}}  {counts}description")
    for env_id, tasks, description in rows:
        counts = f"{'?' if tasks is None else tasks:>5}  " if args.tasks else ""
        print(f"{env_id:{width}}  {counts}{description}")
    if not args.pattern:
        print(f"{len(rows)} envs; `agentgym envs list WORD` filters them (e.g. miniwob, web., bfcl)", file=sys.stderr)
    return 0


def _tasks(args: argparse.Namespace) -> int:
    """``agentgym tasks ENV_ID [PATTERN]``."""
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.core import select_tasks

    name = full_env_id(args.env_id)
    try:
        gymnasium.spec(name)
    except gymnasium.error.Error as exc:
        raise UsageError(f"{exc} (`agentgym envs list` shows the ids)") from None
    try:
        env = gymnasium.make(name)
    except Exception as exc:  # an env that needs what this machine lacks: say so in one line
        raise UsageError(f"cannot build {name}: {type(exc).__name__}: {exc}") from None
    try:
        tasks = list(cast("AgentEnv", env.unwrapped).tasks())
    finally:
        env.close()
    if args.pattern:
        pattern = args.pattern if any(ch in args.pattern for ch in "*?[") else f"*{args.pattern}*"
        try:
            wanted = set(select_tasks([task.id for task in tasks], pattern))
        except ValueError:
            raise UsageError(f"no task of {name} matches {args.pattern!r}") from None
        tasks = [task for task in tasks if task.id in wanted]
    id_width = max(len("id"), *(len(task.id) for task in tasks))
    category_width = max(len("category"), *(len(task.category) for task in tasks))
    print(f"{'id':{id_width}}  {'category':{category_width}}  solution")
    for task in tasks:
        solution = "yes" if task.has_reference_solution else "no"
        print(f"{task.id:{id_width}}  {task.category:{category_width}}  {solution}")
    return 0


def _add_tasks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "env_id",
        help="a registered id, e.g. agentgym/code.humaneval-v0 (the agentgym/ may be left out), or MODULE:ID for an "
        "env registered by a module in the working directory, e.g. guess_env:Guess-v0",
    )
    parser.add_argument(
        "pattern", nargs="?", help="only task ids containing this word, or matching this glob, e.g. 'HumanEval/1*'"
    )
    parser.set_defaults(run=_tasks)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    envs = commands.add_parser("envs", help="environments").add_subparsers(dest="action", required=True)
    listing = envs.add_parser("list", help="list registered envs: id and description (with --tasks, number of tasks)")
    listing.add_argument(
        "pattern",
        nargs="?",
        help="only ids containing this word, or matching this glob "
        "(case-insensitive), e.g. miniwob or 'agentgym/web.*'",
    )
    listing.add_argument(
        "--tasks",
        action="store_true",
        help="also count each env's tasks (builds every listed env: seconds for all of them; `agentgym tasks ENV_ID` "
        "lists one env's)",
    )
    listing.set_defaults(run=_envs_list)
    _add_tasks_arguments(
        commands.add_parser(
            "tasks",
            help="list one env's tasks: id (for reset(options={'task_id': ...}) and --tasks), category, "
            "and whether it has a reference solution",
        )
    )
