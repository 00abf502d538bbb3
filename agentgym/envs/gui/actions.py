"""The desktop action language: pyautogui-like tools (click, drag, type, key, ...) and their validation into desktop actions.

Models write ``click(120, 45)``, ``type("hello")``, ``key("ctrl+s")`` or the same as JSON tool
calls (see :mod:`agentgym.actions`). :func:`to_desktop_action` checks what the schema cannot —
coordinates on the screen, key names, bounded waits — and returns either the action dict the
desktop helper runs or an error message for ``info["error"]``; it never raises.

Keys: ``key("ctrl+s")`` presses a combination; several, separated by spaces, are pressed in
order (``key("ctrl+a ctrl+k")``). Names are single characters, X keysyms from a fixed list
(:data:`KEY_NAMES`: ``Return``, ``BackSpace``, ``Home``, ``F5``, ``KP_Enter``, punctuation names
such as ``comma``) or the usual aliases (``enter``, ``esc``, ``backspace``, ``pgdn``, ``cmd``; see
:data:`KEY_ALIASES`). The list is closed on purpose: xdotool, which presses the keys, reads some
words (``exec``, ``type``, ``search``) as commands of its own, so a name it does not know is never
passed on.
"""

from __future__ import annotations

from typing import Any

from agentgym.actions import ToolCall, ToolSpec
from agentgym.sandbox.desktop import Screen

__all__ = ["TOOLS", "KEY_ALIASES", "KEY_NAMES", "to_desktop_action", "format_action", "MAX_WAIT_S", "MAX_TYPE_CHARS"]

MAX_WAIT_S = 10.0
MAX_TYPE_CHARS = 2000
MAX_SCROLL = 50
MAX_KEYS = 20

_INT = {"type": "integer"}


def _tool(name: str, description: str, required: list[str], **properties: dict) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": properties, "required": required})


def _point(verb: str) -> dict:
    return {
        "x": {**_INT, "description": f"pixels from the screen's left edge to {verb}"},
        "y": {**_INT, "description": f"pixels from the screen's top edge to {verb}"},
    }


TOOLS = [
    _tool("click", "Left-click at (x, y).", ["x", "y"], **_point("click")),
    _tool("double_click", "Double-click at (x, y).", ["x", "y"], **_point("double-click")),
    _tool("right_click", "Right-click at (x, y).", ["x", "y"], **_point("right-click")),
    _tool("move", "Move the pointer to (x, y) without clicking.", ["x", "y"], **_point("move to")),
    _tool(
        "drag",
        "Press the left button at (x1, y1), move to (x2, y2) and release.",
        ["x1", "y1", "x2", "y2"],
        x1=_INT,
        y1=_INT,
        x2=_INT,
        y2=_INT,
    ),
    _tool(
        "scroll",
        "Scroll the wheel: dy > 0 scrolls down, dy < 0 up, dx > 0 right, dx < 0 left "
        "(in wheel clicks), at (x, y) if given, else where the pointer is.",
        ["dy"],
        dy=_INT,
        dx=_INT,
        x=_INT,
        y=_INT,
    ),
    _tool("type", "Type text at the keyboard focus (\\n presses Return).", ["text"], text={"type": "string"}),
    _tool(
        "key",
        "Press a key or combination, e.g. 'ctrl+s', 'Return', 'shift+Home'; several separated by "
        "spaces are pressed in order.",
        ["combo"],
        combo={"type": "string"},
    ),
    _tool(
        "wait",
        f"Wait for the screen to change (at most {MAX_WAIT_S:g} seconds).",
        ["seconds"],
        seconds={"type": "number"},
    ),
    _tool("done", "Finish: the task is complete. This ends the episode and checks the result.", []),
    _tool(
        "fail", "Give up: the task cannot be done (e.g. what it asks for does not exist). This ends the episode.", []
    ),
]

#: The X keysyms (besides single characters) and modifiers that key() presses; names are matched
#: case-insensitively and passed on as spelled here.
KEY_NAMES = frozenset(
    {
        *("ctrl", "alt", "shift", "super", "meta"),
        *(f"{key}_{side}" for key in ("Control", "Shift", "Alt", "Super", "Meta") for side in "LR"),
        *("Return", "BackSpace", "Tab", "ISO_Left_Tab", "Escape", "Delete", "Insert", "space"),
        *("Home", "End", "Prior", "Next", "Page_Up", "Page_Down", "Up", "Down", "Left", "Right"),
        *("Menu", "Print", "Pause", "Scroll_Lock", "Caps_Lock", "Num_Lock"),
        *(f"F{n}" for n in range(1, 25)),
        *(f"KP_{n}" for n in range(10)),
        *(f"KP_{name}" for name in ("Enter", "Add", "Subtract", "Multiply", "Divide", "Decimal", "Equal")),
        *(f"KP_{name}" for name in ("Home", "End", "Prior", "Next", "Up", "Down", "Left", "Right", "Insert")),
        *("KP_Delete", "KP_Begin", "KP_Separator", "KP_Space", "KP_Tab"),
        *("exclam", "quotedbl", "numbersign", "dollar", "percent", "ampersand", "apostrophe", "parenleft"),
        *("parenright", "asterisk", "plus", "comma", "minus", "period", "slash", "colon", "semicolon"),
        *("less", "equal", "greater", "question", "at", "bracketleft", "backslash", "bracketright"),
        *("asciicircum", "underscore", "grave", "braceleft", "bar", "braceright", "asciitilde"),
    }
)
_KEY_NAMES = {name.lower(): name for name in KEY_NAMES}

