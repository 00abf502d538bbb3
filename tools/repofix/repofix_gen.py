"""Task generator for agentgym code.repofix-v0: injects realistic bugs into vendored Python libraries and keeps those their own tests catch.

Each kept bug becomes one JSON line in SWE-bench instance format (instance_id,
repo, base_commit, problem_statement, patch, test_patch, FAIL_TO_PASS,
PASS_TO_PASS, ...) plus `bug_patch`, the diff that turns the pristine vendored
repo into the agent's starting workspace. As in SWE-bench, the test files that
expose the bug are hidden: `bug_patch` deletes them and `test_patch` restores
them at grading time. The libraries are read from the shipped archive
(``repos.tar.gz``, unpacked to a temporary directory) or from ``--repos-dir``.

    python -m tools.repofix.repofix_gen --out agentgym/envs/code/tasks/repofix/tasks.jsonl

An offline tool, run from a source checkout and not shipped: the environment never imports it. What the environment needs at run time
(loading tasks, workspaces, patches, pytest reports, the verdict) is
:mod:`agentgym.envs.code.repofix_tasks`; :func:`verify_task` checks a task end to end with any
`run_tests` (here, or in a sandbox container).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import queue
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agentgym.envs.code.repofix_tasks import (
    DEFAULT_TASKS_PATH,
    REPOS_ARCHIVE,
    PatchError,
    apply_patch,
    introduce_bug,
    parse_pytest_report,
    patched_files,
    tree_digest,
    unpack_repo,
)
from tools.repofix import repofix_mutate as mutate

PLUGIN_PATH = Path(__file__).resolve().parent / "repofix_pytest_plugin.py"
CREATED_BY = "agentgym.repofix_gen"

RunTests = Callable[[Path, list[str]], dict[str, bool]]
"""(repo directory, test files relative to it) -> {pytest node id: passed}. A missing id counts as failed."""


@dataclass(frozen=True)
class RepoSpec:
    """A vendored library: which of its files may be mutated and which test files form its suite."""

    name: str
    version: str
    license: str
    sources: tuple[str, ...]  # globs, relative to the repo root
    tests: tuple[str, ...]  # globs, relative to the repo root

    def source_files(self, root: Path) -> list[str]:
        return _globbed(root, self.sources, lambda p: not _is_test_path(p))

    def test_files(self, root: Path) -> list[str]:
        return _globbed(root, self.tests, _is_test_path)


def copy_repo(src: Path, dest: Path) -> Path:
    """A copy of the repo at `src` without build litter (bytecode, pytest caches)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    return dest


def _is_test_path(relpath: str) -> bool:
    parts = relpath.split("/")
    return any(p in ("tests", "test") for p in parts[:-1]) or parts[-1].startswith("test_")


