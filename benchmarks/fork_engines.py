"""Measures snapshot, fork, restore and the snapshot diff's build on two Docker engines, interleaved in one run: the host's (overlay2: a metered disk limit) and a btrfs one with quotas (a hard limit) started beside it.

Prints a Markdown table (docs/results.md's) and a JSON line.

    scripts/docker-btrfs-engine.sh start   # prints unix:///run/agentgym-btrfs/docker.sock
    docker save agentgym/base:TAG agentgym/desktop:TAG | DOCKER_HOST=unix:///run/agentgym-btrfs/docker.sock docker load
    .venv/bin/python benchmarks/fork_engines.py --btrfs unix:///run/agentgym-btrfs/docker.sock [--rounds 6]

Each engine is driven by a worker process of its own (agentgym's engine connection, warm pools and leases are
per process); the parent asks them for one round at a time, alternately, so that load hits both alike. A round
on a sandbox of the base image that has written a modest change (a source tree of 200 files, a 1 MB file, an
edit, a deletion): a snapshot (the commit, with its disk measurement), the diff's build from the committed layer
(fs_diff.layer_of, timed on its own), a warm diff fork once the diff is built (as after a model call), a fork from
the committed image (the fallback: a container start), a restore, and `fork()` of the live sandbox (snapshot +
fork, waiting for the diff). Every fork and restore counts until it ran a command. The diff's build is timed on a
larger image too (the desktop image), where the btrfs walk reads every name of the image and overlay2 only the
layer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import summary, timed  # noqa: E402

from agentgym.sandbox import engine, fs_diff, shell  # noqa: E402
from agentgym.sandbox.docker import DockerSandbox  # noqa: E402
from agentgym.sandbox.images import build_base_image  # noqa: E402
from agentgym.sandbox.pool import WarmPool  # noqa: E402

CHANGE = (
    "mkdir -p /workspace/src && cd /workspace/src"
    " && for i in $(seq 200); do printf 'def f%d():\\n    return %d\\n' $i $i > m$i.py; done"
    " && head -c 1000000 /dev/urandom > /workspace/blob && echo edited >> ~/.profile && rm ~/.bashrc"
)
QUANTITIES = ("snapshot", "diff build", "warm fork", "image fork", "restore", "fork()", "diff build, large image")


def _ready(sandbox: DockerSandbox) -> DockerSandbox:
    sandbox.exec("true")
    return sandbox


def _warm(sandbox: DockerSandbox) -> bool:
    return engine.api().inspect_container(sandbox.id)["Config"]["Image"] != sandbox.image


class Worker:
    """One engine's side: a warm pool, a changed sandbox of the base image, and one of the large image."""

    def __init__(self, large: str):
        self.base = build_base_image(progress=lambda message: None)
        self.large = large
        self.pool = WarmPool(2)
        self.pool.prewarm(self.base, wait=True)
        self.box = _ready(DockerSandbox.create(self.base, pool=self.pool))
        self.box.exec(CHANGE)
        self.big = _ready(DockerSandbox.create(large, warm=False))
        self.big.exec(CHANGE)

    def describe(self) -> dict:
        info = engine.api().info()
        files = {
            name: int(self._count(image))
            for name, image in (("base", self.base), ("large", self.large))  # what a btrfs diff walk reads
        }
        return {"driver": info.get("Driver"), "files": files}

    def _count(self, image: str) -> str:
        with DockerSandbox.create(image, warm=False) as box:
            return box.exec("find / -xdev 2>/dev/null | wc -l").stdout.strip()

    def round(self) -> dict:
        box, owner = self.box, self.box.config.uid_gid
        row = {}
        time.sleep(0.5)  # the pool refills between branchings, as during a model call
        self.pool.prewarm(self.base, config=box.config, wait=True)
        row["snapshot"], snap = timed(box.snapshot)
        fs_diff.diff_of(snap.ref)  # built in the background since the commit; a fork after a model call finds it
        row["diff build"], diff = timed(lambda: fs_diff.layer_of(snap.ref, self.base, owner))  # once more, alone
        assert diff is not None, "no diff: this engine's layers cannot be read here"
        row["warm fork"], fork = timed(lambda: _ready(DockerSandbox.from_snapshot(snap)))
        row["warm"] = _warm(fork)
        fork.close()
        state = shell.ShellState(snap.cwd, dict(snap.env))
        row["image fork"], cold = timed(lambda: _ready(DockerSandbox.launch(snap.ref, box.config, state=state)))
        cold.close()
        self.pool.prewarm(self.base, config=box.config, wait=True)
        row["restore"], _ = timed(lambda: _ready(_restored(box, snap)))
        snap.release()
        time.sleep(0.5)
        self.pool.prewarm(self.base, config=box.config, wait=True)
        row["fork()"], fork = timed(lambda: _ready(box.fork()))
        fork.close()
        big = self.big.snapshot()
        row["diff build, large image"], _ = timed(lambda: fs_diff.layer_of(big.ref, self.large, owner))
        big.release()
        return row

    def close(self) -> None:
        self.box.close()
        self.big.close()
        self.pool.shutdown()


def _restored(box: DockerSandbox, snap) -> DockerSandbox:
    box.restore(snap)
    return box


def serve(large: str) -> None:
    """The worker's loop: a JSON line out for each line in (``describe``, ``round``, ``close``)."""
    worker = Worker(large)
    for line in sys.stdin:
        command = line.strip()
        if command == "close":
            break
        answer = worker.describe() if command == "describe" else worker.round()
        print(json.dumps(answer), flush=True)
    worker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--btrfs", required=True, help="DOCKER_HOST of the btrfs engine")
    parser.add_argument("--large", default="agentgym/desktop:latest", help="the larger image (on both engines)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return serve(args.large)
    hosts = {"overlay2": os.environ.get("DOCKER_HOST", ""), "btrfs": args.btrfs}
    workers = {}
    for name, host in hosts.items():
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"} | ({"DOCKER_HOST": host} if host else {})
        argv = [sys.executable, __file__, "--worker", "--btrfs", args.btrfs, "--large", args.large]
        workers[name] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(name: str, command: str) -> dict:
        workers[name].stdin.write(command + "\n")
        workers[name].stdin.flush()
        line = workers[name].stdout.readline()
        if not line:
            raise SystemExit(f"the {name} worker ended early (see its output above)")
        return json.loads(line)

    try:
        described = {name: ask(name, "describe") for name in workers}
        rows: dict[str, list[dict]] = {name: [] for name in workers}
        for _ in range(args.rounds):
            for name in workers:
                rows[name].append(ask(name, "round"))
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.stdin.write("close\n")
                process.stdin.flush()
                process.wait(timeout=120)
    results = {
        name: {
            **described[name],
            "warm forks": sum(r["warm"] for r in rows[name]) / len(rows[name]),
            **{q: summary([r[q] for r in rows[name]]) for q in QUANTITIES},
        }
        for name in workers
    }
    files = results["btrfs"]["files"]
    print(f"| ms, p50 / p95 (n = {args.rounds} each, interleaved) | overlay2 (metered limit) | btrfs (hard quota) |")
    print("|---|---|---|")
    for q in QUANTITIES:
        label = f"{q} ({files['large']} files)" if q.endswith("large image") else q
        if q == "diff build":
            label += f" (base image, {files['base']} files)"
        cells = [f"{results[n][q]['p50']:.0f} / {results[n][q]['p95']:.0f}" for n in workers]
        print(f"| {label} | {' | '.join(cells)} |")
    print(
        f"| forks in warm containers | {results['overlay2']['warm forks']:.0%} | {results['btrfs']['warm forks']:.0%} |"
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
