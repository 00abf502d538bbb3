"""The evaluator functions of OSWorld-format desktop tasks: compare an office file the agent saved with a gold file.

They run on the host, on bytes pulled off the desktop (read as the agent's user, bounded by the
sandbox's read-back limit), and never execute anything in them. Each takes ``(result, expected,
**options)`` — ``result`` the saved file's bytes (None when it does not exist), ``expected`` the
gold file's bytes or a rule dict — and returns None when the result is right, else what is wrong
(OSWorld's return 1.0 or 0.0; :mod:`agentgym.envs.gui.osworld` combines ours with ``conj``).

What OSWorld's namesakes compare, and where ours are stricter because the policy is an adversary:

* ``compare_table`` (sheets, xlsx): every non-empty cell's value in every sheet, like OSWorld's
  pandas comparison; with ``formulas=[cells]`` those cells must hold formulas (the task asked for a
  computation, not a typed number), and every formula cell in the agent's file is recomputed from
  the file's own cells with :mod:`agentgym.envs.gui.apps.formula`: a sheet whose cached values
  differ from its formulas fails, and so does a formula that module cannot evaluate. With
  ``charts`` each sheet's charts (their type, a bar chart's direction, each series' value and
  category ranges) equal the gold's, as OSWorld's ``chart`` rule with ``chart_props: ["type",
  "direction"]`` compares them (it compares the ranges as written, quotes and ``$`` included). With
  ``filters`` each sheet's AutoFilter (its range and each filtered column's shown values, Calc's
  "equal" conditions read as values) and its hidden rows equal the gold's (OSWorld's ``filter`` rule
  compares the AutoFilter's XML fields, and no rows).
* ``compare_docx_files`` (documents, docx; or odt, read with odfpy, where the gold file is odt, as
  OSWorld's reads both): the paragraphs' texts, in order, empty ones ignored. Text inside pictures
  is no text.
* ``compare_docx_tables`` (docx): the same number of tables, each with the gold table's rows,
  columns and cell texts (stripped), as OSWorld's namesake. A table typed as tab-separated
  paragraphs, or drawn as a picture, is no table.
* ``compare_pdf_text`` (a PDF, read with pypdf, against a gold PDF or document): the text of its
  pages, runs of whitespace as one space and ligatures unfolded (NFKC), equals the gold's (a
  document's non-empty paragraphs joined). A document saved under the PDF's name is not a PDF, and
  a PDF of the page as a picture has no text. OSWorld's ``compare_pdfs`` (PyMuPDF, a fuzzy ratio)
  scores the same two texts; its module needs PyMuPDF, which its venv here lacks, so it is not
  compared.
* ``compare_docx_headers`` (agentgym's: OSWorld has no header metric; its ``has_page_numbers_in_footers``
  asks for a digit in each section's footer): each section's page header and footer, their non-empty
  paragraphs' texts with every field read as ``{NAME}`` (a PAGE field is ``{PAGE}``, whatever page
  number it last showed), equal the gold document's. A typed "1" is no page number; a header's text
  typed in the body leaves the header empty.
* ``compare_docx_bold``: which paragraphs are bold (every run with text bold) matches the gold file's.
* ``compare_pptx_files`` (slides, pptx): the slides' count, each slide's texts, shape by shape, and
  its speaker notes (as OSWorld's ``examine_note``, its default); with ``layouts`` (ours) each slide's
  layout's name (Title Slide, Title, Content, Title Only, ...: LibreOffice's export names its layouts
  so, whatever the file it opened called them, and types its Title Slide ``tx``, so the OOXML type
  says less than the name).
* ``check_include_exclude`` (any text file): rule ``{"include": [...], "exclude": [...]}``.
* ``compare_text_file`` (a text file against a gold one): the same text, exactly, with OSWorld's two
  options: ``ignore_blanks`` (runs of whitespace count as one space, ends stripped) and ``ignore_case``.

* ``check_file_tree`` (agentgym's: a folder, through the ``vm_tree`` getter, which lists it without
  following symlinks) against a rule: the files that must be there (their type, SHA-256, whether they
  are executable), the folders, the names that must be gone, and with ``only`` nothing else.
* ``compare_archive`` (a zip or a tar.gz against a gold one of the same kind): the same member files
  (names without a leading ``./``; folder entries ignored) with the same bytes. OSWorld's unpacks
  both to disk and compares the top folder's listing, then each file with the ``file_type`` metric;
  ours reads them in memory, compares every member at every depth, and refuses what unpacking would
  make dangerous or huge: an absolute or ``..`` member name, a link or device member, more than
  :data:`MAX_MEMBERS` members or :data:`MAX_UNPACKED_BYTES` bytes unpacked (a zip bomb).

* ``compare_image_list`` (images, PNG): the same size and the same pixels (RGBA), exactly; OSWorld's
  resizes the agent's image to the gold one's size first, ours refuses another size. Two options of
  ours (OSWorld's has none): ``format`` (``"png"``, the default, or ``"jpeg"``: the file type the
  result must be, by its signature, whatever its name) and ``tolerance`` (the largest mean absolute
  difference allowed, in levels of 0–255 over the RGBA channels; 0, the default, means exactly the
  same pixels): for a lossy format, or an edit that GIMP resamples differently from Pillow.

Chromium's profile files (the getters ``bookmarks``, ``history`` and ``chrome_font_size`` of
:mod:`agentgym.envs.gui.osworld`, read after the browser was closed gracefully):

* ``check_bookmarks`` (agentgym's; OSWorld's ``is_expected_bookmarks`` checks only the bookmarks bar's
  folder names or URLs): the ``Bookmarks`` file, whose checksum must be the one Chromium computes over
  its ids, names and URLs (a file written by anything else fails), holds a bookmark with each
  ``present`` rule's name and URL (and folder path, where the rule gives one), and none with an
  ``absent`` URL.
* ``check_history_deleted`` (OSWorld's, rule ``{"type": "keywords", "keywords": [...]}``): no URL in the
  ``History`` database's ``urls`` table contains a keyword. Ours opens the database as SQLite does (its
  journal or write-ahead log applied) and fails a file that is no History database; OSWorld's getter
  returns None for one, on which its metric raises (a 0 too).
* ``exact_match`` (OSWorld's, rule ``{"expected": value}``): the getter's value equals it (with the
  ``enable_do_not_track`` getter: ``"true"`` only where ``Preferences`` sets it true).
* ``check_chrome_prefs`` (agentgym's; rule ``{"prefs": {"dotted.path": value}}``): each preference in
  ``Preferences`` has exactly that value (``session.startup_urls`` must be the list given, no other).
* ``check_font_size`` (OSWorld's, rule ``{"type": "value", "value": n}`` or ``{"type": "range", "min",
  "max"}``): ``webkit.webprefs.default_font_size`` in ``Preferences``, 16 (Chromium's default) where the
  profile sets none.

tests/envs/gui/test_osworld_fidelity.py checks each against OSWorld's namesake (desktop-env) on the
same files; the differences above are pinned there.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import posixpath
import re
import sqlite3
import tarfile
import tempfile
import unicodedata
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.envs.gui.apps import formula
from agentgym.extras import requires

__all__ = [
    "METRICS",
    "bookmarks_checksum",
    "check_bookmarks",
    "check_chrome_prefs",
    "check_file_tree",
    "check_font_size",
    "check_history_deleted",
    "check_include_exclude",
    "chrome_preference",
    "compare_archive",
    "compare_docx_bold",
    "compare_docx_files",
    "compare_docx_headers",
    "compare_docx_tables",
    "compare_image_list",
    "compare_pdf_text",
    "compare_pptx_files",
    "compare_table",
    "compare_text_file",
    "exact_match",
]

Metric = Callable[..., "str | None"]


def _zip_member_check(data: bytes, member: str, kind: str) -> str | None:
    """None when ``data`` is an Office Open XML package with ``member``, else why not (a CSV, an ODF file
    or plain text saved under the expected name is the wrong format)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            if member not in package.namelist():
                return f"the file is not {kind} (no {member} in it)"
    except zipfile.BadZipFile:
        return f"the file is not {kind} (not a zip package)"
    return None


