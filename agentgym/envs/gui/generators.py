"""Seeded generators of OSWorld-format tasks on the real apps: each makes a task's input file, its gold file and its reference solution.

OSWorld's inputs and gold files live on a model hub; ours are made here, from a seed, with the
libraries the metrics read them with (openpyxl, python-docx). A generator returns the task in
OSWorld's JSON shape (:mod:`agentgym.envs.gui.osworld`) together with the bytes its ``download``
and ``local_file`` entries name, so a task can be written out as JSON plus files and loaded back
with :func:`~agentgym.envs.gui.osworld.load_task_file`.

Reference solutions drive LibreOffice from the keyboard only (``ctrl+Home`` and arrow keys to a
cell or paragraph, typing, ``ctrl+b``, ``ctrl+d``, ``ctrl+s``, dialogs through their mnemonics, and
menu commands through LibreOffice's command search, ``shift+Escape``), so they do not depend on where
its toolbars and panes are drawn. Line breaks are ``key("Return")``, never a ``\n`` in ``type``: xdotool
types that as the Linefeed keysym, which LibreOffice ignores. The image's LibreOffice settings (:data:`agentgym.sandbox.desktop.LIBREOFFICE_SETTINGS`)
save xlsx and docx without asking about the format, and keep typed text as typed (Calc's AutoInput
and Writer's word completion are off).

Calc kinds (each cell a task touches lies in A1:E10, the grid :mod:`agentgym.envs.gui.apps.formula`
recomputes): ``sum``, ``average`` and ``max`` of a column under a label, a ``product`` column of
formulas, ``fix`` a mistyped number, ``sort`` the rows by a column (descending), ``sumif`` (a
per-category summary of SUMIF formulas: pivot-like), ``decimals`` (a number format), ``bold``
(the header row), a ``chart`` (column, bar or line, over the table) and a ``filter`` (a standard
filter that shows one category). Writer kinds: ``append`` a paragraph, ``title`` (insert a first
paragraph), ``bold`` the heading, ``delete`` a paragraph, ``replace`` a name everywhere (Find &
Replace), add a ``table``, export a ``pdf``, put a text in the page ``header``, a page-number field
in the footer (``pagenum``); on an OpenDocument text (``odt``, made with odfpy) ``append``,
``title``, ``delete`` and ``replace``. Impress kinds: change the first slide's ``title``,
``retitle`` another slide, replace the ``subtitle``, add a ``bullet``, add a ``slide``, add speaker
``notes``, change a slide's ``layout``. Kinds whose reference solutions have not passed through the
GUI yet are generated but not catalogued (:data:`UNVERIFIED`). Text kinds (a ``.txt`` file in
mousepad, graded by ``compare_text_file``): ``append`` a line, insert a ``heading`` line, ``delete``
a line, ``fix`` a misspelt word. GIMP kinds (a PNG edited with one command run through GIMP's command
search and exported as a new file, graded by ``compare_image_list``): ``mirror``, ``flip``, ``rotate``
(180 degrees), ``rotate90`` (clockwise), ``invert``, ``grayscale``, ``autocrop`` (a plain border cropped
away), exactly; ``scale`` (to twice the size, typed into Scale Image's dialog: the size exactly, the pixels
within a mean difference, as GIMP's cubic interpolation is not Pillow's) and ``jpeg`` (export as a JPEG:
within what the compression changes). Each app also has ``infeasible`` tasks (:data:`INFEASIBLE`):
requests the app cannot carry out, whose reference solution is ``fail()``.

OSWorld's "os" tasks (files in a terminal) and "multi_apps" tasks (data carried from one app into
another) are made by :mod:`agentgym.envs.gui.generators_os`, its "chrome" tasks (Chromium on local pages)
by :mod:`agentgym.envs.gui.generators_chrome`, through :func:`generate` too (families ``os``, ``multi``
and ``chrome``).
"""

from __future__ import annotations

import io
import random
from typing import Any

from agentgym.extras import requires

__all__ = [
    "CALC_KINDS",
    "CHART_TYPES",
    "IMPRESS_KINDS",
    "GIMP_KINDS",
    "INFEASIBLE",
    "LIBREOFFICE_LAYOUTS",
    "SEEDS",
    "TEXT_KINDS",
    "UNVERIFIED",
    "WRITER_KINDS",
    "generate",
    "generated_tasks",
]

HOME = "/home/agent"
SEEDS = (0, 1, 2)
_ITEMS = ("Rent", "Food", "Travel", "Books", "Power", "Water", "Phone", "Gifts", "Tools", "Paint", "Fuel", "Tea")
_SENTENCES = (
    "The team met on Monday.",
    "Sales grew in the north.",
    "Two new stores opened.",
    "Costs stayed flat this year.",
    "The board approved the plan.",
    "Hiring will resume in May.",
    "The old office is closed.",
    "Our app has new users.",
    "Shipping times went down.",
    "The audit found no issues.",
)
_TITLES = ("Quarterly report", "Project notes", "Meeting summary", "Annual review", "Status update")


def _key(*names: str) -> str:
    return f'key("{" ".join(names)}")'


def _type(text: str) -> str:
    return f"type({text!r})"


