"""The policy interface the rollout engine drives: token-in/token-out generation and chat-level generation.

A policy turns a prompt into a :class:`Completion`. Two entry points:

* :meth:`Policy.generate` — **token mode**, for training: the prompt is token ids built by the
  agent loop with :attr:`Policy.chat_format`; the completion comes back as sampled ids with
  their logprobs, so trajectories are token-exact. :class:`~agentgym.rollout.hf_policy.HFPolicy`
  and :class:`~agentgym.rollout.openai_policy.OpenAIPolicy` against ``agentgym serve`` (or vLLM's
  completions endpoint) support it.
* :meth:`Policy.chat` — **chat mode**, for evaluation against any chat-completions endpoint:
  messages and tool schemas in, text and native tool calls out.

Concurrent calls are expected (the runner drives many episodes at once); implementations batch
them. Every completion records the :attr:`Policy.version` that produced it, so asynchronous
trainers can bound staleness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.rollout.chat import ChatFormat, Message

__all__ = ["Completion", "Policy", "PolicyError", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion. ``top_k=0`` and ``top_p=1.0`` switch those filters off;
    ``temperature=0`` is greedy decoding. ``top_logprobs=k`` asks for the k most likely tokens
    at every sampled position (:attr:`Completion.top_logprobs`), where the backend can tell."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0


@dataclass
class Completion:
    """One sampled reply.

    ``token_ids`` and ``logprobs`` are empty when the backend does not expose tokens (a chat
    endpoint without logprobs). ``finish_reason`` is ``"stop"`` (a stop token or string),
    ``"length"`` (``max_tokens`` reached) or ``"tool_calls"``. ``entropy`` is the mean per-token
    entropy of the sampling distribution, when known. ``tool_calls`` holds native tool calls in
    OpenAI form (chat mode only). ``usage`` is the request's ``prompt_tokens`` and
    ``completion_tokens``: the endpoint's own count when it reports one, or, for a chat through
    :attr:`Policy.chat_format`, the rendered prompt's and completion's ids (in chat mode the only
    token counts there are). ``top_logprobs`` holds, per sampled token, the ``(token id,
    logprob)`` pairs of the most likely tokens of the distribution it was drawn from, most likely
    first, when :attr:`SamplingParams.top_logprobs` asked for them (else it is empty).
    ``policy_version`` is the version of the weights that sampled it (a server's own report where
    it gives one); ``replica`` names the endpoint that served it (its base URL), for remote policies.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    policy_version: int = 0
    entropy: float | None = None
    tool_calls: list[dict] | None = None
    usage: dict | None = None
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    replica: str | None = None


class PolicyError(RuntimeError):
    """The policy could not produce a completion (endpoint down, retries exhausted, bad request)."""


class Policy:
    """Base class: subclasses implement :meth:`generate`, :meth:`chat`, or both.

    Attributes:
        name: a short label for logs and trajectory metadata.
        version: the weights' version; trainers bump it after each update.
        chat_format: the tokenizer + prefix-preserving chat template for token mode, or ``None``
            when the policy only speaks chat mode.
        context_window: prompt + completion tokens the model accepts, when known (the agent
            loop folds the context to fit it).
    """

    name: str = "policy"
    version: int = 0
    chat_format: ChatFormat | None = None
    context_window: int | None = None

    @property
    def supports_tokens(self) -> bool:
        return self.chat_format is not None

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Completion:
        """Sample a completion for ``prompt_ids`` (token mode)."""
        raise NotImplementedError(f"{type(self).__name__} does not support token-in/token-out generation")

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        """Sample a reply to ``messages`` (chat mode). By default renders with :attr:`chat_format` and calls :meth:`generate`.

        The completion's ``usage`` is then the tokens counted: the rendered prompt's and the completion's.
        """
        if self.chat_format is None:
            raise NotImplementedError(f"{type(self).__name__} supports neither chat nor token mode")
        prompt_ids = self.chat_format.prompt_ids(messages, tools)
        completion = await self.generate(prompt_ids, sampling)
        completion.text = self.chat_format.decode(completion.token_ids)
        completion.usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion.token_ids)}
        return completion

    async def aclose(self) -> None:
        """Release resources (HTTP sessions, worker threads)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "class": type(self).__name__}
