"""Token-in/token-out chat formatting: prompt ids from messages, and the env tokens that follow a sampled completion.

Multi-turn training data must hold exactly the tokens the policy saw and sampled. Decoding a
completion and re-tokenising the whole conversation does not give that back (BPE merges across
the boundary, special tokens, invalid UTF-8 from byte-level sampling), so the agent loop never
does it: it keeps the sampled ids as they are and tokenises only the *new* text the chat template
adds after them (the end of the assistant turn, the observation, the next generation prompt).

That is sound only for a **prefix-preserving** template: rendering ``messages[:k]`` must be a
prefix of rendering ``messages[:k+1]``. :class:`ChatFormat` checks this on construction with a
probe conversation and refuses templates that rewrite history (Qwen3's, for example, drops
earlier ``<think>`` blocks); :func:`check_prefix_preserving` is the same check for any list of
conversations.
"""

from __future__ import annotations

from typing import Any, Sequence

Message = dict[str, Any]

PROBE_CONVERSATION: list[Message] = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "Task: make the tests pass."},
    {"role": "assistant", "content": 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'},
    {"role": "tool", "content": "setup.py\nsrc/"},
    {"role": "assistant", "content": "Next I read the code."},
    {"role": "user", "content": "Error: no tool call found."},
    {"role": "assistant", "content": "done"},
]
PROBE_TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]


class TemplateError(ValueError):
    """The tokenizer's chat template cannot be used for token-in/token-out rollouts."""


def check_prefix_preserving(tokenizer, conversations: Sequence[Sequence[Message]],
                            tools: list[dict] | None = None) -> list[str]:
    """Problems found (empty when fine): every rendered prefix, with the generation prompt, must prefix the next."""
    problems = []
    for conversation in conversations:
        for k in range(1, len(conversation)):
            if conversation[k]["role"] != "assistant":
                continue
            before = render(tokenizer, conversation[:k], tools, add_generation_prompt=True)
            after = render(tokenizer, conversation[:k + 1], tools, add_generation_prompt=False)
            if not after.startswith(before):
                problems.append(f"rendering {k} messages + generation prompt is not a prefix of rendering {k + 1}")
            elif not after[len(before):].startswith(conversation[k]["content"] or ""):
                problems.append(f"assistant message {k} is not rendered verbatim after the generation prompt")
            for j in range(k + 1, len(conversation) + 1):
                longer = render(tokenizer, conversation[:j], tools, add_generation_prompt=False)
                if not longer.startswith(after):
                    problems.append(f"rendering {k + 1} messages is not a prefix of rendering {j}")
                    break
    return problems


def render(tokenizer, messages: Sequence[Message], tools: list[dict] | None,
           add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tools=tools or None, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


class ChatFormat:
    """A tokenizer + its chat template, used for token-exact multi-turn prompts.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        check: verify the template is prefix-preserving (raises :class:`TemplateError` if not).
    """

    def __init__(self, tokenizer, *, check: bool = True):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        if check:
            problems = check_prefix_preserving(tokenizer, [PROBE_CONVERSATION], PROBE_TOOLS)
            if problems:
                raise TemplateError("chat template is not prefix-preserving, so multi-turn token ids "
                                    "cannot be built by concatenation: " + "; ".join(problems))
        self.eos_token_id = tokenizer.eos_token_id
        self.stop_token_ids = sorted({i for i in [tokenizer.eos_token_id, tokenizer.pad_token_id,
                                                  _token_id(tokenizer, "<|im_end|>"),
                                                  _token_id(tokenizer, "<|endoftext|>")] if i is not None})

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled ids, stop tokens left out (this is what the env receives)."""
        ids = list(ids)
        while ids and ids[-1] in self.stop_token_ids:
            ids.pop()
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def prompt_ids(self, messages: Sequence[Message], tools: list[dict] | None = None) -> list[int]:
        """The ids of the whole conversation followed by the generation prompt."""
        return self.encode(render(self.tokenizer, messages, tools, add_generation_prompt=True))

    def continuation_ids(self, messages: Sequence[Message], completion_ids: Sequence[int],
                         new_messages: Sequence[Message], tools: list[dict] | None = None) -> list[int]:
        """The env tokens that follow ``completion_ids`` so that the sequence renders ``messages + [reply] + new_messages``.

        ``messages`` ends where the completion was sampled (its generation prompt included);
        the reply is the assistant message whose content is :meth:`decode` of the completion.
        If the completion stopped on a stop token the template's own end-of-turn text is not
        repeated; if it hit the length limit, the end-of-turn tokens are added here (as env tokens).
        """
        reply = {"role": "assistant", "content": self.decode(completion_ids)}
        before = render(self.tokenizer, messages, tools, add_generation_prompt=True)
        after = render(self.tokenizer, [*messages, reply, *new_messages], tools, add_generation_prompt=True)
        if not after.startswith(before + reply["content"]):
            raise TemplateError("chat template rewrote earlier turns; token-exact continuation is impossible")
        tail = after[len(before) + len(reply["content"]):]
        stopped = bool(completion_ids) and completion_ids[-1] in self.stop_token_ids
        if stopped:
            stop_text = self.tokenizer.decode([completion_ids[-1]], skip_special_tokens=False)
            if not tail.startswith(stop_text):
                raise TemplateError(f"the template does not end an assistant turn with {stop_text!r}")
            tail = tail[len(stop_text):]
        return self.encode(tail)


def _token_id(tokenizer, token: str) -> int | None:
    token_id = tokenizer.convert_tokens_to_ids(token)
    return None if token_id is None or token_id == tokenizer.unk_token_id else token_id
