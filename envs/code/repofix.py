"""agentgym/RepoFix-v0: SWE-bench-style bug fixing in a real repository, graded by hidden FAIL_TO_PASS/PASS_TO_PASS tests.

Tasks are SWE-bench instances. The shipped ones come from :mod:`agentgym.envs.code.repofix_gen`,
which injects real bugs into vendored libraries with real test suites; their workspace is the
pristine repository with ``bug_patch`` applied (which also removes the hidden test files),
committed to git so that the agent's work is ``git diff``. Instances from SWE-bench files
(:func:`load_swebench_instances`) carry an ``image`` with the repository at ``/testbed``.

Grading (``submit()``) follows SWE-bench: the agent's diff, minus changes to the files that
``test_patch`` touches, is applied to a clean copy of the starting workspace in a *fresh*
container; ``test_patch`` is applied; the FAIL_TO_PASS and PASS_TO_PASS tests run. Success, and
reward 1.0, only when every one of them passes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import subprocess
import tempfile
from pathlib import Path

from agentgym.actions import ToolSpec
from agentgym.core import Outcome
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig, tar_directory

from agentgym.envs.code import repofix_gen
from agentgym.envs.code.env import BASH, CodeEnv, _tool

WORKSPACE = "/workspace"
SWEBENCH_WORKDIR = "/testbed"
TEST_TIMEOUT_S = 300.0
UNTRUSTED_TEST_CONFIG = (":(exclude,glob)**/conftest.py", ":(exclude)pytest.ini", ":(exclude)tox.ini")
PYTEST_NO_TESTS = 5  # pytest's exit code when it collected nothing
RUN_TESTS = _tool("run_tests", "Run the repository's visible tests with pytest (optionally only the given paths or node ids).",
                  [], paths={"type": "string", "description": "space-separated test paths or node ids"},
                  timeout=BASH.properties["timeout"])
# What the generator ran the tests with, so verdicts here match the verified ones.
TEST_ENV = "PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"


def load_swebench_instances(path: str | Path) -> list[dict]:
    """Read SWE-bench instances from a JSONL file or a JSON list (the published dataset's format).

    Each instance needs ``instance_id``, ``test_patch``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS``
    and either ``image`` (a Docker image with the repository checked out at ``/testbed``) or
    ``repo`` naming a repository vendored with agentgym. ``test_command`` (default: pytest with
    ``-rA`` on the files that ``test_patch`` touches) must print pytest's ``-rA`` summary.
    """
    instances = repofix_gen.load_tasks(path)
    for instance in instances:
        missing = {"instance_id", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"} - instance.keys()
        if missing or not ({"image", "repo"} & instance.keys()):
            raise ValueError(f"instance {instance.get('instance_id')!r} lacks {sorted(missing) or 'image or repo'}")
    return instances


def grading_command(task: dict) -> str:
    """The task's test command (SWE-bench instances may omit it: then pytest on the test_patch files)."""
    if task.get("test_command"):
        return task["test_command"]
    files = " ".join(shlex.quote(f) for f in repofix_gen.patched_files(task["test_patch"]))
    return f"python3 -m pytest -rA -p no:cacheprovider {files}"


class RepoFixEnv(CodeEnv):
    """Fix a bug in a repository so that its hidden tests pass (see the module docstring)."""

    kind = "agentgym/RepoFix"

    def __init__(self, *, instances: str | None = None, **kwargs):
        kwargs.setdefault("max_turns", 40)
        super().__init__(**kwargs)
        self.instances_path = instances
        tasks = load_swebench_instances(instances) if instances else repofix_gen.load_tasks()
        self._tasks = {t["instance_id"]: t for t in tasks}
        self._handlers["run_tests"] = self._run_tests

    def task_ids(self):
        return list(self._tasks)

    def task(self, task_id: str | None = None) -> dict:
        return self._tasks[task_id or self.task_id]

    def task_image(self, task_id: str) -> str | None:
        return self._tasks[task_id].get("image") or self.image

    def task_sandbox_config(self, task_id: str) -> SandboxConfig | None:
        if not self._tasks[task_id].get("image"):
            return self.sandbox_config
        # SWE-bench images keep the repository root-owned at /testbed, so their sandboxes run as
        # root — still without network, capabilities or new privileges.
        return dataclasses.replace(self.sandbox_config or SandboxConfig(), user="0:0", working_dir=SWEBENCH_WORKDIR,
                                   state_file="/root/.agentgym_shell")

    def workdir(self, task_id: str | None = None) -> str:
        return SWEBENCH_WORKDIR if self.task(task_id).get("image") else WORKSPACE

    def tools(self) -> list[ToolSpec]:
        return [*super().tools()[:-1], RUN_TESTS, super().tools()[-1]]

    def _prepare(self, sandbox: DockerSandbox, task_id: str) -> str:
        lay_out_workspace(sandbox, self.task(task_id), self.workdir(task_id))
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
        outcome = self._exec_outcome(self._live_sandbox().exec(command, timeout=args.get("timeout") or TEST_TIMEOUT_S))
        if outcome.info["exit_code"] == PYTEST_NO_TESTS:
            outcome.text += "\n[pytest found no visible tests here; the hidden tests run when you submit]"
        return outcome

    def agent_diff(self) -> str:
        """The agent's change to the repository as a binary-safe git diff, minus what grading must not trust.

        Left out: the hidden test files, and pytest's own configuration (``conftest.py`` anywhere,
        ``pytest.ini``, ``tox.ini``), through which a policy could rewrite test outcomes instead of
        fixing the bug — the first reward hack RL finds.
        """
        hidden = [f":(exclude){p}" for p in repofix_gen.patched_files(self.task()["test_patch"])]
        excludes = " ".join(shlex.quote(p) for p in [*hidden, *UNTRUSTED_TEST_CONFIG])
        result = self._live_sandbox().exec(
            f"cd {self.workdir()} && git add -A >/dev/null && git diff --cached --binary HEAD -- . {excludes}",
            timeout=60)
        if result.exit_code != 0:
            raise RuntimeError(f"could not compute the diff: {result.output[:500]}")
        return result.stdout

    def _grade(self) -> Outcome:
        task = self.task()
        verdict = grade_diff(task, self.agent_diff(), image=self.task_image(self.task_id), workdir=self.workdir(),
                             config=self.task_sandbox_config(self.task_id))
        f2p, p2p = verdict["fail_to_pass"], verdict["pass_to_pass"]
        text = (f"Submitted. Hidden tests {'passed' if verdict['resolved'] else 'failed'}: "
                f"FAIL_TO_PASS {f2p['passed']}/{f2p['total']}, PASS_TO_PASS {p2p['passed']}/{p2p['total']}.")
        if verdict["error"]:
            text += f"\n{verdict['error']}"
        return Outcome(text, reward=float(verdict["resolved"]), terminated=True, success=verdict["resolved"],
                       info={"grade": verdict})


def grade_diff(task: dict, diff: str, *, image: str | None = None, workdir: str = WORKSPACE,
               config: SandboxConfig | None = None) -> dict:
    """Apply a diff and the hidden tests to a fresh copy of the task's workspace and run the tests.

    Returns :func:`~agentgym.envs.code.repofix_gen.grade_results`'s verdict (``resolved`` and
    FAIL_TO_PASS/PASS_TO_PASS counts) plus the per-test ``results`` and an ``error`` when a
    patch does not apply or the tests do not run.
    """
    patches = [("your diff", diff)] if diff.strip() else []
    patches.append(("the hidden tests", task["test_patch"]))
    sandbox = DockerSandbox.create(image=image, config=config)
    try:
        lay_out_workspace(sandbox, task, workdir)
        for name, patch in patches:
            sandbox.write_file("/tmp/grading.diff", patch)
            applied = sandbox.exec(f"cd {workdir} && git apply --whitespace=nowarn /tmp/grading.diff", timeout=60)
            if applied.exit_code != 0:
                return _verdict(task, {}, f"{name} does not apply: {applied.output.strip()[:500]}")
        run = sandbox.exec(f"cd {workdir} && {TEST_ENV} {grading_command(task)} > /tmp/test.log 2>&1",
                           timeout=TEST_TIMEOUT_S)
        log = sandbox.read_file("/tmp/test.log").decode("utf-8", errors="replace")
    finally:
        sandbox.close()
    results = repofix_gen.parse_pytest_report(log)
    error = None if results else f"the tests did not run (exit code {run.exit_code}): {log.strip()[-500:]}"
    return _verdict(task, results, error)


def _verdict(task: dict, results: dict[str, bool], error: str | None) -> dict:
    verdict = repofix_gen.grade_results(task, results)
    verdict["resolved"] = verdict["resolved"] and error is None
    return {**verdict, "results": results, "error": error}


def lay_out_workspace(sandbox: DockerSandbox, task: dict, workdir: str) -> None:
    """Put the task's starting repository into the sandbox (SWE-bench images already hold it at /testbed)."""
    if not task.get("image"):
        sandbox.put_tree(workdir, workspace_tarball(task["instance_id"], json.dumps(task, sort_keys=True),
                                                    sandbox.config))


@functools.lru_cache(maxsize=64)
def workspace_tarball(instance_id: str, task_json: str, config: SandboxConfig) -> bytes:
    """The starting workspace as a tar archive (a git repository with one commit) owned by the
    sandbox user, built once per task and config."""
    task = json.loads(task_json)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repofix_gen.materialize_workspace(task, repo)
        git = ["git", "-c", "user.name=agentgym", "-c", "user.email=agentgym@localhost", "-C", str(repo)]
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        # A fixed date makes the commit, and so the whole workspace, identical across resets.
        subprocess.run([*git, "commit", "-q", "-m", f"{instance_id}: starting state"], check=True,
                       env={"GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
                            "PATH": "/usr/bin:/bin"})
        return tar_directory(repo, config)