def _workbook(
    rows: list[list[Any]],
    *,
    bold: str = "",
    number_format: tuple[str, str] = ("", ""),
    chart: str = "",
    shown: tuple[int, str] = (0, ""),
) -> bytes:
    """A one-sheet workbook; ``bold`` a range whose cells are bold, ``number_format`` (range, format code), ``chart``
    a chart's type (column, bar or line) over the first two columns: one series of the values below B1, with column
    A's labels below A1 as its categories (what Calc's chart wizard makes of that block); ``shown`` (column, value):
    an AutoFilter over the rows that shows only those whose cell in that column (1: A) holds the value, the others
    hidden (as Calc saves a standard filter too)."""
    with requires("gui"):
        import openpyxl
        from openpyxl.chart import BarChart, LineChart
        from openpyxl.chart.data_source import AxDataSource, NumDataSource, NumRef, StrRef
        from openpyxl.chart.series import Series as ChartSeries
        from openpyxl.styles import Font
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    for row in rows:
        sheet.append(row)
    if chart:
        # The references as Calc writes them, the sheet's name unquoted (OSWorld's chart rule compares the strings).
        graph = LineChart() if chart == "line" else BarChart(barDir="bar" if chart == "bar" else "col")
        graph.series.append(
            ChartSeries(
                val=NumDataSource(numRef=NumRef(f=f"Sheet1!$B$2:$B${len(rows)}")),
                cat=AxDataSource(strRef=StrRef(f=f"Sheet1!$A$2:$A${len(rows)}")),
            )
        )
        sheet.add_chart(graph, "D2")
    column, value = shown
    if value:
        sheet.auto_filter.ref = f"A1:{sheet.cell(1, len(rows[0])).column_letter}{len(rows)}"
        sheet.auto_filter.add_filter_column(column - 1, [value])
        for number, row in enumerate(rows[1:], start=2):
            sheet.row_dimensions[number].hidden = row[column - 1] != value
    for line in sheet[bold] if bold else ():
        for cell in line:
            cell.font = Font(bold=True)
    area, code = number_format
    for line in sheet[area] if area else ():
        for cell in line:
            cell.number_format = code
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _document(
    paragraphs: list[tuple[str, bool]],
    table: list[list[str]] | None = None,
    *,
    header: str = "",
    page_number: bool = False,
) -> bytes:
    """A docx with one paragraph per text (bold where asked), and ``table``'s rows as a table after them; ``header``
    the page header's text, ``page_number`` a footer that holds a PAGE field (as Writer and Word write one: a
    complex field whose cached result is "1")."""
    with requires("gui"):
        import docx
        from docx.oxml import parse_xml
        from docx.oxml.ns import nsdecls
    document = docx.Document()
    for text, bold in paragraphs:
        run = document.add_paragraph().add_run(text)
        run.bold = bold or None
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, texts in zip(grid.rows, table):
            for cell, text in zip(row.cells, texts):
                cell.text = text
    if header:
        document.sections[0].header.paragraphs[0].text = header
    if page_number:
        footer = document.sections[0].footer.paragraphs[0]._p
        for part in (
            '<w:fldChar w:fldCharType="begin"/>',
            '<w:instrText xml:space="preserve"> PAGE </w:instrText>',
            '<w:fldChar w:fldCharType="separate"/>',
            "<w:t>1</w:t>",
            '<w:fldChar w:fldCharType="end"/>',
        ):
            footer.append(parse_xml(f"<w:r {nsdecls('w')}>{part}</w:r>"))
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _deck(
    slides: list[tuple[str, list[str]]],
    notes: dict[int, str] | None = None,
    layouts: dict[int, int] | None = None,
    *,
    libreoffice_layouts: bool = False,
) -> bytes:
    """A deck whose first slide is a title slide (title, subtitle lines) and the rest title-and-content slides;
    ``notes`` maps a slide's index to its speaker notes, ``layouts`` to another layout of python-pptx's default
    template (its index: 5 Title Only; a slide without lines keeps its body placeholder empty).

    ``libreoffice_layouts``: the layouts named as LibreOffice's pptx export names them (:data:`LIBREOFFICE_LAYOUTS`),
    and the title-and-content one of type ``tx`` (title and text), not ``obj``: LibreOffice imports ``obj`` as its
    Title, Object layout, whose body takes no text (a new slide in it gets such a body), and exports that layout as
    a blank one; ``tx`` it imports as Title, Content."""
    with requires("gui"):
        import pptx
    deck = pptx.Presentation()
    if libreoffice_layouts:
        deck.slide_layouts[1]._element.set("type", "tx")
        for index, name in LIBREOFFICE_LAYOUTS.items():
            deck.slide_layouts[index].name = name
    for index, (title, lines) in enumerate(slides):
        layout = (layouts or {}).get(index, 0 if index == 0 else 1)
        slide = deck.slides.add_slide(deck.slide_layouts[layout])
        slide.shapes.title.text = title
        if not lines:
            continue
        body = slide.placeholders[1].text_frame
        body.text = lines[0]
        for line in lines[1:]:
            body.add_paragraph().text = line
        if notes and index in notes:
            slide.notes_slide.notes_text_frame.text = notes[index]
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _spec(task_id: str, instruction: str, path: str, metrics: list[tuple[str, dict]], solution: list[str]) -> dict:
    name = path.rpartition("/")[2]
    gold = f"gold-{name}"
    app = "mousepad" if path.endswith(".txt") else "libreoffice"
    return {
        "id": task_id,
        "instruction": f"{instruction} The file {path} is open; save it in the same place and format when you are done.",
        "source": "agentgym.envs.gui.generators",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": name, "path": path}]}},
            {"type": "open", "parameters": {"path": path}},
        ],
        "related_apps": [app],
        "evaluator": {
            "func": [metric for metric, _ in metrics],
            "conj": "and",
            "result": [{"type": "vm_file", "path": path, "dest": name}] * len(metrics),
            "expected": [{"type": "local_file", "path": gold}] * len(metrics),
            "options": [options for _, options in metrics],
        },
        "solution": [*solution, _key("ctrl+s"), "wait(2)", "done()"],
    }


# -------------------------------------------------------------------------------------------- Calc
CALC_KINDS = ("sum", "average", "max", "product", "fix", "sort", "sumif", "decimals", "bold", "chart", "filter")
_CATEGORIES = ("Food", "Travel", "Office", "Rent")
#: The chart kind's types, one per seed, and how far down the chart wizard's list of types each one is.
CHART_TYPES = ("column", "bar", "line")
_CHART_DOWNS = {"column": 0, "bar": 1, "line": 4}
#: The number format Calc's ctrl+shift+1 gives (two decimals, a thousands separator), as it saves it in xlsx.
TWO_DECIMALS = "#,##0.00"


