"""Parsing model replies into tool calls: every supported format, every error path, and arbitrary text."""

import ast
import functools
import json
import sys
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.actions import ToolCall, ToolSpec, parse_action, parse_python, validate_arguments

BASH = ToolSpec(
    "bash",
    "Run a command.",
    {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
        "required": ["command"],
    },
)
CLICK = ToolSpec(
    "click",
    "Click an element.",
    {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "button": {"type": "string", "enum": ["left", "right"]}},
        "required": ["id"],
    },
)
SUBMIT = ToolSpec("submit", "Finish.")
TOOLS = [BASH, CLICK, SUBMIT]
CODE = {"python": ("bash", "command"), "bash": ("bash", "command")}


def only_call(reply, **kwargs):
    parsed = parse_action(reply, TOOLS, **kwargs)
    assert parsed.error is None, parsed.error
    assert len(parsed.calls) == 1
    return parsed.calls[0]


def test_hermes_tags_multiple_calls_in_order():
    reply = (
        'I will look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    )
    parsed = parse_action(reply, TOOLS)
    assert [c.name for c in parsed.calls] == ["bash", "submit"]
    assert parsed.calls[0].arguments == {"command": "ls"}
    assert parsed.text == "I will look."
    assert parsed.error is None


def test_unterminated_tag_and_python_literal_body_are_accepted():
    call = only_call("<tool_call>{'name': 'click', 'arguments': {'id': 3}}")
    assert (call.name, call.arguments) == ("click", {"id": 3})


def test_openai_message_and_sdk_objects():
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "pwd"})}}
        ],
    }
    call = only_call(message)
    assert (call.id, call.arguments) == ("c1", {"command": "pwd"})
    sdk = SimpleNamespace(id="c2", function=SimpleNamespace(name="click", arguments='{"id": 5}'))
    assert only_call([sdk]).arguments == {"id": 5}
    assert only_call(ToolCall("submit")).name == "submit"


def test_bare_json_object_and_parameters_alias():
    assert only_call('{"name": "click", "parameters": {"id": 1}}').arguments == {"id": 1}
    assert only_call('```json\n{"name": "submit"}\n```').name == "submit"


def test_fenced_code_blocks_map_to_tools_only_when_configured():
    reply = "Let me run:\n```python\nprint(1)\n```"
    call = only_call(reply, code_block_tools=CODE)
    assert call.arguments == {"command": "print(1)\n"}
    assert parse_action(reply, TOOLS).error == "no tool call found in the reply"


def test_call_syntax_binds_positionals_in_schema_order():
    call = only_call('click(12, button="right")')
    assert call.arguments == {"id": 12, "button": "right"}
    parsed = parse_action('First print("x") then bash("echo (hi)") and submit()', TOOLS)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("bash", {"command": "echo (hi)"}), ("submit", {})]


def test_errors_are_reported_not_raised():
    cases = {
        "<tool_call>{not json</tool_call>": "not valid JSON",
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>': "unknown tool 'rm_rf'",
        '<tool_call>{"name": "bash", "arguments": {}}</tool_call>': "missing required argument(s) 'command'",
        '<tool_call>{"name": "click", "arguments": {"id": "3"}}</tool_call>': "argument 'id' must be integer",
        '<tool_call>{"name": "click", "arguments": {"id": true}}</tool_call>': "argument 'id' must be integer",
        '<tool_call>{"name": "click", "arguments": {"id": 1, "button": "middle"}}</tool_call>': "must be one of",
        '<tool_call>{"name": "click", "arguments": {"id": 1, "x": 2}}</tool_call>': "unknown argument 'x'",
        '<tool_call>{"name": "click", "arguments": [1]}</tool_call>': "must be a JSON object",
        "<tool_call>[1, 2]</tool_call>": "unsupported action type",
        "click(1, 2, 3)": "takes 2 argument(s), got 3",
        "click(id=os.system('x'))": "could not read the arguments",
        "just some prose": "no tool call found",
    }
    for reply, expected in cases.items():
        parsed = parse_action(reply, TOOLS)
        assert parsed.error and expected in parsed.error, (reply, parsed.error)


