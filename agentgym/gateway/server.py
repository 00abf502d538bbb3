"""The gateway: an OpenAI-compatible endpoint in front of a token-mode policy that records each session's calls token-exact.

:class:`Gateway` serves what ``agentgym serve`` serves (Chat Completions with tools and
streaming, the Responses API, legacy completions: :class:`~agentgym.serve.PolicyServer`) over any
policy with a ``chat_format`` — the in-process :class:`~agentgym.rollout.hf_policy.HFPolicy`, a
trainer's learner, policy replicas (:meth:`PolicyReplicas.policy
<agentgym.distributed.replicas.PolicyReplicas.policy>`), or an upstream server that returns token ids
(:class:`~agentgym.rollout.openai_policy.OpenAIPolicy` in token mode: the gateway renders the
messages with the local tokenizer's chat template, sends the prompt ids to the upstream's
``/v1/completions`` and records the ids, logprobs and version it answers with) — on loopback, with:

* **sessions**: the API key names the session (:meth:`Gateway.open_session`); a request without a
  live session's key is refused with 401 and OpenAI's error JSON (``invalid_api_key``), so one
  program can neither read nor write another's record;
* **bounds**: per session, at most ``max_calls`` model calls (then 403) and ``max_concurrent`` in
  flight (then 429); ``n`` must be 1 (a session is one episode);
* **recording**: every call's prompt and completion ids, logprobs and policy version as a
  :class:`~agentgym.rollout.trajectory.Turn` of the session (:mod:`agentgym.gateway.session`);
* **sampling override** (``sampling``): a trainer's temperature and top-p/top-k replace the
  program's, and its ``max_tokens`` caps the program's, so the program cannot make its own
  rollouts greedy or unbounded;
* **the env's tools** as an MCP server per session at ``/mcp`` (:mod:`agentgym.gateway.mcp`).

**Token fidelity by backend.** Every backend records the ids it sampled, never text tokenized
again: a local model's ids are the sampler's own; an upstream's are the ``token_ids`` (or vLLM's
``token_id:N`` logprob tokens) it returns for the prompt ids it was sent, and a prompt echo
(``prompt_token_ids``) that differs from them fails the call. A backend without ids is refused,
not guessed: a policy without a ``chat_format`` (a chat-only endpoint) cannot be a gateway's, and an
upstream that answers without ids fails the call with a :class:`~agentgym.rollout.policy.PolicyError`,
which makes the episode the backend's failure (:func:`~agentgym.gateway.programs.run_program_episode`
raises it, so the runner retries the episode and the eval harness stops as for any policy
failure) when the program then fails, never the program's (a program that retried and finished
is a sample; ``metadata["gateway"]["backend_errors"]`` counts the failed calls).

``POST /v1/weights`` is not served: the backend's weights are the trainer's to push (in process).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from dataclasses import dataclass
from typing import Any

from agentgym.extras import requires

with requires("serve"):
    from aiohttp import web

from agentgym.actions import tool_specs_from_openai
from agentgym.gateway.session import Session, SessionLimits
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams
from agentgym.serve import PolicyServer, RequestError, assistant_reply, new_app

__all__ = ["Gateway"]

_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("agentgym_gateway_call")


@dataclass
class _Call:
    """One request in flight: its session, and (chat requests) the messages and tools it was rendered from."""

    session: Session
    messages: list[dict] | None = None
    tools: Any = None
    prompt_ids: list[int] | None = None
    rendered: str | None = None  # the messages' rendering with the generation prompt


class _Recorder(PolicyServer):
    """The policy server with each call's prompt taken from its session and each sample recorded there."""

    def __init__(self, gateway: Gateway, policy: Policy, model_name: str, sampling: SamplingParams | None):
        super().__init__(policy, model_name, getattr(policy, "context_window", None), allow_weight_updates=False)
        self.gateway = gateway
        self.sampling = sampling

    def _chat_prompt(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        try:  # rendered here rather than by super(): the session reuses the text on the next call
            rendered = self.format.render_prompt(messages, tools)
        except Exception as exc:
            raise RequestError(f"the messages cannot be rendered with the chat template: {exc}", "messages") from None
        call = _CALL.get()
        call.messages, call.tools, call.rendered = messages, tools, rendered
        call.prompt_ids = call.session.prompt_ids(self.format, messages, tools, self.format.encode(rendered))
        return call.prompt_ids

    async def _sample(self, prompt_ids: list[int], sampling, images: list[bytes]) -> list[Completion]:
        if len(sampling.params) != 1:
            raise RequestError("n must be 1 through the gateway: a session is one episode", "n")
        if self.sampling is not None:
            params = sampling.params[0]
            sampling.params[0] = dataclasses.replace(
                params,
                temperature=self.sampling.temperature,
                top_p=self.sampling.top_p,
                top_k=self.sampling.top_k,
                max_tokens=min(params.max_tokens, self.sampling.max_tokens),
            )
        call = _CALL.get()
        session = call.session
        if session.replay is not None and session.replay.serves_call():
            completion = session.replay.call(prompt_ids)  # the fork's replay: the recorded reply, not a new sample
        else:
            if session.branching and session.env is not None:
                async with self.gateway.env_lock(session):
                    session.snapshots.append(await session.env.asnapshot())
            try:
                (completion,) = await super()._sample(prompt_ids, sampling, images)
            except PolicyError as exc:  # the backend's failure, not the program's: the episode is not a sample
                session.backend_errors += 1
                session.backend_error = session.backend_error or str(exc)
                raise
        reply = None
        if call.messages is not None:
            reply = _reply_message(completion, call.tools)
        call.session.record(call.messages, call.tools, list(prompt_ids), completion, reply, call.rendered)
        return [completion]


def _reply_message(completion: Completion, tools: Any) -> dict:
    """The assistant message the caller gets back (as :func:`agentgym.serve._reply` makes it), normalised."""
    content, calls, _ = assistant_reply(completion, tool_specs_from_openai(tools) if tools else None)
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


class Gateway:
    """An OpenAI-compatible gateway on loopback that records each session (see the module docstring).

    Args:
        policy: the backend, a policy with a ``chat_format`` (token mode).
        model_name: the model name clients pass (any other is a 404, as OpenAI answers).
        limits: the default bounds of a session.
        sampling: override the programs' sampling (a trainer's settings), or None to honour theirs.
        host: where to listen (loopback by default: the programs run beside the gateway).
        port: 0 picks a free port.

    Use ``async with Gateway(policy) as gateway:`` or :meth:`start`/:meth:`aclose`; the caller owns the
    policy.
    """

    def __init__(
        self,
        policy: Policy,
        model_name: str = "policy",
        *,
        limits: SessionLimits | None = None,
        sampling: SamplingParams | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        if getattr(policy, "chat_format", None) is None:
            raise ValueError(
                f"the gateway records the token ids its backend sampled, so it needs a token-mode policy; "
                f"{type(policy).__name__} has no chat_format (an upstream endpoint: OpenAIPolicy(url, model, "
                "tokenizer=...) over a server that returns token ids, e.g. vLLM or agentgym serve; a chat-only "
                "endpoint is refused rather than re-tokenized)"
            )
        self.policy = policy
        self.model_name = model_name
        self.limits = limits or SessionLimits()
        self.host, self.port = host, port
        self.sessions: dict[str, Session] = {}
        self._server = _Recorder(self, policy, model_name, sampling)
        self._runner: web.AppRunner | None = None
        self._env_locks: dict[str, asyncio.Lock] = {}
        self._starting = asyncio.Lock()

    # -- lifecycle -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (sessions checked before any handler runs)."""
        from agentgym.gateway.mcp import add_mcp_routes

        app = new_app([self._authorize])
        self._server.add_routes(app)
        add_mcp_routes(app, self)
        return app

    async def start(self) -> Gateway:
        """Listen (once; concurrent callers wait for the first)."""
        async with self._starting:
            if self._runner is None:
                runner = web.AppRunner(self.app(), access_log=None)
                await runner.setup()
                await web.TCPSite(runner, self.host, self.port).start()
                self.port = runner.addresses[0][1]
                self._runner = runner
        return self

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Gateway:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    @property
    def base_url(self) -> str:
        """What a program passes as the OpenAI client's ``base_url``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def mcp_url(self) -> str:
        """The MCP server (streamable HTTP) of the sessions' env tools; the session key goes in ``Authorization``."""
        return f"http://{self.host}:{self.port}/mcp"

    # -- sessions ------------------------------------------------------------------------------

    def open_session(
        self,
        task_id: str | None = None,
        *,
        env: Any = None,
        env_id: str = "",
        initial_observation: str = "",
        limits: SessionLimits | None = None,
        branching: bool = False,
        replay: Any = None,
    ) -> Session:
        """A new session (its ``key`` is the program's API key); ``env``, reset to the task, serves its tools over MCP.

        ``branching`` snapshots the env at every model call, so the episode can be forked later;
        ``replay`` (a :class:`~agentgym.gateway.branching.Replay`) answers a fork's first calls from a record.
        """
        session = Session(
            task_id=task_id,
            env_id=env_id,
            env=env,
            limits=limits or self.limits,
            initial_observation=initial_observation,
            branching=branching,
            replay=replay,
        )
        self.sessions[session.key] = session
        self._env_locks[session.key] = asyncio.Lock()
        return session

    def close_session(self, session: Session) -> Session:
        """End the session: its key is refused from now on; its record stays on the object."""
        session.closed = True
        self.sessions.pop(session.key, None)
        self._env_locks.pop(session.key, None)
        return session

    def env_lock(self, session: Session) -> asyncio.Lock:
        """Serialises a session's env steps (an env is used from one thread at a time)."""
        return self._env_locks[session.key]

    def session_of(self, request: web.Request) -> Session:
        """The live session the request's key names; a 401 in OpenAI's error JSON otherwise."""
        header = request.headers.get("Authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else ""
        session = self.sessions.get(key) if key else None
        if session is None:
            raise RequestError(
                "Incorrect API key provided: it names no open session of this gateway.",
                status=401,
                code="invalid_api_key",
            )
        return session

    @web.middleware
    async def _authorize(self, request: web.Request, handler) -> web.StreamResponse:
        if request.path == "/health":
            return await handler(request)
        session = self.session_of(request)
        if request.method != "POST" or request.path in ("/mcp", "/v1/models"):
            return await handler(request)
        if request.path == "/v1/weights":
            raise RequestError("weights are pushed by the trainer, not through the gateway", status=403)
        if session.calls >= session.limits.max_calls:
            session.refused_calls += 1
            raise RequestError(
                f"this session used its {session.limits.max_calls} model calls",
                status=403,
                type="permission_error",
                code="session_call_limit",
            )
        if session.in_flight >= session.limits.max_concurrent:
            session.refused_calls += 1
            raise RequestError(
                f"this session has {session.in_flight} model calls in flight (at most {session.limits.max_concurrent})",
                status=429,
                type="rate_limit_error",
                code="session_concurrency_limit",
            )
        session.calls += 1
        session.in_flight += 1
        token = _CALL.set(_Call(session))
        try:
            return await handler(request)
        finally:
            _CALL.reset(token)
            session.in_flight -= 1
