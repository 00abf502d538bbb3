"""Evaluation metrics over result rows: pass@k, pass^k, bootstrap confidence intervals, run summaries and paired run comparison.

A result row is one finished episode as written to ``results.jsonl`` (``task_id``, ``success``,
``turns``, ``tokens_in``, ``tokens_out``, ``wall_s``, ``error``, ...). Tasks, not episodes, are
the unit of sampling: samples of one task are correlated, so every rate is the mean of per-task
rates and every interval resamples tasks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "pass_at_k",
    "pass_hat_k",
    "mean_pass_at_k",
    "mean_pass_hat_k",
    "bootstrap_ci",
    "summarize",
    "summarize_by",
    "compare",
    "per_task",
    "ENV_ERROR_PREFIXES",
    "PROGRAM_ERROR_PREFIX",
]

# Errors that are the environment's fault rather than the model's; their share tells whether a
# run measured the model at all.
ENV_ERROR_PREFIXES = ("env_error", "timeout")
# An agent program's crash, non-zero exit, kill or timeout (the eval harness's ``program_error`` kind): the agent's
# failure, counted beside the env's.
PROGRAM_ERROR_PREFIX = "program_error"

# Cap on resamples x tasks entries held at once, so large suites bootstrap in bounded memory.
_CHUNK_ELEMENTS = 2_000_000


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate 1 - C(n-c, k)/C(n, k) for ``c`` successes out of ``n`` samples.

    Computed as the product form of Chen et al. (2021) to avoid huge binomials.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """τ-bench's reliability pass^k = C(c, k)/C(n, k): the chance that ``k`` samples drawn without replacement from ``n`` all succeed.

    pass@k asks whether any of k tries succeeds; pass^k whether all of them do (Yao et al., 2024,
    τ-bench; τ²-bench reports it per task and averages over tasks). Product form, as :func:`pass_at_k`.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if c < k:
        return 0.0
    return float(np.prod((c - np.arange(k)) / (n - np.arange(k))))


def mean_pass_hat_k(per_task: Iterable[tuple[int, int]], k: int) -> float | None:
    """pass^k averaged over tasks given as ``(n, c)`` pairs; tasks with fewer than ``k`` samples are left out (``None``: none has ``k``)."""
    values = [pass_hat_k(n, c, k) for n, c in per_task if n >= k]
    return float(np.mean(values)) if values else None


def _ci_over_tasks(metric, counts: Sequence[tuple[int, int]], k: int, resamples: int, seed: int) -> list[float | None]:
    """The bootstrap interval (over tasks) of ``metric(n, c, k)`` averaged over the tasks with ``k`` samples."""
    values = [metric(n, c, k) for n, c in counts if n >= k]
    if not values:
        return [None, None]
    return list(bootstrap_ci(values, resamples=resamples, seed=seed))


