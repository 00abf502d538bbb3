"""Seeded generators of OSWorld's "chrome" tasks: Chromium on local pages, graded from the profile files it leaves.

Chromium (Debian's, in the desktop-apps image) starts as the agent's user on ``file://`` pages that the
task's set-up lays out under ``~/pages`` (made here from a seed), with its profile in the agent's home
(:data:`PROFILE`; a task that needs bookmarks to start from lays a ``Bookmarks`` file there first). The
container has no network: every page is local, and the Web Store, sign-in and sync cannot be reached.
Downloads are refused by managed policy (:data:`agentgym.sandbox.desktop.CHROMIUM_POLICIES`).

Kinds (family ``chrome``): ``bookmark`` the open page under a given name (``ctrl+d``), ``rename`` a
bookmark (``ctrl+d`` on its page opens its editor), ``delete`` a bookmark and keep the others, set the
default ``font`` size (``chrome://settings/fonts``, its slider from the keyboard), delete the browsing
``history`` (``ctrl+shift+Delete``), turn on Do Not Track (``dnt``, ``chrome://settings/cookies``) and open a
given page at ``startup`` (``chrome://settings/onStartup``). Settings pages are reached by typing their
address into the omnibox and moved through with ``Tab``, arrow keys and ``space``: each page opens with the
focus at a fixed place (the fonts and cookies pages on their back arrow, the startup page on the search box). The infeasible ones (:data:`INFEASIBLE`) need the network (an
extension from the Web Store; sign-in and sync, which policy also turns off): ``fail()`` is right.

Grading reads Chromium's own files: ``Bookmarks`` (JSON, with the checksum Chromium writes), ``Preferences``
(JSON) and ``History`` (SQLite). Chromium writes them lazily (bookmarks a few seconds after a change,
preferences within ten, history on its own timer), so each task's ``postconfig`` (OSWorld's: steps run
before the evaluator) closes the browser gracefully first (:data:`CLOSE`: its windows closed as their close
buttons do, which runs its normal shutdown and writes every pending file; then a wait until no Chromium
process is left), and the getters read the files after that: what the evaluator sees is what Chromium
itself would load next.
"""

from __future__ import annotations

import html
import json
import random
from collections.abc import Sequence

from agentgym.envs.gui.generators import HOME, SEEDS, _key, _type
from agentgym.envs.gui.osworld import CHROMIUM_PROFILE

__all__ = ["CHROME_KINDS", "CHROMIUM", "CLOSE", "INFEASIBLE", "PAGES", "PROFILE", "generate", "generated_tasks"]