def _calc(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"calc-{kind}-{seed}")
    count = rng.randint(3, 6)
    items = rng.sample(_ITEMS, count)
    stem = ["budget", "costs", "prices", "orders", "stock", "sales", "expenses", "invoice", "inventory", "revenue"]
    stem += ["spending"]
    path = f"{HOME}/Documents/{stem[CALC_KINDS.index(kind)]}.xlsx"
    go_to_cell = [_key("ctrl+Home", *["Down"] * (count + 1))]  # A(count+2): the row under the data
    if kind in ("sort", "sumif", "decimals", "bold", "chart", "filter"):
        return _calc_more(kind, seed, rng, path)
    if kind in ("sum", "average", "max"):
        amounts = [rng.randint(5, 400) for _ in items]
        rows: list[list[Any]] = [["Item", "Amount"], *([item, amount] for item, amount in zip(items, amounts))]
        label, function = {"sum": ("Total", "SUM"), "average": ("Average", "AVERAGE"), "max": ("Largest", "MAX")}[kind]
        value = {"sum": sum(amounts), "average": sum(amounts) / count, "max": max(amounts)}[kind]
        cell = f"B{count + 2}"
        instruction = (
            f"In cell A{count + 2} write the label '{label}', and in {cell} a formula that computes the "
            f"{ {'sum': 'sum', 'average': 'average', 'max': 'largest value'}[kind] } of the amounts in B2:B{count + 1}."
        )
        gold = [*rows, [label, value]]
        solution = [*go_to_cell, _type(f"{label}\t={function}(B2:B{count + 1})"), _key("Return")]
        formulas = [cell]
    elif kind == "product":
        quantities = [rng.randint(1, 9) for _ in items]
        prices = [rng.randint(2, 60) for _ in items]
        rows = [["Item", "Quantity", "Price"], *([i, q, p] for i, q, p in zip(items, quantities, prices))]
        gold = [[*rows[0], "Cost"], *([i, q, p, q * p] for i, q, p in zip(items, quantities, prices))]
        formulas = [f"D{row}" for row in range(2, count + 2)]
        instruction = (
            f"Add a column D headed 'Cost' whose cells D2:D{count + 1} are formulas multiplying each row's "
            "Quantity by its Price."
        )
        # The first formula typed, then filled down over the rows below it (ctrl+d: Fill Down).
        solution = [
            _key("ctrl+Home", "Right", "Right", "Right"),
            _type("Cost"),
            _key("Down"),
            _type("=B2*C2"),
            _key("Return"),  # not Down: while a formula is typed, arrow keys point at cells
            _key("Up", *["shift+Down"] * (count - 1), "ctrl+d"),
        ]
    else:  # fix
        amounts = [rng.randint(10, 99) for _ in items]
        wrong = rng.randrange(count)
        right = amounts[wrong]
        typo = int(str(right)[::-1]) if str(right)[::-1] != str(right) else right + 1
        rows = [["Item", "Stock"], *([item, amount] for item, amount in zip(items, amounts))]
        rows[wrong + 1][1] = typo
        gold = [["Item", "Stock"], *([item, amount] for item, amount in zip(items, amounts))]
        instruction = f"The stock of {items[wrong]} was mistyped as {typo}: correct it to {right}."
        solution = [_key("ctrl+Home", *["Down"] * (wrong + 1), "Right"), _type(str(right)), _key("Return")]
        formulas = []
    spec = _spec(f"calc-{kind}-{seed}", instruction, path, [("compare_table", {"formulas": formulas})], solution)
    name = path.rpartition("/")[2]
    return spec, {name: _workbook(rows), f"gold-{name}": _workbook(gold)}


def _calc_more(kind: str, seed: int, rng: random.Random, path: str) -> tuple[dict, dict[str, bytes]]:
    """The kinds beyond one computed cell: sorting, a per-category summary, a number format, a bold header."""
    name = path.rpartition("/")[2]
    count = rng.randint(4, 6)
    items = rng.sample(_ITEMS, count)
    options: dict[str, Any] = {"formulas": []}
    after: dict[str, Any] = {}
    if kind == "sort":
        amounts = rng.sample(range(5, 400), count)  # distinct: one right order
        rows: list[list[Any]] = [["Item", "Amount"], *([i, a] for i, a in zip(items, amounts))]
        gold = [rows[0], *sorted(rows[1:], key=lambda row: -row[1])]
        instruction = (
            f"Sort the rows 2 to {count + 1} by Amount, largest first (descending); the header row stays on top "
            "and each item keeps its amount."
        )
        # In a column of the data, Data > Sort Descending sorts the whole block by it (the header row, text over
        # numbers, is recognised and stays): run through the command search (shift+Escape).
        solution = [_key("ctrl+Home", "Down", "Right"), _key("shift+Escape"), "wait(1)", _type("Sort Descending")]
        solution += ["wait(1)", _key("Return")]
    elif kind == "sumif":
        categories = rng.sample(_CATEGORIES, rng.randint(2, 3))
        count = rng.randint(len(categories) + 2, 8)  # every category used at least once; data in rows 2..9
        spends = [categories[i] if i < len(categories) else rng.choice(categories) for i in range(count)]
        rng.shuffle(spends)
        amounts = [rng.randint(5, 250) for _ in spends]
        rows = [["Category", "Amount", None, "Category", "Total"]]
        for index, (category, amount) in enumerate(zip(spends, amounts)):
            summary = categories[index] if index < len(categories) else None
            rows.append([category, amount, None, summary] if summary else [category, amount])
        gold = [list(row) for row in rows]
        for index, category in enumerate(categories):
            gold[index + 1].append(sum(a for c, a in zip(spends, amounts) if c == category))
        cells = [f"E{row}" for row in range(2, len(categories) + 2)]
        options = {"formulas": cells, "functions": ["SUMIF"]}
        last = count + 1
        instruction = (
            f"Summarise the amounts by category: in {cells[0]}:{cells[-1]}, beside each category named in column D, "
            f"write a SUMIF formula that totals the amounts (B2:B{last}) of the rows with that category (A2:A{last})."
        )
        solution = [_key("ctrl+Home", "Down", *["Right"] * 4)]
        for row in range(2, len(categories) + 2):  # Return: the formula entered, and the cell below it next
            solution += [_type(f"=SUMIF(A2:A{last},D{row},B2:B{last})"), _key("Return")]
    elif kind == "decimals":
        prices = [round(rng.uniform(1, 4000), rng.choice([0, 1, 2])) for _ in items]
        rows = [["Item", "Price"], *([i, p] for i, p in zip(items, prices))]
        gold = rows
        after = {"number_format": (f"B2:B{count + 1}", TWO_DECIMALS)}
        options["styles"] = ["number_format"]
        instruction = (
            f"Format the prices B2:B{count + 1} with the number format {TWO_DECIMALS} (two decimal places and a "
            "thousands separator); leave the values as they are."
        )
        solution = [_key("ctrl+Home", "Down", "Right", *["shift+Down"] * (count - 1), "ctrl+shift+1")]
    elif kind == "chart":
        rows = [["Item", "Amount"], *([i, rng.randint(5, 400)] for i in items)]
        gold = rows
        chart = CHART_TYPES[seed % len(CHART_TYPES)]
        after = {"chart": chart}
        options["charts"] = True
        instruction = (
            f"Insert a {chart} chart of the amounts (B2:B{count + 1}) with the items (A2:A{count + 1}) as its "
            "categories, on this sheet; leave the cells as they are."
        )
        # In the data block, Insert > Chart (through the command search) opens the chart wizard on that block (the
        # header row and the labels' column recognised); its first page lists the types (Column first: Down moves
        # on), and alt+f presses Finish (Return does not). Escape leaves the chart, and a second Escape deselects it.
        downs = [_key(*["Down"] * _CHART_DOWNS[chart])] if _CHART_DOWNS[chart] else []
        solution = [_key("ctrl+Home"), _key("shift+Escape"), "wait(1)", _type("Chart"), "wait(1)", _key("Return")]
        solution += ["wait(3)", *downs, _key("alt+f"), "wait(3)", _key("Escape"), "wait(1)", _key("Escape")]
    elif kind == "filter":
        shown, *others = rng.sample(_CATEGORIES, rng.randint(2, 3))
        spends = [shown, *others, *(rng.choice([shown, *others]) for _ in range(count))]  # each category at least once
        rng.shuffle(spends)
        rows = [["Category", "Amount"], *([c, rng.randint(5, 250)] for c in spends)]
        gold = rows
        after = {"shown": (1, shown)}
        options["filters"] = True
        instruction = (
            f"Filter the table A1:B{len(rows)} so that only the rows whose Category is '{shown}' show: the other rows "
            "hidden by the filter, not deleted."
        )
        # Data > More Filters > Standard Filter (through the command search) opens on the current cell's column
        # (Category) with the condition "=": Tab Tab to the value, typed; Return presses OK.
        solution = [_key("ctrl+Home"), _key("shift+Escape"), "wait(1)", _type("Standard Filter"), "wait(1)"]
        solution += [_key("Return"), "wait(2)", _key("Tab", "Tab"), _type(shown), "wait(1)", _key("Return"), "wait(1)"]
    else:  # bold: the header row
        header = ["Item", "Quantity", "Price"]
        rows = [header, *([i, rng.randint(1, 9), rng.randint(2, 60)] for i in items)]
        gold = rows
        after = {"bold": "A1:C1"}
        options["styles"] = ["font_bold"]
        instruction = "Make the header row's cells (A1:C1) bold, and nothing else."
        solution = [_key("ctrl+Home", "shift+Right", "shift+Right", "ctrl+b")]
    spec = _spec(f"calc-{kind}-{seed}", instruction, path, [("compare_table", options)], solution)
    return spec, {name: _workbook(rows), f"gold-{name}": _workbook(gold, **after)}


