"""Snapshots: the reference-counted handle to an env's state at a turn boundary, and the bytes a snapshot travels as.

:class:`Snapshot` is what :meth:`agentgym.core.AgentEnv.snapshot` returns and
:meth:`~agentgym.core.AgentEnv.restore` / :meth:`~agentgym.core.AgentEnv.fork` take; its payload is
the env's own (the episode bookkeeping and the backend's capture) and stays in this process.
:func:`encode_snapshot` and :func:`decode_snapshot` are the format of
:meth:`~agentgym.core.AgentEnv.export_snapshot`'s bytes: a header (format version, env kind, task
id, turn, body size and SHA-256) and a pickled body, checked whole before anything is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

__all__ = [
    "SNAPSHOT_FORMAT",
    "Snapshot",
    "SnapshotError",
    "SnapshotMismatchError",
    "SnapshotReleasedError",
    "decode_snapshot",
    "encode_snapshot",
]


class SnapshotError(RuntimeError):
    """A snapshot cannot be used as asked."""


class SnapshotReleasedError(SnapshotError):
    """The snapshot's last reference was released; its resources are gone."""


class SnapshotMismatchError(SnapshotError):
    """The snapshot belongs to another env kind or task than the env it is restored into."""


class Snapshot:
    """An opaque, reference-counted handle to an env's state at a turn boundary.

    The creator holds one reference. :meth:`retain` adds one (e.g. for each branch that will
    fork from it), :meth:`release` drops one; at zero the backing resources (a committed
    container image, a database copy) are freed and the snapshot can no longer be used. A
    snapshot that is garbage-collected while still referenced frees its resources too.
    ``with env.snapshot() as snap:`` releases the creator's reference on exit.

    :attr:`metadata` is JSON-serialisable (id, kind, task, turn, backend details) for logs and
    trajectory stores; the state itself stays in this process.
    """

    def __init__(
        self,
        *,
        kind: str,
        task_id: str,
        turn: int,
        payload: Any,
        release: Callable[[], None] | None = None,
        metadata: dict | None = None,
    ):
        self.id = uuid.uuid4().hex
        self.kind = kind
        self.task_id = task_id
        self.turn = turn
        self.created_at = time.time()
        self._payload = payload
        self._refs = 1
        self._lock = threading.Lock()
        self._extra_metadata = dict(metadata or {})
        self._exported: bytes | None = None  # export_snapshot's bytes, made once per snapshot
        # finalize() runs the release at most once, whether from release() or from GC.
        self._finalizer = weakref.finalize(self, release or (lambda: None))

    @property
    def refcount(self) -> int:
        return self._refs

    @property
    def released(self) -> bool:
        return self._refs == 0

    @property
    def payload(self) -> Any:
        if self.released:
            raise SnapshotReleasedError(f"snapshot {self.id[:8]} (turn {self.turn}) was released")
        return self._payload

    @property
    def metadata(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "task_id": self.task_id,
            "turn": self.turn,
            "created_at": self.created_at,
            **self._extra_metadata,
        }

    def retain(self) -> Snapshot:
        with self._lock:
            if self._refs == 0:
                raise SnapshotReleasedError(f"snapshot {self.id[:8]} was released; it cannot be retained")
            self._refs += 1
        return self

    def release(self) -> None:
        """Drop one reference; releasing an already released snapshot does nothing."""
        with self._lock:
            if self._refs == 0:
                return
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._payload = self._exported = None
            self._finalizer()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else f"refs={self._refs}"
        return f"Snapshot({self.kind}, task={self.task_id!r}, turn={self.turn}, {state})"


#: The version of :meth:`AgentEnv.export_snapshot`'s bytes; :meth:`AgentEnv.import_snapshot` reads this one only.
SNAPSHOT_FORMAT = 1
_SNAPSHOT_MAGIC = b"agentgym-snapshot\n"
_HEADER_FIELDS = {"format": int, "kind": str, "task_id": str, "turn": int, "size": int, "sha256": str}


def encode_snapshot(snapshot: Snapshot, portable: Callable[[], Any]) -> bytes:
    """``snapshot`` as bytes whose body is the pickle of ``portable()`` (its picklable state), made once per snapshot.

    A snapshot is immutable, so it keeps the bytes until its release: a second export (another
    branch moving) costs nothing and ``portable`` is not called again. Raises
    :class:`SnapshotError` when the state does not pickle.
    """
    if snapshot._exported is None:
        try:
            body = pickle.dumps(portable(), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # what pickle raises for unpicklable state
            raise SnapshotError(
                f"a {snapshot.kind} snapshot cannot be exported: its state does not pickle ({exc})"
            ) from exc
        header = {
            "format": SNAPSHOT_FORMAT,
            "kind": snapshot.kind,
            "task_id": snapshot.task_id,
            "turn": snapshot.turn,
            "size": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        snapshot._exported = _SNAPSHOT_MAGIC + json.dumps(header).encode() + b"\n" + body
    return snapshot._exported


def decode_snapshot(data: bytes, kind: str) -> tuple[dict, Any]:
    """The header and the unpickled body of :func:`encode_snapshot`'s bytes, for an env of ``kind``.

    Raises :class:`SnapshotMismatchError` for another env kind and :class:`SnapshotError` for data
    that is not a whole snapshot of a format this version reads. The header and checksum are
    checked before anything is unpickled; the bytes must be trusted (see
    :meth:`agentgym.core.AgentEnv.export_snapshot`).
    """
    header, body = _parse(data)
    if header["kind"] != kind:
        raise SnapshotMismatchError(f"snapshot of a {header['kind']} cannot be imported into a {kind}")
    try:
        return header, pickle.loads(body)
    except Exception as exc:  # the checksum matched, so this is data of another agentgym version
        raise SnapshotError(f"snapshot data of a {kind} does not load here: {exc}") from exc


def _parse(data: bytes) -> tuple[dict, bytes]:
    """The header and body of exported snapshot bytes, checked whole (:class:`SnapshotError` otherwise)."""
    if (
        not isinstance(data, bytes | bytearray | memoryview)
        or not bytes(data[: len(_SNAPSHOT_MAGIC)]) == _SNAPSHOT_MAGIC
    ):
        raise SnapshotError("not agentgym snapshot data (made by AgentEnv.export_snapshot)")
    data = bytes(data)
    header_line, newline, body = data[len(_SNAPSHOT_MAGIC) :].partition(b"\n")
    try:
        header = json.loads(header_line) if newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or any(not isinstance(header.get(k), t) for k, t in _HEADER_FIELDS.items()):
        raise SnapshotError("snapshot data has a damaged header")
    if header["format"] != SNAPSHOT_FORMAT:
        raise SnapshotError(f"snapshot data is format {header['format']}; this agentgym reads format {SNAPSHOT_FORMAT}")
    if len(body) != header["size"]:
        raise SnapshotError(
            f"snapshot data is truncated or padded: {len(body)} bytes of body, header says {header['size']}"
        )
    if hashlib.sha256(body).hexdigest() != header["sha256"]:
        raise SnapshotError("snapshot data is corrupt: its checksum does not match")
    return header, body
