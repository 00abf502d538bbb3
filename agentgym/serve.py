"""An OpenAI-compatible HTTP server over any token-mode :class:`~agentgym.rollout.policy.Policy` (``agentgym serve``).

:func:`make_app` wraps a policy that has a :attr:`~agentgym.rollout.policy.Policy.chat_format`
in an aiohttp application; :func:`serve` runs one over an
:class:`~agentgym.rollout.hf_policy.HFPolicy` for a local checkpoint. Endpoints:

* ``GET /v1/models``, ``GET /health``;
* ``POST /v1/weights`` (only with ``allow_weight_updates``, ``agentgym serve --allow-weight-updates``)
  — load new weights into the policy (:meth:`HFPolicy.update_weights
  <agentgym.rollout.hf_policy.HFPolicy.update_weights>`): a JSON body ``{"path": ..., "version": N}``
  names a checkpoint directory (its ``*.safetensors`` files, else whatever ``from_pretrained``
  reads) or one safetensors file on the server's host; a body of ``Content-Type:
  application/octet-stream`` is the safetensors bytes themselves, with ``?version=N``. The answer
  is ``{"version": N}`` (without a version, the policy's own bump). The weights must fit the
  served model's architecture (every tensor's name and shape), else nothing is loaded and the
  answer is a 400 (for a path, one message whatever the reason, so that it tells nothing of the host's
  files; the reason goes to the server's log). Requests being decoded finish on the old weights; the rest get the new ones.
  The endpoint lets any client that reaches the server replace the model (and name files on its
  host to read), so it is off unless asked for; keep such a server on a trusted network;
* ``POST /v1/chat/completions`` — messages are rendered with the policy's chat template. Content
  is text, or OpenAI content parts: ``text``, and for a vision-language model (a policy with
  ``accepts_images``, e.g. :class:`~agentgym.rollout.hf_policy.HFPolicy` on a Qwen2-VL checkpoint)
  ``image_url`` parts in user and tool messages whose URL is a base64 ``data:image/...`` URL
  (nothing is fetched); a text-only model answers an image with a 400 saying it takes no images.
  With ``return_token_ids`` the prompt's ids hold each image's run of image tokens; Hermes ``<tool_call>`` blocks in the reply become ``message.tool_calls`` unless
  ``tool_choice`` is ``"none"`` (``"required"`` or a named function is accepted but not
  enforced: there is no constrained decoding). ``stream``, ``n`` (sample ``i`` gets ``seed + i``),
  ``seed``, ``logprobs``/``top_logprobs``, ``stop``, ``top_k`` (an extension) and vLLM's
  ``return_token_ids`` are honoured; without ``max_tokens`` the rest of the context is the limit;
* ``POST /v1/responses`` — OpenAI's Responses API, stateless (the whole conversation in ``input``; no
  ``previous_response_id``): text and function-call items, function tools, ``stream`` (named events);
* ``POST /v1/completions`` — a string or a list of token ids in, or a list of such prompts (the
  choices of prompt ``p`` are ``p * n`` to ``p * n + n - 1``, as OpenAI numbers them), with
  vLLM's ``return_token_ids`` and ``return_tokens_as_token_ids`` extensions: the
  token-in/token-out path trainers use against a remote policy. For a vision-language model an
  ``images`` extension (a list of base64 ``data:image/...`` URLs, one per run of image tokens in
  the prompt's ids, in order) goes with a single prompt.

Every response carries the weights' version: completions and chunks in a ``policy_version`` field
(and each choice its own sample's, for ``n`` > 1; the response's is the oldest of them), every
answer in an ``X-Policy-Version`` header, ``/health`` and ``/v1/models`` the version being served.

Each request calls :meth:`Policy.generate` (once per sample, concurrently), so concurrent
requests reach the policy's batching queue together; nothing here serialises them. The policy's
completion is whole when it returns, so a streamed reply is the finished completion replayed as
OpenAI chunks (one per token), not tokens sent while they are sampled.

Top-logprob alternatives (``top_logprobs=k``, or ``logprobs=k`` on completions) are the k most
likely tokens of the distribution each token was drawn from, as the policy reports them
(:attr:`~agentgym.rollout.policy.SamplingParams.top_logprobs`); a policy that reports none gives
the sampled token alone. Parameters that would change sampling but are not implemented (penalties, ``logit_bias``, ``echo``,
``suffix``, ``best_of``) are refused rather than ignored. Bad input is answered with HTTP 400
and OpenAI's error JSON; a :class:`PolicyError` with 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.extras import requires

with requires("serve"):
    from aiohttp import web

from agentgym.actions import parse_action, tool_specs_from_openai
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams
from agentgym.rollout.vision import image_bytes, message_images, open_image

__all__ = ["PolicyServer", "RequestError", "assistant_reply", "make_app", "new_app", "serve"]

log = logging.getLogger(__name__)

MAX_N = 128
MAX_TOP_LOGPROBS = 20  # OpenAI's bound for chat; its legacy completions allow logprobs <= 5
MAX_COMPLETION_LOGPROBS = 5
MAX_PROMPTS = 64  # prompts per /v1/completions request (each is sampled n times)
MAX_BODY_BYTES = 64 * 2**20
VERSION_HEADER = "X-Policy-Version"
_ROLES = {"system", "developer", "user", "assistant", "tool"}
_IMAGE_ROLES = ("user", "tool")  # as OpenAI: images come from the user and from tools, never from the assistant


class RequestError(Exception):
    """A client error, answered with OpenAI's error JSON."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = message, param, status, type, code


