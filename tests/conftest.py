"""Shared pytest fixtures."""

import pytest

# --- Docker sandboxes ------------------------------------------------------------------------
# Tests marked `docker` take `docker_ready` (the base image's tag): it skips them where no engine
# runs (or the image cannot be built here), builds the base image once if it is missing (1-2
# minutes), and at the end of the session checks that this process left no container behind.


@pytest.fixture(scope="session")
def docker_ready():
    from agentgym.sandbox.base import SandboxUnavailableError

    try:
        from agentgym.sandbox.images import build_base_image

        tag = build_base_image(progress=lambda message: print(f"[agentgym images] {message}"))
    except SandboxUnavailableError as exc:
        pytest.skip(f"Docker sandbox unavailable: {exc}")
    yield tag
    _assert_no_containers_left()


def _assert_no_containers_left():
    from agentgym.sandbox import engine, labels, pool

    pool.default_pool().shutdown()  # idle warm containers are meant to live until exit
    left = engine.api().containers(all=True, filters=labels.session_filter())
    assert not left, f"sandbox containers left by this test session: {[c['Id'][:12] for c in left]}"
