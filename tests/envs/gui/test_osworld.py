"""OSWorld-format tasks without a desktop: the loader's refusals, the generators, and the metrics on real files,
gold, mutated and forged (the hack suite). The same tasks through the real apps: test_real_apps.py."""

import io
import json
import re
import zipfile
from hashlib import sha256

import docx
import openpyxl
import pptx
import pytest

from agentgym.envs.gui import generators, metrics, osworld
from agentgym.envs.gui.env import apps_catalog


class Files:
    """An Inspector over a dict of path → bytes (what the desktop would hold)."""

    def __init__(self, files):
        self.files = files

    def read_bytes(self, path):
        return self.files.get(path)

    def read(self, path):
        data = self.read_bytes(path)
        return None if data is None else data.decode()

    def listing(self, root):
        """The files below ``root`` as the ``vm_tree`` getter lists them (as laid out: mode 0644), None if none."""
        out = {}
        for path, data in self.files.items():
            if path.startswith(root + "/"):
                relative = path[len(root) + 1 :]
                out[relative] = {"type": "file", "mode": 0o644, "size": len(data), "sha256": sha256(data).hexdigest()}
                while "/" in relative:
                    relative = relative.rpartition("/")[0]
                    out[relative] = {"type": "dir", "mode": 0o755, "size": 4096}
        return out or None


def with_cached_values(book_bytes: bytes, values: dict[str, object]) -> bytes:
    """The workbook with formula cells' cached values set, as LibreOffice writes them (openpyxl writes none)."""
    source = zipfile.ZipFile(io.BytesIO(book_bytes))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "xl/worksheets/sheet1.xml":
                text = data.decode()
                for cell, value in values.items():
                    text = re.sub(
                        rf'(<c r="{cell}"[^>]*>\s*<f>[^<]*</f>)\s*<v\s*(/>|>\s*</v>)', rf"\1<v>{value}</v>", text
                    )
                data = text.encode()
            target.writestr(item, data)
    return out.getvalue()


def saved_sheet(task_id: str, edit) -> bytes:
    """The task's input workbook after ``edit(sheet)`` (formulas given cached values as LibreOffice would)."""
    spec, files = generators.generate(*task_id.split("-")[:2], int(task_id.rsplit("-", 1)[1]))
    book = openpyxl.load_workbook(io.BytesIO(files[spec["config"][0]["parameters"]["files"][0]["url"]]))
    cached = edit(book.active) or {}
    buffer = io.BytesIO()
    book.save(buffer)
    return with_cached_values(buffer.getvalue(), cached)


def result_path(task):
    return json.dumps(task.instruction).split("The file ")[1].split(" is open")[0]


def test_the_generators_make_a_dozen_tasks_per_app_with_distinct_inputs():
    catalog = apps_catalog()
    by_app = {}
    for task_id in catalog:
        by_app.setdefault(task_id.split("-")[0], []).append(task_id)
    assert all(len(by_app[app]) >= 12 for app in ("calc", "writer", "impress", "text", "odt", "multi", "chrome"))
    assert len(by_app["os"]) >= 24 and len(by_app["gimp"]) >= 24
    assert not [task_id for task_id in catalog if tuple(task_id.split("-")[:2]) in generators.UNVERIFIED]
    feasible = [task for task in catalog.values() if task.feasible]
    # Seeds change the files, not just the ids.
    inputs = {bytes(next(iter(task.files.values()))) for task in feasible}
    assert len(inputs) == len(feasible)
    for task in feasible:
        assert task.solution[-1] == "done()"
    # About 8% infeasible (OSWorld's share), one per app, each answered by fail() alone.
    infeasible = [task for task in catalog.values() if not task.feasible]
    assert sorted(task.id for task in infeasible) == sorted(
        [f"{app}-infeasible-{n}" for app in ("calc", "impress", "writer") for n in (0, 1)]
        + [f"{app}-infeasible-0" for app in ("gimp", "multi", "odt", "os", "text")]
        + ["chrome-infeasible-0", "chrome-infeasible-1"]
    )
    assert all(task.solution == ("fail()",) for task in infeasible)
    assert 0.06 <= len(infeasible) / len(catalog) <= 0.1


def test_every_untouched_input_fails_its_check():
    for task in apps_catalog().values():
        if task.feasible:
            problem = task.check(Files({f"/home/agent/{relative}": data for relative, data in task.files.items()}))
            assert problem, task.id


def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def jpeg(image, **options) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, "JPEG", **options)
    return buffer.getvalue()


