"""The demo's and learning benchmark's statistics on hand-computed numbers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from training_runs import curve_text, mean_interval, smooth  # noqa: E402


def test_mean_interval_is_the_student_t_interval():
    # 1, 2, 3: mean 2, sample sd 1, standard error 1/√3; t(0.975, 2 df) = 4.302653 → half-width 2.484138.
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert (low, high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)
    # 90%: t(0.95, 2 df) = 2.919986 → half-width 1.685854.
    assert mean_interval([1.0, 2.0, 3.0], confidence=0.9)[2] == pytest.approx(3.685854, abs=1e-6)
    one = mean_interval([5.0])
    assert one[0] == 5.0 and math.isnan(one[1]) and math.isnan(one[2])
    with pytest.raises(ValueError):
        mean_interval([])


def test_smooth_is_a_trailing_mean():
    assert smooth([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]


def test_curve_text_samples_evenly_and_keeps_the_last_point():
    curve = [(100.0 * i, i / 10) for i in range(11)]  # x 0..1000, y 0.0..1.0
    # 3 points of 11: indices 0, 5, 10
    assert curve_text(curve, points=3) == "0:0.00  500:0.50  1,000:1.00"
    assert curve_text(curve[:2], points=8) == "0:0.00  100:0.10"  # fewer points than asked: each once
    assert curve_text([]) == "(no logged steps)"
