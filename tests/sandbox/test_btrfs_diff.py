"""Snapshot diffs of btrfs layers (fs_diff.read_subvolume) on a real btrfs filesystem: a subvolume and its
snapshot, changed as a sandbox changes its files, give a diff that turns the parent into the snapshot exactly;
attacks on the diff fail closed. (A real engine on btrfs: tests/sandbox/test_btrfs_engine.py.)"""

import io
import os
import shutil
import stat
import subprocess
import tarfile

import pytest

from agentgym.sandbox import fs_diff

AGENT = (1000, 1000)
ROOT = (0, 0)


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


@pytest.fixture(scope="module")
def btrfs(tmp_path_factory):
    """A small btrfs filesystem in a sparse loop file, mounted for this module."""
    if os.geteuid() != 0:
        pytest.skip("mounting a btrfs loop file needs root")
    if shutil.which("mkfs.btrfs") is None or shutil.which("btrfs") is None:
        pytest.skip("btrfs-progs is not installed (scripts/setup.sh installs it)")
    base = tmp_path_factory.mktemp("btrfs")
    image, mount = base / "fs.img", base / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(256 << 20)
    if (made := _run("mkfs.btrfs", "-q", str(image))).returncode != 0:
        pytest.skip(f"mkfs.btrfs failed: {made.stderr.strip()}")
    if (mounted := _run("mount", "-o", "loop", str(image), str(mount))).returncode != 0:
        pytest.skip(
            f"cannot mount a btrfs loop file here (loop devices, btrfs in the kernel): {mounted.stderr.strip()}"
        )
    try:
        yield mount
    finally:
        _run("umount", str(mount))


@pytest.fixture
def layers(btrfs, request):
    """(parent, child): an image-like parent subvolume and a snapshot of it for the test to change."""
    name = request.node.name[:60]
    parent, child = btrfs / f"{name}-parent", btrfs / f"{name}-child"
    assert _run("btrfs", "subvolume", "create", str(parent)).returncode == 0
    for directory, mode, owner in [
        ("tmp", 0o1777, ROOT),
        ("etc", 0o755, ROOT),
        ("home", 0o755, ROOT),
        ("home/agent", 0o755, AGENT),
        ("workspace", 0o755, AGENT),
        ("workspace/old", 0o755, AGENT),
        ("workspace/old/deeper", 0o755, AGENT),
    ]:
        (parent / directory).mkdir()
        os.chmod(parent / directory, mode)
        os.chown(parent / directory, *owner)
    for path, text, owner in [
        ("etc/passwd", "root:x:0:0\n", ROOT),
        ("home/agent/.bashrc", "alias x=y\n", AGENT),
        ("home/agent/.profile", "PATH=$PATH\n", AGENT),
        ("workspace/keep", "same\n", AGENT),
        ("workspace/edit", "before\n", AGENT),
        ("workspace/chmod", "mode\n", AGENT),
        ("workspace/old/a", "a\n", AGENT),
        ("workspace/old/deeper/b", "b\n", AGENT),
        ("workspace/becomes-dir", "file\n", AGENT),
    ]:
        (parent / path).write_text(text)
        os.chown(parent / path, *owner)
    (parent / "workspace" / "dir-becomes-file").mkdir()
    os.chown(parent / "workspace" / "dir-becomes-file", *AGENT)
    assert _run("btrfs", "subvolume", "snapshot", str(parent), str(child)).returncode == 0
    try:
        yield parent, child
    finally:
        _run("btrfs", "subvolume", "delete", str(child))
        _run("btrfs", "subvolume", "delete", str(parent))


def _agents(*paths) -> None:
    for path in paths:
        os.chown(path, *AGENT, follow_symlinks=False)


def _change(child) -> None:
    """What a sandbox does to its files: creations, an edit, a mode change, deletions, a directory replaced by
    another, by a file and a file by a directory, a symlink, a hard link, a FIFO, odd names, a file in /tmp."""
    ws = child / "workspace"
    (ws / "edit").write_text("after\n")
    os.chmod(ws / "chmod", 0o4750)
    (child / "home" / "agent" / ".bashrc").unlink()
    shutil.rmtree(ws / "old")
    (ws / "old").mkdir()
    (ws / "old" / "new").write_text("new\n")
    shutil.rmtree(ws / "dir-becomes-file")
    (ws / "dir-becomes-file").write_text("now a file\n")
    (ws / "becomes-dir").unlink()
    (ws / "becomes-dir").mkdir()
    (ws / "src").mkdir()
    (ws / "src" / "f").write_text("v1\n")
    os.link(ws / "src" / "f", ws / "src" / "hard")
    os.symlink("../../etc/passwd", ws / "src" / "link")
    os.mkfifo(ws / "src" / "pipe")
    (ws / "src" / "a\nb").write_text("odd\n")
    (ws / "src" / "-rf").write_text("dash\n")
    (child / "tmp" / "t").write_text("tmp\n")
    _agents(
        ws / "old",
        ws / "old" / "new",
        ws / "dir-becomes-file",
        ws / "becomes-dir",
        ws / "src",
        ws / "src" / "f",
        ws / "src" / "link",
        ws / "src" / "pipe",
        ws / "src" / "a\nb",
        ws / "src" / "-rf",
        child / "tmp" / "t",
    )


def _listing(root) -> list[tuple]:
    """Every path's type, mode, owner, size, link target and content, and its mtime but for the directories of
    other owners than the agent (they get the time of the extraction, as after a replay)."""
    entries = []
    for directory, names, files in os.walk(root):
        for name in sorted(names + files):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            keep_time = stat.S_ISDIR(info.st_mode) is False or (info.st_uid, info.st_gid) == AGENT
            content = b""
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    content = f.read()
            entries.append(
                (
                    os.path.relpath(path, root),
                    info.st_mode,
                    info.st_uid,
                    info.st_gid,
                    info.st_nlink if not stat.S_ISDIR(info.st_mode) else 0,
                    os.readlink(path) if stat.S_ISLNK(info.st_mode) else content,
                    info.st_mtime_ns // 10**9 if keep_time else 0,
                )
            )
    return sorted(entries)


