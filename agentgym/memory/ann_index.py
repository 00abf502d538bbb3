"""The memory store's approximate vector index: a usearch HNSW graph kept in step with the SQLite store and saved beside it.

Why usearch (unum-cloud/usearch, a maintained single-file HNSW with a pip wheel): it removes a key
for real (``Index.remove``), so updates and deletes are applied in place instead of as tombstones
that need periodic rebuilds (faiss's HNSW has no delete: an ``IndexIDMap`` over it can only mask
ids until the next rebuild; hnswlib only marks deleted and has no wheel here); it serialises to a
byte buffer, which lets the file carry this module's own header and checksum.

The store stays the only source of truth. The ``embeddings`` table's ``seq`` only grows and every
removed vector is logged in ``embedding_removals`` (by a trigger, in the removing transaction), so
an index that knows the last ``seq`` and the last removal it applied catches up with any number of
writer processes by reading what came after: removals first (an update is a removal plus a new
row for the same entry), then the new rows. Each process keeps its own index in memory; the file
is only a head start for the next process.

The file is ``MAGIC``, a JSON header (the stamp: which store, model, dimension and graph
parameters, the last seq and removal applied, the vector count), then the usearch bytes; the
header ends with a CRC-32 of the body. It is written to a temporary file that is fsynced and then
renamed over the old one, so a reader sees a whole file or the previous one; concurrent savers
each rename their own whole file. A file that is missing, torn, fails its checksum, belongs to
another store or model, is ahead of the store (a restored backup), or whose count disagrees with
the store after catching up is not trusted: the index is rebuilt from the store.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import threading
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.extras import requires

MAGIC = b"AGENTGYM-ANN\x00\x01\n"
# HNSW parameters, measured by benchmarks/memory.py (recall@10 against exact search, real MiniLM
# vectors, near-duplicates beyond 18.7k: ~53 noisy copies of each at 1M, as a bank of repeated
# tasks holds). 16 links and 64 insertion candidates gave 0.98 at 100k but 0.41 at 1M (0.63 with
# 512 search candidates): the clusters of near-duplicates trap the greedy search. 32 links and 128
# insertion candidates give 0.86 at 1M with 128 search candidates and 0.947-0.965 with 500-512,
# for a build of ~3.5 min per 1M vectors on one core. Search candidates grow with the index
# (search_expansion): 128 up to 128k vectors keeps small stores' queries fast (hybrid p50 is
# about 10 ms at 100k), one per 1,000 vectors beyond (1,000 at 1M: ~2 ms a search). 128 also
# keeps the harder low-dimensional clusters of tests/memory/test_ann_index.py at 0.97-0.99.
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 128
EXPANSION_SEARCH_MAX = 1024


def search_expansion(size: int) -> int:
    """HNSW search candidates for an index of ``size`` vectors: 128 up to 128k, then one per 1,000 vectors, at most 1,024."""
    return max(EXPANSION_SEARCH, min(EXPANSION_SEARCH_MAX, size // 1000))


# Save the in-memory index again once this share of its size changed since the file was written
# (and at least SAVE_MIN_CHANGES), so that a new process catches up from a recent file.
SAVE_CHANGED_SHARE = 0.1
SAVE_MIN_CHANGES = 1000
READ_CHUNK = 16384


@dataclass(frozen=True)
class Stamp:
    """What an index file holds: whose vectors, and up to which change of the store."""

    store_id: int
    model: str
    dim: int
    connectivity: int
    last_seq: int  # the highest embeddings.seq applied
    last_removal: int  # the highest embedding_removals.seq applied
    count: int


def index_path(store_path: Path, model: str) -> Path:
    """Where a store's index for ``model`` lives: beside the store, the model's name made file-safe."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", model)
    return store_path.with_name(f"{store_path.name}.{safe}.ann")


class CorruptIndex(ValueError):
    """An index file that cannot be trusted (torn, altered or not an index file)."""


def encode(stamp: Stamp, body: bytes) -> bytes:
    header = json.dumps({**asdict(stamp), "crc32": zlib.crc32(body)}).encode()
    return MAGIC + len(header).to_bytes(4, "little") + header + body


