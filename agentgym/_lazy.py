"""Lazy exports for package ``__init__`` modules: a name's submodule is imported on first use.

Importing torch, TRL, the Docker SDK or Playwright takes from a tenth of a second to several
seconds; ``import agentgym`` and ``import agentgym.rollout`` should not pay for what the caller
never touches. A package lists its names and the submodule that defines each::

    __getattr__, __dir__ = lazy_exports(__name__, {"Runner": "runner", "HFPolicy": "hf_policy"})

and ``from agentgym.rollout import Runner`` imports ``agentgym.rollout.runner`` then, not before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(module: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` for ``module``.

    Args:
        module: the module's ``__name__``.
        exports: public name → the submodule of ``module`` (relative: ``"runner"``) defining it.
    """
    exports = dict(exports)

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(import_module(f"{module}.{exports[name]}"), name)
            setattr(sys.modules[module], name, value)  # later lookups skip this function
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module])) | set(exports))

    return __getattr__, __dir__
