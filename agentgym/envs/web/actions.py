"""The web action mini-language: tool specs for every browser action and the code that performs each one on a Playwright page.

Models write actions in call syntax (``click(12)``, ``fill(7, "blue mug")``) or as tool calls;
:mod:`agentgym.actions` parses both against :func:`web_tools`. Element actions take the
bracketed ids of the observation tree; pixel actions (``mouse_click``, ``mouse_drag``,
``keyboard_type``) serve screenshot-only agents. Every failure the model can cause — an id not
on the page, an element that cannot be clicked, a navigation outside the env's sites — raises
:class:`ActionError`, whose message goes back to the model; nothing here crashes the env.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urljoin

from agentgym.actions import ToolSpec

__all__ = ["ActionError", "web_tools", "perform", "ELEMENT_ACTIONS", "TERMINAL_ACTIONS"]


class ActionError(Exception):
    """The model's action could not be performed; the message says why."""


def _spec(name: str, description: str, **properties: dict) -> ToolSpec:
    required = [key for key, schema in properties.items() if not schema.pop("optional", False)]
    return ToolSpec(name, description, {"type": "object", "properties": properties, "required": required})


def _id(description: str = "the element's id, the number in brackets in the page text") -> dict:
    return {"type": "integer", "description": description}


def _int(description: str) -> dict:
    return {"type": "integer", "description": description}


def _str(description: str, optional: bool = False) -> dict:
    return {"type": "string", "description": description, "optional": optional}


def _element_tools() -> list[ToolSpec]:
    return [
        _spec("click", "Click an element.", id=_id()),
        _spec("dblclick", "Double-click an element.", id=_id()),
        _spec("hover", "Move the mouse over an element.", id=_id()),
        _spec("fill", "Replace the text of a text field with `text`.", id=_id(), text=_str("the new text")),
        _spec(
            "select_option",
            "Choose option(s) of a select box by their visible text.",
            id=_id(),
            options={
                "type": ["string", "array"],
                "items": {"type": "string"},
                "description": "an option's text, or a list of them for a multi-select",
            },
        ),
        _spec("check", "Tick a checkbox or radio button (no change if already ticked).", id=_id()),
        _spec("uncheck", "Untick a checkbox (no change if not ticked).", id=_id()),
    ]


def _page_tools() -> list[ToolSpec]:
    return [
        _spec(
            "press",
            "Press a key or a combination on the focused element, e.g. Enter, Control+a.",
            key_combo=_str("Playwright key names joined by +"),
        ),
        _spec("scroll", "Scroll the page by dx, dy pixels.", dx=_int("pixels right"), dy=_int("pixels down")),
        _spec(
            "goto", "Open a URL (only the task's sites are reachable).", url=_str("absolute, or relative to the page")
        ),
        _spec("go_back", "Go back in the tab's history."),
        _spec("go_forward", "Go forward in the tab's history."),
        _spec("new_tab", "Open a new empty tab and focus it."),
        _spec("tab_focus", "Focus the tab with this index (see Tabs).", index=_int("the tab's index")),
        _spec("tab_close", "Close the focused tab."),
        _spec(
            "answer",
            "Finish the task, giving the answer if the task asks a question.",
            text=_str("the answer; empty for tasks that ask no question", optional=True),
        ),
        _spec("noop", "Do nothing this turn (e.g. wait for the page)."),
    ]


def _pixel_tools() -> list[ToolSpec]:
    return [
        _spec(
            "mouse_click",
            "Click at pixel (x, y) of the screenshot.",
            x=_int("pixels from the left"),
            y=_int("pixels from the top"),
        ),
        _spec(
            "mouse_drag",
            "Drag the mouse from (x1, y1) to (x2, y2).",
            x1=_int("start x"),
            y1=_int("start y"),
            x2=_int("end x"),
            y2=_int("end y"),
        ),
        _spec("keyboard_type", "Type text with the keyboard into whatever has focus.", text=_str("the text")),
    ]


#: Actions that name an element by id.
ELEMENT_ACTIONS = frozenset(spec.name for spec in _element_tools())
#: Actions that end the episode.
TERMINAL_ACTIONS = frozenset({"answer"})


def web_tools(*, pixel: bool = True) -> list[ToolSpec]:
    """Every web action; ``pixel=False`` leaves out the screenshot-coordinate ones."""
    return _element_tools() + _page_tools() + (_pixel_tools() if pixel else [])


