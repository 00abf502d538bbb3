"""Any registered agentgym env served as an OpenEnv environment: ``agentgym openenv serve ENV_ID`` and ``agentgym openenv init ENV_ID DIR``.

:func:`create_openenv_app` builds OpenEnv's own FastAPI app (``openenv.core.env_server.create_app``)
around :class:`AgentGymEnvironment`, an OpenEnv ``Environment`` over one agentgym env. OpenEnv's
``/ws`` endpoint gives every WebSocket connection a session with its own environment (up to
``max_sessions`` at once; one more is refused with OpenEnv's ``CAPACITY_REACHED``); the wire
format and the branching extension are :mod:`agentgym.integrations.openenv.protocol`'s.

**Sessions and resources.** A session's agentgym env is made (``gymnasium.make``) at its first
``reset``, so the environments OpenEnv builds for ``/metadata``, ``/schema`` or a capacity check
cost nothing. The env is closed when the session ends for any reason: the client's ``close``,
a disconnect (a dead peer is found by the WebSocket pings), an error, OpenEnv's idle timeout
(``idle_timeout``), or the server's shutdown, which closes every env still open. Its container or
browser context goes with it. Reset and step run through the env's async twins (``areset``,
``astep``), so sessions do not wait on each other.

**Branching.** Each session serves the ``snapshot``, ``restore``, ``release`` and ``fork`` MCP tools
(FastMCP tools on the environment's ``mcp_server``, which OpenEnv's ``{"type": "mcp"}`` message
and ``/mcp`` endpoint call). Snapshot handles are kept in one table per app with the agentgym
:class:`~agentgym.snapshot.Snapshot` behind each: the table holds one reference per handle, a session's
handles are released when it ends, and a fork ticket (the ``fork`` tool) holds its own reference
until a new session claims it with ``reset(fork_from=...)`` or ``fork_ttl`` seconds pass. A claim
or a restore retains the snapshot while it works, so a handle released meanwhile stays whole.

OpenEnv's stateless HTTP ``/reset`` and ``/step`` make a fresh environment per request (OpenEnv's
design); an episode needs the WebSocket session.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium

from agentgym.extras import requires
from agentgym.integrations.openenv.protocol import (
    FORK_FROM,
    AgentGymAction,
    AgentGymObservation,
    AgentGymState,
    encode_image,
)
from agentgym.rollout.agent import json_safe
from agentgym.snapshot import Snapshot

with requires("openenv"):
    from fastmcp import FastMCP
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata

__all__ = ["AgentGymEnvironment", "check_env_builds", "create_openenv_app", "resolve_env_id", "serve", "write_env_dir"]


def resolve_env_id(env_id: str) -> str:
    """The registered id for ``env_id`` (``agentgym/`` may be left out); :class:`ValueError` naming it when there is none."""
    import agentgym  # noqa: F401  (registers the envs)

    full = env_id if "/" in env_id else f"agentgym/{env_id}"
    try:
        gymnasium.spec(full)
    except gymnasium.error.Error as exc:
        raise ValueError(f"{exc} (`agentgym envs list` shows the ids)") from None
    return full


@dataclass
class _Handle:
    """One entry of the handle table: the snapshot it holds a reference to, and who may release it."""

    snapshot: Snapshot
    observation: AgentGymObservation  # what the session saw at that point: restore and fork answer with it
    owner: str | None  # the session's token; None for a fork ticket
    expires_at: float | None = None  # fork tickets only


class _HandleTable:
    """Snapshot handles of one app (see the module docstring); thread-safe, since sessions close in worker threads."""

    def __init__(self, fork_ttl: float):
        self.fork_ttl = fork_ttl
        self._handles: dict[str, _Handle] = {}
        self._lock = threading.Lock()

    def add(self, snapshot: Snapshot, observation: AgentGymObservation, owner: str | None) -> str:
        """File ``snapshot`` (the table takes over the caller's reference) and return its new handle id."""
        handle_id = secrets.token_hex(16)
        expires = None if owner is not None else time.monotonic() + self.fork_ttl
        with self._lock:
            self._handles[handle_id] = _Handle(snapshot, observation, owner, expires)
        return handle_id

    def owned_by(self, owner: str) -> list[str]:
        with self._lock:
            return [handle_id for handle_id, handle in self._handles.items() if handle.owner == owner]

    def retain(self, handle_id: str) -> tuple[Snapshot, AgentGymObservation]:
        """The handle's snapshot with a reference for the caller (who releases it), for a restore or a fork."""
        self.expire()
        with self._lock:
            handle = self._handles.get(handle_id)
            if handle is None:
                raise KeyError(f"unknown or released handle {handle_id!r}")
            return handle.snapshot.retain(), handle.observation

    def claim(self, handle_id: str) -> tuple[Snapshot, AgentGymObservation]:
        """Like :meth:`retain`, but a fork ticket is used up: its reference passes to the caller."""
        self.expire()
        with self._lock:
            handle = self._handles.get(handle_id)
            if handle is None:
                raise KeyError(f"unknown, used or expired fork id {handle_id!r}")
            if handle.owner is None:
                del self._handles[handle_id]
                return handle.snapshot, handle.observation
            return handle.snapshot.retain(), handle.observation

    def release(self, handle_id: str, owner: str) -> None:
        with self._lock:
            handle = self._handles.get(handle_id)
            if handle is None or handle.owner != owner:
                raise KeyError(f"this session holds no handle {handle_id!r}")
            del self._handles[handle_id]
        handle.snapshot.release()

    def release_owner(self, owner: str) -> None:
        """Release every handle of a session (it ended)."""
        with self._lock:
            dropped = [
                self._handles.pop(handle_id)
                for handle_id in list(self._handles)
                if self._handles[handle_id].owner == owner
            ]
        for handle in dropped:
            handle.snapshot.release()

    def expire(self) -> None:
        """Release the fork tickets nobody claimed in time."""
        now = time.monotonic()
        with self._lock:
            stale = [
                self._handles.pop(handle_id)
                for handle_id in list(self._handles)
                if (expires := self._handles[handle_id].expires_at) is not None and expires <= now
            ]
        for handle in stale:
            handle.snapshot.release()

    def release_all(self) -> None:
        with self._lock:
            dropped = list(self._handles.values())
            self._handles.clear()
        for handle in dropped:
            handle.snapshot.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)


