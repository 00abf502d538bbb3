"""PortForward: a loopback port on the host reaching a port inside a container without a network, through docker exec relays.

A real container of the base image (network_mode none) runs an echo server on its loopback; the
tests push random bytes through the forward both ways, in parallel, and check every byte, the
half-closes, a refused connection, a container that stops, and that close() leaves no thread or exec.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from agentgym.sandbox import cleanup, engine
from agentgym.sandbox.containers import SandboxConfig, create_container, start_container
from agentgym.sandbox.port_forward import PortForward

ECHO_PORT = 9000
# Echoes each connection's bytes until the client's end of stream, then closes: the half-close has to get through.
ECHO_SERVER = f"""
import socket, threading
server = socket.create_server(("127.0.0.1", {ECHO_PORT}))
def echo(connection):
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.fixture
def echo_container(docker_ready):
    container_id = create_container(docker_ready, SandboxConfig(), "sandbox")
    try:
        start_container(container_id)
        api = engine.api()
        exec_id = api.exec_create(container_id, ["python3", "-c", ECHO_SERVER], user="1000:1000")["Id"]
        api.exec_start(exec_id, detach=True)
        yield container_id
    finally:
        cleanup.remove_container(container_id)


def exchange(port: int, payload: bytes, timeout: float = 30) -> bytes:
    """Send ``payload`` and half-close while reading (the echo answers as it reads); everything read until the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:

        def send():
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received = bytearray()
        while chunk := sock.recv(1 << 16):
            received += chunk
        sender.join()
    return bytes(received)


def wait_for_echo(port: int) -> None:
    deadline = time.monotonic() + 30
    while exchange(port, b"ping") != b"ping":  # the relay connects before the echo server listens: a closed connection
        assert time.monotonic() < deadline, "the echo server did not answer through the forward within 30 s"
        time.sleep(0.2)


def running_execs(forward: PortForward) -> list[str]:
    return [e for e in forward.exec_ids() if engine.api().exec_inspect(e)["Running"]]


def forward_threads(forward: PortForward) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(forward.thread_prefix)]


@pytest.mark.slow  # a container start and a few dozen execs (seconds on two cores)
def test_bytes_go_both_ways_intact_over_parallel_connections_and_nothing_is_left(echo_container):
    api = engine.api()
    assert api.inspect_container(echo_container)["HostConfig"]["NetworkMode"] == "none"
    with PortForward(echo_container, ECHO_PORT) as forward:
        wait_for_echo(forward.port)
        payloads = [os.urandom(size) for size in (1, 70_000, 1 << 20, 3 << 20)]  # across frame and buffer sizes
        results: dict[int, bytes] = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, exchange(forward.port, payloads[i])))
            for i in range(len(payloads))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [results.get(i) == payload for i, payload in enumerate(payloads)] == [True] * len(payloads)
        # Every connection had its own exec, and each ended with its connection.
        deadline = time.monotonic() + 10
        while (forward.open_connections() or running_execs(forward)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert forward.open_connections() == 0 and not running_execs(forward)
        assert len(forward.exec_ids()) >= len(payloads)
        # A connection held open is ended by close(): the client sees its end, no thread outlives it.
        held = socket.create_connection(("127.0.0.1", forward.port), timeout=10)
        held.sendall(b"still here")
        assert held.recv(100) == b"still here"
    held.settimeout(10)
    assert held.recv(100) == b""
    held.close()
    assert not forward_threads(forward)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", forward.port), timeout=2)


def test_nothing_listening_or_a_stopped_container_closes_the_connection(echo_container):
    with PortForward(echo_container, ECHO_PORT + 1) as forward:  # nothing listens there
        assert exchange(forward.port, b"hello") == b""
        assert "Connection refused" in (forward.last_error or "")
    with PortForward(echo_container, ECHO_PORT) as forward:
        wait_for_echo(forward.port)
        held = socket.create_connection(("127.0.0.1", forward.port), timeout=10)
        held.sendall(b"x")
        assert held.recv(1) == b"x"
        engine.api().kill(echo_container)  # the container stops under an open connection
        assert held.recv(100) == b""
        held.close()
        assert exchange(forward.port, b"hello") == b""  # no exec can start now
        assert "not running" in (forward.last_error or "")
    assert not forward_threads(forward)


@pytest.mark.slow  # a container start and a few seconds of idling
def test_an_idle_connection_outlives_the_engine_clients_read_timeout(echo_container, monkeypatch):
    monkeypatch.setattr(engine.api(), "timeout", 1)  # requests made now read with a 1 s timeout (default: 300 s)
    with PortForward(echo_container, ECHO_PORT) as forward:
        wait_for_echo(forward.port)
        with socket.create_connection(("127.0.0.1", forward.port), timeout=10) as held:
            held.sendall(b"a")
            assert held.recv(10) == b"a"
            time.sleep(2.5)  # an agent thinking between two steps
            held.sendall(b"b")
            assert held.recv(10) == b"b"
