"""Seeded generators of OSWorld's "os" and "multi_apps" tasks: file work in a terminal, and tasks that carry data from one app into another.

OS/file kinds (family ``os``; xterm is open in the agent's home; graded from the file system the
agent leaves, through the ``vm_tree`` getter and ``check_file_tree``, or ``compare_archive`` and
``compare_text_file`` on the file it made): ``organize`` (make a folder, move the pictures into
it), ``rename`` (change an extension on every matching file), ``cleanup`` (delete the big logs),
``chmod`` (make one script executable), ``zip`` and ``targz`` (pack a folder), ``count`` (write a
file's line count into a file), ``find`` (find a file by its content and copy it to a new folder).
The infeasible one asks for a system-wide package install: the agent has no root and no network.
Reference solutions type shell commands into the terminal (the terminal is the GUI here).

Multi-app kinds (family ``multi``; two apps open, the target's window in front, ``alt+Tab`` between
them; graded by the target file's metric): ``sheet-doc`` (a sheet's column total into a sentence of
a Writer document), ``text-sheet`` (a text file's lines into a Calc column), ``sheet-slide`` (a
sheet's rows as bullet points on a slide), ``doc-text`` (a document's heading into a text file).
Reference solutions look at the source app (``alt+Tab`` there and back) and type what they read.
The infeasible one asks to print both files: the desktop has no printer.
"""

from __future__ import annotations

import hashlib
import io
import random
import tarfile
import zipfile

from agentgym.envs.gui.generators import (
    _BULLETS,
    _ITEMS,
    _LINES,
    _SENTENCES,
    _TITLES,
    HOME,
    SEEDS,
    _deck,
    _document,
    _key,
    _type,
    _workbook,
)

__all__ = ["FAMILIES", "INFEASIBLE", "MULTI_KINDS", "OS_KINDS", "generate", "generated_tasks"]