async def perform(session: Any, name: str, arguments: dict, *, timeout_ms: float, viewport: tuple[int, int]) -> None:
    """Perform one validated action on the session's focused tab; raises :class:`ActionError`."""
    from playwright.async_api import Error as PlaywrightError

    try:
        if name in ELEMENT_ACTIONS:
            await _element_action(session.page, name, arguments, timeout_ms)
        elif name in _PAGE_ACTIONS:
            await _PAGE_ACTIONS[name](session, arguments, timeout_ms, viewport)
        else:
            raise ActionError(f"{name} is not a web action")
        await _settle(session, timeout_ms)
    except PlaywrightError as exc:
        raise ActionError(_short(exc)) from None


async def _element_action(page: Any, name: str, arguments: dict, timeout_ms: float) -> None:
    element_id = arguments["id"]
    locator = page.locator(f'[data-agentgym-id="{int(element_id)}"]')
    # One round trip to the page for both questions (whether it exists, what a click on it opens).
    opens = await locator.evaluate_all(_CLICK_OPENS_JS)
    if opens is None:
        raise ActionError(f"there is no element [{element_id}] on this page; use an id shown in brackets")
    locator = locator.first
    if name == "click" and opens == "tab":
        # The new tab's "page" event can arrive after click() returns; wait for it, so the
        # observation already shows the tab (focused, as a browser would).
        async with page.context.expect_page(timeout=timeout_ms):
            await locator.click(timeout=timeout_ms)
    elif name == "click" and opens == "download":
        # A download link starts no navigation for click() to wait for, and the browser refuses
        # the file only once the server answers: wait for that, so this step's observation
        # reports it. A server that never answers leaves the click done and nothing reported.
        refused = asyncio.ensure_future(page.wait_for_event("download", timeout=timeout_ms))
        refused.add_done_callback(lambda done: done.cancelled() or done.exception())  # a timeout is no error
        try:
            await locator.click(timeout=timeout_ms)
            await asyncio.wait([refused])
        finally:
            refused.cancel()
    elif name == "click":
        await locator.click(timeout=timeout_ms)
    elif name == "dblclick":
        await locator.dblclick(timeout=timeout_ms)
    elif name == "hover":
        await locator.hover(timeout=timeout_ms)
    elif name == "fill":
        await locator.fill(arguments["text"], timeout=timeout_ms)
    elif name == "select_option":
        options = arguments["options"]
        labels = [options] if isinstance(options, str) else [str(o) for o in options]
        tag = await locator.evaluate("el => el.tagName")
        if tag != "SELECT":
            raise ActionError(f"[{element_id}] is not a select box")
        available = await locator.evaluate("el => Array.from(el.options).map(o => o.text.trim())")
        missing = [label for label in labels if label not in available]
        if missing:
            raise ActionError(
                f"[{element_id}] has no option {json.dumps(missing[0])}; its options are {json.dumps(available)}"
            )
        await locator.select_option(label=labels, timeout=timeout_ms)
    elif name in ("check", "uncheck"):
        kind = await locator.evaluate("el => el.tagName === 'INPUT' ? el.type : el.getAttribute('role')")
        if kind not in ("checkbox", "radio", "switch"):
            raise ActionError(f"[{element_id}] is not a checkbox or radio button")
        if name == "uncheck" and kind == "radio":
            raise ActionError(f"[{element_id}] is a radio button; choose another option instead of unchecking")
        await (locator.check if name == "check" else locator.uncheck)(timeout=timeout_ms)


# null when no element matches; else what clicking the first one opens: "tab", "download" or "".
_CLICK_OPENS_JS = """els => {
  if (els.length === 0) return null;
  // getAttribute, not .target: a form control named "target" shadows form.target.
  const owner = els[0].closest('a[href], area[href]') || els[0].form;
  const target = (owner && owner.getAttribute('target')) || '';
  if (target !== '' && !['_self', '_parent', '_top'].includes(target.toLowerCase())) return 'tab';
  // The download attribute counts on same-origin, blob: and data: links only (a browser navigates to others).
  const link = els[0].closest('a[href][download], area[href][download]');
  if (link && (link.origin === location.origin || ['blob:', 'data:'].includes(link.protocol))) return 'download';
  return '';
}"""


