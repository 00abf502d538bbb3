"""A session's env tools as an MCP server (streamable HTTP, JSON answers) at the gateway's ``/mcp``.

The program's MCP client connects to :attr:`Gateway.mcp_url <agentgym.gateway.server.Gateway.mcp_url>`
with its session key as a bearer token (``headers={"Authorization": "Bearer <key>"}``) and gets the
tools of *its* session's env: ``tools/list`` lists ``env.tools()``, ``tools/call`` is one env step
with that call (:meth:`AgentEnv.step <agentgym.core.AgentEnv.step>` on a structured call, so the
env validates the arguments and bad calls come back as the env's error text with ``isError``).
The step's reward is the session's (:meth:`Session.add_step
<agentgym.gateway.session.Session.add_step>`); a step that ends the episode (a ``submit``) grades
it, and later calls answer that the episode is over.

Only what tool use needs is served: ``initialize``, ``ping``, ``tools/list``, ``tools/call`` and
notifications, answered as single JSON responses (the streamable HTTP transport allows a server
that never streams); ``GET`` (a server-to-client stream) is 405, as the transport allows.
A session without an env has no tools.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from agentgym import __version__

if TYPE_CHECKING:
    from agentgym.gateway.server import Gateway

__all__ = ["add_mcp_routes"]

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


def add_mcp_routes(app: web.Application, gateway: Gateway) -> None:
    async def post(request: web.Request) -> web.Response:
        session = gateway.session_of(request)
        try:
            message = await request.json()
        except ValueError:
            return _error(None, -32700, "parse error: the body is not JSON", status=400)
        if isinstance(message, list):
            return _error(None, -32600, "batches are not supported", status=400)
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
        ):
            return _error(None, -32600, "invalid request: a JSON-RPC 2.0 object with a method is expected", status=400)
        if "id" not in message:  # a notification (initialized, cancelled): nothing to answer
            return web.Response(status=202)
        request_id, method, params = message["id"], message["method"], message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            result: dict[str, Any] = {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "agentgym-gateway", "version": __version__},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            tools = session.env.unwrapped.tools() if session.env is not None else []
            result = {
                "tools": [
                    {"name": t.name, "description": t.description, "inputSchema": dict(t.parameters)} for t in tools
                ]
            }
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, dict):
                return _error(request_id, -32602, "tools/call needs a name and an arguments object")
            if session.env is None:
                return _error(request_id, -32602, f"unknown tool {name!r}: this session has no env")
            if session.replay is not None and session.replay.serves_step():
                step = session.replay.step(name, arguments)  # the forked env is past it: answered from the record
                session.add_step(step.text, step.reward, False, None, (name, arguments, step.is_error))
                text, is_error = step.text, step.is_error
            else:
                async with gateway.env_lock(session):
                    observation, reward, terminated, truncated, info = await session.env.astep(
                        {"name": name, "arguments": arguments}
                    )
                text = observation["text"] if isinstance(observation, dict) else str(observation)
                done, is_error = terminated or truncated, bool(info.get("error"))
                if info.get("env_error") and session.env_error is None:  # the env broke, not the program
                    session.env_error = str(info["env_error"])
                session.add_step(
                    text, float(reward), done, info.get("success") if done else None, (name, arguments, is_error)
                )
            result = {"content": [{"type": "text", "text": text}], "isError": is_error}
        else:
            return _error(request_id, -32601, f"method not found: {method}")
        return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def not_streamed(request: web.Request) -> web.Response:
        gateway.session_of(request)
        return web.Response(status=405, headers={"Allow": "POST"})

    app.router.add_post("/mcp", post)
    app.router.add_get("/mcp", not_streamed)
    app.router.add_delete("/mcp", not_streamed)


def _error(request_id: Any, code: int, message: str, status: int = 200) -> web.Response:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")