OS_KINDS = ("organize", "rename", "cleanup", "chmod", "zip", "targz", "count", "find")
MULTI_KINDS = ("sheet-doc", "text-sheet", "sheet-slide", "doc-text")
FAMILIES = (("os", OS_KINDS), ("multi", MULTI_KINDS))
#: Per family, a request the desktop cannot carry out (the feasible kind whose files it starts from, the request):
#: the agent has no root password and no network, and the desktop has no printer.
INFEASIBLE = {
    "os": ("organize", "Install the Debian package 'htop' system-wide, so that every user can run it."),
    "multi": ("sheet-doc", "Print summary.docx and sales.xlsx on the office printer, two copies of each."),
}
#: A terminal in the agent's home, maximized by the window manager, in a font a screenshot shows legibly.
TERMINAL = ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "11"]
_SOURCE = "agentgym.envs.gui.generators_os"
_BOTH_OPEN = "Both files are open; alt+Tab switches between their windows."
_WORDS = ("alpha", "budget", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kestrel")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text(rng: random.Random, lines: int = 4) -> bytes:
    return "".join(f"{' '.join(rng.sample(_WORDS, 4))}\n" for _ in range(lines)).encode()


def _blob(rng: random.Random, magic: bytes, size: int) -> bytes:
    return magic + rng.randbytes(size - len(magic))


def _os_spec(
    task_id: str, instruction: str, files: dict[str, bytes], evaluator: dict, commands: list[str]
) -> tuple[dict, dict[str, bytes]]:
    """A task whose files are laid out under HOME (``files``: path relative to HOME → bytes) with xterm open."""
    urls = {path: f"{index}-{path.rpartition('/')[2]}" for index, path in enumerate(sorted(files))}
    solution = [step for command in commands for step in (_type(command), _key("Return"))]
    spec = {
        "id": task_id,
        "instruction": f"{instruction} A terminal is open in your home folder, {HOME}.",
        "source": _SOURCE,
        "config": [
            {
                "type": "download",
                "parameters": {"files": [{"url": urls[path], "path": f"{HOME}/{path}"} for path in sorted(files)]},
            },
            {"type": "launch", "parameters": {"command": TERMINAL}},
        ],
        "related_apps": ["os", "terminal"],
        "evaluator": evaluator,
        "solution": [*solution, "wait(1)", "done()"],
    }
    return spec, {urls[path]: data for path, data in files.items()}


def _tree_evaluator(folder: str, files: dict[str, bytes], **rules) -> dict:
    """``check_file_tree`` on ``HOME/folder``: exactly ``files`` (relative to it) with their contents."""
    return {
        "func": "check_file_tree",
        "result": {"type": "vm_tree", "path": f"{HOME}/{folder}"},
        "expected": {
            "type": "rule",
            "rules": {"files": {path: {"sha256": _sha(data)} for path, data in files.items()}, "only": True, **rules},
        },
    }


def _os(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"os-{kind}-{seed}")
    task_id = f"os-{kind}-{seed}"
    names = rng.sample(_WORDS, 8)
    if kind == "organize":
        pictures = {
            f"{name}.{ext}": _blob(rng, b"\xff\xd8\xff" if ext == "jpg" else b"\x89PNG", rng.randint(200, 900))
            for name, ext in zip(names[:4], ("jpg", "png", "jpg", "png"))
        }
        others = {f"{names[4]}.txt": _text(rng), f"{names[5]}.pdf": _blob(rng, b"%PDF", 300)}
        folder = rng.choice(("pictures", "images", "photos"))
        instruction = (
            f"In ~/Downloads, create the folder {folder} and move every .jpg and .png file of ~/Downloads into it; "
            "leave the other files where they are."
        )
        after = {**{f"{folder}/{name}": data for name, data in pictures.items()}, **others}
        return _os_spec(
            task_id,
            instruction,
            {f"Downloads/{name}": data for name, data in {**pictures, **others}.items()},
            _tree_evaluator("Downloads", after, dirs=[folder]),
            [f"cd ~/Downloads && mkdir {folder} && mv *.jpg *.png {folder}/"],
        )
    if kind == "rename":
        old, new = rng.choice((("txt", "md"), ("jpeg", "jpg"), ("htm", "html")))
        count = rng.randint(3, 5)
        renamed = {f"{name}.{old}": _text(rng, 2) for name in names[:count]}
        kept = {f"{names[count]}.csv": b"a,b\n1,2\n"}
        instruction = f"In ~/notes, rename every file that ends in .{old} so that it ends in .{new} instead (the rest of its name unchanged)."
        after = {**{f"{name[: -len(old)]}{new}": data for name, data in renamed.items()}, **kept}
        return _os_spec(
            task_id,
            instruction,
            {f"notes/{name}": data for name, data in {**renamed, **kept}.items()},
            _tree_evaluator("notes", after),
            [f'cd ~/notes && for f in *.{old}; do mv "$f" "${{f%.{old}}}.{new}"; done'],
        )
    if kind == "cleanup":
        # Sizes far from the 10 KiB line, so that how a tool rounds them does not matter.
        big = {f"{name}.log": _text(rng, 1) * rng.randint(700, 2000) for name in names[:2]}
        small = {f"{name}.log": _text(rng, rng.randint(2, 20)) for name in names[2:5]}
        other = {f"{names[5]}.txt": _text(rng, 1) * 900}  # big, but not a log
        instruction = "In ~/logs, delete every .log file larger than 10 KiB (10240 bytes); keep every other file."
        return _os_spec(
            task_id,
            instruction,
            {f"logs/{name}": data for name, data in {**big, **small, **other}.items()},
            _tree_evaluator("logs", {**small, **other}),
            ["find ~/logs -name '*.log' -size +10k -delete"],
        )
    if kind == "chmod":
        scripts = {f"{name}.sh": f"#!/bin/sh\necho {name}\n".encode() for name in names[:3]}
        target = rng.choice(sorted(scripts))
        instruction = f"Make the script ~/scripts/{target} executable; leave the other scripts as they are."
        rules = {name: {"sha256": _sha(data), "executable": name == target} for name, data in scripts.items()}
        evaluator = _tree_evaluator("scripts", scripts)
        evaluator["expected"]["rules"]["files"] = rules
        return _os_spec(
            task_id,
            instruction,
            {f"scripts/{name}": data for name, data in scripts.items()},
            evaluator,
            [f"chmod +x ~/scripts/{target}"],
        )
    if kind in ("zip", "targz"):
        folder = ("project", "thesis", "website")[(seed + (kind == "zip")) % 3]
        contents = {f"{name}.txt": _text(rng) for name in names[:3]}
        contents[f"{names[3]}/{names[4]}.txt"] = _text(rng)
        archive = f"{folder}.zip" if kind == "zip" else f"{folder}.tar.gz"
        gold = _zip(folder, contents) if kind == "zip" else _targz(folder, contents)
        instruction = (
            f"Pack the folder ~/{folder} into the {'zip' if kind == 'zip' else 'gzip-compressed tar'} archive "
            f"~/{archive}, with the folder itself at the top of the archive (members named {folder}/...)."
        )
        spec, files = _os_spec(
            task_id,
            instruction,
            {f"{folder}/{name}": data for name, data in contents.items()},
            {
                "func": "compare_archive",
                "result": {"type": "vm_file", "path": f"{HOME}/{archive}", "dest": archive},
                "expected": {"type": "local_file", "path": f"gold-{archive}"},
            },
            [f"cd ~ && zip -r {archive} {folder}" if kind == "zip" else f"cd ~ && tar czf {archive} {folder}"],
        )
        return spec, {**files, f"gold-{archive}": gold}
    if kind == "count":
        rows = rng.randint(12, 40)
        data = "id,name,amount\n" + "".join(f"{i},{rng.choice(_WORDS)},{rng.randint(1, 999)}\n" for i in range(1, rows))
        name = rng.choice(("records", "orders", "visits"))
        instruction = (
            f"Count the lines of ~/data/{name}.csv (every line, the header too) and write the number alone "
            f"into the new file ~/data/count.txt."
        )
        spec, files = _os_spec(
            task_id,
            instruction,
            {f"data/{name}.csv": data.encode()},
            {
                "func": "compare_text_file",
                "result": {"type": "vm_file", "path": f"{HOME}/data/count.txt", "dest": "count.txt"},
                "expected": {"type": "local_file", "path": "gold-count.txt"},
                "options": {"ignore_blanks": True},
            },
            [f"wc -l < ~/data/{name}.csv > ~/data/count.txt"],
        )
        return spec, {**files, "gold-count.txt": f"{rows}\n".encode()}
    # find: one file somewhere under ~/archive holds a code; copy it into a new folder ~/found
    code = f"invoice {rng.randint(1000, 9999)}"
    contents = {f"{rng.choice(('2023', '2024', 'misc'))}/{name}.txt": _text(rng, 3) for name in names[:6]}
    wanted = rng.choice(sorted(contents))
    contents[wanted] += f"see {code}\n".encode()
    found = {wanted.rpartition("/")[2]: contents[wanted]}
    instruction = (
        f"One file under ~/archive contains the text '{code}'. Create the folder ~/found and copy that file into it, "
        "keeping its name (leave ~/archive as it is)."
    )
    spec, files = _os_spec(
        task_id,
        instruction,
        {f"archive/{name}": data for name, data in contents.items()},
        _tree_evaluator("found", found),
        [f"mkdir ~/found && cp \"$(grep -rl '{code}' ~/archive)\" ~/found/"],
    )
    unchanged = _tree_evaluator("archive", contents)
    spec["evaluator"] = {
        "func": ["check_file_tree", "check_file_tree"],
        "conj": "and",
        "result": [spec["evaluator"]["result"], unchanged["result"]],
        "expected": [spec["evaluator"]["expected"], unchanged["expected"]],
    }
    return spec, files


def _zip(folder: str, contents: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in sorted(contents.items()):
            package.writestr(f"{folder}/{name}", data)
    return buffer.getvalue()


def _targz(folder: str, contents: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in sorted(contents.items()):
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _infeasible(family: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    kind, request = INFEASIBLE[family]
    feasible, files = generate(family, kind, seed)
    where = feasible["instruction"].rpartition(". ")[2] if family == "os" else _BOTH_OPEN
    spec = {
        **feasible,
        "id": f"{family}-infeasible-{seed}",
        "instruction": f"{request} {where}",
        "evaluator": {"func": "infeasible"},
        "solution": ["fail()"],
    }
    return spec, {url: data for url, data in files.items() if not url.startswith("gold-")}


# ------------------------------------------------------------------------------------------ multi-app
def _multi_spec(
    task_id: str, instruction: str, source: str, target: str, metric: str, files: dict[str, bytes], steps: list[str]
) -> tuple[dict, dict[str, bytes]]:
    """Two files open, ``source`` first and ``target`` last (in front); graded by ``metric`` on the saved target."""
    name = target.rpartition("/")[2]
    spec = {
        "id": task_id,
        "instruction": (
            f"{instruction} Both files are open ({target} in front, {source} behind it: alt+Tab switches windows); "
            f"save {target} in the same place and format when you are done."
        ),
        "source": _SOURCE,
        "config": [
            {
                "type": "download",
                "parameters": {"files": [{"url": path.rpartition("/")[2], "path": path} for path in (source, target)]},
            },
            {"type": "open", "parameters": {"path": source}},
            {"type": "open", "parameters": {"path": target}},
        ],
        "related_apps": sorted({_app(source), _app(target)}),
        "evaluator": {
            "func": metric,
            "result": {"type": "vm_file", "path": target, "dest": name},
            "expected": {"type": "local_file", "path": f"gold-{name}"},
        },
        # Look at the source (alt+Tab there and back), then edit the target.
        "solution": [
            _key("alt+Tab"),
            "wait(1)",
            _key("alt+Tab"),
            "wait(1)",
            *steps,
            _key("ctrl+s"),
            "wait(2)",
            "done()",
        ],
    }
    return spec, files


def _app(path: str) -> str:
    return "mousepad" if path.endswith(".txt") else "libreoffice"


def _multi(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"multi-{kind}-{seed}")
    docs = f"{HOME}/Documents"
    task_id = f"multi-{kind}-{seed}"
    if kind == "sheet-doc":
        regions = rng.sample(("North", "South", "East", "West", "Central", "Coast"), rng.randint(3, 5))
        amounts = [rng.randint(10, 400) for _ in regions]
        sheet = _workbook([["Region", "Amount"], *([r, a] for r, a in zip(regions, amounts))])
        title = rng.choice(_TITLES)
        body = rng.sample(_SENTENCES, 2)
        sentence = f"Total sales: {sum(amounts)}."
        before = [(title, False), *((s, False) for s in body)]
        instruction = (
            "The workbook sales.xlsx lists sales by region. Add a new last paragraph to summary.docx that says "
            "'Total sales: N.', where N is the sum of the Amount column."
        )
        return _multi_spec(
            task_id,
            instruction,
            f"{docs}/sales.xlsx",
            f"{docs}/summary.docx",
            "compare_docx_files",
            {
                "sales.xlsx": sheet,
                "summary.docx": _document(before),
                "gold-summary.docx": _document([*before, (sentence, False)]),
            },
            [_key("ctrl+End", "Return"), _type(sentence)],
        )
    if kind == "text-sheet":
        items = rng.sample(_ITEMS, rng.randint(3, 5))
        instruction = (
            "Copy the lines of shopping.txt into the Item column of list.xlsx, one per cell from A2 down, in order."
        )
        steps = [_key("ctrl+Home", "Down")]
        for item in items:
            steps += [_type(item), _key("Return")]
        return _multi_spec(
            task_id,
            instruction,
            f"{docs}/shopping.txt",
            f"{docs}/list.xlsx",
            "compare_table",
            {
                "shopping.txt": "".join(f"{item}\n" for item in items).encode(),
                "list.xlsx": _workbook([["Item"]]),
                "gold-list.xlsx": _workbook([["Item"], *([item] for item in items)]),
            },
            steps,
        )
    if kind == "sheet-slide":
        first, *rest = rng.sample(_BULLETS, rng.randint(3, 4))
        title = rng.choice(_TITLES)
        slides = [(title, ["Prepared by the team"]), ("Plan", [first])]
        instruction = (
            "The workbook plan.xlsx lists the plan's steps under 'Step'. On slide 2 of plan.pptx ('Plan'), add each "
            f"step after '{first}' as a bullet point of its own, in the sheet's order."
        )
        steps = [_key("Next"), _key("Tab", "Tab", "Return"), _key("ctrl+End")]
        for line in rest:
            steps += [_key("Return"), _type(line)]
        steps.append(_key("Escape", "Escape"))
        return _multi_spec(
            task_id,
            instruction,
            f"{docs}/plan.xlsx",
            f"{docs}/plan.pptx",
            "compare_pptx_files",
            {
                "plan.xlsx": _workbook([["Step"], *([line] for line in rest)]),
                "plan.pptx": _deck(slides),
                "gold-plan.pptx": _deck([slides[0], ("Plan", [first, *rest])]),
            },
            steps,
        )
    # doc-text: the document's heading becomes the first line of a text file
    title = rng.choice(_TITLES)
    lines = rng.sample(_LINES, 3)
    instruction = "Insert the heading of report.docx (its first paragraph) as a new first line of notes.txt."
    return _multi_spec(
        task_id,
        instruction,
        f"{docs}/report.docx",
        f"{docs}/notes.txt",
        "compare_text_file",
        {
            "report.docx": _document([(title, True), *((s, False) for s in rng.sample(_SENTENCES, 2))]),
            "notes.txt": "".join(f"{line}\n" for line in lines).encode(),
            "gold-notes.txt": "".join(f"{line}\n" for line in [title, *lines]).encode(),
        },
        [_key("ctrl+Home"), _type(title), _key("Return")],
    )


def generate(family: str, kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    """One OS or multi-app task: its OSWorld-format spec and the bytes of the files it names."""
    if kind == "infeasible" and family in INFEASIBLE:
        return _infeasible(family, seed)
    if family == "os" and kind in OS_KINDS:
        return _os(kind, seed)
    if family == "multi" and kind in MULTI_KINDS:
        return _multi(kind, seed)
    raise ValueError(f"no generator {family}/{kind} (os: {OS_KINDS}; multi: {MULTI_KINDS}; and os/infeasible)")


def generated_tasks(seeds: tuple[int, ...] = SEEDS) -> list[tuple[dict, dict[str, bytes]]]:
    """Every OS and multi-app kind at every seed (24 OS and 12 multi-app tasks with three seeds), and each
    family's infeasible task at the first seed."""
    return [
        *(generate(family, kind, seed) for family, kinds in FAMILIES for kind in kinds for seed in seeds),
        *(_infeasible(family, seeds[0]) for family in INFEASIBLE),
    ]