def test_gimp_gold_passes_and_the_hacks_fail():
    from PIL import Image, ImageOps

    catalog = apps_catalog()
    for kind in generators.GIMP_KINDS:
        for seed in generators.SEEDS:
            spec, files = generators.generate("gimp", kind, seed)
            task, path = catalog[f"gimp-{kind}-{seed}"], spec["evaluator"]["result"]["path"]
            exact = "options" not in spec["evaluator"]
            lossy = kind == "jpeg"
            encode = jpeg if lossy else png
            gold = files[spec["evaluator"]["expected"]["path"]]
            start = files[spec["config"][0]["parameters"]["files"][0]["url"]]
            image = Image.open(io.BytesIO(gold)).convert("RGB")
            what = f"gimp-{kind}-{seed}"
            assert task.check(Files({path: gold if not lossy else jpeg(image, quality=90)})) is None, what
            # Nothing exported, or exported beside the asked path; the input renamed into place (for the
            # JPEG task its PNG under the .jpg name); the input saved in the asked format, unedited.
            assert "not exported" in task.check(Files({})), what
            assert "not exported" in task.check(Files({spec["config"][0]["parameters"]["files"][0]["path"]: gold}))
            assert task.check(Files({path: start})), what
            unedited = Image.open(io.BytesIO(start))
            if kind != "jpeg":
                assert task.check(Files({path: encode(unedited)})), what
            # Wrong edits: mirrored, upside down, inverted, blank; the right picture twice as big, with a
            # one-pixel border; the right colours made transparent (same RGB, alpha 0).
            for wrong in (
                ImageOps.mirror(image),
                ImageOps.flip(image),
                ImageOps.invert(image),
                Image.new("RGB", image.size, image.getpixel((image.width - 1, image.height - 1))),
                image.resize((image.width * 2, image.height * 2)),
                ImageOps.expand(image, 1, (0, 0, 0)),
            ):
                assert task.check(Files({path: encode(wrong)})), what
            if not lossy:  # (a JPEG has no alpha)
                clear = image.convert("RGBA")
                clear.putalpha(0)
                assert "differ" in task.check(Files({path: png(clear)})), what
            # The right pixels in the other format, under the asked name.
            other = png(image) if lossy else jpeg(image, quality=100)
            assert f"not a {'JPEG' if lossy else 'PNG'}" in task.check(Files({path: other})), what
            # One pixel off by one: wrong where the task is graded exactly, within a tolerance otherwise.
            off = image.copy()
            r, g, b = off.getpixel((5, 5))
            off.putpixel((5, 5), ((r + 1) % 256, g, b))
            assert (task.check(Files({path: encode(off)})) is None) is not exact, what
    # A PNG that claims a huge canvas is refused before it is decoded; a truncated one cannot be read.
    task, path = catalog["gimp-mirror-0"], generators.generate("gimp", "mirror", 0)[0]["evaluator"]["result"]["path"]
    huge = png(Image.new("1", (8192, 8192)))
    assert "over" in task.check(Files({path: huge}))
    assert "could not be read" in task.check(Files({path: huge[:60]}))


def test_compare_image_list_options_refuse_their_hacks():
    """``format`` is the file's signature, not its name; ``tolerance`` lets a JPEG's or a resampling's small
    changes through and no wrong edit, and never another size."""
    from PIL import Image, ImageOps

    spec, files = generators.generate("gimp", "jpeg", 0)
    gold = files[spec["evaluator"]["expected"]["path"]]
    image = Image.open(io.BytesIO(gold)).convert("RGB")
    lossy = {"format": "jpeg", "tolerance": 8.0}
    for quality in (75, 90, 100):
        for subsampling in (0, 2):  # 4:4:4 and 4:2:0
            assert (
                metrics.compare_image_list(jpeg(image, quality=quality, subsampling=subsampling), gold, **lossy) is None
            )
    # The same JPEG graded exactly, or as a PNG; a PNG graded as a JPEG (the right pixels, the wrong type).
    assert "differ" in metrics.compare_image_list(jpeg(image, quality=90), gold, format="jpeg")
    assert "not a PNG" in metrics.compare_image_list(jpeg(image, quality=90), gold, tolerance=8.0)
    assert "not a JPEG" in metrics.compare_image_list(gold, gold, **lossy)
    # A JPEG body behind a PNG signature (or the other way round) cannot be read as what it claims.
    assert metrics.compare_image_list(b"\x89PNG\r\n\x1a\n" + jpeg(image)[8:], gold)
    assert metrics.compare_image_list(b"\xff\xd8\xff" + gold[3:], gold, **lossy)
    # Wrong edits stay outside the tolerance; so does a plain image of the background's colour and another size.
    for wrong in (
        ImageOps.mirror(image),
        ImageOps.flip(image),
        image.rotate(180),
        ImageOps.grayscale(image),
        Image.new("RGB", image.size, image.getpixel((image.width - 1, image.height - 1))),
    ):
        assert "differ" in metrics.compare_image_list(jpeg(wrong, quality=100), gold, **lossy)
    assert "expected" in metrics.compare_image_list(jpeg(image.resize((image.width + 1, image.height))), gold, **lossy)
    # A JPEG that claims a huge canvas is refused before it is decoded; an unknown format is the task's error.
    assert "over" in metrics.compare_image_list(jpeg(Image.new("L", (4097, 4097))), gold, **lossy)
    with pytest.raises(ValueError, match="format"):
        metrics.compare_image_list(gold, gold, format="gif")


def test_the_gimp_gold_files_are_what_the_instructions_ask():
    """Pillow's gold against what the instruction says, on the pictures (independent of GIMP)."""
    from PIL import Image

    def pictures(kind, seed):
        spec, files = generators.generate("gimp", kind, seed)
        gold = files[spec["evaluator"]["expected"]["path"]]
        return Image.open(io.BytesIO(files[spec["config"][0]["parameters"]["files"][0]["url"]])), Image.open(
            io.BytesIO(gold)
        )

    for seed in generators.SEEDS:
        start, gold = pictures("rotate90", seed)
        assert gold.size == (start.height, start.width)
        assert gold.getpixel((gold.width - 1, 0)) == start.getpixel((0, 0)) == (255, 0, 0)  # the top left went right
        start, gold = pictures("autocrop", seed)
        border = start.getpixel((0, 0))
        assert border in ((0, 0, 0), (255, 255, 255)) and gold.getpixel((0, 0)) == (255, 0, 0)
        content = start.getbbox() if border == (0, 0, 0) else Image.eval(start, lambda v: 255 - v).getbbox()
        assert start.crop(content).tobytes() == gold.tobytes() and content[2:] != start.size
        start, gold = pictures("scale", seed)
        assert gold.size == (start.width * 2, start.height * 2)
        assert str(start.width * 2) in generators.generate("gimp", "scale", seed)[0]["instruction"]
        start, gold = pictures("grayscale", seed)
        assert gold.mode == "L"
        # The red bar: the linear luminance of pure red is 0.2225 (babl's weight), 0.509 on the sRGB curve: 130.
        assert gold.getpixel((0, 0)) == 130
        assert generators._grayscale(Image.new("RGB", (1, 1), (255, 255, 255))).getpixel((0, 0)) == 255
        assert generators._grayscale(Image.new("RGB", (1, 1), (0, 0, 0))).getpixel((0, 0)) == 0