def _error_response(
    status: int, message: str, type: str, param: str | None = None, code: str | None = None
) -> web.Response:
    return web.json_response({"error": {"message": message, "type": type, "param": param, "code": code}}, status=status)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestError as exc:
        return _error_response(exc.status, exc.message, exc.type, exc.param, exc.code)
    except PolicyError as exc:
        return _error_response(500, str(exc), "server_error")
    except web.HTTPException as exc:  # aiohttp's own 404/405/413: same JSON shape as every other error
        if exc.status < 400:
            raise
        return _error_response(exc.status, exc.text or exc.reason, "invalid_request_error")
    except Exception as exc:  # never an HTML traceback page
        log.exception("%s %s failed", request.method, request.path)
        return _error_response(500, f"internal server error: {type(exc).__name__}: {exc}", "server_error")


# --- request fields ---------------------------------------------------------------------------


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"{name} must be a number between {low} and {high}, got {value!r}", name)
    return float(value)


def _integer(body: dict, name: str, default: int | None, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise RequestError(f"{name} must be an integer {bound}, got {value!r}", name)
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{name} must be a boolean, got {value!r}", name)
    return bool(value)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(s for s in stop if s)
    raise RequestError("stop must be a string or a list of strings", "stop")


def _reject_unsupported(body: dict) -> None:
    """Parameters that would change the output but that this server cannot honour: refuse, never ignore."""
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name):
            raise RequestError(f"{name} is not supported by this server", name)
    if body.get("logit_bias"):
        raise RequestError("logit_bias is not supported by this server", "logit_bias")


@dataclass
class _Sampling:
    """What one request asks of the sampler, read and checked from its body."""

    params: list[SamplingParams]  # one per sample (n), seeds offset so the samples differ
    logprobs: int | None  # None: no logprobs; k: with k top alternatives asked for
    stream: bool
    include_usage: bool
    return_token_ids: bool
    tokens_as_ids: bool


# --- the app ----------------------------------------------------------------------------------


