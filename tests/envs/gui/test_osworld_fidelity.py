"""Our desktop metrics agree with OSWorld's own metric functions (desktop-env 1.0.2, run in .venv-osworld) on the same files.

For every metric both have — compare_table (with its ``styles`` against OSWorld's ``style`` rule),
compare_docx_files, compare_docx_tables, compare_pptx_files (speaker notes included), check_include_exclude,
compare_text_file, compare_image_list, compare_archive; compare_docx_files on docx and on odt (odfpy) — each generated task's gold file, its untouched input, seeded mutations of the gold
(a number, a word or a label changed, a row or paragraph dropped, a cell or slide added, two swapped, a cell's
boldness or number format changed, a table cell changed, notes added),
an empty file of the right kind, zero bytes and a missing file are scored by both: the verdicts must be the
same. Where ours is deliberately different the test pins the direction (``test_known_differences``):

* compare_table: ours demands formulas where the task asked for a computation and recomputes every
  formula; OSWorld's reads the cached values only (a typed number, or a forged cache, passes it). Ours
  strips a text cell's surrounding spaces; OSWorld's does not.
* compare_docx_files: ours compares paragraphs one by one; OSWorld's (``ignore_blanks``, its default)
  joins them with whitespace, so two paragraphs merged into one pass it.
* compare_pptx_files: ours compares the slides' texts; OSWorld's also shapes' positions and sizes and
  the runs' fonts, so a moved text box fails it and passes ours.
* compare_image_list: OSWorld's converts the agent's image to the gold one's mode (an RGB gold drops
  the alpha channel: a fully transparent copy passes) and resizes another size to the gold's (LANCZOS: the
  right picture at twice the size does not come back exact, and fails both); ours compares RGBA, same size.

Chromium's check_font_size, check_history_deleted and exact_match (Do Not Track) are compared on the values OSWorld's
getters hand its metrics (the profile's webprefs dict; the History database's urls rows; "true" or "false"), from the
same profile states.

compare_table's ``charts`` is compared with OSWorld's ``chart`` rule (type and direction), its ``filters`` with OSWorld's
``filter`` rule (which compares the AutoFilter's XML and no hidden rows: pinned in that test); compare_docx_headers with
OSWorld's ``has_page_numbers_in_footers`` on the page-number kind's files, where OSWorld's passes any digit in the
footer (a typed "1", a page count's field) and ours asks for the PAGE field alone (pinned in that test).

compare_pptx_files runs with each task's options (the layout kind's ``layouts``: OSWorld's compares no layouts, but
the shapes a layout places, so the two agree on that kind's files too).

Not compared: compare_docx_headers on the header kind (OSWorld has no header metric), check_bookmarks (OSWorld's is_expected_bookmarks checks only the bookmarks bar's folder names or URLs, as
a set, and reads no checksum: a bookmark renamed, or moved off the bar rather than deleted, is beyond its rules),
check_chrome_prefs (OSWorld has no startup-pages getter but "is the new tab page the startup page"),
check_file_tree (OSWorld has no namesake), compare_docx_bold (OSWorld has no metric that reads which
paragraphs are bold; its docs metrics check fonts, italics at size 14, highlight, strike-through), compare_image_list
with our options (``format``, ``tolerance``: the GIMP tasks ``scale`` and ``jpeg``; OSWorld's has none), and OSWorld's
OCR metric
(``compare_image_text``: easyocr needs torch). The Docker-free runner: tests/envs/gui/osworld_metrics.py.
"""

import functools
import io
import json
import os
import random
import subprocess
import tarfile
import zipfile
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from PIL import Image, ImageOps
from pptx.util import Inches

from agentgym.envs.gui import generators, metrics

ROOT = Path(__file__).resolve().parents[3]
OSWORLD_PYTHON = Path(os.environ.get("AGENTGYM_OSWORLD_PYTHON", ROOT / ".venv-osworld" / "bin" / "python"))
RUNNER = Path(__file__).with_name("osworld_metrics.py")

pytestmark = pytest.mark.skipif(
    not OSWORLD_PYTHON.exists(),
    reason=f"OSWorld's metrics need their own venv ({OSWORLD_PYTHON} is absent: scripts/setup.sh makes it)",
)

