"""agentgym.envs.gui: desktop-app tasks on an Xvfb desktop in Docker (DesktopEnv), with screenshots and branching."""

from agentgym.envs.gui.env import DesktopEnv

__all__ = ["DesktopEnv"]
