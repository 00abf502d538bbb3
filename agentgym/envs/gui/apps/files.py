"""Files: a small file manager rooted at one folder; ``python3 files.py ROOT``.

The list shows the current folder (folders end in "/"). Click an item to select it (its name
goes into the Name field); double-click a folder (or select it and press Open) to enter it; Up
goes to the parent (never above ROOT). With an item selected: Rename renames it to the Name
field, Delete removes it (folders only when empty), Move moves it into the folder named in
the Name field (relative to the current folder; ".." is the parent). New folder creates the
folder named in the Name field. Every operation acts on the real filesystem at once, which is
what the task checkers read.

Layout (pixels from the window's top-left): the list at (10..590, 50..480), its rows 19 pixels
high with row i centred at y = 61 + 19*i (the accessibility summary gives each row's y); the
Name field at (110..560, 500..530); buttons at x = 680 with the y centres in BUTTONS.
"""

import os
import shutil
import sys
import tkinter as tk

from tkbase import TkApp

LIST_Y0 = 50
BUTTONS = {"Up": 65, "Open": 105, "Rename": 145, "Move": 185, "Delete": 225, "New folder": 265}


class Files(TkApp):
    name = "files"

    def __init__(self, root_dir):
        self.top = os.path.realpath(root_dir)
        self.current = self.top
        super().__init__("Files")

    def build(self):
        root = self.root
        self.location = tk.Label(root, name="location", anchor="w")
        self.location.place(x=10, y=10, width=780, height=30)
        self.listing = tk.Listbox(
            root,
            name="listing",
            exportselection=False,
            activestyle="none",
            relief="solid",
            borderwidth=1,
            highlightthickness=0,
        )
        self.listing.place(x=10, y=LIST_Y0, width=580, height=430)
        self.listing.bind("<<ListboxSelect>>", self.selected)
        self.listing.bind("<Double-Button-1>", lambda event: self.open())
        for label, y in BUTTONS.items():
            command = {
                "Up": self.up,
                "Open": self.open,
                "Rename": self.rename,
                "Move": self.move,
                "Delete": self.delete,
                "New folder": self.new_folder,
            }[label]
            tk.Button(root, text=label, name=label.lower().replace(" ", "_"), takefocus=0, command=command).place(
                x=610, y=y - 15, width=140, height=30
            )
        tk.Label(root, text="Name:", name="name_label", anchor="w").place(x=10, y=500, width=90, height=30)
        self.name_field = tk.Entry(root, name="name", relief="solid", borderwidth=1)
        self.name_field.place(x=110, y=500, width=450, height=30)
        self.message = tk.Label(root, name="message", anchor="w", text="")
        self.message.place(x=10, y=545, width=780, height=30)
        self.refresh()

    # ------------------------------------------------------------------ the model
    def refresh(self, select=None):
        entries = sorted(os.listdir(self.current), key=lambda n: (not os.path.isdir(os.path.join(self.current, n)), n))
        self.listing.delete(0, "end")
        for name in entries:
            self.listing.insert("end", name + ("/" if os.path.isdir(os.path.join(self.current, name)) else ""))
        relative = os.path.relpath(self.current, self.top)
        self.location.configure(text="Folder: /" + ("" if relative == "." else relative))
        self.root.title(f"Files - /{'' if relative == '.' else relative}")
        if select in entries:
            index = entries.index(select)
            self.listing.selection_set(index)
            self.listing.activate(index)
        self.changed()

    def chosen(self):
        selection = self.listing.curselection()
        return self.listing.get(selection[0]).rstrip("/") if selection else None

    def selected(self, event=None):
        name = self.chosen()
        if name is not None:
            self.name_field.delete(0, "end")
            self.name_field.insert(0, name)

    def say(self, text):
        self.message.configure(text=text)
        self.changed()

    def target(self):
        """The Name field as a path inside ROOT, or None (with a message) when it leaves ROOT or is empty."""
        name = self.name_field.get().strip()
        path = os.path.realpath(os.path.join(self.current, name))
        if not name or (path != self.top and not path.startswith(self.top + os.sep)):
            self.say(f"Error: {name!r} is not a name inside the root folder")
            return None
        return path

    # ------------------------------------------------------------------ the buttons
    def up(self):
        if self.current != self.top:
            self.current = os.path.dirname(self.current)
            self.refresh()

    def open(self):
        name = self.chosen()
        if name and os.path.isdir(os.path.join(self.current, name)):
            self.current = os.path.join(self.current, name)
            self.name_field.delete(0, "end")
            self.refresh()

    def rename(self):
        name, target = self.chosen(), self.target()
        if name is None or target is None:
            return self.say("Error: select an item and type its new name") if name is None else None
        if os.path.exists(target):
            return self.say(f"Error: {os.path.basename(target)} already exists")
        os.rename(os.path.join(self.current, name), target)
        self.say(f"Renamed {name} to {os.path.relpath(target, self.current)}")
        self.refresh(select=os.path.basename(target) if os.path.dirname(target) == self.current else None)

    def move(self):
        name, folder = self.chosen(), self.target()
        if name is None or folder is None:
            return self.say("Error: select an item and type the folder to move it into") if name is None else None
        if not os.path.isdir(folder):
            return self.say(f"Error: {self.name_field.get().strip()} is not a folder")
        destination = os.path.join(folder, name)
        if os.path.exists(destination) or folder == os.path.join(self.current, name):
            return self.say(f"Error: cannot move {name} there")
        shutil.move(os.path.join(self.current, name), destination)
        self.say(f"Moved {name} to {os.path.relpath(folder, self.top)}")
        self.refresh()

    def delete(self):
        name = self.chosen()
        if name is None:
            return self.say("Error: select an item to delete")
        path = os.path.join(self.current, name)
        try:
            os.rmdir(path) if os.path.isdir(path) else os.remove(path)
        except OSError as exc:
            return self.say(f"Error: cannot delete {name}: {exc.strerror}")
        self.name_field.delete(0, "end")
        self.say(f"Deleted {name}")
        self.refresh()

    def new_folder(self):
        target = self.target()
        if target is None:
            return None
        if os.path.exists(target):
            return self.say(f"Error: {os.path.basename(target)} already exists")
        os.makedirs(target)
        self.say(f"Created folder {os.path.relpath(target, self.top)}")
        self.refresh(select=os.path.basename(target))

    # ------------------------------------------------------------------ state for forks
    def model_state(self):
        return {"current": os.path.relpath(self.current, self.top), "message": self.message.cget("text")}

    def load_model_state(self, state):
        self.current = os.path.realpath(os.path.join(self.top, state.get("current", ".")))
        if not os.path.isdir(self.current):
            self.current = self.top
        self.message.configure(text=state.get("message", ""))
        self.refresh()


if __name__ == "__main__":
    Files(sys.argv[1]).run()
