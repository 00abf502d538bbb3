"""The OS/file and multi-app tasks without a desktop: each OS task's reference commands run by bash in a scratch home
(real find, zip, tar, chmod), graded by the task's checker through the env's own listing script, and the folder and
archive metrics' hack suites. The same solutions through the terminal on the desktop: test_real_apps.py."""

import ast
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from agentgym.envs.gui import generators_os
from agentgym.envs.gui.env import _LISTING_SCRIPT, apps_catalog
from agentgym.envs.gui.metrics import MAX_UNPACKED_BYTES, check_file_tree, compare_archive
from agentgym.envs.gui.osworld import load_task
from agentgym.envs.gui.tasks import HOME

OS_TASKS = [task_id for task_id in apps_catalog() if task_id.startswith("os-")]
MULTI_TASKS = [task_id for task_id in apps_catalog() if task_id.startswith("multi-") and "infeasible" not in task_id]


class LocalHome:
    """An Inspector over a scratch folder standing in for the agent's home (listings by the env's own script)."""

    def __init__(self, root: Path, entries: int = 5000):
        self.root, self.entries = root, entries

    def _local(self, path: str) -> Path:
        return self.root / Path(path).relative_to(HOME)

    def read_bytes(self, path):
        local = self._local(path)
        return local.read_bytes() if local.is_file() else None

    def read(self, path):
        data = self.read_bytes(path)
        return None if data is None else data.decode()

    def listing(self, path):
        argv = [sys.executable, "-I", "-S", "-c", _LISTING_SCRIPT, str(self._local(path)), str(self.entries), "1000000"]
        done = subprocess.run(argv, capture_output=True, timeout=30)
        if done.returncode != 0:
            raise OSError(done.stderr.decode())
        return json.loads(done.stdout)


def _lay_out(task, root: Path) -> LocalHome:
    for path, data in task.files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return LocalHome(root)


def _commands(task) -> list[str]:
    return [ast.literal_eval(step[len("type(") : -1]) for step in task.solution if step.startswith("type(")]


def _run(home: LocalHome, command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True, env={**os.environ, "HOME": str(home.root)}, timeout=30)


def _solved(task_id: str, root: Path) -> tuple:
    task = apps_catalog()[task_id]
    home = _lay_out(task, root)
    for command in _commands(task):
        _run(home, command)
    return task, home


@pytest.mark.parametrize("task_id", [t for t in OS_TASKS if "infeasible" not in t])
def test_the_reference_commands_solve_each_os_task_and_the_start_does_not(task_id, tmp_path):
    task = apps_catalog()[task_id]
    home = _lay_out(task, tmp_path)
    assert task.check(home) is not None
    for command in _commands(task):
        _run(home, command)
    assert task.check(home) is None


def test_the_catalogue_counts_and_the_infeasible_tasks():
    assert len(OS_TASKS) == 8 * 3 + 1 and len(MULTI_TASKS) == 4 * 3
    for task_id, apps in (("os-infeasible-0", ["xterm"]), ("multi-infeasible-0", ["calc", "writer"])):
        task = apps_catalog()[task_id]
        assert not task.feasible and task.solution == ("fail()",)
        assert [app.name for app in (*task.other_apps, task.app)] == apps
        assert not any("gold" in path for path in task.files)


# ---------------------------------------------------------------------------- check_file_tree's hack suite
def test_a_symlink_where_a_moved_file_should_be_fails(tmp_path):
    task, home = _solved("os-organize-0", tmp_path)
    folder = tmp_path / "Downloads"
    moved = next(path for path in folder.rglob("*.jpg"))
    stash = tmp_path / "stash.jpg"
    moved.rename(stash)
    moved.symlink_to(stash)  # the right bytes behind it, but no file of the agent's in the folder
    assert "symlink" in task.check(home)


def test_the_right_names_with_the_wrong_contents_fail(tmp_path):
    task, home = _solved("os-find-1", tmp_path)
    (copy,) = (tmp_path / "found").iterdir()
    copy.write_bytes(copy.read_bytes() + b"\n")
    assert "expected content" in task.check(home)


def test_an_extra_or_a_missing_file_fails(tmp_path):
    task, home = _solved("os-cleanup-0", tmp_path)
    (tmp_path / "logs" / "extra.log").write_text("x")
    assert "unexpected entries: extra.log" in task.check(home)
    task, home = _solved("os-rename-0", tmp_path / "again")
    next((tmp_path / "again" / "notes").glob("*.md")).unlink()
    assert "does not exist" in task.check(home)


def test_the_find_task_also_wants_the_original_left_in_place(tmp_path):
    task, home = _solved("os-find-0", tmp_path)
    (copy,) = (tmp_path / "found").iterdir()
    next((tmp_path / "archive").rglob(copy.name)).unlink()  # moved, not copied
    assert "does not exist" in task.check(home)


def test_every_script_made_executable_fails_and_so_does_a_symlink(tmp_path):
    task, home = _solved("os-chmod-0", tmp_path)
    for script in (tmp_path / "scripts").iterdir():
        script.chmod(0o755)
    assert "should not be executable" in task.check(home)
    task = apps_catalog()["os-chmod-1"]
    home = _lay_out(task, tmp_path / "b")
    script = tmp_path / "b" / "scripts" / _commands(task)[0].rpartition("/")[2]
    copy = tmp_path / "b" / "copy.sh"  # an executable copy, linked where the script was
    copy.write_bytes(script.read_bytes())
    copy.chmod(0o755)
    script.unlink()
    script.symlink_to(copy)
    assert "symlink" in task.check(home)