def mean_pass_at_k(per_task: Iterable[tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over tasks given as ``(n, c)`` pairs; tasks with fewer than ``k`` samples are left out.

    ``None`` when no task has ``k`` samples.
    """
    values = [pass_at_k(n, c, k) for n, c in per_task if n >= k]
    return float(np.mean(values)) if values else None


def bootstrap_ci(
    per_task_values: Sequence[float], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``per_task_values``, resampling tasks with replacement."""
    values = np.asarray(per_task_values, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    means = _bootstrap_means(values, resamples, np.random.default_rng(seed))
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _bootstrap_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    means = np.empty(resamples)
    chunk = max(1, _CHUNK_ELEMENTS // values.size)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = values[rng.integers(0, values.size, size=(stop - start, values.size))].mean(axis=1)
    return means


def per_task(results: Iterable[dict]) -> dict[str, list[dict]]:
    """Result rows grouped by ``task_id``, in first-seen order."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in results:
        groups[row["task_id"]].append(row)
    return dict(groups)


def _is_env_error(row: dict) -> bool:
    return bool(row.get("error")) and str(row["error"]).startswith(ENV_ERROR_PREFIXES)


def _is_program_error(row: dict) -> bool:
    return bool(row.get("error")) and str(row["error"]).startswith(PROGRAM_ERROR_PREFIX)


def summarize(results: Sequence[dict], k: int, resamples: int = 10_000, seed: int = 0) -> dict:
    """The ``metrics`` object of ``summary.json`` for these result rows.

    ``success_rate`` is the mean over tasks of each task's success rate (equal to pass@1);
    ``success_ci95`` bootstraps it over tasks. ``pass_at_k`` holds every k' in 1..k (keys are
    strings, for JSON), so a report can draw the curve; ``pass_hat_k`` holds τ-bench's pass^k' for
    the same k' (:func:`pass_hat_k`); ``pass_at_k_ci95`` and ``pass_hat_k_ci95`` their 95% intervals,
    bootstrapped over tasks. ``mean_turns`` is per episode;
    ``tokens_in``/``tokens_out``/``wall_s`` are run totals; ``env_error_rate`` is the share of
    episodes whose error starts with "env_error" or "timeout"; ``program_error_rate`` the share whose
    agent program failed (error kind "program_error"). Rates are ``None`` for no rows.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    results = list(results)
    totals = {
        "tokens_in": int(sum(r["tokens_in"] for r in results)),
        "tokens_out": int(sum(r["tokens_out"] for r in results)),
        "wall_s": float(sum(r["wall_s"] for r in results)),
    }
    if not results:
        return {
            "success_rate": None,
            "success_ci95": [None, None],
            "pass_at_k": {str(j): None for j in range(1, k + 1)},
            "pass_at_k_ci95": {str(j): [None, None] for j in range(1, k + 1)},
            "pass_hat_k": {str(j): None for j in range(1, k + 1)},
            "pass_hat_k_ci95": {str(j): [None, None] for j in range(1, k + 1)},
            "mean_turns": None,
            **totals,
            "env_error_rate": None,
            "program_error_rate": None,
        }
    groups = per_task(results)
    counts = [(len(rows), sum(bool(r["success"]) for r in rows)) for rows in groups.values()]
    rates = [c / n for n, c in counts]
    lo, hi = bootstrap_ci(rates, resamples=resamples, seed=seed)
    return {
        "success_rate": float(np.mean(rates)),
        "success_ci95": [lo, hi],
        "pass_at_k": {str(j): mean_pass_at_k(counts, j) for j in range(1, k + 1)},
        "pass_at_k_ci95": {str(j): _ci_over_tasks(pass_at_k, counts, j, resamples, seed) for j in range(1, k + 1)},
        "pass_hat_k": {str(j): mean_pass_hat_k(counts, j) for j in range(1, k + 1)},
        "pass_hat_k_ci95": {str(j): _ci_over_tasks(pass_hat_k, counts, j, resamples, seed) for j in range(1, k + 1)},
        "mean_turns": float(np.mean([r["turns"] for r in results])),
        **totals,
        "env_error_rate": sum(map(_is_env_error, results)) / len(results),
        "program_error_rate": sum(map(_is_program_error, results)) / len(results),
    }


def summarize_by(
    results: Sequence[dict], key: str = "category", k: int = 1, resamples: int = 10_000, seed: int = 0
) -> dict[str, dict]:
    """:func:`summarize` for each value of ``key`` (sorted by value)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in results:
        groups[str(row[key])].append(row)
    return {value: summarize(rows, k, resamples, seed) for value, rows in sorted(groups.items())}


def compare(results_a: Sequence[dict], results_b: Sequence[dict], resamples: int = 10_000, seed: int = 0) -> dict:
    """Run A against run B, paired over the task ids both ran.

    ``difference`` is mean over shared tasks of (A's task success rate - B's). Its 95% interval is
    a paired bootstrap over tasks; ``p_value`` is a two-sided sign-flip permutation test of "no
    difference" (exact when 2**tasks <= resamples). ``only_a``/``only_b`` count unpaired tasks,
    which take no part.
    """
    rates_a = {task: np.mean([bool(r["success"]) for r in rows]) for task, rows in per_task(results_a).items()}
    rates_b = {task: np.mean([bool(r["success"]) for r in rows]) for task, rows in per_task(results_b).items()}
    shared = sorted(rates_a.keys() & rates_b.keys())
    out = {
        "tasks": len(shared),
        "only_a": len(rates_a.keys() - rates_b.keys()),
        "only_b": len(rates_b.keys() - rates_a.keys()),
    }
    if not shared:
        return {
            **out,
            "success_rate_a": None,
            "success_rate_b": None,
            "difference": None,
            "difference_ci95": [None, None],
            "p_value": None,
        }
    a = np.array([rates_a[t] for t in shared], dtype=float)
    b = np.array([rates_b[t] for t in shared], dtype=float)
    diffs = a - b
    lo, hi = bootstrap_ci(diffs, resamples=resamples, seed=seed)
    return {
        **out,
        "success_rate_a": float(a.mean()),
        "success_rate_b": float(b.mean()),
        "difference": float(diffs.mean()),
        "difference_ci95": [lo, hi],
        "p_value": _sign_flip_p_value(diffs, resamples, np.random.default_rng(seed)),
    }


def _sign_flip_p_value(diffs: np.ndarray, resamples: int, rng: np.random.Generator) -> float:
    # Under the null each task's difference is as likely to have either sign, so flipping signs
    # gives the null distribution of the mean difference.
    observed = abs(diffs.mean())
    tolerance = 1e-12  # ties count as "as extreme"; floating sums of the same values may differ in the last bit
    n = diffs.size
    if 2**n <= resamples:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        return float(np.mean(np.abs((signs * diffs).mean(axis=1)) >= observed - tolerance))
    extreme, chunk = 0, max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, resamples, chunk):
        signs = rng.choice([-1.0, 1.0], size=(min(chunk, resamples - start), n))
        extreme += int(np.sum(np.abs((signs * diffs).mean(axis=1)) >= observed - tolerance))
    # Counting the observed labelling keeps a Monte Carlo p-value valid (never 0).
    return (extreme + 1) / (resamples + 1)