class PolicyServer:
    """The endpoints of one served policy (see the module docstring); :func:`make_app` puts them in an app.

    Subclasses change how a chat prompt's ids are made (:meth:`_chat_prompt`) and what happens to
    each sample (:meth:`_sample`): the gateway (:mod:`agentgym.gateway`) records sessions that way.
    """

    def __init__(self, policy: Policy, model_name: str, context_window: int | None, allow_weight_updates: bool):
        if policy.chat_format is None:
            raise ValueError(f"{type(policy).__name__} has no chat_format: the server needs a token-mode policy")
        self.policy = policy
        self.model_name = model_name
        self.format = policy.chat_format
        self.tokenizer = policy.chat_format.tokenizer
        self.vocab_size = len(self.tokenizer)
        self.context_window = context_window
        self.allow_weight_updates = allow_weight_updates
        self.accepts_images = bool(getattr(policy, "accepts_images", False))
        self.created = int(time.time())
        self._weights_lock = asyncio.Lock()  # one update at a time: versions land in the order they came

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/weights", self.weights)

    def _chat_prompt(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The prompt ids a chat request is sampled from: the messages rendered with the chat template."""
        try:
            return self.format.prompt_ids(messages, tools)
        except Exception as exc:
            raise RequestError(f"the messages cannot be rendered with the chat template: {exc}", "messages") from None

    # -- simple endpoints

    def _json(self, data: dict, version: int | None = None) -> web.Response:
        """A JSON answer with the weights' version in its header (the version being served unless given)."""
        version = self.policy.version if version is None else version
        return web.json_response(data, headers={VERSION_HEADER: str(version)})

    async def health(self, request: web.Request) -> web.Response:
        return self._json({"status": "ok", "model": self.model_name, "policy_version": self.policy.version})

    async def models(self, request: web.Request) -> web.Response:
        return self._json(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "agentgym",
                        "max_model_len": self.context_window,
                    }
                ],
                "policy_version": self.policy.version,
            }
        )

    # -- /v1/weights

    async def weights(self, request: web.Request) -> web.Response:
        if not self.allow_weight_updates:
            raise RequestError(
                "weight updates are off on this server (start it with --allow-weight-updates)",
                status=403,
                type="permission_error",
            )
        update = getattr(self.policy, "update_weights", None)
        if update is None:
            raise RequestError(f"this server's policy ({type(self.policy).__name__}) cannot load new weights")
        # Asked for by name: aiohttp reads a request without a Content-Type as octet-stream too.
        if "Content-Type" in request.headers and request.content_type == "application/octet-stream":
            version = _version(request.query.get("version"))
            data = await self._weights_bytes(request)
            source, param, load = "the request body", None, lambda: _state_dict_from_bytes(data)
        else:
            body = await self._json_object(request)
            path = body.get("path")
            if not isinstance(path, str) or not path:
                raise RequestError(
                    "path must name a checkpoint directory or a safetensors file (or send the safetensors "
                    "bytes as application/octet-stream)",
                    "path",
                )
            version = _integer(body, "version", None, 0)
            source, param, load = path, "path", lambda: _state_dict_from_path(path)
        async with self._weights_lock:
            try:
                state_dict = await asyncio.to_thread(load)
            except Exception as exc:  # whatever the client pointed at, it is not weights we can read
                raise self._refused(source, param, exc) from None
            try:
                # In a thread: it waits for the batch being decoded, which must not stall this loop.
                await asyncio.to_thread(update, state_dict, version)
            except (ValueError, RuntimeError, TypeError) as exc:
                if param is None:
                    raise RequestError(f"the weights do not fit the served model: {exc}") from None
                raise self._refused(source, param, exc) from None
        return self._json({"version": self.policy.version})

    @staticmethod
    def _refused(source: str, param: str | None, exc: Exception) -> RequestError:
        """The answer to weights that cannot be loaded. For a path on this host it is one message whatever went
        wrong (absent, unreadable, not weights, other shapes), so that a client learns nothing of the host's
        files from it; the reason goes to this server's log."""
        if param is None:
            return RequestError(f"cannot read weights from {source}: {type(exc).__name__}: {exc}")
        log.warning("refused weights from %r: %s: %s", source, type(exc).__name__, exc)
        return RequestError(
            "cannot load weights from that path (nothing there is a checkpoint of the served model that this "
            "server may read; its log says why)",
            param,
        )

    async def _weights_bytes(self, request: web.Request) -> bytes:
        """The body, refused past what the model's weights can take (8 bytes a parameter, plus a header)."""
        model = getattr(self.policy, "model", None)
        limit = MAX_BODY_BYTES
        if model is not None and hasattr(model, "parameters"):
            limit = 8 * sum(p.numel() for p in model.parameters()) + 2**20
        if request.content_length is not None and request.content_length > limit:
            raise RequestError(f"the weights body exceeds {limit} bytes, more than this model's weights", status=413)
        chunks, size = [], 0
        while chunk := await request.content.read(2**20):
            size += len(chunk)
            if size > limit:
                raise RequestError(
                    f"the weights body exceeds {limit} bytes, more than this model's weights", status=413
                )
            chunks.append(chunk)
        return b"".join(chunks)

    # -- shared request handling

    async def _json_object(self, request: web.Request) -> dict:
        try:
            body = await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not valid JSON ({exc})") from None
        except RecursionError:  # json's decoder recurses per nesting level; a client error, not ours
            raise RequestError("the request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    async def _body(self, request: web.Request) -> dict:
        """A sampling request's body: a JSON object for this model, asking only for what the server honours."""
        body = await self._json_object(request)
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise RequestError(
                f"The model `{model}` does not exist; this server serves `{self.model_name}`.",
                "model",
                status=404,
                type="not_found_error",
                code="model_not_found",
            )
        _reject_unsupported(body)
        return body

    def _sampling(
        self,
        body: dict,
        prompt_len: int,
        *,
        max_tokens: int | None,
        default_max_tokens: int | None,
        logprobs: int | None,
        prompt_param: str,
    ) -> _Sampling:
        n = _integer(body, "n", 1, 1, MAX_N)
        seed = _integer(body, "seed", None, -(2**63), 2**63 - 1)
        top_k = _integer(body, "top_k", 0, -1)  # -1 and 0 both mean "off", as in vLLM
        stream = _flag(body, "stream")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise RequestError("stream_options must be an object", "stream_options")
        common: dict[str, Any] = dict(
            max_tokens=self._budget(prompt_len, max_tokens, default_max_tokens, prompt_param),
            temperature=_number(body, "temperature", 1.0, 0.0, math.inf),
            top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
            top_k=max(top_k, 0),
            stop=_stop(body),
        )
        if common["top_p"] == 0.0:
            raise RequestError("top_p must be greater than 0", "top_p")
        params = [
            SamplingParams(**common, seed=None if seed is None else seed + i, top_logprobs=logprobs or 0)
            for i in range(n)
        ]
        return _Sampling(
            params,
            logprobs,
            stream,
            stream and bool(options.get("include_usage")),
            _flag(body, "return_token_ids"),
            _flag(body, "return_tokens_as_token_ids"),
        )

    def _budget(self, prompt_len: int, requested: int | None, default: int | None, param: str) -> int:
        """max_tokens for this prompt; the prompt plus the completion must fit the context, as in vLLM."""
        if self.context_window is None:
            return requested or default or SamplingParams.max_tokens
        room = self.context_window - prompt_len
        if room <= 0:
            raise RequestError(
                f"This model's maximum context length is {self.context_window} tokens, but the "
                f"prompt has {prompt_len} tokens.",
                param,
                code="context_length_exceeded",
            )
        if requested is None:
            return min(default, room) if default else room
        if requested > room:
            raise RequestError(
                f"This model's maximum context length is {self.context_window} tokens, but "
                f"{prompt_len + requested} were requested ({prompt_len} in the prompt, {requested} "
                f"for the completion).",
                "max_tokens",
                code="context_length_exceeded",
            )
        return requested

    async def _sample(self, prompt_ids: list[int], sampling: _Sampling, images: list[bytes]) -> list[Completion]:
        # One generate call per sample, all at once, so the policy can batch them with other requests.
        # Images are passed only when there are some: a text policy's generate takes no such argument.
        extra: dict[str, Any] = {"images": images} if images else {}
        completions = await asyncio.gather(*(self.policy.generate(prompt_ids, p, **extra) for p in sampling.params))
        for completion, params in zip(completions, sampling.params):
            completion.text = _cut_at_stop(completion.text, params.stop)
        return list(completions)

    def _token_strings(self, token_ids: Sequence[int], as_ids: bool) -> list[str]:
        if as_ids:
            return [f"token_id:{i}" for i in token_ids]
        return self.tokenizer.batch_decode([[i] for i in token_ids], skip_special_tokens=False)

    def _text_deltas(self, token_ids: Sequence[int], text: str) -> list[str]:
        """``text`` cut into one piece per token for streaming; the pieces concatenate to ``text`` exactly.

        Each token's piece is found by decoding a short window of ids (the previous emitted
        piece's tokens + the new ones) so the cost stays linear. A token that ends inside a
        multi-byte character, or whose text is not in ``text`` (a stop token, text past a stop
        string), gets ``""``; whatever remains goes with the last token.
        """
        deltas, sent = [], 0
        prefix_offset = read_offset = 0
        for i in range(len(token_ids)):
            before = self.tokenizer.decode(token_ids[prefix_offset:read_offset], skip_special_tokens=False)
            after = self.tokenizer.decode(token_ids[prefix_offset : i + 1], skip_special_tokens=False)
            piece = ""
            if len(after) > len(before) and not after.endswith("\ufffd"):
                prefix_offset, read_offset = read_offset, i + 1
                if text.startswith(after[len(before) :], sent):
                    piece = after[len(before) :]
                    sent += len(piece)
            deltas.append(piece)
        if deltas:
            deltas[-1] += text[sent:]
        return deltas

    def _usage(self, prompt_len: int, completions: Sequence[Completion]) -> dict:
        generated = sum(len(c.token_ids) for c in completions)
        return {"prompt_tokens": prompt_len, "completion_tokens": generated, "total_tokens": prompt_len + generated}

    async def _stream(self, request: web.Request, chunks, version: int, *, events: bool = False) -> web.StreamResponse:
        """Server-sent events: chat and completion chunks end with ``[DONE]``; Responses API ``events`` are named instead."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", VERSION_HEADER: str(version)}
        )
        await response.prepare(request)
        try:
            for chunk in chunks:
                name = f"event: {chunk['type']}\n" if events else ""
                await response.write(f"{name}data: {json.dumps(chunk)}\n\n".encode())
            if not events:
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:  # the client went away mid-stream; nothing left to tell it
            pass
        return response

    # -- /v1/chat/completions

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        messages = _messages(body.get("messages"), self.model_name, self.accepts_images)
        images = _images(message_images(messages), "messages")
        tools = _tools(body.get("tools"))
        tool_choice = body.get("tool_choice", "auto")
        if not (tool_choice in ("auto", "none", "required") or isinstance(tool_choice, dict)):
            raise RequestError(
                f"tool_choice must be 'auto', 'none', 'required' or a function, got {tool_choice!r}", "tool_choice"
            )
        prompt_ids = self._chat_prompt(messages, tools)
        max_tokens = _integer(body, "max_completion_tokens", None, 1)
        if max_tokens is None:
            max_tokens = _integer(body, "max_tokens", None, 1)
        want_logprobs = _flag(body, "logprobs")
        top = _integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
        if top and not want_logprobs:
            raise RequestError("top_logprobs needs logprobs=true", "top_logprobs")
        sampling = self._sampling(
            body,
            len(prompt_ids),
            max_tokens=max_tokens,
            default_max_tokens=None,
            logprobs=top if want_logprobs else None,
            prompt_param="messages",
        )
        completions = await self._sample(prompt_ids, sampling, images)
        # tool_choice "required" or a named function is accepted but not enforced (no constrained decoding).
        specs = tool_specs_from_openai(tools) if tools and tool_choice != "none" else None
        replies = [assistant_reply(c, specs) for c in completions]
        response_id = f"chatcmpl-{uuid.uuid4().hex}"
        version = min(c.policy_version for c in completions)
        header = {"id": response_id, "created": int(time.time()), "model": self.model_name, "policy_version": version}
        if sampling.stream:
            return await self._stream(
                request, self._chat_chunks(header, completions, replies, sampling, prompt_ids), version
            )
        choices = []
        for index, (completion, (content, tool_calls, finish_reason)) in enumerate(zip(completions, replies)):
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {
                "index": index,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": self._chat_logprobs(
                    completion.token_ids, completion.logprobs, completion.top_logprobs, sampling
                ),
                "policy_version": completion.policy_version,
            }
            if sampling.return_token_ids:
                choice["token_ids"] = list(completion.token_ids)
            choices.append(choice)
        result = {
            **header,
            "object": "chat.completion",
            "choices": choices,
            "system_fingerprint": None,
            "usage": self._usage(len(prompt_ids), completions),
        }
        if sampling.return_token_ids:
            result["prompt_token_ids"] = prompt_ids
        return self._json(result, version)

    # -- /v1/responses

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's Responses API, stateless: ``input`` carries the whole conversation (``previous_response_id`` is refused)."""
        body = await self._body(request)
        if body.get("previous_response_id") is not None:
            raise RequestError(
                "previous_response_id is not supported: this server keeps no responses; send the whole "
                "conversation in input",
                "previous_response_id",
            )
        messages = _messages(_responses_messages(body), self.model_name, self.accepts_images)
        raw_tools = body.get("tools") or []
        tools = _tools(_responses_tools(raw_tools))
        tool_choice = body.get("tool_choice", "auto")
        if not (tool_choice in ("auto", "none", "required") or isinstance(tool_choice, dict)):
            raise RequestError(
                f"tool_choice must be 'auto', 'none', 'required' or a function, got {tool_choice!r}", "tool_choice"
            )
        if _integer(body, "n", 1, 1, 1) != 1:  # not an OpenAI field here; refused rather than ignored
            raise RequestError("n is not supported by the Responses API", "n")
        prompt_ids = self._chat_prompt(messages, tools)
        sampling = self._sampling(
            body,
            len(prompt_ids),
            max_tokens=_integer(body, "max_output_tokens", None, 1),
            default_max_tokens=None,
            logprobs=None,
            prompt_param="input",
        )
        (completion,) = await self._sample(prompt_ids, sampling, [])
        specs = tool_specs_from_openai(tools) if tools and tool_choice != "none" else None
        content, tool_calls, finish_reason = assistant_reply(completion, specs)
        output = []
        if content is not None or not tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{uuid.uuid4().hex}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": content or "", "annotations": [], "logprobs": []}],
                }
            )
        for call in tool_calls or []:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{uuid.uuid4().hex}",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                    "status": "completed",
                }
            )
        usage = self._usage(len(prompt_ids), [completion])
        incomplete = finish_reason == "length"
        result = {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "model": self.model_name,
            "instructions": body.get("instructions"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": tool_choice,
            "tools": raw_tools,
            "temperature": sampling.params[0].temperature,
            "top_p": sampling.params[0].top_p,
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {},
            "text": {"format": {"type": "text"}},
            "usage": {
                "input_tokens": usage["prompt_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage["total_tokens"],
            },
            "policy_version": completion.policy_version,
        }
        if sampling.return_token_ids:
            result["prompt_token_ids"] = prompt_ids
            result["token_ids"] = list(completion.token_ids)
        if sampling.stream:
            return await self._stream(request, _response_events(result), completion.policy_version, events=True)
        return self._json(result, completion.policy_version)

    def _chat_logprobs(
        self, token_ids: Sequence[int], logprobs: Sequence[float], top: Sequence[list], sampling: _Sampling
    ) -> dict | None:
        if sampling.logprobs is None:
            return None

        def entry(token: str, logprob: float) -> dict:
            return {"token": token, "logprob": _finite(logprob), "bytes": list(token.encode())}

        content = []
        for position, (token, logprob) in enumerate(
            zip(self._token_strings(token_ids, sampling.tokens_as_ids), logprobs)
        ):
            sampled = entry(token, logprob)
            alternatives = []
            if sampling.logprobs:
                alternatives = [entry(t, lp) for t, lp in self._alternatives(top, position, sampling)] or [sampled]
            content.append({**sampled, "top_logprobs": alternatives})
        return {"content": content, "refusal": None}

    def _alternatives(self, top: Sequence[list], position: int, sampling: _Sampling) -> list[tuple[str, float]]:
        """The policy's most likely tokens at ``position`` as (token string, logprob); empty when it reported none."""
        if position >= len(top) or not top[position]:
            return []
        pairs = top[position][: sampling.logprobs]
        return list(zip(self._token_strings([i for i, _ in pairs], sampling.tokens_as_ids), [lp for _, lp in pairs]))

    def _chat_chunks(
        self, header: dict, completions: Sequence[Completion], replies, sampling: _Sampling, prompt_ids: list[int]
    ):
        def chunk(index: int, delta: dict, logprobs=None, finish_reason=None, **extra) -> dict:
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason, **extra}
            usage = {"usage": None} if sampling.include_usage else {}
            return {**header, "object": "chat.completion.chunk", "choices": [choice], **usage}

        for index, (completion, (content, tool_calls, finish_reason)) in enumerate(zip(completions, replies)):
            ids, logprobs = list(completion.token_ids), list(completion.logprobs)
            first = {"prompt_token_ids": prompt_ids} if sampling.return_token_ids and index == 0 else {}
            yield {**chunk(index, {"role": "assistant", "content": ""}), **first}
            if tool_calls:
                delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(tool_calls)]}
                if content is not None:
                    delta = {"content": content, **delta}
                extra = {"token_ids": ids} if sampling.return_token_ids else {}
                yield chunk(
                    index, delta, self._chat_logprobs(ids, logprobs, completion.top_logprobs, sampling), **extra
                )
            else:
                for i, piece in enumerate(self._text_deltas(ids, completion.text)):
                    if piece or sampling.logprobs is not None or sampling.return_token_ids:
                        extra = {"token_ids": [ids[i]]} if sampling.return_token_ids else {}
                        yield chunk(
                            index,
                            {"content": piece},
                            self._chat_logprobs(
                                ids[i : i + 1], logprobs[i : i + 1], completion.top_logprobs[i : i + 1], sampling
                            ),
                            **extra,
                        )
            yield chunk(index, {}, finish_reason=finish_reason)
        if sampling.include_usage:
            yield {
                **header,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": self._usage(len(prompt_ids), completions),
            }

    # -- /v1/completions

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        prompts = self._prompts(body.get("prompt"))
        if _flag(body, "echo"):
            raise RequestError("echo is not supported by this server", "echo")
        if body.get("suffix"):
            raise RequestError("suffix is not supported by this server", "suffix")
        images = self._completion_images(body.get("images"), len(prompts))
        self._check_images(prompts, images, "images" if images else "prompt")
        n = _integer(body, "n", 1, 1, MAX_N)
        if _integer(body, "best_of", n, 1) != n:
            raise RequestError("best_of other than n is not supported by this server", "best_of")
        sampling = self._sampling(
            body,
            max(map(len, prompts)),
            max_tokens=_integer(body, "max_tokens", None, 1),
            default_max_tokens=16,  # OpenAI's (and vLLM's) default for this endpoint
            logprobs=_integer(body, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS),
            prompt_param="prompt",
        )
        # Every prompt's samples at once, so the policy batches them; choice p * n + j is prompt p's sample j.
        per_prompt = await asyncio.gather(*(self._sample(prompt_ids, sampling, images) for prompt_ids in prompts))
        samples = [
            (completion, prompt_ids)
            for prompt_ids, completions in zip(prompts, per_prompt)
            for completion in completions
        ]
        completions = [completion for completion, _ in samples]
        prompt_tokens = sum(map(len, prompts))
        version = min(c.policy_version for c in completions)
        header = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
            "object": "text_completion",
            "policy_version": version,
        }
        if sampling.stream:
            return await self._stream(
                request, self._completion_chunks(header, samples, sampling, prompt_tokens), version
            )
        choices = []
        for index, (completion, prompt_ids) in enumerate(samples):
            logprobs = None
            if sampling.logprobs is not None:  # the offsets cost a decode per token: only when asked for
                logprobs = self._completion_logprobs(
                    completion.token_ids,
                    completion.logprobs,
                    completion.top_logprobs,
                    sampling,
                    self._offsets(completion),
                )
            choice = {
                "index": index,
                "text": completion.text,
                "finish_reason": completion.finish_reason,
                "logprobs": logprobs,
                "policy_version": completion.policy_version,
            }
            if sampling.return_token_ids:
                # vLLM puts prompt_token_ids on each choice of this endpoint; the response carries it too.
                choice.update(token_ids=list(completion.token_ids), prompt_token_ids=prompt_ids)
            choices.append(choice)
        result = {**header, "choices": choices, "usage": self._usage(prompt_tokens, completions)}
        if sampling.return_token_ids and len(prompts) == 1:
            result["prompt_token_ids"] = prompts[0]
        return self._json(result, version)

    def _completion_images(self, raw: Any, prompts: int) -> list[bytes]:
        """The ``images`` extension of /v1/completions: data URLs for the one prompt's runs of image tokens."""
        if raw is None or raw == []:
            return []
        if not self.accepts_images:
            raise RequestError(_no_images(self.model_name, "images"), "images")
        if not isinstance(raw, list) or not all(isinstance(url, str) for url in raw):
            raise RequestError("images must be a list of base64 data:image/... URLs", "images")
        if prompts != 1:
            raise RequestError(f"images go with a single prompt, got {prompts} prompts", "images")
        return _images(raw, "images")

    def _check_images(self, prompts: list[list[int]], images: list[bytes], param: str) -> None:
        """A 400 unless each prompt's runs of image tokens fit ``images`` (a vision model's; nothing to check otherwise)."""
        check = getattr(self.format, "check_images", None)
        if check is None:
            return
        for prompt_ids in prompts:
            try:
                check(prompt_ids, images)
            except ValueError as exc:
                raise RequestError(str(exc), param) from None

    def _prompts(self, prompt: Any) -> list[list[int]]:
        """The token ids of each prompt: one string or id list, or a list of them (a batch)."""
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            if len(prompt) > MAX_PROMPTS:
                raise RequestError(f"at most {MAX_PROMPTS} prompts per request, got {len(prompt)}", "prompt")
            return [self._prompt_ids(p, f"prompt[{i}]") for i, p in enumerate(prompt)]
        return [self._prompt_ids(prompt, "prompt")]

    def _prompt_ids(self, prompt: Any, param: str) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError(f"{param} must not be empty", param)
            return self.format.encode(prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            bad = [i for i in prompt if not 0 <= i < self.vocab_size]
            if bad:
                raise RequestError(f"{param} token ids must be in [0, {self.vocab_size}), got {bad[:5]}", param)
            return list(prompt)
        raise RequestError(
            f"{param} must be a non-empty string, a non-empty list of token ids, or a list of those", param
        )

    def _offsets(self, completion: Completion) -> list[int]:
        """Where each token's text starts in the completion's text (the legacy ``text_offset``)."""
        offsets, position = [], 0
        for piece in self._text_deltas(completion.token_ids, completion.text):
            offsets.append(position)
            position += len(piece)
        return offsets

    def _completion_logprobs(
        self,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        top: Sequence[list],
        sampling: _Sampling,
        offsets: list[int],
    ) -> dict | None:
        if sampling.logprobs is None:
            return None
        tokens = self._token_strings(token_ids, sampling.tokens_as_ids)
        values = [_finite(lp) for lp in logprobs]
        alternatives = None
        if sampling.logprobs:
            alternatives = []
            for i, (token, value) in enumerate(zip(tokens, values)):
                likely = {t: _finite(lp) for t, lp in self._alternatives(top, i, sampling)}
                likely.setdefault(token, value)  # as OpenAI's legacy endpoint: the sampled token is listed too
                alternatives.append(likely)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": alternatives, "text_offset": offsets}

    def _completion_chunks(
        self, header: dict, samples: Sequence[tuple[Completion, list[int]]], sampling: _Sampling, prompt_tokens: int
    ):
        for index, (completion, prompt_ids) in enumerate(samples):
            ids, logprobs, top = list(completion.token_ids), list(completion.logprobs), completion.top_logprobs
            position = 0
            for i, piece in enumerate(self._text_deltas(ids, completion.text)):
                choice = {
                    "index": index,
                    "text": piece,
                    "finish_reason": None,
                    "logprobs": self._completion_logprobs(
                        ids[i : i + 1], logprobs[i : i + 1], top[i : i + 1], sampling, [position]
                    ),
                }
                position += len(piece)
                if sampling.return_token_ids:
                    choice["token_ids"] = [ids[i]]
                    if i == 0:
                        choice["prompt_token_ids"] = prompt_ids
                yield {**header, "choices": [choice]}
            yield {
                **header,
                "choices": [{"index": index, "text": "", "logprobs": None, "finish_reason": completion.finish_reason}],
            }
        if sampling.include_usage:
            yield {**header, "choices": [], "usage": self._usage(prompt_tokens, [c for c, _ in samples])}


# --- messages and tool calls ------------------------------------------------------------------


def _text_content(content: Any, param: str) -> str:
    """Message content as text: a string, or OpenAI content parts of type text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise RequestError("only text content parts are supported", param)
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError("content must be a string or a list of text parts", param)


def _no_images(model_name: str, where: str) -> str:
    return f"model `{model_name}` takes no images (it is a text-only model), but {where} holds one"


def _content(content: Any, param: str, role: str, model_name: str, accepts_images: bool) -> str | list[dict]:
    """Message content for the template: text joined into a string, or (with images) the parts, images normalised."""
    has_images = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content
    )
    if not isinstance(content, list) or not (accepts_images or has_images):
        return _text_content(content, param)
    parts: list[dict] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            if not accepts_images:
                raise RequestError(_no_images(model_name, where), where)
            if role not in _IMAGE_ROLES:
                raise RequestError(f"{where}: images are accepted in user and tool messages only, not {role}", where)
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise RequestError(f"{where} must be {{'type': 'image_url', 'image_url': {{'url': str}}}}", where)
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise RequestError(f"{where}: only text and image_url content parts are supported", where)
    return parts if has_images else "".join(part["text"] for part in parts)


def _images(urls: list[Any], param: str) -> list[bytes]:
    """The images' encoded bytes, each checked to be a readable image (a 400 naming the bad one otherwise)."""
    images = []
    for i, url in enumerate(urls):
        try:
            data = image_bytes(url)
            open_image(data)
        except ValueError as exc:
            raise RequestError(f"image {i} of {param}: {exc}", param) from None
        images.append(data)
    return images


def _messages(raw: Any, model_name: str = "", accepts_images: bool = False) -> list[dict]:
    """The request's messages, checked and normalised into what the chat template renders."""
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages must be a non-empty list", "messages")
    messages = []
    for k, message in enumerate(raw):
        param = f"messages[{k}]"
        if not isinstance(message, dict):
            raise RequestError(f"{param} must be an object", param)
        role = message.get("role")
        if role not in _ROLES:
            raise RequestError(f"{param}.role must be one of {sorted(_ROLES)}, got {role!r}", f"{param}.role")
        content = message.get("content")
        if role == "assistant":
            calls = _assistant_tool_calls(message.get("tool_calls"), f"{param}.tool_calls")
            if content is None and not calls:
                raise RequestError(f"{param} needs content or tool_calls", f"{param}.content")
            normalised = {
                "role": role,
                "content": ""
                if content is None
                else _content(content, f"{param}.content", role, model_name, accepts_images),
            }
            if calls:
                normalised["tool_calls"] = calls
        else:
            if content is None:
                raise RequestError(f"{param}.content is required for role {role!r}", f"{param}.content")
            # OpenAI's "developer" role is its new name for system instructions.
            normalised = {
                "role": "system" if role == "developer" else role,
                "content": _content(content, f"{param}.content", role, model_name, accepts_images),
            }
        messages.append(normalised)
    return messages


def _assistant_tool_calls(calls: Any, param: str) -> list[dict]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise RequestError(f"{param} must be a list", param)
    normalised = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(function, dict)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", "{}"), (str, dict))
        ):
            raise RequestError(
                f"{param}[{i}] must be {{'type': 'function', 'function': {{'name': str, 'arguments': str}}}}",
                f"{param}[{i}]",
            )
        arguments = function.get("arguments", "{}")
        normalised.append(
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": function["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return normalised


def _tools(raw: Any) -> list[dict] | None:
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (
            isinstance(tool, dict)
            and tool.get("type", "function") == "function"
            and isinstance(function, dict)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("parameters", {}), dict)
        ):
            raise RequestError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, 'parameters': object}}}}",
                f"tools[{i}]",
            )
    return raw