CHROME_KINDS = ("bookmark", "rename", "delete", "font", "history", "dnt", "startup")
#: The profile (user data) folder; its ``Default`` profile is :data:`agentgym.envs.gui.osworld.CHROMIUM_PROFILE`.
PROFILE = CHROMIUM_PROFILE.rpartition("/")[0]
PAGES = f"{HOME}/pages"
#: Chromium as the tasks launch it: the profile in the agent's home; ``--no-sandbox`` because the container (no
#: capabilities, Docker's seccomp filter: no user namespaces) is the sandbox, and ``--test-type`` to drop the
#: warning bar that flag brings; ``--force-renderer-accessibility``, without which the pages' content does not reach
#: AT-SPI; no first-run, default-browser or search-engine-choice prompts; no GPU, no /dev/shm (Docker's is 64 MiB),
#: no background networking or component updates (there is no network).
CHROMIUM = [
    "chromium",
    f"--user-data-dir={PROFILE}",
    "--no-sandbox",
    "--test-type",
    "--force-renderer-accessibility",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-search-engine-choice-screen",
    "--password-store=basic",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--start-maximized",
]
#: The graceful close before grading: every Chromium window is asked to close (``wmctrl -c``, as its close button
#: does; with background mode off by policy the browser then exits), which runs Chromium's normal shutdown: the
#: bookmark, preference and history stores write what they hold. (SIGTERM is not that: Chromium takes it as the end
#: of the session and exits at once, and a bookmark removed a second before was seen missing from the file.) Then a
#: wait until no live Chromium process is left (its helper reaps nothing: exited ones stay as zombies), 20 s at most:
#: one that hangs (say on a page the agent made) is killed, and what it had not written is not graded. It exits 0
#: also when the agent had closed Chromium already.
CLOSE = [
    "sh",
    "-c",
    "live() { ps -eo stat=,comm= | awk '$2 == \"chromium\" && $1 !~ /^Z/' | grep -q .; }; i=0; "
    "while live && [ $i -lt 100 ]; do "
    "for w in $(wmctrl -lx | awk 'tolower($3) ~ /chromium/ {print $1}'); do wmctrl -i -c $w; done; "
    "sleep 0.2; i=$((i + 1)); done; live && pkill -KILL -x chromium; true",
]
#: Requests Chromium cannot carry out here (the kind whose set-up they start from, then the requests): the desktop
#: has no network, so the Web Store cannot be reached, and sign-in and sync are off (and need Google's servers).
INFEASIBLE = (
    "bookmark",
    "Install the 'uBlock Origin' extension in Chromium from the Chrome Web Store.",
    "Sign in to Chromium with the Google account kim.lee@example.com and turn on sync for bookmarks.",
)
_SOURCE = "agentgym.envs.gui.generators_chrome"
_TOPICS = (
    ("Lentil soup", "A warming soup of red lentils, carrots and cumin, ready in forty minutes."),
    ("Cedar Ridge trail", "A six-kilometre loop through old cedars with two lookouts over the lake."),
    ("Tide tables", "High and low water for the harbour, with the times of the spring tides."),
    ("Bike repair basics", "How to fix a flat tyre, adjust the brakes and oil the chain at home."),
    ("Night sky guide", "Which planets and constellations to look for this month, and when."),
    ("Sourdough starter", "Feeding a starter of flour and water until it doubles in four hours."),
    ("Train timetable", "Departures from the central station to the airport, every twenty minutes."),
    ("Herb garden", "Basil, thyme and mint in pots on a sunny windowsill, watered twice a week."),
    ("Chess openings", "The Italian game, the Sicilian defence and the queen's gambit, move by move."),
    ("Museum hours", "Opening times of the city museum, free entry on the first Sunday of the month."),
)
_NAMES = ("Weekend reading", "Try this", "For later", "Saved page", "Must read", "Reference", "Favourite")
#: Chromium's font-size slider (chrome://settings/fonts) stops at these sizes, from 16 (the default) by arrow keys.
FONT_SIZES = (9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 40, 44, 48, 56, 64, 72)
_DEFAULT_FONT_SIZE = 16


def _slug(title: str) -> str:
    return "-".join(title.lower().split())


def _page(title: str, text: str, number: int) -> bytes:
    """A page with a heading, a paragraph and a reference number (which makes each task's pages its own)."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n<p>{html.escape(text)}</p>\n<p>Reference {number}.</p></body></html>\n"
    ).encode()


def _url(title: str) -> str:
    return f"file://{PAGES}/{_slug(title)}.html"


def bookmarks_file(bar: list[tuple[str, str]]) -> bytes:
    """A ``Bookmarks`` file with ``bar``'s (name, URL) pairs on the bookmarks bar and the other roots empty, as a
    task's set-up lays it out before Chromium's first start (without a checksum: Chromium loads it and writes its own)."""
    roots = {
        "bookmark_bar": {
            "type": "folder",
            "id": "1",
            "name": "Bookmarks bar",
            "children": [
                {"type": "url", "id": str(10 + index), "name": name, "url": url}
                for index, (name, url) in enumerate(bar)
            ],
        },
        "other": {"type": "folder", "id": "2", "name": "Other bookmarks", "children": []},
        "synced": {"type": "folder", "id": "3", "name": "Mobile bookmarks", "children": []},
    }
    return json.dumps({"roots": roots, "version": 1}, indent=1).encode()


def _open_settings(page: str) -> list[str]:
    """The steps that open Chromium's settings page ``page`` from the omnibox and let it render."""
    return [_key("ctrl+l"), _type(f"chrome://settings/{page}"), _key("Return"), "wait(2)"]


