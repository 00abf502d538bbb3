"""The wire format of agentgym envs served over OpenEnv: action, observation and state models, images as base64 PNG, the branching extension, and a client that speaks it.

Both ends import this module: the server (:mod:`agentgym.integrations.openenv.server`) and the
clients (:class:`AgentGymEnvClient` here, and :mod:`agentgym.integrations.openenv.client_env`).

**Actions** (:class:`AgentGymAction`): ``{"text": "<the model's reply>"}``, or
``{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}`` (OpenAI's
``{"function": {"name", "arguments"}}`` form works too). Text is parsed by the env as any model
reply is (:func:`agentgym.actions.parse_action`); tool calls go to the env already structured.

**Observations** (:class:`AgentGymObservation`): ``text``; ``image``, the screenshot of envs with
a screen as a base64 PNG (``None`` without one, or when the server was started with images
off); ``info``, the step's info dict made JSON-safe (``task_id``, ``turn``, ``success``,
``error``, ``tools``, ``grade``, ...); ``terminated`` and ``truncated``. OpenEnv's own ``reward``
and ``done`` (``terminated or truncated``) travel beside them as in every OpenEnv result.

**Reset keywords**: ``task_id`` (a task of the env; a seeded draw when left out), ``seed``,
``episode_id`` (OpenEnv's), and ``fork_from`` (below).

**Branching extension.** An agentgym session also serves four MCP tools, reached through
OpenEnv's own ``{"type": "mcp"}`` WebSocket message (JSON-RPC ``tools/call``; ``tools/list``
lists them). A plain OpenEnv client never sends such a message and sees an ordinary env.

* ``snapshot()`` → ``{"handle", "task_id", "turn"}``: the session's current state. The session
  holds the handle's one reference until ``release`` or until the session ends.
* ``restore(handle)`` → ``{"observation", "reward", "done"}`` (an OpenEnv result): this session
  goes back to the handle's state; the handle stays valid.
* ``release(handle)`` → ``{"released": true}``: drops this session's reference.
* ``fork(handle=None)`` → ``{"fork_id", "task_id", "turn"}``: a ticket for the handle's state
  (default: the current state) that outlives this session. A new session (another WebSocket
  connection, e.g. another :class:`AgentGymEnvClient`) claims it with ``reset(fork_from=fork_id)``
  and continues from that state, indistinguishable from replaying the same actions. A ticket is
  claimed once; one that nobody claims is released after the server's ``fork_ttl`` seconds.
  ``reset(fork_from=handle)`` forks a live snapshot handle (of any session) in the same way,
  leaving the handle to its owner.

Handles and fork ids are unguessable random ids, valid on the server that made them.
"""

from __future__ import annotations

import base64
import io
import itertools
from typing import Any

import numpy as np

from agentgym.extras import requires

with requires("openenv"):
    from openenv.core import EnvClient
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import Field

__all__ = [
    "BRANCHING_TOOLS",
    "FORK_FROM",
    "FORK_TOOL",
    "RELEASE_TOOL",
    "RESTORE_TOOL",
    "SNAPSHOT_TOOL",
    "AgentGymAction",
    "AgentGymEnvClient",
    "AgentGymObservation",
    "AgentGymState",
    "BranchingError",
    "decode_image",
    "encode_image",
]

#: MCP tool names of the branching extension (see the module docstring).
SNAPSHOT_TOOL = "snapshot"
RESTORE_TOOL = "restore"
RELEASE_TOOL = "release"
FORK_TOOL = "fork"
BRANCHING_TOOLS = (SNAPSHOT_TOOL, RESTORE_TOOL, RELEASE_TOOL, FORK_TOOL)
#: The reset keyword that starts a session from a fork id or a snapshot handle.
FORK_FROM = "fork_from"


class AgentGymAction(Action):
    """One model reply: its ``text``, or its ``tool_calls`` (structured; then ``text`` is ignored)."""

    text: str = Field(default="", description="the model's reply, parsed by the env for tool calls")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description='structured tool calls: [{"name": ..., "arguments": {...}}] (or OpenAI\'s "function" form)',
    )

    def env_action(self) -> Any:
        """What :meth:`agentgym.core.AgentEnv.step` takes for this action: the calls when there are any, else the text."""
        return {"tool_calls": self.tool_calls} if self.tool_calls else self.text


