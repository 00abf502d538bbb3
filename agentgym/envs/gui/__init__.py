"""agentgym.envs.gui: desktop-app tasks on an Xvfb desktop in Docker (DesktopEnv), with screenshots and branching.

Names load on first use (the desktop sandbox needs the Docker SDK: the ``gui`` extra).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.envs.gui.env import DesktopAppsEnv, DesktopEnv

_EXPORTS = {"DesktopEnv": "env", "DesktopAppsEnv": "env"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
