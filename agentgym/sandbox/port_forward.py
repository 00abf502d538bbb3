"""Port forwarding into a container that has no network, as ``kubectl port-forward`` does: a loopback port on the host whose connections reach a port inside the container through ``docker exec``.

Containers run with ``network_mode="none"``: there is no published port (publishing one needs a
network, and a network gives the container egress) and no container address to connect to. So
each TCP connection accepted on ``127.0.0.1:<ephemeral port>`` starts one attached exec in the
container that runs a relay (``python3 -I -S -c``, the standard library only: the image needs
``python3`` on its PATH), which connects to ``127.0.0.1:<port>`` inside the container and copies
bytes between that connection and its own stdin and stdout. The host copies between the accepted
connection and the exec's stream: raw bytes into its stdin, and out of Docker's multiplexed
frames from its stdout (a TTY would rewrite the bytes: CR/LF, echo, control characters). Each
side's end of stream is passed on as a half-close, so a client that finishes writing still gets
its answer; when the server closes its end, the relay exits and the exec ends.

A connection whose exec cannot start (the container stopped) is closed at once, which the client
sees as a closed connection. :meth:`PortForward.close` stops accepting, ends every connection and
joins every thread it started; the execs end with their connections (and with the container).
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import requests.exceptions

from agentgym.sandbox import engine
from agentgym.sandbox.docker import _hijack

__all__ = ["RELAY_ARGV", "PortForward"]

# Runs in the container: connect to the port (argv[1]) on the container's loopback, then stdin -> socket in a
# thread and socket -> stdout here; the server's end of stream ends the process (and so the exec).
_RELAY = """\
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    try:
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    while data:
        data = data[os.write(1, data):]
