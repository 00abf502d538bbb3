"""The command server: one long-lived process in each sandbox container that runs its commands, so that a
``docker exec`` (~70 ms) is paid once per container rather than once per command.

:class:`CommandServer` is the host's end. It starts the image's own ``/usr/bin/python3`` (by absolute
path: the agent can put a ``python3`` of its own first in ``$PATH``) as the sandbox user over one
attached ``docker exec`` and sends it :mod:`agentgym.sandbox.command_server_inner` on stdin; from then
on requests go in on the exec's stdin and answers come back on its stdout, framed (``>II``: JSON
length, blob length). Python because the base image has it and the server needs ``prctl``, pidfds and
binary framing (see the inner module); nothing is written into the container, so snapshots hold no
server state and a forked or restored container starts its own server at its first command.

Each command is the same ``bash -c INNER`` as on the per-command exec path, under the same
``timeout -k``, with the same output caps, sweeps and pids-limit notes (the server does what
:data:`agentgym.sandbox.shell.OUTER` does there); the difference is the channel. The exit status,
the note and the shell state are the server's own findings, sent on a pipe that only the server (made
non-dumpable) holds: a command cannot read a marker from anyone's argv or write into the channel, so
it cannot forge a result.

Failures. The agent may kill the server (it runs as the same uid): the channel ends, a command in
flight gets a failure result (the exec's exit status, never 0), and the next command starts a new
server, first killing every process of the sandbox user so that none can be waiting to open the new
server's pipes in the moment before it makes itself non-dumpable. A server that ended before it took
a command (``Lost(started=False)``) lets the command be sent again. Where the server cannot start (an
image without ``/usr/bin/python3``, ``SandboxConfig.command_server=False``), commands keep the
per-command exec path.
"""

from __future__ import annotations

import json
import select
import struct
import time
from collections.abc import Callable
from pathlib import Path

from agentgym.sandbox import shell

__all__ = ["CommandServer", "Lost", "Unavailable", "bootstrap_argv"]

PYTHON = "/usr/bin/python3"
_SCRIPT = Path(__file__).with_name("command_server_inner.py").read_bytes()


def bootstrap_argv(name: str) -> list[str]:
    """The argv of an in-container server whose source comes over stdin (its length on a line, then the source)
    and runs as ``__main__`` under ``name``. -I: no PYTHON* variables, user site-packages or cwd on sys.path
    (all the agent's to write); -S: no site. The desktop helper starts the same way."""
    return [
        PYTHON,
        "-I",
        "-S",
        "-X",
        "utf8",
        "-c",
        f'import sys;s=sys.stdin.buffer;exec(compile(s.read(int(s.readline())),"{name}","exec"))',
    ]


_ARGV = bootstrap_argv("agentgym-command-server")
_HEADER = struct.Struct(">II")
_FRAME_HEADER = 8
# Generous: an interpreter start on a loaded 2-core machine.
START_TIMEOUT_S = 30.0
# How much of the server's stderr (its traceback, the runtime's error) is kept for error messages.
_ERROR_BYTES = 4096

# Opens an attached exec of argv as the sandbox user: (exec id, response, buffered reader, socket).
OpenExec = Callable[[str, list[str]], tuple]


class Unavailable(Exception):
    """The server did not start; ``permanent`` when it cannot in this container (no ``/usr/bin/python3``)."""

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.permanent = permanent


class Lost(Exception):
    """The channel ended during a request; ``started``: after the server had taken it (it may have run)."""

    def __init__(self, started: bool):
        super().__init__("the command server's channel ended")
        self.started = started


