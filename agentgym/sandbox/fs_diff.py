"""Snapshot layers as filesystem diffs: a committed snapshot's own layer read as (paths to delete, a tar), so that a fork or restore lands in an already running container of the image the snapshot was committed on.

Why: starting a container costs ~200 ms on a small machine, while a warm pooled container of the
sandbox's start image (a base or task image) is already running. A snapshot is still a
``docker commit`` (portable export, the fallback and the release bookkeeping need the image), and
the commit's top layer is exactly the container's changes since its image: the engine computed it.
This module reads that layer where it lies on this host (readable where the engine runs here and
this process may read its data root, as :mod:`agentgym.sandbox.disk` does), and :meth:`DockerSandbox.from_snapshot
<agentgym.sandbox.docker.DockerSandbox.from_snapshot>` replays it into a warm container as the
sandbox user, through its command server: the deletions first, then one ``tar -x -p`` of the rest
(modes, mtimes, symlinks, hard links and FIFOs kept). A committed layer is immutable and never
mounted writable, so reading it needs no pause and cannot race the agent; it is the engine's own
diff, so a diff fork holds what a fork from the committed image holds, but for the mtimes of the
image's directories that are not the agent's (``/tmp``, ``/home``: they get the fork's time, as
after a replay). (The engine's ``put_archive`` would keep those too, but costs as much as a
container start: it re-executes the daemon to extract in a chroot.)

Where the layer lies depends on the storage driver. **overlay2**: the image's ``UpperDir`` holds
the layer itself, deletions as whiteouts (:func:`read_layer`). **btrfs** (the data root with
quotas that makes the disk limit hard, ``scripts/docker-quota-root.sh``): every layer is a whole
tree, a subvolume snapshotted from the one below and then changed (the engine's layer store names
it: chain id → ``cache-id``), so the layer is what differs between the two subvolumes
(:func:`read_subvolume`): a snapshot keeps every inode's number and ctime, so a walk of both trees
that compares each entry's lstat finds exactly what changed; it reads every name and inode of the
image (no directory can be skipped: what changes below a directory leaves its own stat as it was),
which is the price of that driver's hard quota.

Which layers qualify, else the caller forks from the committed image as before (the diff is
None): the image is one layer above a non-snapshot image (chains of commits, imported snapshots
and layers of other storage drivers than overlay2 and btrfs fall back); the diff takes at most :data:`MAX_DIFF_BYTES` of
host memory, counting every entry (its name as read, its tar header, long name and link target, its
content; sparse files at their size) and stopping as soon as that is spent; the layer holds only
directories, regular files, symlinks, FIFOs and whiteouts (for btrfs: every changed entry),
every entry owned by the sandbox user but the
image's directories the agent wrote into and the empty files the engine makes as mount points
(``/sbin/docker-init``), which every container of the image has. Anything else fails closed: a
file of another owner, a device node other than a whiteout (the agent cannot make one: CAP_MKNOD
is dropped), an extended attribute other than overlayfs' opaque mark (user attributes, file
capabilities, overlayfs redirects or metacopy; on btrfs any extended attribute), a directory
of another owner in place of one that went.

Any other failure to build the diff (a path past the host's ``PATH_MAX``, an engine error) falls back
the same way. The walk keeps its own stack, never the interpreter's: the tree's depth is the agent's to
choose.

Safety: the walk never follows a symlink (``lstat``, ``O_NOFOLLOW``), so a link the agent made is
carried as a link, never read through; tar names are the walk's own relative paths (no absolute
names, no ``..``); the deletions and the extraction run as the sandbox user inside the container
(as :meth:`~agentgym.sandbox.docker.DockerSandbox.put_tree` does), so the kernel lets them remove
and write only what the agent itself could, whatever links the diff holds. A file named like an
AUFS whiteout (``.wh.x``) is an ordinary file here.

Built diffs are cached per snapshot image (built in the background right after the commit) and
dropped when the snapshot is released, within :data:`CACHE_BYTES` in all (the oldest go first; a
dropped one is rebuilt from the layer on the next fork).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import os
import re
import stat
import tarfile
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors

from agentgym.sandbox import engine, labels

log = logging.getLogger(__name__)

__all__ = [
    "CACHE_BYTES",
    "DELETE_SCRIPT",
    "MAX_DIFF_BYTES",
    "LayerDiff",
    "diff_of",
    "forget",
    "layer_of",
    "prepare",
    "read_layer",
    "read_subvolume",
]

# Past this the fork starts from the committed image: a diff this size no longer beats a container start.
MAX_DIFF_BYTES = 64 << 20
CACHE_BYTES = 512 << 20
_OPAQUE = "trusted.overlay.opaque"
_HEX64 = re.compile(r"[0-9a-f]{64}")
# What one entry read from the layer costs in host memory besides its name (the walk's own bookkeeping).
_ENTRY_COST = 128
_CHUNK = 1024  # names read between two payments: a directory overruns the budget by at most this many
# For bash: the absolute paths to remove (whiteouts, and opaque directories whose old contents go)
# come on stdin, each ended by a NUL, so that no name and no number of names needs quoting or fits argv.
DELETE_SCRIPT = 'while IFS= read -r -d "" p; do rm -rf -- "$p" || exit 1; done'


@dataclass(frozen=True)
class LayerDiff:
    """One snapshot layer: what to delete first, then a tar (names relative to ``/``) to extract at ``/``."""

    start: str  # the image the layer goes on, as the warm pool names it
    owner: tuple[int, int]  # the sandbox user (uid, gid) who owns every entry and applies the diff
    deletions: tuple[str, ...]
    archive: bytes

    @property
    def size(self) -> int:
        return len(self.archive) + sum(len(p) for p in self.deletions)


class _Refused(Exception):
    """The layer holds something a diff does not carry; fork from the committed image instead."""


def read_layer(root: str, start: str, owner: tuple[int, int], *, max_bytes: int = MAX_DIFF_BYTES) -> LayerDiff | None:
    """The diff that the overlay2 layer directory ``root`` holds, for a sandbox user ``owner`` (uid, gid)
    to apply (None: it does not qualify; see the module docstring)."""
    diff = _Diff(owner, max_bytes)
    try:
        with diff.tar:
            _walk_upper(diff, root)
    except _Refused:
        return None
    return diff.result(start)


def read_subvolume(
    root: str, parent: str, start: str, owner: tuple[int, int], *, max_bytes: int = MAX_DIFF_BYTES
) -> LayerDiff | None:
    """The diff between the btrfs layer subvolume ``root`` and ``parent``, the subvolume it is a snapshot of,
    for a sandbox user ``owner`` to apply (None: it does not qualify; see the module docstring)."""
    diff = _Diff(owner, max_bytes)
    try:
        with diff.tar:
            _compare(diff, root, parent)
    except _Refused:
        return None
    return diff.result(start)


class _Budget:
    """What the diff may still take of host memory: every name read, tar header, file and deletion counts."""

    def __init__(self, limit: int):
        self.left = limit

    def spend(self, cost: int, what: str) -> None:
        self.left -= cost
        if self.left < 0:
            raise _Refused(what)


class _Diff:
    """A diff being built: its deletions and its tar, within a budget, of entries checked one by one."""

    def __init__(self, owner: tuple[int, int], max_bytes: int):
        self.owner = owner
        self.budget = _Budget(max_bytes)
        self.deletions: list[str] = []
        self.buffer = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buffer, mode="w", format=tarfile.PAX_FORMAT)
        self._inodes: dict = {}

    def result(self, start: str) -> LayerDiff:
        return LayerDiff(start, self.owner, tuple(self.deletions), self.buffer.getvalue())

    def delete(self, arcname: str) -> None:
        self.budget.spend(len(arcname) + _ENTRY_COST, arcname)
        self.deletions.append("/" + arcname)

    def add(self, arcname: str, path: str, info: os.stat_result) -> bool:
        """Put one entry of the layer in the tar, or refuse the layer; whether the walk goes below it (a directory).

        Sockets are left out (none survives a commit either); a directory of the image the agent wrote into
        (``/tmp``, ``/home``: not the sandbox user's) is walked but not carried; an empty file of another owner
        is a mount point the engine made (``/sbin/docker-init``), which every container of the image has."""
        mode = info.st_mode
        if stat.S_ISSOCK(mode):
            return False
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISFIFO(mode)):
            raise _Refused(arcname)
        if (info.st_uid, info.st_gid) != self.owner:
            if stat.S_ISDIR(mode):
                return True
            if not (stat.S_ISREG(mode) and info.st_size == 0):
                raise _Refused(arcname)  # not the agent's doing: only the committed image has it right
            return False
        member = _member(arcname, path, info, self._inodes)
        before = self.buffer.tell()
        if member.isreg():
            self.budget.spend(info.st_size, arcname)  # before reading a byte of it
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as content:
                self.tar.addfile(member, content)
            self.budget.left += info.st_size
        else:
            self.tar.addfile(member)
        self.budget.spend(self.buffer.tell() - before, arcname)  # the header (and long name, link target), the content
        return stat.S_ISDIR(mode)


def _walk_upper(diff: _Diff, root: str) -> None:
    """Add the overlay2 layer under ``root`` to the diff, depth first in name order, without recursion: the depth
    is the agent's to choose (a tree thousands of levels deep must cost a stack entry each, not a frame)."""
    pending = [iter(_names(root, "", diff.budget))]  # one iterator of (relative path) per directory being walked
    while pending:
        arcname = next(pending[-1], None)
        if arcname is None:
            pending.pop()
            continue
        path = os.path.join(root, arcname)
        info = os.lstat(path)
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:  # overlayfs' whiteout: the path was deleted
            diff.delete(arcname)
            continue
        xattrs = os.listxattr(path, follow_symlinks=False)
        if any(x != _OPAQUE for x in xattrs):
            raise _Refused(arcname)  # user xattrs, file capabilities, overlayfs redirects or metacopy
        if stat.S_ISDIR(info.st_mode) and xattrs and os.getxattr(path, _OPAQUE, follow_symlinks=False) == b"y":
            diff.delete(arcname)  # the image's contents under it are gone; the tar refills it
        if diff.add(arcname, path, info):
            pending.append(iter(_names(root, arcname, diff.budget)))


def _compare(diff: _Diff, root: str, parent: str) -> None:
    """Add what the btrfs subvolume ``root`` holds that its ``parent`` does not to the diff, and the deletions;
    depth first in name order, with its own stack as :func:`_walk_upper`.

    A snapshot keeps each inode's number, and any change to an inode (content, mode, owner, times, links,
    xattrs) sets its ctime to the time of the change, which no process can choose, so an entry whose lstat
    matches its parent's (inode, ctime, mtime, mode, owner, size, links) is the parent's, unchanged. A
    directory's stat says nothing of what changed below it, so every directory is walked (there is no
    pruning); a path that is a directory on one side only, or another directory (inode) on each, is deleted
    first and carried whole."""
    # Per directory being walked: an iterator of (relative path, whether the parent has a directory there to
    # compare with), and what its names took of the budget, given back once it is walked (the image's names
    # are read, not kept: the budget bounds the names held at once, and everything the diff keeps).
    pending = [_entries(diff, root, parent, "", True)]
    while pending:
        arcname, compared = next(pending[-1][0], (None, False))
        if arcname is None:
            diff.budget.left += pending.pop()[1]
            continue
        path = f"{root}/{arcname}"  # not os.path.join: a third of the walk's time went there
        info = os.lstat(path)
        if compared:
            before = os.lstat(f"{parent}/{arcname}")
            same_directory = (
                stat.S_ISDIR(info.st_mode) and stat.S_ISDIR(before.st_mode) and info.st_ino == before.st_ino
            )
            if _unchanged(info, before):
                if same_directory:
                    pending.append(_entries(diff, root, parent, arcname, True))
                continue
            if not same_directory and (
                stat.S_ISDIR(before.st_mode) or stat.S_IFMT(info.st_mode) != stat.S_IFMT(before.st_mode)
            ):  # another type, or another directory: what the parent has there goes first
                if stat.S_ISDIR(info.st_mode) and (info.st_uid, info.st_gid) != diff.owner:
                    raise _Refused(arcname)  # a directory the agent could not have made in its place
                diff.delete(arcname)
            compared = same_directory
        if os.listxattr(path, follow_symlinks=False):
            raise _Refused(arcname)  # user xattrs, file capabilities
        if diff.add(arcname, path, info):
            pending.append(_entries(diff, root, parent, arcname, compared))


def _entries(diff: _Diff, root: str, parent: str, relative: str, compared: bool):
    """The entries of directory ``relative`` of ``root`` as (relative path, whether ``parent`` has it), in name
    order, and what listing them cost; the parent's entries that ``root`` lacks become deletions at once (with
    ``compared``: the parent has this directory)."""
    left = diff.budget.left
    names = _names(root, relative, diff.budget)
    if not compared:
        return ((name, False) for name in names), left - diff.budget.left
    before = set(_names(parent, relative, diff.budget))
    cost = left - diff.budget.left
    for name in sorted(before.difference(names)):
        diff.delete(name)
    return ((name, name in before) for name in names), cost


def _unchanged(info: os.stat_result, before: os.stat_result) -> bool:
    return (
        info.st_ino == before.st_ino
        and info.st_ctime_ns == before.st_ctime_ns
        and info.st_mtime_ns == before.st_mtime_ns
        and info.st_mode == before.st_mode
        and (info.st_uid, info.st_gid) == (before.st_uid, before.st_gid)
        and info.st_size == before.st_size
        and info.st_nlink == before.st_nlink
    )


def _names(root: str, relative: str, budget: _Budget) -> list[str]:
    """The relative paths of a directory's entries in name order, paid for as they are read, a chunk at a time
    (a directory of millions of entries stops at the budget, not at the host's memory)."""
    prefix = f"{relative}/" if relative else ""
    names: list[str] = []
    with os.scandir(os.path.join(root, relative)) as entries:
        while chunk := [prefix + entry.name for entry in itertools.islice(entries, _CHUNK)]:
            budget.spend(sum(map(len, chunk)) + _ENTRY_COST * len(chunk), chunk[-1])
            names += chunk
    names.sort()
    return names


def _member(arcname: str, path: str, info: os.stat_result, inodes: dict) -> tarfile.TarInfo:
    member = tarfile.TarInfo(arcname)
    member.mode = stat.S_IMODE(info.st_mode)
    member.uid, member.gid = info.st_uid, info.st_gid
    member.mtime = info.st_mtime
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        member.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(mode):
        member.type, member.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif stat.S_ISFIFO(mode):
        member.type = tarfile.FIFOTYPE
    elif info.st_nlink > 1 and (info.st_dev, info.st_ino) in inodes:
        member.type, member.linkname = tarfile.LNKTYPE, inodes[(info.st_dev, info.st_ino)]
    else:
        if info.st_nlink > 1:
            inodes[(info.st_dev, info.st_ino)] = arcname
        member.size = info.st_size
    return member


def layer_of(image_id: str, start_name: str, owner: tuple[int, int]) -> LayerDiff | None:
    """The diff of snapshot image ``image_id`` if it is one readable overlay2 or btrfs layer above ``start_name``."""
    client = engine.api()
    try:
        image = client.inspect_image(image_id)
        parent = client.inspect_image(image.get("Parent") or "")
        start = client.inspect_image(start_name)
    except docker.errors.APIError:
        return None
    if (parent.get("Config", {}).get("Labels") or {}).get(labels.KIND) == labels.KIND_SNAPSHOT:
        return None  # a chain of commits: its layers would have to be replayed in order
    if start["Id"] != parent["Id"] or len(image["RootFS"]["Layers"]) != len(parent["RootFS"]["Layers"]) + 1:
        return None
    driver = (image.get("GraphDriver") or {}).get("Name")
    try:
        if driver == "overlay2":
            upper = ((image.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
            return read_layer(upper, start_name, owner, max_bytes=MAX_DIFF_BYTES) if _readable(upper) else None
        if driver == "btrfs":
            layers = _subvolumes(client.info().get("DockerRootDir") or "", image["RootFS"]["Layers"])
            return read_subvolume(*layers, start_name, owner, max_bytes=MAX_DIFF_BYTES) if layers else None
        return None
    except (OSError, ValueError, tarfile.TarError):
        # Unreadable here after all (permissions on part of the layer, a path past the host's PATH_MAX,
        # a name tar cannot hold): the committed image holds the same state.
        return None


def _readable(path: str | None) -> bool:
    return bool(path) and os.path.isdir(path) and os.access(path, os.R_OK | os.X_OK)


def _subvolumes(data_root: str, diff_ids: list[str]) -> tuple[str, str] | None:
    """The btrfs subvolumes of an image's top layer and of the layer below it, where this process can read
    them (the engine runs on this machine), found as the engine's layer store names them: a layer's chain
    id (its diff id hashed with those below it) names its entry there, whose ``cache-id`` is the subvolume."""
    chain: list[str] = []
    for diff_id in diff_ids:
        chain.append(
            diff_id if not chain else "sha256:" + hashlib.sha256(f"{chain[-1]} {diff_id}".encode()).hexdigest()
        )
    paths: list[str] = []
    for chain_id in chain[-2:]:
        algorithm, _, digest = chain_id.partition(":")
        if algorithm != "sha256" or not _HEX64.fullmatch(digest):
            return None
        try:
            with open(os.path.join(data_root, "image", "btrfs", "layerdb", "sha256", digest, "cache-id")) as f:
                cache_id = f.read(65)
        except OSError:
            return None  # not on this machine, or not readable by this process
        if not _HEX64.fullmatch(cache_id):
            return None
        paths.append(os.path.join(data_root, "btrfs", "subvolumes", cache_id))
    if len(paths) != 2 or not all(_readable(path) for path in paths):
        return None
    return paths[1], paths[0]


class _Cache:
    """Diffs being built or built, per snapshot image id, within a byte budget (oldest dropped first)."""

    def __init__(self, budget: int):
        self.budget = budget
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Future] = OrderedDict()
        self._starts: dict[str, tuple[str, tuple[int, int]]] = {}

    def prepare(self, image_id: str, start_name: str, owner: tuple[int, int]) -> None:
        with self._lock:
            self._starts[image_id] = (start_name, owner)
            if image_id not in self._entries:
                self._entries[image_id] = engine.submit(self._build, image_id, start_name, owner)

    def get(self, image_id: str) -> LayerDiff | None:
        with self._lock:
            future = self._entries.get(image_id)
            start = self._starts.get(image_id)
        if start is None:
            return None  # not a diff-forkable snapshot, or released
        if future is not None and not future.cancel():
            return future.result()
        # Dropped for room (the layer is still there), or still queued behind other engine work: build it here.
        diff = self._build(image_id, *start)
        built: Future = Future()
        built.set_result(diff)
        with self._lock:
            if image_id in self._starts:
                self._entries[image_id] = built
        return diff

    def forget(self, image_id: str) -> None:
        with self._lock:
            self._entries.pop(image_id, None)
            self._starts.pop(image_id, None)

    def _build(self, image_id: str, start_name: str, owner: tuple[int, int]) -> LayerDiff | None:
        try:
            diff = layer_of(image_id, start_name, owner)
        except Exception:  # the diff only makes a fork faster: whatever stops it, the committed image is exact
            log.warning(
                "building the diff of snapshot %s failed; its forks start from the image", image_id[:19], exc_info=True
            )
            diff = None
        with self._lock:
            total = sum(_built_size(future) for future in self._entries.values())
            while total + (diff.size if diff else 0) > self.budget and self._entries:
                oldest, future = next(iter(self._entries.items()))
                if oldest == image_id:
                    break
                del self._entries[oldest]
                total -= _built_size(future)
        return diff


def _built_size(future: Future) -> int:
    """The bytes a built diff holds (0 while it builds, or when it was cancelled, failed or is None)."""
    if not future.done() or future.cancelled() or future.exception() is not None or future.result() is None:
        return 0
    return future.result().size


_cache = _Cache(CACHE_BYTES)


def prepare(image_id: str, start_name: str, owner: tuple[int, int]) -> None:
    """Start building the diff of a just committed snapshot image in the background."""
    _cache.prepare(image_id, start_name, owner)


def diff_of(image_id: str) -> LayerDiff | None:
    """The snapshot's diff (waiting for its build), or None: fork from the committed image."""
    return _cache.get(image_id)


def forget(image_id: str) -> None:
    """Drop a released snapshot's diff."""
    _cache.forget(image_id)
