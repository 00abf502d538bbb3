"""Registering environments under Gymnasium's "agentgym/" namespace: built-ins and their ids, entry-point plugins, and a one-line description of each.

**Ids.** Every built-in env is ``agentgym/<family>.<name>[-<variant>]-v0``:

* ``<family>`` is the package under ``agentgym/envs`` that holds it: ``code``, ``tool``, ``web``, ``gui``, ``text``,
  ``conversation``;
* ``<name>`` is the env (a benchmark, an app), lowercase, words joined by ``-``; a collection of
  envs with one page each adds the page after a dot (``web.miniwob.<task>``);
* ``<variant>`` selects one configuration of the same env, spelled as its source spells it
  (BFCL's categories keep their underscores: ``tool.bfcl-multi-turn-miss_func-v0``);
* ``-v<N>`` is Gymnasium's version, raised when a change makes old results incomparable.

So: ``code.humaneval-v0``, ``code.repofix-v0``, ``tool.keychain-v0``, ``tool.calculator-v0``,
``tool.bfcl-multi-turn-base-v0``, ``web.shop-v0``, ``web.miniwob.click-test-v0``,
``gui.desktop-v0``, ``gui.desktop-apps-v0``, ``text.babyai-v0``, ``text.scienceworld-v0``, ``text.textworld-v0``,
``text.textworld-express-v0``, ``conversation.tau2-retail-v0``. No other id is registered: an id that changes is
retired, not aliased.

**Where the lists come from.** The web apps and the BFCL categories are plain constants in
:mod:`agentgym.env_lists`, which the families import too; the MiniWoB++ tasks are the pages of
the installed ``miniwob`` package, listed without importing it. So ``import agentgym`` imports no
family and works without the optional parts installed; nothing heavy is imported until
``gymnasium.make``.

**Plugins.** ``import agentgym`` registers every built-in env and then every plugin: a separately
installed package declares

    [project.entry-points."agentgym.envs"]
    mypackage = "mypackage.envs:register"

where ``register()`` calls :func:`register_env`. A plugin that fails to load is reported as a
warning and skipped; it never breaks ``import agentgym``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium

from agentgym.actions import parse_python
from agentgym.env_lists import BFCL_CATEGORIES, TAU2_DOMAINS, WEB_APPS

if TYPE_CHECKING:
    from agentgym.core import AgentEnv

NAMESPACE = "agentgym"
PLUGIN_GROUP = "agentgym.envs"


def _source(module: str) -> list[ast.stmt]:
    """The top-level statements of a module, parsed from its source without importing it (a plugin module's parent
    packages are imported to find it); none for a module without Python source."""
    if module.split(".")[0] == NAMESPACE:
        path = Path(__file__).parent.joinpath(*module.split(".")[1:])
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    else:
        spec = importlib.util.find_spec(module)
        if spec is None or not (spec.origin or "").endswith(".py"):
            return []
        path = Path(spec.origin)
    source = path.read_text(encoding="utf-8")
    return parse_python(source).body  # not ast.parse: CPython gh-106905, see agentgym.actions


def _miniwob_tasks() -> list[str]:
    """The MiniWoB++ tasks of the installed ``miniwob`` package: its html/miniwob/*.html, listed without importing it."""
    try:
        spec = importlib.util.find_spec("miniwob")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"
    return sorted(path.stem for path in folder.glob("*.html"))


_MINIWOB_TASKS = _miniwob_tasks()

#: Built-in ids whose reset with the same seed can differ (Gymnasium's ``EnvSpec.nondeterministic``): LibreOffice
#: paints its status bar a moment after the document window has the focus, so two resets' screenshots can differ
#: there (the accessibility text, the files and the grades do not).
NONDETERMINISTIC_ENVS = frozenset({"gui.desktop-apps-v0"})

#: Built-in id (without the namespace) → (entry point, keyword arguments).
BUILTIN_ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "code.humaneval-v0": ("agentgym.envs.code.humaneval:HumanEvalEnv", {}),
    "code.repofix-v0": ("agentgym.envs.code.repofix:RepoFixEnv", {}),
    "code.agentbench-os-v0": ("agentgym.envs.code.agentbench_os:AgentBenchOSEnv", {}),
    "gui.desktop-v0": ("agentgym.envs.gui.env:DesktopEnv", {}),
    "gui.desktop-apps-v0": ("agentgym.envs.gui.env:DesktopAppsEnv", {}),
    "tool.keychain-v0": ("agentgym.envs.tool.keychain:KeyChainEnv", {}),
    "tool.calculator-v0": ("agentgym.envs.tool.calculator:CalculatorEnv", {}),
    "text.babyai-v0": ("agentgym.envs.text.babyai:BabyAIEnv", {}),
    "text.scienceworld-v0": ("agentgym.envs.text.scienceworld:ScienceWorldEnv", {}),
    "text.textworld-v0": ("agentgym.envs.text.textworld:TextWorldEnv", {}),
    "text.textworld-express-v0": ("agentgym.envs.text.textworld_express:TextWorldExpressEnv", {}),
    **{
        f"tool.bfcl-multi-turn-{category}-v0": ("agentgym.envs.tool.bfcl:BFCLMultiTurnEnv", {"category": category})
        for category in BFCL_CATEGORIES
    },
    **{f"web.{app}-v0": ("agentgym.envs.web.app_env:WebAppEnv", {"app": app}) for app in WEB_APPS},
    **{
        f"conversation.tau2-{domain}-v0": ("agentgym.envs.conversation.tau2:Tau2Env", {"domain": domain})
        for domain in TAU2_DOMAINS
    },
    # MiniWoB++: one env per task page of the miniwob package (none when it is not installed).
    **{
        f"web.miniwob.{task}-v0": ("agentgym.envs.web.miniwob:MiniWoBEnv", {"tasks": [task]}) for task in _MINIWOB_TASKS
    },
}

#: Envs that need an argument to have any task (``gymnasium.make(id, path=...)``, ``url=...``): registered like the
#: built-ins, but with no default tasks, so the checks over every built-in (BUILTIN_ENVS) leave them out.
#: id -> (entry point, registration kwargs, the argument the caller must give).
ARGUMENT_ENVS: dict[str, tuple[str, dict[str, Any], str]] = {
    "code.harbor-v0": ("agentgym.integrations.harbor.env:HarborEnv", {}, "path"),  # Harbor task directories
    # Any OpenEnv server. Not a <family>. id: a server may hold any kind of task.
    "OpenEnv-v0": ("agentgym.integrations.openenv.client_env:OpenEnvEnv", {}, "url"),
}

_plugins_loaded = False


def register_env(name: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> str:
    """Register ``agentgym/<name>`` (e.g. ``"Counter-v0"``); returns the full id.

    Registering the same entry point and kwargs again does nothing (a module imported twice).
    Registering other ones under a taken id replaces the old registration with a warning, so a
    class redefined in a notebook cell is the one ``gymnasium.make`` builds.

    ``gymnasium.make`` returns Gymnasium's standard stack (``OrderEnforcing`` over
    ``PassiveEnvChecker``, ``TimeLimit`` outside them for ``max_episode_steps=``); its
    ``snapshot``/``restore``/``fork`` and async twins reach the env through every wrapper (see
    :mod:`agentgym.wrappers`). The :class:`~agentgym.core.AgentEnv` itself is ``env.unwrapped``.
    """
    env_id = f"{NAMESPACE}/{name}"
    old = gymnasium.registry.get(env_id)
    if old is not None:
        if old.entry_point == entry_point and _same(old.kwargs, kwargs):
            return env_id
        warnings.warn(
            f"{env_id} was registered already (to {_name(old.entry_point)}); it now makes {_name(entry_point)}",
            stacklevel=2,
        )
        del gymnasium.registry[env_id]
    gymnasium.register(
        id=env_id, entry_point=entry_point, kwargs=kwargs, nondeterministic=name in NONDETERMINISTIC_ENVS
    )
    return env_id


def _same(a: dict, b: dict) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values without a plain equality (arrays): treat them as changed
        return False


def _name(entry_point) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{entry_point.__module__}.{entry_point.__qualname__}"


def register_builtin_envs() -> None:
    """Register every built-in id."""
    for name, (entry_point, kwargs) in BUILTIN_ENVS.items():
        register_env(name, entry_point, **kwargs)
    for name, (entry_point, kwargs, _) in ARGUMENT_ENVS.items():
        register_env(name, entry_point, **kwargs)


def load_plugins() -> list[str]:
    """Run every ``agentgym.envs`` entry point once per process; returns the names loaded."""
    global _plugins_loaded
    if _plugins_loaded:
        return []
    _plugins_loaded = True
    loaded = []
    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            target = entry.load()
            if callable(target):
                target()
            loaded.append(entry.name)
        except Exception as exc:
            warnings.warn(f"agentgym plugin {entry.name!r} ({entry.value}) failed to load: {exc}", stacklevel=2)
    return loaded


def describe_env(env_id: str, *, count_tasks: bool = False) -> tuple[int | None, str]:
    """(number of tasks, one-line description) of a registered env.

    The description is the first sentence of the entry point's docstring and the registered keyword
    arguments, read from the source without importing the env's module (importing the families'
    packages, tau2 or TextWorld say, took most of ``agentgym envs list``'s seconds). The number of
    tasks is ``None`` unless ``count_tasks``, which builds the env (constructors start no sandbox;
    some generate their task files) and closes it again; an env that cannot be built here is
    ``(None, why)``, and one that needs an argument (``path=``, ``url=``) has no tasks until given it.
    """
    spec = gymnasium.spec(env_id)
    try:
        description = _first_sentence(_entry_point_doc(spec.entry_point))
    except Exception as exc:  # a plugin's module that cannot be imported here; the listing goes on
        return None, f"(cannot be imported here: {type(exc).__name__}: {exc})".splitlines()[0]
    needs = ARGUMENT_ENVS.get(env_id.removeprefix(f"{NAMESPACE}/"))
    options = ", ".join(f"{key}={value}" for key, value in spec.kwargs.items())
    suffix = f"(needs {needs[2]}=)" if needs else f"({options})" if options else ""
    described = f"{description} {suffix}".strip()
    if needs is not None:
        return None, described
    if not count_tasks:
        return None, described
    try:
        env = spec.make()
        try:
            tasks = len(cast("AgentEnv", env.unwrapped).task_ids())
        finally:
            env.close()
    except Exception as exc:  # a plugin env may need what this machine lacks; the listing goes on
        return None, f"(cannot be built here: {type(exc).__name__}: {exc})".splitlines()[0]
    return tasks, described


def _entry_point_doc(entry_point: Any) -> str:
    """The docstring of what an entry point names (its own, not inherited), from its module's source when it is a
    ``module:Name`` string."""
    if isinstance(entry_point, str):
        return _source_doc(entry_point)
    return inspect.cleandoc(getattr(entry_point, "__doc__", None) or "")


@functools.cache  # one parse per entry point: the 130 MiniWoB++ ids share one
def _source_doc(entry_point: str) -> str:
    module, _, name = entry_point.partition(":")
    try:
        statements = _source(module)
    except (OSError, ImportError, ValueError, SyntaxError):
        statements = []
    for node in statements:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return ast.get_docstring(node) or ""
    # Not defined there (re-exported, assigned) or no source: import it, as gymnasium.make would.
    return _entry_point_doc(gymnasium.envs.registration.load_env_creator(entry_point))


def _first_sentence(doc: str) -> str:
    first = doc.split("\n\n", 1)[0].replace("\n", " ")
    return first.split(" (see ", 1)[0].split(": ", 1)[0].split(". ", 1)[0].rstrip(".")


def make_env_factory(env_id: str, env_kwargs: dict | None = None) -> Callable[[], AgentEnv]:
    """A zero-argument env factory for a registered id or a ``module:Class`` entry point.

    It imports nothing heavy itself, so processes that only host envs (Ray env workers) use it too.
    Wrapping (a memory section's ``MemoryConfig.wrap``) is the caller's: registration sits below every layer that wraps.
    """
    kwargs = dict(env_kwargs or {})
    if ":" in env_id and "/" not in env_id.split(":")[0]:
        module, _, name = env_id.partition(":")
        cls = getattr(importlib.import_module(module), name)
        return lambda: cls(**kwargs)
    import agentgym  # noqa: F401 - registers the built-in envs

    # gymnasium.make's wrappers are typed as plain Envs; the runner drives them as AgentEnvs.
    return lambda: cast("AgentEnv", gymnasium.make(env_id, **kwargs))


def registered_env_ids() -> list[str]:
    """Every env id in the agentgym namespace, sorted."""
    return sorted(env_id for env_id in gymnasium.registry if env_id.startswith(f"{NAMESPACE}/"))
