"""Fixtures shared by the rollout tests: the tiny local model and a running `agentgym serve` process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from agentgym.models import tiny_model_path
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.serve import make_app
from tests.helpers.serving import ServerProcess


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return tiny_model_path()


@pytest.fixture(scope="session")
def served_tiny_model(tiny_model):
    """The real CLI, ``agentgym serve --model <tiny>``, as a subprocess; yields its /v1 base URL, then stops it by pid."""
    with ServerProcess(tiny_model, max_batch_size=8) as server:
        yield server.base_url


@pytest.fixture(scope="session")
def hf_policy(tiny_model):
    # A generous batch window so that requests arriving over HTTP a few ms apart share a batch.
    policy = HFPolicy(tiny_model, device="cpu", batch_wait_ms=30)
    yield policy
    asyncio.run(policy.aclose())


@pytest.fixture
async def served():
    """``await served(policy)`` runs the app on a loopback port and returns its /v1 base URL."""
    servers = []

    async def start(policy, **options):
        server = TestServer(make_app(policy, "tiny", **options), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}/v1"

    yield start
    for server in servers:
        await server.close()
