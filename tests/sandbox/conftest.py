"""Fixtures for the Docker sandbox tests: a fresh cold-started sandbox per test, closed afterwards."""

import pytest

from agentgym.sandbox.docker import DockerSandbox


@pytest.fixture
def sandbox(docker_ready):
    box = DockerSandbox.create(docker_ready, warm=False)
    yield box
    box.close()
