"""``agentgym/OpenEnv-v0`` with ``image=``: an OpenEnv server started from a local Docker image, without a network, reached through a port forward.

The image is built offline from the agentgym base image (Debian bookworm's python3.11) with the
counter app of tests/helpers/openenv_apps.py (OpenEnv's own ``create_app`` under uvicorn).
It cannot pip install, so the tests mount this venv's site-packages read-only and put it on
``PYTHONPATH`` through ``volumes=`` and ``environment=``. Nothing is mocked: real containers, real
docker exec relays, OpenEnv's own client.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers agentgym/OpenEnv-v0)
from agentgym.integrations.openenv.client_env import OpenEnvEnv, OpenEnvError
from agentgym.integrations.openenv.container import KIND, ServerError, ServerSpec, acquire
from agentgym.sandbox import engine, images, labels
from tests.helpers.openenv_counter import play_counter, solve_counter
from tests.helpers.tool_calls import call

ROOT = Path(__file__).parents[2]
IMAGE_REPOSITORY = "agentgym/openenv-test"
IMAGE_KIND = "openenv-test-server"
SITE = "/opt/host-site-packages"


def counter_image(base: str) -> str:
    """``agentgym/openenv-test:<content hash>``: the base image plus openenv_apps.py serving the counter on port 8000.

    Built once per content (base image, Dockerfile, app) with the network off; labelled managed, so that
    ``agentgym sandbox gc --all`` removes it.
    """
    api = engine.api()
    base_id = api.inspect_image(base)["Id"]
    app = (ROOT / "tests" / "helpers" / "openenv_apps.py").read_bytes()
    dockerfile = (
        f"FROM {base_id}\nCOPY openenv_apps.py /app/openenv_apps.py\n"
        'CMD ["python3", "/app/openenv_apps.py", "counter", "8000"]\n'
    )
    content = hashlib.sha256(json.dumps([base_id, dockerfile, hashlib.sha256(app).hexdigest()]).encode()).hexdigest()
    tag = f"{IMAGE_REPOSITORY}:{content[:12]}"
    if images.image_exists(tag):
        return tag
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("openenv_apps.py", app)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    for event in api.build(
        fileobj=buffer,
        custom_context=True,
        tag=tag,
        labels={labels.MANAGED: "true", labels.KIND: IMAGE_KIND, labels.CONTENT_HASH: content},
        network_mode="none",
        pull=False,
        rm=True,
        forcerm=True,
        decode=True,
    ):
        assert "error" not in event, f"building {tag} failed: {event['error']}"
    return tag


@pytest.fixture(scope="module")
def server_options(docker_ready) -> dict:
    """``image=`` and the options that give it this venv's packages (the image's python3 must be this one's minor)."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the base image's python3 is 3.11: the host venv's packages load only into the same minor version")
    site_packages = sysconfig.get_paths()["purelib"]
    return {
        "image": counter_image(docker_ready),
        "volumes": {site_packages: SITE},
        "environment": {"PYTHONPATH": SITE},
    }


@pytest.fixture(scope="module")
def counter_env(server_options):
    """An env that keeps the counter's container up for the module; the tests' own envs share it (same image and options)."""
    env = OpenEnvEnv(**server_options)
    server = env._server
    yield env
    env.close()
    assert gone(server.container_id), "the last env's close did not remove the server container"
    assert not forward_threads(server)


def gone(container_id: str) -> bool:
    return not engine.api().containers(all=True, filters={"id": container_id})


def forward_threads(server) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(server.forward.thread_prefix)]


