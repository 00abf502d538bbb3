"""Disk limits for sandbox containers: the engine's own size quota where its storage driver has one, else a
hard per-file size limit plus a measurement of the container's writable layer after each command.

``SandboxConfig.disk_limit`` (default 2 GiB) applies in both cases:

* **quota** — ``storage_opt size`` where the engine supports it (overlay2 on XFS mounted with
  ``pquota``, btrfs — the data root ``AGENTGYM_DOCKER_QUOTA=btrfs scripts/setup.sh`` gives a
  dockerd it starts —, zfs;
  tried once per process; :func:`size_quota`). Writes past the limit fail with ENOSPC or EDQUOT
  inside the container, as on a full disk, and the agent may delete files and go on. A snapshot
  measures what its layers hold, which its forks' quotas leave out.
* **elsewhere** (overlay2 on ext4, the common case) — a hard ``fsize`` ulimit of the same size
  (no file can grow past it: EFBIG/SIGXFSZ, and without CAP_SYS_RESOURCE the agent cannot raise
  it) and a :class:`DiskMeter` that ends the episode with :class:`DiskLimitError` once the
  writable layer holds more than the limit in total.
"""

from __future__ import annotations

import errno
import os
import stat
import threading

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors
    import docker.types
    import requests.exceptions

from agentgym.sandbox import engine, labels
from agentgym.sandbox.base import DiskLimitError

__all__ = ["DiskMeter", "engine_enforces_size", "file_size_ulimit", "layer_size", "size_quota"]

GiB = 1 << 30
# Every file counts as at least one block, so that millions of empty files (inodes) count too.
BLOCK = 4096
# A walk at least this often, whatever the free-space trigger says (it can be masked by other
# containers freeing space at the same moment).
WALK_EVERY = 16
# Drivers whose containers take `storage_opt size`; overlay2 and vfs only on XFS with project quotas.
_QUOTA_DRIVERS = {"btrfs", "zfs", "devicemapper", "windowsfilter"}
_XFS_QUOTA_DRIVERS = {"overlay2", "vfs"}
# Drivers whose quota counts the image's bytes too (btrfs limits the subvolume's referenced bytes, and a
# container's subvolume is a snapshot of its image's).
_IMAGE_COUNTING_DRIVERS = {"btrfs"}
# Slack for what a quota counts beyond file data (btrfs: the subvolume's own metadata).
_QUOTA_SLACK = 16 * 1024**2

_lock = threading.Lock()
_driver: str | None = None  # the engine's storage driver where it enforces `storage_opt size`, else ""


