"""The base image: recipe tag, idempotent builds, the Dockerfile route, and the errors that say what to run."""

import os
import re
import subprocess
import sys
import time

import pytest

from agentgym.sandbox import engine, images
from agentgym.sandbox.base import SandboxUnavailableError


def test_tag_is_a_stable_hash_of_the_recipe():
    assert re.fullmatch(r"agentgym/base:[0-9a-f]{12}", images.base_image_tag())
    assert images.base_image_tag() == images.base_image_tag()
    assert images.recipe_hash().startswith(images.base_image_tag().split(":")[1])


def test_building_without_root_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailableError, match="sudo agentgym images build"):
        images._debootstrap_tarball(tmp_path / "rootfs.tar.gz", progress=lambda _: None)


def test_unreachable_engine_says_how_to_start_one():
    probe = "from agentgym.sandbox import engine\nengine.api()"
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert "SandboxUnavailableError" in done.stderr
    assert "dockerd" in done.stderr and "docker.io" in done.stderr


@pytest.mark.docker
def test_require_base_image_finds_the_build_or_names_the_command(docker_ready, monkeypatch):
    assert images.require_base_image() in (docker_ready, "agentgym/base:latest")
    monkeypatch.setenv("AGENTGYM_BASE_IMAGE", "agentgym/base:does-not-exist")
    with pytest.raises(SandboxUnavailableError, match="agentgym images build"):
        images.require_base_image()


@pytest.mark.docker
def test_second_build_returns_at_once(docker_ready):
    started = time.monotonic()
    assert images.build_base_image(progress=lambda _: None) == docker_ready
    assert time.monotonic() - started < 2


@pytest.mark.docker
def test_base_image_is_labelled(docker_ready):
    image_labels = engine.api().inspect_image(docker_ready)["Config"]["Labels"]
    assert image_labels["agentgym.kind"] == "base"
    assert image_labels["agentgym.content-hash"] == images.recipe_hash()


@pytest.mark.docker
def test_dockerfile_route_builds_with_the_same_labels(docker_ready, tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    # FROM a local image: the route itself is exercised without a reachable registry.
    dockerfile.write_text(f"FROM {docker_ready}\nRUN echo extra > /etc/agentgym-extra\n")
    client = engine.api()
    tag = images.build_base_image(dockerfile=dockerfile, progress=lambda _: None)
    try:
        image = client.inspect_image(tag)
        assert image["Config"]["Labels"]["agentgym.kind"] == "base"
        assert client.inspect_image("agentgym/base:latest")["Id"] == image["Id"]
        assert images.build_base_image(dockerfile=dockerfile, progress=lambda _: None) == tag
    finally:
        client.tag(docker_ready, images.REPOSITORY, "latest")
        client.remove_image(tag)
