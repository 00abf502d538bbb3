"""Runs OSWorld's own metric functions (desktop-env) in .venv-osworld: JSON cases on stdin, one score per case on stdout.

Run by test_osworld_fidelity.py with that venv's python, never imported by agentgym's. Each case is
``{"module": "table", "func": "compare_table", "args": [...], "options": {...}}`` where an argument is
``{"path": p}`` (the path, as OSWorld's ``vm_file`` getter hands it over; None when the file is missing),
``{"text_of": p}`` (the file's text, as its ``vm_file`` getter then reads it for the text metrics), or
``{"value": v}`` (a rule). The answer is a list of floats, or ``"error: ..."`` where the function raised
(OSWorld's evaluator counts a raising metric as 0).

The metric modules are loaded one by one, past ``desktop_env.evaluators.metrics``'s ``__init__`` (which
imports every module, Chrome's and Thunderbird's with their own libraries); ``easyocr`` (torch) is an empty
module here: only ``docs.compare_image_text`` calls it, and no test compares that one. So are the HTML and PDF
libraries ``chrome``'s module imports (its ``compare_archive``, ``check_font_size`` and ``check_history_deleted`` are
compared, which use none of them).
"""

import contextlib
import importlib
import io
import json
import os
import sys
import types

sys.modules.setdefault("easyocr", types.ModuleType("easyocr"))
# chrome's module imports HTML and PDF libraries at its top (bs4, PyMuPDF's fitz, borb, imagehash) that are not
# in .venv-osworld: stand-ins, as only its compare_archive, check_font_size and check_history_deleted are run, which
# use none of them.
for name, attributes in {
    "bs4": ("BeautifulSoup", "Tag"),
    "fitz": (),
    "borb": (),
    "borb.pdf": ("Document", "PDF"),
}.items():
    sys.modules.setdefault(name, types.ModuleType(name))
    for attribute in attributes:
        setattr(sys.modules[name], attribute, getattr(sys.modules[name], attribute, None))
sys.modules.setdefault("imagehash", types.ModuleType("imagehash"))
import desktop_env.evaluators  # noqa: E402  (after the stand-in)

package = types.ModuleType("desktop_env.evaluators.metrics")
package.__path__ = [os.path.join(os.path.dirname(desktop_env.evaluators.__file__), "metrics")]
sys.modules["desktop_env.evaluators.metrics"] = package


def argument(spec):
    if "path" in spec:
        return spec["path"]
    if "text_of" in spec:
        if spec["text_of"] is None:
            return None
        with open(spec["text_of"], encoding="utf-8", errors="replace") as handle:
            return handle.read()
    return spec["value"]


scores = []
for case in json.load(sys.stdin):
    function = getattr(importlib.import_module(f"desktop_env.evaluators.metrics.{case['module']}"), case["func"])
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its metrics print as they go
            scores.append(float(function(*map(argument, case["args"]), **case.get("options", {}))))
    except Exception as exc:  # noqa: BLE001 — recorded, as OSWorld's evaluator scores it 0
        scores.append(f"error: {type(exc).__name__}: {exc}")
json.dump(scores, sys.stdout)