def assistant_reply(completion: Completion, specs) -> tuple[str | None, list[dict] | None, str]:
    """(content, tool_calls, finish_reason) of an assistant reply; Hermes blocks become tool calls when tools are on."""
    text = completion.text
    if specs is not None and "<tool_call>" in text:
        parsed = parse_action(text, specs, allow_text=True)
        # A block whose JSON does not parse has no name to report: the reply stays plain text,
        # as vLLM's Hermes parser does. Schema errors (unknown tool, wrong arguments) are the
        # client's to judge, as with any OpenAI tool call.
        if parsed.calls and all(call.name != "?" for call in parsed.calls):
            return parsed.text or None, [call.to_openai() for call in parsed.calls], "tool_calls"
    return text, None, completion.finish_reason


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the first stop string: OpenAI leaves it out of the reply (the sampled ids keep its tokens)."""
    found = [text.find(s) for s in stop if s in text]
    return text[: min(found)] if found else text


def _finite(logprob: float) -> float:
    # JSON has no -Infinity; vLLM reports impossible tokens as -9999.0 likewise.
    return logprob if math.isfinite(logprob) else -9999.0


# --- the Responses API ------------------------------------------------------------------------


def _responses_messages(body: dict) -> list[dict]:
    """``instructions`` + ``input`` (a string or a list of items) as chat messages, before :func:`_messages` checks them."""
    raw = body.get("input")
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise RequestError("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise RequestError("input must be a non-empty string or a non-empty list of items", "input")
    for k, item in enumerate(raw):
        param = f"input[{k}]"
        if not isinstance(item, dict):
            raise RequestError(f"{param} must be an object", param)
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = [_responses_part(part, f"{param}.content[{i}]") for i, part in enumerate(content)]
            messages.append({"role": item.get("role"), "content": content})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "{}")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # a reply's calls follow its message item
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(_responses_part(part, f"{param}.output")["text"] for part in output)
            if not isinstance(output, str):
                raise RequestError(f"{param}.output must be a string", f"{param}.output")
            messages.append({"role": "tool", "content": output, "tool_call_id": item.get("call_id")})
        elif kind == "reasoning":  # this server emits none; a client's own reasoning summaries are not prompt text
            continue
        else:
            raise RequestError(
                f"{param}.type must be message, function_call or function_call_output, got {kind!r}", param
            )
    return messages


def _responses_part(part: Any, param: str) -> dict:
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
        if isinstance(part.get("text"), str):
            return {"type": "text", "text": part["text"]}
    raise RequestError(f"{param}: only text content parts are supported", param)


def _responses_tools(raw: Any) -> list[dict]:
    """Responses tools (``{"type": "function", "name": ..., "parameters": ...}``) in Chat Completions' nesting."""
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", "tools")
    tools = []
    for i, tool in enumerate(raw):
        if not (isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)):
            raise RequestError(
                f"tools[{i}] must be {{'type': 'function', 'name': str, 'parameters': object}} (only function tools "
                "are supported)",
                f"tools[{i}]",
            )
        function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tools