# ------------------------------------------------------------------------------------------ Writer
WRITER_KINDS = ("append", "title", "bold", "delete", "replace", "table", "pdf", "header", "pagenum")
_COMPANIES = ("Acme", "Globex", "Initech", "Hooli", "Vandelay", "Wonka")
_ABOUT = (  # sentences about a company, for the replace kind
    "{} opened two new stores.",
    "Sales at {} grew in the north.",
    "The board of {} approved the plan.",
    "Costs at {} stayed flat this year.",
    "{} will hire again in May.",
)


def _odt_document(paragraphs: list[tuple[str, bool]]) -> bytes:
    """An OpenDocument text (odfpy) with one paragraph per text (the ODT kinds use no bold)."""
    with requires("gui"):
        from odf import text
        from odf.opendocument import OpenDocumentText
    document = OpenDocumentText()
    for line, _ in paragraphs:
        document.text.addElement(text.P(text=line))
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


#: Writer kinds on an OpenDocument text (.odt, LibreOffice's own format), graded through odfpy.
ODT_KINDS = ("append", "title", "delete", "replace")


def _writer(kind: str, seed: int, family: str = "writer") -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"{family}-{kind}-{seed}")
    title = rng.choice(_TITLES)
    body = rng.sample(_SENTENCES, rng.randint(3, 5))
    extension = "odt" if family == "odt" else "docx"
    stems = ["letter", "notes", "report", "minutes", "memo", "price-list", "summary", "handbook", "manual"]
    path = f"{HOME}/Documents/{stems[WRITER_KINDS.index(kind)]}.{extension}"
    metrics: list[tuple[str, dict]] = [("compare_docx_files", {})]
    table: list[list[str]] | None = None
    if kind == "append":
        extra = rng.choice([s for s in _SENTENCES if s not in body])
        before = [(title, False), *((s, False) for s in body)]
        after = [*before, (extra, False)]
        instruction = f"Add a new last paragraph that says: {extra}"
        solution = [_key("ctrl+End", "Return"), _type(extra)]
    elif kind == "title":
        before = [(s, False) for s in body]
        after = [(title, False), *before]
        instruction = f"Insert a new first paragraph that says: {title}"
        solution = [_key("ctrl+Home"), _type(title), _key("Return")]
    elif kind == "bold":
        before = [(title, False), *((s, False) for s in body)]
        after = [(title, True), *((s, False) for s in body)]
        instruction = f"Make the heading (the first paragraph, '{title}') bold."
        solution = [_key("ctrl+Home", "shift+End", "ctrl+b")]
        metrics.append(("compare_docx_bold", {}))
    elif kind == "delete":
        drop = rng.randrange(len(body) - 1)  # never the last paragraph: the solution selects to the next one
        before = [(title, False), *((s, False) for s in body)]
        after = [p for index, p in enumerate(before) if index != drop + 1]
        instruction = f"Delete the paragraph '{body[drop]}' (and only it)."
        solution = [_key("ctrl+Home", *["Down"] * (drop + 1), "shift+Down", "Delete")]
    elif kind == "replace":
        old, new = rng.sample(_COMPANIES, 2)
        about = [line.format(old) for line in rng.sample(_ABOUT, rng.randint(2, 3))]
        lines = [f"{title} for {old}", *about, *rng.sample(_SENTENCES, 2)]
        lines[1:] = rng.sample(lines[1:], len(lines) - 1)
        before = [(line, False) for line in lines]
        after = [(line.replace(old, new), False) for line in lines]
        instruction = f"Replace every occurrence of the name '{old}' with '{new}'."
        # Find & Replace (ctrl+h): the search term typed, alt+p to the Replace field, alt+l Replace All, then closed.
        solution = [_key("ctrl+h"), "wait(1)", _type(old), _key("alt+p"), _type(new), _key("alt+l"), "wait(1)"]
        solution += [_key("Escape")]
    elif kind == "pdf":
        before = after = [(title, False), *((s, False) for s in body)]
        return _pdf_export(f"{family}-{kind}-{seed}", path, _document(before))
    elif kind in ("header", "pagenum"):
        return _header_footer(kind, seed, rng, path, [(title, False), *((s, False) for s in body)])
    else:  # table: a price list's rows, as a two-column table at the end
        before = [(title, False), *((s, False) for s in body[:2])]
        after = before
        table = [
            ["Item", "Price"],
            *([item, str(rng.randint(2, 90))] for item in rng.sample(_ITEMS, rng.randint(2, 4))),
        ]
        rows = "; ".join(f"{item}, {price}" for item, price in table[1:])
        instruction = (
            f"At the end of the document, add a table of 2 columns and {len(table)} rows: the header row "
            f"'Item', 'Price', then one row per item: {rows}."
        )
        metrics.append(("compare_docx_tables", {}))
        # Insert Table (ctrl+F12) offers 2 columns and 2 rows: Return inserts it; Tab goes to the next cell, and
        # from the last one adds a row.
        cells = "\t".join(text for row in table for text in row)
        solution = [_key("ctrl+End", "Return", "ctrl+F12"), "wait(1)", _key("Return"), "wait(1)", _type(cells)]
    spec = _spec(f"{family}-{kind}-{seed}", instruction, path, metrics, solution)
    name = path.rpartition("/")[2]
    if family == "odt":
        return spec, {name: _odt_document(before), f"gold-{name}": _odt_document(after)}
    return spec, {name: _document(before), f"gold-{name}": _document(after, table)}


