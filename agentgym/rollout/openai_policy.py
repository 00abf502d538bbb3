"""A :class:`~agentgym.rollout.policy.Policy` over any OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs, ``agentgym serve``).

:class:`OpenAIPolicy` speaks through the official ``openai`` async client.

* **Chat mode** (:meth:`OpenAIPolicy.chat`) works against any chat-completions endpoint: tools
  go in natively (or not at all, when the agent describes them in text), native tool calls
  come back in OpenAI dict form. With ``logprobs`` on it also asks for vLLM's
  ``return_token_ids``. Hosted APIs reject unknown fields with a 400, so a request carrying it
  that gets a 400 is sent once more without it; if that one succeeds, the field is not sent again.
* **Token mode** (:meth:`OpenAIPolicy.generate`, needs ``tokenizer``) sends prompt token ids to
  ``/v1/completions`` with vLLM's ``return_token_ids``/``return_tokens_as_token_ids`` and gets
  the exact sampled ids and their logprobs back; an endpoint that cannot return ids is an error,
  since guessing them from text would break token-exact training data, and so is a prompt echo
  (``prompt_token_ids``, as vLLM and ``agentgym serve`` return it) that differs from the ids sent.

**Replicas.** ``base_url`` may list several endpoints serving the same model (``agentgym
serve`` replicas, :class:`~agentgym.distributed.replicas.PolicyReplicas`). Each request goes to
the replica with the fewest requests outstanding from this policy (ties in turn, round robin).
A replica that fails with a connection error, a timeout or a 5xx is skipped for
``replica_cooldown`` seconds; after that one request probes it, and its success brings it back.
Every completion records the replica that served it (:attr:`~agentgym.rollout.policy.Completion.replica`)
and the weights' version the server reported in the response's ``policy_version`` field
(``agentgym serve`` reports one); an endpoint that reports none gets the policy's own
:attr:`version`.

**Images.** Messages may carry OpenAI ``image_url`` content parts (the agent loop's
``AgentConfig.images``); they are sent as they are, to any endpoint that serves a vision model. A
refusal because of them raises :class:`~agentgym.rollout.images.ImageRejectedError`: with
``too_large`` for an HTTP 413 or a 400 about their size (the agent shrinks them and asks again),
else (a 400 that names images, vision or multimodal input) as a text-only endpoint, in words
that say to send text only.

Failures are retried here, not by the SDK (its client is built with ``max_retries=0``): a
connection error, a timeout, a 429 or a 5xx sends the request to another replica at once; when
every replica has failed it, it is tried again up to ``max_retries`` more times, with
exponential backoff and jitter (one URL: ``max_retries`` more tries of it). Other 4xx fail at
once. Every attempt is bounded by ``timeout`` seconds in total. When nothing works,
:class:`~agentgym.rollout.policy.PolicyError` says which URLs failed and how.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.extras import requires

with requires("eval"):
    import openai

from agentgym.rollout.chat import ChatFormat, Message
from agentgym.rollout.images import ImageRejectedError, has_images
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams

__all__ = ["OpenAIPolicy"]

_TOKEN_ID_PREFIX = "token_id:"  # how vLLM renders tokens under return_tokens_as_token_ids
# How endpoints word a refusal of images: vLLM ("... does not support multimodal inputs", "At most 0
# image(s) may be provided"), OpenAI ("image_url is only supported by certain models"), others (vision).
_IMAGES_REFUSED = re.compile(r"image|multi-?modal|vision", re.I)
_TOO_LARGE = re.compile(r"too (large|big)|exceed|payload|maximum (allowed )?(size|pixels|dimension)", re.I)
_CONTEXT = re.compile(r"context length|context window|maximum model length", re.I)


@dataclass
class _Replica:
    """One endpoint of the policy and what the balancer knows of it."""

    url: str
    client: openai.AsyncOpenAI
    outstanding: int = 0  # this policy's requests in flight there
    down_until: float = 0.0  # monotonic time its cooldown ends; 0 while it is healthy
    probing: bool = False  # a request is testing whether it is back


class OpenAIPolicy(Policy):
    """A policy served by an OpenAI-compatible HTTP endpoint (text, or images too where the model takes them).

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``, or a list of them (replicas of
            one model, balanced and failed over between).
        model: the model name the endpoint serves.
        api_key: defaults to ``$OPENAI_API_KEY``, else ``"EMPTY"`` (what local servers expect).
        tokenizer: a local tokenizer path or a tokenizer object; enables token mode through a
            :class:`~agentgym.rollout.chat.ChatFormat`. It must be the served model's tokenizer.
        native_tools: pass tool schemas to the chat endpoint; when off, tools are left out of the
            request (the agent describes them in the prompt and parses text replies).
        logprobs: ask for logprobs (and token ids, where the endpoint offers them) in chat mode.
        timeout: seconds one attempt may take in total.
        max_retries: further attempts after a retryable failure.
        backoff: the first retry's delay in seconds; it doubles on each retry, times a random
            factor in [0.5, 1.5) so that many clients do not retry in lockstep.
        max_concurrency: requests in flight at once, over all replicas (more calls wait their turn).
        replica_cooldown: seconds a failed replica is skipped before a request probes it again.
        version: the weights' version recorded on completions whose server reports none.
        name: a label for logs; defaults to ``model``.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key: str | None = None,
        tokenizer: Any = None,
        native_tools: bool = True,
        logprobs: bool = True,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 64,
        replica_cooldown: float = 10.0,
        version: int = 0,
        name: str | None = None,
    ):
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls or len(set(urls)) != len(urls):
            raise ValueError(f"base_url must be a URL or a list of distinct URLs, got {base_url!r}")
        self.base_url = base_url if isinstance(base_url, str) else urls
        self.model = model
        self.name = name or model
        self.version = version
        self.native_tools = native_tools
        self.logprobs = logprobs
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.replica_cooldown = replica_cooldown
        if tokenizer is not None:
            if isinstance(tokenizer, (str, os.PathLike)):
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(tokenizer)
            self.chat_format = ChatFormat(tokenizer)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.max_concurrency = max_concurrency
        self._replicas = [_Replica(url, self._client(url)) for url in urls]
        self._clients = [replica.client for replica in self._replicas]  # closed by aclose, dropped replicas' too
        self._turn = 0  # round robin among the least loaded
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._chat_extensions = True  # vLLM's return_token_ids, until the endpoint refuses it

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        request = {"model": self.model, "messages": list(messages), **_sampling_fields(sampling)}
        if tools and self.native_tools:
            request["tools"] = tools
        if self.logprobs:
            request["logprobs"] = True
        extra = {"top_k": sampling.top_k} if sampling.top_k > 0 else {}
        try:
            response, replica = await self._chat_call(request, extra)
        except PolicyError as exc:
            refusal = _image_refusal(exc) if has_images(request["messages"]) else None
            if refusal is None:
                raise
            raise refusal from exc.__cause__
        if not response.choices:
            raise PolicyError(f"{replica} returned no choices")
        choice = response.choices[0]
        message = choice.message
        logprobs = [c.logprob for c in choice.logprobs.content] if choice.logprobs and choice.logprobs.content else []
        token_ids = list(getattr(choice, "token_ids", None) or [])
        if len(token_ids) != len(logprobs):  # token ids are only of use with a logprob for each
            token_ids = []
        tool_calls = [call.model_dump(exclude_none=True) for call in message.tool_calls or []] or None
        usage = response.usage
        return Completion(
            text=message.content or "",
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=choice.finish_reason or "stop",
            policy_version=self._served_version(response),
            entropy=None,
            tool_calls=tool_calls,
            usage={"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
            if usage is not None
            else None,
            replica=replica,
        )

    async def _chat_call(self, request: dict, extra: dict) -> tuple[Any, str]:
        """The chat request, with vLLM's ``return_token_ids`` while the endpoint takes it (see the module docstring)."""
        if self.logprobs and self._chat_extensions:
            try:
                response, replica = await self._call("chat", **request, extra_body={**extra, "return_token_ids": True})
            except PolicyError as exc:
                if not isinstance(exc.__cause__, openai.BadRequestError):
                    raise
                response, replica = await self._call("chat", **request, extra_body=extra or None)
                self._chat_extensions = False
        else:
            response, replica = await self._call("chat", **request, extra_body=extra or None)
        return response, replica

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Completion:
        if self.chat_format is None:
            raise NotImplementedError("token mode needs the served model's tokenizer: pass OpenAIPolicy(tokenizer=...)")
        extra: dict[str, Any] = {"return_tokens_as_token_ids": True, "return_token_ids": True}
        if sampling.top_k > 0:
            extra["top_k"] = sampling.top_k
        response, replica = await self._call(
            "completions",
            model=self.model,
            prompt=list(prompt_ids),
            logprobs=1,
            extra_body=extra,
            **_sampling_fields(sampling),
        )
        if not response.choices:
            raise PolicyError(f"{replica} returned no choices")
        choice = response.choices[0]
        token_logprobs = choice.logprobs.token_logprobs if choice.logprobs else None
        token_ids = getattr(choice, "token_ids", None)
        if token_ids is None and choice.logprobs and choice.logprobs.tokens:
            token_ids = _ids_from_tokens(choice.logprobs.tokens)
        if (
            token_ids is None
            or token_logprobs is None
            or len(token_logprobs) != len(token_ids)
            or None in token_logprobs
        ):
            raise PolicyError(
                f"{replica} did not return the sampled token ids with their logprobs; token mode "
                "needs vLLM's return_token_ids or return_tokens_as_token_ids (vLLM, agentgym serve)"
            )
        echoed = getattr(choice, "prompt_token_ids", None) or getattr(response, "prompt_token_ids", None)
        if echoed is not None and list(echoed) != list(prompt_ids):
            raise PolicyError(
                f"{replica} sampled from other prompt ids than it was sent ({len(echoed)} ids echoed, "
                f"{len(prompt_ids)} sent): its completion is not a continuation of the recorded prompt"
            )
        return Completion(
            text=choice.text,
            token_ids=list(token_ids),
            logprobs=list(token_logprobs),
            finish_reason=choice.finish_reason or "stop",
            policy_version=self._served_version(response),
            replica=replica,
        )

    async def _call(self, endpoint: Literal["chat", "completions"], **request) -> tuple[Any, str]:
        """``endpoint``'s create(**request) on a replica, failed over and retried on transient failures.

        Returns the response and the URL of the replica that gave it; raises PolicyError naming
        the URLs and their failures when it gives up.
        """
        self._follow_event_loop()
        async with self._semaphore:
            failures: dict[str, str] = {}  # this round's failures by URL: every replica gets one try per round
            attempts, retries = 0, 0
            while True:
                replica = self._pick(exclude=failures)
                create = (
                    replica.client.chat.completions.create if endpoint == "chat" else replica.client.completions.create
                )
                attempts += 1
                replica.outstanding += 1
                down = True
                cause: Exception
                try:
                    async with asyncio.timeout(self.timeout):
                        response = await create(**request)
                except (openai.APITimeoutError, TimeoutError) as exc:
                    failure, cause, wait = f"did not answer within {self.timeout} s", exc, 0.0
                except openai.APIConnectionError as exc:
                    failure, cause, wait = f"is unreachable ({exc.__cause__ or exc})", exc, 0.0
                except openai.APIStatusError as exc:
                    failure, cause = f"answered HTTP {exc.status_code}: {_error_message(exc)}", exc
                    if exc.status_code != 429 and exc.status_code < 500:
                        self._answered(replica)  # it is up: the request is what failed
                        raise PolicyError(f"OpenAI-compatible endpoint {replica.url} {failure}") from exc
                    # Overloaded is not down: another replica takes this request, its later ones still come here.
                    down = exc.status_code != 429
                    wait = _retry_after(exc)
                except openai.OpenAIError as exc:
                    self._answered(replica)
                    raise PolicyError(f"OpenAI-compatible endpoint {replica.url} failed: {exc}") from exc
                else:
                    self._answered(replica)
                    return response, replica.url
                finally:
                    replica.outstanding -= 1
                if down:
                    replica.down_until, replica.probing = time.monotonic() + self.replica_cooldown, False
                else:
                    replica.probing = False
                failures[replica.url] = failure
                if any(r.url not in failures for r in self._replicas):
                    continue  # another replica has not been tried yet: at once
                if retries == self.max_retries:
                    break
                retries += 1
                failures = {}
                await asyncio.sleep(max(wait, self.backoff * 2 ** (retries - 1) * random.uniform(0.5, 1.5)))
            given_up = f"(gave up after {attempts} attempt{'s' if attempts > 1 else ''})"
            if len(self._replicas) == 1:
                raise PolicyError(f"OpenAI-compatible endpoint {replica.url} {failure} {given_up}") from cause
            every = "; ".join(f"{url} {why}" for url, why in failures.items())
            raise PolicyError(f"every replica of the OpenAI-compatible endpoint failed: {every} {given_up}") from cause

    def _pick(self, exclude) -> _Replica:
        """The replica for the next attempt: the least loaded healthy one not in ``exclude`` (ties in turn).

        A replica whose cooldown is over is a candidate again while no other request probes it;
        when every replica left to try is cooling down, the one whose cooldown ends first is tried.
        """
        now = time.monotonic()
        left = [(i, r) for i, r in enumerate(self._replicas) if r.url not in exclude]
        ready = [(i, r) for i, r in left if not r.down_until or (r.down_until <= now and not r.probing)]
        count = len(self._replicas)
        index, replica = (
            min(ready, key=lambda item: (item[1].outstanding, (item[0] - self._turn) % count))
            if ready
            else min(left, key=lambda item: item[1].down_until)
        )
        self._turn = index + 1
        if replica.down_until:
            replica.probing = True
        return replica

    @staticmethod
    def _answered(replica: _Replica) -> None:
        replica.down_until, replica.probing = 0.0, False

    def _served_version(self, response) -> int:
        """The weights' version the server reported with ``response``, else this policy's own."""
        version = getattr(response, "policy_version", None)
        return version if isinstance(version, int) and not isinstance(version, bool) else self.version

    def _drop_replicas(self, urls) -> None:
        """Stop sending requests to ``urls`` (replicas that are gone); their clients close with the policy."""
        kept = [replica for replica in self._replicas if replica.url not in urls]
        if not kept:
            raise ValueError("cannot drop every replica of the policy")
        self._replicas = kept
        self._turn = 0

    def _client(self, url: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=url, api_key=self._api_key, timeout=self.timeout, max_retries=0)

    def _follow_event_loop(self) -> None:
        """New clients and semaphore when called from another event loop than before.

        Trainers run each step's rollouts under their own ``asyncio.run``; the clients' pooled
        connections and a waited-on semaphore belong to the loop that made them and fail on the next.
        """
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop is loop:
            self._loop = loop
            return
        self._loop = loop
        self._semaphore = asyncio.Semaphore(self.max_concurrency)
        for replica in self._replicas:
            replica.client = self._client(replica.url)
        self._clients = [replica.client for replica in self._replicas]  # the old ones went with their loop

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "model": self.model}