def decode(data: bytes | memoryview) -> tuple[Stamp, memoryview]:
    """(stamp, usearch body) of an index file's bytes; raises CorruptIndex."""
    view = memoryview(data)
    if bytes(view[: len(MAGIC)]) != MAGIC or len(view) < len(MAGIC) + 4:
        raise CorruptIndex("not a memory index file")
    start = len(MAGIC) + 4
    length = int.from_bytes(view[len(MAGIC) : start], "little")
    try:
        header = json.loads(bytes(view[start : start + length]))
        crc = header.pop("crc32")
        stamp = Stamp(**header)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptIndex(f"bad index header: {exc}") from None
    body = view[start + length :]
    if zlib.crc32(body) != crc:
        raise CorruptIndex("index body fails its checksum (torn or altered)")
    return stamp, body


def _new_usearch(dim: int):
    with requires("memory"):
        from usearch.index import Index
    return Index(
        ndim=dim,
        metric="cos",
        # 8-bit coordinates: a quarter of float32's memory and 4x faster to build (2.5k vs 0.6k
        # vectors/s on 2 cores); the store reranks candidates by their exact float32 cosine.
        dtype="i8",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=EXPANSION_SEARCH,
    )


class AnnIndex:
    """One model's vectors of one store as an HNSW graph, in memory, saved to ``path``.

    ``refresh(conn)`` brings it to ``conn``'s read snapshot (loading or rebuilding first if
    needed); ``search`` then answers from memory. Thread-safe.
    """

    def __init__(self, path: Path, model: str, dim: int, *, threads: int | None = None):
        self.path, self.model, self.dim = Path(path), model, dim
        # One thread by default: usearch's threaded add (2.26.1) now and then builds a graph in which a
        # stored vector is not found even by itself (2 of 300 builds of 300 vectors on 2 threads, none of
        # 300 on one; a CI run failed on it). Pass threads= to trade that for build speed.
        self.threads = threads or 1
        self.lock = threading.Lock()
        self.index: Any = None  # a usearch Index (imported only where the memory extra is installed)
        self.stamp: Stamp | None = None
        self.changes_since_save = 0
        self.rebuilds = 0  # how often the store had to be read whole (tests and benchmarks look)

    def __len__(self) -> int:
        return 0 if self.index is None else len(self.index)

    def refresh(self, conn: sqlite3.Connection, store_id: int, *, save: bool = True) -> None:
        with self.lock:
            if self.index is None or self.stamp.store_id != store_id:
                self._load_or_rebuild(conn, store_id)
            else:
                self._catch_up(conn)
            threshold = max(SAVE_MIN_CHANGES, SAVE_CHANGED_SHARE * len(self.index))
            if save and self.changes_since_save >= threshold:
                self.save()

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        """Entry ids of about the ``k`` nearest vectors, nearest first by the graph's 8-bit
        distances (callers rerank by exact cosine)."""
        with self.lock:
            if not len(self.index) or k <= 0:
                return np.empty(0, dtype=np.int64)
            expansion = search_expansion(len(self.index))
            if self.index.expansion_search != expansion:
                self.index.expansion_search = expansion
            matches = self.index.search(np.asarray(query, dtype=np.float32), min(k, len(self.index)), threads=1)
            return matches.keys.astype(np.int64)

    # -- keeping in step ---------------------------------------------------------------------

    def _load_or_rebuild(self, conn, store_id: int) -> None:
        try:
            stamp, body = decode(self.path.read_bytes())
            if (stamp.store_id, stamp.model, stamp.dim, stamp.connectivity) != (
                store_id,
                self.model,
                self.dim,
                CONNECTIVITY,
            ):
                raise CorruptIndex("index file is for another store, model or graph shape")
            last_seq, last_removal = _heads(conn)
            if stamp.last_seq > last_seq or stamp.last_removal > last_removal:
                raise CorruptIndex("index file is ahead of the store (a store restored from a backup?)")
            with requires("memory"):
                from usearch.index import Index
            index = Index.restore(body)
            if index is None or len(index) != stamp.count or index.ndim != self.dim:
                raise CorruptIndex("index body disagrees with its header")
            # a restored index forgets its search expansion; usearch's setter is declared after its
            # getter's sibling, which hides it from type checkers
            index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
            self.index, self.stamp, self.changes_since_save = index, stamp, 0
            self._catch_up(conn)
            if not _count_matches(conn, self.model, len(self.index)):
                raise CorruptIndex("index count disagrees with the store")
        except (OSError, CorruptIndex, ValueError, RuntimeError):
            self._rebuild(conn, store_id)

    def _rebuild(self, conn, store_id: int) -> None:
        self.rebuilds += 1
        self.index = _new_usearch(self.dim)
        last_seq, last_removal = _heads(conn)
        self.stamp = Stamp(store_id, self.model, self.dim, CONNECTIVITY, 0, last_removal, 0)
        self._add_rows(conn, last_seq)
        self.changes_since_save = max(SAVE_MIN_CHANGES, len(self.index))  # save what was just built

    def _catch_up(self, conn) -> None:
        removed = conn.execute(
            "SELECT seq, entry_id FROM embedding_removals WHERE seq > ? ORDER BY seq", (self.stamp.last_removal,)
        ).fetchall()
        if removed:
            keys = np.fromiter((entry_id for _, entry_id in removed), dtype=np.int64, count=len(removed))
            self.index.remove(np.unique(keys))
            self._restamp(last_removal=removed[-1][0])
            self.changes_since_save += len(removed)
        self._add_rows(conn, None)

    def _add_rows(self, conn, up_to: int | None) -> None:
        """Add the model's rows after the stamp's last seq (up to ``up_to``, else all)."""
        cursor = conn.execute(
            "SELECT seq, entry_id, vector FROM embeddings WHERE seq > ? AND seq <= ? AND model = ? "
            "AND length(vector) = ? ORDER BY seq",
            (self.stamp.last_seq, up_to if up_to is not None else 2**63 - 1, self.model, 4 * self.dim),
        )
        while rows := cursor.fetchmany(READ_CHUNK):
            seqs, ids, blobs = zip(*rows)
            keys = np.asarray(ids, dtype=np.int64)
            if len(self.index):  # an entry has one vector: a key still present was re-added after a removal
                present = keys[self.index.contains(keys)]
                if len(present):
                    self.index.remove(present)
            vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), self.dim)
            self.index.add(keys, vectors, threads=self.threads)
            self.changes_since_save += len(rows)
            self._restamp(last_seq=seqs[-1])
        if up_to is not None and up_to > self.stamp.last_seq:
            self._restamp(last_seq=up_to)  # rows of other models (or none) up to the head
        self._restamp(count=len(self.index))

    def _restamp(self, **changes) -> None:
        self.stamp = Stamp(**{**asdict(self.stamp), **changes})

    # -- the file ----------------------------------------------------------------------------

    def save(self) -> bool:
        """Write the index to its file atomically; False (and nothing changed) when it cannot be."""
        data = encode(self.stamp, bytes(self.index.save()))
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            _fsync_directory(self.path.parent)
        except OSError:  # a read-only directory, a full disk: the next process rebuilds
            temporary.unlink(missing_ok=True)
            return False
        self.changes_since_save = 0
        _remove_orphans(self.path)
        return True


def _heads(conn) -> tuple[int, int]:
    return conn.execute(
        "SELECT (SELECT coalesce(max(seq), 0) FROM embeddings), (SELECT coalesce(max(seq), 0) FROM embedding_removals)"
    ).fetchone()


def _count_matches(conn, model: str, count: int) -> bool:
    """Whether the store holds ``count`` vectors of ``model``."""
    # Counted on the small entry_id index; only a store that also holds another model's vectors
    # pays for a scan of the table.
    if conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] == count:
        return True
    return conn.execute("SELECT count(*) FROM embeddings WHERE model = ?", (model,)).fetchone()[0] == count


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_orphans(path: Path) -> None:
    """Temporary files of savers that died before their rename (their pid is gone)."""
    for orphan in path.parent.glob(f".{path.name}.*.tmp"):
        pid = orphan.name[len(path.name) + 2 :].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            orphan.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
