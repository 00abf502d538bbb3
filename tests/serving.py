"""``agentgym serve`` as a child process for tests: a free loopback port and a launcher that waits for ``/health``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ServerProcess", "free_port"]


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        self.process: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> ServerProcess:
        port = free_port()
        self.process = subprocess.Popen(
            [*self.command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"agentgym serve exited: {self.process.stdout.read()}")
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
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