# ------------------------------------------------------------------------------------------ sheets
def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got == want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(want, str) and isinstance(got, str):
        return got.strip() == want.strip()
    return got == want


def _cells(sheet) -> dict[str, Any]:
    return {cell.coordinate: cell.value for row in sheet.iter_rows() for cell in row if cell.value not in (None, "")}


#: ``styles`` properties (OSWorld's names for them in its ``style`` rule) → a cell's, as OSWorld reads it: the
#: number format of a cell that holds a number (a text cell's shows nothing), the boldness of a non-empty one.
CELL_STYLES: dict[str, Callable[[Any], Any]] = {
    "font_bold": lambda cell: bool(cell.font.b),
    "number_format": lambda cell: cell.number_format if cell.data_type == "n" else None,
}


def _charts(sheet) -> list[tuple[str, str | None, tuple[tuple[str, str], ...]]]:
    """The sheet's charts as openpyxl reads them (OSWorld's chart rule reads them so; one it cannot read is left
    out): each one's type (``barChart``, ``lineChart``, ...), a bar chart's direction, and its series' value and
    category ranges, ``$`` and quotes dropped; sorted."""

    def reference(source) -> str:
        ref = source and (getattr(source, "numRef", None) or getattr(source, "strRef", None))
        return re.sub(r"[$']", "", ref.f or "") if ref else ""

    return sorted(
        (
            chart.tagname,
            getattr(chart, "barDir", None),
            tuple((reference(series.val), reference(series.cat)) for series in chart.series),
        )
        for chart in sheet._charts
    )


def _filters(sheet) -> tuple[str, dict[int, frozenset[str]], frozenset[int]]:
    """The sheet's AutoFilter (its range, ``$`` dropped, and each filtered column's shown values: its ``filters``
    list and its "equal" custom filters, as Calc writes a standard filter) and its hidden rows."""
    columns: dict[int, frozenset[str]] = {}
    for column in sheet.auto_filter.filterColumn:
        values = set(column.filters.filter) if column.filters is not None else set()
        for custom in column.customFilters.customFilter if column.customFilters is not None else ():
            values.add(custom.val if custom.operator in (None, "equal") else f"{custom.operator} {custom.val}")
        columns[column.colId] = frozenset(str(value) for value in values)
    hidden = frozenset(number for number, row in sheet.row_dimensions.items() if row.hidden)
    return (sheet.auto_filter.ref or "").replace("$", ""), columns, hidden


