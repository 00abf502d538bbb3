"""The in-container accessibility-tree walk: the desktop's AT-SPI tree linearized as OSWorld does, bounded.

Run by the desktop helper (``deskctl.py``) as ``/usr/bin/python3 -I -c <this source> MAX_NODES MAX_CHARS``
in the desktop-apps image (``python3-pyatspi`` and its ``gi`` bindings are there; nothing of agentgym is),
under a wall-clock timeout: an app that does not answer its accessibility calls cannot stall the step.
It prints one line per node that is showing, visible, on the screen and has a name or text
(``role<TAB>name<TAB>text<TAB>(x, y)<TAB>(width, height)``, OSWorld's linearized columns less the
class and description), depth first, and stops after MAX_NODES nodes or MAX_CHARS characters.

Tables are read through their Table interface, a bounded window of rows and columns, and never by
their children: LibreOffice Calc's sheet is a table of 2^20 rows by 16384 columns whose child list
would enumerate every cell (OSWorld special-cases Calc for the same reason). The window is the
first run of rows (columns) whose first cell is showing, and only cells with text are listed, so
what the agent gets is the filled part of the visible sheet.
"""

import sys

import gi

gi.require_version("Atspi", "2.0")
from gi.repository import Atspi  # noqa: E402

MAX_DEPTH = 40
MAX_CHILDREN = 500
TABLE_ROWS = 40
TABLE_COLUMNS = 16
TEXT_CHARS = 200
NAME_CHARS = 200


def clean(value, limit):
    return " ".join((value or "").split())[:limit]


def node_line(node, screen):
    """The node's line, or None when it is hidden, off the screen or has nothing to say."""
    states = node.get_state_set()
    if not (states.contains(Atspi.StateType.SHOWING) and states.contains(Atspi.StateType.VISIBLE)):
        return None
    box = node.get_extents(Atspi.CoordType.SCREEN)
    if box.width <= 0 or box.height <= 0 or box.x + box.width <= 0 or box.y + box.height <= 0:
        return None
    if box.x >= screen[0] or box.y >= screen[1]:
        return None
    name = clean(node.get_name(), NAME_CHARS)
    text = ""
    if node.get_text_iface() is not None:
        count = Atspi.Text.get_character_count(node)
        text = clean(Atspi.Text.get_text(node, 0, min(count, TEXT_CHARS)), TEXT_CHARS)
    role = node.get_role_name()
    if not text and (not name or role == "table cell"):  # an empty cell's name (its address) says nothing
        return None
    return f"{role}\t{name}\t{text}\t({box.x}, {box.y})\t({box.width}, {box.height})"


def showing(node):
    return node is not None and node.get_state_set().contains(Atspi.StateType.SHOWING)


def visible_span(count, cell):
    """The first run of indices (at most the bound) whose cells are showing: the part of a table on screen."""
    span = []
    for index in range(count):
        if showing(cell(index)):
            span.append(index)
        elif span:
            break
    return span


def children(node):
    table = node.get_table_iface()
    if table is not None:
        rows = visible_span(
            min(Atspi.Table.get_n_rows(node), TABLE_ROWS), lambda r: Atspi.Table.get_accessible_at(node, r, 0)
        )
        columns = visible_span(
            min(Atspi.Table.get_n_columns(node), TABLE_COLUMNS), lambda c: Atspi.Table.get_accessible_at(node, 0, c)
        )
        for row in rows:
            for column in columns:
                yield Atspi.Table.get_accessible_at(node, row, column)
        return
    for index in range(min(node.get_child_count(), MAX_CHILDREN)):
        yield node.get_child_at_index(index)


def main():
    max_nodes, max_chars = int(sys.argv[1]), int(sys.argv[2])
    screen = (int(sys.argv[3]), int(sys.argv[4]))
    lines, size = ["role\tname\ttext\tposition\tsize"], 0
    stack = [(Atspi.get_desktop(0), 0)]
    while stack and len(lines) <= max_nodes:
        node, depth = stack.pop()
        if node is None:
            continue
        try:
            line = node_line(node, screen) if depth else None
            kids = list(children(node)) if depth < MAX_DEPTH else []
        except Exception:  # an app that went away mid-walk, or a node without the interface it claimed
            continue
        if line is not None:
            if size + len(line) > max_chars:
                break
            lines.append(line)
            size += len(line) + 1
        stack.extend((kid, depth + 1) for kid in reversed(kids))
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":  # run as `python3 -I -c <source>`; importing it walks nothing
    main()
