"""A real multi-node Ray cluster on this machine for the distributed tests (``ray.cluster_utils.Cluster``).

The cluster has two nodes, each advertising the custom resources that place env workers
(:data:`agentgym.distributed.cluster.RESOURCES`), and is shared by the tests of this package (it
starts in ~10 s on two cores, and stops when they are done, so the rest of the suite does not
run beside an idle cluster). Tests that remove or add nodes take ``ray_cluster`` and add
nodes of their own (``ray_cluster.add_node``), never removing the two shared ones.

Ray binds the machine's own address unless it runs in a network namespace with only loopback;
``make test`` runs pytest under ``scripts/netns``, which sets ``AGENTGYM_NETNS=1``. Elsewhere
these tests skip with a line that says how to run them.

When it stops, every Docker container a Ray worker made (they carry this session's
``AGENTGYM_RUN_ID``, which the cluster's processes inherit) must be gone: env workers close their envs when their pools
close, and a worker killed on purpose has its containers reaped by the next worker on its node.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

NODE_RESOURCES = {"agentgym_docker": 4, "agentgym_browser": 4}


@pytest.fixture(scope="package")
def ray_cluster():
    if os.environ.get("AGENTGYM_NETNS") != "1":
        pytest.skip("Ray tests run in a network namespace of their own: scripts/netns .venv/bin/python -m pytest ...")
    pytest.importorskip("ray", reason="the distributed extra is not installed")
    import ray
    from ray.cluster_utils import Cluster

    run = os.environ.setdefault("AGENTGYM_RUN_ID", f"tests-{uuid.uuid4().hex[:12]}")  # before the cluster starts
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": dict(NODE_RESOURCES)})
    cluster.add_node(num_cpus=2, resources=dict(NODE_RESOURCES))
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
        left = _wait_gone(run)
    finally:
        ray.shutdown()
        cluster.shutdown()
        _reap_dead_owners()
    assert not left, f"containers left by Ray workers: {left}"


def _worker_containers(run: str) -> list[tuple[str, str]]:
    """(id, image) of the containers of this run made by other processes (Ray workers); this process's own are docker_ready's."""
    try:
        from agentgym.sandbox import engine, labels

        api = engine.api()
    except Exception:  # no Docker engine here: nothing to check
        return []
    mine = str(os.getpid())
    return [
        (c["Id"][:12], c["Image"])
        for c in api.containers(all=True, filters=labels.run_filter(run))
        if c["Labels"].get(labels.OWNER_PID) != mine
    ]


def _wait_gone(run: str, seconds: float = 30) -> list[tuple[str, str]]:
    deadline = time.monotonic() + seconds
    while (left := _worker_containers(run)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _reap_dead_owners() -> None:
    try:
        from agentgym.sandbox import cleanup

        cleanup.gc()
    except Exception:
        pass