def _apply(diff: fs_diff.LayerDiff, parent, target) -> None:
    """The parent's tree with the diff applied as a warm fork applies it: the deletions, then GNU tar."""
    assert _run("cp", "-a", str(parent), str(target)).returncode == 0
    for path in diff.deletions:
        _run("rm", "-rf", "--", f"{target}{path}")
    extracted = subprocess.run(
        ["tar", "-x", "-p", "-C", str(target), "-f", "-"], input=diff.archive, capture_output=True
    )
    assert extracted.returncode == 0, extracted.stderr


def test_an_unchanged_snapshot_has_an_empty_diff(layers):
    parent, child = layers
    diff = fs_diff.read_subvolume(str(child), str(parent), "start", AGENT)
    assert diff is not None and diff.deletions == ()
    with tarfile.open(fileobj=io.BytesIO(diff.archive)) as tar:
        assert tar.getnames() == []


def test_the_diff_turns_the_parent_into_the_snapshot(layers, tmp_path):
    parent, child = layers
    _change(child)
    diff = fs_diff.read_subvolume(str(child), str(parent), "start", AGENT)
    assert diff is not None
    assert set(diff.deletions) == {
        "/home/agent/.bashrc",
        "/workspace/old",  # another directory now: the old one goes with its contents
        "/workspace/dir-becomes-file",
        "/workspace/becomes-dir",
    }
    with tarfile.open(fileobj=io.BytesIO(diff.archive)) as tar:
        names = tar.getnames()
        hard = tar.getmember("workspace/src/hard")
    assert "workspace/keep" not in names and "etc/passwd" not in names and "tmp" not in names  # unchanged, or root's
    assert "tmp/t" in names and "workspace/chmod" in names and hard.islnk()
    assert all(not n.startswith("/") and ".." not in n.split("/") for n in names)
    _apply(diff, parent, tmp_path / "applied")
    assert _listing(tmp_path / "applied") == _listing(child)


def test_changed_files_of_other_owners_devices_and_xattrs_are_refused(layers):
    parent, child = layers
    (child / "workspace" / "mine").write_text("agent")
    _agents(child / "workspace" / "mine")
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT) is not None
    os.setxattr(child / "workspace" / "mine", "user.note", b"x")
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT) is None
    os.removexattr(child / "workspace" / "mine", "user.note")
    os.mknod(child / "workspace" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    _agents(child / "workspace" / "null")
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT) is None
    os.unlink(child / "workspace" / "null")
    (child / "etc" / "passwd").write_text("root::0:0\n")  # an image file changed: not the agent's doing
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT) is None


def test_a_directory_of_another_owner_in_place_of_the_agents_is_refused(layers):
    parent, child = layers
    shutil.rmtree(child / "workspace" / "old")
    (child / "workspace" / "old").mkdir()  # root's: the agent could not have made it
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT) is None


def test_every_entry_read_counts_against_the_budget(layers):
    parent, child = layers
    for i in range(300):
        os.symlink("/" + "t" * 1000, child / "workspace" / f"link{i}")
        _agents(child / "workspace" / f"link{i}")
    full = fs_diff.read_subvolume(str(child), str(parent), "start", AGENT)
    assert full is not None and len(full.archive) > 300_000
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT, max_bytes=64 << 10) is None
    # The parent's names count too: a budget smaller than the names of both trees refuses an unchanged snapshot.
    shutil.rmtree(child / "workspace")
    assert fs_diff.read_subvolume(str(child), str(parent), "start", AGENT, max_bytes=200) is None


def test_a_tree_thousands_of_levels_deep_is_compared_without_recursion(layers):
    parent, child = layers
    depth, home = 1500, os.getcwd()
    os.chdir(child / "workspace")  # relative steps: the full path would pass PATH_MAX only at ~2,000 levels
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chown("d", *AGENT)
            os.chdir("d")
        with open("bottom", "w") as f:
            f.write("x")
        os.chown("bottom", *AGENT)
    finally:
        os.chdir(home)
    diff = fs_diff.read_subvolume(str(child), str(parent), "start", AGENT, max_bytes=256 << 20)
    assert diff is not None
    with tarfile.open(fileobj=io.BytesIO(diff.archive)) as tar:
        names = tar.getnames()
    assert names[-1] == "workspace/" + "d/" * depth + "bottom"


def test_the_budget_bounds_the_names_held_at_once_not_the_images_size(btrfs):
    # An image's names are read by every diff (~13,000 in the base image, ~36,000 with the desktop apps): they
    # are given back once their directory is walked, so a large image still has diff forks.
    parent, child = btrfs / "wide-parent", btrfs / "wide-child"
    assert _run("btrfs", "subvolume", "create", str(parent)).returncode == 0
    try:
        for d in range(100):
            (parent / f"dir{d}").mkdir()
            for f in range(30):
                (parent / f"dir{d}" / f"file{f}").write_text("x")
        assert _run("btrfs", "subvolume", "snapshot", str(parent), str(child)).returncode == 0
        (child / "dir7" / "file3").unlink()
        diff = fs_diff.read_subvolume(str(child), str(parent), "start", ROOT, max_bytes=64 << 10)  # < all names
        assert diff is not None and diff.deletions == ("/dir7/file3",)
    finally:
        _run("btrfs", "subvolume", "delete", str(child))
        _run("btrfs", "subvolume", "delete", str(parent))
