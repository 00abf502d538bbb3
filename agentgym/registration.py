"""Registering environments under Gymnasium's "agentgym/" namespace: built-ins and entry-point plugins.

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
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

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
    **{f"BFCL-multi-turn-{category}-v0": ("agentgym.envs.tool.bfcl:BFCLMultiTurnEnv", {"category": category})
       for category in ("base", "miss_func", "miss_param", "long_context")},
    **{f"web.{app}-v0": ("agentgym.envs.web.app_env:WebAppEnv", {"app": app}) for app in ("shop", "mail", "wiki")},
    # MiniWoB++: one env per task page of the miniwob package (none when it is not installed).
    **{f"miniwob.{task}-v0": ("agentgym.envs.web.miniwob:MiniWoBEnv", {"task": task}) for task in _miniwob_tasks()},
}

_plugins_loaded = False


def register_env(name: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> str:
    """Register ``agentgym/<name>`` (e.g. ``"Counter-v0"``); returns the full id. Idempotent.

    The env is registered without Gymnasium's order-enforcing and passive-checker wrappers, so
    that ``gymnasium.make`` returns the :class:`~agentgym.core.AgentEnv` itself and its
    ``snapshot``/``fork`` methods are directly reachable; AgentEnv enforces reset-before-step
    itself, and ``check_env`` runs over every registered env in the test suite.
    """
    env_id = f"{NAMESPACE}/{name}"
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=entry_point, kwargs=kwargs,
                           order_enforce=False, disable_env_checker=True)
    return env_id


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


def registered_env_ids() -> list[str]:
    """Every env id in the agentgym namespace, sorted."""
    return sorted(env_id for env_id in gymnasium.registry if env_id.startswith(f"{NAMESPACE}/"))
