"""A scripted token-mode policy for tests that need exact control over replies (it stands in for sampling only).

Replies are encoded with the real tiny tokenizer and ended with the real stop token, so the
agent loop, chat template and token accounting under test are all real. Every prompt it is
given is recorded, which is what the token-accounting tests compare against.
"""

from __future__ import annotations

from collections.abc import Callable

from transformers import AutoTokenizer

from agentgym.models import tiny_model_path
from agentgym.rollout.chat import ChatFormat
from agentgym.rollout.policy import Completion, Policy


class ScriptedPolicy(Policy):
    name = "scripted"

    def __init__(self, replies: list[str] | Callable[[str], str], *, stop: bool = True):
        """``replies`` are given in turn (cycling), or made by a function of the prompt's text."""
        self.chat_format = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_path()))
        self.replies = replies if callable(replies) else list(replies)
        self.stop = stop
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        if callable(self.replies):
            text = self.replies(self.chat_format.tokenizer.decode(list(prompt_ids), skip_special_tokens=False))
        else:
            text = self.replies[(len(self.prompts) - 1) % len(self.replies)]
        ids = self.chat_format.encode(text)[: sampling.max_tokens]
        stopped = self.stop and len(ids) < sampling.max_tokens
        if stopped:
            ids.append(self.chat_format.eos_token_id)
        return Completion(
            text=self.chat_format.decode(ids),
            token_ids=ids,
            logprobs=[-0.5] * len(ids),
            finish_reason="stop" if stopped else "length",
            policy_version=self.version,
            entropy=1.0,
        )
