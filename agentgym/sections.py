"""Config sections (a YAML mapping such as a trainer's ``memory:`` or ``ray:``) read into dataclasses, refusing unknown keys."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["from_section"]

T = TypeVar("T")


def from_section(cls: type[T], section: Any, name: str) -> T:
    """``cls(**section)`` for the section called ``name``; a non-mapping or an unknown key (a typo) is a ValueError naming it."""
    if not isinstance(section, dict):
        raise ValueError(f"{name}: expected a mapping, got {type(section).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(section) - known)
    if unknown:
        raise ValueError(f"{name}: unknown keys {unknown}; known: {sorted(known)}")
    return cls(**section)
