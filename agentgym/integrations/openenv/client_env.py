"""Any OpenEnv server as an agentgym env: ``gymnasium.make("agentgym/OpenEnv-v0", url=...)``, or ``image=...`` to start one.

:class:`OpenEnvEnv` drives one session of an OpenEnv server through OpenEnv's own client
(``EnvClient`` over the server's ``/ws`` WebSocket: one connection per env, so one server-side
environment per agentgym env; OpenEnv's HTTP ``/reset`` and ``/step`` make a fresh environment
per request and cannot hold an episode).

**Actions.** The server's ``/schema`` says what an action is. An action with one text field (the
usual ``message`` / ``code`` / ``command`` envs) takes the model's whole reply as that field;
any other action is offered to the model as one tool whose parameters are the action's schema,
so a tool call's arguments become the action. ``action_field=`` picks the text field by hand.
An action the server rejects (its schema validation) is the model's error: ``info["error"]``
and an observation that says what was wrong, as in every agentgym env.

**Observations.** The text is ``observation_field`` when given, else the one field of the
server's observation, else every field as ``name: value`` lines; ``done`` is ``terminated``, a
``None`` reward is 0, the server's ``metadata`` is ``info["openenv_metadata"]``. A step that
ends the episode succeeds when the metadata says ``success``, else when its reward reaches
``success_reward``. ``reset(options={"task_id": ..., **more})`` sends the task id and the other
options as the server's reset keywords, with a concrete seed (the one given, else one drawn
from the env's seeded RNG), so that an episode can be replayed.

**Branching.** When the server speaks agentgym's branching extension
(:mod:`agentgym.integrations.openenv.protocol`), snapshots are the server's own. Otherwise the
env keeps its episode's log (the reset keywords and every action sent) and a snapshot is that
log: restoring it, or forking, resets a session with the same keywords and replays the actions.
Each replayed result is checked against the one recorded, so a server that does not replay
deterministically raises :class:`~agentgym.snapshot.SnapshotError` instead of giving a fork that
differs from its parent.

**Images.** ``image=`` (instead of ``url=``) starts the server from a local Docker image in a
container without a network and reaches it through a port forward
(:mod:`agentgym.integrations.openenv.container`: the image needs ``python3``; it is never pulled).
``port``, ``command``, ``environment`` and ``volumes`` (read-only mounts) configure the container,
for images that need files from the host; envs of one process with the same image and options
share its container (forks included; ``share_container=False`` for one container per env), and the
last one's close removes it.

**Failures.** Connecting and every message have timeouts (``connect_timeout``,
``message_timeout``). A server that is down raises :class:`OpenEnvError` from ``reset``; one that
dies, hangs or answers with something that is not an OpenEnv result during a step ends the
episode as truncated with ``info["env_error"]`` (the contract's env failure), never a hang.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast, final

import numpy as np
from gymnasium import spaces

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, tool_specs_from_openai
from agentgym.core import AgentEnv, Observation, Outcome
from agentgym.extras import requires
from agentgym.integrations.openenv.protocol import (
    BRANCHING_TOOLS,
    FORK_FROM,
    RESTORE_TOOL,
    AgentGymEnvClient,
    BranchingError,
    decode_image,
)
from agentgym.snapshot import SnapshotError

with requires("openenv"):
    from websockets.exceptions import ConnectionClosed

__all__ = ["DEFAULT_TASK", "OpenEnvEnv", "OpenEnvError", "OpenEnvServerError"]

#: The task id of a server that names no tasks: reset sends no ``task_id``.
DEFAULT_TASK = "default"
#: Fields every OpenEnv action and observation carry that are not the env's own (OpenEnv's base classes).
_BASE_FIELDS = frozenset({"metadata"})
# Error codes after which the server has closed the session (it refused or lost it).
_SESSION_ERRORS = frozenset({"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"})
# Info keys an agentgym server sends that this env keeps itself (its own episode bookkeeping).
_OWN_INFO = frozenset({"task_id", "turn", "success", "error", "tools"})
# OpenEnv's ResetRequest takes seeds in [0, 2**31) (ge=0); drawn seeds stay in that range.
_SEED_BOUND = 2**31


class OpenEnvError(RuntimeError):
    """The OpenEnv server cannot be used: it is down, hung, closed the session, or answered with something malformed."""


class OpenEnvServerError(OpenEnvError):
    """An error frame from the server, with its OpenEnv error code (e.g. ``VALIDATION_ERROR``)."""

    def __init__(self, code: str, message: str, details: Any = None):
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.details = details


# Seconds a dropped session waits for the server's side of the WebSocket closing handshake.
_DROP_CLOSE_TIMEOUT = 0.5


class _Client(AgentGymEnvClient):
    """OpenEnv's client with the branching extension's calls, plus raw requests that raise :class:`OpenEnvServerError` on an error frame.

    EnvClient's own ``_send_and_receive`` turns an error frame into a bare RuntimeError; its
    code is what tells a rejected action (the model's fault) from a broken server. Reset and
    step go through :meth:`request` with the server's own action dicts, so any OpenEnv server's
    results come back as they are (AgentGymEnvClient's typed parsing is for agentgym servers).
    """

    async def request(self, message: dict) -> dict:
        try:
            await self._send(message)
        except ConnectionClosed:
            pass  # a refused session (the server at capacity) sends an error frame, then closes: read it below
        response = await self._receive()
        if not isinstance(response, dict):
            raise OpenEnvError(f"the server answered {message.get('type')!r} with a {type(response).__name__}")
        if response.get("type") == "error":
            data = response.get("data") if isinstance(response.get("data"), dict) else {}
            raise OpenEnvServerError(str(data.get("code", "UNKNOWN")), str(data.get("message", "")), data.get("errors"))
        return response


@dataclass
class _EpisodeLog:
    """How this session reached its state: the reset keywords, the actions sent, and a digest of each result.

    It is the snapshot payload of a server without branching (and rides along with a remote
    snapshot's id for one with it).
    """

    reset_kwargs: dict
    reset_digest: str
    actions: list[dict] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    remote: tuple[str, str] | None = None  # (session token, the server's snapshot handle): branching extension

    def copy(self) -> _EpisodeLog:
        return _EpisodeLog(
            json.loads(json.dumps(self.reset_kwargs)),
            self.reset_digest,
            [json.loads(json.dumps(a)) for a in self.actions],
            list(self.digests),
            self.remote,
        )


class OpenEnvEnv(AgentEnv):
    """An OpenEnv server, reached at its URL, as an agentgym env (see the module docstring).

    Args:
        url: the server's base URL (``http://host:port``; ``ws://`` works too).
        image: instead of ``url``, a local Docker image that runs an OpenEnv server on ``port`` (see the
            module docstring); ``command`` replaces its command, ``environment`` adds variables,
            ``volumes`` maps host paths to container paths (mounted read-only), ``start_timeout`` bounds
            the wait until the server listens; ``share_container=False`` gives this env (and each of its
            forks) a container of its own, for servers that hold one session at a time.
        tasks: the task ids to offer (sent as ``task_id`` at reset); default: one task,
            :data:`DEFAULT_TASK`, for which reset sends no task id (the server picks).
        action_field: the action field that takes the model's text (default: from ``/schema``).
        observation_field: the observation field that is the text (default: see the module docstring).
        image_field: the observation field holding an H×W×3 image (a nested list, or a base64
            PNG; default ``"image"``); images need ``image_shape=(height, width)``.
        success_reward: the reward at or above which a finished episode counts as a success
            when the server does not say.
        connect_timeout: seconds to wait for the connection.
        message_timeout: seconds to wait for each answer.
        branching: ``"auto"`` (the server's snapshots if it has them), ``"replay"`` (always replay).
    """

    kind = "openenv.remote"

    def __init__(
        self,
        url: str | None = None,
        *,
        image: str | None = None,
        port: int | None = None,
        command: str | Sequence[str] | None = None,
        environment: Mapping[str, str] | None = None,
        volumes: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
        share_container: bool = True,
        tasks: Sequence[str] | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        image_field: str = "image",
        image_shape: tuple[int, int] | None = None,
        success_reward: float = 1.0,
        connect_timeout: float = 10.0,
        message_timeout: float = 60.0,
        branching: str = "auto",
        max_turns: int = 30,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, render_mode=render_mode, image_shape=image_shape)
        self._server: Any = None  # the OpenEnvContainer that image= started (shared, released at close)
        if url is not None and image is not None:
            raise ValueError("OpenEnvEnv takes url= (a running server) or image= (an image to start one), not both")
        if image is None and (not isinstance(url, str) or not url):
            raise ValueError(
                "OpenEnvEnv needs url=, the base URL of a running OpenEnv server, "
                f"or image=, a local Docker image that runs one; got url={url!r}"
            )
        if image is None and any(option is not None for option in (port, command, environment, volumes)):
            raise ValueError(
                "port=, command=, environment= and volumes= configure the container of image=; url= has none"
            )
        if branching not in ("auto", "replay"):
            raise ValueError(f"branching must be 'auto' or 'replay', got {branching!r}")
        if image is not None:
            from agentgym.integrations.openenv import container  # needs the Docker SDK: only for image=

            spec = container.ServerSpec.of(image, port=port, command=command, environment=environment, volumes=volumes)
            self._server = container.acquire(spec, timeout=start_timeout, shared=share_container)
            url = self._server.url
        assert url is not None
        self.base_url = url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.message_timeout = message_timeout
        self.branching = branching
        self.observation_field = observation_field
        self.image_field = image_field
        self.success_reward = success_reward
        self._task_list = list(tasks) if tasks is not None else [DEFAULT_TASK]
        self._action_field = action_field
        self._schema: dict | None = None
        self._tools: list[ToolSpec] | None = None
        self._server_tools: list[ToolSpec] | None = None  # the tools a server names in its info (agentgym servers)
        self._client: Any = None  # openenv's SyncEnvClient over _Client, made at the first reset
        self._session = ""  # a token for the current session (snapshot handles belong to one session)
        self._remote_branching: bool | None = None
        self._log: _EpisodeLog | None = None
        self._seed: int | None = None
        self._reset_options: dict = {}
        #: How the last restore or fork reached its state: ``"server"`` (the branching extension) or ``"replay"``.
        self.last_restore: str | None = None

    # ------------------------------------------------------------------ the server
    def _get_json(self, path: str) -> Any:
        request = urllib.request.Request(self.base_url + path, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.connect_timeout) as response:
                body = response.read(16 * 1024 * 1024)
        except urllib.error.HTTPError as exc:
            raise OpenEnvError(f"GET {self.base_url}{path}: HTTP {exc.code} {exc.reason}") from exc
        except (OSError, urllib.error.URLError) as exc:
            raise OpenEnvError(
                f"the OpenEnv server at {self.base_url} is not reachable: {exc}{self._server_failure()}"
            ) from exc
        try:
            return json.loads(body)
        except ValueError as exc:
            raise OpenEnvError(f"GET {self.base_url}{path} did not return JSON: {body[:100]!r}") from exc

    def schema(self) -> dict:
        """The server's ``/schema`` (its action, observation and state JSON schemas), fetched once."""
        if self._schema is None:
            schema = self._get_json("/schema")
            if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict):
                raise OpenEnvError(f"{self.base_url}/schema is not an OpenEnv schema (no action schema)")
            self._schema = schema
        return self._schema

    def _connect(self) -> Any:
        if self._client is None:
            client = _Client(
                base_url=self.base_url,
                connect_timeout_s=self.connect_timeout,
                message_timeout_s=self.message_timeout,
            ).sync()
            try:
                client.connect()
            except Exception as exc:
                client.close()
                raise OpenEnvError(
                    f"cannot open a session on the OpenEnv server at {self.base_url}: {exc}{self._server_failure()}"
                ) from exc
            self._client, self._session = client, uuid.uuid4().hex
        return self._client

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``_Client.<method>(...)`` on this env's session; transport failures become :class:`OpenEnvError` and drop the session."""
        client = self._connect()
        try:
            return client._run(getattr(client.async_client, method)(*args, **kwargs))
        except OpenEnvServerError as exc:
            if exc.code in _SESSION_ERRORS:
                self._drop_session()
            raise
        except BranchingError:
            raise
        except TimeoutError as exc:
            self._drop_session(hung=True)
            raise OpenEnvError(
                f"the OpenEnv server at {self.base_url} did not answer {what!r} within {self.message_timeout:g} s"
            ) from exc
        except Exception as exc:  # a closed socket, a refused reconnect, a frame that is not JSON
            self._drop_session()
            raise OpenEnvError(
                f"the OpenEnv session at {self.base_url} failed during {what!r}: {type(exc).__name__}: {exc}"
                + self._server_failure()
            ) from exc

    def _request(self, message: dict) -> dict:
        return self._call(message["type"], "request", message)

    def _server_failure(self) -> str:
        """For image=: why the server's container is gone (appended to a connection error), else nothing."""
        failure = self._server.failure() if self._server is not None else None
        return f" ({failure})" if failure else ""

    def _drop_session(self, hung: bool = False) -> None:
        # The server-side env of a broken session is gone (or out of step); the next reset opens a new session.
        client, self._client, self._session = self._client, None, ""
        if client is not None:
            socket = client.async_client._ws
            if hung and socket is not None:
                # A server stuck in a step reads no closing handshake: do not wait the 10 s default for it
                # (a server that answers gets the whole handshake, however loaded it is).
                socket.close_timeout = _DROP_CLOSE_TIMEOUT
            try:
                client.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ actions
    def _action_schema(self) -> dict:
        return self.schema()["action"]

    def _action_properties(self) -> dict[str, dict]:
        properties = self._action_schema().get("properties") or {}
        return {name: spec for name, spec in properties.items() if name not in _BASE_FIELDS}

    @property
    def action_field(self) -> str | None:
        """The action field that takes the model's text, or None when actions are tool calls (see the module docstring)."""
        if self._action_field is None:
            properties = self._action_properties()
            required = set(self._action_schema().get("required") or [])
            text_fields = [  # free text: a string that is not one of a few fixed values
                name
                for name, spec in properties.items()
                if spec.get("type") == "string" and "enum" not in spec and "const" not in spec
            ]
            self._action_field = text_fields[0] if len(text_fields) == 1 and required <= set(text_fields) else ""
        elif self._action_field and self._action_field not in self._action_properties():
            raise ValueError(
                f"action_field={self._action_field!r} is not a field of the server's action "
                f"(fields: {sorted(self._action_properties())})"
            )
        return self._action_field or None

    @property
    def allow_text_replies(self) -> bool:  # type: ignore[override]
        return self.action_field is not None

    def tools(self) -> list[ToolSpec]:
        if self.action_field is not None:
            return list(self._server_tools or [])  # the server parses the text; its info may say for which tools
        if self._tools is None:
            schema = self._action_schema()
            parameters: dict[str, Any] = {
                "type": "object",
                "properties": self._action_properties(),
                "required": [name for name in schema.get("required") or [] if name not in _BASE_FIELDS],
            }
            if "$defs" in schema:
                parameters["$defs"] = schema["$defs"]
            title = str(schema.get("title") or "act")
            name = re.sub(r"(?<!^)(?=[A-Z])", "_", title.removesuffix("Action") or "act").lower()
            description = str(schema.get("description") or f"Send one {title} to the environment.")
            self._tools = [ToolSpec(re.sub(r"[^a-z0-9_]", "_", name), description, parameters)]
        return self._tools

    def parse(self, action: Any) -> ParsedAction:
        if self.action_field is None:
            return super().parse(action)
        # The whole reply is the text field: the server parses it (a tool-call tag in it is for the server).
        if isinstance(action, bytes | bytearray):
            action = action.decode("utf-8", errors="replace")
        if not isinstance(action, str):
            return ParsedAction([], "", f"this env takes text actions, got a {type(action).__name__}")
        return ParsedAction([], action)

    def _act(self, parsed: ParsedAction) -> Outcome:
        if self.action_field is not None and parsed.error:
            return Outcome(f"Error: {parsed.error}", error=parsed.error)
        return super()._act(parsed)

    def _reply_without_calls(self, text: str) -> Outcome:
        assert self.action_field is not None
        return self._send_action({self.action_field: text})

    def _call_tool(self, call: ToolCall) -> Outcome:
        return self._send_action(dict(call.arguments))

    def _send_action(self, action: dict) -> Outcome:
        log = self._log
        assert log is not None
        try:
            response = self._request({"type": "step", "data": action})
        except OpenEnvServerError as exc:
            if exc.code == "VALIDATION_ERROR":  # the action does not fit the server's schema: the model's error
                problem = _validation_problem(exc)
                return Outcome(f"Error: the environment rejected the action: {problem}", error=problem)
            raise OpenEnvError(f"the OpenEnv server failed to step: {exc}") from exc
        result = _result(response, "step")
        log.actions.append(json.loads(json.dumps(action)))
        log.digests.append(_digest(result))
        return self._outcome(result)

    def _outcome(self, result: dict) -> Outcome:
        fields, metadata = result["observation"], result["metadata"]
        server_info = fields.get("info") if isinstance(fields.get("info"), dict) else {}
        reward = float(result["reward"] or 0.0)
        truncated = fields.get("truncated") is True and fields.get("terminated") is not True
        terminated = bool(result["done"]) and not truncated
        if truncated and self._episode is not None:
            self._episode.truncated = True  # the server cut the episode (its own turn limit): not a finished task
        success = None
        if terminated:
            stated = server_info.get("success", metadata.get("success"))
            success = stated if isinstance(stated, bool) else reward >= self.success_reward
        error = server_info.get("error") if isinstance(server_info.get("error"), str) else None
        info = {key: value for key, value in server_info.items() if key not in _OWN_INFO}
        observation = self._observation(fields)
        return Outcome(
            observation["text"],
            reward=reward,
            terminated=terminated,
            success=success,
            error=error,
            image=observation.get("image"),
            info={**info, "openenv_metadata": metadata},
        )

    # ------------------------------------------------------------------ observations
    def _observation(self, fields: dict) -> Observation:
        if isinstance(fields.get("info"), dict) and isinstance(fields["info"].get("tools"), list):
            try:
                self._server_tools = tool_specs_from_openai(fields["info"]["tools"])
            except Exception as exc:
                raise OpenEnvError(
                    f"the server's info names tools that are not OpenAI function schemas: {exc}"
                ) from exc
        shown = {name: value for name, value in fields.items() if name not in _BASE_FIELDS and name != self.image_field}
        field_name = self.observation_field or ("text" if isinstance(fields.get("text"), str) else None)
        if field_name is not None:
            if field_name not in fields:
                raise OpenEnvError(f"the server's observation has no field {field_name!r} (fields: {sorted(fields)})")
            text = _as_text(fields[field_name])
        elif len(shown) == 1:
            text = _as_text(next(iter(shown.values())))
        else:
            text = "\n".join(f"{name}: {_as_text(value)}" for name, value in shown.items())
        observation: Observation = {"text": text}
        if "image" in cast(spaces.Dict, self.observation_space).spaces and fields.get(self.image_field) is not None:
            observation["image"] = self._image(fields[self.image_field])
        return observation

    def _image(self, value: Any) -> np.ndarray:
        space = cast(spaces.Dict, self.observation_space)["image"]
        try:
            array = decode_image(value) if isinstance(value, str) else np.asarray(value, dtype=np.uint8)
        except Exception as exc:
            raise OpenEnvError(f"observation field {self.image_field!r} is not an image: {exc}") from exc
        if array.shape != space.shape:
            raise OpenEnvError(
                f"observation field {self.image_field!r} has shape {array.shape}, expected {space.shape}"
            )
        return array

    # ------------------------------------------------------------------ tasks and episodes
    def task_ids(self) -> Sequence[str]:
        return self._task_list

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Observation, dict]:
        super(AgentEnv, self).reset(seed=seed)  # seeds np_random, which draws the server's seed below
        self._seed = seed if seed is not None else int(self.np_random.integers(_SEED_BOUND))
        self._reset_options = {key: value for key, value in (options or {}).items() if key != "task_id"}
        return super().reset(seed=seed, options=options)

    def _setup(self, task_id: str) -> Observation:
        self.schema()  # fail here, clearly, for a server that is not an OpenEnv server
        kwargs = {**self._reset_options, "seed": self._seed}
        if task_id != DEFAULT_TASK:
            kwargs["task_id"] = task_id
        self._log = None
        result = self._reset(kwargs)
        self._log = _EpisodeLog(json.loads(json.dumps(kwargs)), _digest(result))
        return self._observation(result["observation"])

    def _reset(self, kwargs: dict) -> dict:
        try:
            return _result(self._request({"type": "reset", "data": kwargs}), "reset")
        except OpenEnvServerError as exc:
            raise OpenEnvError(f"the OpenEnv server failed to reset: {exc}") from exc

    # ------------------------------------------------------------------ branching
    def _branches_remotely(self) -> bool:
        """Whether the server speaks agentgym's branching extension (asked once, on this env's session)."""
        if self._remote_branching is None:
            if self.branching == "replay":
                self._remote_branching = False
            else:
                try:
                    names = {tool.get("name") for tool in self._call("tools/list", "list_tools")}
                except (BranchingError, RuntimeError) as exc:  # a plain OpenEnv server has no such tools
                    if isinstance(exc, OpenEnvError) and self._client is None:
                        raise  # the session broke: that is no answer
                    names = set()
                self._remote_branching = set(BRANCHING_TOOLS) <= names
        return self._remote_branching

    @final
    def _backend_capture(self) -> tuple[_EpisodeLog, Any]:
        assert self._log is not None
        log = self._log.copy()
        if not self._branches_remotely():
            return log, None
        handle = self._call("snapshot", "snapshot")
        log.remote = (self._session, handle)
        return log, functools.partial(_release_handle, weakref.ref(self), self._session, handle)

    @final
    def _backend_load(self, payload: _EpisodeLog) -> None:
        self._log = None
        if payload.remote is not None and self._branches_remotely():
            session, handle = payload.remote
            try:
                if session == self._session:
                    self._call("restore", "call_tool", RESTORE_TOOL, handle=handle)
                else:  # another env's handle: this session starts from it (the server forks it)
                    _result(self._request({"type": "reset", "data": {FORK_FROM: handle}}), "reset")
            except (BranchingError, OpenEnvServerError):
                pass  # the handle is gone (its session ended): replay instead
            else:
                self._log = payload.copy()
                self._log.remote = None
                self.last_restore = "server"
                return
        self._replay(payload)
        self.last_restore = "replay"

    def _replay(self, payload: _EpisodeLog) -> None:
        if _digest(self._reset(payload.reset_kwargs)) != payload.reset_digest:
            raise SnapshotError(
                "replaying the episode on the OpenEnv server diverged at reset: the server does not reset "
                "deterministically for the same keywords and seed, so it cannot be forked by replay"
            )
        for index, (action, digest) in enumerate(zip(payload.actions, payload.digests, strict=True), start=1):
            if _digest(_result(self._request({"type": "step", "data": action}), "step")) != digest:
                raise SnapshotError(
                    f"replaying the episode on the OpenEnv server diverged at action {index} of "
                    f"{len(payload.actions)}: the server does not step deterministically, so it cannot be forked by replay"
                )
        self._log = payload.copy()
        self._log.remote = None

    @final
    def _backend_close(self) -> None:
        self._drop_session()
        server, self._server = self._server, None
        if server is not None:
            server.release()


def _release_handle(env_ref: weakref.ref, session: str, handle: str) -> None:
    """Release a remote snapshot handle, if its session is still this env's (the server drops a session's handles with it)."""
    env = env_ref()
    if env is None or env._session != session or env._client is None:
        return
    try:
        env._call("release", "release", handle)
    except Exception:
        pass  # best effort: the server releases the handle when the session ends


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _result(response: dict, what: str) -> dict:
    """An OpenEnv result (observation, reward, done, metadata) from a response frame, checked; OpenEnvError if malformed."""
    data = response.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("observation"), dict):
        raise OpenEnvError(f"the server's answer to {what!r} is not an OpenEnv result: {str(response)[:200]}")
    reward, done = data.get("reward"), data.get("done", False)
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not np.isfinite(reward)
    ):
        raise OpenEnvError(f"the server's answer to {what!r} has a reward that is not a finite number: {reward!r}")
    if not isinstance(done, bool):
        raise OpenEnvError(f"the server's answer to {what!r} has a done that is not a boolean: {done!r}")
    metadata = data.get("metadata") or data["observation"].get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise OpenEnvError(f"the server's answer to {what!r} has metadata that is not an object: {metadata!r:.100}")
    return {"observation": data["observation"], "reward": reward, "done": done, "metadata": dict(metadata)}


def _digest(result: dict) -> str:
    """What a replay must reproduce: the observation (less its metadata), reward and done."""
    observation = {k: v for k, v in result["observation"].items() if k not in _BASE_FIELDS}
    canonical = json.dumps([observation, result["reward"], result["done"]], sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validation_problem(error: OpenEnvServerError) -> str:
    if isinstance(error.details, list) and error.details:
        parts = []
        for item in error.details[:5]:
            if isinstance(item, dict):
                location = ".".join(str(part) for part in item.get("loc", ()))
                parts.append(f"{location}: {item.get('msg', '')}" if location else str(item.get("msg", "")))
        if parts:
            return "; ".join(parts)
    return str(error)
