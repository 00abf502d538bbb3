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

import functools
import io
import json
import re
import shlex
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Iterable

from agentgym.actions import ToolSpec
from agentgym.core import Outcome
from agentgym.sandbox.docker import DockerSandbox

from agentgym.envs.code import repofix_gen
from agentgym.envs.code.env import BASH, CodeEnv, _tool

WORKSPACE = "/workspace"
SWEBENCH_WORKDIR = "/testbed"
TEST_TIMEOUT_S = 300.0
RUN_TESTS = _tool("run_tests", "Run the repository's visible tests with pytest (optionally only the given paths or node ids).",
                  [], paths={"type": "string", "description": "space-separated test paths or node ids"},
                  timeout=BASH.properties["timeout"])
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")


def load_swebench_instances(path: str | Path) -> list[dict]:
    """Read SWE-bench instances from a JSON list or a JSONL file.

    Each instance needs ``instance_id``, ``patch``, ``test_patch``, ``FAIL_TO_PASS`` and
    ``PASS_TO_PASS`` (lists, or JSON strings of lists as in the published dataset files), and
    either ``image`` (a Docker image with the repository checked out at ``/testbed``) or
    ``repo`` naming a repository vendored with agentgym.
    """
    text = Path(path).read_text()
    instances = json.loads(text) if text.lstrip().startswith("[") else [
        json.loads(line) for line in text.splitlines() if line.strip()]
    for instance in instances:
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if isinstance(instance.get(key), str):
                instance[key] = json.loads(instance[key])
        missing = {"instance_id", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"} - instance.keys()
        if missing or not ({"image", "repo"} & instance.keys()):
            raise ValueError(f"instance {instance.get('instance_id')!r} lacks {sorted(missing) or 'image or repo'}")
    return instances


def parse_pytest_summary(log: str) -> dict[str, str]:
    """Test id → outcome from pytest's ``-rA`` short summary (the SWE-bench log parser's input)."""
    outcomes = {}
    for line in log.splitlines():
        match = _SUMMARY_LINE.match(line)
        if match:
            outcomes[match.group(2)] = match.group(1)
    return outcomes


def patched_paths(diff: str) -> list[str]:
    """The repository paths a unified diff touches (old and new sides)."""
    paths = set()
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            path = line[4:].split("\t")[0].strip()
            if path != "/dev/null":
                paths.add(path[2:] if path[:2] in ("a/", "b/") else path)
    return sorted(paths)


def tests_command(test_ids: Iterable[str], base: str = "python3 -m pytest -p no:cacheprovider") -> str:
    return f"{base} -rA --tb=short {' '.join(shlex.quote(t) for t in test_ids)}"


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
        paths = shlex.split(args.get("paths") or "")
        command = f"cd {self.workdir()} && {tests_command(paths, self.task().get('test_command') or 'python3 -m pytest -p no:cacheprovider')} -q"
        return self._exec_outcome(self._live_sandbox().exec(command, timeout=self._timeout({"timeout": args.get("timeout") or TEST_TIMEOUT_S})))

    def agent_diff(self) -> str:
        """The agent's change to the repository as a binary-safe git diff against the start."""
        hidden = patched_paths(self.task()["test_patch"])
        excludes = " ".join(shlex.quote(f":(exclude){p}") for p in hidden)
        result = self._live_sandbox().exec(
            f"cd {self.workdir()} && git add -A >/dev/null && git diff --cached --binary HEAD -- . {excludes}",
            timeout=60)
        if result.exit_code != 0:
            raise RuntimeError(f"could not compute the diff: {result.output[:500]}")
        return result.stdout

    def _grade(self) -> Outcome:
        task = self.task()
        verdict = grade_diff(task, self.agent_diff(), image=self.task_image(self.task_id), workdir=self.workdir())
        passed = verdict["success"]
        summary = (f"FAIL_TO_PASS {verdict['fail_to_pass_passed']}/{len(task['FAIL_TO_PASS'])}, "
                   f"PASS_TO_PASS {verdict['pass_to_pass_passed']}/{len(task['PASS_TO_PASS'])}")
        text = f"Submitted. Hidden tests {'passed' if passed else 'failed'}: {summary}."
        if verdict.get("error"):
            text += f"\n{verdict['error']}"
        return Outcome(text, reward=float(passed), terminated=True, success=passed, info={"grade": verdict})


def grade_diff(task: dict, diff: str, *, image: str | None = None, workdir: str = WORKSPACE) -> dict:
    """Apply a diff and the hidden tests to a fresh copy of the task's workspace and run the tests.

    Returns a verdict dict: ``success``, per-test ``outcomes``, counts of passing FAIL_TO_PASS
    and PASS_TO_PASS tests, and ``error`` when the diff does not apply.
    """
    sandbox = DockerSandbox.create(image=image)
    try:
        lay_out_workspace(sandbox, task, workdir)
        sandbox.write_file("/tmp/agent.diff", diff)
        sandbox.write_file("/tmp/test.diff", task["test_patch"])
        if diff.strip():
            applied = sandbox.exec(f"cd {workdir} && git apply --whitespace=nowarn /tmp/agent.diff", timeout=60)
            if applied.exit_code != 0:
                return _verdict(task, {}, error=f"your diff does not apply: {applied.output.strip()[:500]}")
        applied = sandbox.exec(f"cd {workdir} && git apply --whitespace=nowarn /tmp/test.diff", timeout=60)
        if applied.exit_code != 0:
            return _verdict(task, {}, error=f"the hidden tests do not apply: {applied.output.strip()[:500]}")
        test_ids = [*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]]
        base = task.get("test_command") or "python3 -m pytest -p no:cacheprovider"
        sandbox.exec(f"cd {workdir} && {tests_command(test_ids, base)} > /tmp/test.log 2>&1", timeout=TEST_TIMEOUT_S)
        log = sandbox.read_file("/tmp/test.log").decode("utf-8", errors="replace")
    finally:
        sandbox.close()
    return _verdict(task, parse_pytest_summary(log))


def _verdict(task: dict, outcomes: dict[str, str], error: str | None = None) -> dict:
    def passed(test_id: str) -> bool:
        return outcomes.get(test_id) in ("PASSED", "XFAIL")

    f2p = sum(map(passed, task["FAIL_TO_PASS"]))
    p2p = sum(map(passed, task["PASS_TO_PASS"]))
    success = error is None and f2p == len(task["FAIL_TO_PASS"]) and p2p == len(task["PASS_TO_PASS"])
    return {"success": success, "fail_to_pass_passed": f2p, "pass_to_pass_passed": p2p,
            "outcomes": outcomes, "error": error}


def lay_out_workspace(sandbox: DockerSandbox, task: dict, workdir: str) -> None:
    """Put the task's starting repository into the sandbox (SWE-bench images already hold it)."""
    if task.get("image"):
        sandbox.exec(f"cd {workdir}", timeout=10)
        return
    sandbox.put_tree(workdir, workspace_tarball(task["instance_id"], json.dumps(task, sort_keys=True)))
    sandbox.exec(f"cd {workdir}", timeout=10)


def _owned_by_agent(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 1000
    info.uname = info.gname = "agent"
    return info


@functools.lru_cache(maxsize=64)
def workspace_tarball(instance_id: str, task_json: str) -> bytes:
    """The starting workspace as a tar archive (a git repository with one commit), built once per task."""
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
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(repo, arcname=".", filter=_owned_by_agent)
        return buffer.getvalue()