def _response_events(response: dict) -> Any:
    """The Responses API's stream events for a finished ``response``: its items added, their text deltas, done."""
    sequence = iter(range(1 << 62))

    def event(kind: str, **fields: Any) -> dict:
        return {"type": kind, "sequence_number": next(sequence), **fields}

    yield event("response.created", response={**response, "status": "in_progress", "output": []})
    yield event("response.in_progress", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}  # the text part's place
            yield event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield event("response.content_part.added", **where, part=empty)
            if text:  # one delta: the completion is whole before the stream starts (see the module docstring)
                yield event("response.output_text.delta", **where, delta=text, logprobs=[])
            yield event("response.output_text.done", **where, text=text, logprobs=[])
            yield event("response.content_part.done", **where, part=item["content"][0])
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            yield event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=item["arguments"],
            )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed" if response["status"] == "completed" else "response.incomplete", response=response)


# --- weights ----------------------------------------------------------------------------------


def _version(raw: str | None) -> int | None:
    """``?version=N`` of a weights upload: a non-negative integer, or None (the policy bumps its own)."""
    if raw is None:
        return None
    if not raw.isdigit():
        raise RequestError(f"version must be a non-negative integer, got {raw!r}", "version")
    return int(raw)


def _state_dict_from_bytes(data: bytes) -> dict:
    from safetensors.torch import load

    if not data:
        raise ValueError("the body is empty")
    return load(data)