def _sampling_fields(sampling: SamplingParams) -> dict[str, Any]:
    """The standard OpenAI request fields for ``sampling`` (unset ones left out, for strict hosted APIs)."""
    fields: dict[str, Any] = {
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
    }
    if sampling.stop:
        fields["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    return fields


def _ids_from_tokens(tokens: Sequence[str]) -> list[int] | None:
    if not all(t.startswith(_TOKEN_ID_PREFIX) for t in tokens):
        return None
    try:
        return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    except ValueError:
        return None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return exc.message


def _retry_after(exc: openai.APIStatusError) -> float:
    """The server's Retry-After in seconds (capped at a minute), or 0."""
    try:
        return min(float(exc.response.headers.get("retry-after", 0)), 60.0)
    except ValueError:
        return 0.0


def _image_refusal(error: PolicyError) -> ImageRejectedError | None:
    """``error`` of a request with images as :class:`ImageRejectedError` when the endpoint refused it for them, else ``None``."""
    cause = error.__cause__
    if not isinstance(cause, openai.APIStatusError):
        return None
    message = _error_message(cause)
    if cause.status_code == 413 or (
        cause.status_code == 400 and _TOO_LARGE.search(message) and not _CONTEXT.search(message)
    ):
        return ImageRejectedError(f"{error} (the request's images are too large for it)", too_large=True)
    if cause.status_code in (400, 422) and _IMAGES_REFUSED.search(message) and not _CONTEXT.search(message):
        return ImageRejectedError(
            f"{error}. The endpoint refused the screenshots in the conversation: it seems to serve a text-only "
            "model. Point it at a vision model, or send text only (AgentConfig(images=None); agentgym eval "
            "without --images)",
            too_large=False,
        )
    return None
