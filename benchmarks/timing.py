"""Timing helpers shared by the benchmark scripts: time a call, and p50/p95 of samples."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Milliseconds ``fn()`` took, and what it returned."""
    started = time.perf_counter()
    value = fn()
    return (time.perf_counter() - started) * 1000, value


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p95)."""
    return statistics.median(samples), pct(samples, 0.95)


def summary(samples: list[float]) -> dict:
    return {"p50": statistics.median(samples), "p95": pct(samples, 0.95), "n": len(samples)}