def _state_dict_from_path(path: str) -> dict:
    """The tensors of a safetensors file, of a checkpoint directory's ``*.safetensors`` shards, or ``from_pretrained``'s."""
    from pathlib import Path

    from safetensors.torch import load_file

    where = Path(path)
    if where.is_file():
        return load_file(where)
    if not where.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    shards = sorted(where.glob("*.safetensors"))
    if not shards:  # older checkpoints (pytorch_model.bin): transformers reads them
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(where, local_files_only=True).state_dict()
    state_dict: dict = {}
    for shard in shards:
        state_dict.update(load_file(shard))
    return state_dict


# --- entry points -----------------------------------------------------------------------------


def make_app(
    policy: Policy, model_name: str, *, context_window: int | None = None, allow_weight_updates: bool = False
) -> web.Application:
    """The aiohttp application serving ``policy`` as ``model_name``.

    ``context_window`` (default: the policy's ``context_window`` attribute, if any) bounds prompt
    + completion, and is the default ``max_tokens`` budget of a chat request; without one,
    prompts are not checked against a context size. ``allow_weight_updates`` turns ``POST
    /v1/weights`` on (any client could then replace the model). The caller owns the policy and
    closes it.
    """
    if context_window is None:
        context_window = getattr(policy, "context_window", None)
    server = PolicyServer(policy, model_name, context_window, allow_weight_updates)
    app = new_app()
    server.add_routes(app)
    return app


