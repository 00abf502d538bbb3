"""Network isolation of a browser session: the gate (an HTTP proxy on loopback) that connects only to the session's origins (see :mod:`agentgym.sandbox.browser`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["NetworkGate", "origin_of"]


def origin_of(url: str) -> str:
    """``scheme://host:port`` of a URL (the unit the network allow-list works in)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class NetworkGate:
    """One session's HTTP proxy on loopback: the context sends it every request (loopback included), and it connects only to the session's origins.

    Page routing cannot see WebSockets, some worker requests or WebRTC; a proxy sees every
    connection Chromium's network service makes for the context. A request for an origin
    outside ``origins`` gets a 403 and is listed in :attr:`refused`. Each forwarded request
    has its own upstream connection (``Connection: close``), so one client connection can never
    carry a request to an origin that was not checked. Responses get a ``Content-Security-Policy``
    of ``frame-src`` and ``object-src`` limited to ``frame_sources``, which keeps ``data:`` and
    ``blob:`` documents out of frames.
    """

    _REFUSAL = (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 37\r\n\r\n"
        b"agentgym: outside this task's sites.\n"
    )

    def __init__(self, origins: Iterable[str], frame_sources: Iterable[str]):
        self.allow(origins, frame_sources)
        #: What was refused since the last :meth:`drain` (URLs; ``CONNECT host:port`` for tunnels).
        self.refused: list[str] = []
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def allow(self, origins: Iterable[str], frame_sources: Iterable[str]) -> None:
        """Set the origins this gate connects to and the frame sources its policy allows (a spare context's gate gets them when a session takes it)."""
        self.origins = frozenset(origin_of(origin) for origin in origins)
        sources = " ".join(frame_sources) or "'none'"
        self._policy = f"Content-Security-Policy: frame-src {sources}; object-src {sources}\r\n".encode()

    async def start(self) -> str:
        """Listen on a free loopback port; returns the proxy's URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def drain(self) -> list[str]:
        refused, self.refused = self.refused, []
        return refused

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # at most the reader's 64 KiB limit
            request_line, _, headers = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            tunnel = method.upper() == "CONNECT"
            # A tunnel (WebSocket, HTTPS) names host:port; its origin may be any of the schemes.
            url = f"http://{target}/" if tunnel else target
            origins = (
                [f"{scheme}://{target}".lower() for scheme in ("http", "https", "ws", "wss")]
                if tunnel
                else [origin_of(target)]
            )
            parts = urlsplit(url)
            if parts.hostname is None or not self.origins.intersection(origins):
                self.refused.append(f"CONNECT {target}" if tunnel else target)
                writer.write(self._REFUSAL)
                return
            up_reader, upstream = await asyncio.open_connection(parts.hostname, parts.port or 80)
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [
                    line
                    for line in headers.split(b"\r\n")
                    if line
                    and not line.lower().startswith(
                        (b"connection:", b"proxy-connection:", b"keep-alive:", b"proxy-authorization:")
                    )
                ]
                upstream.write(
                    b"\r\n".join(
                        [f"{method} {path} {version}".encode("latin-1"), *kept, b"Connection: close", b"", b""]
                    )
                )
            await self._relay(reader, writer, up_reader, upstream, tunnel=tunnel)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client or upstream that went away; Chromium sees the connection close
        finally:
            self._writers.discard(writer)
            for stream in (writer, upstream):
                if stream is not None:
                    stream.close()

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        *,
        tunnel: bool,
    ) -> None:
        """Copy bytes both ways until either side ends (the upstream closes after its response; a tunnel with either end)."""

        async def to_client() -> None:
            if not tunnel:
                head = await upstream_reader.readuntil(b"\r\n\r\n")
                client.write(head[:-2] + self._policy + b"\r\n")
            await _copy(upstream_reader, client)

        copies = [asyncio.ensure_future(_copy(client_reader, upstream)), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in copies:
                task.cancel()
            await asyncio.gather(*copies, return_exceptions=True)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()