class CommandServer:
    """The host's end of one container's command server: requests one at a time (the caller serialises)."""

    def __init__(self, container_id: str, exec_id: str, response, reader, sock):
        self.container_id = container_id
        self.exec_id = exec_id
        self._response, self._reader, self._sock = response, reader, sock
        self._frames = bytearray()  # Docker's multiplexed frames, not yet split
        self._stdout = bytearray()  # the server's messages, not yet parsed
        self._errors = bytearray()
        self._closed = False

    @classmethod
    def start(cls, container_id: str, open_exec: OpenExec) -> CommandServer:
        """Start a server in the container and wait until it is ready; :class:`Unavailable` when it does not."""
        try:
            server = cls(container_id, *open_exec(container_id, _ARGV))
        except Exception as exc:  # noqa: BLE001 - the per-command path will meet (and report) the same fault
            raise Unavailable(f"starting the command server: {exc}", permanent=False) from exc
        try:
            server._sock.settimeout(START_TIMEOUT_S)
            server._sock.sendall(b"%d\n" % len(_SCRIPT) + _SCRIPT)
            header, _ = server._message(time.monotonic() + START_TIMEOUT_S)
            if "ready" not in header:
                raise ValueError(f"unexpected first message {header!r}")
        except (Lost, shell.Backstop, OSError, ValueError) as exc:
            server.close()
            errors = server.errors()
            raise Unavailable(
                f"the command server did not start ({type(exc).__name__}): {errors}",
                permanent="no such file or directory" in errors,
            ) from exc
        return server

    def alive(self) -> bool:
        """Whether the channel is open; the server writes only answers, so anything readable between
        requests means it ended (EOF) or misbehaves, and the channel is closed."""
        if self._closed:
            return False
        try:
            readable = bool(select.select([self._sock], [], [], 0)[0])
        except (OSError, ValueError):
            readable = True
        if readable or self._stdout:
            self.close()
        return not self._closed

    def run(
        self,
        spec: shell.ExecCommand,
        stdin: str | bytes | None,
        deadline: float,
        capture: Callable[[], shell.Capture],
    ) -> shell.StreamResult[shell.Capture]:
        """Run ``spec.program`` under the server's ``timeout``: its captured output and the records a trailer
        would carry (exit status, note, then for shell commands the state file's records)."""
        stdout, stderr = capture(), capture()
        request = {
            "op": "run",
            "argv": spec.program,
            "timeout": f"{spec.timeout:g}",
            "grace": f"{spec.kill_grace:g}",
            "shell": bool(spec.state_file),
            "state_file": spec.state_file,
            "state_limit": shell.MAX_TRAILER,
            "path": "" if spec.state_file else shell.SYSTEM_PATH,
            "limit": stdout.limit if isinstance(stdout, shell.BoundedBuffer) else stdout.head_limit + stdout.tail_limit,
            "bounded": isinstance(stdout, shell.BoundedBuffer),
            "stdin": stdin is not None,
        }
        payload = stdin.encode() if isinstance(stdin, str) else stdin or b""
        reply, data = self._request(request, payload, deadline)
        at = _put_parts(stdout, reply["out"], data, 0)
        at = _put_parts(stderr, reply["err"], data, at)
        state_records: bytes = data[at : at + reply.get("state", 0)]
        records = [str(reply["rc"]).encode(), reply["note"].encode(), *state_records.split(b"\0")[:-1]]
        return shell.StreamResult(stdout, stderr, records)

    def stop(self, deadline: float) -> bool:
        """Kill every process of the sandbox user but the server; whether some survived a second of that."""
        reply, _ = self._request({"op": "stop"}, b"", deadline)
        return bool(reply["left"])

    def _request(self, header: dict, blob: bytes, deadline: float) -> tuple[dict, bytes]:
        if not self.alive():
            raise Lost(started=False)
        data = json.dumps(header).encode()
        started = False
        try:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self._sock.sendall(_HEADER.pack(len(data), len(blob)) + data + blob)
            ack, _ = self._message(deadline)
            started = bool(ack.get("started"))
            if not started:
                raise ValueError(f"unexpected answer {ack!r}")
            return self._message(deadline)
        except TimeoutError:
            self.close()
            raise shell.Backstop from None
        except shell.Backstop:
            self.close()  # the stream is somewhere in the middle of an answer now
            raise
        except (Lost, OSError, ValueError):
            self.close()
            raise Lost(started) from None

    def _message(self, deadline: float) -> tuple[dict, bytes]:
        while True:
            if len(self._stdout) >= _HEADER.size:
                size, blob_size = _HEADER.unpack_from(self._stdout)
                end = _HEADER.size + size + blob_size
                if len(self._stdout) >= end:
                    header = json.loads(self._stdout[_HEADER.size : _HEADER.size + size])
                    blob = bytes(self._stdout[_HEADER.size + size : end])
                    del self._stdout[:end]
                    return header, blob
            self._fill(deadline)

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise shell.Backstop
        self._sock.settimeout(remaining)
        try:
            chunk = self._reader.read1(1 << 16)
        except TimeoutError:
            raise shell.Backstop from None
        if not chunk:
            raise Lost(started=False)  # _request knows whether the server had taken the request
        self._frames += chunk
        while len(self._frames) >= _FRAME_HEADER:
            size = int.from_bytes(self._frames[4:_FRAME_HEADER], "big")
            if len(self._frames) < _FRAME_HEADER + size:
                break
            payload = self._frames[_FRAME_HEADER : _FRAME_HEADER + size]
            if self._frames[0] == shell.STDERR:
                self._errors = (self._errors + payload)[-_ERROR_BYTES:]
            else:
                self._stdout += payload
            del self._frames[: _FRAME_HEADER + size]

    def errors(self) -> str:
        """The end of what the server wrote to stderr, and of what did not parse as a message on stdout (the
        runtime's error for a server that did not start)."""
        return bytes(self._errors + self._stdout[-_ERROR_BYTES:]).decode(errors="replace").strip()

    def close(self) -> None:
        """Drop the channel (idempotent; the server exits at the end of its stdin)."""
        if not self._closed:
            self._closed = True
            self._response.close()


def _put_parts(capture: shell.OutputCapture | shell.BoundedBuffer, parts: list[int], data: bytes, at: int) -> int:
    """Put one stream's head, dropped count and tail, as the server kept them, into ``capture``; the offset after."""
    head, tail, dropped = parts
    capture.write(data[at : at + head])
    if dropped and isinstance(capture, shell.OutputCapture):  # a BoundedBuffer's server side never drops
        capture.dropped += dropped
    capture.write(data[at + head : at + head + tail])
    return at + head + tail
