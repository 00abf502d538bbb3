"""Fixtures for the GUI env tests: the desktop image (built once, like the base image) and one shared env."""

import pytest


@pytest.fixture(scope="session")
def desktop_image(docker_ready):
    """The desktop image's tag; builds it when missing (about two minutes), skips where it cannot be built."""
    from agentgym.sandbox.base import SandboxUnavailableError
    from agentgym.sandbox.desktop import build_desktop_image

    try:
        return build_desktop_image(progress=lambda message: print(f"[agentgym images --desktop] {message}"))
    except SandboxUnavailableError as exc:
        pytest.skip(f"desktop image unavailable: {exc}")


@pytest.fixture(scope="module")
def env(desktop_image):
    """One DesktopEnv per test module; every reset takes a fresh desktop from the warm pool."""
    from agentgym.envs.gui import DesktopEnv

    env = DesktopEnv(image=desktop_image)
    yield env
    env.close()
