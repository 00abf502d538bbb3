"""Sandboxes: the Sandbox protocol (base) and its backends — Docker containers (warm pool, images), Playwright's Chromium, the Xvfb desktop.

The protocol and its errors load with the package; each backend loads on first use of one of
its names (importing the Docker SDK takes 0.1-0.2 s, Playwright more: code that never touches
them should not pay for it).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports
from agentgym.sandbox.base import (
    DiskLimitError,
    ExecResult,
    FileTooLargeError,
    Sandbox,
    SandboxError,
    SandboxSaturatedError,
    SandboxSnapshot,
    SandboxUnavailableError,
)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.sandbox.browser import BrowserHost, BrowserSession
    from agentgym.sandbox.cleanup import GcReport, gc
    from agentgym.sandbox.containers import SandboxConfig
    from agentgym.sandbox.desktop import DesktopSandbox, build_desktop_image, require_desktop_image
    from agentgym.sandbox.docker import DockerSandbox, DockerSnapshot
    from agentgym.sandbox.images import base_image_tag, build_base_image, require_base_image
    from agentgym.sandbox.pool import WarmPool, default_pool

_LAZY = {
    "SandboxConfig": "containers",
    "DockerSandbox": "docker",
    "DockerSnapshot": "docker",
    "WarmPool": "pool",
    "default_pool": "pool",
    "GcReport": "cleanup",
    "gc": "cleanup",
    "base_image_tag": "images",
    "build_base_image": "images",
    "require_base_image": "images",
    "BrowserHost": "browser",
    "BrowserSession": "browser",
    "DesktopSandbox": "desktop",
    "build_desktop_image": "desktop",
    "require_desktop_image": "desktop",
}

__all__ = [
    "DiskLimitError",
    "ExecResult",
    "FileTooLargeError",
    "Sandbox",
    "SandboxError",
    "SandboxSaturatedError",
    "SandboxSnapshot",
    "SandboxUnavailableError",
    *_LAZY,
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
