"""Snapshots, restore and fork: captured state, independence of forks, equality with replay, image release."""

import pytest

from agentgym.sandbox import engine
from agentgym.sandbox.docker import DockerSandbox
from agentgym.sandbox.images import image_exists

pytestmark = pytest.mark.docker

SETUP = "mkdir -p /workspace/src && cd /workspace/src && echo v1 > f && export STAGE=one"
NEXT = "echo v2 >> f && cd /tmp && export STAGE=two && rm -f /workspace/src/gone"


def test_snapshot_captures_files_cwd_and_env_and_restore_returns_to_it(sandbox):
    sandbox.exec(SETUP + " && touch gone")
    snap = sandbox.snapshot()
    try:
        assert (snap.cwd, snap.env) == ("/workspace/src", {"STAGE": "one"})
        sandbox.exec(NEXT)
        sandbox.restore(snap)
        assert sandbox.cwd == "/workspace/src" and sandbox.env == {"STAGE": "one"}
        assert sandbox.exec("pwd; echo $STAGE; cat f; ls").stdout == "/workspace/src\none\nv1\nf\ngone\n"
    finally:
        snap.release()


def test_fork_is_independent_of_its_parent(sandbox):
    sandbox.exec(SETUP)
    child = sandbox.fork()
    try:
        child.exec("echo child >> f && export WHO=child")
        sandbox.exec("echo parent >> f")
        assert child.exec("cat f; echo $WHO $STAGE").stdout == "v1\nchild\nchild one\n"
        assert sandbox.exec("cat f; echo ${WHO-none}").stdout == "v1\nparent\nnone\n"
        assert child.id != sandbox.id
    finally:
        child.close()


def test_fork_then_same_work_equals_replay(docker_ready, sandbox):
    sandbox.exec(SETUP)
    snap = sandbox.snapshot()
    fork = sandbox.fork(snap)
    with DockerSandbox.create(docker_ready, warm=False) as replay:
        replay.exec(SETUP)
        for box in (fork, replay):
            box.exec(NEXT)
        assert fork.fs_hash(["/workspace", "/home/agent"]) == replay.fs_hash(["/workspace", "/home/agent"])
        assert (fork.cwd, fork.env) == (replay.cwd, replay.env)
    fork.close()
    snap.release()


def test_released_snapshot_image_is_removed(sandbox):
    snap = sandbox.snapshot()
    assert image_exists(snap.ref)
    snap.release()
    snap.release()  # idempotent
    assert not image_exists(snap.ref)


def test_release_while_a_fork_uses_the_image_is_deferred_until_it_closes(sandbox):
    sandbox.exec("echo data > /workspace/d")
    snap = sandbox.snapshot()
    fork = sandbox.fork(snap)
    snap.release()
    assert image_exists(snap.ref)
    assert fork.read_file("/workspace/d") == b"data\n"
    fork.close()
    assert not image_exists(snap.ref)


def test_snapshot_of_a_fork_keeps_its_parent_image_until_both_are_gone(sandbox):
    first = sandbox.snapshot()
    fork = sandbox.fork(first)
    fork.exec("echo second > /workspace/s")
    second = fork.snapshot()
    fork.close()
    first.release()
    assert image_exists(first.ref)  # the second snapshot is built on it
    restored = sandbox.fork(second)
    assert restored.read_file("/workspace/s") == b"second\n"
    second.release()
    restored.close()
    assert not image_exists(second.ref) and not image_exists(first.ref)


def test_snapshot_images_carry_owner_labels(sandbox):
    snap = sandbox.snapshot()
    try:
        image_labels = engine.api().inspect_image(snap.ref)["Config"]["Labels"]
        assert image_labels["agentgym.kind"] == "snapshot"
        assert image_labels["agentgym.managed"] == "true"
        assert image_labels["agentgym.owner-pid"].isdigit()
    finally:
        snap.release()
