"""Sandboxes: the Sandbox protocol (base) and its backends — Docker containers (warm pool, images), Playwright's Chromium, the Xvfb desktop.

The protocol and its errors load with the package; each backend loads on first use of one of
its names (importing the Docker SDK takes 0.1-0.2 s, Playwright more: code that never touches
them should not pay for it).
"""

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
