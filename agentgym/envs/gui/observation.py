"""The text half of a desktop observation: windows, focus, pointer and the apps' accessibility summaries.

The image half is the screenshot itself (:class:`agentgym.sandbox.desktop.DesktopState.image`).
The text leaves out X window ids and anything else that differs between two desktops in the
same state, so that a fork and a replay observe the same text.
"""

from __future__ import annotations

from agentgym.sandbox.desktop import DesktopState, Screen

__all__ = ["describe"]

#: Accessibility summaries longer than this are cut, so one app cannot flood the context.
MAX_A11Y_CHARS = 6000
#: The AT-SPI tree (real apps) is cut at this many characters, as OSWorld caps its linearized tree.
MAX_TREE_CHARS = 20000


def describe(state: DesktopState, screen: Screen, *, headline: str | None = None) -> str:
    """What the model reads next to the screenshot."""
    lines = [headline] if headline else []
    if state.error:
        lines.append(f"Error: {state.error}")
    lines.append(f"Screen {screen.width}x{screen.height}; pointer at ({state.pointer[0]}, {state.pointer[1]}).")
    if state.windows:
        lines.append("Windows (bottom to top):")
        for window in state.windows:
            mark = "  [focused]" if window["id"] == state.focused else ""
            lines.append(
                f"  {window['title']!r} at ({window['x']}, {window['y']}) size "
                f"{window['width']}x{window['height']}{mark}"
            )
    else:
        lines.append("No windows are open.")
    for app, summary in sorted(state.a11y.items()):
        summary = summary.rstrip("\n")
        if len(summary) > MAX_A11Y_CHARS:
            summary = summary[:MAX_A11Y_CHARS] + "\n  [... accessibility summary cut ...]"
        lines.append(f"Accessibility tree of {app}:\n{summary}")
    if state.tree is not None:
        tree = state.tree.rstrip("\n")
        if len(tree) > MAX_TREE_CHARS:
            tree = tree[:MAX_TREE_CHARS] + "\n[... accessibility tree cut ...]"
        lines.append(f"Accessibility tree (role, name, text, position, size):\n{tree}")
    if not state.stable:
        lines.append("(The screen was still changing when this screenshot was taken; wait() to let it settle.)")
    return "\n".join(lines)
