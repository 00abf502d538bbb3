"""MCP servers over stdio as tool sources for agentgym envs: a synchronous client, and MCPToolEnv, a ToolEnv whose tools a server provides.

Environments are synchronous (their async twins run them in worker threads), while the
``mcp`` SDK is async. :class:`MCPServer` bridges the two: it owns a private event loop in a
daemon thread, starts the server process, holds one initialized ``mcp.ClientSession`` open
for its lifetime, and offers blocking ``tools()`` / ``call()`` / ``close()``::

    with MCPServer([sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]) as server:
        specs = server.tools()                       # list[ToolSpec]
        text = server.call("get_current_time", {"timezone": "Europe/Paris"})

Tool-level failures (the server's ``isError`` results, protocol errors such as an unknown
tool or bad arguments) come back as ``"Error: ..."`` text for the model to read; only
failures of the connection itself raise (:class:`MCPError`, :class:`TimeoutError`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

from agentgym.extras import requires

with requires("tool"):
    import anyio
    import mcp_types
    from anyio.abc import Process
    from anyio.streams.text import TextReceiveStream
    from mcp import ClientSession
    from mcp.client.stdio import get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.exceptions import MCPError as _ProtocolError
    from mcp.shared.message import SessionMessage

from agentgym.actions import ToolSpec
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.schema import Tool

__all__ = ["MCPServer", "MCPError", "MCPToolEnv"]

# How long a server gets to exit on its own once its stdin closes, and then after SIGTERM,
# before the next escalation; the MCP spec's shutdown sequence, with our bounds.
_EXIT_GRACE_S = 2.0
_TERM_GRACE_S = 2.0
# close() waits this long for the loop thread's orderly shutdown before SIGKILLing the
# process group itself: longer than the whole in-loop escalation, so it is only a backstop.
_CLOSE_TIMEOUT_S = _EXIT_GRACE_S + _TERM_GRACE_S + 3.0
_STDERR_TAIL_CHARS = 2000


class MCPError(RuntimeError):
    """The MCP server could not be started, never answered ``initialize``, or its connection broke."""


class MCPServer:
    """One MCP server process, reached over stdio, with a synchronous API.

    ``command`` is the full argv (``[executable, *args]``). ``env`` is added to the SDK's
    default minimal environment (``HOME``, ``PATH``, ...), not to ``os.environ``, so servers
    do not inherit the caller's secrets unless passed on purpose. Raises :class:`MCPError`
    when the process cannot be started or does not complete ``initialize`` (and list its
    tools) within ``start_timeout`` seconds; the message carries the server's stderr tail.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        start_timeout: float = 20.0,
        call_timeout: float = 30.0,
    ) -> None:
        if not command:
            raise ValueError("MCPServer needs a command")
        self.command = [str(part) for part in command]
        self.call_timeout = call_timeout
        self.pid: int | None = None
        self._env = get_default_environment() | dict(env or {})
        self._cwd = None if cwd is None else os.fspath(cwd)
        # A real file, not a pipe: nobody has to drain it, and it is still readable after the
        # process died, which is when its tail matters.
        self._stderr = tempfile.TemporaryFile()
        self._stderr_at_close: str | None = None
        self._session: ClientSession | None = None
        self._tools: list[ToolSpec] = []
        self._closed = False
        self._close_lock = threading.Lock()

        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"mcp-server:{self.command[0]}", daemon=True
        )
        self._thread.start()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(ready, start_timeout), self._loop)
        try:
            # The margin covers process spawn; the in-loop start_timeout bounds initialize.
            ready.result(timeout=start_timeout + 5.0)
        except BaseException as exc:
            self.close()
            if not isinstance(exc, Exception):
                raise
            reason = _describe(exc)
            if isinstance(_unwrap(exc), TimeoutError):
                reason = f"no answer to initialize within {start_timeout:g}s"
            raise MCPError(
                f"MCP server {self.command!r} failed to start: {reason}\n"
                f"--- server stderr (tail) ---\n{self.stderr_tail()}"
            ) from exc

    def tools(self) -> list[ToolSpec]:
        """The server's tools as listed at start-up, each with its ``inputSchema`` as parameters."""
        return list(self._tools)

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Calls a tool and returns its result as text; tool-level errors return ``"Error: ..."``.

        Raises :class:`TimeoutError` when the server takes longer than ``call_timeout``
        (the request is cancelled; the server keeps running, the caller decides what next)
        and :class:`MCPError` when the server is closed or its connection is gone.
        """
        if self._closed or self._session is None:
            raise MCPError(f"MCP server {self.command!r} is closed")
        future = asyncio.run_coroutine_threadsafe(self._call(name, dict(arguments or {})), self._loop)
        try:
            # The in-loop timeout fires first and cancels the request cleanly; this outer
            # bound only guards against a wedged loop.
            return future.result(timeout=self.call_timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"MCP tool {name!r} on {self.command!r} did not answer within {self.call_timeout:g}s"
            ) from None

    def stderr_tail(self, chars: int = _STDERR_TAIL_CHARS) -> str:
        """The last ``chars`` characters the server wrote to stderr (still available after close)."""
        if self._stderr_at_close is not None:
            return self._stderr_at_close[-chars:]
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        # Bytes, then decode: a cut through a multi-byte character only costs a replacement char.
        self._stderr.seek(max(0, size - 4 * chars))
        return self._stderr.read().decode("utf-8", "replace")[-chars:]

    def close(self) -> None:
        """Ends the session and the server process (killing it if it will not exit), then the loop thread.

        Idempotent and safe to call from any thread but the loop's own.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._loop.call_soon_threadsafe(self._stop.set)
        try:
            self._serving.result(timeout=_CLOSE_TIMEOUT_S)
        except Exception:
            # Start-up failures land here too and were reported by __init__. Whatever went
            # wrong, nothing may outlive close(): kill the server's whole process group.
            if self.pid is not None:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()
        self._stderr_at_close = self.stderr_tail()
        self._stderr.close()

    def __enter__(self) -> MCPServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A forgotten close() must not leave a server process behind.
        if not getattr(self, "_closed", True):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid={self.pid}"
        return f"MCPServer({self.command!r}, {state})"

    # -- loop-thread side ---------------------------------------------------------------

    async def _serve(self, ready: concurrent.futures.Future[None], start_timeout: float) -> None:
        """Holds the process and session open from start-up until close() sets ``_stop``."""
        try:
            async with self._transport() as (read_stream, write_stream):
                async with ClientSession(read_stream, write_stream) as session:
                    with anyio.fail_after(start_timeout):
                        await session.initialize()
                        self._tools = await _list_tools(session)
                    self._session = session
                    ready.set_result(None)
                    await self._stop.wait()
                    self._session = None
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """A stdio transport that, unlike ``mcp.client.stdio.stdio_client``, exposes the child's pid.

        close() needs the pid to kill a server the loop could not stop, and callers need it
        to check nothing leaked. The server gets its own process group so that killing it
        also reaches whatever it spawned (``git`` for mcp-server-git).
        """
        process = await anyio.open_process(
            self.command, env=self._env, cwd=self._cwd, stderr=self._stderr, start_new_session=True
        )
        self.pid = process.pid
        # Unbuffered streams: a line is handed over only when the session takes it.
        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with anyio.create_task_group() as pumps:
                pumps.start_soon(_pump_stdout, process, to_session)
                pumps.start_soon(_pump_stdin, process, from_session, to_session)
                try:
                    yield read_stream, write_stream
                finally:
                    # Shielded: an orderly exit must finish even when the caller is cancelled,
                    # or the server process would outlive us.
                    with anyio.CancelScope(shield=True):
                        read_stream.close()
                        write_stream.close()
                        await _stop_process(process)
                    pumps.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), suppress(Exception):
                await process.aclose()

    async def _call(self, name: str, arguments: dict[str, Any]) -> str:
        session = self._session
        if session is None:
            raise MCPError(f"MCP server {self.command!r} is closed")
        try:
            with anyio.fail_after(self.call_timeout):
                result = await session.call_tool(name, arguments)
        except TimeoutError:
            raise TimeoutError(
                f"MCP tool {name!r} on {self.command!r} did not answer within {self.call_timeout:g}s"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise self._connection_lost(name, str(exc) or type(exc).__name__) from exc
        except _ProtocolError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                raise self._connection_lost(name, exc.message) from exc
            # Unknown tool, invalid arguments and the like: the model asked for something
            # wrong and should read why, as it would from a tool's own error.
            return f"Error: {exc.message}"
        text = _result_text(result)
        return f"Error: {text}" if result.is_error else text

    def _connection_lost(self, name: str, why: str) -> MCPError:
        return MCPError(
            f"MCP server {self.command!r} closed the connection during {name!r}: {why}\n"
            f"--- server stderr (tail) ---\n{self.stderr_tail()}"
        )


async def _list_tools(session: ClientSession) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    cursor: str | None = None
    while True:
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        listing = await session.list_tools(params=params)
        specs.extend(
            ToolSpec(name=tool.name, description=tool.description or "", parameters=tool.input_schema)
            for tool in listing.tools
        )
        cursor = listing.next_cursor
        if not cursor:
            return specs


def _result_text(result: mcp_types.CallToolResult) -> str:
    """Joins a result's text contents; non-text blocks are named so the model knows they exist."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content omitted]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)


async def _pump_stdout(process: Process, to_session: Any) -> None:
    """Feeds the server's stdout, one JSON-RPC message per line, to the session."""
    assert process.stdout is not None
    async with to_session:
        buffer = ""
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            async for chunk in TextReceiveStream(process.stdout, encoding="utf-8", errors="replace"):
                *lines, buffer = (buffer + chunk).split("\n")
                for line in lines:
                    if line.strip():
                        await to_session.send(_parse_line(line))


def _parse_line(line: str) -> SessionMessage | Exception:
    # A malformed line is handed to the session as a value (as the SDK's own transport
    # does) so it is reported without tearing the connection down.
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _pump_stdin(process: Process, from_session: Any, to_session: Any) -> None:
    """Writes the session's messages to the server's stdin, one JSON line each."""
    assert process.stdin is not None
    try:
        async with from_session:
            async for message in from_session:
                payload = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((payload + "\n").encode("utf-8"))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading (it died or is dying): end the session's read side so
        # pending requests fail now instead of waiting out their timeouts.
        await to_session.aclose()


async def _stop_process(process: Process) -> None:
    """The MCP stdio shutdown: close stdin, wait, then SIGTERM and SIGKILL the process group."""
    assert process.stdin is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(_EXIT_GRACE_S):
        # Polling, not process.wait(): on 3.11 that also waits for stdout EOF, which a
        # grandchild holding the pipe would delay indefinitely.
        while process.returncode is None:
            await anyio.sleep(0.02)
    # Also after a clean exit: the server's own children may still be in its group.
    # Returns at once when the group is already gone.
    await terminate_posix_process_tree(process, _TERM_GRACE_S)


def _unwrap(exc: BaseException) -> BaseException:
    """The single error inside the task groups' nested exception groups, if that is all there is."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _unwrap(exc)
    return f"{type(exc).__name__}: {exc}"


class MCPToolEnv(ToolEnv):
    """A :class:`~agentgym.envs.tool.env.ToolEnv` whose tools are an MCP server's.

    With ``command``, every env starts its own server process (a fork starts another) and
    closes it with the env; a server that hangs on shutdown is killed. With ``server``, envs
    share that running :class:`MCPServer` and never close it — only for servers whose tools
    do not change state that a branch should not see (read-only or stateless ones).

    Snapshots copy the env's own state and transcript (see ToolEnv); what lives inside the
    server process (files a git server wrote, say) is outside them, so forks of an env that
    uses a stateful server are exact only if the server's state is not changed by the tools.

    Args:
        tasks: as for ToolEnv.
        command: the server's argv, started per env.
        server: a running server to share instead.
        server_env: passed to :class:`MCPServer` (per-env servers only).
        cwd: passed to :class:`MCPServer` (per-env servers only).
        start_timeout: passed to :class:`MCPServer` (per-env servers only).
        **kwargs: ToolEnv's (``check``, ``state_factory``, ``max_turns``, ``call_timeout``, ...).
    """

    def __init__(
        self,
        tasks: Mapping[str, Any],
        *,
        command: Sequence[str] | None = None,
        server: MCPServer | None = None,
        server_env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        start_timeout: float = 20.0,
        **kwargs: Any,
    ):
        if (command is None) == (server is None):
            raise ValueError("give exactly one of command= (a server per env) or server= (a shared server)")
        self._owns_server = server is None
        if server is None:
            call_timeout = kwargs.get("call_timeout") or 30.0
            server = MCPServer(command, env=server_env, cwd=cwd, start_timeout=start_timeout, call_timeout=call_timeout)
        self.server = server
        try:
            tools = [Tool(spec, _server_call(server, spec.name)) for spec in server.tools()]
            kwargs.setdefault("variant", "mcp:" + " ".join(server.command))
            super().__init__(tools, tasks, **kwargs)
        except BaseException:
            if self._owns_server:
                server.close()
            raise

    def _teardown(self) -> None:
        super()._teardown()
        if self._owns_server:
            self.server.close()


def _server_call(server: MCPServer, name: str):
    def call(**arguments: Any) -> str:
        return server.call(name, arguments)

    call.__name__ = name
    return call