"""
# -I: ignore PYTHON* variables (a PYTHONPATH meant for the server) and the cwd; -S: skip site (faster start).
RELAY_ARGV = ["python3", "-I", "-S", "-c", _RELAY]
_FRAME_HEADER = 8
_STDOUT = 1
_CHUNK = 1 << 16
# How much of a relay's stderr (why it could not connect) is kept for last_error.
_ERROR_BYTES = 2048
_JOIN_S = 5.0
_KEPT_EXEC_IDS = 4096
# How long a connection whose server side ended waits for the client to close its side.
_LINGER_S = 5.0


class PortForward:
    """Forward ``127.0.0.1:<self.port>`` on the host to ``127.0.0.1:<port>`` inside running container ``container_id``.

    Starts listening at once; :meth:`close` (idempotent) ends it. ``user`` is the exec's user
    (default: the container's).
    """

    def __init__(self, container_id: str, port: int, *, user: str | None = None):
        self.container_id = container_id
        self.target_port = port
        self.user = user
        #: Why the last connection's relay failed (its stderr, or the engine's answer), for error messages.
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._connections: set[_Connection] = set()
        self._exec_ids: collections.deque[str] = collections.deque(maxlen=_KEPT_EXEC_IDS)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread_prefix = f"agentgym-forward-{container_id[:12]}-{self.port}"
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name=f"{self._thread_prefix}-accept")
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def thread_prefix(self) -> str:
        """The name prefix of every thread this forward starts (tests check that none outlives it)."""
        return self._thread_prefix

    def exec_ids(self) -> list[str]:
        """The ids of the execs this forward started, one per connection (ended ones included; the latest thousands)."""
        with self._lock:
            return list(self._exec_ids)

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def _accept(self) -> None:
        while True:
            try:
                client, (_, peer_port) = self._listener.accept()
            except OSError:
                if self._closed:
                    return  # close() shut the listener
                time.sleep(0.05)  # a transient failure (a connection reset before it was accepted, no free fd)
                continue
            connection = _Connection(self, client, f"{self._thread_prefix}-{peer_port}")
            with self._lock:
                if self._closed:
                    _close_socket(client)
                    return
                self._connections.add(connection)
                connection.start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def close(self) -> None:
        """Stop accepting, end every connection and wait for their threads; idempotent, from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        for connection in connections:
            connection.abort()
        if self._acceptor is not threading.current_thread():
            self._acceptor.join(_JOIN_S)
        for connection in connections:
            connection.join(_JOIN_S)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _Connection:
    """One accepted connection and its exec: a thread per direction."""

    def __init__(self, forward: PortForward, client: socket.socket, name: str):
        self._forward = forward
        self._client = client
        self._name = name
        self._exec: socket.socket | None = None
        self._response = None
        self._aborted = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        thread = threading.Thread(target=self._run, daemon=True, name=f"{self._name}-down")
        self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        forward = self._forward
        try:
            if not self._open_exec():
                return
            up = threading.Thread(target=self._upstream, daemon=True, name=f"{self._name}-up")
            self._threads.append(up)
            up.start()
            self._downstream()
            # The server is done; a client normally closes at once after reading the end. Closing it first
            # could reset the connection (and lose the last bytes) while it still had something in flight.
            up.join(_LINGER_S)
        finally:
            self.abort()
            forward._forget(self)

    def _open_exec(self) -> bool:
        forward = self._forward
        client = engine.api()
        try:
            exec_id = client.exec_create(
                forward.container_id,
                [*RELAY_ARGV, str(forward.target_port)],
                stdin=True,
                user=forward.user or "",
            )["Id"]
            with forward._lock:
                forward._exec_ids.append(exec_id)
            response, reader, sock = _hijack(client, exec_id)
            # The engine client's read timeout would cut a connection that idles (an agent thinking between steps).
            sock.settimeout(None)
        except (docker.errors.APIError, requests.exceptions.RequestException, OSError) as exc:
            forward.last_error = engine.explain(exc) if isinstance(exc, docker.errors.APIError) else str(exc)
            return False
        with self._lock:
            self._response, self._exec = response, sock
            aborted = self._aborted
        if aborted:  # close() ran while the exec started
            return False
        self._reader = reader
        return True

    def _upstream(self) -> None:
        """Client -> the exec's stdin; the client's end of stream becomes the relay's EOF on stdin."""
        assert self._exec is not None
        try:
            while data := self._client.recv(_CHUNK):
                self._exec.sendall(data)
            self._exec.shutdown(socket.SHUT_WR)
        except OSError:
            self.abort()

    def _downstream(self) -> None:
        """The exec's stdout frames -> client; stderr (the relay's complaint) is kept for last_error."""
        frames, errors = bytearray(), bytearray()
        try:
            while chunk := self._reader.read1(_CHUNK):
                frames += chunk
                while len(frames) >= _FRAME_HEADER:
                    size = int.from_bytes(frames[4:_FRAME_HEADER], "big")
                    if len(frames) < _FRAME_HEADER + size:
                        break
                    payload = bytes(frames[_FRAME_HEADER : _FRAME_HEADER + size])
                    if frames[0] == _STDOUT:
                        self._client.sendall(payload)
                    else:
                        errors += payload[: _ERROR_BYTES - len(errors)]
                    del frames[: _FRAME_HEADER + size]
        except (OSError, ValueError):
            pass  # either side went away (or abort() closed them): the connection is over
        if errors.strip():  # before the client sees the end, so that it can ask why
            self._forward.last_error = errors.decode(errors="replace").strip().splitlines()[-1]
        with contextlib.suppress(OSError):
            self._client.shutdown(socket.SHUT_WR)  # the server is done: the client sees its end of stream

    def abort(self) -> None:
        """End the connection both ways (wakes both threads); idempotent."""
        with self._lock:
            self._aborted = True
            sockets = [self._client, self._exec]
            response, self._response = self._response, None
        for sock in sockets:
            if sock is not None:
                _close_socket(sock)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()

    def join(self, timeout: float) -> None:
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout)


def _close_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
