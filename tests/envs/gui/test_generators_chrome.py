"""The Chromium tasks without Docker: the catalogue, the getters on a profile, and each metric's hack suite.

Bookmarks checksums are checked against a file Chromium 156 wrote (data/chromium-156-Bookmarks.json: a seeded
bar with a folder, and a bookmark added through ctrl+d under a name with non-ASCII letters); History databases are
made with SQLite in Chromium's ``urls`` schema (the metric reads that table only); the GUI solves through the real
Chromium are in test_real_apps.py.
"""

import json
import sqlite3
from pathlib import Path

import pytest

from agentgym.envs.gui import generators_chrome, metrics
from agentgym.envs.gui.env import apps_catalog
from agentgym.envs.gui.generators import generated_tasks
from agentgym.envs.gui.osworld import CHROMIUM_PROFILE, load_task

DATA = Path(__file__).with_name("data")
URLS_SCHEMA = (
    "CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT, url LONGVARCHAR, title LONGVARCHAR, "
    "visit_count INTEGER DEFAULT 0 NOT NULL, typed_count INTEGER DEFAULT 0 NOT NULL, "
    "last_visit_time INTEGER NOT NULL, hidden INTEGER DEFAULT 0 NOT NULL)"
)


def chrome_specs() -> dict[str, tuple[dict, dict[str, bytes]]]:
    return {spec["id"]: (spec, files) for spec, files in generated_tasks() if spec["id"].startswith("chrome-")}