def new_app(middlewares: Sequence = ()) -> web.Application:
    """An empty app that answers every error with OpenAI's error JSON (``middlewares`` run inside that)."""
    # Agent conversations and token-id prompts are long: allow bodies well past aiohttp's 1 MiB default.
    return web.Application(middlewares=[_errors, *middlewares], client_max_size=MAX_BODY_BYTES)


def serve(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch_size: int = 16,
    served_model_name: str | None = None,
    device: str | None = None,
    allow_weight_updates: bool = False,
) -> None:
    """Load ``model`` (a local checkpoint) into an :class:`HFPolicy` and serve it until interrupted."""

    async def build() -> web.Application:
        from agentgym.rollout.hf_policy import HFPolicy

        policy = HFPolicy(model, device=device, max_batch_size=max_batch_size)

        async def close(app: web.Application) -> None:
            await policy.aclose()

        # The policy's own context window.
        name = served_model_name or model
        app = make_app(policy, name, allow_weight_updates=allow_weight_updates)
        app.on_cleanup.append(close)
        window = getattr(policy, "context_window", None)
        print(
            f"agentgym serve: {model} as model {name!r}"
            + (f" (a {window}-token context window)" if window else "")
            + f"; clients use base_url http://{host}:{port}/v1 and model={name!r}",
            flush=True,
        )
        return app

    web.run_app(build(), host=host, port=port, print=lambda text: print(text, flush=True))
