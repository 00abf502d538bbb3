#!/usr/bin/env python3
"""Rerun chosen tests N times, each run in a fresh pytest process, and report how often each passed.

A flaky test passes alone and fails in a suite run once in a while: one run says nothing, so each
test is run ``-n`` times on its own (a new interpreter each time, as a suite's first test would
be) and counted. Failures keep the tail of their output under ``--keep`` for the post-mortem.

    scripts/flake_hunt.py -n 20 tests/sandbox/test_command_server.py::test_a_fork_bomb_and_stop_processes_leave_the_server_running
    make flakes TESTS="tests/memory/test_validation.py tests/trainers/test_lora.py::test_x" N=20

A path or node id that collects several tests is expanded into its tests first, so each is counted
on its own. ``--lock FILE`` takes an exclusive ``flock`` on FILE around each run (not around the
whole hunt): runs that train a model or start many containers then take turns with other heavy jobs
on a shared machine. Runs happen under :file:`scripts/netns` (the Ray tests need it, as in ``make
test``). Exit status: 0 when every run of every test passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider"]
# pytest's summary line: "1 passed, 2 warnings in 3.45s", "1 failed in ...", "1 skipped in ...".
# This checkout's package first, whichever checkout the interpreter's environment was installed from.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
OUTCOME = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


def collect(targets: list[str], python: str, extra: list[str]) -> list[str]:
    """The node ids of the tests ``targets`` select (a node id that names one test comes back as is)."""
    result = subprocess.run(
        [python, *PYTEST, "--collect-only", *extra, *targets], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    ids = [line for line in result.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if result.returncode != 0 or not ids:
        sys.exit(f"collecting {' '.join(targets)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return ids


@contextlib.contextmanager
def locked(path: str | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with open(path, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        yield


def run_once(node: str, python: str, extra: list[str], lock: str | None, basetemp: Path) -> tuple[str, float, str]:
    """One fresh pytest run of ``node``: (outcome, seconds, output)."""
    with locked(lock):
        began = time.monotonic()
        # A base temp dir of the hunt's own: pytest's shared /tmp/pytest-of-<user> is cleaned at the end
        # of every session on the machine, so another job's leftovers there could fail the run.
        result = subprocess.run(
            [str(ROOT / "scripts" / "netns"), python, *PYTEST, f"--basetemp={basetemp}", *extra, node],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - began
    output = result.stdout + result.stderr
    counts = {kind: int(n) for n, kind in OUTCOME.findall(output.splitlines()[-1] if output.strip() else "")}
    if result.returncode == 0 and counts.get("passed"):
        outcome = "passed"
    elif result.returncode == 0 or result.returncode == 5:  # all skipped, or nothing ran
        outcome = "skipped"
    else:
        outcome = "failed"
    return outcome, seconds, output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="test paths or node ids")
    parser.add_argument("-n", type=int, default=10, help="runs per test (default 10)")
    parser.add_argument("--lock", help="flock this file around each run (e.g. /tmp/agentgym-heavy.lock)")
    parser.add_argument("--keep", default="/tmp/flake_hunt", help="where failed runs' output goes")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs pytest")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, given with '=': --pytest-args=-s")
    parser.add_argument(
        "--show", help="print each run's lines matching this regex (with -s: a measured value, for its distribution)"
    )
    args = parser.parse_args(argv)
    extra = args.pytest_args.split()
    nodes = collect(args.targets, args.python, extra)
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    tally: dict[str, dict[str, int]] = {}
    seconds: dict[str, list[float]] = {}
    # Round-robin (test 1..k, then again): a burst of load from elsewhere then lands on several tests, not
    # on one test's every run.
    for i in range(args.n):
        for node in nodes:
            outcome, took, output = run_once(node, args.python, extra, args.lock, keep / "basetemp")
            tally.setdefault(node, {"passed": 0, "failed": 0, "skipped": 0})[outcome] += 1
            seconds.setdefault(node, []).append(took)
            line = f"[{i + 1}/{args.n}] {outcome:7s} {took:7.1f}s {node}"
            if outcome == "failed":
                name = re.sub(r"[^A-Za-z0-9_.-]+", "_", node)[-150:]
                path = keep / f"{name}.{i + 1}.log"
                path.write_text(output[-50_000:])
                line += f"  (output: {path})"
            print(line, flush=True)
            if args.show:
                for match in re.finditer(f".*(?:{args.show}).*", output):
                    print(f"    {match.group(0).strip()}", flush=True)
    print("\npasses/runs  failed  skipped  median s  max s  test")
    for node in nodes:
        counts, times = tally[node], sorted(seconds[node])
        ran = counts["passed"] + counts["failed"]
        print(
            f"{counts['passed']:>5}/{ran:<5} {counts['failed']:>7} {counts['skipped']:>8} "
            f"{times[len(times) // 2]:9.1f} {times[-1]:6.1f}  {node}"
        )
    return 1 if any(c["failed"] for c in tally.values()) else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
