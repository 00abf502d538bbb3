"""Registration: built-ins under agentgym/, and a separately installed plugin package found through entry points."""

import importlib
import inspect
import re
import subprocess
import sys
import textwrap
import warnings

import gymnasium
import pytest
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

import agentgym
from agentgym.core import AgentEnv
from agentgym.registration import ARGUMENT_ENVS, BUILTIN_ENVS


def test_builtin_envs_are_registered_with_gymnasiums_standard_wrappers():
    assert {"agentgym/code.humaneval-v0", "agentgym/code.repofix-v0"} <= set(agentgym.registered_env_ids())
    spec = gymnasium.spec("agentgym/code.humaneval-v0")
    assert spec.order_enforce is True and spec.disable_env_checker is False


def test_register_env_is_idempotent_and_make_returns_the_agent_env():
    env_id = agentgym.register_env("Counter-v0", "tests.helpers.counter:CounterEnv", max_turns=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same registration again is silent
        assert agentgym.register_env("Counter-v0", "tests.helpers.counter:CounterEnv", max_turns=5) == env_id
    env = gymnasium.make(env_id)
    assert isinstance(env, OrderEnforcing) and isinstance(env.env, PassiveEnvChecker)
    assert isinstance(env.unwrapped, AgentEnv) and env.unwrapped.max_turns == 5
    env.reset(seed=0)
    env.close()


def test_registering_a_taken_id_again_replaces_it_with_a_warning():
    """A notebook cell run twice defines a new class; the id must make the new one, and say so."""
    from tests.helpers.counter import CounterEnv

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
    assert type(env.unwrapped) is Second and env.unwrapped.max_turns == 3
    env.close()


def test_plugin_entry_point_registers_envs_in_a_fresh_process(tmp_path):
    """A plugin distribution (dist-info with an agentgym.envs entry point) on sys.path is loaded by `import agentgym`."""
    (tmp_path / "myplugin").mkdir()
    (tmp_path / "myplugin" / "__init__.py").write_text(
        textwrap.dedent("""
        from agentgym import register_env

        def register():
            register_env("PluginCounter-v0", "tests.helpers.counter:CounterEnv", max_turns=4)
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
        "env = gymnasium.make('agentgym/PluginCounter-v0'); print(type(env.unwrapped).__name__, env.unwrapped.max_turns)"
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


BUILTIN_IDS = [f"agentgym/{name}" for name in BUILTIN_ENVS]
#: Every built-in family with known solutions hands out one for every task.
SOLVED = ("code.", "tool.", "text.", "web.shop", "web.mail", "web.wiki", "gui.", "conversation.")


def test_every_builtin_id_follows_the_scheme():
    scheme = re.compile(r"agentgym/(code|tool|text|web|gui|conversation)\.[a-z0-9][a-z0-9_.-]*-v\d+")
    assert all(scheme.fullmatch(env_id) for env_id in BUILTIN_IDS), [i for i in BUILTIN_IDS if not scheme.fullmatch(i)]


def test_no_registered_id_is_an_alias_and_none_warns():
    """A fresh ``import agentgym`` registers the built-ins, each to its own class; importing and making them warns of nothing."""
    script = textwrap.dedent("""
        import warnings
        warnings.simplefilter("error", DeprecationWarning)
        import gymnasium, agentgym
        from agentgym.registration import ARGUMENT_ENVS, BUILTIN_ENVS

        ids = agentgym.registered_env_ids()
        for env_id in ids:
            name = env_id.removeprefix("agentgym/")
            assert gymnasium.spec(env_id).entry_point == {**BUILTIN_ENVS, **ARGUMENT_ENVS}[name][0], env_id
            if name not in ARGUMENT_ENVS:  # those need an argument to be made
                gymnasium.make(env_id).close()
        print(len(ids))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(BUILTIN_ENVS) + len(ARGUMENT_ENVS)


def test_import_agentgym_imports_no_env_family():
    script = "import sys, agentgym; print(sorted(m for m in sys.modules if m.startswith(('agentgym.envs', 'bfcl_eval', 'miniwob', 'aiohttp'))))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "env_id",
    [i for i in BUILTIN_IDS if not i.startswith("agentgym/web.miniwob.")] + ["agentgym/web.miniwob.click-test-v0"],
)
def test_every_builtin_env_lists_its_tasks_with_categories_and_solutions(env_id):
    env = gymnasium.make(env_id)
    try:
        tasks = env.unwrapped.tasks()
        assert [task.id for task in tasks] == list(env.unwrapped.task_ids())
        assert all(isinstance(task, agentgym.Task) and task.category for task in tasks)
        solved = env_id.removeprefix("agentgym/").startswith(SOLVED)
        assert all(task.has_reference_solution == solved for task in tasks)
        if solved:
            steps = tasks[0].reference_solution()
            assert steps and all(isinstance(step, str) or callable(step) for step in steps)
    finally:
        env.close()


def test_envs_list_imports_no_env_module_and_describes_each_env_by_its_own_docstring():
    # `agentgym envs list` built every env to count its tasks: ~6 s on an idle machine (tau2, TextWorld, the
    # desktop apps' generated files), 24-28 s on a loaded one. Descriptions come from the source now.
    probe = (
        "import sys; from agentgym.cli import main; code = main(['envs', 'list']);"
        "print(code, sorted(m for m in sys.modules if m.startswith(('agentgym.envs.', 'agentgym.integrations.'))"
        " or m.split('.')[0] in ('openenv', 'fastmcp', 'tau2', 'textworld', 'docx', 'playwright', 'bfcl_eval')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    *rows, last = result.stdout.splitlines()
    assert last == "0 []", last
    described = dict(row.split(None, 1) for row in rows[1:])
    assert len(described) == len(BUILTIN_ENVS) + len(ARGUMENT_ENVS)

    from agentgym.registration import _first_sentence

    for name, (entry_point, kwargs, *needs) in {**BUILTIN_ENVS, **ARGUMENT_ENVS}.items():
        line = described[f"agentgym/{name}"]
        options = ", ".join(f"{key}={value}" for key, value in kwargs.items())
        suffix = f" (needs {needs[0]}=)" if needs else f" ({options})" if options else ""
        first = line.removesuffix(suffix)
        assert line.endswith(suffix) and first, name
        if name in SAMPLED:
            module, _, cls = entry_point.partition(":")
            assert first == _first_sentence(inspect.cleandoc(vars(importlib.import_module(module))[cls].__doc__)), name


#: One env per entry point whose import is cheap enough for a fast test, compared with its imported class's docstring.
SAMPLED = {"code.humaneval-v0", "tool.keychain-v0", "tool.bfcl-multi-turn-base-v0", "web.shop-v0", "gui.desktop-v0"}


def test_a_plugin_env_is_described_from_its_own_docstring_and_one_that_cannot_load_says_why(tmp_path, monkeypatch):
    (tmp_path / "plugin_envs.py").write_text(
        textwrap.dedent('''
        from tests.helpers.counter import CounterEnv

        class Quiet(CounterEnv):
            pass

        class Loud(CounterEnv):
            """Counts loudly. More text."""

        Alias = Loud
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from agentgym.registration import describe_env
    from tests.helpers.counter import TARGETS

    try:
        for name in ("Quiet", "Loud", "Alias"):
            agentgym.register_env(f"Plugin{name}-v0", f"plugin_envs:{name}", max_turns=3)
        agentgym.register_env("PluginGone-v0", "no_such_plugin_module:Env")
        # Its own docstring (CounterEnv's is not inherited), read from the source or, for a re-export, the import.
        assert describe_env("agentgym/PluginQuiet-v0") == (None, "(max_turns=3)")
        assert describe_env("agentgym/PluginLoud-v0") == (None, "Counts loudly (max_turns=3)")
        assert describe_env("agentgym/PluginAlias-v0", count_tasks=True) == (
            len(TARGETS),
            "Counts loudly (max_turns=3)",
        )
        assert describe_env("agentgym/PluginGone-v0") == (
            None,
            "(cannot be imported here: ModuleNotFoundError: No module named 'no_such_plugin_module')",
        )
    finally:
        for name in ("Quiet", "Loud", "Alias", "Gone"):
            gymnasium.registry.pop(f"agentgym/Plugin{name}-v0", None)
