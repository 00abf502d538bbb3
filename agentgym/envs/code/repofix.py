"""agentgym/code.repofix-v0: SWE-bench-style bug fixing in a real repository, graded by hidden FAIL_TO_PASS/PASS_TO_PASS tests.

Tasks are SWE-bench instances. The shipped ones come from ``tools/repofix/repofix_gen.py`` (offline, not shipped),
which injects real bugs into vendored libraries with real test suites; their workspace is the
pristine repository with ``bug_patch`` applied (which also removes the hidden test files),
committed to git so that the agent's work is ``git diff``. Instances from SWE-bench files
(:func:`load_swebench_instances`) carry an ``image`` with the repository at ``/testbed``.
``tasks=`` selects instances by id or pattern; ``info["grade"]`` is the verdict described below.

Grading (``submit()``) follows SWE-bench: the agent's diff is applied to a clean copy of the
starting workspace in a *fresh* container, ``test_patch`` is applied and the FAIL_TO_PASS and
PASS_TO_PASS tests run. Success, and reward 1.0, only when every one of them passes, on evidence that
the repository's code cannot forge. What grading defends against (each with a hack in
``tests/graders/test_repofix.py``):

* Changing the tests, or how pytest and Python start. The grader owns (:data:`GRADER_OWNED`) every
  test file and test directory (``test_*``, ``*_test.py``, ``tests/``, ``test/``, ``testing/``),
  ``conftest.py``, pytest's configuration files (``pytest.ini``, ``.pytest.ini``, ``tox.ini``,
  ``setup.cfg``, ``pyproject.toml``), Python's start-up hooks (``sitecustomize.py``,
  ``usercustomize.py``, ``*.pth``: an editable install puts the repository on the start-up path) and
  bytecode, at any depth: after the agent's diff is applied they are put back as they were, whatever
  way the diff reached them (SWE-bench's own split puts every path with "test" in it into the test
  patch, so gold patches never touch these).
* Shadowing pytest or the standard library: pytest runs from a trusted launcher outside the
  repository (:mod:`~agentgym.envs.code.repofix_grading_plugin`) that imports pytest before the
  working directory goes on ``sys.path``.
* Forging outcomes in the test process. A test passes only on the launcher's record that its setup,
  call and teardown passed, written after pytest returns and tagged with a nonce passed on stdin,
  which the repository's code never sees in advance; the launcher exits as soon as it is written, so
  no ``atexit`` hook of the code under test runs after it. The record lists the tampering seen while
  the tests ran: pytest's, pluggy's or unittest's functions or classes patched, a trace or profile
  function, a hook implemented by a file the diff changed or by code written at run time, a passed
  report for a phase that raised, a hidden test file changed on disk. Any tampering, a missing or
  wrongly tagged record (an early exit, a re-executed or crashed process), an exit status other than
  the one pytest returned, an exit code that disagrees with the outcomes, or a ``-rA`` summary that
  disagrees with the record fails the grade, and ``grade["error"]`` says why.
* Huge submissions: the diff (``MAX_DIFF_BYTES``), the record and the test log
  (``MAX_REPORT_BYTES`` each) are read back with bounds; over one, the grade fails and says so.

What it does not defend against: code in the test process that sets out to defeat the launcher
itself (finds the nonce in its memory, patches it, rewrites its record from a thread or a process it
forks, compiles code under a trusted file's name); tampering with what the checks do not watch (the
standard library, builtins, C extensions, ctypes, import hooks that rewrite test modules as they
load, the test functions themselves); a function or class of pytest replaced and put back between
two checks (after collection, at the end); and fixes that special-case the tests' inputs. Under
``pytest-xdist`` only the controlling process is watched; when the repository is pytest itself, its
code is trusted as pytest's. A custom ``test_command`` that is not a plain pytest invocation
(``[VAR=value ...] pytest ...`` or ``python -m pytest ...``, no shell operators) runs as given and is
graded from its ``-rA`` summary alone (``grade["reporter"]`` is False): none of the checks in the test
process apply then, and output forged by the repository's code is believed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import posixpath
import re
import secrets
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym.actions import ToolSpec
from agentgym.core import Outcome, Verdict, select_tasks
from agentgym.envs.code import repofix_tasks
from agentgym.envs.code.env import BASH, CodeEnv, _tool
from agentgym.sandbox.base import ExecResult, FileTooLargeError
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig, tar_directory
from agentgym.task import Task, call_text

WORKSPACE = "/workspace"
SWEBENCH_WORKDIR = "/testbed"
TEST_TIMEOUT_S = 300.0
#: The paths the grader owns, at any depth (see the module docstring): the agent's changes to them are not graded.
GRADER_OWNED = (
    "test_*",
    "*_test.py",
    "tests/**",
    "test/**",
    "testing/**",
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "__pycache__/**",
    "*.pyc",
)
MAX_DIFF_BYTES = 2 * 1024 * 1024  # a bug fix is a few lines; this leaves room for a generous one
MAX_REPORT_BYTES = 8 * 1024 * 1024  # the test log and the launcher's record, each
GRADING_DIR = "/tmp/agentgym-grading"  # in the grading sandbox
LAUNCHER = Path(__file__).with_name("repofix_grading_plugin.py")
PYTEST_NO_TESTS = 5  # pytest's exit code when it collected nothing
RUN_TESTS = _tool(
    "run_tests",
    "Run the repository's visible tests with pytest (optionally only the given paths or node ids).",
    [],
    paths={"type": "string", "description": "space-separated test paths or node ids"},
    timeout=BASH.properties["timeout"],
)
# What the generator ran the tests with, so verdicts here match the verified ones.
TEST_ENV = "PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"


def load_swebench_instances(path: str | Path) -> list[dict]:
    """Read SWE-bench instances from a JSONL file or a JSON list (the published dataset's format).

    Each instance needs ``instance_id``, ``test_patch``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS``
    and either ``image`` (a Docker image with the repository checked out at ``/testbed``) or
    ``repo`` naming a repository vendored with agentgym. ``test_command`` (default: pytest with
    ``-rA`` on the files that ``test_patch`` touches) must print pytest's ``-rA`` summary.
    """
    instances = repofix_tasks.load_tasks(path)
    for instance in instances:
        missing = {"instance_id", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"} - instance.keys()
        if missing or not ({"image", "repo"} & instance.keys()):
            raise ValueError(f"instance {instance.get('instance_id')!r} lacks {sorted(missing) or 'image or repo'}")
    return instances


def owned_pathspecs(*, exclude: bool = False) -> list[str]:
    """:data:`GRADER_OWNED` as git pathspecs that match (or exclude) those paths at any depth."""
    magic = "exclude,glob" if exclude else "glob"
    return [f":({magic})**/{pattern}" for pattern in GRADER_OWNED]


def grading_command(task: dict) -> str:
    """The task's test command (SWE-bench instances may omit it: then pytest on the test_patch files)."""
    if task.get("test_command"):
        return task["test_command"]
    files = " ".join(shlex.quote(f) for f in repofix_tasks.patched_files(task["test_patch"]))
    return f"python3 -m pytest -rA -p no:cacheprovider {files}"


def reference_solution(task: dict) -> list[str]:
    """The replies that fix a task with its gold patch: write it, ``git apply`` it, run the visible tests, submit."""
    return [
        call_text("write_file", {"path": "/tmp/fix.diff", "content": task["patch"]}),
        call_text("bash", {"command": "git apply /tmp/fix.diff && git status --short"}),
        call_text("run_tests"),
        call_text("submit"),
    ]


class RepoFixEnv(CodeEnv):
    """Fix a bug in a repository so that its hidden tests pass (see the module docstring)."""

    kind = "agentgym/RepoFix"

    def __init__(self, *, instances: str | None = None, tasks: str | Sequence[str] | None = None, **kwargs: Any):
        kwargs.setdefault("max_turns", 40)
        super().__init__(**kwargs)
        self.instances_path = instances
        loaded = {
            t["instance_id"]: t
            for t in (load_swebench_instances(instances) if instances else repofix_tasks.load_tasks())
        }
        self._tasks = {task_id: loaded[task_id] for task_id in select_tasks(loaded, tasks)}
        self._handlers["run_tests"] = self._run_tests

    def task_ids(self):
        return list(self._tasks)

    def tasks(self) -> list[Task]:
        """The selected instances: goal the bug report, category the mutation operator that planted the bug
        (SWE-bench instances: their repository), reference solution the gold patch (where the instance has one)."""
        return [
            Task(
                task_id,
                task["problem_statement"].strip(),
                task.get("difficulty", {}).get("operator") or task.get("repo", ""),
                {"repo": task.get("repo", ""), "difficulty": task.get("difficulty", {})},
                functools.partial(reference_solution, task) if task.get("patch") else None,
            )
            for task_id, task in self._tasks.items()
        ]

    def task(self, task_id: str | None = None) -> dict:
        return self._tasks[task_id or self.task_id]

    def task_image(self, task_id: str) -> str | None:
        return self._tasks[task_id].get("image") or self.image

    def task_sandbox_config(self, task_id: str) -> SandboxConfig | None:
        if not self._tasks[task_id].get("image"):
            return self.sandbox_config
        # SWE-bench images keep the repository root-owned at /testbed, so their sandboxes run as
        # root — still without network, capabilities or new privileges.
        return dataclasses.replace(
            self.sandbox_config or SandboxConfig(),
            user="0:0",
            working_dir=SWEBENCH_WORKDIR,
            state_file="/root/.agentgym_shell",
        )

    def workdir(self, task_id: str | None = None) -> str:
        return SWEBENCH_WORKDIR if self.task(task_id).get("image") else WORKSPACE

    def tools(self) -> list[ToolSpec]:
        # A test run may take longer than a shell command: by default it gets the most this env allows.
        run_tests = self._with_limits(RUN_TESTS, default=self.max_exec_timeout)
        return [*super().tools()[:-1], run_tests, super().tools()[-1]]

    def _setup(self, task_id: str) -> str:
        lay_out_workspace(self._live_sandbox(), self.task(task_id), self.workdir(task_id))
        return (
            f"You are working in the repository at {self.workdir(task_id)} (a git repository; "
            "your changes are what `git diff` shows). Fix the bug described in this report:\n\n"
            f"{self.task(task_id)['problem_statement'].strip()}\n\n"
            "Use the tools to explore, edit and test; run_tests runs the visible tests. Call submit() "
            "when you are done: hidden tests then check the fix."
        )

    def _run_tests(self, args: dict) -> Outcome:
        paths = " ".join(shlex.quote(p) for p in shlex.split(args.get("paths") or ""))
        command = f"cd {self.workdir()} && {TEST_ENV} python3 -m pytest -q -p no:cacheprovider {paths}"
        timeout = float(args.get("timeout") or self.max_exec_timeout)  # an agent's timeout is capped already
        outcome = self._exec_outcome(self._live_sandbox().exec(command, timeout=timeout))
        if outcome.info["exit_code"] == PYTEST_NO_TESTS:
            outcome.text += "\n[pytest found no visible tests here; the hidden tests run when you submit]"
        return outcome

    def agent_diff(self) -> str:
        """The agent's change to the repository as a binary-safe git diff, minus what grading does not take from it.

        Left out: the hidden test files and the paths the grader owns (:data:`GRADER_OWNED`: tests,
        ``conftest.py``, pytest's configuration, Python's start-up hooks, bytecode), through which a
        policy could change the tests instead of fixing the bug — the first reward hack RL finds.
        The diff goes to a file in the sandbox and is read back with a bound:
        :class:`SubmissionError` when it is over :data:`MAX_DIFF_BYTES` or git cannot make it.
        """
        hidden = [f":(exclude){p}" for p in repofix_tasks.patched_files(self.task()["test_patch"])]
        pathspecs = " ".join(shlex.quote(p) for p in [*hidden, *owned_pathspecs(exclude=True)])
        sandbox = self._live_sandbox()
        # Options the repository's git config cannot override: no external diff or textconv driver
        # may rewrite the output, no colour, the a/ b/ prefixes that git apply expects.
        result = sandbox.exec(
            f"cd {self.workdir()} && out=$(mktemp) && git add -A >/dev/null && git diff --cached --binary "
            f"--no-ext-diff --no-textconv --no-color --src-prefix=a/ --dst-prefix=b/ HEAD -- . {pathspecs} "
            '> "$out" && echo "$out"',
            timeout=60,
        )
        if result.exit_code != 0:
            raise SubmissionError(f"could not compute your diff: {result.output.strip()[-500:]}")
        try:
            data = sandbox.read_file(result.stdout.strip(), max_bytes=MAX_DIFF_BYTES)
        except FileTooLargeError as exc:
            raise SubmissionError(
                f"your diff is {exc.size:,} bytes, over the {MAX_DIFF_BYTES:,}-byte limit on "
                "what is graded (large or binary files in the repository count)"
            ) from None
        except OSError as exc:
            raise SubmissionError(f"could not read your diff back: {exc}") from None
        # surrogateescape keeps bytes that are not UTF-8 (a Latin-1 source file) exactly as they were.
        return data.decode("utf-8", errors="surrogateescape")

    def _grade(self, answer: str | None) -> Verdict:
        task = self.task()
        try:
            diff = self.agent_diff()
        except SubmissionError as exc:
            verdict = _verdict(task, {}, str(exc), reporter=False)
        else:
            verdict = grade_diff(
                task,
                diff,
                image=self.task_image(self.task_id),
                workdir=self.workdir(),
                config=self.task_sandbox_config(self.task_id),
            )
        f2p, p2p = verdict["fail_to_pass"], verdict["pass_to_pass"]
        text = (
            f"Submitted. Hidden tests {'passed' if verdict['resolved'] else 'failed'}: "
            f"FAIL_TO_PASS {f2p['passed']}/{f2p['total']}, PASS_TO_PASS {p2p['passed']}/{p2p['total']}."
        )
        if verdict["error"]:
            text += f"\n{verdict['error']}"
        return Verdict(float(verdict["resolved"]), verdict["resolved"], details=verdict, message=text)


class SubmissionError(Exception):
    """The agent's work cannot be graded (its diff is too large, or git cannot make it); the grade says why."""


def grade_diff(
    task: dict, diff: str, *, image: str | None = None, workdir: str = WORKSPACE, config: SandboxConfig | None = None
) -> dict:
    """Apply a diff and the hidden tests to a fresh copy of the task's workspace and run the tests (see the module docstring).

    Returns :func:`~agentgym.envs.code.repofix_tasks.grade_results`'s verdict (``resolved`` and
    FAIL_TO_PASS/PASS_TO_PASS counts) plus the per-test ``results``, ``reporter`` (whether they come
    from the trusted launcher's record, not from the test log alone) and an ``error`` when a patch
    does not apply, the tests do not run, or the run cannot be trusted.
    """
    sandbox = DockerSandbox.create(image=image, config=config)
    try:
        lay_out_workspace(sandbox, task, workdir)
        error = _apply_patches(sandbox, task, diff, workdir)
        if error:
            return _verdict(task, {}, error, reporter=False)
        return _run_hidden_tests(sandbox, task, workdir)
    finally:
        sandbox.close()


def _apply_patches(sandbox: DockerSandbox, task: dict, diff: str, workdir: str) -> str | None:
    """Apply the agent's diff, put the grader's paths back as they were, apply the hidden tests; the error, if any.

    Leaves ``changed`` in the grading directory: the files that the diff added or changed (NUL-separated),
    whose code the launcher does not trust to implement pytest hooks.
    """
    untracked = "git ls-files -z --others | sort -z"  # ignored files included: a diff may add a .gitignore
    owned = " ".join(shlex.quote(spec) for spec in owned_pathspecs())
    apply = f"git apply --whitespace=nowarn {GRADING_DIR}/agent.diff" if diff.strip() else "true"
    sandbox.write_file(f"{GRADING_DIR}/agent.diff", diff.encode("utf-8", errors="surrogateescape"))
    applied = sandbox.exec(f"cd {workdir} && {untracked} > {GRADING_DIR}/before && {apply}", timeout=60)
    if applied.exit_code != 0:
        return f"your diff does not apply: {applied.output.strip()[:500]}"
    restored = sandbox.exec(
        f"cd {workdir} && {untracked} | comm -z -13 {GRADING_DIR}/before - > {GRADING_DIR}/new"
        f" && git ls-files -z --others -- {owned} | sort -z | comm -z -12 {GRADING_DIR}/new - | xargs -0r rm -rf --"
        f" && git ls-files -z -- {owned} | xargs -0r git checkout -q HEAD --"
        f" && {{ git diff -z --name-only --no-renames HEAD && {untracked} | comm -z -13 {GRADING_DIR}/before -; }}"
        f" > {GRADING_DIR}/changed",
        timeout=60,
    )
    if restored.exit_code != 0:
        return f"the grader could not put its own paths back after your diff: {restored.output.strip()[:500]}"
    sandbox.write_file(f"{GRADING_DIR}/hidden.diff", task["test_patch"])
    applied = sandbox.exec(f"cd {workdir} && git apply --whitespace=nowarn {GRADING_DIR}/hidden.diff", timeout=60)
    if applied.exit_code != 0:
        return f"the hidden tests do not apply: {applied.output.strip()[:500]}"
    return None


def _run_hidden_tests(sandbox: DockerSandbox, task: dict, workdir: str) -> dict:
    command = grading_command(task)
    launcher = f"{GRADING_DIR}/{LAUNCHER.name}"
    trusted = reporter_command(command, launcher)
    log_path, record_path = f"{GRADING_DIR}/test.log", f"{GRADING_DIR}/record.json"
    if trusted is None:
        run = sandbox.exec(f"cd {workdir} && {TEST_ENV} {command} > {log_path} 2>&1", timeout=TEST_TIMEOUT_S)
        log, error = _read_report(sandbox, log_path, "the test log")
        results = repofix_tasks.parse_pytest_report(log or "")
        if not error and not results:
            error = f"the tests did not run (exit code {run.exit_code}): {(log or '').strip()[-500:]}"
        return _verdict(task, {} if error else results, error, reporter=False)
    sandbox.write_file(launcher, LAUNCHER.read_bytes())
    nonce = secrets.token_hex(16)
    setup = {
        "nonce": nonce,
        "record": record_path,
        "changed": f"{GRADING_DIR}/changed",
        "protected": repofix_tasks.patched_files(task["test_patch"]),
    }
    run = sandbox.exec(
        f"cd {workdir} && {TEST_ENV} {trusted} > {log_path} 2>&1",
        timeout=TEST_TIMEOUT_S,
        stdin=json.dumps(setup) + "\n",
    )
    log, log_error = _read_report(sandbox, log_path, "the test log")
    record, record_error = _read_report(sandbox, record_path, "the launcher's record")
    if log_error or record_error:
        return _verdict(task, {}, log_error or record_error, reporter=True)
    results, error = judge_run(task, nonce, record, log or "", run)
    return _verdict(task, results, error, reporter=True)


def _read_report(sandbox: DockerSandbox, path: str, what: str) -> tuple[str | None, str | None]:
    """A file the test run wrote, read with :data:`MAX_REPORT_BYTES` as the bound: (text or None if missing, error)."""
    try:
        return sandbox.read_file(path, max_bytes=MAX_REPORT_BYTES).decode("utf-8", errors="replace"), None
    except FileNotFoundError:
        return None, None
    except FileTooLargeError as exc:
        return None, f"{what} is {exc.size:,} bytes, over the {exc.limit:,}-byte limit on what grading reads"


def judge_run(
    task: dict, nonce: str, record_text: str | None, log: str, run: ExecResult
) -> tuple[dict[str, bool], str | None]:
    """Per-test results from the launcher's record, and why the run cannot be trusted (None when it can).

    The record must exist, carry this run's nonce and report no tampering; the process must have
    exited with the code pytest returned, that code must agree with the outcomes, and the ``-rA``
    summary in the log must agree with the record on every FAIL_TO_PASS and PASS_TO_PASS test.
    """
    tail = log.strip()[-500:]
    if run.timed_out:
        return {}, f"the tests did not finish within {TEST_TIMEOUT_S:.0f} s"
    if record_text is None:
        return {}, (
            f"the test process left no record of its tests (it exited early, with {run.exit_code}, "
            f"or was replaced by another program): {tail}"
        )
    try:
        record = json.loads(record_text)
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("nonce") != nonce:
        return {}, "the record of the tests is not the grader's (its nonce is wrong or missing)"
    if record["tampering"]:
        return {}, "the test process tampered with pytest: " + "; ".join(record["tampering"][:3])
    exit_code = record["exit_code"]
    if exit_code is None:
        return {}, f"pytest did not return: {tail}"
    if run.exit_code != exit_code:
        return {}, (
            f"the test process exited with {run.exit_code} after pytest returned {exit_code}: "
            "something else in it (a thread, a signal) ended it"
        )
    if exit_code not in (0, 1, PYTEST_NO_TESTS):
        return {}, (
            f"pytest stopped with exit code {exit_code} (interrupted, an internal or usage error, "
            f"or errors collecting {record['collect_errors'][:3]}): {tail}"
        )
    tests = record["tests"]
    failed = record["collect_errors"] or any("failed" in phases.values() for phases in tests.values())
    if exit_code != (1 if failed else 0 if tests else PYTEST_NO_TESTS):
        return {}, f"pytest's exit code {exit_code} disagrees with the outcomes it reported"
    results = {nodeid: _passed(phases) for nodeid, phases in tests.items()}
    summary = repofix_tasks.parse_pytest_report(log)
    disagree = [
        t for t in task["FAIL_TO_PASS"] + task["PASS_TO_PASS"] if summary.get(t, False) != results.get(t, False)
    ]
    if disagree:
        return {}, (
            f"the -rA summary and the record disagree on {len(disagree)} test(s), e.g. {disagree[0]} "
            f"(summary: {'passed' if summary.get(disagree[0]) else 'not passed'}, "
            f"record: {tests.get(disagree[0], 'not run')})"
        )
    return results, None


def _passed(phases: dict[str, str]) -> bool:
    return (
        phases.get("setup") == "passed"
        and phases.get("call") in ("passed", "xpassed")
        and phases.get("teardown") == "passed"
    )


_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def reporter_command(command: str, launcher: str) -> str | None:
    """``command`` with the launcher in pytest's place, or None when it is not a plain pytest invocation.

    Plain: ``[VAR=value ...] pytest|py.test ARGS`` (run by the ``python`` beside a pytest given by
    path, else ``python3``) or ``[VAR=value ...] python[X.Y] [OPTIONS] -m pytest ARGS``, with no shell
    operators or expansions.
    """
    if any(char in command for char in "$`\\\n"):
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    if any(set(token) <= set(lexer.punctuation_chars) for token in tokens):
        return None
    start = 0
    while start < len(tokens) and re.fullmatch(r"[A-Za-z_]\w*=.*", tokens[start]):
        start += 1
    assignments, rest = tokens[:start], tokens[start:]
    program = posixpath.basename(rest[0]) if rest else ""
    if program in ("pytest", "py.test"):
        interpreter = [posixpath.join(posixpath.dirname(rest[0]), "python") if "/" in rest[0] else "python3"]
        args = rest[1:]
    elif _PYTHON.fullmatch(program):
        position, interpreter = 1, [rest[0]]
        while position < len(rest) and rest[position] != "-m":
            option = rest[position]
            if not option.startswith("-") or option == "-c":
                return None  # a script or a program text, not pytest
            takes_value = option in ("-W", "-X")
            interpreter += rest[position : position + 1 + takes_value]
            position += 1 + takes_value
        if rest[position : position + 2] != ["-m", "pytest"]:
            return None
        args = rest[position + 2 :]
    else:
        return None
    words = [f"{name}={shlex.quote(value)}" for name, _, value in (a.partition("=") for a in assignments)]
    return " ".join([*words, *(shlex.quote(token) for token in [*interpreter, launcher, *args])])


def _verdict(task: dict, results: dict[str, bool], error: str | None, *, reporter: bool) -> dict:
    verdict = repofix_tasks.grade_results(task, results)
    verdict["resolved"] = verdict["resolved"] and error is None
    return {**verdict, "results": results, "error": error, "reporter": reporter}


def lay_out_workspace(sandbox: DockerSandbox, task: dict, workdir: str) -> None:
    """Put the task's starting repository into the sandbox (SWE-bench images already hold it at /testbed)."""
    if not task.get("image"):
        sandbox.put_tree(
            workdir, workspace_tarball(task["instance_id"], json.dumps(task, sort_keys=True), sandbox.config)
        )


@functools.lru_cache(maxsize=64)
def workspace_tarball(instance_id: str, task_json: str, config: SandboxConfig) -> bytes:
    """The starting workspace as a tar archive (a git repository with one commit) owned by the
    sandbox user, built once per task and config."""
    task = json.loads(task_json)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repofix_tasks.materialize_workspace(task, repo)
        git = ["git", "-c", "user.name=agentgym", "-c", "user.email=agentgym@localhost", "-C", str(repo)]
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        # A fixed date makes the commit, and so the whole workspace, identical across resets.
        subprocess.run(
            [*git, "commit", "-q", "-m", f"{instance_id}: starting state"],
            check=True,
            env={
                "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
                "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
                "PATH": "/usr/bin:/bin",
            },
        )
        return tar_directory(repo, config)