def _header_or_footer_on(footer: bool) -> list[str]:
    """Insert > Header and Footer > Header (or Footer) > Default Page Style, by the menu's keys: alt+i opens Insert,
    Up from its first entry wraps to the last (Signature Line, Envelope, then Header and Footer), Right opens each
    submenu on its first entry. Writer then has the cursor in the new header (footer)."""
    return [_key("alt+i"), _key("Up", "Up", "Up", "Right", *(["Down"] if footer else []), "Right"), _key("Return")]


def _header_footer(
    kind: str, seed: int, rng: random.Random, path: str, paragraphs: list[tuple[str, bool]]
) -> tuple[dict, dict[str, bytes]]:
    """Put a text in the page header (``header``), or a page-number field in the footer (``pagenum``); the body
    stays as it is. Graded by the body's paragraphs and the header's and footer's, fields read as fields
    (``compare_docx_headers``): a typed "1" is not a page number.

    The reference solution turns the default page style's header or footer on from Insert > Header and Footer,
    walked with the menu's keys (that menu's entries are built per page style when it opens, so the command search
    does not list them), which leaves the cursor there; it types the header's text, or picks Insert > Page Number
    (the fifth entry from the menu's end) for a page-number field in the footer."""
    name = path.rpartition("/")[2]
    if kind == "header":
        header = f"{rng.choice(_TITLES)} for {rng.choice(_COMPANIES)}"
        instruction = f"Put the text '{header}' in the page header (the same on every page); leave the body as it is."
        solution = [*_header_or_footer_on(footer=False), _type(header)]
        gold = _document(paragraphs, header=header)
    else:
        instruction = (
            "Show the page number in the page footer: insert a page-number field (not a typed number) in the "
            "footer, and nothing else there; leave the body as it is."
        )
        solution = [*_header_or_footer_on(footer=True), _key("alt+i"), _key(*["Up"] * 5), _key("Return")]
        gold = _document(paragraphs, page_number=True)
    metrics: list[tuple[str, dict]] = [("compare_docx_files", {}), ("compare_docx_headers", {})]
    spec = _spec(f"writer-{kind}-{seed}", instruction, path, metrics, solution)
    return spec, {name: _document(paragraphs), f"gold-{name}": gold}


def _pdf_export(task_id: str, path: str, document: bytes) -> tuple[dict, dict[str, bytes]]:
    """Export the open document as a PDF beside it, graded by the PDF's text against the document's paragraphs.

    The reference solution runs File > Export As > Export as PDF through the command search (shift+Escape),
    accepts the PDF options (Return: Export), and types the PDF's whole path into the file dialog's name field."""
    name = path.rpartition("/")[2]
    target = f"{path.rpartition('.')[0]}.pdf"
    spec = {
        "id": task_id,
        "instruction": f"Export this document as a PDF file, {target} (keep the document as it is). The file {path} "
        "is open.",
        "source": "agentgym.envs.gui.generators",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": name, "path": path}]}},
            {"type": "open", "parameters": {"path": path}},
        ],
        "related_apps": ["libreoffice"],
        "evaluator": {
            "func": ["compare_pdf_text"],
            "result": [{"type": "vm_file", "path": target, "dest": target.rpartition("/")[2]}],
            "expected": [{"type": "local_file", "path": f"gold-{name}"}],
        },
        "solution": [
            _key("shift+Escape"),
            "wait(1)",
            _type("Export as PDF"),
            "wait(1)",
            _key("Return"),
            "wait(2)",
            _key("Return"),
            "wait(2)",
            _key("ctrl+a"),
            _type(target),
            _key("Return"),
            "wait(3)",
            "done()",
        ],
    }
    return spec, {name: document, f"gold-{name}": document}


# ----------------------------------------------------------------------------------------- Impress
IMPRESS_KINDS = ("title", "retitle", "subtitle", "bullet", "slide", "notes", "layout")
_TOPICS = ("Goals", "Budget", "Timeline", "Risks", "Team", "Results", "Next steps")
_BULLETS = ("Ship the beta", "Hire two engineers", "Cut costs by ten percent", "Open a new office", "Train the staff")


def _impress(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"impress-{kind}-{seed}")
    title, new_title = rng.sample(_TITLES, 2)
    topics = rng.sample(_TOPICS, rng.randint(2, 3))
    before = [(title, [f"Prepared by team {rng.choice('ABCDEFG')}"])] + [
        (topic, rng.sample(_BULLETS, 2)) for topic in topics
    ]
    stem = ["deck", "talk", "pitch", "review", "plan", "briefing", "agenda"][IMPRESS_KINDS.index(kind)]
    path = f"{HOME}/Documents/{stem}.pptx"
    if kind == "layout":
        return _impress_layout(seed, rng, path, before)
    after = [(t, list(lines)) for t, lines in before]
    notes: dict[int, str] = {}
    # Tab selects the slide's first object (its title), a second Tab the next (the body); Return edits
    # the selected text box and ctrl+a selects all of its text; Escape leaves the box.
    if kind == "title":
        after[0] = (new_title, after[0][1])
        instruction = f"Change the title of the first slide to: {new_title}"
        solution = [_key("Tab", "Return", "ctrl+a"), _type(new_title), _key("Escape", "Escape")]
    elif kind == "retitle":
        slide = rng.randrange(1, len(before))
        name = rng.choice([t for t in _TOPICS if t not in topics])
        after[slide] = (name, after[slide][1])
        instruction = f"Slide {slide + 1} is titled '{before[slide][0]}': rename it to '{name}'."
        solution = [_key(*["Next"] * slide), _key("Tab", "Return", "ctrl+a"), _type(name), _key("Escape", "Escape")]
    elif kind == "subtitle":
        line = f"Presented on day {rng.randint(2, 28)}"
        after[0] = (title, [line])
        instruction = f"Replace the subtitle of the first slide with: {line}"
        solution = [_key("Tab", "Tab", "Return", "ctrl+a"), _type(line), _key("Escape", "Escape")]
    elif kind == "slide":
        name = rng.choice([t for t in _TOPICS if t not in topics])
        line = rng.choice(_BULLETS)
        after.append((name, [line]))
        instruction = (
            f"Add a new slide at the end with the title-and-content layout: title '{name}', and one bullet point "
            f"'{line}'."
        )
        # End: the last slide; ctrl+m: a new slide after it, in its layout (Title, Content: see _deck's
        # libreoffice_layouts); then its title and its body are typed as in the retitle and subtitle kinds.
        solution = [_key("End", "ctrl+m"), "wait(1)", _key("Tab", "Return"), _type(name), _key("Escape", "Escape")]
        solution += [_key("Tab", "Tab", "Return"), _type(line), _key("Escape", "Escape")]
    elif kind == "notes":
        slide = rng.randrange(len(before))
        note = f"Speak for {rng.randint(2, 9)} minutes about {before[slide][0].lower()}."
        notes[slide] = note
        instruction = f"Add the speaker notes '{note}' to slide {slide + 1} ('{before[slide][0]}')."
        # View > Notes (through the command search) shows the slide's notes page: Tab selects the slide's picture,
        # a second Tab the notes' text box.
        solution = [_key(*["Next"] * slide)] if slide else []
        solution += [_key("shift+Escape"), "wait(1)", _type("Notes"), "wait(1)", _key("Return"), "wait(1)"]
        solution += [_key("Tab", "Tab", "Return"), _type(note), _key("Escape", "Escape")]
    else:  # bullet
        slide = rng.randrange(1, len(before))
        line = rng.choice([b for b in _BULLETS if b not in before[slide][1]])
        after[slide] = (before[slide][0], [*before[slide][1], line])
        instruction = (
            f"On slide {slide + 1} ('{before[slide][0]}'), add the bullet point '{line}' at the end of the list."
        )
        solution = [
            _key(*["Next"] * slide),
            _key("Tab", "Tab", "Return"),
            _key("ctrl+End"),
            _key("Return"),
            _type(line),
            _key("Escape", "Escape"),
        ]
    spec = _spec(f"impress-{kind}-{seed}", instruction, path, [("compare_pptx_files", {})], solution)
    name = path.rpartition("/")[2]
    ours = kind == "slide"
    return spec, {
        name: _deck(before, libreoffice_layouts=ours),
        f"gold-{name}": _deck(after, notes, libreoffice_layouts=ours),
    }


