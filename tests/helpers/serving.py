"""Child servers for tests: a free loopback port, a child process that logs to a file, and ``agentgym serve`` waited on until ``/health``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LoggedProcess", "ServerProcess", "free_port"]


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

    Entering starts ``agentgym serve --model MODEL`` (plus ``options``, more of its flags) and waits until ``/health`` answers
    (raising with the server's output if it exits or does not answer within ``timeout``);
    :attr:`base_url` is then its ``/v1`` URL. Leaving terminates it by its pid (killed if it
    does not exit within 15 s).
    """

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        served_model_name: str = "tiny",
        max_batch_size: int = 16,
        options: Sequence[str] = (),
        timeout: float = 120.0,
    ):
        self.command = [
            str(Path(sys.executable).with_name("agentgym")),
            "serve",
            "--model",
            str(model),
            "--served-model-name",
            served_model_name,
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