def engine_enforces_size(image: str) -> bool:
    """Whether this engine enforces ``storage_opt size``: by its storage driver and backing filesystem,
    confirmed by creating (not starting) one container with it from ``image``; once per process."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = _try_storage_opt(image)
        return bool(_driver)


def size_quota(image: str, limit: int, disk_used: int = 0) -> int | None:
    """The ``storage_opt size`` that lets a container of ``image`` write ``limit - disk_used`` bytes (``disk_used``:
    what the image's snapshot layers hold, written by the sandbox's ancestors); None where the engine has no quota.

    At least 1 MiB: a snapshot taken at the very limit leaves its forks that much room. Where the quota counts
    the image too (btrfs), it is the image's size plus that.
    """
    if not engine_enforces_size(image):
        return None
    room = max(limit - disk_used, 1024**2)
    return room + _image_size(image) + _QUOTA_SLACK if _driver in _IMAGE_COUNTING_DRIVERS else room


def _image_size(image: str) -> int:
    with engine.engine_errors(f"inspecting the image {image!r}"):
        return int(engine.api().inspect_image(image).get("Size") or 0)


def _try_storage_opt(image: str) -> str:
    client = engine.api()
    info = client.info()
    driver = info.get("Driver", "")
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
    if driver not in _QUOTA_DRIVERS and not (driver in _XFS_QUOTA_DRIVERS and backing == "xfs"):
        return ""
    size = GiB + (_image_size(image) + _QUOTA_SLACK if driver in _IMAGE_COUNTING_DRIVERS else 0)
    try:
        trial = client.create_container(
            image,
            ["true"],
            labels=labels.owner_labels(labels.KIND_SANDBOX),
            host_config=client.create_host_config(storage_opt={"size": str(size)}),
        )["Id"]
    except docker.errors.APIError:
        return ""  # e.g. XFS mounted without pquota
    client.remove_container(trial, force=True)
    return driver


def file_size_ulimit(limit: int) -> docker.types.Ulimit:
    """The hard per-file limit: soft = hard, so the agent cannot raise it."""
    return docker.types.Ulimit(name="fsize", soft=limit, hard=limit)


# A relative path at least this many bytes long is opened from a nearer open ancestor instead (PATH_MAX is 4096).
_PATH_BUDGET = 2048
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def layer_size(root: str) -> int:
    """Bytes allocated under ``root`` (not following symlinks; hardlinked files once; each entry at least
    :data:`BLOCK`), tolerating entries that vanish during the walk.

    Every directory counts, however deep: one nested past ``PATH_MAX`` is opened relative to an open
    ancestor's descriptor, and the walk keeps no recursion. A directory that is there but cannot be
    opened (out of descriptors, say) raises :class:`OSError`: what cannot be measured is never counted
    as nothing.
    """
    total, seen = 0, set[int]()
    holders: dict[int, int] = {}  # an open ancestor's descriptor -> the pending directories opened from it
    stack: list[tuple[int | None, str]] = [(None, root)]  # (ancestor descriptor or None, path from it)

    def let_go(anchor: int | None) -> None:
        if anchor is not None:
            holders[anchor] -= 1
            if not holders[anchor]:
                del holders[anchor]
                os.close(anchor)

    try:
        while stack:
            anchor, path = stack.pop()
            try:
                try:
                    fd = os.open(path, _OPEN_DIR, dir_fd=anchor)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # vanished, or replaced by a file, since it was listed
                except OSError as exc:
                    if exc.errno == errno.ELOOP:  # replaced by a symlink (O_NOFOLLOW)
                        continue
                    raise
                holders[fd] = 1  # this walk's own hold, let go once its entries are listed
                try:
                    total += _list(fd, path, anchor, seen, stack, holders)
                finally:
                    let_go(fd)
            finally:
                let_go(anchor)
    finally:
        for anchor in holders:
            os.close(anchor)
    return total


def _list(
    fd: int,
    path: str,
    anchor: int | None,
    seen: set[int],
    stack: list[tuple[int | None, str]],
    holders: dict[int, int],
) -> int:
    """The bytes of the entries of the directory open as ``fd`` (at ``path`` from ``anchor``); its
    subdirectories go on ``stack``, each from ``anchor`` while the path is short, else from ``fd``."""
    total = 0
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            directory = stat.S_ISDIR(info.st_mode)
            if info.st_nlink > 1 and not directory:
                if info.st_ino in seen:
                    continue
                seen.add(info.st_ino)
            total += max(info.st_blocks * 512, BLOCK)
            if not directory:
                continue
            child = os.path.join(path, entry.name)
            if len(os.fsencode(child)) < _PATH_BUDGET:
                if anchor is not None:
                    holders[anchor] += 1
                stack.append((anchor, child))
            else:
                holders[fd] += 1
                stack.append((fd, entry.name))
    return total


class DiskMeter:
    """The size of one container's writable layer, checked against a limit after each command.

    Where the layer's directory is readable here (the engine runs on this machine and this process
    may read its data root; overlay2's ``UpperDir``), a measurement is :func:`layer_size` of it,
    and a check costs one ``statvfs`` unless the filesystem under it lost free space (or inodes,
    at :data:`BLOCK` each) worth half of what the sandbox has left below its limit since the last
    walk, :data:`WALK_EVERY` checks have passed, or the check is forced. Elsewhere the engine
    measures on every check (``SizeRw``: file sizes as written, so sparse files count in full).
    """

    def __init__(self, container_id: str, limit: int, base: int = 0):
        self.container_id = container_id
        self.limit = limit
        self.base = base  # bytes the container's image holds above the base image (its snapshot layers)
        self.layer = 0
        self._located = False
        self._upper: str | None = None
        self._free = self._inodes = 0
        self._checks = 0

    @property
    def size(self) -> int:
        """The bytes written: the snapshot layers' and the writable layer's, as last measured."""
        return self.base + self.layer

    def check(self, *, force: bool = False) -> None:
        """Raise :class:`DiskLimitError` when the layer is over the limit."""
        self.measure(force=force)
        if self.size > self.limit:
            raise DiskLimitError(
                f"the sandbox has written {self.size / GiB:.2f} GiB, over its disk limit of "
                f"{self.limit / GiB:g} GiB (SandboxConfig.disk_limit); the episode cannot go on"
            )

    def measure(self, *, force: bool = False) -> int:
        """:attr:`size`, measured again where a check would measure it (always with ``force``)."""
        if not self._located:
            self._upper = self._locate()
            self._located = force = True
        if self._upper is None:
            self.layer = self._engine_size()
        else:
            self._host_check(force)
        return self.size

    @property
    def watchable(self) -> bool:
        """Whether :meth:`over_while_running` is cheap: the layer is read here (one ``statvfs`` a poll) rather
        than asked of the engine (which walks it for every answer)."""
        if not self._located:
            self.measure(force=True)
        return self._upper is not None

    def over_while_running(self) -> bool:
        """Whether the layer is over the limit, polled while a command runs (where :attr:`watchable`): the
        test a check makes (a walk only once free space dropped by half of what is left), not counted as one."""
        self._host_check(force=False, counted=False)
        return self.size > self.limit

    def _host_check(self, force: bool, *, counted: bool = True) -> None:
        fs = os.statvfs(self._upper)
        free, inodes = fs.f_bfree * fs.f_frsize, fs.f_ffree
        grown = (self._free - free) + (self._inodes - inodes) * BLOCK
        self._checks += counted
        if force or self._checks >= WALK_EVERY or 2 * grown >= self.limit - self.size:
            try:
                self.layer = layer_size(self._upper)
            except OSError as exc:  # a tree built not to be measured is the agent's doing
                raise DiskLimitError(
                    f"the sandbox's files cannot be measured against its disk limit ({exc.strerror or exc}); "
                    "the episode cannot go on"
                ) from exc
            self._free, self._inodes, self._checks = free, inodes, 0
        else:  # what others free meanwhile must not hide what this sandbox writes later
            self._free, self._inodes = max(self._free, free), max(self._inodes, inodes)

    def _locate(self) -> str | None:
        with engine.engine_errors("inspecting the sandbox container"):
            graph = engine.api().inspect_container(self.container_id).get("GraphDriver") or {}
        upper = (graph.get("Data") or {}).get("UpperDir") if graph.get("Name") == "overlay2" else None
        return upper if upper and os.path.isdir(upper) and os.access(upper, os.R_OK | os.X_OK) else None

    def _engine_size(self) -> int:
        client = engine.api()
        try:
            response = client._get(client._url("/containers/{0}/json", self.container_id), params={"size": 1})
            return int(client._result(response, True).get("SizeRw") or 0)
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return self.layer  # the container's state is the exec's business; keep the last measurement
