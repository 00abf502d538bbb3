"""Tests for agentgym.eval.metrics: pass@k, pass^k, bootstrap intervals, summaries and paired comparison."""

import itertools
import math

import numpy as np
import pytest

from agentgym.eval.metrics import (
    bootstrap_ci,
    compare,
    mean_pass_at_k,
    mean_pass_hat_k,
    pass_at_k,
    pass_hat_k,
    summarize,
    summarize_by,
)


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),  # 0.7
        (5, 0, 3, 0.0),
        (5, 3, 3, 1.0),  # n - c < k: every k-subset holds a success
        (5, 5, 1, 1.0),
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_closed_form(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_rejects_bad_arguments():
    for n, c, k in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_mean_pass_at_k_skips_tasks_with_too_few_samples():
    assert mean_pass_at_k([(5, 2), (5, 0)], 2) == pytest.approx(0.35)
    assert mean_pass_at_k([(5, 2), (1, 1)], 2) == pytest.approx(0.7)
    assert mean_pass_at_k([(1, 1)], 2) is None


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 2, 2, 1 / 6),  # C(2,2)/C(4,2): one pair of six
        (5, 3, 2, 3 / 10),  # C(3,2)/C(5,2)
        (5, 3, 3, 1 / 10),  # C(3,3)/C(5,3)
        (5, 2, 3, 0.0),  # fewer successes than tries
        (5, 2, 1, 0.4),  # pass^1 = pass@1 = c/n
        (4, 4, 4, 1.0),
    ],
)
def test_pass_hat_k_closed_form(n, c, k, expected):
    assert pass_hat_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_hat_k_matches_enumeration(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            assert pass_hat_k(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets), abs=1e-12)


def test_pass_hat_k_rejects_bad_arguments_and_averages_over_tasks():
    for n, c, k in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError):
            pass_hat_k(n, c, k)
    assert mean_pass_hat_k([(4, 2), (5, 3), (1, 1)], 2) == pytest.approx((1 / 6 + 3 / 10) / 2)
    assert mean_pass_hat_k([(1, 1)], 2) is None


def test_bootstrap_ci_contains_mean_and_shrinks_with_more_tasks():
    rng = np.random.default_rng(1)
    small = rng.random(20)
    large = rng.random(2000)
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s <= small.mean() <= hi_s
    assert lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 3  # width goes as 1/sqrt(tasks): ~10x narrower here
    assert bootstrap_ci(small) == (lo_s, hi_s)  # seeded
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)


def test_bootstrap_resamples_tasks_not_episodes():
    # Two tasks, one always solved, one never: resampling tasks gives means in {0, .5, 1}.
    lo, hi = bootstrap_ci([1.0, 0.0], confidence=0.9)
    assert (lo, hi) == (0.0, 1.0)


def _row(task, sample, success, category="a", turns=1, error=None):
    return {
        "suite": "s",
        "task_id": task,
        "category": category,
        "sample": sample,
        "success": success,
        "reward": float(success),
        "turns": turns,
        "tokens_in": 100,
        "tokens_out": 10,
        "wall_s": 0.5,
        "error": error,
        "trajectory": {},
    }


def _hand_results():
    # t1: 2/2 solved; t2: 1/2; t3: 0/2 (one env error, one timeout); t4 (category b): 1/2, one model error.
    return [
        _row("t1", 0, True, turns=2),
        _row("t1", 1, True, turns=4),
        _row("t2", 0, True, turns=3),
        _row("t2", 1, False, turns=5),
        _row("t3", 0, False, turns=1, error="env_error: container died"),
        _row("t3", 1, False, turns=1, error="timeout"),
        _row("t4", 0, False, "b", turns=6, error="bad_action: unparseable"),
        _row("t4", 1, True, "b", turns=2),
    ]