#: python-pptx's default template's layouts (by index) that the Impress kinds use → the name LibreOffice's pptx export
#: gives the same layout (sd's PPTXLayoutInfo table), which ``compare_pptx_files`` with ``layouts`` compares.
LIBREOFFICE_LAYOUTS = {0: "Title Slide", 1: "Title, Content", 3: "Title, 2 Content", 5: "Title Only"}
#: The layouts the ``layout`` kind switches a slide between, by the names LibreOffice's user interface gives them
#: (Slide > Layout) → python-pptx's layout index; a pair per seed.
_LAYOUTS = {"Title, Content": 1, "Title Only": 5, "Title and 2 Content": 3}
_LAYOUT_CHANGES = (
    ("Title Only", "Title, Content"),
    ("Title, Content", "Title Only"),
    ("Title Only", "Title and 2 Content"),
)
_CLOSING = ("Questions", "Thank you", "Discussion", "Summary")


def _impress_layout(
    seed: int, rng: random.Random, path: str, before: list[tuple[str, list[str]]]
) -> tuple[dict, dict[str, bytes]]:
    """Change the layout of a slide that holds only a title (its body, where its layout has one, empty), graded by
    the slides' texts and each slide's layout (``compare_pptx_files`` with ``layouts``).

    The reference solution goes to the slide (``Next``: the next slide) and runs Slide > Layout's entry through
    the command search."""
    old, new = _LAYOUT_CHANGES[seed % len(_LAYOUT_CHANGES)]
    slide = rng.randrange(1, len(before) + 1)
    slides = [*before[:slide], (rng.choice(_CLOSING), []), *before[slide:]]
    instruction = (
        f"Change the layout of slide {slide + 1} ('{slides[slide][0]}', now '{old}') to the '{new}' layout; keep "
        "its title and the other slides as they are."
    )
    solution = [_key(*["Next"] * slide), _key("shift+Escape"), "wait(1)", _type(new), "wait(1)", _key("Return")]
    spec = _spec(
        f"impress-layout-{seed}", instruction, path, [("compare_pptx_files", {"layouts": True})], [*solution, "wait(1)"]
    )
    name = path.rpartition("/")[2]
    return spec, {
        name: _deck(slides, layouts={slide: _LAYOUTS[old]}, libreoffice_layouts=True),
        f"gold-{name}": _deck(slides, layouts={slide: _LAYOUTS[new]}, libreoffice_layouts=True),
    }


# -------------------------------------------------------------------------------------- text files
TEXT_KINDS = ("append", "heading", "delete", "fix")
_LINES = (
    "buy milk and bread",
    "call the plumber",
    "renew the passport",
    "water the plants",
    "book the dentist",
    "pay the phone bill",
    "return the library books",
    "clean the garage",
    "send the invoice",
    "fix the bike light",
)


