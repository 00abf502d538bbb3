"""PolicyUser and PolicyJudge: a simulated user, and a judge of natural-language assertions, played by any agentgym policy (an endpoint, a local Hugging Face model, the tiny model).

The policy gets the user's system prompt (for τ²: τ²'s own user-simulator guidelines and the
task's scenario, plus any steering directives: :meth:`agentgym.envs.user.UserState.instructions`),
the conversation from the user's side and the user's tools, in chat mode
(:meth:`agentgym.rollout.policy.Policy.chat`); its text is the user's turn and its native tool
calls the user's tool calls. Stop tokens in the text end the conversation as τ² does. Each turn
carries the tokens it cost (``UserTurn.tokens``: the completion's ``usage``, which a token-mode
policy counts with its tokenizer), which token budgets count.

Envs step synchronously in the env thread pool while policies are coroutines: give ``loop=`` (the
running loop the policy's client belongs to, e.g. the runner's) and the user's requests are
submitted to it; without one each request runs to completion in a fresh loop of the env's thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from agentgym.envs.user import UserSimulator, UserState, UserTurn
from agentgym.rollout.policy import Completion, Policy, SamplingParams

__all__ = ["PolicyJudge", "PolicyUser"]


class PolicyUser(UserSimulator):
    """A user simulator that asks ``policy`` for every turn (see the module docstring).

    Args:
        policy: any agentgym policy that speaks chat mode.
        sampling: how the user's turns are sampled (default: temperature 0, τ²'s default for its user).
        loop: the event loop the policy runs on, when the env steps outside it (see the module docstring).
    """

    name = "policy"

    def __init__(
        self, policy: Policy, sampling: SamplingParams | None = None, *, loop: asyncio.AbstractEventLoop | None = None
    ):
        self.policy = policy
        self.sampling = sampling or SamplingParams(max_tokens=512, temperature=0.0)
        self.loop = loop

    def _respond(self, state: UserState, conversation: Sequence[Mapping[str, Any]]) -> UserTurn:
        messages = [{"role": "system", "content": state.instructions()}, *(dict(m) for m in conversation)]
        completion = self._run(self.policy.chat(messages, state.tools or None, self.sampling))
        usage = completion.usage or {}
        counted = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        return UserTurn(completion.text.strip(), _tool_calls(completion), tokens=counted or None)

    def _run(self, coroutine: Coroutine[Any, Any, Completion]) -> Completion:
        if self.loop is not None:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()
        return asyncio.run(coroutine)


def _tool_calls(completion: Completion) -> list[dict]:
    """The completion's native tool calls as ``{"name", "arguments"}``; a call whose arguments are not a JSON object is dropped (the user's text stands)."""
    calls = []
    for call in completion.tool_calls or []:
        function = call.get("function", {})
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except (ValueError, TypeError):
            continue
        if isinstance(parsed, dict) and function.get("name"):
            calls.append({"name": function["name"], "arguments": parsed})
    return calls


class PolicyJudge:
    """A judge for envs that grade with a model (τ²'s NL assertions: ``Tau2Env(judge=PolicyJudge(policy))``): messages in, the policy's text out.

    Sampling defaults to greedy; ``loop`` as for :class:`PolicyUser`.
    """

    def __init__(
        self, policy: Policy, sampling: SamplingParams | None = None, *, loop: asyncio.AbstractEventLoop | None = None
    ):
        self.policy = policy
        self.sampling = sampling or SamplingParams(max_tokens=1024, temperature=0.0)
        self.loop = loop

    def __call__(self, messages: list[dict]) -> str:
        coroutine = self.policy.chat(messages, None, self.sampling)
        if self.loop is not None:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result().text
        return asyncio.run(coroutine).text