def _spec(
    task_id: str,
    instruction: str,
    pages: list[tuple[str, str]],
    evaluator: dict,
    steps: list[str],
    bookmarks: list[tuple[str, str]] | None = None,
) -> tuple[dict, dict[str, bytes]]:
    """Chromium open on ``pages`` (one tab each), with ``bookmarks`` on the bar where given."""
    rng = random.Random(task_id)
    files = {f"{_slug(title)}.html": _page(title, text, rng.randrange(10**6, 10**7)) for title, text in pages}
    entries = [{"url": name, "path": f"{PAGES}/{name}"} for name in files]
    if bookmarks is not None:
        files["Bookmarks"] = bookmarks_file(bookmarks)
        entries.append({"url": "Bookmarks", "path": f"{CHROMIUM_PROFILE}/Bookmarks"})
    urls = [_url(title) for title, _ in pages]
    spec = {
        "id": task_id,
        "instruction": f"{instruction} Chromium is open (the desktop has no network: the pages are local files).",
        "source": _SOURCE,
        "config": [
            {"type": "download", "parameters": {"files": entries}},
            # The first page's tab is the active one: the task starts once its title is the window's.
            {"type": "launch", "parameters": {"command": [*CHROMIUM, *urls], "ready_title": pages[0][0]}},
        ],
        "related_apps": ["chrome"],
        "evaluator": {"postconfig": [{"type": "execute", "parameters": {"command": CLOSE}}], **evaluator},
        "solution": [*steps, "wait(1)", "done()"],
    }
    return spec, files


def _bookmarks_evaluator(present: list[tuple[str, str]], absent: Sequence[str] = ()) -> dict:
    return {
        "func": "check_bookmarks",
        "result": {"type": "bookmarks"},
        "expected": {
            "type": "rule",
            "rules": {"present": [{"name": name, "url": url} for name, url in present], "absent": list(absent)},
        },
    }