def test_text_gold_passes_and_the_hacks_fail():
    catalog = apps_catalog()
    for kind in generators.TEXT_KINDS:
        spec, files = generators.generate("text", kind, 2)
        task, path = catalog[f"text-{kind}-2"], spec["evaluator"]["result"][0]["path"]
        gold = files[spec["evaluator"]["expected"][0]["path"]]
        assert task.check(Files({path: gold})) is None, kind
        # Near misses: the last newline dropped, a blank line added, CRLF line ends, the case changed.
        for near in (gold[:-1], gold + b"\n", gold.replace(b"\n", b"\r\n"), gold.upper()):
            assert "file's text" in task.check(Files({path: near})), (kind, near)
        # The gold text saved under another name (the agent's own copy) is not the file; bytes that are not text.
        assert "not saved" in task.check(Files({path + ".bak": gold}))
        assert "not UTF-8" in task.check(Files({path: b"\xff\xfe" + gold}))


def test_a_missing_file_fails():
    task = apps_catalog()["calc-sum-0"]
    assert "not saved" in task.check(Files({}))


def test_calc_sum_gold_passes_and_the_hacks_fail():
    task = apps_catalog()["calc-sum-0"]
    path = "/home/agent/Documents/budget.xlsx"
    spec, _ = generators.generate("calc", "sum", 0)
    last = len(openpyxl.load_workbook(io.BytesIO(_["budget.xlsx"])).active["B"])  # rows of data + header
    total_row = last + 1
    amounts = [row[1].value for row in openpyxl.load_workbook(io.BytesIO(_["budget.xlsx"])).active.iter_rows(min_row=2)]

    def solved(sheet):
        sheet[f"A{total_row}"] = "Total"
        sheet[f"B{total_row}"] = f"=SUM(B2:B{last})"
        return {f"B{total_row}": sum(amounts)}

    assert task.check(Files({path: saved_sheet("calc-sum-0", solved)})) is None

    def typed_number(sheet):  # the right number, typed: no formula
        sheet[f"A{total_row}"], sheet[f"B{total_row}"] = "Total", sum(amounts)

    assert "not a formula" in task.check(Files({path: saved_sheet("calc-sum-0", typed_number)}))

    def forged_cache(sheet):  # a formula whose cached value is the gold number but computes something else
        sheet[f"A{total_row}"], sheet[f"B{total_row}"] = "Total", "=B2"
        return {f"B{total_row}": sum(amounts)}

    assert "its formula" in task.check(Files({path: saved_sheet("calc-sum-0", forged_cache)}))

    def edited_data(sheet):  # the data changed so that a different total fits
        sheet["B2"] = sheet["B2"].value + 1
        sheet[f"A{total_row}"], sheet[f"B{total_row}"] = "Total", f"=SUM(B2:B{last})"
        return {f"B{total_row}": sum(amounts) + 1}

    assert "B2" in task.check(Files({path: saved_sheet("calc-sum-0", edited_data)}))
    # The wrong format under the right name: CSV text, or an OpenDocument sheet.
    assert "not an xlsx" in task.check(Files({path: b"Item,Amount\nTotal,1\n"}))
    ods = io.BytesIO()
    with zipfile.ZipFile(ods, "w") as package:
        package.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        package.writestr("content.xml", "<office:document-content/>")
    assert "not an xlsx" in task.check(Files({path: ods.getvalue()}))


def test_a_formula_the_checker_cannot_evaluate_fails():
    task = apps_catalog()["calc-sum-0"]

    def outside_the_grid(sheet):
        sheet["A20"] = "=1+1"
        return {"A20": 2}

    problem = task.check(Files({"/home/agent/Documents/budget.xlsx": saved_sheet("calc-sum-0", outside_the_grid)}))
    assert problem


def writer_file(paragraphs) -> bytes:
    document = docx.Document()
    for text, bold in paragraphs:
        document.add_paragraph().add_run(text).bold = bold or None
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_writer_gold_passes_and_the_hacks_fail():
    catalog = apps_catalog()
    for kind in generators.WRITER_KINDS:
        if (
            kind == "pdf"
        ):  # its expected file is the document, not the PDF: test_pdf_export_gold_passes_and_the_hacks_fail
            continue
        spec, files = generators.generate("writer", kind, 0)
        task = osworld.load_task(spec, files)  # catalogued or not (generators.UNVERIFIED)
        path = spec["evaluator"]["result"][0]["path"]
        gold = files[spec["evaluator"]["expected"][0]["path"]]
        assert task.check(Files({path: gold})) is None, kind
        assert task.check(Files({path: files[spec["config"][0]["parameters"]["files"][0]["url"]]})), kind
    # Bold: the right text without the bold fails; bold on the wrong paragraph fails.
    task = catalog["writer-bold-0"]
    spec, files = generators.generate("writer", "bold", 0)
    path = spec["evaluator"]["result"][0]["path"]
    texts = [p.text for p in docx.Document(io.BytesIO(files["gold-" + path.rsplit("/", 1)[1]])).paragraphs]
    assert "bold" in task.check(Files({path: writer_file([(t, i == 1) for i, t in enumerate(texts)])}))
    # The right text as a picture is no text: a document with only an image fails.
    picture = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (40, 10), "white").save(picture, "PNG")
    document = docx.Document()
    document.add_picture(io.BytesIO(picture.getvalue()))
    buffer = io.BytesIO()
    document.save(buffer)
    assert task.check(Files({path: buffer.getvalue()}))