class AgentGymObservation(Observation):
    """An agentgym observation and step outcome (``reward`` and ``done`` are OpenEnv's own fields)."""

    text: str = Field(default="", description="the observation's text")
    image: str | None = Field(default=None, description="the screenshot as a base64 PNG (envs with a screen)")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info, JSON-safe")
    terminated: bool = Field(default=False, description="the task ended (success or failure)")
    truncated: bool = Field(default=False, description="the episode was cut (turn limit, env failure)")

    def __getitem__(self, field: str) -> Any:
        """``observation["text"]`` as well as ``observation.text``: code written for OpenEnv's plain client (whose
        observations are dicts) reads this client's observations unchanged."""
        if field not in type(self).model_fields:
            raise KeyError(field)
        return getattr(self, field)

    def image_array(self) -> np.ndarray | None:
        """The screenshot as an H×W×3 uint8 array, or None."""
        return decode_image(self.image) if self.image else None


class AgentGymState(State):
    """A session's state: OpenEnv's ``episode_id`` and ``step_count``, plus the env and episode it is on."""

    env_id: str = Field(default="", description="the registered agentgym env id")
    task_id: str | None = Field(default=None, description="the episode's task")
    turn: int = Field(default=0, description="turns taken in the episode")
    handles: list[str] = Field(default_factory=list, description="snapshot handles this session holds")


class BranchingError(RuntimeError):
    """A branching request failed on the server (unknown or released handle, no episode, an env that cannot snapshot)."""


def encode_image(image: np.ndarray) -> str:
    """An H×W×3 uint8 array as a base64 PNG string."""
    from agentgym.wrappers import encode_png

    return base64.b64encode(encode_png(np.asarray(image))).decode("ascii")


def decode_image(data: str) -> np.ndarray:
    """A base64 PNG string as an H×W×3 uint8 array."""
    with requires("web"):
        from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


class AgentGymEnvClient(EnvClient[AgentGymAction, AgentGymObservation, AgentGymState]):
    """OpenEnv's :class:`EnvClient` for an agentgym server, with the branching extension as methods.

    ``step`` takes an :class:`AgentGymAction`, a string (the reply's text) or a dict (the action's
    fields). ``reset(task_id=..., seed=..., fork_from=...)`` as in the module docstring.
    """

    _request_ids = itertools.count(1)

    def _step_payload(self, action: AgentGymAction | str | dict) -> dict[str, Any]:
        if isinstance(action, str):
            parsed = AgentGymAction(text=action)
        elif isinstance(action, dict):
            parsed = AgentGymAction.model_validate(action)
        else:
            parsed = action
        return parsed.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentGymObservation]:
        fields = dict(payload.get("observation") or {})
        observation = AgentGymObservation(**fields, reward=payload.get("reward"), done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=bool(payload.get("done")))

    def _parse_state(self, payload: dict[str, Any]) -> AgentGymState:
        return AgentGymState.model_validate(payload)

    async def call_tool(self, name: str, **arguments: Any) -> Any:
        """Call one MCP tool of the session (``{"type": "mcp"}``, JSON-RPC ``tools/call``); its result, or :class:`BranchingError`."""
        request = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
            "id": next(self._request_ids),
        }
        response = (await self._send_and_receive({"type": "mcp", "data": request})).get("data", {})
        if response.get("error"):
            raise BranchingError(f"{name}: {response['error'].get('message', response['error'])}")
        return response.get("result")

    async def list_tools(self) -> list[dict[str, Any]]:
        """The session's MCP tools (the branching extension's), as JSON-RPC ``tools/list`` gives them."""
        request = {"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": next(self._request_ids)}
        response = (await self._send_and_receive({"type": "mcp", "data": request})).get("data", {})
        if response.get("error"):
            raise BranchingError(f"tools/list: {response['error'].get('message', response['error'])}")
        return list(response.get("result", {}).get("tools", []))

    async def snapshot(self) -> str:
        """A handle to the session's current state (held by the session until :meth:`release` or its end)."""
        return (await self.call_tool(SNAPSHOT_TOOL))["handle"]

    async def restore(self, handle: str) -> StepResult[AgentGymObservation]:
        """Put the session back into ``handle``'s state; the observation there."""
        return self._parse_result(await self.call_tool(RESTORE_TOOL, handle=handle))

    async def release(self, handle: str) -> None:
        """Drop the session's reference to ``handle``."""
        await self.call_tool(RELEASE_TOOL, handle=handle)

    async def fork(self, handle: str | None = None) -> str:
        """A fork id for ``handle``'s state (default: now), for another session's ``reset(fork_from=...)``."""
        arguments = {} if handle is None else {"handle": handle}
        return (await self.call_tool(FORK_TOOL, **arguments))["fork_id"]