class Profile:
    """An Inspector over a dict of files (path → bytes), standing in for the desktop's."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files

    def read_bytes(self, path: str) -> bytes | None:
        return self.files.get(path)


def written(roots: dict) -> bytes:
    """A Bookmarks file as Chromium writes it (its checksum over ``roots``)."""
    return json.dumps({"checksum": metrics.bookmarks_checksum(roots), "roots": roots, "version": 1}).encode()


def roots_of(bar: list[tuple[str, str]], other: list[tuple[str, str]] = ()) -> dict:
    roots = json.loads(generators_chrome.bookmarks_file(bar))["roots"]
    roots["other"]["children"] = [
        {"type": "url", "id": str(50 + index), "name": name, "url": url} for index, (name, url) in enumerate(other)
    ]
    return roots


def history(tmp_path: Path, urls: list[str], *, wal_urls: list[str] | None = None) -> dict[str, bytes]:
    """A History database with ``urls`` visited; with ``wal_urls``, the table rewritten to those in a write-ahead log
    that is not checkpointed (the files as a running SQLite leaves them)."""
    path = tmp_path / f"History-{len(list(tmp_path.iterdir()))}"
    path.mkdir()
    database = sqlite3.connect(path / "History")
    database.execute(URLS_SCHEMA)
    database.executemany(
        "INSERT INTO urls(url, title, last_visit_time) VALUES (?, ?, ?)", [(url, url, 13400000000) for url in urls]
    )
    database.commit()
    files = {}
    if wal_urls is not None:
        database.execute("PRAGMA journal_mode = WAL")
        database.execute("PRAGMA wal_autocheckpoint = 0")
        database.execute("DELETE FROM urls")
        database.executemany(
            "INSERT INTO urls(url, title, last_visit_time) VALUES (?, ?, 1)", [(u, u) for u in wal_urls]
        )
        database.commit()
        files = {"History": (path / "History").read_bytes(), "History-wal": (path / "History-wal").read_bytes()}
    database.close()
    return files or {"History": (path / "History").read_bytes()}


# ------------------------------------------------------------------------------------------ the catalogue
def test_the_catalogue_has_the_chromium_kinds_and_two_infeasible_tasks():
    specs = chrome_specs()
    assert len(specs) == 23
    catalog = apps_catalog()
    tasks = [catalog[task_id] for task_id in specs]
    assert sum(not task.feasible for task in tasks) == 2
    for task in tasks:
        assert task.app.argv[: len(generators_chrome.CHROMIUM)] == tuple(generators_chrome.CHROMIUM)
        assert "--force-renderer-accessibility" in task.app.argv
        assert task.solution[-1] == ("done()" if task.feasible else "fail()")
        if task.feasible:  # the browser is closed gracefully before the getters read its files
            assert task.postconfig == ({"type": "execute", "command": generators_chrome.CLOSE},)
    assert {spec["evaluator"]["func"] for spec, _ in specs.values()} == {
        "check_bookmarks",
        "check_chrome_prefs",
        "check_font_size",
        "exact_match",
        "check_history_deleted",
        "infeasible",
    }


def test_the_generators_are_seeded():
    assert generators_chrome.generate("rename", 1) == generators_chrome.generate("rename", 1)
    assert generators_chrome.generate("rename", 1)[0] != generators_chrome.generate("rename", 2)[0]
    with pytest.raises(ValueError, match="no generator chrome/tabs"):
        generators_chrome.generate("tabs", 0)


def test_an_unknown_postconfig_step_is_refused():
    spec, files = generators_chrome.generate("font", 0)
    spec["evaluator"]["postconfig"] = [{"type": "download", "parameters": {}}]
    with pytest.raises(ValueError, match="postconfig step 'download'"):
        load_task(spec, files)


# ------------------------------------------------------------------------------------------ bookmarks
def test_the_checksum_is_the_one_chromium_writes():
    """A Bookmarks file Chromium 156 wrote (a folder, a name with non-ASCII letters): our checksum is its."""
    data = json.loads((DATA / "chromium-156-Bookmarks.json").read_bytes())
    assert metrics.bookmarks_checksum(data["roots"]) == data["checksum"]
    data["roots"]["other"]["children"][0]["name"] += "!"
    assert metrics.bookmarks_checksum(data["roots"]) != data["checksum"]


@pytest.mark.parametrize("kind", ["bookmark", "rename", "delete"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bookmark_tasks_pass_the_done_state_and_refuse_the_hacks(kind, seed):
    spec, files = generators_chrome.generate(kind, seed)
    check = load_task(spec, files).check
    rules = spec["evaluator"]["expected"]["rules"]
    seeded = [
        (node["name"], node["url"]) for node in json.loads(files["Bookmarks"])["roots"]["bookmark_bar"]["children"]
    ]
    present = [(want["name"], want["url"]) for want in rules["present"]]
    target_url = spec["config"][1]["parameters"]["command"][-1]
    kept = [pair for pair in seeded if pair[1] != target_url]
    # What Chromium leaves when the task was done: ctrl+d adds to "Other bookmarks", renames and removes in place.
    done = {
        "bookmark": roots_of(seeded, [present[0]]),
        "rename": roots_of([pair if pair[1] != target_url else present[0] for pair in seeded]),
        "delete": roots_of(kept),
    }[kind]

    def verdict(roots_or_bytes) -> str | None:
        data = roots_or_bytes if isinstance(roots_or_bytes, bytes) else written(roots_or_bytes)
        return check(Profile({f"{CHROMIUM_PROFILE}/Bookmarks": data}))

    assert verdict(done) is None
    assert verdict(roots_of(seeded)) is not None  # the untouched start
    assert "no bookmarks file" in check(Profile({}))
    # The right file, in another profile's folder: the getter reads the Default profile only.
    elsewhere = CHROMIUM_PROFILE.replace("/Default", "/Profile 1")
    assert "no bookmarks file" in check(Profile({f"{elsewhere}/Bookmarks": written(done)}))
    unsigned = json.dumps({"roots": done, "version": 1}).encode()
    assert "checksum" in verdict(unsigned)  # the right bookmarks, written by hand
    forged = json.dumps({"checksum": "0" * 32, "roots": done, "version": 1}).encode()
    assert "checksum" in verdict(forged)
    assert "could not be read" in verdict(b"{not json")
    assert "could not be read" in verdict(b'{"roots": []}')
    # Everything removed: the bookmarks the task keeps are gone too.
    assert verdict(roots_of([])) is not None
    if kind in ("bookmark", "rename"):
        name, url = present[0]
        wrong_url = [(name, url.replace(".html", "-old.html"))]
        assert "no bookmark named" in verdict(roots_of(kept, wrong_url))  # the right name, the wrong URL
        assert "no bookmark named" in verdict(roots_of(kept, [(name.upper() + "x", url)]))  # the wrong name
    if kind == "delete":
        stray = seeded[[url for _, url in seeded].index(target_url)]
        assert "still there" in verdict(roots_of(kept, [stray]))  # moved to another folder, not deleted


def test_a_folder_rule_needs_the_folder():
    roots = roots_of([("A", "file:///a.html")], [("B", "file:///b.html")])
    assert metrics.check_bookmarks(written(roots), {"present": [{"name": "B", "url": "file:///b.html"}]}) is None
    rule = {"present": [{"name": "B", "url": "file:///b.html", "folder": "Bookmarks bar"}]}
    assert "in Bookmarks bar" in metrics.check_bookmarks(written(roots), rule)
    rule = {"present": [{"name": "A", "url": "file:///a.html", "folder": "Bookmarks bar"}]}
    assert metrics.check_bookmarks(written(roots), rule) is None


# ------------------------------------------------------------------------------------------ history
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_history_tasks_pass_the_done_state_and_refuse_the_hacks(tmp_path, seed):
    spec, files = generators_chrome.generate("history", seed)
    check = load_task(spec, files).check
    visited = spec["evaluator"]["expected"]["rules"]["keywords"]
    assert visited == [url for url in spec["config"][1]["parameters"]["command"] if url.startswith("file://")]

    def verdict(database: dict[str, bytes] | None) -> str | None:
        files = {f"{CHROMIUM_PROFILE}/{name}": data for name, data in (database or {}).items()}
        return check(Profile(files))

    assert verdict(history(tmp_path, [])) is None
    assert verdict(history(tmp_path, ["chrome://settings/"])) is None  # other pages may stay
    assert "still has" in verdict(history(tmp_path, visited))  # the untouched start
    assert "still has" in verdict(history(tmp_path, visited[1:]))  # one page's history deleted, not all
    assert "still has" in verdict(history(tmp_path, [visited[0] + "?again"]))  # a URL that extends a visited one
    assert "no History database" in verdict(None)
    assert "could not be read" in verdict({"History": b"not a database" * 100})
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE visits(id INTEGER)")
    other.commit()
    other.close()
    assert "could not be read" in verdict({"History": (tmp_path / "other.db").read_bytes()})
    # The deletion that only reached the write-ahead log counts, as Chromium's next start would read it; the
    # main file alone (the log dropped) still has the visits.
    logged = history(tmp_path, visited, wal_urls=[])
    assert verdict(logged) is None
    assert "still has" in verdict({"History": logged["History"]})
    assert "still has" in verdict(history(tmp_path, [], wal_urls=visited[:1]))


def test_a_history_view_that_never_ends_is_cut(tmp_path):
    """The agent's History file is SQLite it shaped: a ``urls`` view over a query without end is stopped."""
    database = sqlite3.connect(tmp_path / "History")
    database.execute(
        "CREATE VIEW urls AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT 'x' AS url, 'x' AS title, i AS last_visit_time FROM n WHERE i < 0"
    )
    database.commit()
    database.close()
    problem = metrics.check_history_deleted(
        {"History": (tmp_path / "History").read_bytes()}, {"type": "keywords", "keywords": ["y"]}
    )
    assert "could not be read" in problem and "interrupted" in problem