def test_the_listing_reports_fifos_and_link_loops_without_blocking_or_following(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "pipe.log")  # opening it would block: never opened
    (folder / "loop").symlink_to(folder)  # a link to its own folder: listed, not walked
    (folder / "gone").symlink_to(tmp_path / "nowhere")
    listing = LocalHome(tmp_path).listing(f"{HOME}/logs")
    assert {path: entry["type"] for path, entry in listing.items()} == {
        "pipe.log": "other",
        "loop": "symlink",
        "gone": "symlink",
    }
    assert LocalHome(tmp_path).listing(f"{HOME}/missing") is None
    assert LocalHome(tmp_path).listing(f"{HOME}/logs/loop") is None  # a symlinked root is no folder either
    assert check_file_tree(None, {"files": {}}) == "the folder does not exist"


def test_the_listing_is_bounded(tmp_path):
    for index in range(20):
        (tmp_path / f"{index}.txt").write_text("x")
    with pytest.raises(OSError, match="entry limit"):
        LocalHome(tmp_path, entries=10).listing(HOME)
    (tmp_path / "big").write_bytes(b"\0" * 2_000_000)
    with pytest.raises(OSError, match="byte limit"):
        LocalHome(tmp_path).listing(HOME)


# ---------------------------------------------------------------------------- compare_archive's hack suite
def _zip_of(members: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in members.items():
            package.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16  # a symlink, as Info-ZIP stores one
            package.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _tar_of(members: dict[str, bytes], *, link: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buffer.getvalue()


def test_archives_made_by_zip_and_tar_pass_and_hostile_ones_are_refused(tmp_path):
    _, home = _solved("os-zip-0", tmp_path)
    spec, files = generators_os.generate("os", "zip", 0)
    expected = files[spec["evaluator"]["expected"]["path"]]
    made = home.read_bytes(spec["evaluator"]["result"]["path"])
    assert compare_archive(made, expected) is None
    members = {name: data for name, data in _members(expected).items()}
    folder = next(iter(members)).partition("/")[0]
    assert compare_archive(_zip_of(members), expected) is None  # no folder entries: the same files
    assert compare_archive(_zip_of({f"./{n}": d for n, d in members.items()}), expected) is None
    hostile = [
        (_zip_of({**members, f"{folder}/extra.txt": b"x"}), "files are"),
        (_zip_of({**members, "../outside.txt": b"x"}), "outside the folder"),
        (_zip_of({**members, "/etc/cron.d/x": b"x"}), "outside the folder"),
        (_zip_of(members, links=(f"{folder}/link",)), "not a file or a folder"),
        (_zip_of({name: data + b"!" for name, data in members.items()}), "differ"),
        (_zip_of({name.partition("/")[2]: data for name, data in members.items()}), "files are"),  # no top folder
        (_tar_of(members), "not a zip"),
        (b"PK\x03\x04 not really", "refused"),
        (None, "not made"),
    ]
    for archive, why in hostile:
        assert why in (compare_archive(archive, expected) or ""), why


def test_tar_archives_refuse_links_traversal_and_duplicates():
    spec, files = generators_os.generate("os", "targz", 1)
    expected = files[spec["evaluator"]["expected"]["path"]]
    members = _members(expected)
    assert compare_archive(_tar_of(members), expected) is None
    assert "not a file or a folder" in compare_archive(_tar_of(members, link="x/link"), expected)
    assert "outside the folder" in compare_archive(_tar_of({**members, "a/../../x": b""}), expected)
    twice = io.BytesIO()
    with tarfile.open(fileobj=twice, mode="w:gz") as tar:
        for data in (b"one", b"two"):
            info = tarfile.TarInfo(next(iter(members)))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert "appears twice" in compare_archive(twice.getvalue(), expected)
    assert "not a gzipped tar" in compare_archive(_zip_of(members), expected)


def test_zip_and_gzip_bombs_are_cut_at_the_bound():
    spec, files = generators_os.generate("os", "zip", 1)
    expected = files[spec["evaluator"]["expected"]["path"]]
    bomb = _zip_of({"x/zeros": b"\0" * (MAX_UNPACKED_BYTES + 1)})
    assert len(bomb) < MAX_UNPACKED_BYTES // 500
    assert "more than" in compare_archive(bomb, expected)
    spec, files = generators_os.generate("os", "targz", 0)
    expected = files[spec["evaluator"]["expected"]["path"]]
    assert "more than" in compare_archive(_tar_of({"x/zeros": b"\0" * (MAX_UNPACKED_BYTES + 1)}), expected)


def _members(archive: bytes) -> dict[str, bytes]:
    if archive.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(archive)) as package:
            return {name: package.read(name) for name in package.namelist() if not name.endswith("/")}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {info.name: tar.extractfile(info).read() for info in tar if info.isfile()}


# ---------------------------------------------------------------------------------------- multi-app
@pytest.mark.parametrize("task_id", MULTI_TASKS)
def test_multi_app_tasks_open_two_apps_and_grade_the_target(task_id):
    spec, files = generators_os.generate("multi", task_id[len("multi-") : -2], int(task_id[-1]))
    task = load_task(spec, files)
    opened = [step["parameters"]["path"] for step in spec["config"] if step["type"] == "open"]
    assert len(task.other_apps) == 1 and task.app.argv[-1] == opened[-1] and task.other_apps[0].argv[-1] == opened[0]
    target = spec["evaluator"]["result"]["path"]
    start = {f"{HOME}/{path}": data for path, data in task.files.items()}
    assert task.check(_Files(start)) is not None
    gold = files[spec["evaluator"]["expected"]["path"]]
    assert task.check(_Files({**start, target: gold})) is None
    assert task.check(_Files({path: data for path, data in start.items() if path != target})) is not None


class _Files:
    def __init__(self, files):
        self.files = files

    def read_bytes(self, path):
        return self.files.get(path)
