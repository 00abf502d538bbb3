"""Checks of /app/stats.py (plain asserts: the task's image has no pytest)."""

import sys

sys.path.insert(0, "/app")

from stats import mean  # noqa: E402

assert mean([1, 2, 3]) == 2.0, mean([1, 2, 3])
assert mean([5]) == 5.0, mean([5])
assert abs(mean([0.1, 0.2]) - 0.15) < 1e-12
try:
    mean([])
except ValueError:
    pass
else:
    raise AssertionError("mean([]) did not raise ValueError")
print("all tests passed")