def test_odt_gold_passes_and_the_hacks_fail():
    catalog = apps_catalog()
    for kind in generators.ODT_KINDS:
        spec, files = generators.generate("odt", kind, 0)
        task, path = catalog[f"odt-{kind}-0"], spec["evaluator"]["result"][0]["path"]
        gold = files[spec["evaluator"]["expected"][0]["path"]]
        assert task.check(Files({path: gold})) is None, kind
        assert "paragraphs" in task.check(Files({path: files[spec["config"][0]["parameters"]["files"][0]["url"]]}))
    # The same paragraphs as a docx under the odt name; an odt whose mimetype says spreadsheet; a damaged one.
    texts = metrics._odt_texts(gold)
    assert "not an odt" in task.check(Files({path: writer_file([(t, False) for t in texts])}))
    forged = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(gold)) as source, zipfile.ZipFile(forged, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            target.writestr(
                item, b"application/vnd.oasis.opendocument.spreadsheet" if item.filename == "mimetype" else data
            )
    assert "not an odt" in task.check(Files({path: forged.getvalue()}))
    assert task.check(Files({path: gold[:200]}))
    # Spans, a heading and runs of spaces read as a reader sees them; an empty paragraph is ignored.
    from odf import text
    from odf.opendocument import OpenDocumentText

    document = OpenDocumentText()
    heading = text.H(outlinelevel=1)
    heading.addElement(text.Span(text=texts[0]))
    document.text.addElement(heading)
    document.text.addElement(text.P(text=""))
    for line in texts[1:]:
        paragraph = text.P()
        first, _, rest = line.partition(" ")
        paragraph.addElement(text.Span(text=first + " "))
        paragraph.addText(rest)
        document.text.addElement(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    assert task.check(Files({path: buffer.getvalue()})) is None


def test_the_loader_refuses_what_the_format_does_not_allow():
    spec, files = generators.generate("calc", "sum", 1)
    osworld.load_task(spec, files)  # the generated form loads
    for change, message in [
        (lambda s: s["config"].append({"type": "reboot", "parameters": {}}), "unknown set-up step"),
        (lambda s: s["config"].pop(1), "no open or launch"),
        (lambda s: s["evaluator"].update(func=["compare_everything"]), "unknown metric"),
        (lambda s: s["evaluator"].update(conj="xor"), "conj"),
        (lambda s: s["evaluator"].update(result=[]), "result getters"),
        (lambda s: s["config"][0]["parameters"]["files"][0].update(url="https://example.com/x.xlsx"), "downloads"),
        (lambda s: s["config"][0]["parameters"]["files"][0].update(path="/etc/x.xlsx"), "files go under"),
    ]:
        broken = json.loads(json.dumps(spec))
        change(broken)
        with pytest.raises(ValueError, match=message):
            osworld.load_task(broken, files)


def test_a_task_file_loads_with_its_files_beside_it(tmp_path):
    spec, files = generators.generate("writer", "title", 2)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "task.json").write_text(json.dumps(spec))
    task = osworld.load_task_file(tmp_path / "task.json")
    assert task.id == "writer-title-2" and task.app.argv[0] == "soffice"
    gold = spec["evaluator"]["expected"][0]["path"]
    assert task.check(Files({spec["evaluator"]["result"][0]["path"]: files[gold]})) is None
    spec["config"][0]["parameters"]["files"][0]["url"] = "../outside.docx"
    (tmp_path / "task.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="outside the task's folder"):
        osworld.load_task_file(tmp_path / "task.json")


def test_infeasible_and_or_conj():
    spec, files = generators.generate("writer", "append", 0)
    spec = json.loads(json.dumps(spec))
    spec["evaluator"] = {"func": "infeasible"}
    assert not osworld.load_task(spec, files).feasible
    spec["evaluator"] = {
        "func": ["check_include_exclude", "check_include_exclude"],
        "conj": "or",
        "result": {"type": "vm_file", "path": "/home/agent/a.txt"},
        "expected": [{"type": "rule", "rules": {"include": ["x"]}}, {"type": "rule", "rules": {"include": ["y"]}}],
    }
    task = osworld.load_task(spec, files)
    assert task.check(Files({"/home/agent/a.txt": b"y"})) is None
    assert "'x'" in task.check(Files({"/home/agent/a.txt": b"z"}))
    spec["evaluator"]["conj"] = "and"
    assert "'x'" in osworld.load_task(spec, files).check(Files({"/home/agent/a.txt": b"y"}))


def test_impress_gold_passes_and_a_changed_slide_fails():
    catalog = apps_catalog()
    for kind in generators.IMPRESS_KINDS:
        spec, files = generators.generate("impress", kind, 1)  # every kind, catalogued or not (UNVERIFIED)
        task, path = osworld.load_task(spec, files), spec["evaluator"]["result"][0]["path"]
        gold = files[spec["evaluator"]["expected"][0]["path"]]
        assert task.check(Files({path: gold})) is None, kind
    # The right title on the wrong slide, and a deck missing a slide.
    spec, files = generators.generate("impress", "title", 1)
    path, task = spec["evaluator"]["result"][0]["path"], catalog["impress-title-1"]
    deck = pptx.Presentation(io.BytesIO(files[spec["evaluator"]["expected"][0]["path"]]))
    titles = [slide.shapes.title.text for slide in deck.slides]
    deck.slides[0].shapes.title.text, deck.slides[1].shapes.title.text = titles[1], titles[0]
    buffer = io.BytesIO()
    deck.save(buffer)
    assert "slides' texts" in task.check(Files({path: buffer.getvalue()}))
    slides = deck.slides._sldIdLst
    slides.remove(slides[-1])
    buffer = io.BytesIO()
    deck.save(buffer)
    assert "slides' texts" in task.check(Files({path: buffer.getvalue()}))
    assert "not a pptx" in task.check(Files({path: files[spec["evaluator"]["expected"][0]["path"]][:100]}))


def test_metrics_are_registered_under_osworld_names():
    assert {"compare_table", "compare_docx_files", "compare_pptx_files"} <= set(metrics.METRICS)


def gold_and_input(task_id: str) -> tuple[str, bytes, bytes, object]:
    """The task's result path, its gold file, its untouched input, and the task."""
    app, kind, seed = task_id.split("-")
    spec, files = generators.generate(app, kind, int(seed))
    path = spec["evaluator"]["result"][0]["path"]
    return (
        path,
        files[spec["evaluator"]["expected"][0]["path"]],
        files[spec["config"][0]["parameters"]["files"][0]["url"]],
        osworld.load_task(spec, files),  # catalogued or not (generators.UNVERIFIED)
    )


def sheet_bytes(data: bytes, edit) -> bytes:
    book = openpyxl.load_workbook(io.BytesIO(data))
    edit(book.active)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def test_calc_sort_gold_passes_and_the_hacks_fail():
    path, gold, start, task = gold_and_input("calc-sort-1")
    assert task.check(Files({path: gold})) is None
    assert "expected" in task.check(Files({path: start}))

    def ascending(sheet):  # the right rows, the wrong way round
        rows = sorted(([a.value, b.value] for a, b in sheet.iter_rows(min_row=2)), key=lambda row: row[1])
        for index, (item, amount) in enumerate(rows, start=2):
            sheet[f"A{index}"], sheet[f"B{index}"] = item, amount

    def amounts_only(sheet):  # the Amount column sorted on its own: the items lost their amounts
        amounts = sorted((b.value for (b,) in sheet.iter_rows(min_row=2, min_col=2, max_col=2)), reverse=True)
        for index, amount in enumerate(amounts, start=2):
            sheet[f"B{index}"] = amount

    assert "expected" in task.check(Files({path: sheet_bytes(gold, ascending)}))
    assert "expected" in task.check(Files({path: sheet_bytes(start, amounts_only)}))
    moved = sheet_bytes(gold, lambda sheet: sheet.move_range("A1:B7", rows=1))
    assert "expected" in task.check(Files({path: moved}))


def test_calc_sumif_gold_passes_and_the_hacks_fail():
    path, gold, start, task = gold_and_input("calc-sumif-1")
    wanted = {
        f"E{row[0].row}": row[4].value
        for row in openpyxl.load_workbook(io.BytesIO(gold)).active.iter_rows(min_row=2)
        if len(row) > 4 and row[4].value is not None
    }
    last = openpyxl.load_workbook(io.BytesIO(start)).active.max_row

    def solve(write):
        def edit(sheet):
            for cell in wanted:
                sheet[cell] = write(cell)
            return {cell: wanted[cell] for cell in wanted}

        return saved_sheet("calc-sumif-1", edit)

    sumif = solve(lambda cell: f"=SUMIF(A2:A{last},D{cell[1:]},B2:B{last})")
    assert task.check(Files({path: sumif})) is None
    absolute = solve(lambda cell: f"=SUMIF($A$2:$A${last},D{cell[1:]},$B$2:$B${last})")
    assert task.check(Files({path: absolute})) is None
    assert "expected" in task.check(Files({path: start}))
    # The totals typed; added up cell by cell (a formula, the right value, but no summary); a forged cache.
    sheet = openpyxl.load_workbook(io.BytesIO(start)).active
    rows = {cell.row: cell.value for (cell,) in sheet.iter_rows(min_row=2, max_col=1)}
    amounts = {cell.row: cell.value for (cell,) in sheet.iter_rows(min_row=2, min_col=2, max_col=2)}

    def by_hand(cell):
        category = sheet[f"D{cell[1:]}"].value
        return "=" + "+".join(f"B{row}" for row, value in rows.items() if value == category)

    typed = solve(lambda cell: wanted[cell])
    assert "not a formula" in task.check(Files({path: typed}))
    assert "does not use SUMIF" in task.check(Files({path: solve(by_hand)}))
    assert sum(amounts.values()) not in wanted.values()

    def forged(sheet):
        for cell in wanted:
            sheet[cell] = f"=SUMIF(A2:A{last},D2,B2:B{last})"  # every row the first category's total
        return dict(wanted)

    assert "its formula" in task.check(Files({path: saved_sheet("calc-sumif-1", forged)}))


def test_calc_styles_gold_passes_and_the_hacks_fail():
    path, gold, start, task = gold_and_input("calc-decimals-0")
    assert task.check(Files({path: gold})) is None
    assert "number_format" in task.check(Files({path: start}))
    sheet = openpyxl.load_workbook(io.BytesIO(gold)).active
    prices = [cell.value for (cell,) in sheet.iter_rows(min_row=2, min_col=2, max_col=2)]

    def as_text(sheet):  # the prices retyped as text that looks formatted
        for (cell,), price in zip(sheet.iter_rows(min_row=2, min_col=2, max_col=2), prices):
            cell.value, cell.number_format = f"{price:,.2f}", "General"

    def rounded(sheet):  # the values rounded to what the format shows
        for (cell,) in sheet.iter_rows(min_row=2, min_col=2, max_col=2):
            cell.value = round(cell.value)

    def one_decimal(sheet):
        for (cell,) in sheet.iter_rows(min_row=2, min_col=2, max_col=2):
            cell.number_format = "#,##0.0"

    def whole_column(sheet):  # the header formatted too: it holds text, on which a number format shows nothing
        sheet["B1"].number_format = generators.TWO_DECIMALS

    assert "expected" in task.check(Files({path: sheet_bytes(gold, as_text)}))
    assert any(price != round(price) for price in prices)
    assert "expected" in task.check(Files({path: sheet_bytes(gold, rounded)}))
    assert "number_format" in task.check(Files({path: sheet_bytes(gold, one_decimal)}))
    assert task.check(Files({path: sheet_bytes(gold, whole_column)})) is None

    path, gold, start, task = gold_and_input("calc-bold-2")
    assert task.check(Files({path: gold})) is None
    assert "font_bold" in task.check(Files({path: start}))
    from openpyxl.styles import Font

    def everything_bold(sheet):
        for row in sheet.iter_rows():
            for cell in row:
                cell.font = Font(bold=True)

    def first_cell_only(sheet):
        sheet["B1"].font = sheet["C1"].font = Font(bold=False)

    assert "font_bold" in task.check(Files({path: sheet_bytes(gold, everything_bold)}))
    assert "A2's font_bold" in task.check(Files({path: sheet_bytes(gold, everything_bold)}))
    assert "B1's font_bold" in task.check(Files({path: sheet_bytes(gold, first_cell_only)}))
    with pytest.raises(ValueError, match="styles are"):
        metrics.compare_table(gold, gold, styles=["font_colour"])


def test_writer_replace_and_table_hacks_fail():
    path, gold, start, task = gold_and_input("writer-replace-0")
    assert task.check(Files({path: gold})) is None and "paragraphs" in task.check(Files({path: start}))
    texts = [p.text for p in docx.Document(io.BytesIO(start)).paragraphs]
    spec, _ = generators.generate("writer", "replace", 0)
    old, new = re.findall(r"'([^']+)'", spec["instruction"])[:2]
    first_only = [t.replace(old, new) if i == 0 else t for i, t in enumerate(texts)]
    assert "paragraphs" in task.check(Files({path: writer_file([(t, False) for t in first_only])}))
    both = [t.replace(old, f"{new} ({old})") for t in texts]  # the new name added beside the old one
    assert "paragraphs" in task.check(Files({path: writer_file([(t, False) for t in both])}))

    path, gold, start, task = gold_and_input("writer-table-1")
    assert task.check(Files({path: gold})) is None
    assert "tables" in task.check(Files({path: start}))
    document = docx.Document(io.BytesIO(gold))
    rows = [[cell.text for cell in row.cells] for row in document.tables[0].rows]
    paragraphs = [p.text for p in document.paragraphs]

    def build(table_rows, extra_paragraphs=()):
        return generators._document([(text, False) for text in [*paragraphs, *extra_paragraphs]], table_rows or None)

    assert task.check(Files({path: build(rows)})) is None
    # The rows typed as tab-separated paragraphs: no table (and extra paragraphs).
    assert task.check(Files({path: build(None, ["\t".join(row) for row in rows])}))
    assert "tables" in task.check(Files({path: build(rows[:-1])}))  # a row missing
    assert "tables" in task.check(Files({path: build([[*row, ""] for row in rows])}))  # a third, empty column
    assert "tables" in task.check(Files({path: build([row[::-1] for row in rows])}))  # the columns swapped
    assert "not saved" in metrics.compare_docx_tables(None, gold)
    assert "not a docx" in metrics.compare_docx_tables(b"Item\tPrice\n", gold)


def footer_with(runs_xml: str, paragraphs, *, header: str = "", where: str = "footer") -> bytes:
    """The document's paragraphs with ``runs_xml`` (WordprocessingML runs) as its footer's (or header's) paragraph."""
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    document = docx.Document(io.BytesIO(generators._document(paragraphs, header=header)))
    part = getattr(document.sections[0], where).paragraphs[0]._p
    for run in parse_xml(f"<w:p {nsdecls('w')}>{runs_xml}</w:p>"):
        part.append(run)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def complex_field(instruction: str, shown: str) -> str:
    return (
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r>'
        f'<w:r><w:instrText xml:space="preserve"> {instruction} </w:instrText></w:r>'
        f'<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>{shown}</w:t></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
    )


def test_writer_header_gold_passes_and_the_hacks_fail():
    for seed in generators.SEEDS:
        path, gold, start, task = gold_and_input(f"writer-header-{seed}")
        assert task.check(Files({path: gold})) is None
        assert "not saved" in task.check(Files({})) and "(header, footer)" in task.check(Files({path: start}))
        body = [(p.text, False) for p in docx.Document(io.BytesIO(start)).paragraphs]
        (header,) = docx.Document(io.BytesIO(gold)).sections[0].header.paragraphs
        wanted = header.text
        # The text typed as the body's first paragraph (no header); in the header and in the body too; in the footer;
        # the header with another text; the header's text split over two paragraphs.
        assert "paragraphs" in task.check(Files({path: generators._document([(wanted, False), *body])}))
        both = generators._document([(wanted, False), *body], header=wanted)
        assert "document's paragraphs" in task.check(Files({path: both}))
        in_footer = footer_with(f"<w:r><w:t>{wanted}</w:t></w:r>", body)
        assert "(header, footer)" in task.check(Files({path: in_footer}))
        other = generators._document(body, header=wanted.replace(" for ", " from "))
        assert "(header, footer)" in task.check(Files({path: other}))
        first, _, rest = wanted.partition(" ")
        split = footer_with(f"<w:r><w:t>{rest}</w:t></w:r>", body, header=first, where="header")
        assert "(header, footer)" in task.check(Files({path: split}))
        # The text in two runs is the same text.
        runs = footer_with(f'<w:r><w:t xml:space="preserve">{first} </w:t></w:r><w:r><w:t>{rest}</w:t></w:r>', body)
        assert metrics._headers_footers(runs) == [([], [wanted])]


def test_writer_page_number_gold_passes_and_the_hacks_fail():
    for seed in generators.SEEDS:
        path, gold, start, task = gold_and_input(f"writer-pagenum-{seed}")
        assert task.check(Files({path: gold})) is None
        assert "(header, footer)" in task.check(Files({path: start}))
        body = [(p.text, False) for p in docx.Document(io.BytesIO(start)).paragraphs]
        # Word's simple field form, and a complex field showing another page, are the page number too.
        assert (
            task.check(
                Files({path: footer_with('<w:fldSimple w:instr=" PAGE "><w:r><w:t>1</w:t></w:r></w:fldSimple>', body)})
            )
            is None
        )
        assert task.check(Files({path: footer_with(complex_field("PAGE \\* ARABIC", "7"), body)})) is None
        # A typed "1" (the number the field shows on page one); the page count's field; the field in the header;
        # the field with a label beside it; the field in the body (its cached "1" is a new paragraph there).
        for runs, where in [
            ("<w:r><w:t>1</w:t></w:r>", "footer"),
            (complex_field("NUMPAGES", "1"), "footer"),
            (complex_field("PAGE", "1"), "header"),
            ('<w:r><w:t xml:space="preserve">Page </w:t></w:r>' + complex_field("PAGE", "1"), "footer"),
        ]:
            assert "(header, footer)" in task.check(Files({path: footer_with(runs, body, where=where)})), runs
        document = docx.Document(io.BytesIO(start))
        from docx.oxml import parse_xml
        from docx.oxml.ns import nsdecls

        for run in parse_xml(f"<w:p {nsdecls('w')}>{complex_field('PAGE', '1')}</w:p>"):
            document.add_paragraph()._p.append(run)
        buffer = io.BytesIO()
        document.save(buffer)
        assert "paragraphs" in task.check(Files({path: buffer.getvalue()}))
    # A field nested in another (an IF around a PAGE) is the outer one's; text between fields stays text.
    nested = (
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> IF </w:instrText></w:r>'
        + complex_field("PAGE", "1")
        + '<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>1</w:t></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r>'
        + '<w:r><w:t xml:space="preserve"> of </w:t></w:r>'
        + complex_field("NUMPAGES", "3")
    )
    assert metrics._headers_footers(footer_with(nested, [("x", False)])) == [([], ["{IF} of {NUMPAGES}"])]


def deck_bytes(data: bytes, change) -> bytes:
    deck = pptx.Presentation(io.BytesIO(data))
    change(deck)
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def relayout(deck, index: int, layout: int) -> None:
    """Point slide ``index`` at another layout of the deck (its shapes stay as they are)."""
    slide = deck.slides[index]
    rel = next(r for r in slide.part.rels.values() if r.reltype.endswith("/slideLayout"))
    rel._target = deck.slide_layouts[layout].part


def test_impress_layout_gold_passes_and_the_hacks_fail():
    for seed in generators.SEEDS:
        path, gold, start, task = gold_and_input(f"impress-layout-{seed}")
        assert task.check(Files({path: gold})) is None
        assert "layouts" in task.check(Files({path: start}))
        layouts = metrics._slide_layouts(gold)
        changed = next(i for i, (a, b) in enumerate(zip(metrics._slide_layouts(start), layouts)) if a != b)
        target = {name: index for index, name in generators.LIBREOFFICE_LAYOUTS.items()}[layouts[changed]]

        def also(deck, target=target):  # the title slide given the layout too
            relayout(deck, 0, target)

        def instead(deck, target=target):  # the title slide given the layout, the asked one left as it was
            relayout(deck, 0, target)

        def retitled(deck, changed=changed):  # the right layout, the title retyped
            deck.slides[changed].shapes.title.text += "!"

        assert "layouts" in task.check(Files({path: deck_bytes(gold, also)}))
        assert "layouts" in task.check(Files({path: deck_bytes(start, instead)}))
        assert "slides' texts" in task.check(Files({path: deck_bytes(gold, retitled)}))
    # The right layout under python-pptx's name for it (Title and Content, not LibreOffice's Title, Content).
    renamed = deck_bytes(gold, lambda deck: setattr(deck.slide_layouts[1], "name", "Title and Content"))
    assert "layouts" in task.check(Files({path: renamed}))


def chart_sheet(rows, build) -> bytes:
    """The rows with the charts ``build(sheet)`` returns added (openpyxl charts)."""
    book = openpyxl.load_workbook(io.BytesIO(generators._workbook(rows)))
    for chart in build(book.active):
        book.active.add_chart(chart, "D2")
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def test_calc_chart_gold_passes_and_the_hacks_fail():
    from openpyxl.chart import BarChart, LineChart, PieChart, Reference

    for seed, kind in zip(generators.SEEDS, generators.CHART_TYPES):
        path, gold, start, task = gold_and_input(f"calc-chart-{seed}")
        assert task.check(Files({path: gold})) is None
        assert "charts are []" in task.check(Files({path: start}))
        rows = [[cell.value for cell in row] for row in openpyxl.load_workbook(io.BytesIO(start)).active.iter_rows()]
        last = len(rows)

        def chart(make, values_from=2, categories=True, last=last):
            def build(sheet):
                graph = make()
                graph.add_data(Reference(sheet, min_col=2, min_row=values_from, max_row=last))
                if categories:
                    graph.set_categories(Reference(sheet, min_col=1, min_row=2, max_row=last))
                return [graph]

            return build

        right = {"column": lambda: BarChart(barDir="col"), "bar": lambda: BarChart(barDir="bar"), "line": LineChart}[
            kind
        ]
        # openpyxl's own chart over the same ranges (its references quote the sheet's name) is the gold's.
        assert task.check(Files({path: chart_sheet(rows, chart(right))})) is None
        # Another type (a bar chart's other direction too); the values with the header; no categories; a second
        # chart beside the right one; the data changed under the right chart.
        for wrong in ("column", "bar", "line"):
            if wrong != kind:
                assert "charts are" in task.check(Files({path: generators._workbook(rows, chart=wrong)}))
        assert "charts are" in task.check(Files({path: chart_sheet(rows, chart(PieChart))}))
        assert "charts are" in task.check(Files({path: chart_sheet(rows, chart(right, values_from=1))}))
        assert "charts are" in task.check(Files({path: chart_sheet(rows, chart(right, categories=False))}))
        two = chart_sheet(rows, lambda sheet, right=right: [*chart(right)(sheet), *chart(PieChart)(sheet)])
        assert "charts are" in task.check(Files({path: two}))
        edited = [list(row) for row in rows]
        edited[1][1] += 1
        assert "Sheet1!B2" in task.check(Files({path: generators._workbook(edited, chart=kind)}))
    # A picture of a chart is no chart.
    from openpyxl.drawing.image import Image as SheetImage
    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (40, 30), "white").save(picture, "PNG")
    book = openpyxl.load_workbook(io.BytesIO(start))
    book.active.add_image(SheetImage(io.BytesIO(picture.getvalue())), "D2")
    buffer = io.BytesIO()
    book.save(buffer)
    assert "charts are []" in task.check(Files({path: buffer.getvalue()}))


def test_calc_filter_gold_passes_and_the_hacks_fail():
    for seed in generators.SEEDS:
        path, gold, start, task = gold_and_input(f"calc-filter-{seed}")
        assert task.check(Files({path: gold})) is None
        assert "filter" in task.check(Files({path: start}))
        sheet = openpyxl.load_workbook(io.BytesIO(gold)).active
        rows = [[cell.value for cell in row] for row in sheet.iter_rows()]
        (column,) = sheet.auto_filter.filterColumn
        shown = column.filters.filter[0]
        other = next(row[0] for row in rows[1:] if row[0] != shown)
        # Calc's form of the same filter: an "equal" custom filter.
        from openpyxl.worksheet.filters import CustomFilter, CustomFilters, FilterColumn

        def custom(sheet, shown=shown):
            equal = CustomFilters(customFilter=[CustomFilter(val=shown)])
            sheet.auto_filter.filterColumn = [FilterColumn(colId=0, customFilters=equal)]

        assert task.check(Files({path: sheet_bytes(gold, custom)})) is None

        def hidden_by_hand(sheet, rows=rows, shown=shown):  # the right rows hidden, no filter
            for number, row in enumerate(rows[1:], start=2):
                sheet.row_dimensions[number].hidden = row[0] != shown

        def deleted(sheet, rows=rows, shown=shown):  # the other rows deleted
            for number in range(len(rows), 1, -1):
                if rows[number - 1][0] != shown:
                    sheet.delete_rows(number)

        def not_applied(sheet, rows=rows):  # the filter defined, no row hidden
            for number in range(2, len(rows) + 1):
                sheet.row_dimensions[number].hidden = False

        def other_value(sheet, other=other):
            sheet.auto_filter.filterColumn[0].filters.filter = [other]

        def on_amounts(sheet):  # the filter set on the Amount column
            sheet.auto_filter.filterColumn[0].colId = 1

        assert "filter" in task.check(Files({path: sheet_bytes(start, hidden_by_hand)}))
        assert "expected" in task.check(Files({path: sheet_bytes(gold, deleted)}))
        for hack in (not_applied, other_value, on_amounts):
            assert "filter" in task.check(Files({path: sheet_bytes(gold, hack)})), hack.__name__


def test_impress_slide_and_notes_hacks_fail():
    path, gold, start, task = gold_and_input("impress-slide-0")
    assert task.check(Files({path: gold})) is None and "slides' texts" in task.check(Files({path: start}))

    def edited(data, change):
        deck = pptx.Presentation(io.BytesIO(data))
        change(deck)
        buffer = io.BytesIO()
        deck.save(buffer)
        return buffer.getvalue()

    def title_only(deck):  # the bullet point typed into the title
        slide = deck.slides[-1]
        slide.shapes.title.text += " " + slide.placeholders[1].text_frame.text
        slide.placeholders[1].text_frame.text = ""

    assert "slides' texts" in task.check(Files({path: edited(gold, title_only)}))

    path, gold, start, task = gold_and_input("impress-notes-1")
    assert task.check(Files({path: gold})) is None and "slides' texts" in task.check(Files({path: start}))
    deck = pptx.Presentation(io.BytesIO(gold))
    (index, note), *_ = [
        (i, s.notes_slide.notes_text_frame.text) for i, s in enumerate(deck.slides) if s.has_notes_slide
    ]

    def on_the_slide(deck):  # the notes' text in a text box on the slide, not in its notes
        slide = deck.slides[index]
        slide.notes_slide.notes_text_frame.text = ""
        box = slide.shapes.add_textbox(0, 0, 100, 100)
        box.text_frame.text = note

    def wrong_slide(deck):
        deck.slides[index].notes_slide.notes_text_frame.text = ""
        deck.slides[(index + 1) % len(deck.slides)].notes_slide.notes_text_frame.text = note

    assert "slides' texts" in task.check(Files({path: edited(gold, on_the_slide)}))
    assert "slides' texts" in task.check(Files({path: edited(gold, wrong_slide)}))


def text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text is ``lines`` (Helvetica, one line each), written by hand: no PDF writer needed."""
    stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        " /Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    return out + f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


def test_pdf_export_gold_passes_and_the_hacks_fail():
    from PIL import Image

    spec, files = generators.generate("writer", "pdf", 2)
    task, path = apps_catalog()["writer-pdf-2"], spec["evaluator"]["result"][0]["path"]
    document = files[spec["evaluator"]["expected"][0]["path"]]
    texts = [p.text for p in docx.Document(io.BytesIO(document)).paragraphs]
    assert task.check(Files({path: text_pdf(texts)})) is None
    # The export a PDF of the same text makes is the gold too (a PDF as the expected file).
    assert metrics.compare_pdf_text(text_pdf(texts), text_pdf(texts[:1] + texts[1:])) is None
    assert "not exported" in task.check(Files({}))
    assert "not exported" in task.check(Files({path.replace(".pdf", ".docx.pdf"): text_pdf(texts)}))
    # The document renamed to .pdf; a paragraph missing; a paragraph more; the page as a picture; a damaged file.
    assert "not a PDF" in task.check(Files({path: document}))
    assert "PDF's text" in task.check(Files({path: text_pdf(texts[:-1])}))
    assert "PDF's text" in task.check(Files({path: text_pdf([*texts, "Draft"])}))
    picture = io.BytesIO()
    Image.new("RGB", (200, 100), "white").save(picture, "PDF")
    assert "PDF's text" in task.check(Files({path: picture.getvalue()}))
    assert "could not be read" in task.check(Files({path: text_pdf(texts)[:60]}))
    # A paragraph broken over two lines of the page is still the paragraph.
    words = texts[1].split(" ")
    broken = [texts[0], " ".join(words[:2]), " ".join(words[2:]), *texts[2:]]
    assert task.check(Files({path: text_pdf(broken)})) is None


def test_a_pdf_of_too_many_pages_is_refused(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_PDF_PAGES", 0)
    assert "over 0" in metrics.compare_pdf_text(text_pdf(["x"]), text_pdf(["x"]))