def test_history_files_are_named():
    with pytest.raises(ValueError, match="not a file of the History database"):
        metrics.history_urls({"History": b"", "../escape": b""})


# ------------------------------------------------------------------------------------------ font size
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_font_tasks_pass_the_done_state_and_refuse_the_hacks(seed):
    spec, files = generators_chrome.generate("font", seed)
    check = load_task(spec, files).check
    size = spec["evaluator"]["expected"]["rules"]["value"]

    def preferences(prefs: dict, profile: str = CHROMIUM_PROFILE) -> str | None:
        return check(Profile({f"{profile}/Preferences": json.dumps(prefs).encode()}))

    assert preferences({"webkit": {"webprefs": {"default_font_size": size, "default_fixed_font_size": 13}}}) is None
    assert "is 16" in preferences({"browser": {}})  # untouched: Chromium's default
    assert "is 16" in preferences({"webkit": {"webprefs": {"minimum_font_size": size}}})  # the wrong slider
    assert preferences({"webkit": {"webprefs": {"default_fixed_font_size": size}}}) is not None
    assert preferences({"webkit": {"webprefs": {"default_font_size": str(size)}}}) is not None
    # The right setting in another profile's Preferences, or in the browser-wide Local State: not the profile's.
    other = CHROMIUM_PROFILE.replace("/Default", "/Profile 1")
    assert "no Preferences" in preferences({"webkit": {"webprefs": {"default_font_size": size}}}, other)
    assert "no Preferences" in check(Profile({}))
    assert "could not be read" in check(Profile({f"{CHROMIUM_PROFILE}/Preferences": b"[1, 2"}))
    assert "could not be read" in check(Profile({f"{CHROMIUM_PROFILE}/Preferences": b"[1, 2]"}))