TABLE_RULES = {"rules": [{"type": "sheet_name"}, {"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}


def osworld_scores(cases: list[dict]) -> list:
    done = subprocess.run(
        [str(OSWORLD_PYTHON), str(RUNNER)], input=json.dumps(cases), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


class Corpus:
    """Files under one folder, each scored by ours and OSWorld's; ``disagreements()`` runs OSWorld's in one process."""

    def __init__(self, folder: Path):
        self.folder, self.rows, self.files = folder, [], 0

    def path(self, data: bytes | None, suffix: str) -> str | None:
        if data is None:
            return None
        self.files += 1
        path = self.folder / f"{self.files}{suffix}"
        path.write_bytes(data)
        return str(path)

    def add(self, label: str, ours: str | None, case: dict):
        self.rows.append((label, ours, case))

    def pair(self, label, metric, result: bytes | None, expected: bytes, suffix, module, func, options=None):
        """A (result, gold) file pair, both metrics given paths (OSWorld's ``vm_file`` / ``local_file``); returns
        our metric's verdict."""
        args = [{"path": self.path(result, suffix)}, {"path": self.path(expected, suffix)}]
        ours = metric(result, expected)
        self.add(label, ours, {"module": module, "func": func, "args": args, "options": options or {}})
        return ours

    def table(self, label, result: bytes | None, expected: bytes, rule: dict | None = None, **options):
        """A workbook pair: ours is compare_table with ``options`` (``styles``, ``charts``, ...), OSWorld's is its
        compare_table with TABLE_RULES and ``rule`` (the OSWorld rule that checks what the option does); returns
        our metric's verdict."""
        rules = {"rules": [*TABLE_RULES["rules"], *([rule] if rule else [])]}
        ours = functools.partial(metrics.compare_table, **options)
        return self.pair(label, ours, result, expected, ".xlsx", "table", "compare_table", rules)

    def disagreements(self) -> list[tuple[str, bool, object]]:
        """(label, ours passes, OSWorld's score) for every file the two judge differently."""
        scores = osworld_scores([case for _, _, case in self.rows])
        return [
            (label, ours is None, score)
            for (label, ours, _), score in zip(self.rows, scores)
            if (ours is None) != (score == 1.0)
        ]


def task_files(spec: dict, files: dict[str, bytes]) -> tuple[bytes, bytes]:
    """The task's untouched input and its gold file."""
    return files[spec["config"][0]["parameters"]["files"][0]["url"]], files[spec["evaluator"]["expected"][0]["path"]]


def saved(thing) -> bytes:
    buffer = io.BytesIO()
    thing.save(buffer)
    return buffer.getvalue()


# -------------------------------------------------------------------------------------------- sheets
def sheet_mutations(gold: bytes, rng: random.Random) -> dict[str, bytes]:
    def edit(change):
        book = openpyxl.load_workbook(io.BytesIO(gold))
        change(book.active, rng)
        return saved(book)

    def bump(sheet, rng):
        cell = rng.choice([c for row in sheet.iter_rows(min_row=2) for c in row if isinstance(c.value, int | float)])
        cell.value += rng.choice([1, -1, 0.5])

    def relabel(sheet, rng):
        cell = rng.choice([c for row in sheet.iter_rows() for c in row if isinstance(c.value, str)])
        cell.value += "s"

    def drop_row(sheet, rng):
        sheet.delete_rows(sheet.max_row)

    def extra_cell(sheet, rng):
        sheet.cell(row=rng.randint(1, sheet.max_row), column=sheet.max_column + 1, value=rng.randint(1, 9))

    def swap_rows(sheet, rng):
        if sheet.max_row >= 3:
            a, b = rng.sample(range(2, sheet.max_row + 1), 2)
            for col in range(1, sheet.max_column + 1):
                x, y = sheet.cell(a, col), sheet.cell(b, col)
                x.value, y.value = y.value, x.value

    return {change.__name__: edit(change) for change in (bump, relabel, drop_row, extra_cell, swap_rows)}


def test_compare_table_agrees_with_osworlds(tmp_path):
    corpus = Corpus(tmp_path)
    empty = openpyxl.Workbook()
    empty.active.title = "Sheet1"
    for kind in generators.CALC_KINDS:
        for seed in generators.SEEDS:
            spec, files = generators.generate("calc", kind, seed)
            start, gold = task_files(spec, files)
            rng = random.Random(f"{kind}-{seed}")
            variants = {"gold": gold, "input": start, "empty": saved(empty), "zero bytes": b"", "missing": None}
            variants |= sheet_mutations(gold, rng)
            for name, data in variants.items():
                corpus.table(f"calc-{kind}-{seed} {name}", data, gold)
    assert len(corpus.rows) == 10 * 3 * len(generators.CALC_KINDS)
    assert corpus.disagreements() == []


def style_mutations(gold: bytes, rng: random.Random) -> dict[str, bytes]:
    """The gold workbook with one cell's boldness or number format changed, or every cell's."""
    from openpyxl.styles import Font

    def edit(change):
        book = openpyxl.load_workbook(io.BytesIO(gold))
        change(book.active)
        return saved(book)

    cells = lambda sheet: [c for row in sheet.iter_rows() for c in row if c.value is not None]  # noqa: E731
    numbers = lambda sheet: [c for c in cells(sheet) if isinstance(c.value, int | float)]  # noqa: E731

    def bold_one(sheet):
        cell = rng.choice(cells(sheet))
        cell.font = Font(bold=not cell.font.b)

    def bold_all(sheet):
        for cell in cells(sheet):
            cell.font = Font(bold=True)

    def format_one(sheet):
        rng.choice(numbers(sheet)).number_format = rng.choice(["0.0", "#,##0.00", "0%", "General"])

    def format_all(sheet):
        for cell in numbers(sheet):
            cell.number_format = generators.TWO_DECIMALS

    def format_text(sheet):  # a number format on a text cell shows nothing: both ignore it
        rng.choice([c for c in cells(sheet) if isinstance(c.value, str)]).number_format = "0.00"

    return {f.__name__: edit(f) for f in (bold_one, bold_all, format_one, format_all, format_text)}


def test_compare_table_styles_agree_with_osworlds_style_rule(tmp_path):
    """``styles`` against OSWorld's ``style`` rule (same property names), with the values compared as before."""
    corpus = Corpus(tmp_path)
    for kind in ("decimals", "bold", "sum"):
        for seed in generators.SEEDS:
            spec, files = generators.generate("calc", kind, seed)
            start, gold = task_files(spec, files)
            variants = {"gold": gold, "input": start} | style_mutations(gold, random.Random(f"{kind}-{seed}"))
            for props in (["font_bold"], ["number_format"], ["font_bold", "number_format"]):
                rule = {"type": "style", "sheet_idx0": "RI0", "sheet_idx1": "EI0", "props": props}
                for name, data in variants.items():
                    corpus.table(f"calc-{kind}-{seed} {name} {props}", data, gold, rule, styles=props)
    verdicts = [ours is None for _, ours, _ in corpus.rows]
    assert verdicts.count(True) >= 20 and verdicts.count(False) >= 60  # both ways, many times
    assert corpus.disagreements() == []


def chart_book(rows: list[list], charts: list[tuple[str, str, str]]) -> bytes:
    """The rows with one chart per (type, values' range, categories' range): ``col`` or ``bar`` a bar chart in that
    direction, ``line`` or ``pie``; the ranges written as given (openpyxl's References would quote the sheet)."""
    from openpyxl.chart import BarChart, LineChart, PieChart
    from openpyxl.chart.data_source import AxDataSource, NumDataSource, NumRef, StrRef
    from openpyxl.chart.series import Series

    book = openpyxl.load_workbook(io.BytesIO(generators._workbook(rows)))
    for kind, values, categories in charts:
        chart = {"line": LineChart, "pie": PieChart}.get(kind, lambda kind=kind: BarChart(barDir=kind))()
        cat = AxDataSource(strRef=StrRef(f=categories)) if categories else None
        chart.series.append(Series(val=NumDataSource(numRef=NumRef(f=values)), cat=cat))
        book.active.add_chart(chart, "D2")
    return saved(book)


def test_compare_table_charts_agree_with_osworlds_chart_rule(tmp_path):
    """``charts`` against OSWorld's ``chart`` rule with ``chart_props`` type and (for bar charts) direction, the
    values compared as before: the chart kind's gold, its input, another type or direction, the values' range with
    the header, no categories, a pie chart beside the right one, the data changed, an empty book."""
    corpus = Corpus(tmp_path)
    empty = openpyxl.Workbook()
    empty.active.title = "Sheet1"
    for seed, kind in zip(generators.SEEDS, generators.CHART_TYPES):
        spec, files = generators.generate("calc", "chart", seed)
        start, gold = task_files(spec, files)
        rows = [[c.value for c in row] for row in openpyxl.load_workbook(io.BytesIO(start)).active.iter_rows()]
        last = len(rows)
        values, categories = f"Sheet1!$B$2:$B${last}", f"Sheet1!$A$2:$A${last}"
        right = {"column": "col", "bar": "bar", "line": "line"}[kind]
        changed = [list(row) for row in rows]
        changed[1][1] += 1
        variants = {
            "gold": gold,
            "gold rebuilt": chart_book(rows, [(right, values, categories)]),
            "input": start,
            **{
                f"a {other} chart": chart_book(rows, [(other, values, categories)])
                for other in ("col", "bar", "line")
                if other != right
            },
            "header in the values": chart_book(rows, [(right, f"Sheet1!$B$1:$B${last}", categories)]),
            "no categories": chart_book(rows, [(right, values, "")]),
            "a pie beside it": chart_book(rows, [(right, values, categories), ("pie", f"Sheet1!$B$3:$B${last}", "")]),
            "data changed": chart_book(changed, [(right, values, categories)]),
            "empty": saved(empty),
            "zero bytes": b"",
            "missing": None,
        }
        props = ["type"] if kind == "line" else ["type", "direction"]
        rule = {"type": "chart", "sheet_idx0": "RI0", "sheet_idx1": "EI0", "chart_props": props}
        for name, data in variants.items():
            corpus.table(f"calc-chart-{seed} {name}", data, gold, rule, charts=True)
    verdicts = [ours is None for _, ours, _ in corpus.rows]
    assert verdicts.count(True) == 6 and verdicts.count(False) >= 24
    assert corpus.disagreements() == []


def test_compare_table_filters_agree_with_osworlds_filter_rule(tmp_path):
    """``filters`` against OSWorld's ``filter`` rule, the values compared as before: the filter kind's gold, its
    input, the rows hidden by hand, the rows deleted, another value, another column, an empty book agree; OSWorld's
    compares the AutoFilter's XML and no rows, so it fails Calc's "equal" condition for the same filter and passes
    a filter whose rows were never hidden, where ours does the opposite (pinned)."""
    from openpyxl.worksheet.filters import CustomFilter, CustomFilters, FilterColumn

    corpus = Corpus(tmp_path)
    empty = openpyxl.Workbook()
    empty.active.title = "Sheet1"
    known = []
    for seed in generators.SEEDS:
        spec, files = generators.generate("calc", "filter", seed)
        start, gold = task_files(spec, files)
        rows = [[c.value for c in row] for row in openpyxl.load_workbook(io.BytesIO(start)).active.iter_rows()]
        shown = spec["instruction"].split("'")[1]
        other = next(row[0] for row in rows[1:] if row[0] != shown)

        def edit(data, change):
            book = openpyxl.load_workbook(io.BytesIO(data))
            change(book.active)
            return saved(book)

        def by_hand(sheet, rows=rows, shown=shown):
            for number, row in enumerate(rows[1:], start=2):
                sheet.row_dimensions[number].hidden = row[0] != shown

        def equal(sheet, shown=shown):
            condition = CustomFilters(customFilter=[CustomFilter(val=shown)])
            sheet.auto_filter.filterColumn = [FilterColumn(colId=0, customFilters=condition)]

        def unhidden(sheet, rows=rows):
            for number in range(2, len(rows) + 1):
                sheet.row_dimensions[number].hidden = False

        variants = {
            "gold": (gold, True),
            "input": (start, True),
            "hidden by hand": (edit(start, by_hand), True),
            "rows deleted": (generators._workbook([rows[0], *(r for r in rows[1:] if r[0] == shown)]), True),
            "another value": (generators._workbook(rows, shown=(1, other)), True),
            "another column": (edit(gold, lambda sheet: setattr(sheet.auto_filter.filterColumn[0], "colId", 1)), True),
            "an equal condition": (edit(gold, equal), False),
            "rows not hidden": (edit(gold, unhidden), False),
            "empty": (saved(empty), True),
            "zero bytes": (b"", True),
            "missing": (None, True),
        }
        rule = {"type": "filter", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}
        for name, (data, agree) in variants.items():
            label = f"calc-filter-{seed} {name}"
            ours = corpus.table(label, data, gold, rule, filters=True)
            if not agree:
                known.append((label, ours is None, 0.0 if ours is None else 1.0))
    assert sorted(corpus.disagreements()) == sorted(known)


# ------------------------------------------------------------------------------------------ documents
def document(paragraphs: list[str]) -> bytes:
    doc = docx.Document()
    for text in paragraphs:
        doc.add_paragraph(text)
    return saved(doc)


def odt_document(paragraphs: list[str]) -> bytes:
    return generators._odt_document([(text, False) for text in paragraphs])


@pytest.mark.parametrize("family", ["writer", "odt"])
def test_compare_docx_files_agrees_with_osworlds(tmp_path, family):
    """docx files, and odt files (odfpy on both sides) where the gold file is one."""
    corpus = Corpus(tmp_path)
    kinds, suffix, build = {
        "writer": (generators.WRITER_KINDS, ".docx", document),
        "odt": (generators.ODT_KINDS, ".odt", odt_document),
    }[family]
    for kind in kinds:
        for seed in generators.SEEDS:
            spec, files = generators.generate(family, kind, seed)
            start, gold = task_files(spec, files)
            texts = (
                metrics._odt_texts(gold)
                if family == "odt"
                else [p.text for p in docx.Document(io.BytesIO(gold)).paragraphs]
            )
            rng = random.Random(f"{kind}-{seed}")
            drop, word = rng.randrange(len(texts)), rng.randrange(len(texts))
            a, b = rng.sample(range(len(texts)), 2)
            swapped = list(texts)
            swapped[a], swapped[b] = swapped[b], swapped[a]
            other = {"writer": odt_document, "odt": document}[family]
            variants = {
                "gold": gold,
                "gold retyped": build(texts),
                "gold with blank paragraphs": build(["", *texts[:1], "", *texts[1:], ""]),
                "input": start,
                "paragraph dropped": build(texts[:drop] + texts[drop + 1 :]),
                "word changed": build([t.replace(" ", " not ", 1) if i == word else t for i, t in enumerate(texts)]),
                "two swapped": build(swapped),
                "paragraph added": build([*texts, "One more line."]),
                "the other format": other(texts),
                "empty": build([]),
                "zero bytes": b"",
                "missing": None,
            }
            for name, data in variants.items():
                corpus.pair(
                    f"{family}-{kind}-{seed} {name}",
                    metrics.compare_docx_files,
                    data,
                    gold,
                    suffix,
                    "docs",
                    "compare_docx_files",
                )
    assert corpus.disagreements() == []


def table_document(paragraphs: list[str], rows: list[list[str]] | None) -> bytes:
    return generators._document([(text, False) for text in paragraphs], rows)


def test_compare_docx_tables_agrees_with_osworlds(tmp_path):
    corpus = Corpus(tmp_path)
    for seed in generators.SEEDS:
        spec, files = generators.generate("writer", "table", seed)
        start, gold = task_files(spec, files)
        gold_document = docx.Document(io.BytesIO(gold))
        texts = [p.text for p in gold_document.paragraphs]
        rows = [[cell.text for cell in row.cells] for row in gold_document.tables[0].rows]
        rng = random.Random(seed)
        row, column = rng.randrange(len(rows)), rng.randrange(2)
        changed = [list(r) for r in rows]
        changed[row][column] += "0"
        variants = {
            "gold": gold,
            "input": start,
            "retyped": table_document(texts, rows),
            "padded cells": table_document(texts, [[f" {t} " for t in r] for r in rows]),
            "a cell changed": table_document(texts, changed),
            "a row missing": table_document(texts, rows[:-1]),
            "a row added": table_document(texts, [*rows, ["Extra", "1"]]),
            "a column added": table_document(texts, [[*r, ""] for r in rows]),
            "columns swapped": table_document(texts, [r[::-1] for r in rows]),
            "rows as paragraphs": table_document([*texts, *("\t".join(r) for r in rows)], None),
            "empty": document([]),
            "zero bytes": b"",
            "missing": None,
        }
        twice = docx.Document(io.BytesIO(gold))
        extra = twice.add_table(rows=1, cols=2)
        extra.rows[0].cells[0].text = "Extra"
        variants["two tables"] = saved(twice)
        for name, data in variants.items():
            corpus.pair(
                f"writer-table-{seed} {name}",
                metrics.compare_docx_tables,
                data,
                gold,
                ".docx",
                "docs",
                "compare_docx_tables",
            )
    assert sum(ours is None for _, ours, _ in corpus.rows) == 3 * 3  # gold, retyped, padded cells
    assert corpus.disagreements() == []


def test_page_numbers_agree_with_osworlds_has_page_numbers_in_footers(tmp_path):
    """compare_docx_headers on the page-number kind against OSWorld's ``has_page_numbers_in_footers`` (a digit in
    each section's footer; it takes no gold file): the same verdicts on the gold, the input, a footer without a
    digit, the field in the header, an empty document; OSWorld's passes a typed number, a page count's field and
    a label beside the field, ours does not (pinned)."""
    from tests.envs.gui.test_osworld import complex_field, footer_with

    corpus = Corpus(tmp_path)
    known = []
    label_and_field = '<w:r><w:t xml:space="preserve">Page </w:t></w:r>' + complex_field("PAGE", "1")
    for seed in generators.SEEDS:
        spec, files = generators.generate("writer", "pagenum", seed)
        start, gold = task_files(spec, files)
        body = [(p.text, False) for p in docx.Document(io.BytesIO(start)).paragraphs]
        variants = {
            "gold": (gold, True),
            "input": (start, True),
            "footer text": (footer_with("<w:r><w:t>Draft</w:t></w:r>", body), True),
            "field in the header": (footer_with(complex_field("PAGE", "1"), body, where="header"), True),
            "typed number": (footer_with("<w:r><w:t>1</w:t></w:r>", body), False),
            "page count": (footer_with(complex_field("NUMPAGES", "1"), body), False),
            "labelled": (footer_with(label_and_field, body), False),
            "empty": (document([]), True),
            "zero bytes": (b"", True),
            "missing": (None, True),
        }
        for name, (data, agree) in variants.items():
            label = f"writer-pagenum-{seed} {name}"
            case = {
                "module": "docs",
                "func": "has_page_numbers_in_footers",
                "args": [{"path": corpus.path(data, ".docx")}],
            }
            corpus.add(label, metrics.compare_docx_headers(data, gold), case)
            if not agree:
                known.append((label, False, 1.0))
    assert sorted(corpus.disagreements()) == sorted(known)


# --------------------------------------------------------------------------------------------- slides
def deck_edit(gold: bytes, change) -> bytes:
    deck = pptx.Presentation(io.BytesIO(gold))
    change(deck)
    return saved(deck)


def test_compare_pptx_files_agrees_with_osworlds(tmp_path):
    corpus = Corpus(tmp_path)
    for kind in generators.IMPRESS_KINDS:
        for seed in generators.SEEDS:
            spec, files = generators.generate("impress", kind, seed)
            start, gold = task_files(spec, files)
            rng = random.Random(f"{kind}-{seed}")
            slide = rng.randrange(len(pptx.Presentation(io.BytesIO(gold)).slides))

            def retitle(deck, slide=slide):
                deck.slides[slide].shapes.title.text += " draft"

            def drop_last(deck):
                deck.slides._sldIdLst.remove(deck.slides._sldIdLst[-1])

            def add_slide(deck):
                deck.slides.add_slide(deck.slide_layouts[1]).shapes.title.text = "Extra"

            def body_line(deck, slide=slide):  # in the body, or the title where the slide has no body (layout)
                shapes = deck.slides[slide].placeholders
                body = next((shape for shape in shapes if shape.placeholder_format.idx == 1), shapes[0])
                body.text_frame.add_paragraph().text = "One more point"

            def add_notes(deck, slide=slide):
                deck.slides[slide].notes_slide.notes_text_frame.text = "Say this too."

            def drop_notes(deck):
                for each in deck.slides:
                    if each.has_notes_slide:
                        each.notes_slide.notes_text_frame.text = ""

            variants = {
                "gold": gold,
                "input": start,
                "title changed": deck_edit(gold, retitle),
                "last slide dropped": deck_edit(gold, drop_last),
                "slide added": deck_edit(gold, add_slide),
                "line added": deck_edit(gold, body_line),
                "notes added": deck_edit(gold, add_notes),
                "notes emptied": deck_edit(gold, drop_notes),
                "empty": saved(pptx.Presentation()),
                "zero bytes": b"",
                "missing": None,
            }
            for name, data in variants.items():
                corpus.pair(
                    f"impress-{kind}-{seed} {name}",
                    functools.partial(metrics.compare_pptx_files, **spec["evaluator"]["options"][0]),
                    data,
                    gold,
                    ".pptx",
                    "slides",
                    "compare_pptx_files",
                )
    assert corpus.disagreements() == []


# ----------------------------------------------------------------------------------------------- text
def text_variants(rng: random.Random) -> tuple[dict, dict[str, bytes | None]]:
    words = ["alpha", "beta", "gamma", "delta", "total = 42", "TODO", "Done."]
    rules = {"include": rng.sample(words, 2), "exclude": rng.sample(words, 1)}
    rules["exclude"] = [w for w in rules["exclude"] if w not in rules["include"]]
    lines = rng.sample(words, 4)
    return rules, {
        "random": "\n".join(lines).encode(),
        "all included": "\n".join(rules["include"]).encode(),
        "included and excluded": "\n".join(rules["include"] + rules["exclude"]).encode(),
        "empty": b"",
        "missing": None,
    }


def test_check_include_exclude_and_compare_text_file_agree_with_osworlds(tmp_path):
    corpus = Corpus(tmp_path)
    for seed in range(12):
        rng = random.Random(seed)
        rules, variants = text_variants(rng)
        for name, data in variants.items():
            path = corpus.path(data, ".txt")
            corpus.add(
                f"include/exclude {seed} {name}",
                metrics.check_include_exclude(data, rules),
                {"module": "general", "func": "check_include_exclude", "args": [{"text_of": path}, {"value": rules}]},
            )
    for kind in generators.TEXT_KINDS:
        for seed in generators.SEEDS:
            spec, files = generators.generate("text", kind, seed)
            start, gold = task_files(spec, files)
            text = gold.decode()
            variants = {
                "gold": gold,
                "input": start,
                "no final newline": text.rstrip("\n").encode(),
                "a line dropped": "\n".join(text.splitlines()[1:]).encode() + b"\n",
                "upper case": text.upper().encode(),
                "blank line added": (text + "\n").encode(),
                "empty": b"",
                "missing": None,
            }
            for options in ({}, {"ignore_blanks": True}, {"ignore_case": True}):
                for name, data in variants.items():
                    corpus.pair(
                        f"text-{kind}-{seed} {name} {options}",
                        functools.partial(metrics.compare_text_file, **options),
                        data,
                        gold,
                        ".txt",
                        "vscode",
                        "compare_text_file",
                        options,
                    )
    assert corpus.disagreements() == []


# --------------------------------------------------------------------------------------------- images
def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_compare_image_list_agrees_with_osworlds(tmp_path):
    corpus = Corpus(tmp_path)
    for kind in generators.GIMP_KINDS:
        for seed in generators.SEEDS:
            spec, files = generators.generate("gimp", kind, seed)
            if spec["evaluator"].get("options"):  # graded within a tolerance, or a JPEG: OSWorld's has no options
                continue
            gold = files[spec["evaluator"]["expected"]["path"]]
            start = files[spec["config"][0]["parameters"]["files"][0]["url"]]
            image = Image.open(io.BytesIO(gold)).convert("RGB")
            rng = random.Random(f"{kind}-{seed}")
            off = image.copy()
            x, y = rng.randrange(image.width), rng.randrange(image.height)
            off.putpixel((x, y), tuple((c + rng.randint(1, 255)) % 256 for c in off.getpixel((x, y))))
            jpeg = io.BytesIO()
            image.save(jpeg, "JPEG", quality=90)
            variants = {
                "gold": gold,
                "gold as RGBA": png(image.convert("RGBA")),
                "input": start,
                "mirrored": png(ImageOps.mirror(image)),
                "upside down": png(ImageOps.flip(image)),
                "a pixel changed": png(off),
                "with a border": png(ImageOps.expand(image, 2, (0, 0, 0))),
                "twice the size": png(image.resize((image.width * 2, image.height * 2), Image.Resampling.NEAREST)),
                "a JPEG": jpeg.getvalue(),
                "blank": png(Image.new("RGB", image.size, (255, 255, 255))),
                "missing": None,
            }
            for name, data in variants.items():
                if name in ("mirrored", "upside down") and data == gold:
                    continue
                corpus.pair(
                    f"gimp-{kind}-{seed} {name}",
                    metrics.compare_image_list,
                    data,
                    gold,
                    ".png",
                    "gimp",
                    "compare_image_list",
                )
    assert corpus.disagreements() == []


# ------------------------------------------------------------------------------------------ archives
def archive(kind: str, members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as package:
            for name, data in members.items():
                package.writestr(name, data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_compare_archive_agrees_with_osworlds(tmp_path):
    """Each zip and tar.gz task's folder packed flat (OSWorld's compares one folder's files: ``file_path``, its
    option, names the folder, which our tasks' specs leave out), and mutated; then the difference pinned: a folder
    inside the packed folder passes ours and fails OSWorld's (it compares the subfolder as a text file, and raises)."""
    corpus = Corpus(tmp_path)
    for kind in ("zip", "targz"):
        suffix = ".zip" if kind == "zip" else ".tar.gz"
        for seed in generators.SEEDS:
            spec, files = generators.generate("os", kind, seed)
            gold_nested = files[spec["evaluator"]["expected"]["path"]]
            folder = spec["evaluator"]["result"]["path"].rpartition("/")[2].split(".")[0]
            laid_out = spec["config"][0]["parameters"]["files"]
            members = {  # the folder's own files, not those in its subfolder
                entry["path"].removeprefix("/home/agent/"): files[entry["url"]]
                for entry in laid_out
                if entry["path"].count("/") == 4
            }
            gold = archive(kind, members)
            assert (
                metrics.compare_archive(gold, gold) is None
                and metrics.compare_archive(gold_nested, gold_nested) is None
            )
            first = next(iter(members))
            variants = {
                "gold": gold,
                "one file changed": archive(kind, {**members, first: members[first] + b"x"}),
                "an extra file": archive(kind, {**members, f"{folder}/extra.txt": b"x\n"}),
                "a file missing": archive(kind, {name: data for name, data in members.items() if name != first}),
                "empty": archive(kind, {}),
                "zero bytes": b"",
                "missing": None,
            }
            for name, data in variants.items():
                corpus.pair(
                    f"os-{kind}-{seed} {name}",
                    metrics.compare_archive,
                    data,
                    gold,
                    suffix,
                    "chrome",
                    "compare_archive",
                    {"file_path": folder},
                )
            if seed == 0:
                corpus.pair(
                    f"{kind} nested folder",
                    metrics.compare_archive,
                    gold_nested,
                    gold_nested,
                    suffix,
                    "chrome",
                    "compare_archive",
                    {"file_path": folder},
                )
    assert len(corpus.rows) == 2 * 3 * 7 + 2
    assert sorted((label, ours) for label, ours, _ in corpus.disagreements()) == [
        ("targz nested folder", True),
        ("zip nested folder", True),
    ]


# ---------------------------------------------------------------------------------------- differences
def test_known_differences(tmp_path):
    """Where ours deliberately differs (the module docstring), the direction is pinned."""
    corpus = Corpus(tmp_path)
    spec, files = generators.generate("calc", "sum", 0)
    start, gold = task_files(spec, files)
    book = openpyxl.load_workbook(io.BytesIO(gold))
    last = book.active.max_row
    book.active[f"A{last}"] = book.active[f"A{last}"].value + " "
    padded = saved(book)
    options = spec["evaluator"]["options"][0]
    # The gold file holds the right number typed, not a formula: OSWorld's passes it, ours (asked for a formula) not.
    corpus.table("typed number", gold, gold, **options)
    corpus.table("label with a space", padded, gold)
    spec, files = generators.generate("writer", "append", 0)
    _, gold_doc = task_files(spec, files)
    texts = [p.text for p in docx.Document(io.BytesIO(gold_doc)).paragraphs]
    merged = document([texts[0] + " " + texts[1], *texts[2:]])
    corpus.pair(
        "paragraphs merged", metrics.compare_docx_files, merged, gold_doc, ".docx", "docs", "compare_docx_files"
    )
    spec, files = generators.generate("impress", "title", 0)
    _, gold_deck = task_files(spec, files)

    def move(deck):
        deck.slides[0].shapes.title.left += Inches(1)

    moved = deck_edit(gold_deck, move)
    corpus.pair(
        "title box moved", metrics.compare_pptx_files, moved, gold_deck, ".pptx", "slides", "compare_pptx_files"
    )
    spec, files = generators.generate("gimp", "mirror", 0)
    gold_png = files[spec["evaluator"]["expected"]["path"]]
    image = Image.open(io.BytesIO(gold_png)).convert("RGB")
    clear = image.convert("RGBA")
    clear.putalpha(0)
    corpus.pair("transparent", metrics.compare_image_list, png(clear), gold_png, ".png", "gimp", "compare_image_list")
    assert sorted(corpus.disagreements()) == [
        ("label with a space", True, 0.0),
        ("paragraphs merged", False, 1.0),
        ("title box moved", True, 0.0),
        ("transparent", False, 1.0),
        ("typed number", False, 1.0),
    ]


# ------------------------------------------------------------------------------------------ Chromium
def osworld_font_getter(preferences: dict) -> dict:
    """What OSWorld's ``chrome_font_size`` getter hands its metric: the profile's ``webkit.webprefs``, or its defaults."""
    defaults = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}
    return preferences.get("webkit", {}).get("webprefs", defaults)


def test_chromium_metrics_agree_with_osworlds(tmp_path):
    """check_font_size, check_history_deleted and exact_match (Do Not Track, through our getter) on every Chromium
    task's rule, against the profile states a play can
    leave (done, untouched, the wrong slider, another size, one page's history left, a longer URL, another page's), each
    given to OSWorld's metric as its getter hands it over (the webprefs dict; the urls rows). OSWorld's getters return
    None for a History file that is not a database, and its metric then raises: a 0, as ours."""
    from agentgym.envs.gui.osworld import CHROMIUM_PROFILE, load_task
    from tests.envs.gui.test_generators_chrome import Profile, history

    corpus = Corpus(tmp_path)
    rng = random.Random(7)
    for seed in generators.SEEDS:
        spec, _ = generators.generate("chrome", "font", seed)
        rule = spec["evaluator"]["expected"]["rules"]
        size = rule["value"]
        states = {
            "done": {"webkit": {"webprefs": {"default_font_size": size, "default_fixed_font_size": 13}}},
            "untouched": {"browser": {}},
            "minimum slider": {"webkit": {"webprefs": {"minimum_font_size": size, "default_font_size": 16}}},
            "another size": {"webkit": {"webprefs": {"default_font_size": rng.choice([9, 13, 30, size + 2])}}},
        }
        for label, prefs in states.items():
            ours = metrics.check_font_size(json.dumps(prefs).encode(), rule)
            args = [{"value": osworld_font_getter(prefs)}, {"value": rule}]
            corpus.add(f"font {seed} {label}", ours, {"module": "chrome", "func": "check_font_size", "args": args})
        spec, _ = generators.generate("chrome", "history", seed)
        rule = spec["evaluator"]["expected"]["rules"]
        visited = rule["keywords"]
        states = {
            "deleted": [],
            "untouched": visited,
            "one left": visited[1:],
            "a longer URL": [visited[0] + "#top"],
            "another page": ["file:///home/agent/pages/other.html", "chrome://settings/"],
        }
        for label, urls in states.items():
            database = history(tmp_path, urls)
            rows = [list(row) for row in metrics.history_urls(database)]
            ours = metrics.check_history_deleted(database, rule)
            args = [{"value": rows}, {"value": rule}]
            corpus.add(
                f"history {seed} {label}", ours, {"module": "chrome", "func": "check_history_deleted", "args": args}
            )
        ours = metrics.check_history_deleted({"History": b"not a database"}, rule)
        args = [{"value": None}, {"value": rule}]
        corpus.add(
            f"history {seed} no database", ours, {"module": "chrome", "func": "check_history_deleted", "args": args}
        )
        spec, files = generators.generate("chrome", "dnt", seed)
        rule, task = spec["evaluator"]["expected"]["rules"], load_task(spec, files)
        for label, prefs in {
            "on": {"enable_do_not_track": True},
            "off": {"enable_do_not_track": False},
            "unset": {},
        }.items():
            ours = task.check(Profile({f"{CHROMIUM_PROFILE}/Preferences": json.dumps(prefs).encode()}))
            args = [{"value": "true" if prefs.get("enable_do_not_track", {}) else "false"}, {"value": rule}]
            corpus.add(f"dnt {seed} {label}", ours, {"module": "general", "func": "exact_match", "args": args})
    assert len(corpus.rows) == 39
    assert corpus.disagreements() == []