def running_execs(server, exec_ids) -> list[str]:
    return [e for e in exec_ids if engine.api().exec_inspect(e)["Running"]]


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow  # the server imports OpenEnv (gradio included) in its container: 15-30 s on two cores
def test_an_episode_on_an_image_started_server_reaches_success_in_a_container_without_network(
    server_options, counter_env
):
    env = gymnasium.make("agentgym/OpenEnv-v0", **server_options)
    try:
        server = env.unwrapped._server
        assert server is counter_env._server  # same image and options: the same container
        assert env.unwrapped.base_url.startswith("http://127.0.0.1:")
        api = engine.api()
        details = api.inspect_container(server.container_id)
        host = details["HostConfig"]
        assert host["NetworkMode"] == "none" and set(details["NetworkSettings"]["Networks"]) == {"none"}
        assert not details["NetworkSettings"]["Ports"] and not host["PortBindings"]
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"] and host["PidsLimit"] == 256
        assert details["Config"]["Labels"][labels.KIND] == KIND
        assert details["Config"]["Labels"][labels.OWNER_PID] == str(os.getpid())  # `agentgym sandbox gc` reaps it
        assert [(m["Destination"], m["RW"]) for m in details["Mounts"]] == [(SITE, False)]
        # Inside, the only interface is loopback.
        exec_id = api.exec_create(server.container_id, ["cat", "/proc/net/dev"])["Id"]
        interfaces = [line.split(":")[0].strip() for line in api.exec_start(exec_id).decode().splitlines()[2:]]
        assert interfaces == ["lo"]

        observation, info = env.reset(seed=11)
        assert env.unwrapped.action_field == "message" and observation["text"].startswith("Reach ")
        observation, reward, terminated, truncated, info = play_counter(env, observation["text"])
        assert terminated and reward == 1.0 and info["success"] and "success" in observation["text"]
        env.reset(seed=11)
        assert env.step("submit")[1:3] == (0.0, True)  # a wrong submission: the server's reward is the evidence
    finally:
        env.close()
    assert not gone(server.container_id)  # the module's env still uses it


@pytest.mark.slow
def test_a_fork_by_replay_is_a_new_relayed_session_that_equals_replaying(server_options, counter_env):
    server = counter_env._server
    parent, replayed = OpenEnvEnv(**server_options), OpenEnvEnv(**server_options)
    fork = None
    try:
        text = parent.reset(seed=7)[0]["text"]
        replies = []
        for _ in range(2):
            replies.append(solve_counter(text))
            text += "\n" + parent.step(replies[-1])[0]["text"]
        snapshot = parent.snapshot()
        parent.step("add 1")  # the parent moves on
        before = set(server.forward.exec_ids())
        fork = parent.fork(snapshot)
        assert fork._server is server and fork.last_restore == "replay" and fork.turn == 2
        fork_execs = set(server.forward.exec_ids()) - before
        assert fork_execs and running_execs(server, fork_execs)  # its WebSocket session: a relay of its own
        replayed.reset(seed=7)
        for reply in replies:
            replayed.step(reply)
        for reply in [solve_counter(text)] * 2:
            assert fork.step(reply) == replayed.step(reply)
        snapshot.release()
        fork.close()
        # The fork's session ended, and with it its relay; the parent's goes on.
        assert wait_until(lambda: not running_execs(server, fork_execs)), "the fork's relay exec outlived its session"
        assert parent.step(solve_counter(text))[0]["text"].startswith("Counter: ")
    finally:
        for env in (parent, replayed, fork):
            if env is not None:
                env.close()
    assert not gone(server.container_id)


def test_a_missing_image_is_a_one_line_error_and_leaves_nothing(docker_ready):
    def server_ids() -> set[str]:
        # Ids only, and only OpenEnv servers: a container's "Status" ("Up 7 seconds") ages between two
        # listings, and earlier tests' warm pools refill in the background.
        return {
            c["Id"]
            for c in engine.api().containers(all=True, filters=labels.session_filter())
            if c["Labels"].get(labels.KIND) == KIND
        }

    before = server_ids()
    with pytest.raises(OpenEnvError) as raised:
        gymnasium.make("agentgym/OpenEnv-v0", image="agentgym/no-such-openenv-image:0")
    message = str(raised.value)
    assert isinstance(raised.value, ServerError) and "\n" not in message
    assert "not in the local Docker engine" in message and "does not pull" in message
    assert server_ids() == before
    with pytest.raises(ValueError, match="not both"):
        OpenEnvEnv("http://127.0.0.1:1", image="agentgym/no-such-openenv-image:0")
    with pytest.raises(ValueError, match="needs url=.* or image="):
        OpenEnvEnv()
    with pytest.raises(ValueError, match="configure the container of image="):
        OpenEnvEnv("http://127.0.0.1:1", volumes={"/tmp": "/x"})
    with pytest.raises(ValueError, match="absolute path that exists"):
        OpenEnvEnv(image=docker_ready, volumes={"relative/dir": "/x"})


