"""The README's "Writing an environment" example runs as written, snapshots and forks included."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_writing_an_environment_example_works():
    section = README.read_text().split("## Writing an environment", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    import gymnasium

    env = gymnasium.make("agentgym/Guess-v0")
    env.reset(options={"task_id": "42"})
    assert env.step("guess(50)")[0]["text"] == "Lower."
    branch = env.fork()
    assert branch.step('<tool_call>{"name": "guess", "arguments": {"n": 42}}</tool_call>')[1:3] == (1.0, True)
    assert "must be integer" in env.step('guess("x")')[4]["error"]
