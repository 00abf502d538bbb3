"""The desktop action language: parsing model text into tool calls and validating them into desktop actions."""

import pytest

from agentgym.actions import ToolCall, parse_action
from agentgym.envs.gui.actions import TOOLS, format_action, to_desktop_action
from agentgym.sandbox.desktop import Screen

SCREEN = Screen(1024, 768)


def action(text):
    parsed = parse_action(text, TOOLS)
    assert parsed.error is None, parsed.error
    (call,) = parsed.calls
    return to_desktop_action(call, SCREEN)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("click(10, 20)", {"action": "click", "x": 10, "y": 20}),
        ("double_click(x=5, y=6)", {"action": "double_click", "x": 5, "y": 6}),
        ("right_click(1023, 767)", {"action": "right_click", "x": 1023, "y": 767}),
        ("move(0, 0)", {"action": "move", "x": 0, "y": 0}),
        ("drag(1, 2, 300, 400)", {"action": "drag", "x1": 1, "y1": 2, "x2": 300, "y2": 400}),
        ("scroll(3)", {"action": "scroll", "dx": 0, "dy": 3}),
        ("scroll(-2, 4, 100, 200)", {"action": "scroll", "dx": 4, "dy": -2, "x": 100, "y": 200}),
        ('type("hi there\\n")', {"action": "type", "text": "hi there\n"}),
        ('key("ctrl+s")', {"action": "key", "keys": ["ctrl+s"]}),
        (
            'key("Enter esc ctrl+shift+Home PgDn cmd+F5")',
            {"action": "key", "keys": ["Return", "Escape", "ctrl+shift+Home", "Next", "super+F5"]},
        ),
        ('key("ctrl++")', {"action": "key", "keys": ["ctrl++"]}),
        (
            'key("RETURN control_l+KP_enter a A 1 + comma")',
            {"action": "key", "keys": ["Return", "Control_L+KP_Enter", "a", "A", "1", "+", "comma"]},
        ),
        ("wait(0.5)", {"action": "wait", "seconds": 0.5}),
        (
            '<tool_call>{"name": "click", "arguments": {"x": 3, "y": 4}}</tool_call>',
            {"action": "click", "x": 3, "y": 4},
        ),
    ],
)
def test_valid_calls_become_desktop_actions(text, expected):
    assert action(text) == (expected, None)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("click(1024, 10)", "outside the 1024x768 screen"),
        ("click(-1, 10)", "outside"),
        ("drag(0, 0, 10, 900)", "outside"),
        ("scroll(1, 0, 5)", "both x and y"),
        ("scroll(51)", "at most 50"),
        ('type("")', "needs some text"),
        ('type("' + "a" * 2001 + '")', "at most 2000"),
        ('key("")', "needs a key name"),
        ('key("ctrl+")', "not a key combination"),
        ('key("a;b")', "No such key name 'a;b'"),
        # xdotool reads these words as commands of its own (exec runs a program): never key names.
        ('key("exec")', "No such key name 'exec'"),
        ('key("ctrl+a exec xterm")', "No such key name 'exec'"),
        ('key("type hello")', "No such key name 'type'"),
        ('key("shift+search")', "No such key name 'search'"),
        ('key("Return sleep")', "No such key name 'sleep'"),
        ('key("' + "a " * 21 + '")', "at most 20"),
        ("wait(11)", "0 to 10 seconds"),
        ("wait(-1)", "0 to 10 seconds"),
    ],
)
def test_invalid_calls_are_errors_not_exceptions(text, problem):
    result, error = action(text)
    assert result is None and problem in error


def test_schema_errors_come_from_the_parser():
    parsed = parse_action("click(10)", TOOLS)
    assert "missing required argument" in parsed.error
    parsed = parse_action('click("a", 3)', TOOLS)
    assert "must be integer" in parsed.error


def test_done_and_fail_are_not_desktop_actions():
    assert to_desktop_action(ToolCall("done"), SCREEN) == ({"action": "done"}, None)
    assert {tool.name for tool in TOOLS} >= {
        "click",
        "double_click",
        "right_click",
        "move",
        "drag",
        "scroll",
        "type",
        "key",
        "wait",
        "done",
        "fail",
    }


def test_format_action_round_trips_through_the_parser():
    for text in ("click(10, 20)", 'key("ctrl+a ctrl+k")', "drag(1, 2, 3, 4)", 'type("x")'):
        desktop_action, _ = action(text)
        assert action(format_action(desktop_action))[0] == desktop_action
