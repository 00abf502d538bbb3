"""Registering environments under Gymnasium's "agentgym/" namespace: built-ins, entry-point plugins, and a one-line description of each.

``import agentgym`` registers every built-in env (by import path, so nothing heavy is imported
until ``gymnasium.make``) and then every plugin: a separately installed package declares

    [project.entry-points."agentgym.envs"]
    mypackage = "mypackage.envs:register"

where ``register()`` calls :func:`register_env`. A plugin that fails to load is reported as a
warning and skipped; it never breaks ``import agentgym``.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import gymnasium

NAMESPACE = "agentgym"
PLUGIN_GROUP = "agentgym.envs"


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


BUILTIN_ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "HumanEval-v0": ("agentgym.envs.code.humaneval:HumanEvalEnv", {}),
    "RepoFix-v0": ("agentgym.envs.code.repofix:RepoFixEnv", {}),
    "Desktop-v0": ("agentgym.envs.gui.env:DesktopEnv", {}),
    "KeyChain-v0": ("agentgym.envs.tool.keychain:KeyChainEnv", {}),
    **{
        f"BFCL-multi-turn-{category}-v0": ("agentgym.envs.tool.bfcl:BFCLMultiTurnEnv", {"category": category})
        for category in ("base", "miss_func", "miss_param", "long_context")
    },
    **{f"web.{app}-v0": ("agentgym.envs.web.app_env:WebAppEnv", {"app": app}) for app in ("shop", "mail", "wiki")},
    # MiniWoB++: one env per task page of the miniwob package (none when it is not installed).
    **{f"miniwob.{task}-v0": ("agentgym.envs.web.miniwob:MiniWoBEnv", {"task": task}) for task in _miniwob_tasks()},
}

_plugins_loaded = False


def register_env(name: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> str:
    """Register ``agentgym/<name>`` (e.g. ``"Counter-v0"``); returns the full id.

    Registering the same entry point and kwargs again does nothing (a module imported twice).
    Registering other ones under a taken id replaces the old registration with a warning, so a
    class redefined in a notebook cell is the one ``gymnasium.make`` builds.

    The env is registered without Gymnasium's order-enforcing and passive-checker wrappers, so
    that ``gymnasium.make`` returns the :class:`~agentgym.core.AgentEnv` itself and its
    ``snapshot``/``fork`` methods are directly reachable; AgentEnv enforces reset-before-step
    itself, and ``check_env`` runs over every registered env in the test suite.
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
    gymnasium.register(id=env_id, entry_point=entry_point, kwargs=kwargs, order_enforce=False, disable_env_checker=True)
    return env_id


def _same(a: dict, b: dict) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values without a plain equality (arrays): treat them as changed
        return False


def _name(entry_point) -> str:
    return entry_point if isinstance(entry_point, str) else f"{entry_point.__module__}.{entry_point.__qualname__}"


def register_builtin_envs() -> None:
    for name, (entry_point, kwargs) in BUILTIN_ENVS.items():
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


def describe_env(env_id: str) -> tuple[int | None, str]:
    """(number of tasks, one-line description) of a registered env; ``(None, why)`` when it cannot be built.

    The env is built (constructors are cheap: sandboxes start at reset) and closed again. The
    description is the first sentence of its class docstring and the registered keyword arguments.
    """
    spec = gymnasium.spec(env_id)
    try:
        env = spec.make()
        try:
            tasks = len(env.unwrapped.task_ids())
            doc = (type(env.unwrapped).__doc__ or "").strip()
        finally:
            env.close()
    except Exception as exc:  # a plugin env may need what this machine lacks; the listing goes on
        return None, f"(cannot be built here: {type(exc).__name__}: {exc})".splitlines()[0]
    first = doc.split("\n\n", 1)[0].replace("\n", " ")
    first = first.split(" (see ", 1)[0].split(": ", 1)[0].split(". ", 1)[0].rstrip(".")
    options = ", ".join(f"{key}={value}" for key, value in spec.kwargs.items())
    return tasks, f"{first} ({options})" if options else first


def registered_env_ids() -> list[str]:
    """Every env id in the agentgym namespace, sorted."""
    return sorted(env_id for env_id in gymnasium.registry if env_id.startswith(f"{NAMESPACE}/"))
