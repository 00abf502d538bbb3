"""The `agentgym` command line: list envs and their tasks, build sandbox images, reap leftover sandboxes, serve a model over an OpenAI-compatible API, evaluate a model on a suite, train, inspect memory stores.

What cannot run as asked (a missing file, a malformed config, an unknown env, a port in use) is a
:class:`UsageError`: one ``agentgym <command>: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from agentgym.core import AgentEnv


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


def _model_dir(path: str, flag: str) -> str:
    from agentgym.models import local_model_dir

    try:
        return local_model_dir(path)
    except ValueError as exc:
        raise UsageError(f"{flag} {exc}") from None


def _envs_list(args: argparse.Namespace) -> int:
    import fnmatch

    from agentgym.registration import describe_env, registered_env_ids

    pattern = args.pattern or "*"
    if not any(ch in pattern for ch in "*?["):
        pattern = f"*{pattern}*"  # a plain word matches anywhere in the id
    ids = [env_id for env_id in registered_env_ids() if fnmatch.fnmatch(env_id.lower(), pattern.lower())]
    if not ids:
        raise UsageError(f"no registered env id matches {args.pattern!r} (`agentgym envs list` shows them all)")
    rows = [(env_id, *describe_env(env_id)) for env_id in ids]
    width = max(len(env_id) for env_id, _, _ in rows)
    print(f"{'id':{width}}  {'tasks':>5}  description")
    for env_id, tasks, description in rows:
        print(f"{env_id:{width}}  {'?' if tasks is None else tasks:>5}  {description}")
    if not args.pattern:
        print(f"{len(rows)} envs; `agentgym envs list WORD` filters them (e.g. miniwob, web., bfcl)", file=sys.stderr)
    return 0


def _tasks(args: argparse.Namespace) -> int:
    """``agentgym tasks ENV_ID [PATTERN]`` (and its older spelling ``agentgym envs tasks``)."""
    import warnings

    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.core import select_tasks

    env_id = args.env_id if "/" in args.env_id else f"agentgym/{args.env_id}"
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as exc:
        raise UsageError(f"{exc} (`agentgym envs list` shows the ids)") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        try:
            env = gymnasium.make(env_id)
        except Exception as exc:  # an env that needs what this machine lacks: say so in one line
            raise UsageError(f"cannot build {env_id}: {type(exc).__name__}: {exc}") from None
    for warning in caught:
        if issubclass(warning.category, DeprecationWarning):
            print(f"agentgym: {warning.message}", file=sys.stderr)
    try:
        tasks = list(cast("AgentEnv", env.unwrapped).tasks())
    finally:
        env.close()
    if args.pattern:
        pattern = args.pattern if any(ch in args.pattern for ch in "*?[") else f"*{args.pattern}*"
        try:
            wanted = set(select_tasks([task.id for task in tasks], pattern))
        except ValueError:
            raise UsageError(f"no task of {env_id} matches {args.pattern!r}") from None
        tasks = [task for task in tasks if task.id in wanted]
    id_width = max(len("id"), *(len(task.id) for task in tasks))
    category_width = max(len("category"), *(len(task.category) for task in tasks))
    print(f"{'id':{id_width}}  {'category':{category_width}}  solution")
    for task in tasks:
        solution = "yes" if task.has_reference_solution else "no"
        print(f"{task.id:{id_width}}  {task.category:{category_width}}  {solution}")
    return 0


def _images_build(args: argparse.Namespace) -> int:
    if args.desktop:
        if args.dockerfile:
            raise UsageError("--desktop is built from Debian packages; it takes no --dockerfile")
        from agentgym.sandbox.desktop import build_desktop_image

        print(build_desktop_image(force=args.force))
        return 0
    from agentgym.sandbox.images import build_base_image

    if args.dockerfile and not Path(args.dockerfile).is_file():
        raise UsageError(f"--dockerfile {args.dockerfile!r}: no such file")
    tag = build_base_image(force=args.force, dockerfile=args.dockerfile)
    print(tag)
    return 0


def _sandbox_gc(args: argparse.Namespace) -> int:
    from agentgym.sandbox.docker import gc

    report = gc(all=args.all)
    print(json.dumps(report, indent=2, default=str))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from agentgym.serve import serve

    _model_dir(args.model, "--model")
    with _listening(args.host, args.port):
        serve(
            args.model,
            host=args.host,
            port=args.port,
            max_batch_size=args.max_batch_size,
            served_model_name=args.served_model_name,
            device=args.device,
            allow_weight_updates=args.allow_weight_updates,
        )
    return 0


@contextlib.contextmanager
def _listening(host: str, port: int) -> Iterator[None]:
    """A server's socket that cannot be bound (in use, not allowed, not this machine's) is a usage error."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        raise


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
    with _listening(args.host, args.port):
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