#: Friendly names → X keysyms (case-insensitive), on top of :data:`KEY_NAMES`.
KEY_ALIASES = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "backspace": "BackSpace",
    "del": "Delete",
    "delete": "Delete",
    "tab": "Tab",
    "space": "space",
    "spacebar": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "insert": "Insert",
    "ins": "Insert",
    "ctrl": "ctrl",
    "control": "ctrl",
    "alt": "alt",
    "shift": "shift",
    "meta": "meta",
    "cmd": "super",
    "win": "super",
    "super": "super",
    **{f"f{n}": f"F{n}" for n in range(1, 13)},
}


def _key_name(part: str) -> str | None:
    """The keysym that ``part`` names, or None; single printable ASCII characters are keys as themselves."""
    if len(part) == 1 and "!" <= part <= "~":
        return part
    return KEY_ALIASES.get(part.lower()) or _KEY_NAMES.get(part.lower())


def _key_combo(combo: str) -> tuple[list[str] | None, str | None]:
    presses = combo.split()
    if not presses:
        return None, "key() needs a key name, e.g. key('Return') or key('ctrl+s')"
    if len(presses) > MAX_KEYS:
        return None, f"at most {MAX_KEYS} key presses per call, got {len(presses)}"
    keys = []
    for press in presses:
        # "ctrl++" is ctrl and the plus key: a trailing "+" after a "+" is the key itself.
        parts = [*press[:-2].split("+"), "+"] if press.endswith("++") else press.split("+")
        if press == "+":
            parts = ["+"]
        names = []
        for part in parts:
            if not part:
                return None, f"{press!r} is not a key combination (names joined by '+', e.g. 'ctrl+shift+Home')"
            name = _key_name(part)
            if name is None:
                return None, f"No such key name {part!r} (X keysyms such as 'Return', 'Home', 'F5', or one character)"
            names.append(name)
        keys.append("+".join(names))
    return keys, None


def to_desktop_action(call: ToolCall, screen: Screen) -> tuple[dict | None, str | None]:
    """A validated call as ``(action, None)``, or ``(None, error)``; ``done``/``fail`` are not desktop actions."""
    name, args = call.name, call.arguments
    points = [("x", "y")] if name in ("click", "double_click", "right_click", "move") else []
    if name == "drag":
        points = [("x1", "y1"), ("x2", "y2")]
    if name == "scroll" and ("x" in args or "y" in args):
        if not ("x" in args and "y" in args):
            return None, "scroll() takes both x and y, or neither"
        points = [("x", "y")]
    for px, py in points:
        x, y = int(args[px]), int(args[py])
        if not screen.contains(x, y):
            return None, (
                f"({x}, {y}) is outside the {screen.width}x{screen.height} screen "
                f"(x from 0 to {screen.width - 1}, y from 0 to {screen.height - 1})"
            )
    action: dict[str, Any] = {
        "action": name,
        **{k: int(v) for k, v in args.items() if k in ("x", "y", "x1", "y1", "x2", "y2")},
    }
    if name == "scroll":
        dx, dy = int(args.get("dx", 0)), int(args["dy"])
        if max(abs(dx), abs(dy)) > MAX_SCROLL:
            return None, f"scroll by at most {MAX_SCROLL} clicks per call"
        action.update(dx=dx, dy=dy)
    elif name == "type":
        if not args["text"]:
            return None, "type() needs some text"
        if len(args["text"]) > MAX_TYPE_CHARS:
            return None, f"type() takes at most {MAX_TYPE_CHARS} characters per call"
        action["text"] = args["text"]
    elif name == "key":
        keys, error = _key_combo(args["combo"])
        if error:
            return None, error
        action["keys"] = keys
    elif name == "wait":
        seconds = float(args["seconds"])
        if not 0 <= seconds <= MAX_WAIT_S:
            return None, f"wait() takes 0 to {MAX_WAIT_S:g} seconds, got {seconds:g}"
        action["seconds"] = seconds
    return action, None


def format_action(action: dict) -> str:
    """The action back in call syntax, for the observation text and logs."""
    arguments = {k: v for k, v in action.items() if k != "action"}
    if action["action"] == "key":
        arguments = {"combo": " ".join(action["keys"])}
    return f"{action['action']}({', '.join(repr(v) for v in arguments.values())})"
