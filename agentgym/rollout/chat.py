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

from collections.abc import Sequence
from typing import Any

Message = dict[str, Any]

PROBE_CONVERSATION: list[Message] = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "Task: make the tests pass."},
    # Reasoning in an earlier turn: templates that strip old <think> blocks fail on it.
    {
        "role": "assistant",
        "content": '<think>The repo layout first.</think>Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
    },
    {"role": "tool", "content": "setup.py\nsrc/"},
    {"role": "assistant", "content": "Next I read the code."},
    {"role": "user", "content": "Error: no tool call found."},
    {"role": "assistant", "content": "done"},
]
PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]


class TemplateError(ValueError):
    """The tokenizer's chat template cannot be used for token-in/token-out rollouts."""


def check_prefix_preserving(
    tokenizer, conversations: Sequence[Sequence[Message]], tools: list[dict] | None = None
) -> list[str]:
    """Problems found (empty when fine): every rendered prefix, with the generation prompt, must prefix the next."""
    problems = []
    for conversation in conversations:
        for k in range(1, len(conversation)):
            if conversation[k]["role"] != "assistant":
                continue
            before = render(tokenizer, conversation[:k], tools, add_generation_prompt=True)
            after = render(tokenizer, conversation[: k + 1], tools, add_generation_prompt=False)
            if not after.startswith(before):
                problems.append(f"rendering {k} messages + generation prompt is not a prefix of rendering {k + 1}")
            elif not after[len(before) :].startswith(conversation[k]["content"] or ""):
                problems.append(f"assistant message {k} is not rendered verbatim after the generation prompt")
            for j in range(k + 1, len(conversation) + 1):
                longer = render(tokenizer, conversation[:j], tools, add_generation_prompt=False)
                if not longer.startswith(after):
                    problems.append(f"rendering {k + 1} messages is not a prefix of rendering {j}")
                    break
    return problems


def render(tokenizer, messages: Sequence[Message], tools: list[dict] | None, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        list(messages), tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt
    )


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
                raise TemplateError(
                    "chat template is not prefix-preserving, so multi-turn token ids "
                    "cannot be built by concatenation: " + "; ".join(problems)
                )
        self.eos_token_id = tokenizer.eos_token_id
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self.stop_token_ids = sorted(
            {
                i
                for i in [
                    tokenizer.eos_token_id,
                    tokenizer.pad_token_id,
                    _token_id(tokenizer, "<|im_end|>"),
                    _token_id(tokenizer, "<|endoftext|>"),
                ]
                if i is not None
            }
        )

    def encode(self, text: str) -> list[int]:
        # The Rust tokenizer directly: half the cost of the Python wrapper, same ids.
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of sampled ids, stop tokens left out (this is what the env receives)."""
        ids = list(ids)
        while ids and ids[-1] in self.stop_token_ids:
            ids.pop()
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def render_prompt(self, messages: Sequence[Message], tools: list[dict] | None = None) -> str:
        """The text of the whole conversation followed by the generation prompt."""
        return render(self.tokenizer, messages, tools, add_generation_prompt=True)

    def prompt_ids(self, messages: Sequence[Message], tools: list[dict] | None = None) -> list[int]:
        """The ids of :meth:`render_prompt`."""
        return self.encode(self.render_prompt(messages, tools))

    def continuation_ids(
        self,
        messages: Sequence[Message],
        completion_ids: Sequence[int],
        new_messages: Sequence[Message],
        tools: list[dict] | None = None,
        *,
        rendered: str | None = None,
    ) -> tuple[list[int], str]:
        """The env tokens that follow ``completion_ids`` so that the sequence renders ``messages + [reply] + new_messages``.

        Returns the ids and the rendering (with the generation prompt) of the extended
        conversation; pass that back as ``rendered`` on the next turn, which saves rendering
        the whole conversation a second time per turn (``rendered`` must be the rendering of
        ``messages`` with the generation prompt).

        ``messages`` ends where the completion was sampled (its generation prompt included);
        the reply is the assistant message whose content is :meth:`decode` of the completion.
        If the completion stopped on the template's own end-of-turn token, that text is not
        repeated; if it hit the length limit, or stopped on another stop token (``<|endoftext|>``
        where the template ends turns with ``<|im_end|>``), the template's end-of-turn text is
        added here, as env tokens after what the model sampled.
        """
        reply = {"role": "assistant", "content": self.decode(completion_ids)}
        before = rendered if rendered is not None else self.render_prompt(messages, tools)
        # Through render_prompt, so that a subclass's rendering (a vision format's image tokens) applies to both.
        after = self.render_prompt([*messages, reply, *new_messages], tools)
        if not after.startswith(before + reply["content"]):
            raise TemplateError("chat template rewrote earlier turns; token-exact continuation is impossible")
        tail = after[len(before) + len(reply["content"]) :]
        if completion_ids and completion_ids[-1] in self.stop_token_ids:
            stop_text = self.tokenizer.decode([completion_ids[-1]], skip_special_tokens=False)
            if tail.startswith(stop_text):
                tail = tail[len(stop_text) :]
        return self.encode(tail), after


def _token_id(tokenizer, token: str) -> int | None:
    token_id = tokenizer.convert_tokens_to_ids(token)
    return None if token_id is None or token_id == tokenizer.unk_token_id else token_id