@pytest.mark.slow  # two containers start and stop (seconds)
def test_a_server_that_exits_or_never_listens_is_a_clear_error_and_its_container_is_removed(docker_ready):
    session = labels.session_filter()
    before = {c["Id"] for c in engine.api().containers(all=True, filters=session)}
    with pytest.raises(ServerError, match=r"exited \(status 3\); its last log lines:\nno server here"):
        OpenEnvEnv(
            image=docker_ready,
            command=["python3", "-c", "import sys; print('no server here', file=sys.stderr); sys.exit(3)"],
        )
    with pytest.raises(ServerError, match="did not listen on port 8000 inside its container within 2 s"):
        OpenEnvEnv(image=docker_ready, command=["sleep", "60"], start_timeout=2)
    assert {c["Id"] for c in engine.api().containers(all=True, filters=session)} == before


@pytest.mark.slow  # three containers start (seconds)
def test_envs_share_a_container_per_image_and_options_unless_told_not_to_and_never_a_dead_one(docker_ready):
    # Any server will do for the container's lifetime: the base image's http.server (no OpenEnv import to wait for).
    spec = ServerSpec.of(docker_ready, command=["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"])
    users = [acquire(spec)]  # each acquire is one release owed, whatever fails below
    try:
        users.append(acquire(spec))
        users.append(acquire(spec, shared=False))
        first, second, own = users
        assert second is first and own.container_id != first.container_id
        with urllib.request.urlopen(own.url + "/", timeout=10) as response:  # the forward reaches the server
            assert response.status == 200
        users.pop(0).release()
        assert first.running()  # its other user still holds it
        engine.api().kill(first.container_id)  # the server dies
        assert wait_until(lambda: not first.running()) and "exited" in first.failure()
        users.append(acquire(spec))  # a new user gets a new container, not the dead one
        assert users[-1].container_id not in (first.container_id, own.container_id) and users[-1].running()
        servers = [first, own, users[-1]]
    finally:
        for server in users:
            server.release()
    for server in servers:
        assert gone(server.container_id) and not forward_threads(server)


@pytest.mark.slow  # its own container (another command): another 15-30 s server start
def test_a_server_that_dies_ends_the_episode_and_its_container_is_removed_at_close(server_options):
    options = {**server_options, "command": ["python3", "/app/openenv_apps.py", "moves", "8000"]}
    env = gymnasium.make("agentgym/OpenEnv-v0", **options)
    server = env.unwrapped._server
    try:
        env.reset(seed=2)
        observation, *_ = env.step(call("move", op="add", n=4))
        assert observation["text"] == "Counter: 4"
        api = engine.api()
        # The server is the child of the lease watchdog, docker-init's (pid 1) child: kill it, as a crash would.
        crash = "for w in $(cat /proc/1/task/1/children); do kill -9 $(cat /proc/$w/task/$w/children); done"
        exec_id = api.exec_create(server.container_id, ["sh", "-c", crash])["Id"]
        api.exec_start(exec_id)
        assert wait_until(lambda: not server.running())
        observation, reward, terminated, truncated, info = env.step(call("move", op="add", n=1))
        assert truncated and not terminated and "exited (status 137)" in info["env_error"]
        with pytest.raises(OpenEnvError, match="exited"):
            env.reset(seed=2)
    finally:
        env.close()
    assert gone(server.container_id)
    assert not forward_threads(server)


# Starts a server container with a short lease, reports its id, and waits (to be killed).
LEASED = """
import sys, time
from agentgym.integrations.openenv.container import ServerSpec, acquire
from agentgym.sandbox.containers import SandboxConfig
command = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]
server = acquire(ServerSpec.of(sys.argv[1], command=command, config=SandboxConfig(lease=3)))
print(server.container_id, flush=True)
time.sleep(120)
"""


@pytest.mark.slow  # a container starts and its lease lapses (seconds)
def test_a_server_container_outlives_a_killed_owner_by_one_lease_at_most(docker_ready):
    # No agentgym process touches the container again (gc would only run in a later process): its lease alone
    # must end it, and the engine then removes it. Main left it running for good.
    owner = subprocess.Popen([sys.executable, "-c", LEASED, docker_ready], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        container_id = owner.stdout.readline().strip()
        assert container_id and not gone(container_id)
        time.sleep(4)  # past one lease: the live owner renews it
        assert not gone(container_id)
        owner.kill()
        owner.wait(timeout=30)
        killed = time.monotonic()
        assert wait_until(lambda: gone(container_id), timeout=30)
        assert time.monotonic() - killed > 1  # it lapsed; nobody removed it at once
    finally:
        owner.kill()
        owner.wait(timeout=30)
