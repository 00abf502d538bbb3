"""Who removes containers and images: the owner at exit or on SIGTERM, gc after a crash; and the warm pool."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import docker.errors
import pytest

from agentgym.sandbox import cleanup, engine, images, labels
from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
from agentgym.sandbox.pool import WarmPool, default_pool

pytestmark = pytest.mark.docker

# Makes a sandbox and a snapshot, reports their ids, then exits or waits to be killed.
OWNER = textwrap.dedent("""
    import sys, time
    from agentgym.sandbox.docker import DockerSandbox
    box = DockerSandbox.create(sys.argv[1], warm=False)
    box.exec("echo hi > /workspace/x")
    snap = box.snapshot()
    print(box.id, snap.ref, flush=True)
    if sys.argv[2] == "wait":
        time.sleep(120)
""")


def _spawn_owner(image: str, mode: str) -> tuple[subprocess.Popen, str, str]:
    # SIGINT back to its default: a shell's background job (how CI may start pytest) inherits it ignored.
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, image, mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    container_id, image_id = process.stdout.readline().split()
    return process, container_id, image_id


def _owned_by(pid: int) -> tuple[list, list]:
    label = {"label": [f"agentgym.owner-pid={pid}"]}
    client = engine.api()
    return client.containers(all=True, filters=label), client.images(filters=label)


def test_normal_exit_removes_everything_the_process_made(docker_ready):
    process, _, _ = _spawn_owner(docker_ready, "exit")
    assert process.wait(timeout=60) == 0
    assert _owned_by(process.pid) == ([], [])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_removes_everything_and_still_terminates(docker_ready, signum):
    process, _, _ = _spawn_owner(docker_ready, "wait")
    process.send_signal(signum)
    assert process.wait(timeout=60) == -signum
    assert _owned_by(process.pid) == ([], [])


def test_gc_reaps_what_a_killed_process_left(docker_ready):
    process, container_id, image_id = _spawn_owner(docker_ready, "wait")
    process.kill()
    process.wait(timeout=30)
    containers, images = _owned_by(process.pid)
    assert [c["Id"] for c in containers] == [container_id] and [i["Id"] for i in images] == [image_id]
    report = cleanup.gc()
    assert container_id in report["containers"] and image_id in report["images"]
    assert _owned_by(process.pid) == ([], [])


def test_gc_leaves_live_owners_and_base_images_alone(sandbox, docker_ready):
    report = cleanup.gc()
    assert sandbox.id not in report["containers"]
    assert sandbox.exec("true").ok
    assert engine.api().inspect_image(docker_ready)


def test_containers_carry_owner_labels(sandbox):
    container_labels = engine.api().inspect_container(sandbox.id)["Config"]["Labels"]
    assert container_labels["agentgym.managed"] == "true"
    assert container_labels["agentgym.kind"] == "sandbox"
    assert container_labels["agentgym.owner-pid"] == str(os.getpid())
    assert container_labels["agentgym.session"]


def _wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_sandbox_from_a_warm_pool_is_fast_and_the_pool_refills(docker_ready):
    with WarmPool(size=2) as pool:
        pool.prewarm(docker_ready, wait=True)
        assert pool.available(docker_ready) == 2
        started = time.monotonic()
        box = DockerSandbox.create(docker_ready, pool=pool)
        assert time.monotonic() - started < 0.15
        assert box.exec("echo warm; id -u").stdout == "warm\n1000\n"
        assert engine.api().inspect_container(box.id)["Config"]["Labels"]["agentgym.kind"] == "pool"
        assert _wait_for(lambda: pool.available(docker_ready) == 2)
        box.close()
        idle = {cid for ready in pool._ready.values() for cid in ready}
    assert len(idle) == 2
    assert not [c for c in engine.api().containers(all=True) if c["Id"] in idle]  # shutdown removed them


def test_a_failed_refill_keeps_the_ready_containers_and_shutdown_still_removes_them(docker_ready, monkeypatch, caplog):
    """A start that fails (an engine error) stops the refills but must not drop the containers already
    ready: dropped, they ran on, held by nothing, until the process exited (the leak the session checks met)."""
    from agentgym.sandbox import pool as pool_module
    from agentgym.sandbox.base import SandboxError

    with WarmPool(size=2) as pool:
        pool.prewarm(docker_ready, wait=True)
        ready = set(pool._ready[(docker_ready, SandboxConfig())])

        def engine_refuses(*args, **kwargs):
            raise SandboxError("the engine refused (test)")

        monkeypatch.setattr(pool_module, "create_container", engine_refuses)
        box = DockerSandbox.create(docker_ready, pool=pool)  # takes one; the refill that follows fails
        assert _wait_for(lambda: (docker_ready, SandboxConfig()) in pool._failing, timeout=10)
        assert "could not start a container" in caplog.text and "the engine refused" in caplog.text
        time.sleep(1.5)  # past the failed start's back-off: no refill is tried again meanwhile
        assert pool.available(docker_ready) == 1 and pool._starting[(docker_ready, SandboxConfig())] == 0
        box.close()
        monkeypatch.undo()
        second = DockerSandbox.create(docker_ready, pool=pool)  # asked again: refilled again
        assert second.id in ready
        assert _wait_for(lambda: pool.available(docker_ready) == 2)
        second.close()
        idle = {cid for queue in pool._ready.values() for cid in queue}
    assert not [c for c in engine.api().containers(all=True) if c["Id"] in ready | idle]


def test_a_sandbox_dropped_without_close_has_its_container_removed_when_collected(docker_ready):
    """An unclosed sandbox kept its container until the process exited (the exit sweep): a run that drops sandboxes
    would pile them up. Collected, it removes its container (the one it holds now: a restore replaced the first),
    with a ResourceWarning; a closed sandbox, a container handed to another sandbox, and the pool's own throwaway
    sandbox objects (its command-server preparer) are left alone."""
    import gc

    box = DockerSandbox.create(docker_ready, warm=False)
    box.exec("echo one > /workspace/x")
    snapshot = box.snapshot()
    first = box.id
    box.restore(snapshot)  # a new container; the first goes
    held = box.id
    assert held != first
    with pytest.warns(ResourceWarning, match=f"garbage-collected without close.*{held[:12]}"):
        del box
        gc.collect()
    assert _wait_for(lambda: not _exists(held) and not _exists(first), timeout=30)
    snapshot.release()

    with WarmPool(size=1) as pool:
        pool.prewarm(docker_ready, wait=True)
        gc.collect()  # the preparer's sandbox object for the pooled container is long unreferenced
        (pooled,) = pool._ready[(docker_ready, SandboxConfig())]
        closed = DockerSandbox.create(docker_ready, pool=pool)
        assert closed.id == pooled and closed.exec("echo up").stdout == "up\n"
        closed.close()
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            del closed
            gc.collect()

    with WarmPool(size=1) as pool:
        pool.prewarm(docker_ready, wait=True)
        box = DockerSandbox.create(docker_ready, pool=pool)
        box.exec("echo two > /workspace/y")
        assert _wait_for(lambda: pool.available(docker_ready) == 1)
        (warm,) = pool._ready[(docker_ready, SandboxConfig())]
        snapshot = box.snapshot()
        box.restore(snapshot)  # into the warm container, through a sandbox object of its own that is dropped
        assert box.id == warm
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            gc.collect()
        assert box.exec("cat /workspace/y").stdout == "two\n"
        box.close()
        snapshot.release()


def test_create_uses_the_default_pool(docker_ready):
    DockerSandbox.create(docker_ready).close()  # first use: cold, and the pool starts filling
    assert _wait_for(lambda: default_pool().available(docker_ready) >= 1)
    started = time.monotonic()
    box = DockerSandbox.create(docker_ready)
    elapsed = time.monotonic() - started
    box.close()
    assert elapsed < 0.15


def test_pool_keeps_only_the_most_recently_used_images_warm(docker_ready):
    with DockerSandbox.create(docker_ready, warm=False) as box:
        other = box.snapshot()  # any second image
    with WarmPool(size=1, max_images=1) as pool:
        pool.prewarm(docker_ready, wait=True)
        first = set(pool._ready[(docker_ready, SandboxConfig())])
        pool.prewarm(other.ref, wait=True)
        assert pool.available(docker_ready) == 0 and pool.available(other.ref) == 1
        assert _wait_for(lambda: not [c for c in engine.api().containers(all=True) if c["Id"] in first])
    other.release()
    assert not images.image_exists(other.ref)


def test_gc_removes_browser_profiles_of_dead_owners_only(tmp_path, monkeypatch):
    """A killed process's Chromium profile directory is reaped; a live owner's and unmarked ones are kept."""
    monkeypatch.setattr(cleanup.tempfile, "gettempdir", lambda: str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = labels.process_start_time(process.pid)
    dead = tmp_path / f"{labels.BROWSER_DIR_PREFIX}{process.pid}-{start}-abc"
    process.kill()
    process.wait(timeout=30)
    live = tmp_path / f"{labels.browser_dir_prefix()}def"
    unmarked = tmp_path / f"{labels.BROWSER_DIR_PREFIX}ghi"
    for folder in (dead, live, unmarked):
        (folder / "home").mkdir(parents=True)
    report = cleanup.gc()
    assert report["browser_dirs"] == [str(dead)]
    assert not dead.exists() and live.exists() and unmarked.exists()


# Makes a sandbox with a short lease, reports its id, and waits (to be stopped or killed).
LEASED = textwrap.dedent("""
    import sys, time
    from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
    box = DockerSandbox.create(sys.argv[1], config=SandboxConfig(lease=6), warm=False)
    box.exec("true")
    print(box.id, flush=True)
    time.sleep(120)
