"""`agentgym memory list|show|search|prune|export|import`: inspect and maintain a memory store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentgym.cli.common import UsageError, fmt


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
        line += f"  utility={fmt(data.get('utility'))} uses={data.get('uses', 0)} v{data.get('version', 1)}"
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


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
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