def compare_table(
    result: bytes | None,
    expected: bytes,
    *,
    formulas: Sequence[str] = (),
    functions: Sequence[str] = (),
    styles: Sequence[str] = (),
    charts: bool = False,
    filters: bool = False,
) -> str | None:
    """The agent's workbook against the gold one (both xlsx); see the module docstring."""
    if unknown := set(styles) - set(CELL_STYLES):
        raise ValueError(f"compare_table's styles are {sorted(CELL_STYLES)}, not {sorted(unknown)}")
    if result is None:
        return "the workbook was not saved where the task asked"
    if problem := _zip_member_check(result, "xl/workbook.xml", "an xlsx workbook"):
        return problem
    with requires("gui"):
        import openpyxl
    try:
        values = openpyxl.load_workbook(io.BytesIO(result), data_only=True, read_only=False)
        texts = openpyxl.load_workbook(io.BytesIO(result), data_only=False, read_only=False)
    except Exception as exc:  # openpyxl raises many kinds on a damaged package
        return f"the workbook could not be read ({type(exc).__name__}: {exc})"
    gold = openpyxl.load_workbook(io.BytesIO(expected), data_only=True)
    if values.sheetnames != gold.sheetnames:
        return f"the sheets are {values.sheetnames}, expected {gold.sheetnames}"
    for name in gold.sheetnames:
        got, want, raw = _cells(values[name]), _cells(gold[name]), _cells(texts[name])
        for cell in sorted(set(got) | set(want)):
            if not _same_value(got.get(cell), want.get(cell)):
                return f"{name}!{cell} is {got.get(cell)!r}, expected {want.get(cell)!r}"
        if name == gold.sheetnames[0]:
            for cell in formulas:
                if not (isinstance(raw.get(cell), str) and raw[cell].startswith("=")):
                    return f"{name}!{cell} holds {raw.get(cell)!r}, not a formula"
                called = set(re.findall(r"([A-Z][A-Z0-9.]*)\s*\(", raw[cell].upper()))
                if functions and not called & {function.upper() for function in functions}:
                    return f"{name}!{cell}'s formula {raw[cell]!r} does not use {' or '.join(functions)}"
        for prop in styles:
            for cell in sorted(set(got) | set(want)):
                mine, theirs = CELL_STYLES[prop](values[name][cell]), CELL_STYLES[prop](gold[name][cell])
                if mine != theirs:
                    return f"{name}!{cell}'s {prop} is {mine!r}, expected {theirs!r}"
        if charts and (mine := _charts(values[name])) != (theirs := _charts(gold[name])):
            return f"{name}'s charts are {mine}, expected {theirs}"
        if filters and (found := _filters(values[name])) != (wanted := _filters(gold[name])):
            return f"{name}'s filter (range, shown values, hidden rows) is {found}, expected {wanted}"
        if problem := _recompute(name, raw, got):
            return problem
    return None


def _recompute(sheet: str, raw: dict[str, Any], cached: dict[str, Any]) -> str | None:
    """Every formula cell's cached value against the formula evaluated over the file's own cells."""
    cells = {cell: value if isinstance(value, str) else repr(value) for cell, value in raw.items()}
    for cell, text in raw.items():
        if not (isinstance(text, str) and text.startswith("=")):
            continue
        try:
            value = formula.evaluate(cells, cell)
        except (formula.FormulaError, KeyError) as exc:
            return f"{sheet}!{cell}'s formula {text!r} cannot be checked ({exc})"
        if not _same_value(cached.get(cell), value):
            return f"{sheet}!{cell} shows {cached.get(cell)!r}, but its formula {text!r} gives {value!r}"
    return None


# --------------------------------------------------------------------------------------- documents
def _document(data: bytes):
    with requires("gui"):
        import docx
    return docx.Document(io.BytesIO(data))


def _paragraphs(data: bytes) -> list:
    return [paragraph for paragraph in _document(data).paragraphs if paragraph.text.strip()]


def _read_docx(result: bytes | None) -> tuple[list | None, str | None]:
    if result is None:
        return None, "the document was not saved where the task asked"
    if problem := _zip_member_check(result, "word/document.xml", "a docx document"):
        return None, problem
    try:
        return _paragraphs(result), None
    except Exception as exc:  # python-docx raises many kinds on a damaged package
        return None, f"the document could not be read ({type(exc).__name__}: {exc})"


_ODT = "application/vnd.oasis.opendocument.text"