def _text(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    """A plain-text file in mousepad; every line ends in a newline, as editors save them, and the gold file too."""
    rng = random.Random(f"text-{kind}-{seed}")
    lines = rng.sample(_LINES, rng.randint(3, 5))
    path = f"{HOME}/Documents/{['todo', 'chores', 'errands', 'list'][TEXT_KINDS.index(kind)]}.txt"
    if kind == "append":
        extra = rng.choice([line for line in _LINES if line not in lines])
        after = [*lines, extra]
        instruction = f"Add a new last line that says: {extra}"
        solution = [_key("ctrl+End"), _type(extra), _key("Return")]  # ctrl+End: the empty line after the last newline
    elif kind == "heading":
        heading = f"TODO {rng.choice(('Monday', 'Tuesday', 'Friday', 'weekend'))}"
        after = [heading, *lines]
        instruction = f"Insert a new first line that says: {heading}"
        solution = [_key("ctrl+Home"), _type(heading), _key("Return")]
    elif kind == "delete":
        drop = rng.randrange(len(lines))
        after = [line for index, line in enumerate(lines) if index != drop]
        instruction = f"Delete the line '{lines[drop]}' (the whole line, and only it)."
        solution = [_key("ctrl+Home", *["Down"] * drop, "shift+Down", "Delete")]
    else:  # fix: a word in one line is wrong
        line = rng.randrange(len(lines))
        words = lines[line].split()
        wrong = rng.randrange(1, len(words))
        typo = words[wrong][::-1]
        before_lines = list(lines)
        before_lines[line] = " ".join([*words[:wrong], typo, *words[wrong + 1 :]])
        after = lines
        instruction = f"In the line '{before_lines[line]}', the word '{typo}' should be '{words[wrong]}': correct it."
        solution = [_key("ctrl+Home", *["Down"] * line, "End", "shift+Home"), _type(lines[line])]
        lines = before_lines
    spec = _spec(f"text-{kind}-{seed}", instruction, path, [("compare_text_file", {})], solution)
    name = path.rpartition("/")[2]
    return spec, {
        name: "".join(f"{line}\n" for line in lines).encode(),
        f"gold-{name}": "".join(f"{line}\n" for line in after).encode(),
    }


# -------------------------------------------------------------------------------------------- GIMP
GIMP_KINDS = ("mirror", "flip", "rotate", "rotate90", "invert", "grayscale", "autocrop", "scale", "jpeg")
#: Kind → (what the instruction asks, the text typed into GIMP's command search). The text is the image
#: command's tooltip, which no other command shares: a command's name would find the view's or the layer's
#: namesake too ("Flip Horizontally" lists View > Flip Horizontally first), and the first hit is what
#: Return runs. ``jpeg`` runs no command (its edit is the export).
_GIMP_EDITS = {
    "mirror": ("Flip the image horizontally (mirror it left to right)", "Flip image horizontally"),
    "flip": ("Flip the image vertically (upside down)", "Flip image vertically"),
    "rotate": ("Rotate the image by 180 degrees", "Turn the image upside-down"),
    "rotate90": ("Rotate the image by 90 degrees clockwise", "Rotate the image 90 degrees to the right"),
    "invert": ("Invert the image's colours", "Invert the components (except alpha) perceptually"),
    "grayscale": ("Convert the image to grayscale", "Convert the image to grayscale"),
    "autocrop": ("Crop away the image's plain border (crop it to its content)", "Crop the image to the extents"),
    "scale": ("Scale the image to {width}x{height} pixels", "Change the size of the image content"),
    "jpeg": ("Export the image as a JPEG", ""),
}
_GIMP_FILES = {
    "mirror": "photo",
    "flip": "logo",
    "rotate": "sketch",
    "rotate90": "poster",
    "invert": "banner",
    "grayscale": "portrait",
    "autocrop": "scan",
    "scale": "icon",
    "jpeg": "snapshot",
}
#: compare_image_list's options per kind. ``scale``: GIMP's cubic interpolation is not Pillow's bicubic, so the
#: size must match and the pixels come within a mean difference; ``jpeg``: a JPEG file, within what its
#: compression changes (GIMP's defaults: quality 90, 4:4:4). Measured on GIMP's exports: 1.03 levels (scale),
#: 0.72-0.96 (jpeg); every wrong edit of these pictures is 22 or more (tests/envs/gui/test_osworld.py).
_GIMP_OPTIONS: dict[str, dict] = {
    "scale": {"tolerance": 4.0},
    "jpeg": {"format": "jpeg", "tolerance": 4.0},
}


def _picture(rng: random.Random) -> Any:
    """A small picture of coloured blocks on a background, asymmetric so that a flip or a rotation shows: a
    bar at the top left, and a block in the left third of the top half in a colour far from the background's
    (it moves a third of the pixels under any flip or rotation, more than a JPEG or a resampling changes)."""
    with requires("gui"):
        from PIL import Image, ImageDraw
    width, height = rng.choice([(96, 64), (80, 60), (120, 72)])
    background = tuple(rng.randrange(256) for _ in range(3))
    image = Image.new("RGB", (width, height), background)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width // 3 - 1, height // 2 - 1), fill=tuple(0 if c > 127 else 255 for c in background))
    for _ in range(rng.randint(3, 6)):
        left, top = rng.randrange(width - 8), rng.randrange(height - 8)
        box = (left, top, rng.randint(left + 4, width - 1), rng.randint(top + 4, height - 1))
        draw.rectangle(box, fill=tuple(rng.randrange(256) for _ in range(3)))
    draw.rectangle((0, 0, width // 4, 3), fill=(255, 0, 0))  # a bar at the top left: never symmetric
    return image


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _grayscale(image: Any) -> Any:
    """GIMP's Image > Mode > Grayscale on an 8-bit sRGB image: the luminance of the linear-light colour
    (babl's sRGB weights), back to the sRGB curve, rounded."""
    with requires("gui"):
        import numpy as np
        from PIL import Image
    srgb = np.asarray(image, dtype=np.float64) / 255.0
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    luminance = linear @ np.array([0.2225045, 0.7168786, 0.0606169])
    encoded = np.where(luminance <= 0.0031308, luminance * 12.92, 1.055 * luminance ** (1 / 2.4) - 0.055)
    return Image.fromarray(np.clip(np.rint(encoded * 255.0), 0, 255).astype(np.uint8), "L")


def _gimp(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    """An image in GIMP, edited with one command and exported as a new file.

    The reference solution runs the command through GIMP's command search (``/``: type a text that finds
    the image's command first, Return); ``scale`` then types the new width into Scale Image's dialog (the
    height follows: the aspect ratio is kept) and presses Return for Scale. Then it exports with Export As
    (``shift+ctrl+e``: the whole path typed into the name field, Return, and Return again on the PNG or
    JPEG options' Export button).
    """
    with requires("gui"):
        from PIL import Image, ImageOps
    rng = random.Random(f"gimp-{kind}-{seed}")
    image = _picture(rng)
    name = _GIMP_FILES[kind]
    asked, search = _GIMP_EDITS[kind]
    extension = "jpg" if kind == "jpeg" else "png"
    source, target = f"{HOME}/Pictures/{name}.png", f"{HOME}/Pictures/{name}-edited.{extension}"
    command = [_key("slash"), "wait(1)", _type(search), _key("Return"), "wait(1)"] if search else []
    if kind == "autocrop":
        # A plain border on each side (left, top, right, bottom), white or black: the picture's own edges are
        # never one plain colour (the red bar touches the left and top ones), so cropping stops at them.
        border = rng.choice([(255, 255, 255), (0, 0, 0)])
        edited, image = image, ImageOps.expand(image, tuple(rng.randint(3, 12) for _ in range(4)), border)
    elif kind == "scale":
        width, height = image.width * 2, image.height * 2
        asked = asked.format(width=width, height=height)
        edited = image.resize((width, height), Image.Resampling.BICUBIC)
        # Tab leaves the width field (the height follows) for the chain button, where Return would toggle the
        # chain: alt+s presses Scale (its mnemonic).
        command += [_key("ctrl+a"), _type(str(width)), _key("Tab"), "wait(1)", _key("alt+s"), "wait(1)"]
    else:
        edited = {
            "mirror": ImageOps.mirror,
            "flip": ImageOps.flip,
            "rotate": lambda picture: picture.rotate(180),
            "rotate90": lambda picture: picture.transpose(Image.Transpose.ROTATE_270),
            "invert": ImageOps.invert,
            "grayscale": _grayscale,
            "jpeg": lambda picture: picture,
        }[kind](image)
    fmt = "a JPEG" if kind == "jpeg" else "a PNG"
    spec = {
        "id": f"gimp-{kind}-{seed}",
        "instruction": (
            f"{asked}, and export the result as {fmt} to {target}. The image {source} is open in GIMP."
            if kind != "jpeg"
            else f"{asked} to {target}. The image {source} is open in GIMP."
        ),
        "source": "agentgym.envs.gui.generators",
        "config": [
            {"type": "download", "parameters": {"files": [{"url": f"{name}.png", "path": source}]}},
            {"type": "open", "parameters": {"path": source}},
        ],
        "related_apps": ["gimp"],
        "evaluator": {
            "func": "compare_image_list",
            "result": {"type": "vm_file", "path": target, "dest": f"{name}-edited.{extension}"},
            "expected": {"type": "local_file", "path": f"gold-{name}-edited.png"},
            **({"options": _GIMP_OPTIONS[kind]} if kind in _GIMP_OPTIONS else {}),
        },
        "solution": [
            *command,
            _key("shift+ctrl+e"),
            "wait(1)",
            _key("ctrl+a"),
            _type(target),
            _key("Return"),
            "wait(1)",
            _key("Return"),
            "wait(2)",
            "done()",
        ],
    }
    return spec, {f"{name}.png": _png(image), f"gold-{name}-edited.png": _png(edited)}


# -------------------------------------------------------------------------------------- infeasible
#: Per app, the kind whose file it opens and the requests it cannot carry out, one task each (LibreOffice reads
#: Apple's formats but does not write them, and exports no video; the desktop has no network, no mail client and
#: no printer; mousepad keeps no history; GIMP does not trace bitmaps into vectors): the right answer is ``fail()``,
#: and any change to the file is beside the point.
INFEASIBLE = {
    "calc": (
        "sum",
        "Save this workbook in Apple Numbers format, as {stem}.numbers beside it.",
        "Publish this workbook to Google Sheets and share it with team@example.com.",
    ),
    "writer": (
        "append",
        "Save this document as an Apple Pages file, {stem}.pages, beside it.",
        "Print two copies of this document on the office printer 'Office-Laser'.",
    ),
    "impress": (
        "title",
        "Export this presentation in Apple Keynote format, as {stem}.key beside it.",
        "Export this presentation as an MP4 video, {stem}.mp4, beside it.",
    ),
    "text": ("append", "Restore the version of this file that was saved last week (mousepad's file history)."),
    "odt": ("append", "E-mail this document to team@example.com from LibreOffice (File > Send)."),
    "gimp": (
        "mirror",
        "Trace this image into a vector drawing, one SVG shape per coloured block, saved as {stem}.svg.",
    ),
}


def _infeasible(app: str, number: int) -> tuple[dict, dict[str, bytes]]:
    """The app's ``number``-th infeasible request, on the file its kind's generator makes at that seed."""
    kind, *requests = INFEASIBLE[app]
    if not 0 <= number < len(requests):
        raise ValueError(f"{app} has {len(requests)} infeasible task(s), numbered from 0, not {number}")
    request = requests[number]
    feasible, files = generate(app, kind, number)
    (url,) = (entry["url"] for entry in feasible["config"][0]["parameters"]["files"])
    path = feasible["config"][0]["parameters"]["files"][0]["path"]
    spec = {
        **feasible,
        "id": f"{app}-infeasible-{number}",
        "instruction": f"{request.format(stem=url.rpartition('.')[0])} The file {path} is open.",
        "evaluator": {"func": "infeasible"},
        "solution": ["fail()"],
    }
    return spec, {url: files[url]}


def generate(app: str, kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    """One task: its OSWorld-format spec and the bytes of the files it names (input and gold)."""
    from agentgym.envs.gui import generators_chrome, generators_os  # imported here: they build on this module's helpers

    if app in dict(generators_os.FAMILIES):
        return generators_os.generate(app, kind, seed)
    if app == "chrome":
        return generators_chrome.generate(kind, seed)
    if kind == "infeasible" and app in INFEASIBLE:
        return _infeasible(app, seed)
    if app == "calc" and kind in CALC_KINDS:
        return _calc(kind, seed)
    if app == "writer" and kind in WRITER_KINDS:
        return _writer(kind, seed)
    if app == "impress" and kind in IMPRESS_KINDS:
        return _impress(kind, seed)
    if app == "text" and kind in TEXT_KINDS:
        return _text(kind, seed)
    if app == "gimp" and kind in GIMP_KINDS:
        return _gimp(kind, seed)
    if app == "odt" and kind in ODT_KINDS:
        return _writer(kind, seed, family="odt")
    raise ValueError(
        f"no generator {app}/{kind} (calc: {CALC_KINDS}; writer: {WRITER_KINDS}; impress: {IMPRESS_KINDS}; "
        f"odt: {ODT_KINDS}; text: {TEXT_KINDS}; gimp: {GIMP_KINDS}; and 'infeasible' for each; "
        f"os: {generators_os.OS_KINDS}; multi: {generators_os.MULTI_KINDS}; chrome: {generators_chrome.CHROME_KINDS})"
    )


#: The families in the catalogue.
FAMILIES = (
    ("calc", CALC_KINDS),
    ("writer", WRITER_KINDS),
    ("odt", ODT_KINDS),
    ("impress", IMPRESS_KINDS),
    ("text", TEXT_KINDS),
    ("gimp", GIMP_KINDS),
)


#: Kinds generated and graded (their metrics' hack suites run in tests/envs/gui/test_osworld.py) whose reference
#: solutions do not pass through the GUI: left out of the catalogue until they do. Calc's ``chart``: on the
#: desktop-apps image (LibreOffice 7.4, gtk3) LibreOffice aborts when the chart wizard closes (its Finish, alt+f) or
#: changes type (Down) while the step's accessibility-tree walk runs: its log ends in atk-bridge calling
#: ``atk_object_get_index_in_parent`` on the wizard's disposed accessible object (Signal 6), so no chart is saved (all
#: three seeds, 2026-12-06). With ``a11y_tree=False`` (no walk) LibreOffice lives on through the same keys.
UNVERIFIED: frozenset[tuple[str, str]] = frozenset({("calc", "chart")})


def generated_tasks(seeds: tuple[int, ...] = SEEDS) -> list[tuple[dict, dict[str, bytes]]]:
    """Every catalogued generator at every seed but the :data:`UNVERIFIED` kinds (30 Calc, 27 Writer on docx and 12
    on odt, 21 Impress, 12 text and 27 GIMP tasks with the default three seeds), and every catalogued family's
    infeasible tasks (9), then the OS and multi-app tasks of :mod:`agentgym.envs.gui.generators_os` (24 OS,
    12 multi-app and 2 infeasible) and the Chromium tasks of :mod:`agentgym.envs.gui.generators_chrome` (21 and 2
    infeasible): 13 of 199 infeasible, 6.5% (OSWorld's share is about 8%)."""
    from agentgym.envs.gui import generators_chrome, generators_os

    return [
        *(
            generate(app, kind, seed)
            for app, kinds in FAMILIES
            for kind in kinds
            if (app, kind) not in UNVERIFIED
            for seed in seeds
        ),
        *(
            generate(app, "infeasible", number)
            for app in INFEASIBLE
            if app in dict(FAMILIES)
            for number in range(len(INFEASIBLE[app]) - 1)
        ),
        *generators_os.generated_tasks(seeds),
        *generators_chrome.generated_tasks(seeds),
    ]