def _chrome(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    rng = random.Random(f"chrome-{kind}-{seed}")
    task_id = f"chrome-{kind}-{seed}"
    topics = rng.sample(_TOPICS, 4)
    page, others = topics[0], topics[1:]
    url = _url(page[0])
    kept = [(title, _url(title)) for title, _ in others[:2]]
    if kind == "bookmark":
        name = rng.choice(_NAMES)
        instruction = f"Bookmark the page that is open ({url}) under the name '{name}'; keep the other bookmarks."
        steps = [_key("ctrl+d"), "wait(1)", _type(name), _key("Return")]
        return _spec(task_id, instruction, [page], _bookmarks_evaluator([(name, url), *kept]), steps, kept)
    if kind == "rename":
        old, new = rng.sample(_NAMES, 2)
        bar = [kept[0], (old, url), kept[1]]
        instruction = f"Rename the bookmark '{old}' (it points to the open page, {url}) to '{new}'."
        steps = [_key("ctrl+d"), "wait(1)", _type(new), _key("Return")]
        return _spec(task_id, instruction, [page], _bookmarks_evaluator([(new, url), *kept]), steps, bar)
    if kind == "delete":
        name = rng.choice(_NAMES)
        bar = [kept[0], (name, url), kept[1]]
        instruction = f"Delete the bookmark '{name}' (it points to the open page, {url}); keep the other bookmarks."
        # ctrl+d on a bookmarked page opens its editor: name, folder, then the Remove button.
        steps = [_key("ctrl+d"), "wait(1)", _key("Tab", "Tab", "Return")]
        return _spec(task_id, instruction, [page], _bookmarks_evaluator(kept, [url]), steps, bar)
    if kind == "font":
        size = rng.choice([size for size in (12, 14, 18, 20, 22, 24) if size != _DEFAULT_FONT_SIZE])
        moves = FONT_SIZES.index(size) - FONT_SIZES.index(_DEFAULT_FONT_SIZE)
        instruction = f"Change Chromium's default font size (Settings, Appearance, Customize fonts) to {size}."
        # The fonts page opens with the focus on its back arrow; Tab reaches the font-size slider.
        steps = [
            *_open_settings("fonts"),
            _key("Tab"),
            _key(*["Right" if moves > 0 else "Left"] * abs(moves)),
        ]
        evaluator = {
            "func": "check_font_size",
            "result": {"type": "chrome_font_size"},
            "expected": {"type": "rule", "rules": {"type": "value", "value": size}},
        }
        return _spec(task_id, instruction, [page], evaluator, steps)
    if kind == "dnt":
        instruction = "Turn on Chromium's 'Do Not Track' setting (send a Do Not Track request with browsing traffic)."
        # The cookies page opens with the focus on its back arrow: seven Tabs (past the help and filter buttons, the
        # cookie radio group, its expand button and the related-sites toggle) reach the Do Not Track toggle, whose
        # confirmation dialog opens with the focus on Confirm (Chromium 150's page, as the image has it).
        steps = [
            *_open_settings("cookies"),
            _key(*["Tab"] * 7, "space"),
            "wait(1)",
            _key("Return"),
        ]
        evaluator = {
            "func": "exact_match",
            "result": {"type": "enable_do_not_track"},
            "expected": {"type": "rule", "rules": {"expected": "true"}},
        }
        return _spec(task_id, instruction, [page], evaluator, steps)
    if kind == "startup":
        target = _url(others[0][0])
        instruction = f"Make Chromium open the page {target} when it starts (that page only)."
        # The startup page opens with the focus on the settings search box: Tab to the side menu, Tab to the "browser
        # is managed" link (the image's policies), Tab to the radio group, Down Down to "Open a specific page or set of
        # pages", Tab to "Add a new page", Return: its dialog.
        steps = [
            *_open_settings("onStartup"),
            _key("Tab", "Tab", "Tab", "Down", "Down"),
            "wait(1)",
            _key("Tab", "Return"),
            "wait(1)",
            _key("Tab"),  # Chromium 150's dialog opens with nothing focused: Tab to its URL field
            _type(target),
            _key("Return"),
        ]
        evaluator = {
            "func": "check_chrome_prefs",
            "result": {"type": "chrome_preferences"},
            "expected": {
                "type": "rule",
                "rules": {"prefs": {"session.restore_on_startup": 4, "session.startup_urls": [target]}},
            },
        }
        return _spec(task_id, instruction, [page, others[0]], evaluator, steps)
    # history: the pages were visited at set-up (one tab each); delete all browsing history.
    visited = topics[: rng.randint(2, 3)]
    instruction = "Delete Chromium's browsing history (every page visited so far)."
    # The dialog opens with its focus on Cancel; Tab moves it to "Delete from this device" (the last hour: the
    # visits are minutes old).
    steps = [_key("ctrl+shift+Delete"), "wait(2)", _key("Tab", "Return"), "wait(2)"]
    evaluator = {
        "func": "check_history_deleted",
        "result": {"type": "history"},
        "expected": {"type": "rule", "rules": {"type": "keywords", "keywords": [_url(t) for t, _ in visited]}},
    }
    return _spec(task_id, instruction, visited, evaluator, steps)


def _infeasible(number: int) -> tuple[dict, dict[str, bytes]]:
    kind, *requests = INFEASIBLE
    if not 0 <= number < len(requests):
        raise ValueError(f"chrome has {len(requests)} infeasible task(s), numbered from 0, not {number}")
    feasible, files = _chrome(kind, number)
    spec = {
        **feasible,
        "id": f"chrome-infeasible-{number}",
        "instruction": f"{requests[number]} Chromium is open (the desktop has no network: the pages are local files).",
        "evaluator": {"func": "infeasible"},
        "solution": ["fail()"],
    }
    return spec, files


def generate(kind: str, seed: int) -> tuple[dict, dict[str, bytes]]:
    """One Chromium task: its OSWorld-format spec and the bytes of the files it lays out (pages, a Bookmarks file)."""
    if kind == "infeasible":
        return _infeasible(seed)
    if kind in CHROME_KINDS:
        return _chrome(kind, seed)
    raise ValueError(f"no generator chrome/{kind} (chrome: {CHROME_KINDS}; and chrome/infeasible)")


def generated_tasks(seeds: tuple[int, ...] = SEEDS) -> list[tuple[dict, dict[str, bytes]]]:
    """Every Chromium kind at every seed (21 tasks with three seeds) and the infeasible requests (2)."""
    return [
        *(generate(kind, seed) for kind in CHROME_KINDS for seed in seeds),
        *(_infeasible(number) for number in range(len(INFEASIBLE) - 1)),
    ]
