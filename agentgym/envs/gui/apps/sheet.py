"""Sheet: a small spreadsheet (columns A-E, rows 1-10) that edits a CSV file; ``python3 sheet.py FILE.csv``.

Cells hold numbers, text or formulas (see ``formula.py``). Click a cell (or Tab/Return/arrow keys)
to move; the bar at the top shows the focused cell and its computed value. Save (the button or
Ctrl+S) writes the raw cell texts back to the CSV, which is what the task checkers read.

Layout (pixels from the window's top-left, which the window manager keeps at the screen's):
the Save button at (10..90, 8..38); cell (row r, column c), both from 0, centred at
``(CELL_X0 + c*CELL_W + CELL_W//2, CELL_Y0 + r*CELL_H + CELL_H//2)``.
"""

import csv
import os
import sys
import tkinter as tk

import formula
from tkbase import TkApp

CELL_X0, CELL_Y0, CELL_W, CELL_H = 60, 80, 140, 32


class Sheet(TkApp):
    name = "sheet"

    def __init__(self, path):
        self.path = path
        self.saved_cells = _read_csv(path)
        super().__init__(f"Sheet - {os.path.basename(path)}")

    def build(self):
        root = self.root
        tk.Button(root, text="Save", name="save", takefocus=0, command=self.save).place(x=10, y=8, width=80, height=30)
        self.status = tk.Label(root, name="status", anchor="w", text="")
        self.status.place(x=100, y=8, width=680, height=30)
        self.cells = {}
        for column, letter in enumerate(formula.COLUMNS):
            tk.Label(root, text=letter, name=f"col{letter.lower()}").place(
                x=CELL_X0 + column * CELL_W, y=CELL_Y0 - 28, width=CELL_W, height=26
            )
        for row in range(formula.ROWS):
            tk.Label(root, text=str(row + 1), name=f"row{row + 1}").place(
                x=10, y=CELL_Y0 + row * CELL_H, width=CELL_X0 - 14, height=CELL_H
            )
            for column in range(len(formula.COLUMNS)):
                name = formula.cell_name(row, column)
                entry = tk.Entry(root, name=name.lower(), relief="solid", borderwidth=1)
                entry.place(x=CELL_X0 + column * CELL_W, y=CELL_Y0 + row * CELL_H, width=CELL_W, height=CELL_H)
                entry.insert(0, self.saved_cells.get(name, ""))
                self.bind_keys(entry, row, column, name)
                self.cells[name] = entry
        root.bind_all("<Control-s>", lambda event: self.save())

    def bind_keys(self, entry, row, column, name):
        """Return and the arrows move between rows; focusing or typing shows the cell's value."""
        entry.bind("<Return>", lambda event: self.move(row + 1, column))
        entry.bind("<Down>", lambda event: self.move(row + 1, column))
        entry.bind("<Up>", lambda event: self.move(row - 1, column))
        entry.bind("<FocusIn>", lambda event: self.show(name), add="+")
        # Not after Ctrl+S: the status line should keep saying "Saved".
        entry.bind("<KeyRelease>", lambda event: None if event.state & 4 else self.show(name), add="+")

    def move(self, row, column):
        if 0 <= row < formula.ROWS:
            self.cells[formula.cell_name(row, column)].focus_set()
        return "break"

    def texts(self):
        return {name: entry.get() for name, entry in self.cells.items() if entry.get()}

    def show(self, name):
        try:
            value = formula.display(formula.evaluate(self.texts(), name))
        except formula.FormulaError as exc:
            value = f"error: {exc}"
        modified = " (modified)" if self.texts() != self.saved_cells else ""
        self.status.configure(text=f"{name} = {value}{modified}")

    def save(self):
        cells = self.texts()
        with open(self.path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            for row in range(formula.ROWS):
                writer.writerow([cells.get(formula.cell_name(row, c), "") for c in range(len(formula.COLUMNS))])
        self.saved_cells = cells
        self.status.configure(text=f"Saved {os.path.basename(self.path)}")
        self.changed()

    def model_state(self):
        return {"saved_cells": self.saved_cells, "status": self.status.cget("text")}

    def load_model_state(self, state):
        self.saved_cells = state.get("saved_cells", self.saved_cells)
        self.status.configure(text=state.get("status", ""))


def _read_csv(path):
    cells = {}
    if os.path.exists(path):
        with open(path, newline="", encoding="utf-8") as handle:
            for row, values in enumerate(csv.reader(handle)):
                for column, value in enumerate(values[: len(formula.COLUMNS)]):
                    if value and row < formula.ROWS:
                        cells[formula.cell_name(row, column)] = value
    return cells


if __name__ == "__main__":
    Sheet(sys.argv[1]).run()
