"""Fixtures shared by the rollout tests: the tiny local model and a running `agentgym serve` process."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from agentgym.models import tiny_model_path
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.server import make_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return tiny_model_path()


@pytest.fixture(scope="session")
def served_tiny_model(tiny_model):
    """Launch the real CLI, ``agentgym serve --model <tiny> --port N``; yields its /v1 base URL, then stops it by pid."""
    port = free_port()
    agentgym = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen([str(agentgym), "serve", "--model", str(tiny_model), "--port", str(port),
                                "--served-model-name", "tiny", "--max-batch-size", "8"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as health:
                    assert json.load(health)["status"] == "ok"
                    break
            except OSError:
                assert time.monotonic() < deadline, "agentgym serve did not become healthy"
                time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


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