""")


def _exists(container_id: str) -> bool:
    return bool(engine.api().containers(all=True, filters={"id": [container_id]}))


def test_a_container_outlives_a_hung_or_killed_owner_by_one_lease_at_most(docker_ready):
    # No agentgym process touches these containers again (and gc spares the hung owner: it is alive);
    # only their leases can end them. Main kept both for good.
    cwd = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    owners = [
        subprocess.Popen([sys.executable, "-c", LEASED, docker_ready], stdout=subprocess.PIPE, text=True, cwd=cwd)
        for _ in range(2)
    ]
    try:
        hung, killed = owners
        ids = [owner.stdout.readline().strip() for owner in owners]
        assert all(ids) and all(map(_exists, ids))
        with DockerSandbox.create(docker_ready, config=SandboxConfig(lease=6), warm=False) as mine:
            hung.send_signal(signal.SIGSTOP)
            killed.kill()
            started = time.monotonic()
            assert _wait_for(lambda: not any(map(_exists, ids)), timeout=30)
            assert time.monotonic() - started > 3  # they lapsed; nobody removed them at once
            time.sleep(max(0.0, started + 14 - time.monotonic()))  # two leases: this process renews its own
            assert mine.exec("echo alive").stdout == "alive\n"
    finally:
        for owner in owners:
            owner.kill()
            owner.wait(timeout=30)


def test_a_lease_is_a_whole_number_of_seconds_of_at_least_three():
    for bad in (0, 2, 2.5, None):
        with pytest.raises(ValueError, match="lease must be"):
            SandboxConfig(lease=bad)


class _RefusingEngine:
    """The real engine client, except that its first ``refusals`` removals fail as a busy engine's do (HTTP 500:
    "tried to kill container, but did not receive an exit event"). Simulated: the real engine cannot be made to
    refuse on demand; the container itself is real and the real engine removes it in the end."""

    def __init__(self, client, refusals: int):
        self._client, self.refusals, self.calls = client, refusals, 0

    def remove_container(self, container_id, **kwargs):
        self.calls += 1
        if self.calls <= self.refusals:
            raise docker.errors.APIError("refused", response=_Response(500), explanation="no exit event")
        return self._client.remove_container(container_id, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


class _Response:
    def __init__(self, status_code: int):
        self.status_code, self.reason, self.url = status_code, "", ""


def test_a_removal_the_engine_refuses_for_a_while_is_tried_again(docker_ready, monkeypatch):
    box = DockerSandbox.create(docker_ready, warm=False)
    box.exec("true")
    refusing = _RefusingEngine(engine.api(), refusals=2)
    monkeypatch.setattr(engine, "api", lambda: refusing)
    box.close()
    assert refusing.calls == 3 and not _exists(box.id)
    assert box.id not in cleanup.failed_removals()


def test_a_removal_given_up_on_is_recorded_and_its_lease_left_to_lapse(docker_ready, monkeypatch):
    box = DockerSandbox.create(docker_ready, warm=False)
    box.exec("true")
    real = engine.api()
    refusing = _RefusingEngine(real, refusals=cleanup.REMOVE_TRIES)
    monkeypatch.setattr(engine, "api", lambda: refusing)
    with pytest.raises(docker.errors.APIError):
        cleanup.remove_container(box.id)
    assert refusing.calls == cleanup.REMOVE_TRIES
    assert "no exit event" in cleanup.failed_removals()[box.id]
    assert box.id not in cleanup._state().leases  # no longer renewed: the lease ends it if nothing else does
    monkeypatch.setattr(engine, "api", lambda: real)
    cleanup.remove_container(box.id)  # the exit sweep's try, which the engine now takes
    assert not _exists(box.id) and box.id not in cleanup.failed_removals()
    box.close()  # the container is gone: closing finds nothing to remove


def test_containers_that_fit_divide_the_engines_cores_and_memory(docker_ready):
    from agentgym.sandbox.containers import containers_that_fit

    info = engine.api().info()
    cores, memory = info["NCPU"], info["MemTotal"]
    assert containers_that_fit(SandboxConfig(cpus=cores / 2, mem_limit="1m")) == 2  # bound by the cores
    assert containers_that_fit(SandboxConfig(cpus=0.01, mem_limit=str(memory // 3))) == 3  # by the memory
    assert containers_that_fit(SandboxConfig(cpus=cores * 2, mem_limit="1m")) == 1  # never none
