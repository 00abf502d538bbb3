"""Disk limits for sandbox containers: the engine's own size quota where its storage driver has one, else a
hard per-file size limit plus a measurement of the container's writable layer after each command.

``SandboxConfig.disk_limit`` (default 2 GiB) applies in both cases:

* **quota** — ``storage_opt size`` where the engine supports it (overlay2 on XFS mounted with
  ``pquota``, btrfs, zfs; tried once per process). Writes past the limit fail with ENOSPC
  inside the container, as on a full disk, and the agent may delete files and go on.
* **elsewhere** (overlay2 on ext4, the common case) — a hard ``fsize`` ulimit of the same size
  (no file can grow past it: EFBIG/SIGXFSZ, and without CAP_SYS_RESOURCE the agent cannot raise
  it) and a :class:`DiskMeter` that ends the episode with :class:`DiskLimitError` once the
  writable layer holds more than the limit in total.
"""

from __future__ import annotations

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

__all__ = ["DiskMeter", "engine_enforces_size", "file_size_ulimit", "layer_size"]

GiB = 1 << 30
# Every file counts as at least one block, so that millions of empty files (inodes) count too.
BLOCK = 4096
# A walk at least this often, whatever the free-space trigger says (it can be masked by other
# containers freeing space at the same moment).
WALK_EVERY = 16
# Drivers whose containers take `storage_opt size`; overlay2 and vfs only on XFS with project quotas.
_QUOTA_DRIVERS = {"btrfs", "zfs", "devicemapper", "windowsfilter"}
_XFS_QUOTA_DRIVERS = {"overlay2", "vfs"}

_lock = threading.Lock()
_enforces: bool | None = None


def engine_enforces_size(image: str) -> bool:
    """Whether this engine enforces ``storage_opt size``: by its storage driver and backing filesystem,
    confirmed by creating (not starting) one container with it from ``image``; once per process."""
    global _enforces
    with _lock:
        if _enforces is None:
            _enforces = _try_storage_opt(image)
        return _enforces


def _try_storage_opt(image: str) -> bool:
    client = engine.api()
    info = client.info()
    driver = info.get("Driver", "")
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
    if driver not in _QUOTA_DRIVERS and not (driver in _XFS_QUOTA_DRIVERS and backing == "xfs"):
        return False
    try:
        trial = client.create_container(
            image,
            ["true"],
            labels=labels.owner_labels(labels.KIND_SANDBOX),
            host_config=client.create_host_config(storage_opt={"size": "1G"}),
        )["Id"]
    except docker.errors.APIError:
        return False  # e.g. XFS mounted without pquota
    client.remove_container(trial, force=True)
    return True


def file_size_ulimit(limit: int) -> docker.types.Ulimit:
    """The hard per-file limit: soft = hard, so the agent cannot raise it."""
    return docker.types.Ulimit(name="fsize", soft=limit, hard=limit)


def layer_size(root: str) -> int:
    """Bytes allocated under ``root`` (not following symlinks; hardlinked files once; each entry at least
    :data:`BLOCK`), tolerating entries that vanish during the walk."""
    total, seen, stack = 0, set(), [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                directory = stat.S_ISDIR(info.st_mode)
                if info.st_nlink > 1 and not directory:
                    if info.st_ino in seen:
                        continue
                    seen.add(info.st_ino)
                total += max(info.st_blocks * 512, BLOCK)
                if directory:
                    stack.append(entry.path)
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
        if not self._located:
            self._upper = self._locate()
            self._located = force = True
        if self._upper is None:
            self.layer = self._engine_size()
        else:
            self._host_check(force)
        if self.size > self.limit:
            raise DiskLimitError(
                f"the sandbox has written {self.size / GiB:.2f} GiB, over its disk limit of "
                f"{self.limit / GiB:g} GiB (SandboxConfig.disk_limit); the episode cannot go on"
            )

    def _host_check(self, force: bool) -> None:
        fs = os.statvfs(self._upper)
        free, inodes = fs.f_bfree * fs.f_frsize, fs.f_ffree
        grown = (self._free - free) + (self._inodes - inodes) * BLOCK
        self._checks += 1
        if force or self._checks >= WALK_EVERY or 2 * grown >= self.limit - self.size:
            self.layer = layer_size(self._upper)
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