@dataclass
class _Served:
    """What every session of one app shares: the env to make, the options, the handle table, the live sessions."""

    env_id: str
    env_kwargs: dict[str, Any]
    images: bool
    handles: _HandleTable
    sessions: weakref.WeakSet[AgentGymEnvironment] = field(default_factory=weakref.WeakSet)

    def make(self) -> gymnasium.Env:
        return gymnasium.make(self.env_id, **self.env_kwargs)


class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, AgentGymState]):
    """One OpenEnv session over one agentgym env (made at the first reset; see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: _Served):
        super().__init__()
        self._served = served
        self._token = secrets.token_hex(8)  # owner of this session's snapshot handles
        self._env: gymnasium.Env | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._last: AgentGymObservation | None = None
        self._lock = asyncio.Lock()  # one env operation at a time, whichever endpoint asks
        self._closed = False
        self._mcp: FastMCP | None = None
        served.sessions.add(self)

    # ------------------------------------------------------------------ OpenEnv's Environment
    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        fork_from: str | None = None,
        **kwargs: Any,
    ) -> AgentGymObservation:
        _reject_unknown(kwargs, "reset", ("seed", "episode_id", "task_id", FORK_FROM))
        async with self._lock:
            env = await self._ensure_env()
            if fork_from is not None:
                if task_id is not None or seed is not None:
                    raise ValueError("reset takes fork_from alone: the fork's task and state are the snapshot's")
                observation = await self._adopt(fork_from, claim=True)
            else:
                options = {"task_id": task_id} if task_id is not None else None
                obs, info = await env.areset(seed=seed, options=options)  # type: ignore[attr-defined]
                observation = self._observation(obs, None, False, False, info)
                self._steps = 0
            self._episode_id = episode_id or secrets.token_hex(8)
            return observation

    async def step_async(
        self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AgentGymObservation:
        _reject_unknown(kwargs, "step", ())
        if timeout_s is not None:
            raise ValueError("timeout_s is not supported: agentgym envs bound each tool call themselves")
        async with self._lock:
            env = self._require_env()
            obs, reward, terminated, truncated, info = await env.astep(action.env_action())  # type: ignore[attr-defined]
            self._steps += 1
            return self._observation(obs, reward, terminated, truncated, info)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        fork_from: str | None = None,
        **kwargs: Any,
    ) -> AgentGymObservation:
        """The sync face for direct use: runs :meth:`reset_async` (OpenEnv's server calls the async one)."""
        return asyncio.run(self.reset_async(seed, episode_id, task_id, fork_from, **kwargs))

    def step(self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any) -> AgentGymObservation:
        """The sync face for direct use: runs :meth:`step_async` (OpenEnv's server calls the async one)."""
        return asyncio.run(self.step_async(action, timeout_s, **kwargs))

    @property
    def state(self) -> AgentGymState:
        unwrapped = self._env.unwrapped if self._env is not None else None
        return AgentGymState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self._served.env_id,
            task_id=getattr(unwrapped, "task_id", None),
            turn=getattr(unwrapped, "turn", self._steps),
            handles=self._served.handles.owned_by(self._token),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        from importlib.metadata import version

        from agentgym.registration import describe_env

        _, description = describe_env(self._served.env_id)
        return EnvironmentMetadata(
            name=self._served.env_id, description=description, version=version("agentgym"), author="agentgym"
        )

    def close(self) -> None:
        """Release this session's snapshot handles and close its env; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._served.sessions.discard(self)
        self._served.handles.release_owner(self._token)
        env, self._env = self._env, None
        if env is not None:
            env.close()

    # ------------------------------------------------------------------ the branching extension
    @property
    def mcp_server(self) -> FastMCP:
        """The branching tools of this session (OpenEnv's MCP handler lists and calls them)."""
        if self._mcp is None:
            server = FastMCP("agentgym-branching")
            server.tool(self.snapshot_tool, name="snapshot")
            server.tool(self.restore_tool, name="restore")
            server.tool(self.release_tool, name="release")
            server.tool(self.fork_tool, name="fork")
            self._mcp = server
        return self._mcp

    async def snapshot_tool(self) -> dict[str, Any]:
        """Snapshot the session's current state: {"handle", "task_id", "turn"}. The session holds the handle until release or its end."""
        async with self._lock:
            snapshot = await self._snapshot()
            handle = self._served.handles.add(snapshot, self._current(), self._token)
            return {"handle": handle, "task_id": snapshot.task_id, "turn": snapshot.turn}

    async def restore_tool(self, handle: str) -> dict[str, Any]:
        """Put the session back into a snapshot handle's state; returns the observation there ({"observation", "reward", "done"})."""
        async with self._lock:
            return _as_result(await self._adopt(_handle_id(handle), claim=False))

    async def release_tool(self, handle: str) -> dict[str, Any]:
        """Drop this session's reference to a snapshot handle: {"released": true}."""
        self._served.handles.release(_handle_id(handle), self._token)
        return {"released": True}

    async def fork_tool(self, handle: str | None = None) -> dict[str, Any]:
        """A fork id for a handle's state (default: the current state) that a new session claims with reset(fork_from=fork_id): {"fork_id", "task_id", "turn"}."""
        async with self._lock:
            if handle is None:
                snapshot, observation = await self._snapshot(), self._current()
            else:
                snapshot, observation = self._served.handles.retain(_handle_id(handle))
            fork_id = self._served.handles.add(snapshot, observation, owner=None)
            return {"fork_id": fork_id, "task_id": snapshot.task_id, "turn": snapshot.turn}

    # ------------------------------------------------------------------ internals
    async def _ensure_env(self) -> gymnasium.Env:
        if self._closed:
            raise RuntimeError("the session is closed")
        if self._env is None:
            self._env = await asyncio.to_thread(self._served.make)
        return self._env

    def _require_env(self) -> gymnasium.Env:
        if self._env is None or self._last is None:
            raise RuntimeError("call reset first")
        return self._env

    async def _snapshot(self) -> Snapshot:
        return await self._require_env().asnapshot()  # type: ignore[attr-defined]

    def _current(self) -> AgentGymObservation:
        assert self._last is not None  # _require_env checked it
        return self._last

    async def _adopt(self, handle_id: str, *, claim: bool) -> AgentGymObservation:
        """Continue from a handle's state: restore it into this session's env, or fork it when the env is on another task."""
        handles = self._served.handles
        snapshot, observation = handles.claim(handle_id) if claim else handles.retain(handle_id)
        try:
            env = await self._ensure_env()
            current_task = getattr(env.unwrapped, "task_id", None)
            if current_task in (None, snapshot.task_id):
                await env.arestore(snapshot)  # type: ignore[attr-defined]
            else:  # restore() refuses another task's snapshot; a fork of it replaces this session's env
                child = await env.afork(snapshot)  # type: ignore[attr-defined]
                self._env = child
                await asyncio.to_thread(env.close)
        finally:
            snapshot.release()
        self._steps = snapshot.turn
        self._last = observation
        return observation

    def _observation(
        self, obs: dict[str, Any], reward: float | None, terminated: bool, truncated: bool, info: dict[str, Any]
    ) -> AgentGymObservation:
        image = obs.get("image") if isinstance(obs, dict) else None
        observation = AgentGymObservation(
            text=str(obs.get("text", "")) if isinstance(obs, dict) else str(obs),
            image=encode_image(image) if image is not None and self._served.images else None,
            info=json_safe(info),
            terminated=bool(terminated),
            truncated=bool(truncated),
            reward=None if reward is None else float(reward),
            done=bool(terminated or truncated),
        )
        self._last = observation
        return observation


def _reject_unknown(kwargs: dict[str, Any], what: str, allowed: tuple[str, ...]) -> None:
    if kwargs:
        raise ValueError(f"{what} takes no {sorted(kwargs)}; it takes {list(allowed) or 'an action only'}")


def _handle_id(handle: Any) -> str:
    if not isinstance(handle, str) or not handle:
        raise ValueError(f"a handle is a non-empty string, got {handle!r}")
    return handle


def _as_result(observation: AgentGymObservation) -> dict[str, Any]:
    """An observation as OpenEnv's result dict (what a step's answer carries)."""
    fields = observation.model_dump(exclude={"reward", "done", "metadata"})
    return {"observation": fields, "reward": observation.reward, "done": observation.done}


def create_openenv_app(
    env_id: str,
    *,
    max_sessions: int = 8,
    images: bool = True,
    fork_ttl: float = 300.0,
    idle_timeout: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
):
    """OpenEnv's FastAPI app serving ``env_id`` (see the module docstring); :class:`ValueError` for an unknown id or bad limits.

    Args:
        env_id: a registered agentgym env id (``agentgym/`` may be left out).
        max_sessions: WebSocket sessions (each with its own env) at once.
        images: whether observations carry the screenshot (base64 PNG) of envs with a screen.
        fork_ttl: seconds an unclaimed fork ticket keeps its snapshot.
        idle_timeout: seconds after which OpenEnv closes a session that sent nothing (None: never).
        env_kwargs: keyword arguments for ``gymnasium.make``.
    """
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    if fork_ttl <= 0:
        raise ValueError(f"fork_ttl must be positive, got {fork_ttl}")
    served = _Served(resolve_env_id(env_id), dict(env_kwargs or {}), images, _HandleTable(fork_ttl))
    app = create_app(
        functools.partial(AgentGymEnvironment, served),
        AgentGymAction,
        AgentGymObservation,
        env_name=served.env_id,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout),
    )
    app.state.agentgym = served
    reaper: dict[str, asyncio.Task] = {}

    async def expire_fork_tickets() -> None:
        while True:
            await asyncio.sleep(min(fork_ttl / 4, 30.0))
            await asyncio.to_thread(served.handles.expire)

    async def start() -> None:
        reaper["task"] = asyncio.create_task(expire_fork_tickets())

    async def shut_down() -> None:
        # OpenEnv closes a session when its WebSocket ends; at shutdown the server may stop before
        # that runs, so every env still open is closed here, and every handle released.
        if "task" in reaper:
            reaper["task"].cancel()
        for session in list(served.sessions):
            await asyncio.to_thread(session.close)
        served.handles.release_all()

    app.router.on_startup.append(start)
    app.router.on_shutdown.append(shut_down)
    app.add_middleware(_QuietClosedSockets)
    return app


class _QuietClosedSockets:
    """ASGI middleware: a WebSocket session that ended because its client closed it is not a server error.

    OpenEnv's ``/ws`` handler closes the socket once more after the client's ``close`` message or
    disconnect (it only expects a RuntimeError there), and the server would log each such normal
    end as an exception in the ASGI app. The session itself is cleaned up before that point.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect
        from uvicorn.protocols.utils import ClientDisconnected

        try:
            await self.app(scope, receive, send)
        except (WebSocketDisconnect, ClientDisconnected):
            pass


def check_env_builds(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Make ``env_id`` once and close it (constructors are cheap: sandboxes start at reset), so a serve fails at once, not at the first session."""
    env = gymnasium.make(env_id, **(env_kwargs or {}))
    env.close()


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 8,
    images: bool = True,
    fork_ttl: float = 300.0,
    idle_timeout: float | None = None,
    env_kwargs: dict[str, Any] | None = None,
    log_level: str = "warning",
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``env_id`` over OpenEnv until interrupted (Ctrl-C returns after a graceful shutdown; see :func:`create_openenv_app`).

    The socket is bound before the server starts, so a port in use raises :class:`OSError` here.
    ``port=0`` picks a free port; ``on_ready(port)`` is called with the bound port. Sessions make
    their envs at their first reset: :func:`check_env_builds` first tells at once whether the env
    can be made on this machine (``agentgym openenv serve`` does).
    """
    import uvicorn

    app = create_openenv_app(
        env_id,
        max_sessions=max_sessions,
        images=images,
        fork_ttl=fork_ttl,
        idle_timeout=idle_timeout,
        env_kwargs=env_kwargs,
    )
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        if on_ready is not None:
            on_ready(bound)
        print(
            f"serving {app.state.agentgym.env_id} over OpenEnv on ws://{host}:{bound}/ws (max {max_sessions} sessions)",
            file=sys.stderr,
            flush=True,
        )
        server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on"))
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown: the normal way to stop
            pass
    finally:
        sock.close()


_APP_TEMPLATE = '''"""OpenEnv server app of agentgym's {env_id} (written by `agentgym openenv init`).

Run: `python -m server.app --port 8000`, `uvicorn server.app:app`, or `openenv serve` from this directory.
"""

import argparse
import os

from agentgym.integrations.openenv.server import create_openenv_app

ENV_ID = {env_id!r}
app = create_openenv_app(
    ENV_ID,
    max_sessions=int(os.environ.get("AGENTGYM_MAX_SESSIONS", "{max_sessions}")),
    images=os.environ.get("AGENTGYM_IMAGES", "1") != "0",
)


def main(host: str = "0.0.0.0", port: int = {port}) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default={port})
    args = parser.parse_args()
    main(args.host, args.port)
'''

_README_TEMPLATE = """# {name}

agentgym's `{env_id}` as an OpenEnv environment, written by `agentgym openenv init`.

Serve it with `python -m server.app` (or `agentgym openenv serve {env_id}`) and connect with any OpenEnv
client, e.g. `agentgym.integrations.openenv.AgentGymEnvClient(base_url="http://localhost:{port}")`.
Actions are `{{"text": <the model's reply>}}` or `{{"tool_calls": [...]}}`; observations carry `text`,
`image` (base64 PNG, envs with a screen), `info`, `terminated`, `truncated`, `reward` and `done`.
`reset(task_id=...)` picks a task; the `snapshot`, `restore`, `release` and `fork` MCP tools and
`reset(fork_from=...)` branch an episode (see agentgym.integrations.openenv.protocol).

The env needs what agentgym's env needs on the serving machine (Docker for code and GUI envs, Chromium
for web envs); `AGENTGYM_MAX_SESSIONS` sets the concurrent sessions (default {max_sessions}).
"""


def write_env_dir(env_id: str, directory: str | Path, *, max_sessions: int = 8, port: int = 8000) -> list[Path]:
    """Write a deployable OpenEnv env directory for ``env_id``: ``openenv.yaml``, ``pyproject.toml``, ``server/app.py``, ``README.md``.

    The directory must not exist or be empty (:class:`FileExistsError` otherwise); :class:`ValueError`
    for an unknown env id or ``max_sessions`` below 1. Returns the files written.
    """
    from importlib.metadata import version

    env_id = resolve_env_id(env_id)
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    root = Path(directory)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root} exists and is not an empty directory")
    name = env_id.split("/", 1)[-1].replace(".", "_").replace("-", "_").lower()
    files = {
        "openenv.yaml": (
            f"spec_version: 1\nname: {name}\ntype: space\nruntime: fastapi\napp: server.app:app\nport: {port}\n"
        ),
        "pyproject.toml": (
            "[build-system]\n"
            'requires = ["setuptools>=45", "wheel"]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            "[project]\n"
            f'name = "openenv-{name.replace("_", "-")}"\n'
            'version = "0.1.0"\n'
            f"description = {json.dumps(f'agentgym {env_id} served as an OpenEnv environment')}\n"
            'requires-python = ">=3.11"\n'
            f'dependencies = ["agentgym[openenv]>={version("agentgym")}", "openenv-core>=0.3.0", "uvicorn>=0.24.0"]\n\n'
            "[project.scripts]\n"
            'server = "server.app:main"\n\n'
            "[tool.setuptools]\n"
            'packages = ["server"]\n'
        ),
        "server/__init__.py": f'"""The OpenEnv server of agentgym\'s {env_id}."""\n',
        "server/app.py": _APP_TEMPLATE.format(env_id=env_id, max_sessions=max_sessions, port=port),
        "README.md": _README_TEMPLATE.format(name=name, env_id=env_id, port=port, max_sessions=max_sessions),
    }
    written = []
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