def _is_odt(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            return package.read("mimetype").decode("ascii", errors="replace").strip() == _ODT
    except (zipfile.BadZipFile, KeyError):
        return False


def _odt_texts(data: bytes) -> list[str]:
    """The texts of an OpenDocument text's paragraphs and headings, in document order (odfpy; spans, tabs and
    runs of spaces as the reader sees them)."""
    with requires("gui"):
        from odf import teletype
        from odf.element import Node
        from odf.opendocument import load
    texts: list[str] = []

    def walk(node) -> None:
        for child in node.childNodes:
            if (
                child.nodeType == Node.ELEMENT_NODE
                and child.qname[1] in ("p", "h")
                and child.qname[0].endswith(":text:1.0")
            ):
                texts.append(teletype.extractText(child))
            elif child.nodeType == Node.ELEMENT_NODE:
                walk(child)

    walk(load(io.BytesIO(data)).text)
    return texts


def _document_texts(result: bytes | None, odt: bool) -> tuple[list[str] | None, str | None]:
    """The non-empty paragraphs' texts (stripped) of a docx, or of an odt where the gold file is one."""
    if not odt:
        paragraphs, problem = _read_docx(result)
        return (None, problem) if problem else ([p.text.strip() for p in paragraphs], None)
    if result is None:
        return None, "the document was not saved where the task asked"
    if not _is_odt(result):
        return None, "the file is not an odt document (no OpenDocument text mimetype)"
    try:
        return [text.strip() for text in _odt_texts(result) if text.strip()], None
    except Exception as exc:  # odfpy raises many kinds on a damaged package
        return None, f"the document could not be read ({type(exc).__name__}: {exc})"


def compare_docx_files(result: bytes | None, expected: bytes) -> str | None:
    """The non-empty paragraphs' texts, in order, equal the gold document's (docx, or odt where the gold is)."""
    odt = _is_odt(expected)
    got, problem = _document_texts(result, odt)
    if problem:
        return problem
    want, _ = _document_texts(expected, odt)
    if got != want:
        return f"the document's paragraphs are {got!r}, expected {want!r}"
    return None


def _tables(data: bytes) -> list[list[list[str]]]:
    """Each table's rows of cell texts (stripped)."""
    return [[[cell.text.strip() for cell in row.cells] for row in table.rows] for table in _document(data).tables]


def _compare_docx(result: bytes | None, expected: bytes, extract: Callable[[bytes], Any], what: str) -> str | None:
    """None where ``extract`` (a docx's bytes to something comparable) gives the same for the result file as for
    the gold one, else why not: the result is missing, unsaved or unreadable (``_read_docx``'s message), or
    ``what`` differs."""
    _, problem = _read_docx(result)
    if problem:
        return problem
    got, want = extract(result), extract(expected)
    if got != want:
        return f"{what} are {got!r}, expected {want!r}"
    return None


def compare_docx_tables(result: bytes | None, expected: bytes) -> str | None:
    """The document's tables (count, shape, cell texts) equal the gold document's."""
    return _compare_docx(result, expected, _tables, "the document's tables")


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _field_name(instruction: str) -> str:
    return "{" + (instruction.split() or [""])[0].upper() + "}"


def _field_text(element, fields: list[str]) -> str:
    """A paragraph's text with each field as ``{NAME}`` (its instruction's first word: ``{PAGE}``), not its cached
    result: a page number is a field, and a typed "1" reads as "1". ``fields`` holds the instructions of the complex
    fields open at this point (``w:fldChar`` begin ... separate ... end); what lies inside one is not text."""
    parts: list[str] = []
    for child in element:
        tag = child.tag
        if tag == f"{_W}fldSimple":
            if not fields:
                parts.append(_field_name(child.get(f"{_W}instr") or ""))
        elif tag == f"{_W}fldChar":
            kind = child.get(f"{_W}fldCharType")
            if kind == "begin":
                fields.append("")
            elif kind == "end" and fields:
                instruction = fields.pop()
                if not fields:
                    parts.append(_field_name(instruction))
        elif tag == f"{_W}instrText":
            if fields:
                fields[-1] += child.text or ""
        elif fields and tag in (f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr"):
            continue  # a field's cached result
        elif tag == f"{_W}t":
            parts.append(child.text or "")
        elif tag == f"{_W}tab":
            parts.append("\t")
        elif tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
        else:  # a run, a hyperlink, a content control: its text, and a field that ends in it
            parts.append(_field_text(child, fields))
    return "".join(parts)


def _headers_footers(data: bytes) -> list[tuple[list[str], list[str]]]:
    """Per section, the non-empty paragraphs (stripped, fields as ``{NAME}``) of its page header and its footer;
    a header or footer the section does not define (linked to the previous section's, or none) has none."""
    sections = []
    for section in _document(data).sections:
        parts = []
        for part in (section.header, section.footer):
            paragraphs = [] if part.is_linked_to_previous else part.paragraphs
            parts.append([text for p in paragraphs if (text := _field_text(p._p, []).strip())])
        sections.append((parts[0], parts[1]))
    return sections


def compare_docx_headers(result: bytes | None, expected: bytes) -> str | None:
    """The sections' page headers and footers (their paragraphs' texts, fields as fields) equal the gold document's."""
    return _compare_docx(result, expected, _headers_footers, "the (header, footer) paragraphs per section")


def _bold(paragraph) -> bool:
    runs = [run for run in paragraph.runs if run.text.strip()]
    return bool(runs) and all(run.bold or (run.bold is None and _style_bold(paragraph)) for run in runs)


def _style_bold(paragraph) -> bool:
    style = paragraph.style
    while style is not None:
        if style.font.bold is not None:
            return bool(style.font.bold)
        style = style.base_style
    return False


def compare_docx_bold(result: bytes | None, expected: bytes) -> str | None:
    """Which non-empty paragraphs are bold matches the gold document (their texts are compare_docx_files')."""
    paragraphs, problem = _read_docx(result)
    if problem:
        return problem
    got = [_bold(paragraph) for paragraph in paragraphs]
    want = [_bold(paragraph) for paragraph in _paragraphs(expected)]
    if got != want:
        return f"the bold paragraphs are {got}, expected {want}"
    return None


# -------------------------------------------------------------------------------------------- PDFs
_PDF = b"%PDF-"
MAX_PDF_PAGES = 100  # a longer PDF is refused before its text is extracted (a small file can hold many pages)


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def _pdf_text(data: bytes) -> str:
    with requires("gui"):
        import pypdf
    reader = pypdf.PdfReader(io.BytesIO(data))
    if len(reader.pages) > MAX_PDF_PAGES:
        raise ValueError(f"{len(reader.pages)} pages is over {MAX_PDF_PAGES}")
    return _normal(" ".join(page.extract_text() or "" for page in reader.pages))


def compare_pdf_text(result: bytes | None, expected: bytes) -> str | None:
    """The PDF's text equals the gold PDF's, or the gold document's paragraphs' (see the module docstring)."""
    if result is None:
        return "the PDF was not exported where the task asked"
    if not result.startswith(_PDF):
        return "the file is not a PDF"
    try:
        got = _pdf_text(result)
    except Exception as exc:  # pypdf raises many kinds on a damaged or hostile file
        return f"the PDF could not be read ({type(exc).__name__}: {exc})"
    if expected.startswith(_PDF):
        want = _pdf_text(expected)
    else:
        texts, _ = _document_texts(expected, _is_odt(expected))
        want = _normal(" ".join(texts or ()))
    if got != want:
        return f"the PDF's text is {got[:400]!r}, expected {want[:400]!r}"
    return None


# ------------------------------------------------------------------------------------------ slides
def _slide_texts(data: bytes) -> list[list[str]]:
    """Per slide, its shapes' texts and then its speaker notes' (``notes: ...``, where it has any)."""
    with requires("gui"):
        import pptx
    deck = pptx.Presentation(io.BytesIO(data))
    slides = []
    for slide in deck.slides:
        texts = [
            shape.text_frame.text.strip()
            for shape in slide.shapes
            if shape.has_text_frame and shape.text_frame.text.strip()
        ]
        # has_notes_slide first: reading notes_slide would add an empty one.
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and notes.text.strip():
            texts.append(f"notes: {notes.text.strip()}")
        slides.append(texts)
    return slides


def _slide_layouts(data: bytes) -> list[str]:
    """Each slide's layout's name (as LibreOffice's pptx export writes them: Title Slide, Title, Content, ...)."""
    with requires("gui"):
        import pptx
    return [slide.slide_layout.name.strip() for slide in pptx.Presentation(io.BytesIO(data)).slides]


def compare_pptx_files(result: bytes | None, expected: bytes, *, layouts: bool = False) -> str | None:
    """The same number of slides, and on each the same texts, shape by shape; with ``layouts`` (ours: OSWorld's
    namesake has no such option) each slide's layout's name too."""
    if result is None:
        return "the presentation was not saved where the task asked"
    if problem := _zip_member_check(result, "ppt/presentation.xml", "a pptx presentation"):
        return problem
    try:
        got = _slide_texts(result)
        got_layouts = _slide_layouts(result) if layouts else []
    except Exception as exc:  # python-pptx raises many kinds on a damaged package
        return f"the presentation could not be read ({type(exc).__name__}: {exc})"
    want = _slide_texts(expected)
    if got != want:
        return f"the slides' texts are {got!r}, expected {want!r}"
    if layouts and got_layouts != (want_layouts := _slide_layouts(expected)):
        return f"the slides' layouts are {got_layouts}, expected {want_layouts}"
    return None


# -------------------------------------------------------------------------------------------- text
def check_include_exclude(result: bytes | None, rules: dict) -> str | None:
    """A text file that contains every ``include`` string and no ``exclude`` string."""
    if result is None:
        return "the file does not exist"
    text = result.decode("utf-8", errors="replace")
    for needle in rules.get("include", ()):
        if needle not in text:
            return f"the file does not contain {needle!r}"
    for needle in rules.get("exclude", ()):
        if needle in text:
            return f"the file contains {needle!r}"
    return None


def _normal_text(text: str, *, ignore_blanks: bool, ignore_case: bool) -> str:
    if ignore_blanks:
        text = re.sub(r"\s+", " ", text).strip()
    return text.lower() if ignore_case else text


def compare_text_file(
    result: bytes | None, expected: bytes, *, ignore_blanks: bool = False, ignore_case: bool = False
) -> str | None:
    """The text file the agent saved has the gold file's text (UTF-8), exactly unless the options relax it."""
    if result is None:
        return "the file was not saved where the task asked"
    try:
        text = result.decode("utf-8")
    except UnicodeDecodeError:
        return "the file is not UTF-8 text"
    got = _normal_text(text, ignore_blanks=ignore_blanks, ignore_case=ignore_case)
    want = _normal_text(expected.decode("utf-8"), ignore_blanks=ignore_blanks, ignore_case=ignore_case)
    if got != want:
        return f"the file's text is {got[:400]!r}, expected {want[:400]!r}"
    return None


# ---------------------------------------------------------------------------------- folders and archives
def check_file_tree(result: dict[str, dict] | None, rules: dict) -> str | None:
    """A folder's listing (the ``vm_tree`` getter: relative path → ``{"type": "file" | "dir" | "symlink" |
    "other", "mode", "size", "sha256"}``, symlinks not followed) against ``rules``: ``files`` (path →
    ``{"sha256": ..., "executable": bool}``, each key optional), ``dirs`` (paths), ``absent`` (paths) and
    ``only`` (True: no entry besides those and their parent folders)."""
    if result is None:
        return "the folder does not exist"
    for path, want in rules.get("files", {}).items():
        entry = result.get(path)
        if entry is None:
            return f"{path} does not exist"
        if entry["type"] != "file":
            return f"{path} is a {entry['type']}, not a regular file"
        if "sha256" in want and entry["sha256"] != want["sha256"]:
            return f"{path} does not have the expected content"
        if "executable" in want and bool(entry["mode"] & 0o100) != want["executable"]:
            return f"{path} should {'' if want['executable'] else 'not '}be executable"
    for path in rules.get("dirs", ()):
        if result.get(path, {}).get("type") != "dir":
            return f"{path} is not a folder"
    for path in rules.get("absent", ()):
        if path in result:
            return f"{path} is still there"
    if rules.get("only"):
        named = {*rules.get("files", {}), *rules.get("dirs", ())}
        for path in list(named):
            while path := posixpath.dirname(path):
                named.add(path)
        if extra := sorted(set(result) - named):
            return f"unexpected entries: {', '.join(extra[:10])}"
    return None


MAX_MEMBERS = 1000
MAX_UNPACKED_BYTES = 64 << 20  # the sum of the members' unpacked sizes; more is a zip bomb, not a task's output


class _Bounded(io.RawIOBase):
    """A stream that raises once more than ``limit`` bytes were read from it (a gzip bomb's unpacked stream)."""

    def __init__(self, stream, limit: int):
        self.stream, self.left = stream, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(min(len(buffer), self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise ValueError(f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        buffer[: len(data)] = data
        return len(data)


def _member_name(name: str) -> str:
    normal = posixpath.normpath(name)
    if name.startswith("/") or normal == ".." or normal.startswith("../") or "\\" in name:
        raise ValueError(f"the member {name!r} would unpack outside the folder")
    return normal


def _archive_members(data: bytes) -> dict[str, bytes]:
    """The files in a zip or a (gzipped) tar, by normalised name; ValueError on anything unsafe or too big."""
    files: dict[str, bytes] = {}
    budget = MAX_UNPACKED_BYTES
    if data.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            members = package.infolist()
            if len(members) > MAX_MEMBERS:
                raise ValueError(f"it has more than {MAX_MEMBERS} members")
            for info in members:
                name = _member_name(info.filename)
                if (info.external_attr >> 16) & 0o170000 not in (0, 0o100000, 0o040000):
                    raise ValueError(f"the member {info.filename!r} is not a file or a folder")
                if info.is_dir():
                    continue
                if name in files:
                    raise ValueError(f"the member {name!r} appears twice")
                with package.open(info) as member:  # read bounded: the declared size is the archive's claim
                    content = member.read(budget + 1)
                budget -= len(content)
                if budget < 0:
                    raise ValueError(f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                files[name] = content
        return files
    # The stream's own bound also counts what lies between members (headers, padding, what the tar skips).
    stream = _Bounded(gzip.GzipFile(fileobj=io.BytesIO(data)), MAX_UNPACKED_BYTES + (MAX_MEMBERS + 1) * 1024)
    with tarfile.open(fileobj=io.BufferedReader(stream), mode="r|") as tar:
        for count, entry in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise ValueError(f"it has more than {MAX_MEMBERS} members")
            name = _member_name(entry.name)
            if entry.isdir():
                continue
            if not entry.isfile():
                raise ValueError(f"the member {entry.name!r} is not a file or a folder")
            if name in files:
                raise ValueError(f"the member {name!r} appears twice")
            member = tar.extractfile(entry)
            files[name] = member.read(budget + 1) if member else b""
            budget -= len(files[name])
            if budget < 0:
                raise ValueError(f"it unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    return files


def compare_archive(result: bytes | None, expected: bytes) -> str | None:
    """The archive the agent made (zip, or tar.gz) holds the gold archive's files, by name and bytes, and no others."""
    if result is None:
        return "the archive was not made where the task asked"
    gold_zip = expected.startswith(b"PK")
    if result.startswith(b"PK") != gold_zip or (not gold_zip and not result.startswith(b"\x1f\x8b")):
        return f"the file is not a {'zip' if gold_zip else 'gzipped tar'} archive"
    try:
        got = _archive_members(result)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        return f"the archive is refused ({exc})"
    want = _archive_members(expected)
    if set(got) != set(want):
        return f"the archive's files are {sorted(got)[:20]}, expected {sorted(want)}"
    if changed := sorted(name for name in want if got[name] != want[name]):
        return f"these files differ from the originals: {', '.join(changed)}"
    return None


# ------------------------------------------------------------------------------------------ images
#: The file types compare_image_list's ``format`` names, by their signatures.
IMAGE_SIGNATURES = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}
MAX_PIXELS = 1 << 24  # a bigger image is refused before it is decoded (a small PNG can claim a huge canvas)


def _pixels(data: bytes):
    with requires("gui"):
        from PIL import Image
    image = Image.open(io.BytesIO(data))
    if image.width * image.height > MAX_PIXELS:
        raise ValueError(f"{image.width}x{image.height} is over {MAX_PIXELS} pixels")
    return image.convert("RGBA")


def compare_image_list(
    result: bytes | None, expected: bytes, *, format: str = "png", tolerance: float = 0.0
) -> str | None:
    """The image the agent exported, a ``format`` file (png or jpeg), has the gold image's size, and its RGBA
    pixels differ from the gold's by at most ``tolerance`` levels on average (0: not at all)."""
    if format not in IMAGE_SIGNATURES:
        raise ValueError(f"format must be one of {sorted(IMAGE_SIGNATURES)}, not {format!r}")
    if result is None:
        return "the image was not exported where the task asked"
    if not result.startswith(IMAGE_SIGNATURES[format]):
        return f"the file is not a {format.upper()} image"
    try:
        got = _pixels(result)
    except Exception as exc:  # Pillow raises many kinds on a damaged or hostile file
        return f"the image could not be read ({type(exc).__name__}: {exc})"
    want = _pixels(expected)
    if got.size != want.size:
        return f"the image is {got.width}x{got.height}, expected {want.width}x{want.height}"
    with requires("gui"):
        from PIL import ImageChops, ImageStat
    if got.tobytes() == want.tobytes():
        return None
    difference = ImageChops.difference(got, want)
    mean = sum(ImageStat.Stat(difference).mean) / 4
    if mean > tolerance:
        # alpha_only=False: an RGBA image's bounding box is otherwise its alpha channel's alone.
        box = difference.getbbox(alpha_only=False)
        return f"the image's pixels differ from the expected ones in the box {box} (by {mean:.2f} levels on average)"
    return None


# ---------------------------------------------------------------------------------------------- Chromium
#: The roots of Chromium's Bookmarks file, in the order its checksum covers them.
BOOKMARK_ROOTS = ("bookmark_bar", "other", "synced")


def bookmarks_checksum(roots: Mapping[str, Any]) -> str:
    """The checksum Chromium stores in its Bookmarks file (``BookmarkCodec``): MD5 over every node, depth first from
    the roots in :data:`BOOKMARK_ROOTS`' order, of its id, its name (UTF-16LE) and ``url`` and its URL, or ``folder``
    and then its children."""
    digest = hashlib.md5(usedforsecurity=False)

    def node(item: Mapping[str, Any]) -> None:
        digest.update(str(item["id"]).encode())
        digest.update(str(item["name"]).encode("utf-16-le"))
        if item["type"] == "url":
            digest.update(b"url")
            digest.update(str(item["url"]).encode())
        else:
            digest.update(b"folder")
            for child in item.get("children", ()):
                node(child)

    for root in BOOKMARK_ROOTS:
        node(roots[root])
    return digest.hexdigest()


def _bookmark_urls(roots: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every bookmark as (folder path, name, URL), the folder path as Chromium names its folders ("Bookmarks bar/X")."""
    found: list[tuple[str, str, str]] = []

    def walk(item: Mapping[str, Any], folder: str) -> None:
        if item["type"] == "url":
            found.append((folder, item["name"], item["url"]))
            return
        inner = f"{folder}/{item['name']}" if folder else item["name"]
        for child in item.get("children", ()):
            walk(child, inner)

    for root in BOOKMARK_ROOTS:
        walk(roots[root], "")
    return found


def check_bookmarks(result: bytes | None, rules: dict) -> str | None:
    """Chromium's Bookmarks file (the ``bookmarks`` getter) against ``rules``: ``present`` (``{"name", "url",
    "folder"?}`` each: a bookmark with that name and URL, in that folder path where given) and ``absent`` (URLs no
    bookmark may have). The file's checksum must be Chromium's (see the module docstring)."""
    if result is None:
        return "Chromium has no bookmarks file"
    try:
        data = json.loads(result)
        roots = data["roots"]
        checksum = bookmarks_checksum(roots)
        bookmarks = _bookmark_urls(roots)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        return f"the bookmarks file could not be read ({type(exc).__name__}: {exc})"
    if data.get("checksum") != checksum:
        return "the bookmarks file's checksum is not the one Chromium writes (the file was not written by Chromium)"
    for want in rules.get("present", ()):
        if not any(
            name == want["name"] and url == want["url"] and want.get("folder", folder) == folder
            for folder, name, url in bookmarks
        ):
            where = f" in {want['folder']}" if "folder" in want else ""
            return f"no bookmark named {want['name']!r} for {want['url']}{where} (the bookmarks: {bookmarks[:10]})"
    for url in rules.get("absent", ()):
        if any(have == url for _, _, have in bookmarks):
            return f"a bookmark for {url} is still there"
    return None


#: The most SQLite virtual-machine steps reading the History database may take (far more than a real profile needs).
HISTORY_QUERY_STEPS = 50_000_000


def history_urls(files: Mapping[str, bytes]) -> list[tuple[str, str, int]]:
    """The ``urls`` table (url, title, last_visit_time: what OSWorld's ``history`` getter selects) of Chromium's History
    database, given as its files (``History`` and any ``History-journal`` or ``History-wal``): they are written to a
    private folder and opened by SQLite, which applies the journal or log as Chromium's next start would."""
    with tempfile.TemporaryDirectory(prefix="agentgym-history-") as folder:
        for name, data in files.items():
            if name not in ("History", "History-journal", "History-wal"):
                raise ValueError(f"{name!r} is not a file of the History database")
            (Path(folder) / name).write_bytes(data)
        database = sqlite3.connect(Path(folder) / "History")
        steps = iter(range(HISTORY_QUERY_STEPS // 1000))
        # A query over the agent's file ends within a bound (a "urls" view could be a query that never ends).
        database.set_progress_handler(lambda: next(steps, None) is None, 1000)
        try:
            database.execute("PRAGMA trusted_schema = OFF")  # a view or trigger in the agent's file runs nothing
            return database.execute("SELECT url, title, last_visit_time FROM urls").fetchall()
        finally:
            database.close()


def check_history_deleted(result: Mapping[str, bytes] | None, rule: dict) -> str | None:
    """No URL in Chromium's history (the ``history`` getter) contains one of ``rule``'s ``keywords``."""
    if rule.get("type") != "keywords":
        raise ValueError(f"check_history_deleted's rule type is 'keywords', not {rule.get('type')!r}")
    if result is None:
        return "Chromium has no History database"
    try:
        rows = history_urls(result)
    except (sqlite3.Error, ValueError) as exc:
        return f"the History database could not be read ({type(exc).__name__}: {exc})"
    for keyword in rule["keywords"]:
        if kept := [url for url, _, _ in rows if keyword in url]:
            return f"the history still has {kept[:5]}"
    return None


_UNSET = object()


def _lookup(preferences: Any, path: str) -> Any:
    """The value at a dotted ``path`` in a parsed ``Preferences`` object, or ``_UNSET``."""
    value = preferences
    for part in path.split("."):
        value = value.get(part, _UNSET) if isinstance(value, dict) else _UNSET
        if value is _UNSET:
            break
    return value


def _preferences(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def chrome_preference(preferences: bytes | None, path: str, default: Any = None) -> Any:
    """The value at ``path`` (dotted: ``session.startup_urls``) in Chromium's ``Preferences`` file, ``default`` where it is
    unset; None where the file is missing or not a JSON object."""
    parsed = None if preferences is None else _preferences(preferences)
    if parsed is None:
        return None
    value = _lookup(parsed, path)
    return default if value is _UNSET else value


def check_chrome_prefs(result: bytes | None, rules: dict) -> str | None:
    """Each of ``rules["prefs"]`` (dotted path → value) has exactly that value, of that JSON type, in Chromium's
    ``Preferences``."""
    if result is None:
        return "Chromium has no Preferences file"
    preferences = _preferences(result)
    if preferences is None:
        return "the Preferences file could not be read (not a JSON object)"
    for path, want in rules["prefs"].items():
        got = _lookup(preferences, path)
        if got is _UNSET:
            return f"{path} is not set, expected {want!r}"
        if type(got) is not type(want) or got != want:
            return f"{path} is {got!r}, expected {want!r}"
    return None


def exact_match(result: Any, rules: dict) -> str | None:
    """The getter's value is ``rules["expected"]`` (OSWorld's ``exact_match``)."""
    if result != rules["expected"]:
        return f"the value is {result!r}, expected {rules['expected']!r}"
    return None


#: Chromium's default font size (``webkit.webprefs.default_font_size`` where the profile sets none).
DEFAULT_FONT_SIZE = 16


def check_font_size(result: bytes | None, rule: dict) -> str | None:
    """Chromium's default font size (its ``Preferences``, the ``chrome_font_size`` getter) is ``rule``'s ``value``, or
    strictly between its ``min`` and ``max`` (``type``: ``value`` or ``range``, as OSWorld's)."""
    if rule.get("type") not in ("value", "range"):
        raise ValueError(f"check_font_size's rule type is 'value' or 'range', not {rule.get('type')!r}")
    if result is None:
        return "Chromium has no Preferences file"
    try:
        size = json.loads(result).get("webkit", {}).get("webprefs", {}).get("default_font_size", DEFAULT_FONT_SIZE)
    except (ValueError, AttributeError) as exc:
        return f"the Preferences file could not be read ({type(exc).__name__}: {exc})"
    if rule["type"] == "value" and size != rule["value"]:
        return f"the default font size is {size!r}, expected {rule['value']}"
    if rule["type"] == "range" and not (isinstance(size, int | float) and rule["min"] < size < rule["max"]):
        return f"the default font size is {size!r}, expected between {rule['min']} and {rule['max']}"
    return None


#: OSWorld's metric names → ours.
METRICS: dict[str, Metric] = {
    "compare_table": compare_table,
    "compare_docx_files": compare_docx_files,
    "compare_docx_bold": compare_docx_bold,
    "compare_docx_tables": compare_docx_tables,
    "compare_docx_headers": compare_docx_headers,
    "compare_pptx_files": compare_pptx_files,
    "check_include_exclude": check_include_exclude,
    "check_file_tree": check_file_tree,
    "compare_archive": compare_archive,
    "compare_text_file": compare_text_file,
    "compare_image_list": compare_image_list,
    "compare_pdf_text": compare_pdf_text,
    "check_bookmarks": check_bookmarks,
    "check_history_deleted": check_history_deleted,
    "check_font_size": check_font_size,
    "check_chrome_prefs": check_chrome_prefs,
    "exact_match": exact_match,
}