def _make_policy(args: argparse.Namespace):
    """``--policy``: an http(s) URL, a local model directory, ``oracle`` or ``nonsense`` (see ``agentgym eval --help``)."""
    from agentgym.eval import oracles

    if args.policy == "oracle":
        return oracles.oracle_for
    if args.policy == "nonsense":
        return oracles.NonsensePolicy()
    if args.policy.startswith(("http://", "https://")):
        if not args.model:
            raise UsageError("--model is required with an endpoint URL")
        from agentgym.rollout.openai_policy import OpenAIPolicy

        return OpenAIPolicy(args.policy, args.model, tokenizer=args.tokenizer)
    if Path(args.policy).is_dir():
        from agentgym.rollout.hf_policy import HFPolicy

        return HFPolicy(_model_dir(args.policy, "--policy"))
    raise UsageError(f"--policy {args.policy!r} is not a URL, a model directory, 'oracle' or 'nonsense'")


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = (
        "success_rate",
        "success_ci95",
        *(f"pass@{j}" for j in summary["metrics"]["pass_at_k"]),
        "mean_turns",
        "env_error_rate",
    )

    def cells(metrics: dict) -> list[str]:
        values = {
            "success_rate": metrics["success_rate"],
            "success_ci95": metrics["success_ci95"],
            **{f"pass@{j}": v for j, v in metrics["pass_at_k"].items()},
            "mean_turns": metrics["mean_turns"],
            "env_error_rate": metrics["env_error_rate"],
        }
        return [_fmt(values[c]) for c in columns]

    table = Table(
        title=f"{summary['suite']} · {summary['model']} · k={summary['k']} · "
        f"{summary['episodes']} episodes of {summary['tasks']} tasks"
    )
    for column in ("category", *columns):
        table.add_column(column)
    for category, metrics in summary["by_category"].items():
        table.add_row(category, *cells(metrics))
    table.add_row("all", *cells(summary["metrics"]), style="bold")
    console = Console()
    if not console.is_terminal:
        console.width = 160  # rich assumes 80 columns for a pipe, which would cut the headers
    console.print(table)
    errors = summary.get("errors") or {}
    if errors:
        print("failed episodes by error: " + ", ".join(f"{kind} {count}" for kind, count in errors.items()))
    if errors.get("context_overflow"):
        print(
            f"{errors['context_overflow']} episode(s) outgrew the model's context window (counted as failures): "
            "lower --max-turns, or serve the model with a longer context"
        )


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _eval(args: argparse.Namespace) -> int:
    import asyncio

    from agentgym.eval.harness import PolicyUnavailableError, evaluate
    from agentgym.eval.suites import load_suite

    if not args.suite or not args.policy:
        raise UsageError("--suite and --policy are required (or: agentgym eval compare RUN_A RUN_B)")
    try:
        suite = load_suite(args.suite).filter(args.tasks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_suite_envs(suite)
    memory = None
    if args.memory:
        from agentgym.memory.config import MemoryConfig

        try:
            memory = MemoryConfig(args.memory, mode=args.memory_mode)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    ray = None
    if args.ray:
        from agentgym.distributed.config import RayConfig

        try:
            ray = RayConfig(address=args.ray, env_workers=args.env_workers, envs_per_worker=args.envs_per_worker)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.env_workers is not None:
        raise UsageError("--env-workers needs --ray ADDRESS")
    images = _image_config(args)
    policy = _make_policy(args)
    out = args.out or f"runs/eval-{suite.name}"
    model = args.model or ("oracle" if args.policy == "oracle" else None)

    async def run() -> dict:
        try:
            return await evaluate(
                suite,
                policy,
                k=args.k,
                concurrency=args.concurrency,
                out_dir=out,
                max_turns=args.max_turns,
                timeout=args.timeout,
                seed=args.seed,
                model=model,
                memory=memory,
                screenshots=args.screenshots,
                images=images,
                ray=ray,
            )
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()

    try:
        summary = asyncio.run(run())
    except PolicyUnavailableError as exc:
        print(f"agentgym eval: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:  # e.g. --out holds a run with other settings
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(
            f"agentgym eval: interrupted; finished episodes are kept in {out}/results.jsonl "
            "(rerun the same command to resume)",
            file=sys.stderr,
        )
        return 130
    _print_summary(summary)
    print(f"results in {out}")
    return 0


_IMAGE_OPTIONS = {
    "image_keep": "keep_last",
    "image_max_side": "max_side",
    "image_format": "format",
    "image_quality": "quality",
    "image_max_bytes": "max_bytes",
}


def _image_config(args: argparse.Namespace):
    """``--images`` and its ``--image-*`` settings as an ImageConfig, or ``None`` (text only)."""
    given = [option for option in _IMAGE_OPTIONS if getattr(args, option) is not None]
    if not args.images:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --images")
        return None
    from agentgym.rollout.images import ImageConfig

    try:
        return ImageConfig(**{_IMAGE_OPTIONS[option]: getattr(args, option) for option in given})
    except ValueError as exc:
        raise UsageError(f"--images: {exc}") from None


def _check_suite_envs(suite) -> None:
    """Every env the suite names is registered (or a ``module:Class`` entry point), before any episode starts."""
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    for env_id, _ in suite.by_env():
        if ":" in env_id:
            continue
        try:
            gymnasium.spec(env_id)
        except gymnasium.error.Error:
            raise UsageError(
                f"suite {suite.name!r} names env {env_id!r}, which is not registered "
                "(`agentgym envs list` shows the ids)"
            ) from None


def _run_dir(path: str) -> Path:
    """A finished eval run's directory (``path`` may name its results.jsonl)."""
    folder = Path(path)
    if folder.name == "results.jsonl":
        folder = folder.parent
    missing = [name for name in ("results.jsonl", "summary.json") if not (folder / name).is_file()]
    if missing:
        what = "no such directory" if not folder.is_dir() else f"not an eval run (no {' or '.join(missing)})"
        raise UsageError(f"{path}: {what}; give the --out directory of an `agentgym eval` run")
    return folder


def _eval_compare(args: argparse.Namespace) -> int:
    from agentgym.eval.harness import load_results
    from agentgym.eval.metrics import compare
    from agentgym.eval.report import compare_report

    run_a, run_b = _run_dir(args.run_a), _run_dir(args.run_b)
    result = compare(load_results(run_a), load_results(run_b), seed=args.seed)
    if not result["tasks"]:
        raise UsageError(
            f"the two runs share no task ({result['only_a']} tasks only in A, {result['only_b']} only "
            "in B), so there is nothing to compare"
        )
    print(f"A = {args.run_a}\nB = {args.run_b}")
    for key, value in result.items():
        print(f"{key:18} {_fmt(value)}")
    print(f"report: {compare_report(run_a, run_b)}")
    return 0


def _memory_bank(args: argparse.Namespace, *, create: bool = False):
    """The bank at ``args.store``, or a clear exit when there is none (only import creates a store)."""
    from agentgym.memory.bank import MemoryBank

    if not create and not Path(args.store).is_file():
        raise UsageError(f"no memory store at {args.store}")
    return MemoryBank(args.store)


def _memory_line(entry) -> str:
    line = f"{entry.id:>6}  {entry.kind:8} {entry.title[:70]:70}  env={entry.env or '-'} family={entry.family or '-'}"
    if entry.kind == "skill" and isinstance(entry.data, dict):
        data = entry.data
        line += f"  utility={_fmt(data.get('utility'))} uses={data.get('uses', 0)} v{data.get('version', 1)}"
    return line


def _memory_list(args: argparse.Namespace) -> int:
    bank = _memory_bank(args)
    shown = 0
    for entry in bank.store.entries(kind=args.kind, env=args.env):
        if shown == args.limit:
            print("... more (raise --limit)")
            break
        print(_memory_line(entry))
        shown += 1
    if not shown:
        print("(no entries)")
    return 0


def _memory_show(args: argparse.Namespace) -> int:
    from agentgym.memory.bank import CorruptEntryError, Skill

    entry = _memory_bank(args).store.get(args.id)
    if entry is None:
        raise UsageError(f"no entry {args.id} in {args.store}")
    print(
        f"entry {entry.id}: {entry.kind}  env={entry.env or '-'} family={entry.family or '-'} task={entry.task or '-'}"
    )
    print(f"title: {entry.title}\ntags: {', '.join(entry.tags) or '-'}\n\n{entry.text}\n")
    if entry.kind == "skill":
        try:
            print(Skill.from_entry(entry).render() + "\n")
        except CorruptEntryError as exc:
            print(f"warning: {exc}", file=sys.stderr)
    print(json.dumps(entry.data, indent=2, default=str))
    return 0


def _memory_search(args: argparse.Namespace) -> int:
    hits = _memory_bank(args).store.search(args.query, k=args.k, kind=args.kind, env=args.env)
    for hit in hits:
        print(f"{hit.score:.4f}  {_memory_line(hit.entry)}")
    if not hits:
        print("(no match)")
    return 0


def _memory_prune(args: argparse.Namespace) -> int:
    report = _memory_bank(args).refine(
        merge_threshold=args.merge_threshold,
        min_uses=args.min_uses,
        prune_below=args.below,
        max_skills=args.max_skills,
        max_episodes=args.max_episodes,
    )
    print(json.dumps(report))
    return 0


def _memory_export(args: argparse.Namespace) -> int:
    import dataclasses

    bank = _memory_bank(args)
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    count = 0
    try:
        for entry in bank.store.entries(kind=args.kind):
            out.write(json.dumps(dataclasses.asdict(entry)) + "\n")
            count += 1
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"exported {count} entries", file=sys.stderr)
    return 0


def _memory_import(args: argparse.Namespace) -> int:
    import dataclasses

    from agentgym.memory.store import Entry

    fields = {f.name for f in dataclasses.fields(Entry)}
    entries = []
    # Every line is checked before anything is written: a bad file imports nothing.
    with open(args.file) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if (
                    not isinstance(row, dict)
                    or not isinstance(row.get("kind"), str)
                    or not isinstance(row.get("text"), str)
                ):
                    raise ValueError("each line needs a JSON object with string 'kind' and 'text'")
                if not isinstance(row.get("data", {}), dict):
                    raise ValueError("'data' must be a JSON object")
                unknown = sorted(set(row) - fields)
                if unknown:
                    raise ValueError(f"unknown fields {unknown}")
                row.pop("id", None)  # ids belong to the target store
                entries.append(Entry(**row))
            except (ValueError, TypeError) as exc:
                raise UsageError(f"{args.file}:{number}: {exc}") from None
    ids = _memory_bank(args, create=True).store.add_many(entries)
    print(f"imported {len(ids)} entries into {args.store}")
    return 0


def _memory(args: argparse.Namespace) -> int:
    """Run a memory subcommand; a store that cannot be read is a clear error, not a traceback."""
    import sqlite3

    from agentgym.memory.store import SchemaError

    try:
        return args.memory_run(args)
    except (sqlite3.DatabaseError, SchemaError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {args.store}: {type(exc).__name__}: {exc}") from None
    except OSError as exc:  # an import file or export target that cannot be opened
        raise UsageError(f"{exc.filename or args.store}: {exc.strerror or exc}") from None


def _train(args: argparse.Namespace) -> int:
    from agentgym.train import main as train_main

    return train_main(["--config", args.config, *args.overrides])


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help text at spaces only, so names like bfcl-miss_func stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _add_tasks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "env_id", help="a registered id, e.g. agentgym/code.humaneval-v0 (the agentgym/ may be left out)"
    )
    parser.add_argument(
        "pattern", nargs="?", help="only task ids containing this word, or matching this glob, e.g. 'HumanEval/1*'"
    )
    parser.set_defaults(run=_tasks)


def build_parser() -> argparse.ArgumentParser:
    from agentgym.eval.suites import BUILTIN_SUITES

    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__.split(":")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    envs = commands.add_parser("envs", help="environments").add_subparsers(dest="action", required=True)
    listing = envs.add_parser("list", help="list registered envs: id, number of tasks, description")
    listing.add_argument(
        "pattern",
        nargs="?",
        help="only ids containing this word, or matching this glob "
        "(case-insensitive), e.g. miniwob or 'agentgym/web.*'",
    )
    listing.set_defaults(run=_envs_list)
    _add_tasks_arguments(envs.add_parser("tasks", help="the same as `agentgym tasks`"))
    _add_tasks_arguments(
        commands.add_parser(
            "tasks",
            help="list one env's tasks: id (for reset(options={'task_id': ...}) and --tasks), category, "
            "and whether it has a reference solution",
        )
    )

    images = commands.add_parser("images", help="sandbox images").add_subparsers(dest="action", required=True)
    build = images.add_parser("build", help="build the base sandbox image offline (debootstrap + docker import)")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--dockerfile", help="build from this Dockerfile instead (needs a reachable registry)")
    build.add_argument(
        "--desktop",
        action="store_true",
        help="build the desktop image for the GUI envs instead (Xvfb, openbox, xdotool, apps)",
    )
    build.set_defaults(run=_images_build)

    sandbox = commands.add_parser("sandbox", help="sandboxes").add_subparsers(dest="action", required=True)
    gc = sandbox.add_parser("gc", help="remove containers and snapshot images left by dead processes")
    gc.add_argument("--all", action="store_true", help="remove every agentgym container and snapshot image")
    gc.set_defaults(run=_sandbox_gc)

    serve = commands.add_parser("serve", help="serve a local model over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", required=True, help="a local Hugging Face checkpoint directory")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    serve.add_argument(
        "--max-batch-size", type=int, default=16, help="requests per forward batch (default: %(default)s)"
    )
    serve.add_argument("--served-model-name", help="the model name clients send (default: the --model value)")
    serve.add_argument("--device", help="torch device, e.g. cuda:0 (default: the policy's choice)")
    serve.add_argument(
        "--allow-weight-updates",
        action="store_true",
        help="accept new weights on POST /v1/weights (a trainer's pushes); any client that reaches the server could then replace the model",
    )
    serve.set_defaults(run=_serve)

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

    evaluation = commands.add_parser(
        "eval",
        help="evaluate a policy on a suite (or compare two runs)",
        formatter_class=_HelpFormatter,
        description="Run k samples of every task of a suite; results.jsonl, summary.json "
        "and report.html go to --out, and a rerun resumes.",
    )
    evaluation.add_argument("--suite", help=f"{', '.join(BUILTIN_SUITES)}, or a JSONL/YAML suite file")
    evaluation.add_argument(
        "--policy",
        help="an http(s) OpenAI-compatible endpoint URL, a local model directory, "
        "'oracle' (the tasks' known solutions) or 'nonsense' (gibberish)",
    )
    evaluation.add_argument("--model", help="the model name the endpoint serves (required with a URL)")
    evaluation.add_argument("--tokenizer", help="with a URL: the served model's tokenizer, for token mode")
    evaluation.add_argument("-k", type=int, default=1, help="samples per task (default: %(default)s)")
    evaluation.add_argument("--concurrency", type=int, default=8, help="episodes at once (default: %(default)s)")
    evaluation.add_argument("--out", help="the run directory (default: runs/eval-<suite>)")
    evaluation.add_argument("--tasks", help="only these task ids: a comma-separated list of ids or globs")
    evaluation.add_argument("--max-turns", type=int, help="turns per episode (default: the env's limit)")
    evaluation.add_argument("--timeout", type=float, help="seconds per episode (default: none)")
    evaluation.add_argument("--seed", type=int, default=0, help="base of the reset seeds (default: %(default)s)")
    evaluation.add_argument(
        "--memory", metavar="PATH", help="a memory store: retrieved memories and skills go into each task's prompt"
    )
    evaluation.add_argument(
        "--memory-mode",
        choices=("read", "learn"),
        default="read",
        help="read: retrieve only; learn: also write each episode back (default: %(default)s)",
    )
    evaluation.add_argument(
        "--screenshots",
        action="store_true",
        help="a screenshot of every turn in the report's trajectory viewer (envs that render images: web, gui)",
    )
    evaluation.add_argument(
        "--images",
        action="store_true",
        help="send the policy each observation's screenshot too (a vision model's endpoint): web envs with "
        "Set-of-Marks, the GUI desktop; the report shows what the model saw",
    )
    evaluation.add_argument(
        "--image-keep",
        type=int,
        metavar="K",
        help="with --images: the newest K screenshots stay in the prompt (default: 1)",
    )
    evaluation.add_argument(
        "--image-max-side", type=int, metavar="PX", help="with --images: shrink to this longer side (default: 768)"
    )
    evaluation.add_argument(
        "--image-format", choices=("png", "jpeg"), help="with --images: the encoding sent (default: png)"
    )
    evaluation.add_argument("--image-quality", type=int, metavar="Q", help="with --images: JPEG quality (default: 85)")
    evaluation.add_argument(
        "--image-max-bytes",
        type=int,
        metavar="N",
        help="with --images: the most bytes one image may take; larger ones are shrunk, then left out (default: 2000000)",
    )
    evaluation.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the episodes on a Ray cluster's env workers: its address (HEAD:6379) or 'auto' (the one `ray start` runs here)",
    )
    evaluation.add_argument(
        "--env-workers", type=int, help="with --ray: env worker actors, spread over the nodes (default: one per node)"
    )
    evaluation.add_argument(
        "--envs-per-worker",
        type=int,
        default=8,
        help="with --ray: envs each worker hosts at once (default: %(default)s)",
    )
    evaluation.set_defaults(run=_eval)
    compare = evaluation.add_subparsers(dest="action").add_parser("compare", help="paired difference of two runs")
    compare.add_argument("run_a", help="a run directory (or its results.jsonl)")
    compare.add_argument("run_b", help="another run directory")
    compare.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    compare.set_defaults(run=_eval_compare)

    memory = commands.add_parser("memory", help="inspect and maintain a memory store (episodes and skills)")
    memory_actions = memory.add_subparsers(dest="action", required=True)

    def memory_command(name: str, run, help: str) -> argparse.ArgumentParser:
        command = memory_actions.add_parser(name, help=help)
        command.add_argument("store", help="the memory store file (SQLite)")
        command.set_defaults(run=_memory, memory_run=run)
        return command

    kinds = ("episode", "skill")
    listing = memory_command("list", _memory_list, "list entries")
    listing.add_argument("--kind", choices=kinds)
    listing.add_argument("--env", help="only entries of this env kind")
    listing.add_argument("--limit", type=int, default=100, help="most entries shown (default: %(default)s)")
    show = memory_command("show", _memory_show, "show one entry in full")
    show.add_argument("id", type=int)
    search = memory_command("search", _memory_search, "search entries (BM25)")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=5, help="results (default: %(default)s)")
    search.add_argument("--kind", choices=kinds)
    search.add_argument("--env", help="only entries of this env kind")
    prune = memory_command(
        "prune",
        _memory_prune,
        "merge near-duplicate skills, prune low-utility ones, enforce capacity; prints what was removed",
    )
    prune.add_argument(
        "--merge-threshold",
        type=float,
        default=0.8,
        help="Jaccard similarity of procedures that merges two skills (default: %(default)s)",
    )
    prune.add_argument(
        "--min-uses", type=int, default=5, help="uses before a skill can be pruned (default: %(default)s)"
    )
    prune.add_argument(
        "--below", type=float, default=0.0, help="prune skills with utility below this (default: %(default)s)"
    )
    prune.add_argument("--max-skills", type=int, help="capacity: keep the highest-utility skills")
    prune.add_argument("--max-episodes", type=int, help="capacity: keep the newest episodes")
    export = memory_command("export", _memory_export, "write entries as JSON lines")
    export.add_argument("out", help="the JSONL file to write ('-': stdout)")
    export.add_argument("--kind", choices=kinds)
    importing = memory_command("import", _memory_import, "add entries from JSON lines (the store is created if needed)")
    importing.add_argument("file", help="a JSONL file written by `agentgym memory export`")

    train = commands.add_parser(
        "train",
        help="train a policy on an env (TreeGRPO or SAO) from a YAML config",
        description="One process; for several, run `accelerate launch -m agentgym.train --config X.yaml`.",
    )
    train.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    train.add_argument("overrides", nargs="*", help="key=value overrides of config fields, e.g. max_steps=10")
    train.set_defaults(run=_train)
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


if __name__ == "__main__":
    sys.exit(main())
