"""Registration: built-ins under agentgym/, and a separately installed plugin package found through entry points."""

import subprocess
import sys
import textwrap
import warnings

import gymnasium
import pytest

import agentgym
from agentgym.core import AgentEnv


def test_builtin_envs_are_registered_without_wrappers():
    assert {"agentgym/HumanEval-v0", "agentgym/RepoFix-v0"} <= set(agentgym.registered_env_ids())
    spec = gymnasium.spec("agentgym/HumanEval-v0")
    assert spec.order_enforce is False and spec.disable_env_checker is True


def test_register_env_is_idempotent_and_make_returns_the_agent_env():
    env_id = agentgym.register_env("Counter-v0", "tests.envs.counter:CounterEnv", max_turns=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same registration again is silent
        assert agentgym.register_env("Counter-v0", "tests.envs.counter:CounterEnv", max_turns=5) == env_id
    env = gymnasium.make(env_id)
    assert isinstance(env, AgentEnv) and env.max_turns == 5
    env.reset(seed=0)
    env.close()


def test_registering_a_taken_id_again_replaces_it_with_a_warning():
    """A notebook cell run twice defines a new class; the id must make the new one, and say so."""
    from tests.envs.counter import CounterEnv

    class First(CounterEnv):
        pass

    class Second(CounterEnv):
        pass

    env_id = agentgym.register_env("Redefined-v0", First)
    with pytest.warns(
        UserWarning, match=r"agentgym/Redefined-v0 was registered already \(to .*First\); it now makes .*Second"
    ):
        agentgym.register_env("Redefined-v0", Second)
    with pytest.warns(UserWarning, match="was registered already"):
        agentgym.register_env("Redefined-v0", Second, max_turns=3)  # other kwargs are a change too
    env = gymnasium.make(env_id)
    assert type(env) is Second and env.max_turns == 3
    env.close()


def test_plugin_entry_point_registers_envs_in_a_fresh_process(tmp_path):
    """A plugin distribution (dist-info with an agentgym.envs entry point) on sys.path is loaded by `import agentgym`."""
    (tmp_path / "myplugin").mkdir()
    (tmp_path / "myplugin" / "__init__.py").write_text(
        textwrap.dedent("""
        from agentgym import register_env

        def register():
            register_env("PluginCounter-v0", "tests.envs.counter:CounterEnv", max_turns=4)
    """)
    )
    dist = tmp_path / "myplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentgym.envs]\nmyplugin = myplugin:register\n")
    broken = tmp_path / "broken-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[agentgym.envs]\nbroken = no_such_module:register\n")
    script = (
        "import sys, warnings; sys.path.insert(0, sys.argv[1]); warnings.simplefilter('always');\n"
        "import gymnasium, agentgym\n"
        "env = gymnasium.make('agentgym/PluginCounter-v0'); print(type(env).__name__, env.max_turns)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=str(__import__("pathlib").Path(__file__).parents[1]),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "CounterEnv 4"
    assert "plugin 'broken'" in result.stderr and "failed to load" in result.stderr
