"""The shipped chat template is prefix-preserving, and ChatFormat builds multi-turn ids by concatenation, never re-tokenising."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from agentgym.models import tiny_model_path
from agentgym.rollout.chat import (
    PROBE_CONVERSATION,
    PROBE_TOOLS,
    ChatFormat,
    TemplateError,
    check_prefix_preserving,
    render,
)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(tiny_model_path())


text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
tool_call = st.fixed_dictionaries(
    {
        "id": st.just("call_1"),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["bash", "add"]),
                "arguments": st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2),
            }
        ),
    }
)
turn = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": text}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": text}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": text, "tool_calls": st.lists(tool_call, min_size=1, max_size=2)}
    ),
)
conversation = st.tuples(st.booleans(), text, st.lists(turn, min_size=1, max_size=8)).map(
    lambda t: ([{"role": "system", "content": t[1]}] if t[0] else []) + [{"role": "user", "content": t[1]}] + t[2]
)


@settings(max_examples=60, deadline=None)
@given(conversation, st.booleans())
def test_shipped_template_is_prefix_preserving_on_any_conversation(tokenizer, messages, with_tools):
    assert check_prefix_preserving(tokenizer, [messages], PROBE_TOOLS if with_tools else None) == []


def test_the_probe_passes_and_a_history_rewriting_template_is_refused(tokenizer):
    assert check_prefix_preserving(tokenizer, [PROBE_CONVERSATION], PROBE_TOOLS) == []
    rewriting = AutoTokenizer.from_pretrained(tiny_model_path())
    # Like Qwen3's template: reasoning of earlier assistant turns is dropped once a new user turn arrives.
    rewriting.chat_template = (
        "{%- for m in messages %}{%- if m.role == 'assistant' and not loop.last %}"
        "{{- '<|im_start|>assistant\\n' + m.content.split('</think>')[-1] + '<|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    assert check_prefix_preserving(
        rewriting,
        [
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "<think>hm</think>a"},
                {"role": "user", "content": "r"},
            ]
        ],
    )
    with pytest.raises(TemplateError, match="prefix-preserving"):
        ChatFormat(rewriting)


def test_continuation_keeps_sampled_ids_that_retokenising_would_change(tokenizer):
    chat = ChatFormat(tokenizer)
    messages = [{"role": "user", "content": "hello"}]
    prompt = chat.prompt_ids(messages)
    # Sample "return" one character at a time: a valid generation the tokenizer would never produce.
    sampled = [tokenizer.convert_tokens_to_ids(c) for c in "return"] + [chat.eos_token_id]
    assert chat.encode("return") != sampled[:-1]
    observation = {"role": "tool", "content": "ok"}
    continuation, rendered = chat.continuation_ids(messages, sampled, [observation])
    ids = prompt + sampled + continuation
    assert ids[len(prompt) : len(prompt) + len(sampled)] == sampled
    expected = render(tokenizer, [*messages, {"role": "assistant", "content": "return"}, observation], None, True)
    assert tokenizer.decode(ids) == expected == rendered


def test_a_completion_cut_at_max_tokens_gets_the_end_of_turn_as_env_tokens(tokenizer):
    chat = ChatFormat(tokenizer)
    messages = [{"role": "user", "content": "hi"}]
    sampled = chat.encode("abc")  # no stop token: the length limit cut it
    continuation, _ = chat.continuation_ids(messages, sampled, [{"role": "user", "content": "go on"}])
    assert tokenizer.decode(continuation).startswith("<|im_end|>\n<|im_start|>user\ngo on")
    stopped, _ = chat.continuation_ids(messages, sampled + [chat.eos_token_id], [{"role": "user", "content": "go on"}])
    assert tokenizer.decode(stopped).startswith("\n<|im_start|>user\ngo on")


def test_a_completion_ended_by_another_stop_token_is_closed_by_the_template(tokenizer):
    chat = ChatFormat(tokenizer)
    messages = [{"role": "user", "content": "hi"}]
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert endoftext in chat.stop_token_ids and endoftext != chat.eos_token_id
    continuation, _ = chat.continuation_ids(
        messages, chat.encode("abc") + [endoftext], [{"role": "user", "content": "more"}]
    )
    assert tokenizer.decode(continuation).startswith("<|im_end|>\n<|im_start|>user\nmore")


def test_encode_matches_the_tokenizer(tokenizer):
    chat = ChatFormat(tokenizer)
    text = render(tokenizer, PROBE_CONVERSATION, PROBE_TOOLS, True) + "ünï 😀 \x00"
    assert chat.encode(text) == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_decode_drops_trailing_stop_tokens_only(tokenizer):
    chat = ChatFormat(tokenizer)
    ids = chat.encode("<tool_call>x</tool_call>") + [chat.eos_token_id]
    assert chat.decode(ids) == "<tool_call>x</tool_call>"