def test_summarize_exact_numbers():
    metrics = summarize(_hand_results(), k=2)
    assert metrics["success_rate"] == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)
    assert metrics["pass_at_k"]["1"] == pytest.approx(0.5)
    assert metrics["pass_at_k"]["2"] == pytest.approx((1 + 1 + 0 + 1) / 4)
    assert set(metrics["pass_at_k"]) == {"1", "2"}
    # pass^2 per task: t1 2/2 -> 1, t2 1/2 -> 0, t3 0/2 -> 0, t4 1/2 -> 0.
    assert metrics["pass_hat_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.25)}
    lo, hi = metrics["pass_hat_k_ci95"]["2"]
    assert 0.0 <= lo <= 0.25 <= hi <= 1.0
    lo, hi = metrics["pass_at_k_ci95"]["2"]
    assert 0.0 <= lo <= 0.75 <= hi <= 1.0
    assert metrics["mean_turns"] == pytest.approx(24 / 8)
    assert metrics["tokens_in"] == 800 and metrics["tokens_out"] == 80
    assert metrics["wall_s"] == pytest.approx(4.0)
    assert metrics["env_error_rate"] == pytest.approx(2 / 8)
    lo, hi = metrics["success_ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0


def test_summarize_by_category():
    by = summarize_by(_hand_results(), key="category", k=2)
    assert list(by) == ["a", "b"]
    assert by["a"]["success_rate"] == pytest.approx(0.5)
    assert by["a"]["env_error_rate"] == pytest.approx(2 / 6)
    assert by["b"]["success_rate"] == pytest.approx(0.5)
    assert by["b"]["pass_at_k"]["2"] == pytest.approx(1.0)
    assert by["b"]["success_ci95"] == [0.5, 0.5]


def test_a_program_failure_is_counted_apart_from_env_errors():
    # An agent program that timed out is the agent's failure ("program_error: timeout: ..."), not an env timeout.
    rows = _hand_results() + [
        _row("t5", 0, False, "b", error="program_error: timeout: the program ran past 3.0 s"),
        _row("t5", 1, False, "b", error="program_error: program exited with status 3: boom"),
    ]
    metrics = summarize(rows, k=2)
    assert metrics["env_error_rate"] == pytest.approx(2 / 10)
    assert metrics["program_error_rate"] == pytest.approx(2 / 10)
    assert summarize(_hand_results(), k=2)["program_error_rate"] == 0.0
    assert summarize_by(rows, key="category", k=2)["b"]["program_error_rate"] == pytest.approx(2 / 4)


def test_summarize_empty():
    metrics = summarize([], k=3)
    assert metrics["success_rate"] is None and metrics["tokens_in"] == 0
    assert metrics["pass_at_k"] == {"1": None, "2": None, "3": None}
    assert metrics["pass_hat_k"] == {"1": None, "2": None, "3": None}
    assert metrics["pass_hat_k_ci95"]["3"] == [None, None]


def _run(probabilities, samples, rng):
    return [_row(f"t{i}", s, bool(rng.random() < p)) for i, p in enumerate(probabilities) for s in range(samples)]


def test_compare_detects_a_real_difference():
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0.1, 0.9, size=60)
    better = _run(np.minimum(difficulty + 0.3, 1.0), 3, rng)
    worse = _run(difficulty, 3, rng)
    result = compare(better, worse)
    assert result["tasks"] == 60 and result["only_a"] == 0 and result["only_b"] == 0
    assert result["difference"] > 0.15
    assert result["difference"] == pytest.approx(result["success_rate_a"] - result["success_rate_b"])
    assert result["difference_ci95"][0] > 0
    assert result["p_value"] < 0.05


def test_compare_does_not_flag_a_null_difference():
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0.1, 0.9, size=60)
    result = compare(_run(difficulty, 3, rng), _run(difficulty, 3, rng))
    assert result["p_value"] > 0.05
    assert result["difference_ci95"][0] < 0 < result["difference_ci95"][1]


def test_compare_counts_unpaired_tasks_and_uses_exact_test_for_few_tasks():
    a = [_row("t1", 0, True), _row("t2", 0, True), _row("t3", 0, True), _row("only_a", 0, True)]
    b = [_row("t1", 0, False), _row("t2", 0, False), _row("t3", 0, False), _row("only_b", 0, False)]
    result = compare(a, b)
    assert (result["tasks"], result["only_a"], result["only_b"]) == (3, 1, 1)
    assert result["difference"] == 1.0
    # Exact sign-flip test over 3 tasks: only all-plus and all-minus are as extreme, 2/8.
    assert result["p_value"] == pytest.approx(0.25)
    assert compare(a, [])["difference"] is None
