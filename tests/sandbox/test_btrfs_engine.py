"""The sandbox on a Docker engine whose data root is btrfs with quotas, started beside the host's engine
(scripts/docker-btrfs-engine.sh; the host's engine and its bridge are not touched): the fast-fork suite (warm
diff forks read from btrfs subvolumes equal forks from the committed image and replays; fallbacks; attacks)
and the quota attacks run against it, in a pytest of their own pointed at it by DOCKER_HOST (one engine per
process: agentgym's connection, warm pools and leases are process-wide)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The fast-fork suite once more through a second engine takes minutes on two loaded cores: `make test-sweeps`.
pytestmark = pytest.mark.sweep

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "docker-btrfs-engine.sh"
NAME = "btrfs-test"
AGAINST_BTRFS = [
    "tests/sandbox/test_fast_fork.py",
    "tests/sandbox/test_attacks.py::test_writing_until_full_stops_at_the_quota_in_one_command",
    "tests/sandbox/test_attacks.py::test_a_forks_quota_leaves_out_what_its_snapshot_holds",
]


@pytest.fixture(scope="module")
def btrfs_engine(docker_ready):
    """DOCKER_HOST of a btrfs engine holding the base image; stopped, unmounted and deleted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("starting a second dockerd on a btrfs loop file needs root")
    if shutil.which("dockerd") is None or shutil.which("mkfs.btrfs") is None:
        pytest.skip("dockerd or btrfs-progs is not installed (scripts/setup.sh installs both)")
    started = subprocess.run([SCRIPT, "start", NAME], capture_output=True, text=True, timeout=120)
    try:
        if started.returncode != 0:
            why = (started.stderr.strip().splitlines() or ["no reason given"])[-1]
            pytest.skip(f"no btrfs engine can start here (loop devices, btrfs in the kernel): {why}")
        host = started.stdout.strip()
        loaded = subprocess.run(
            f"docker save {docker_ready} | docker --host {host} load -q",
            shell=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert loaded.returncode == 0, loaded.stderr
        yield host
    finally:
        stopped = subprocess.run([SCRIPT, "stop", NAME], capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stderr


def test_fast_forks_and_quotas_hold_on_a_btrfs_engine(btrfs_engine, tmp_path):
    env = {**os.environ, "DOCKER_HOST": btrfs_engine}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--basetemp={tmp_path}"]
    run = subprocess.run(argv + AGAINST_BTRFS, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout[-2000:]  # every test ran on btrfs
