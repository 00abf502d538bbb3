"""Sandboxes: the Sandbox protocol (base) and its backends; the Docker ones load on first use of their names."""

from __future__ import annotations

import importlib

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

__all__ = [
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxSnapshot",
    "SandboxUnavailableError",
    "DiskLimitError",
    "FileTooLargeError",
    "SandboxSaturatedError",
    "DockerSandbox",
    "DockerSnapshot",
    "SandboxConfig",
    "WarmPool",
    "default_pool",
    "gc",
    "build_base_image",
    "require_base_image",
    "base_image_tag",
]

# Importing the Docker SDK takes 0.1-0.2 s; code that never touches Docker should not pay for it.
_LAZY = {
    "DockerSandbox": "docker",
    "DockerSnapshot": "docker",
    "SandboxConfig": "docker",
    "gc": "docker",
    "WarmPool": "pool",
    "default_pool": "pool",
    "build_base_image": "images",
    "require_base_image": "images",
    "base_image_tag": "images",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"agentgym.sandbox.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'agentgym.sandbox' has no attribute {name!r}")
