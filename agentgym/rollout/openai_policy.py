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
  since guessing them from text would break token-exact training data.

Failures are retried here, not by the SDK (its client is built with ``max_retries=0``):
connection errors, timeouts, 429 and 5xx get ``max_retries`` more tries with exponential
backoff and jitter; other 4xx fail at once. Every attempt is bounded by ``timeout`` seconds in
total. When nothing works, :class:`~agentgym.rollout.policy.PolicyError` says which URL failed and how.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from typing import Any

from agentgym.extras import requires

with requires("eval"):
    import openai

from agentgym.rollout.chat import ChatFormat, Message
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams

__all__ = ["OpenAIPolicy"]

_TOKEN_ID_PREFIX = "token_id:"  # how vLLM renders tokens under return_tokens_as_token_ids


class OpenAIPolicy(Policy):
    """A policy served by an OpenAI-compatible HTTP endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
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
        max_concurrency: requests in flight at once (more calls wait their turn).
        version: the weights' version recorded on every completion.
        name: a label for logs; defaults to ``model``.
    """

    def __init__(
        self,
        base_url: str,
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
        version: int = 0,
        name: str | None = None,
    ):
        self.base_url = base_url
        self.model = model
        self.name = name or model
        self.version = version
        self.native_tools = native_tools
        self.logprobs = logprobs
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        if tokenizer is not None:
            if isinstance(tokenizer, (str, os.PathLike)):
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(tokenizer)
            self.chat_format = ChatFormat(tokenizer)
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._chat_extensions = True  # vLLM's return_token_ids, until the endpoint refuses it

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        request = {"model": self.model, "messages": list(messages), **_sampling_fields(sampling)}
        if tools and self.native_tools:
            request["tools"] = tools
        if self.logprobs:
            request["logprobs"] = True
        extra = {"top_k": sampling.top_k} if sampling.top_k > 0 else {}
        if self.logprobs and self._chat_extensions:
            try:
                response = await self._call(
                    self._client.chat.completions.create, **request, extra_body={**extra, "return_token_ids": True}
                )
            except PolicyError as exc:
                if not isinstance(exc.__cause__, openai.BadRequestError):
                    raise
                response = await self._call(self._client.chat.completions.create, **request, extra_body=extra or None)
                self._chat_extensions = False
        else:
            response = await self._call(self._client.chat.completions.create, **request, extra_body=extra or None)
        if not response.choices:
            raise PolicyError(f"{self.base_url} returned no choices")
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
            policy_version=self.version,
            entropy=None,
            tool_calls=tool_calls,
            usage={"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
            if usage is not None
            else None,
        )

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Completion:
        if self.chat_format is None:
            raise NotImplementedError("token mode needs the served model's tokenizer: pass OpenAIPolicy(tokenizer=...)")
        extra: dict[str, Any] = {"return_tokens_as_token_ids": True, "return_token_ids": True}
        if sampling.top_k > 0:
            extra["top_k"] = sampling.top_k
        response = await self._call(
            self._client.completions.create,
            model=self.model,
            prompt=list(prompt_ids),
            logprobs=1,
            extra_body=extra,
            **_sampling_fields(sampling),
        )
        if not response.choices:
            raise PolicyError(f"{self.base_url} returned no choices")
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
                f"{self.base_url} did not return the sampled token ids with their logprobs; token mode "
                "needs vLLM's return_token_ids or return_tokens_as_token_ids (vLLM, agentgym serve)"
            )
        return Completion(
            text=choice.text,
            token_ids=list(token_ids),
            logprobs=list(token_logprobs),
            finish_reason=choice.finish_reason or "stop",
            policy_version=self.version,
        )

    async def _call(self, create, **request):
        """``create(**request)``, retried on transient failures; raises PolicyError with the URL when it gives up."""
        async with self._semaphore:
            for attempt in range(self.max_retries + 1):
                try:
                    async with asyncio.timeout(self.timeout):
                        return await create(**request)
                except (openai.APITimeoutError, TimeoutError) as exc:
                    failure, cause, wait = f"did not answer within {self.timeout} s", exc, 0.0
                except openai.APIConnectionError as exc:
                    failure, cause, wait = f"is unreachable ({exc.__cause__ or exc})", exc, 0.0
                except openai.APIStatusError as exc:
                    failure, cause = f"answered HTTP {exc.status_code}: {_error_message(exc)}", exc
                    if exc.status_code != 429 and exc.status_code < 500:
                        raise PolicyError(f"OpenAI-compatible endpoint {self.base_url} {failure}") from exc
                    wait = _retry_after(exc)
                except openai.OpenAIError as exc:
                    raise PolicyError(f"OpenAI-compatible endpoint {self.base_url} failed: {exc}") from exc
                if attempt < self.max_retries:
                    await asyncio.sleep(max(wait, self.backoff * 2**attempt * random.uniform(0.5, 1.5)))
            attempts = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
            raise PolicyError(
                f"OpenAI-compatible endpoint {self.base_url} {failure} (gave up after {attempts})"
            ) from cause

    async def aclose(self) -> None:
        await self._client.close()

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
