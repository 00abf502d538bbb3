"""Fixtures for the GUI env tests: one shared env (the desktop image is the root conftest's fixture)."""

import pytest


@pytest.fixture(scope="module")
def env(desktop_image):
    """One DesktopEnv per test module; every reset takes a fresh desktop from the warm pool."""
    from agentgym.envs.gui import DesktopEnv

    env = DesktopEnv(image=desktop_image)
    yield env
    env.close()