def _globbed(root: Path, patterns: Iterable[str], keep: Callable[[str], bool]) -> list[str]:
    found = {p.relative_to(root).as_posix() for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    return sorted(p for p in found if keep(p))


# Versions and licenses are those of the PyPI sdists the copies in repos.tar.gz were taken from.
REPOS: tuple[RepoSpec, ...] = (
    RepoSpec("inflection", "0.5.1", "MIT", ("inflection/*.py",), ("test_inflection.py",)),
    RepoSpec(
        "toolz",
        "1.2.0",
        "BSD-3-Clause",
        ("toolz/*.py", "toolz/curried/*.py", "toolz/sandbox/*.py"),
        ("toolz/tests/test_*.py", "toolz/sandbox/tests/test_*.py"),
    ),
    RepoSpec("semver", "3.1.2", "BSD-3-Clause", ("src/semver/*.py",), ("tests/test_*.py",)),
    RepoSpec("tabulate", "0.10.0", "MIT", ("tabulate/*.py",), ("test/test_*.py",)),
    RepoSpec("boltons", "26.2.0", "BSD-3-Clause", ("boltons/*.py",), ("tests/test_*.py",)),
)
SPECS = {spec.name: spec for spec in REPOS}


def unpack_repos(dest: Path, specs: Iterable[RepoSpec] = REPOS, archive: Path = REPOS_ARCHIVE) -> Path:
    """The libraries of `specs` unpacked from `archive` under `dest`, one directory each: the tree the generator reads."""
    for spec in specs:
        unpack_repo(spec.name, Path(dest) / spec.name, archive)
    return Path(dest)


# --- files, digests and diffs -----------------------------------------------------------------------


def file_diff(path: str, old: str | None, new: str | None) -> str:
    """git-style unified diff of one file; None stands for an absent file (creation or deletion)."""
    old_lines = [] if old is None else old.splitlines(keepends=True)
    new_lines = [] if new is None else new.splitlines(keepends=True)
    header = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    elif new is None:
        header.append("deleted file mode 100644\n")
    header.append("--- /dev/null\n" if old is None else f"--- a/{path}\n")
    header.append("+++ /dev/null\n" if new is None else f"+++ b/{path}\n")
    body = []
    for line in list(difflib.unified_diff(old_lines, new_lines, n=3))[2:]:  # drop difflib's ---/+++ lines
        body.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(header + body) if body else ""


# --- running pytest ---------------------------------------------------------------------------------


def pytest_argv(test_files: list[str], python: str = "python3") -> list[str]:
    """The grading invocation: -rA prints one PASSED/FAILED line per test for `parse_pytest_report`."""
    return [python, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *test_files]


def _test_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env.update(
        PYTHONDONTWRITEBYTECODE="1",  # a stale .pyc with an equal mtime could mask a freshly written mutant
        PYTHONHASHSEED="0",  # set and dict reprs in failure messages stay the same from run to run
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # the sandbox has no third-party plugins; neither should we
    )
    env.update(extra or {})
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str | None:
    """stdout+stderr of a command, or None when it outran `timeout` (its whole process group is killed)."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return out.decode("utf-8", "replace")


def pytest_runner(python: str = sys.executable, timeout: float = 600) -> RunTests:
    """A RunTests that runs the grading command on this machine."""

    def run_tests(repo_dir: Path, test_files: list[str]) -> dict[str, bool]:
        output = _run(pytest_argv(test_files, python), Path(repo_dir), _test_env(), timeout)
        return {} if output is None else parse_pytest_report(output)

    return run_tests


def _run_with_plugin(repo_dir: Path, test_files: list[str], python: str, timeout: float) -> dict | None:
    """Outcomes and failure details from repofix_pytest_plugin, or None on timeout."""
    with tempfile.TemporaryDirectory(prefix="repofix-plugin-") as tmp:
        # A private copy keeps envs/code (and whatever else lives there) off the tests' import path.
        shutil.copy(PLUGIN_PATH, tmp)
        report = Path(tmp) / "report.json"
        env = _test_env({"PYTHONPATH": tmp, "REPOFIX_REPORT": str(report)})
        argv = [python, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-p", "repofix_pytest_plugin"]
        if _run(argv + test_files, Path(repo_dir), env, timeout) is None or not report.exists():
            return None
        return json.loads(report.read_text(encoding="utf-8"))


# --- planning candidates ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    repo: str
    path: str  # the mutated library file, relative to the repo root
    mutation: mutate.Mutation
    mutated: str  # the file's full mutated source


def _pick(
    mutations: list[mutate.Mutation], source: str, rng: random.Random, limit: int
) -> list[tuple[mutate.Mutation, str]]:
    """Up to `limit` applicable mutations of one function, cycling through operators so one
    kind of bug does not crowd out the others."""
    by_operator = defaultdict(list)
    for m in mutations:
        by_operator[m.operator].append(m)
    operators = sorted(by_operator)
    rng.shuffle(operators)
    queues = []
    for name in operators:
        items = by_operator[name][:]
        rng.shuffle(items)
        queues.append(deque(items))
    picked: list[tuple[mutate.Mutation, str]] = []
    seen: set[str] = set()
    while queues and len(picked) < limit:
        for q in list(queues):
            if not q:
                queues.remove(q)
                continue
            m = q.popleft()
            mutated = mutate.apply_mutation(source, m)
            if mutated is not None and mutated not in seen:
                seen.add(mutated)
                picked.append((m, mutated))
                if len(picked) == limit:
                    break
    return picked


def plan_candidates(
    seed: int,
    repos_dir: Path,
    specs: Iterable[RepoSpec] = REPOS,
    per_function: int = 3,
    per_repo: int = 120,
) -> list[Candidate]:
    """The mutants to screen, deterministic for a seed: up to `per_function` per function,
    functions interleaved in a seeded order so the first `per_repo` spread over the repo."""
    candidates = []
    for spec in specs:
        root = Path(repos_dir) / spec.name
        groups = []
        for path in spec.source_files(root):
            source = (root / path).read_text(encoding="utf-8")
            by_function = defaultdict(list)
            for m in mutate.find_mutations(source):
                by_function[m.function].append(m)
            for function, mutations in by_function.items():
                rng = random.Random(f"{seed}:{spec.name}:{path}:{function}")
                groups.append(
                    [Candidate(spec.name, path, m, text) for m, text in _pick(mutations, source, rng, per_function)]
                )
        random.Random(f"{seed}:{spec.name}").shuffle(groups)
        interleaved = [group[i] for i in range(per_function) for group in groups if i < len(group)]
        candidates.extend(interleaved[:per_repo])
    return candidates


# --- screening ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Screened:
    candidate: Candidate
    failing: frozenset[str]  # tests that pass on the pristine repo and not on the mutant
    failures: dict  # node id -> details from repofix_pytest_plugin


def screen(
    spec: RepoSpec, candidates: list[Candidate], python: str, jobs: int, repos_dir: Path
) -> tuple[frozenset[str], list[Screened]]:
    """Run the repo's suite against each candidate; returns the stable baseline passes and
    the screened candidates (timeouts and runs without a report are dropped)."""
    root = Path(repos_dir) / spec.name
    test_files = spec.test_files(root)
    with tempfile.TemporaryDirectory(prefix=f"repofix-{spec.name}-") as tmp:
        workers = [copy_repo(root, Path(tmp) / f"w{i}") for i in range(max(1, jobs))]
        # Two clean runs: a test that is not reliably green cannot be graded either way.
        runs = [_run_with_plugin(workers[0], test_files, python, 600) for _ in range(2)]
        if any(r is None for r in runs):
            raise RuntimeError(f"{spec.name}: the pristine test suite did not finish")
        baseline = frozenset.intersection(
            *(frozenset(n for n, o in r["outcomes"].items() if o == "passed") for r in runs)
        )
        pool: queue.Queue[Path] = queue.Queue()
        for w in workers:
            pool.put(w)

        def run_one(candidate: Candidate) -> Screened | None:
            work = pool.get()
            target = work / candidate.path
            original = target.read_bytes()
            try:
                target.write_text(candidate.mutated, encoding="utf-8")
                # Most suites take 1-2 s; anything far slower is a mutant stuck in a loop.
                report = _run_with_plugin(work, test_files, python, timeout=60)
            finally:
                target.write_bytes(original)
                pool.put(work)
            if report is None:
                return None
            passed = {n for n, o in report["outcomes"].items() if o == "passed"}
            return Screened(candidate, baseline - passed, report["failures"])

        with ThreadPoolExecutor(max_workers=len(workers)) as executor:
            results = [r for r in executor.map(run_one, candidates) if r is not None]
    return baseline, results


# --- problem statements -------------------------------------------------------------------------------


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


class _Substitute(ast.NodeTransformer):
    """Replace reads of the given names by literal values."""

    def __init__(self, values: dict[str, str]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return ast.parse(self.values[node.id], mode="eval").body
        return node


def _stored_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _reproduction(failure: dict, max_lines: int = 25) -> str:
    """A code snippet that shows the failure: the test body with its parameters filled in,
    or just the failing statement when the test is long."""
    params = {k: v for k, v in failure["params"].items() if _is_literal(v)}
    try:
        body = ast.parse(failure["test_source"]).body
    except SyntaxError:
        body = []
    func = body[0] if body else None
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        values = {k: v for k, v in params.items() if k not in _stored_names(func)}
        func = _Substitute(values).visit(func)
        func.decorator_list = []
        if len(func.body) > 1 and isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant):
            func.body = func.body[1:]  # the test's docstring is no part of a reproduction
        remaining = [a for a in func.args.args if a.arg not in values]
        snippet = (
            "\n".join(ast.unparse(stmt) for stmt in func.body)
            if not remaining and not func.args.vararg and not func.args.kwarg
            else ast.unparse(func)
        )
        if len(snippet.splitlines()) <= max_lines:
            return snippet
    statement = failure["statement"]
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return statement
    known = {k: v for k, v in {**failure["locals"], **params}.items() if _is_literal(v) and "0x" not in v}
    return ast.unparse(_Substitute(known).visit(tree))


def _called_names(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    names = []
    for call in calls:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name and name not in names:
            names.append(name)
    return names


def library_names(root: Path, spec: RepoSpec) -> set[str]:
    """Functions, methods and classes a library defines: the calls a bug report can name."""
    names = set()
    for path in spec.source_files(root):
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def _truncate(text: str, max_lines: int = 20, max_chars: int = 1500) -> str:
    # Object addresses change from run to run and say nothing to the reader.
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    lines = text.strip("\n").splitlines()
    clipped = "\n".join(lines[:max_lines])[:max_chars]
    return clipped + ("\n..." if clipped != "\n".join(lines) else "")


def _api_name(failure: dict, api: set[str], function: str) -> str | None:
    """The library name a user would blame: the broken function when the test calls it
    directly, its class when it is an operator method (``v1 <= v2`` shows ``Version``
    misbehaving), else the first library call in the failing statement or test."""
    parts = function.replace(".<locals>.", ".").split(".")
    short = parts[-1]
    statement_calls = [n for n in _called_names(failure["statement"]) if n in api]
    test_calls = [n for n in _called_names(failure["test_source"]) if n in api]
    if short in statement_calls or short in test_calls:
        return ".".join(parts[-2:])
    if short.startswith("__") and short.endswith("__") and len(parts) > 1 and parts[-2] in api:
        return parts[-2]
    return (statement_calls or test_calls or [None])[0]


def problem_statement(repo: str, failing: list[str], failures: dict, api: set[str], function: str) -> str:
    """A user's bug report for the first failing tests: what was called, what happened.
    It names no test file and nothing about where the fault lies."""
    described = [failures[n] for n in failing if n in failures]
    if not described:
        raise ValueError("no failure details to describe")
    first = described[0]
    name = _api_name(first, api, function)
    subject = f"`{name}`" if name else f"`{repo}`"
    exception = _truncate(first["exception"])
    # "zlib.error" says more than the bare class name "error".
    qualified = first["exception"].split(":", 1)[0].strip()
    exc_name = qualified if re.fullmatch(r"[\w.]+", qualified) else first["exc_type"]
    if first["exception"].startswith("Failed: DID NOT RAISE"):
        title = f"{subject} accepts input it should reject"
        intro = f"With {repo}, {subject} does not raise an error for input that it should refuse:"
    elif first["exc_type"] == "AssertionError" and (first["exception"] != "AssertionError" or first["raised_in_test"]):
        title = f"{subject} returns a wrong result"
        intro = f"With {repo}, {subject} gives the wrong result here:"
    else:
        title = f"{subject} raises {exc_name}"
        intro = f"With {repo}, {subject} raises `{exc_name}` on input it should handle:"
    parts = [
        title,
        "",
        intro,
        "",
        "```python",
        _reproduction(first),
        "```",
        "",
        "What happens:",
        "",
        "```",
        exception,
        "```",
    ]
    if first["exception"].strip() == "AssertionError" and first.get("stdout"):
        parts += ["", "Printed output:", "", "```", _truncate(first["stdout"]), "```"]
    others = []
    for failure in described[1:]:
        snippet = _reproduction(failure, max_lines=6)
        if snippet not in others and snippet != _reproduction(first):
            others.append(snippet)
    if others:
        parts += ["", "The same goes wrong here:", "", "```python", "\n\n".join(others[:2]), "```"]
    return _sandbox_paths("\n".join(parts) + "\n")


def _sandbox_paths(text: str) -> str:
    """Show the host's standard-library paths in failure output as the sandbox's (Debian's) own."""
    stdlib = sysconfig.get_paths()["stdlib"]
    return text.replace(stdlib, f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}")


# --- tasks ----------------------------------------------------------------------------------------------


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _portable(nodeid: str) -> bool:
    """Whether a node id reads the same to every pytest and to `parse_pytest_report`.
    pytest 8+ names parameters whose string value exceeds 100 characters by argument name
    and index instead, and the -rA summary separates a failure message with " - "."""
    params = nodeid.partition("[")[2]
    return " - " not in nodeid and len(params) <= 100


def task_test_files(task: dict) -> list[str]:
    """The test files a task is graded on: those holding its FAIL_TO_PASS and PASS_TO_PASS tests."""
    return sorted({_file_of(n) for n in task["FAIL_TO_PASS"] + task["PASS_TO_PASS"]})


def _changed_lines(diff: str) -> int:
    added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    return max(added, removed)


def build_task(spec: RepoSpec, screened: Screened, baseline: frozenset[str], root: Path, api: set[str]) -> dict:
    """The task record for one screened mutant (its instance_id is set by the caller)."""
    candidate = screened.candidate
    f2p = sorted(screened.failing)
    hidden = sorted({_file_of(n) for n in f2p})
    p2p = sorted(n for n in baseline - screened.failing if _file_of(n) in hidden and _portable(n))
    pristine = (root / candidate.path).read_text(encoding="utf-8")
    fix = file_diff(candidate.path, candidate.mutated, pristine)
    tests = {path: (root / path).read_text(encoding="utf-8") for path in hidden}
    return {
        "instance_id": "",
        "repo": spec.name,
        "version": spec.version,
        "base_commit": tree_digest(root),
        "problem_statement": problem_statement(spec.name, f2p, screened.failures, api, candidate.mutation.function),
        "hints_text": "",
        "patch": fix,
        "test_patch": "".join(file_diff(path, None, text) for path, text in tests.items()),
        "bug_patch": file_diff(candidate.path, pristine, candidate.mutated)
        + "".join(file_diff(path, text, None) for path, text in tests.items()),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "test_command": shlex.join(pytest_argv(hidden)),
        "difficulty": {
            "operator": candidate.mutation.operator,
            "changed_lines": _changed_lines(fix),
            "fail_to_pass": len(f2p),
        },
        "created_by": CREATED_BY,
    }


def _leaks(task: dict) -> bool:
    """Whether the report quotes a line the bug changed (it would point straight at the fix)."""
    changed = [
        line[1:].strip() for line in task["patch"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    return any(len(line) > 8 and line in task["problem_statement"] for line in changed)


def verify_task(task: dict, repo_dir: Path, run_tests: RunTests) -> list[str]:
    """Check a task end to end; returns the problems found (empty: verified).

    pristine repo: every FAIL_TO_PASS and PASS_TO_PASS test passes;
    + bug_patch: the hidden test files are gone; + test_patch: FAIL_TO_PASS fail, PASS_TO_PASS pass;
    + patch (gold): all pass, and the tree is the pristine one again.
    """
    problems = []
    tests = task["FAIL_TO_PASS"] + task["PASS_TO_PASS"]
    files = task_test_files(task)
    with tempfile.TemporaryDirectory(prefix="repofix-verify-") as tmp:
        pristine = copy_repo(Path(repo_dir), Path(tmp) / "pristine")
        if tree_digest(pristine) != task["base_commit"]:
            return [f"repo tree does not match base_commit {task['base_commit'][:12]}"]
        results = run_tests(pristine, files)
        problems += [f"pristine: {n} does not pass" for n in tests if not results.get(n)]
        try:
            work = introduce_bug(task, copy_repo(Path(repo_dir), Path(tmp) / "work"))
            problems += [
                f"workspace: hidden test file {f} is visible"
                for f in patched_files(task["test_patch"])
                if (work / f).exists()
            ]
            apply_patch(task["test_patch"], work)
            results = run_tests(work, files)
            problems += [f"buggy: {n} passes" for n in task["FAIL_TO_PASS"] if results.get(n)]
            problems += [f"buggy: {n} does not pass" for n in task["PASS_TO_PASS"] if not results.get(n)]
            apply_patch(task["patch"], work)
            results = run_tests(work, files)
            problems += [f"fixed: {n} does not pass" for n in tests if not results.get(n)]
            if tree_digest(work) != task["base_commit"]:
                problems.append("bug_patch + test_patch + patch does not restore the pristine tree")
        except PatchError as error:
            problems.append(f"patch does not apply: {error}")
    return problems


# --- generation -------------------------------------------------------------------------------------------


def _qualified(screened: list[Screened], max_failing: int, per_function: int) -> list[Screened]:
    """Mutants worth a task, in screening order: caught by 1..max_failing tests (a localised bug),
    not a duplicate of an earlier one, at most `per_function` per function."""
    kept: list[Screened] = []
    seen: set[object] = set()
    per: Counter[tuple[str, str]] = Counter()
    for s in screened:
        c = s.candidate
        key = (c.path, c.mutation.function)
        behaviour = (c.path, c.mutation.function, s.failing)
        if not 1 <= len(s.failing) <= max_failing or per[key] >= per_function:
            continue
        if not all(_portable(n) and n in s.failures for n in s.failing):
            continue  # ids another pytest or the -rA parser could misread, or failures we cannot describe
        if behaviour in seen or c.mutated in seen:
            continue
        seen.update({behaviour, c.mutated})
        per[key] += 1
        kept.append(s)
    return kept


def _slug(function: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", function.replace(".<locals>.", ".")).strip("_")


def generate(
    repos_dir: Path,
    seed: int = 0,
    count: int = 50,
    max_share: float = 0.4,
    max_failing: int = 10,
    per_function: int = 2,
    candidates_per_function: int = 3,
    candidates_per_repo: int = 120,
    jobs: int = 2,
    python: str = sys.executable,
    specs: Iterable[RepoSpec] = REPOS,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> list[dict]:
    """Plan, screen, select and verify tasks; at most `max_share` of `count` come from one repo."""
    specs = list(specs)
    planned = plan_candidates(seed, repos_dir, specs, candidates_per_function, candidates_per_repo)
    queues, context = {}, {}
    for spec in specs:
        root = Path(repos_dir) / spec.name
        mine = [c for c in planned if c.repo == spec.name]
        baseline, screened = screen(spec, mine, python, jobs, repos_dir)
        qualified = _qualified(screened, max_failing, per_function)
        log(
            f"{spec.name}: {len(baseline)} stable tests, {len(mine)} mutants, "
            f"{sum(1 for s in screened if s.failing)} caught, {len(qualified)} qualify"
        )
        queues[spec.name] = deque(qualified)
        context[spec.name] = (spec, baseline, root, library_names(root, spec))

    cap = max(1, int(max_share * count))
    runner = pytest_runner(python)
    kept: list[dict] = []
    per_repo: Counter[str] = Counter()
    per_operator: Counter[str] = Counter()

    def build_and_verify(s: Screened) -> dict | None:
        spec, baseline, root, api = context[s.candidate.repo]
        task = build_task(spec, s, baseline, root, api)
        if _leaks(task):
            return None
        problems = verify_task(task, root, runner)
        if problems:
            log(f"{s.candidate.repo} {s.candidate.mutation.function}: dropped, {problems[0]}")
            return None
        return task

    numbering: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as executor:
        while len(kept) < count:
            # One round-robin pass over the repos that still have mutants and room under the cap.
            batch: list[Screened] = []
            for name, q in queues.items():
                if q and per_repo[name] < cap and len(batch) < count - len(kept):
                    # Prefer the operator with the fewest tasks so far, so the set is not all flipped comparisons.
                    index = min(range(len(q)), key=lambda i: (per_operator[q[i].candidate.mutation.operator], i))
                    batch.append(q[index])
                    del q[index]
            if not batch:
                break
            for s, task in zip(batch, executor.map(build_and_verify, batch)):
                if task is not None:
                    slug = f"{task['repo']}__{_slug(s.candidate.mutation.function)}"
                    task["instance_id"] = f"{slug}-{numbering[slug]}"
                    numbering[slug] += 1
                    kept.append(task)
                    per_repo[task["repo"]] += 1
                    per_operator[task["difficulty"]["operator"]] += 1
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_TASKS_PATH, help="JSONL file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=50, help="number of tasks to keep")
    parser.add_argument("--max-share", type=float, default=0.4, help="most of --count one repo may supply")
    parser.add_argument("--max-failing", type=int, default=10, help="most tests a kept bug may break")
    parser.add_argument("--per-function", type=int, default=2, help="most tasks from one function")
    parser.add_argument("--candidates-per-function", type=int, default=3)
    parser.add_argument("--candidates-per-repo", type=int, default=120)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--python", default=sys.executable, help="interpreter (with pytest) that runs the suites")
    parser.add_argument("--repos", nargs="*", choices=sorted(SPECS), help="only these repos")
    parser.add_argument(
        "--repos-dir", type=Path, help="the libraries, one directory each (default: the shipped archive, unpacked)"
    )
    args = parser.parse_args(argv)
    specs = [SPECS[name] for name in args.repos] if args.repos else list(REPOS)
    with tempfile.TemporaryDirectory(prefix="repofix-repos-") as tmp:
        tasks = generate(
            args.repos_dir or unpack_repos(Path(tmp), specs),
            seed=args.seed,
            count=args.count,
            max_share=args.max_share,
            max_failing=args.max_failing,
            per_function=args.per_function,
            candidates_per_function=args.candidates_per_function,
            candidates_per_repo=args.candidates_per_repo,
            jobs=args.jobs,
            python=args.python,
            specs=specs,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task, ensure_ascii=False) + "\n")
    by_repo = Counter(t["repo"] for t in tasks)
    by_operator = Counter(t["difficulty"]["operator"] for t in tasks)
    print(f"wrote {len(tasks)} tasks to {args.out}", file=sys.stderr)
    print(f"by repo: {dict(sorted(by_repo.items()))}", file=sys.stderr)
    print(f"by operator: {dict(sorted(by_operator.items()))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
