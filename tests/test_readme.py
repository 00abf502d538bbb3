"""The README's examples run as written: "Writing an environment" (snapshots and forks included) and "Rollouts"."""

import re
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

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

    # Gymnasium's own checker passes without a warning, though GuessEnv never mentions render_mode or render_fps
    # (on the env gymnasium.make built: check_env warns that it checks wrappers instead when given the stack).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gymnasium.make("agentgym/Guess-v0").unwrapped, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


@pytest.mark.docker
def test_rollouts_example_works(docker_ready, tmp_path, monkeypatch):
    section = README.read_text().split("## Rollouts", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example writes rollouts.jsonl to the working directory
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    linear, trees, dataset = namespace["linear"], namespace["trees"], namespace["dataset"]
    assert len(linear.records) == 4 and not linear.failures
    assert len(trees.records) == 2 and all(len(t.leaves) == 6 for t in trees.records)
    assert dataset.num_rows == 4 + 12 and (tmp_path / "rollouts.jsonl").exists()