async def _press(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    # Through the focused element's locator, Playwright waits for a navigation the key starts
    # (Enter submitting a form); the bare keyboard does not.
    focused = session.page.locator("*:focus")
    if await focused.count():
        await focused.first.press(arguments["key_combo"], timeout=timeout_ms)
    else:
        await session.page.keyboard.press(arguments["key_combo"])


async def _scroll(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    await session.page.mouse.wheel(arguments["dx"], arguments["dy"])
    # Wheel events scroll asynchronously; wait a frame so the next observation sees the result.
    await session.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


async def _goto(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    current = session.page.url
    url = urljoin(current if current.startswith("http") else "", session.resolve(arguments["url"].strip()))
    if not session.allows(url):
        allowed = ", ".join(sorted(session.display(origin) for origin in session.allowed_origins)) or "none"
        raise ActionError(f"{session.display(url)} is outside the sites of this task ({allowed}); it was not opened")
    await session.page.goto(url, wait_until="load", timeout=timeout_ms * 3)


async def _go_back(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    if await session.page.go_back(wait_until="load", timeout=timeout_ms * 3) is None:
        raise ActionError("there is no previous page in this tab")


async def _go_forward(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    if await session.page.go_forward(wait_until="load", timeout=timeout_ms * 3) is None:
        raise ActionError("there is no next page in this tab")


async def _new_tab(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    await session.new_page()


async def _tab_focus(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    index = arguments["index"]
    if not 0 <= index < len(session.pages):
        raise ActionError(f"there is no tab {index}; tabs are numbered 0 to {len(session.pages) - 1}")
    session.active = index
    await session.page.bring_to_front()


async def _tab_close(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    if len(session.pages) == 1:
        raise ActionError("this is the last tab; it cannot be closed")
    await session.close_page(session.active)
    await session.page.bring_to_front()


async def _nothing(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    return None


def _check_point(x: int, y: int, viewport: tuple[int, int]) -> None:
    width, height = viewport
    if not (0 <= x < width and 0 <= y < height):
        raise ActionError(f"({x}, {y}) is outside the {width}x{height} viewport")


async def _mouse_click(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    _check_point(arguments["x"], arguments["y"], viewport)
    await session.page.mouse.click(arguments["x"], arguments["y"])
    await _await_navigation(session.page)


async def _mouse_drag(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    points = [(arguments["x1"], arguments["y1"]), (arguments["x2"], arguments["y2"])]
    for x, y in points:
        _check_point(x, y, viewport)
    mouse = session.page.mouse
    await mouse.move(*points[0])
    await mouse.down()
    await mouse.move(*points[1], steps=8)
    await mouse.up()
    await _await_navigation(session.page)


async def _keyboard_type(session: Any, arguments: dict, timeout_ms: float, viewport: tuple[int, int]) -> None:
    await session.page.keyboard.type(arguments["text"])
    await _await_navigation(session.page)


_PAGE_ACTIONS = {
    "press": _press,
    "scroll": _scroll,
    "goto": _goto,
    "go_back": _go_back,
    "go_forward": _go_forward,
    "new_tab": _new_tab,
    "tab_focus": _tab_focus,
    "tab_close": _tab_close,
    "answer": _nothing,
    "noop": _nothing,
    "mouse_click": _mouse_click,
    "mouse_drag": _mouse_drag,
    "keyboard_type": _keyboard_type,
}


async def _await_navigation(page: Any) -> None:
    # Raw mouse input does not wait for the navigation it may start: give it a moment to begin,
    # after which _settle waits for the load.
    await page.wait_for_timeout(_NAVIGATION_GRACE_MS)


_NAVIGATION_GRACE_MS = 100


async def _settle(session: Any, timeout_ms: float) -> None:
    """Wait until a navigation the action started has loaded (clicks only wait for it to begin)."""
    from playwright.async_api import Error as PlaywrightError

    for page in list(session.pages):
        try:
            await page.wait_for_load_state("load", timeout=timeout_ms * 3)
        except PlaywrightError:
            pass  # a page that never finishes loading is still observable as it is


def _short(exc: Exception) -> str:
    """Playwright's message without its multi-line call log (which speaks of locators, not ids)."""
    message = str(exc).split("Call log:")[0].strip()
    message = message.replace('locator("[data-agentgym-id=', "element (").replace('"]")', ")")
    return message.splitlines()[0] if message else type(exc).__name__
