"""Servers for tests: free ports, children that log to a file, `agentgym serve` waited on, envs served over OpenEnv here."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["LoggedProcess", "ServerProcess", "free_port", "served"]


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoggedProcess(subprocess.Popen):
    """A child process whose stdout and stderr go to an unlinked temporary file, not to a pipe.

    Nobody reads a long-lived server's pipe while tests run; once its 64 KiB buffer fills, the
    child's next write blocks and the whole server stalls. OpenEnv's own server logs a ~4 KiB
    traceback for every session its client closes, so it stalled after ~15 sessions.
    """

    def __init__(self, args: Sequence[str], **kwargs):
        with tempfile.NamedTemporaryFile(prefix="agentgym-test-", suffix=".log") as log:
            # A reader of its own (its own offset) outlives the unlinked name; the child appends.
            self._reader = open(log.name, "rb")  # noqa: SIM115 - closed in stop()
            with open(log.name, "ab") as writer:
                super().__init__(args, stdout=writer, stderr=subprocess.STDOUT, **kwargs)

    def output(self) -> str:
        """Everything the process has written so far."""
        self._reader.seek(0)
        return self._reader.read().decode(errors="replace")

    def stop(self, grace: float = 10.0, signal_number: int = signal.SIGTERM) -> str:
        """Send ``signal_number``, kill the process if it is still running after ``grace`` s, reap it; its whole output."""
        if self.poll() is None:
            self.send_signal(signal_number)
            try:
                self.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
                self.wait()
        output = self.output()
        self._reader.close()
        return output


class ServerProcess:
    """``agentgym serve`` as a child process on a free loopback port: a context manager.

    Entering starts ``agentgym serve --model MODEL`` (``--served-model-name`` unless None, plus ``options``, more of
    its flags) and waits until ``/health`` answers
    (raising with the server's output if it exits or does not answer within ``timeout``);
    :attr:`base_url` is then its ``/v1`` URL. Leaving terminates it by its pid (killed if it
    does not exit within 15 s).
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        served_model_name: str | None = "tiny",
        max_batch_size: int = 16,
        options: Sequence[str] = (),
        timeout: float = 120.0,
    ):
        self.command = [
            str(Path(sys.executable).with_name("agentgym")),
            "serve",
            "--model",
            str(model),
            *(["--served-model-name", served_model_name] if served_model_name else []),
            "--max-batch-size",
            str(max_batch_size),
            *options,
        ]
        self.timeout = timeout
        self.process: LoggedProcess | None = None
        self.base_url = ""

    def __enter__(self) -> ServerProcess:
        port = free_port()
        self.process = LoggedProcess([*self.command, "--port", str(port)])
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"agentgym serve exited: {self.process.output()}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as health:
                        if json.load(health)["status"] == "ok":
                            break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"agentgym serve did not answer /health within {self.timeout:g} s") from None
                    time.sleep(0.25)
        except BaseException:
            self.__exit__()
            raise
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *exc) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.stop(grace=15)


@contextlib.contextmanager
def served(env_id: str, **options) -> Iterator[tuple[str, object]]:
    """OpenEnv's app for ``env_id`` under uvicorn on a free loopback port: ``(base_url, the app's shared state)``.

    On exit the server shuts down (which closes every env still open) and the test checks that no
    session and no snapshot handle is left.
    """
    import uvicorn

    from agentgym.integrations.openenv.server import create_openenv_app

    app = create_openenv_app(env_id, **options)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the OpenEnv server did not start"
        time.sleep(0.05)
    state = app.state.agentgym
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", state
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
    assert not thread.is_alive()
    assert len(state.sessions) == 0 and len(state.handles) == 0
