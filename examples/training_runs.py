"""What the training demo and the learning benchmark share: one training run in this process, logged series, learning curves as SVG.

``examples/train_demo.py`` (``make demo``) and ``benchmarks/learning.py`` measure the same thing
the same way with these; the warm start and the held-out measurement they use are the library's
(:func:`agentgym.trainers.warm_start.scripted_warm_start`, :func:`~agentgym.trainers.warm_start.held_out_success`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["log_series", "mean_interval", "smooth", "train_run", "training_curve", "write_learning_curve"]


def train_run(config_path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """One ``agentgym.train`` run in this process: its log history, wall time, steps, output dir and validations."""
    from agentgym.train import build_trainer, load_config

    trainer = build_trainer(load_config(config_path, list(overrides)))
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    trainer.save_model(trainer.args.output_dir)
    trainer.save_state()
    return {
        "log": trainer.state.log_history,
        "wall_s": wall,
        "steps": trainer.state.global_step,
        "output_dir": trainer.args.output_dir,
        "validation": trainer.validation,  # best, last ({step, success}; None without validation_tasks) and history
    }


def log_series(log: list[dict], key: str) -> list[float]:
    """The logged values of ``key``, in order, without gaps or NaNs."""
    return [h[key] for h in log if key in h and h[key] is not None and not math.isnan(h[key])]


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` (one per seed) and its Student-t confidence interval.

    With one value the interval is unknown: ``(x, nan, nan)``.
    """
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, math.nan, math.nan
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def smooth(values: Sequence[float], window: int = 5) -> list[float]:
    """Trailing moving average (the first points average what there is)."""
    return [
        math.fsum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))
    ]


def training_curve(log: list[dict], window: int = 5) -> list[tuple[float, float]]:
    """(env steps so far, smoothed training success) per logged step (both trainers log ``rollout/env_steps_total``)."""
    points = [
        (h["rollout/env_steps_total"], h["rollout/success_rate"])
        for h in log
        if "rollout/env_steps_total" in h and "rollout/success_rate" in h
    ]
    return list(zip([x for x, _ in points], smooth([y for _, y in points], window)))


def curve_text(curve: Sequence[tuple[float, float]], points: int = 8) -> str:
    """``points`` evenly spaced samples of a curve (always its last point) as ``x:y`` pairs, for a terminal."""
    if not curve:
        return "(no logged steps)"
    picks = sorted({round(i * (len(curve) - 1) / max(1, points - 1)) for i in range(points)})
    return "  ".join(f"{curve[i][0]:,.0f}:{curve[i][1]:.2f}" for i in picks)


def write_learning_curve(
    curves: dict[str, list[tuple[float, float]]],
    path: str | Path,
    title: str = "",
    xlabel: str = "env steps",
    ylabel: str = "training success (moving average)",
) -> Path:
    """The curves (y in [0, 1]) as a self-contained SVG: no plotting library needed."""
    width, height, pad = 640, 360, 48
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
    xmax = max((x for curve in curves.values() for x, _ in curve), default=1.0) or 1.0
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{xlabel} (0 to {xmax:.0f})</text>',
        f'<text x="12" y="{height / 2}" transform="rotate(-90 12 {height / 2})" text-anchor="middle">{ylabel}</text>',
        f'<text x="{pad - 6}" y="{pad + 4}" text-anchor="end">1</text>',
        f'<text x="{pad - 6}" y="{height - pad + 4}" text-anchor="end">0</text>',
    ]
    for i, (name, curve) in enumerate(curves.items()):
        color = palette[i % len(palette)]
        coords = " ".join(
            f"{pad + (width - 2 * pad) * x / xmax:.1f},{height - pad - (height - 2 * pad) * y:.1f}" for x, y in curve
        )
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        lines.append(f'<text x="{width - pad - 120}" y="{pad + 16 * i}" fill="{color}">{name}</text>')
    lines.append("</svg>")
    path = Path(path)
    path.write_text("\n".join(lines))
    return path
