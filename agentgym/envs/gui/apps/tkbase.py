"""Shared base of the project's Tk desktop apps: a fixed window, no blinking, and state files written after every event.

Runs inside the desktop container with the system python3 (no agentgym there). After each key,
button or focus event the app writes, once Tk is idle, two files:

* ``/tmp/agentgym/state/<name>.json`` — everything a relaunch needs to come back pixel-identical
  (the app's model plus every entry's text, cursor, selection and scroll, list selections, the
  focused widget), read back at start when it exists; this is how a forked desktop rebuilds the
  in-memory UI state that ``docker commit`` cannot hold;
* ``/tmp/agentgym/a11y/<name>.txt`` — an accessibility summary (widget class, label or value,
  screen rectangle) that the observation text shows the model.

Widgets are laid out with ``place`` at fixed pixel positions, so the scripted reference
solutions (and agents) can rely on coordinates.
"""

import json
import os
import tkinter as tk

STATE_DIR = "/tmp/agentgym/state"
A11Y_DIR = "/tmp/agentgym/a11y"
FONT = ("DejaVu Sans", 11)


class TkApp:
    """Subclasses set ``name`` and implement ``build``; ``model_state``/``load_model_state`` carry app data."""

    name = "app"
    width, height = 800, 600

    def __init__(self, title):
        self.root = tk.Tk(className=self.name)
        self.root.title(title)
        self.root.geometry(f"{self.width}x{self.height}+0+0")
        self.root.resizable(False, False)
        # A blinking insert cursor would make two screenshots of the same state differ.
        self.root.option_add("*insertOffTime", 0)
        self.root.option_add("*Font", FONT)
        self._pending = False
        self.build()
        saved = self._read_state()
        if saved is not None:
            self.root.update_idletasks()
            self.load_model_state(saved.get("model", {}))
            self._load_widgets(saved.get("widgets", {}), saved.get("focus"))
        for sequence in ("<KeyRelease>", "<ButtonRelease>", "<FocusIn>", "<Map>"):
            self.root.bind_all(sequence, self.changed, add="+")

    # ------------------------------------------------------------------ for subclasses
    def build(self):
        raise NotImplementedError

    def model_state(self):
        return {}

    def load_model_state(self, state):
        pass

    def run(self):
        self.root.mainloop()

    def changed(self, event=None):
        """Schedule writing the state and accessibility files once Tk is idle."""
        if not self._pending:
            self._pending = True
            self.root.after_idle(self._persist)

    # ------------------------------------------------------------------ state files
    def _state_path(self):
        return os.path.join(STATE_DIR, f"{self.name}.json")

    def _read_state(self):
        try:
            with open(self._state_path(), encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def _persist(self):
        self._pending = False
        focus = self.root.focus_get()
        state = {
            "model": self.model_state(),
            "widgets": self._widget_states(),
            "focus": str(focus) if focus is not None else None,
        }
        _write_atomic(self._state_path(), json.dumps(state, sort_keys=True))
        _write_atomic(os.path.join(A11Y_DIR, f"{self.name}.txt"), self.a11y())

    def _widgets(self, widget=None):
        widget = widget or self.root
        for child in widget.winfo_children():
            yield child
            yield from self._widgets(child)

    def _widget_states(self):
        states = {}
        for widget in self._widgets():
            if isinstance(widget, tk.Entry):
                selection = (
                    [widget.index("sel.first"), widget.index("sel.last")] if widget.selection_present() else None
                )
                states[str(widget)] = {
                    "text": widget.get(),
                    "insert": widget.index("insert"),
                    "selection": selection,
                    "xview": widget.xview()[0],
                }
            elif isinstance(widget, tk.Listbox):
                states[str(widget)] = {
                    "selection": list(widget.curselection()),
                    "active": widget.index("active"),
                    "yview": widget.yview()[0],
                }
        return states

    def _load_widgets(self, states, focus):
        for widget in self._widgets():
            state = states.get(str(widget))
            if state is None:
                continue
            if isinstance(widget, tk.Entry):
                widget.delete(0, "end")
                widget.insert(0, state["text"])
                widget.icursor(state["insert"])
                if state["selection"]:
                    widget.selection_range(*state["selection"])
                widget.xview_moveto(state["xview"])
            elif isinstance(widget, tk.Listbox):
                widget.selection_clear(0, "end")
                for index in state["selection"]:
                    widget.selection_set(index)
                widget.activate(state["active"])
                widget.yview_moveto(state["yview"])
        if focus:
            try:
                self.root.nametowidget(focus).focus_set()
            except KeyError:
                pass

    # ------------------------------------------------------------------ accessibility summary
    def a11y(self):
        lines = [f"{self.name}: {self.root.title()}"]
        for widget in self._widgets():
            if not widget.winfo_ismapped():
                continue
            described = self.describe(widget)
            if described:
                x, y = widget.winfo_rootx(), widget.winfo_rooty()
                lines.append(f"  {described} @({x},{y},{widget.winfo_width()}x{widget.winfo_height()})")
        return "\n".join(lines) + "\n"

    def describe(self, widget):
        """One line for a widget in the accessibility summary, or None to leave it out."""
        if isinstance(widget, tk.Button):
            return f"button {widget.cget('text')!r}"
        if isinstance(widget, tk.Entry):
            focused = " focused" if widget is self.root.focus_get() else ""
            return f"entry {str(widget).rsplit('.', 1)[-1]!r} = {widget.get()!r}{focused}"
        if isinstance(widget, tk.Listbox):
            items, chosen, rows = widget.get(0, "end"), set(widget.curselection()), []
            for index, item in enumerate(items):
                box = widget.bbox(index)  # None for rows scrolled out of view
                if box:
                    mark = " selected" if index in chosen else ""
                    rows.append(f"{item!r} at y={widget.winfo_rooty() + box[1] + box[3] // 2}{mark}")
            return f"list [{', '.join(rows)}]"
        if isinstance(widget, tk.Label) and widget.cget("text"):
            return f"label {widget.cget('text')!r}"
        return None


def _write_atomic(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.tmp"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, path)