def test_a_font_size_range():
    prefs = json.dumps({"webkit": {"webprefs": {"default_font_size": 20}}}).encode()
    assert metrics.check_font_size(prefs, {"type": "range", "min": 16, "max": 24}) is None
    assert "between" in metrics.check_font_size(prefs, {"type": "range", "min": 20, "max": 24})
    with pytest.raises(ValueError, match="'value' or 'range'"):
        metrics.check_font_size(prefs, {"type": "pixels"})


# ------------------------------------------------------------------------------------------ preferences
def prefs_check(kind: str, seed: int):
    spec, files = generators_chrome.generate(kind, seed)
    check = load_task(spec, files).check

    def verdict(prefs, profile: str = CHROMIUM_PROFILE) -> str | None:
        data = prefs if isinstance(prefs, bytes) else json.dumps(prefs).encode()
        return check(Profile({f"{profile}/Preferences": data}))

    return spec, verdict


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_do_not_track_tasks_pass_the_done_state_and_refuse_the_hacks(seed):
    _, verdict = prefs_check("dnt", seed)
    assert verdict({"enable_do_not_track": True}) is None
    assert "'false'" in verdict({"browser": {}})  # untouched: OSWorld's getter says "false" too
    assert verdict({"enable_do_not_track": False}) is not None
    assert verdict({"enable_do_not_track": "true"}) is not None  # a string is not the boolean Chromium writes
    assert verdict({"profile": {"enable_do_not_track": True}}) is not None  # at another place in the file
    assert verdict({"enable_do_not_track": True}, CHROMIUM_PROFILE.replace("Default", "Profile 1")) is not None
    assert verdict(b"not json") is not None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_startup_tasks_pass_the_done_state_and_refuse_the_hacks(seed):
    spec, verdict = prefs_check("startup", seed)
    (target,) = spec["evaluator"]["expected"]["rules"]["prefs"]["session.startup_urls"]
    assert target in spec["instruction"] and target.startswith("file:///home/agent/pages/")
    assert verdict({"session": {"restore_on_startup": 4, "startup_urls": [target]}}) is None
    assert "is not set" in verdict({"browser": {}})  # untouched
    assert "is 1" in verdict({"session": {"restore_on_startup": 1, "startup_urls": [target]}})  # continue where left
    assert verdict({"session": {"restore_on_startup": 4, "startup_urls": [target, "file:///x.html"]}}) is not None
    assert verdict({"session": {"restore_on_startup": 4, "startup_urls": [target + "?x"]}}) is not None
    assert verdict({"session": {"restore_on_startup": "4", "startup_urls": [target]}}) is not None
    assert verdict({"session": {"restore_on_startup": 4.0, "startup_urls": [target]}}) is not None
    assert verdict({"session": {"restore_on_startup": 4, "startup_urls": target}}) is not None
    assert "not a JSON object" in verdict(b"[]")
    other = CHROMIUM_PROFILE.replace("Default", "Profile 1")
    assert "no Preferences" in verdict({"session": {"restore_on_startup": 4, "startup_urls": [target]}}, other)
