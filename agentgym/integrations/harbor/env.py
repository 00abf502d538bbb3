"""HarborEnv: Harbor task directories as code tasks (agentgym/code.harbor-v0), and a task's oracle as tool calls (see :mod:`agentgym.integrations.harbor`)."""

from __future__ import annotations

import dataclasses
import functools
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.code.env import CodeEnv
from agentgym.extras import requires
from agentgym.integrations.harbor.dockerfile import SOLUTION_DIR
from agentgym.integrations.harbor.image import build_task_image
from agentgym.integrations.harbor.loader import HarborLimits, HarborTask, HarborTaskError, load_harbor_tasks, read_text
from agentgym.integrations.harbor.verifier import run_verifier
from agentgym.sandbox.base import SandboxError
from agentgym.task import Task, call_text

with requires("code"):
    from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
    from agentgym.sandbox.shell import SYSTEM_PATH

__all__ = ["HarborEnv", "reference_solution"]


def reference_solution(task: HarborTask) -> list[str]:
    """The oracle as tool calls: write ``solution/`` to ``/solution``, run ``solve.sh`` from the working directory, submit."""
    solution = task.path / "solution"
    if not (solution / "solve.sh").is_file():
        raise HarborTaskError(f"Harbor task {task.id} has no solution/solve.sh")
    steps = []
    for item in sorted(p for p in solution.rglob("*") if p.is_file()):
        try:
            content = read_text(item)
        except UnicodeDecodeError:
            raise HarborTaskError(f"{item}: the oracle's files must be text (write_file writes text)") from None
        steps.append(
            call_text(
                "write_file", {"path": f"{SOLUTION_DIR}/{item.relative_to(solution).as_posix()}", "content": content}
            )
        )
    variables = {"DEBIAN_FRONTEND": "noninteractive", **task.config.get("solution", {}).get("env", {})}
    assignments = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in variables.items())
    command = f"cd {shlex.quote(task.workdir)} && {assignments} bash {SOLUTION_DIR}/solve.sh"
    steps.append(call_text("bash", {"command": command, "timeout": int(task.agent_timeout or 120)}))
    steps.append(call_text("submit"))
    return steps


class HarborEnv(CodeEnv):
    """Harbor task directories as code tasks: do what instruction.md asks in the task's container; graded by its hidden tests (see the module docstring).

    ``path=`` is a task directory or a directory of them; ``tasks=`` selects task
    ids (directory names) or a pattern. ``limits`` (a :class:`HarborLimits` or a mapping of its fields)
    caps what a task.toml may ask for: the sandbox's CPUs, memory and disk, and the build, verifier and
    agent timeouts; a task above a cap is refused at load.
    """

    kind = "agentgym/Harbor"

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        tasks: str | Sequence[str] | None = None,
        limits: HarborLimits | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        if path is None:
            raise ValueError("HarborEnv needs path= (a Harbor task directory, or a directory of them)")
        super().__init__(**kwargs)
        self.limits = limits if isinstance(limits, HarborLimits) else HarborLimits(**(limits or {}))
        loaded = load_harbor_tasks(path, self.limits)
        self._tasks = {task_id: loaded[task_id] for task_id in select_tasks(loaded, tasks)}
        self._images: dict[str, str] = {}

    def task_ids(self):
        return list(self._tasks)

    def task(self, task_id: str | None = None) -> HarborTask:
        return self._tasks[task_id or self.task_id]

    def tasks(self) -> list[Task]:
        """The tasks: goal the instruction, category ``[metadata].category``, reference the oracle (solution/solve.sh)."""
        return [
            Task(
                task.id,
                task.instruction.strip(),
                str(task.config.get("metadata", {}).get("category", "harbor")),
                task.metadata(),
                functools.partial(reference_solution, task)
                if (task.path / "solution" / "solve.sh").is_file()
                else None,
            )
            for task in self._tasks.values()
        ]

    def task_image(self, task_id: str) -> str:
        if task_id not in self._images:
            self._images[task_id] = build_task_image(self._tasks[task_id])
        return self._images[task_id]

    def task_sandbox_config(self, task_id: str) -> SandboxConfig:
        task = self._tasks[task_id]
        limits: dict[str, Any] = {"working_dir": task.workdir}
        if task.cpus is not None:
            limits["cpus"] = task.cpus
        if task.memory_mb is not None:
            limits["mem_limit"] = f"{task.memory_mb}m"
        if task.storage_mb is not None:
            limits["disk_limit"] = task.storage_mb * 1024 * 1024
        return dataclasses.replace(self.sandbox_config or SandboxConfig(), **limits)

    def _setup(self, task_id: str) -> str:
        task = self.task(task_id)
        return (
            f"{task.instruction.strip()}\n\n"
            f"(You are in {task.workdir}. Use the tools to do the task, then call submit(): "
            "hidden tests then check the result.)"
        )

    def _grade(self, answer: str | None) -> Verdict:
        task = self.task()
        agent = self._live_sandbox()
        snapshot = agent.snapshot()
        # Root, as Harbor's verifier; the container's own commands see only system directories on PATH
        # (the image's puts the agent's ~/.local/bin first).
        config = dataclasses.replace(
            agent.config,
            user="0:0",
            state_file="/root/.agentgym_shell",
            environment={"PATH": SYSTEM_PATH, "HOME": "/root"},
        )
        try:
            verifier = DockerSandbox.create(image=snapshot.ref, config=config, warm=False)
            try:
                grade = run_verifier(task, verifier, image=self.task_image(task.id))
            except SandboxError as exc:
                # Only the tests and the agent's work run in this container: a failure of it is the work's doing.
                grade = {"reward": 0.0, "rewards": {}, "source": None, "error": f"the verifier's sandbox failed: {exc}"}
            finally:
                verifier.close()
        finally:
            snapshot.release()
        if grade["error"]:
            grade["reward"] = 0.0
        reward = float(grade["reward"])
        success = grade["error"] is None and reward >= 1.0
        text = f"Submitted. The tests gave reward {reward:g}."
        if grade["error"]:
            text = f"Submitted. The tests gave no reward: {grade['error']}"
        return Verdict(reward, success, details=grade, message=text)
