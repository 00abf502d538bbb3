"""CodeEnv's author hooks in a real sandbox: _setup lays out the task, _grade's Verdict is the submit step (details in info["grade"]), branch_attributes ride through forks."""

import pytest

from agentgym.core import Verdict
from agentgym.envs.code.env import CodeEnv
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker


class NoteEnv(CodeEnv):
    """Write "done" into /workspace/note; graded by reading the file, with a count of bash calls kept outside the sandbox."""

    branch_attributes = ("bash_calls",)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.bash_calls = 0

    def task_ids(self):
        return ["note"]

    def _bash(self, args):
        self.bash_calls += 1
        return super()._bash(args)

    def _setup(self, task_id):
        self._live_sandbox().write_file("/workspace/note", "todo")
        return "Write done into /workspace/note."

    def _grade(self, answer):
        text = self._live_sandbox().read_file("/workspace/note").decode()
        ok = text.strip() == "done"
        return Verdict(float(ok), ok, details={"note": text, "bash_calls": self.bash_calls}, message=f"Note: {text}")


def test_hooks_set_up_grade_and_branch(docker_ready):
    env = NoteEnv()
    try:
        observation, _ = env.reset()
        assert observation["text"] == "Write done into /workspace/note."
        env.step(call("bash", command="echo done > /workspace/note"))
        child = env.fork()
        try:
            assert child.bash_calls == 1
            observation, reward, terminated, _, info = child.step(call("submit"))
            assert (reward, terminated, info["success"]) == (1.0, True, True)
            assert info["grade"] == {"note": "done\n", "bash_calls": 1} and observation["text"] == "Note: done\n"
        finally:
            child.close()
    finally:
        env.close()