def test_valid_calls_survive_beside_invalid_ones():
    parsed = parse_action('<tool_call>{"name": "nope"}</tool_call><tool_call>{"name": "submit"}</tool_call>', TOOLS)
    assert [c.name for c in parsed.valid_calls] == ["submit"]
    assert "unknown tool 'nope'" in parsed.error


def test_validate_arguments_accepts_integral_floats_for_integers_and_ints_for_numbers():
    spec = ToolSpec("f", "", {"type": "object", "properties": {"i": {"type": "integer"}, "x": {"type": "number"}}})
    assert validate_arguments(spec, {"i": 3.0, "x": 2}) is None
    assert "must be integer" in validate_arguments(spec, {"i": 3.5})


def test_openai_schema_round_trip():
    schema = BASH.to_openai()
    assert schema["type"] == "function" and schema["function"]["name"] == "bash"
    assert schema["function"]["parameters"]["required"] == ["command"]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.binary(),
        st.builds(lambda a, b: f"<tool_call>{a}</tool_call>{b}", st.text(), st.text()),
        st.builds(lambda a: f"click({a})", st.text()),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda children: st.lists(children) | st.dictionaries(st.text(), children),
            max_leaves=10,
        ),
    )
)
def test_arbitrary_input_never_raises(reply):
    parsed = parse_action(reply, TOOLS, code_block_tools=CODE)
    assert parsed.error is None or isinstance(parsed.error, str)
    assert all(c.ok or isinstance(c.error, str) for c in parsed.calls)


class _Garbage:
    """A cycle with a finalizer: the collector runs Python code (and may hand the GIL over) wherever it triggers."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(50))


def test_replies_parsed_in_many_threads_at_once_all_parse():
    # Envs parse replies in the runner's worker threads. On CPython < 3.13 two overlapping AST builds
    # corrupt a shared recursion counter (gh-106905) and a valid call fails with a SystemError; a
    # garbage collection inside one build (it runs finalizers, which switch threads) makes them overlap.
    spec = ToolSpec("put", "", {"type": "object", "properties": {"items": {"type": "array"}}})
    items = list(range(100))  # a long build: collections land inside it
    errors: list[str] = []

    def parse_many():
        for _ in range(1000):
            for _ in range(5):
                _Garbage()
            parsed = parse_action(f"put({items})", [spec])
            if parsed.error is not None or parsed.calls[0].arguments != {"items": items}:
                errors.append(str(parsed.error))
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=parse_many) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]


def test_a_parse_that_another_threads_ast_build_broke_is_parsed_again(monkeypatch):
    """Builds outside agentgym (a traceback formatted in another thread parses source on CPython 3.11) cannot take
    our lock; the counter they corrupt starts afresh at each build, so parse_python builds again (CI met this:
    asyncio logged an unread task's traceback while this file's threads parsed replies)."""
    real, calls = ast.parse, []

    def overlapped(
        source, *args, failures=2, message="AST constructor recursion depth mismatch (before=27, after=80)", **kwargs
    ):
        calls.append(source)
        if len(calls) <= failures:
            raise SystemError(message)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", overlapped)
    parsed = parse_action("put([1, 2])", [ToolSpec("put", "", {"type": "object", "properties": {"items": {}}})])
    assert parsed.error is None and parsed.calls[0].arguments == {"items": [1, 2]} and len(calls) == 3

    calls.clear()
    monkeypatch.setattr(ast, "parse", functools.partial(overlapped, failures=100))
    with pytest.raises(SystemError, match="mismatch"):
        parse_python("x")
    assert len(calls) == 5  # a bounded number of tries, then the error

    calls.clear()
    monkeypatch.setattr(ast, "parse", functools.partial(overlapped, message="some other interpreter error"))
    with pytest.raises(SystemError, match="other"):
        parse_python("x")
    assert len(calls) == 1  # only the race's error is tried again


def test_a_solution_step_that_is_a_function_is_an_error_that_says_how_to_play_it():
    parsed = parse_action(lambda text: "submit()", [ToolSpec("submit", "", {"type": "object", "properties": {}})])
    assert "a function is not an action" in parsed.error and "agentgym.run_solution" in parsed.error
