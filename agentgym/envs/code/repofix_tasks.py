"""RepoFix's task files at run time: loading SWE-bench instances, the agent's starting workspace, patches, pytest reports and the verdict.

The environment (:mod:`agentgym.envs.code.repofix`) needs only this; the offline generator that
made the shipped tasks (``tools/repofix/repofix_gen.py`` in a source checkout, see
``tasks/repofix/README.md``) builds on it. A task is one SWE-bench instance (a dict) plus
``bug_patch``, the diff from the pristine vendored repository (one directory of
``tasks/repofix/repos.tar.gz``) to the agent's workspace.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

__all__ = [
    "DEFAULT_TASKS_PATH",
    "REPOS_ARCHIVE",
    "TASKS_DIR",
    "PatchError",
    "apply_patch",
    "grade_results",
    "introduce_bug",
    "is_litter",
    "load_tasks",
    "materialize_workspace",
    "parse_pytest_report",
    "patched_files",
    "tree_digest",
    "unpack_repo",
]

TASKS_DIR = Path(__file__).resolve().parent / "tasks" / "repofix"
# The vendored libraries, one top-level directory each: an archive, so that their code is package data
# and not agentgym's (no linter, type checker or line count sees it). tools/repofix/repos_archive.py packs it.
REPOS_ARCHIVE = TASKS_DIR / "repos.tar.gz"
DEFAULT_TASKS_PATH = TASKS_DIR / "tasks.jsonl"


def is_litter(relpath: str) -> bool:
    """Whether a path (relative, ``/``-separated) is a build or run by-product, never part of a repo's identity."""
    return any(part in ("__pycache__", ".pytest_cache") for part in relpath.split("/")) or relpath.endswith(".pyc")


def unpack_repo(name: str, dest: Path, archive: Path = REPOS_ARCHIVE) -> Path:
    """The pristine vendored library ``name`` written to ``dest`` (a new directory) from ``archive``."""
    prefix = name + "/"
    dest = Path(dest)
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise PatchError(f"{name}: no such repository in {archive}")
        dest.mkdir(parents=True)
        for member in members:
            relative = PurePosixPath(member.name[len(prefix) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise PatchError(f"{archive}: member {member.name!r} points outside its repository")
            target = dest.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file's member always has data
            target.write_bytes(source.read())
    return dest


def tree_digest(root: Path) -> str:
    """sha256 over every file's path and content: the `base_commit` of a vendored repo."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if is_litter(rel):
            continue
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


class PatchError(RuntimeError):
    """A patch that does not apply, or a repo tree that is not the one a task was made from."""


def apply_patch(patch: str, directory: Path) -> None:
    """Apply a git-style diff (a/ b/ prefixes) to `directory` with `git apply`; raise PatchError if it does not apply."""
    directory = Path(directory).resolve()
    # Without a ceiling, git apply run inside some enclosing repository treats paths as relative
    # to that repository's root and silently skips the ones outside the current directory.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(directory.parent))
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        cwd=directory,
        input=patch.encode("utf-8"),
        capture_output=True,
        env=env,
    )
    if proc.returncode != 0:
        raise PatchError(proc.stderr.decode("utf-8", "replace").strip())


def patched_files(patch: str) -> list[str]:
    """The files a git-style diff touches, sorted."""
    return sorted(set(re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.M)))


def parse_pytest_report(output: str) -> dict[str, bool]:
    """{node id: passed} from the short test summary that ``pytest -rA`` prints."""
    results: dict[str, bool] = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS") and "::" in rest:
            nodeid = rest.split(" - ", 1)[0].strip()
            # A test can report twice (e.g. passed, then errored in teardown): any failure wins.
            results[nodeid] = results.get(nodeid, True) and word in ("PASSED", "XPASS")
    return results


def load_tasks(path: str | Path | None = None) -> list[dict]:
    """Tasks from a JSONL file (ours by default) or a JSON list (SWE-bench's published files). SWE-bench
    stores the test lists as JSON strings; they are decoded so every task has real lists.

    Every fork of a RepoFix env makes a new env, which loads its tasks: parsing our 2.3 MB file
    took ~50 ms of a ~120 ms fork, so a file's parse is kept while its size and mtime hold, and
    each caller gets its own deep copy (~6 ms) to change as it likes."""
    file = Path(path or DEFAULT_TASKS_PATH).resolve()
    stat = file.stat()
    return copy.deepcopy(_parsed_tasks(file, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _parsed_tasks(file: Path, mtime_ns: int, size: int) -> list[dict]:
    text = file.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        tasks = json.loads(text)
    else:
        tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
    for task in tasks:
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if isinstance(task.get(key), str):
                task[key] = json.loads(task[key])
    return tasks


def materialize_workspace(task: dict, dest: Path, archive: Path = REPOS_ARCHIVE) -> Path:
    """Write the agent's starting workspace to `dest`: the pristine repo with `bug_patch` applied."""
    return introduce_bug(task, unpack_repo(task["repo"], Path(dest), archive))


def introduce_bug(task: dict, repo_dir: Path) -> Path:
    """Turn the pristine repo at `repo_dir` (checked against `base_commit`) into the task's starting workspace, in place."""
    if tree_digest(repo_dir) != task["base_commit"]:
        raise PatchError(f"{task['repo']}: repo tree does not match base_commit {task['base_commit'][:12]}")
    apply_patch(task["bug_patch"], repo_dir)
    return repo_dir


def grade_results(task: dict, results: dict[str, bool]) -> dict:
    """SWE-bench style verdict from per-test results: resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passes."""
    f2p = sum(bool(results.get(n)) for n in task["FAIL_TO_PASS"])
    p2p = sum(bool(results.get(n)) for n in task["PASS_TO_PASS"])
    return {
        "resolved": f2p == len(task["FAIL_TO_PASS"]) and p2p == len(task["PASS_TO_PASS"]),
        "fail_to_pass": {"passed": f2p, "total": len(task["FAIL_TO_PASS"])},
        "pass_to_pass": {"passed": p2p, "total": len(task["PASS_TO_PASS"])},
    }
