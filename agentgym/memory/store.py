"""Durable memory store: entries in one SQLite file, retrieved by BM25 and embeddings fused by RRF.

One file, no server. The file is in WAL mode, so readers never block writers; every write is a
``BEGIN IMMEDIATE`` transaction, so concurrent writers (rollout worker processes, threads) queue on
SQLite's write lock instead of failing half-way, and a writer killed at any instant leaves either
its whole transaction or none of it. Everything derived from an entry (the FTS5 index, the tag
table, the stale-vector cleanup) is maintained by triggers inside the same transaction, so no crash
can leave the index out of step with the table.

Retrieval:

* BM25 over ``title`` (weighted ``TITLE_WEIGHT``) and ``text`` with FTS5 (porter stemming). User
  text is never parsed as FTS5 syntax: it is cut into word tokens, each quoted, joined by ``OR``.
  FTS5 scores every row that matches any query term (about 1.5 us each), so a term found in most
  entries would make every query O(store size). Query terms are therefore pruned by document
  frequency: rarest first, while the matching rows add up to a budget (``postings_budget``:
  10k postings up to 100k entries, growing with the square root of the store beyond); when even
  the rarest term matches more, only the newest entries are scored (``plan_postings``). Common
  terms carry little BM25 weight, so this costs some ranking quality (benchmarks/memory.py
  reports overlap@10 with unpruned BM25) for bounded latency; the frequencies come from FTS5's
  own vocabulary and are cached per process until the store grows by a quarter.
* Cosine similarity over per-entry float32 vectors (optional; needs an ``Embedder``). Vectors live
  in the ``embeddings`` table. Below ``ANN_MIN_VECTORS`` they are searched exactly, by brute force
  over a per-process numpy matrix (appended to incrementally; a deleted or replaced vector makes
  the next search reload it, as a delete counter maintained by a trigger tells). From there on an
  approximate HNSW index (``ann_index``, saved beside the store and kept in step with it through
  the ``embedding_removals`` log) proposes candidates that are reranked by exact cosine; a
  filtered search uses it while the filter passes enough of its neighbours and scans the passing
  entries exactly otherwise.
* Both rankings are fused by reciprocal rank (``rrf``). Filters (kind, env, family, tags) are
  applied inside SQL / before the top-k cut, so ``k`` results come back whenever ``k`` match.

Schema changes are numbered migrations (``MIGRATIONS``; ``PRAGMA user_version`` holds the number
applied); opening a file migrates it, in one transaction; a file from a newer version is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from agentgym.memory.ann_index import AnnIndex, index_path
from agentgym.memory.embeddings import Embedder, normalise

RRF_K = 60
TITLE_WEIGHT = 2.0
# Each retriever's depth in hybrid search: fusion needs candidates beyond the final k.
HYBRID_DEPTH = 50
MAX_QUERY_TERMS = 64
# On 100k synthetic entries (benchmarks/memory.py, 2 cores), budget 5k / 10k / 20k / unpruned:
# BM25 p50 4.2 / 5.6 / 12.5 / ~600 ms; the entry a query was drawn from ranks first for
# 59 / 71 / 78 / ~76-80 % of queries. 10k keeps p50 under 10 ms with most of the quality.
POSTINGS_BUDGET = 10_000
BUDGET_BASE_SIZE = 100_000  # the store size at which POSTINGS_BUDGET was chosen (see postings_budget)
DF_CACHE_SIZE = 100_000
QUERY_CACHE_SIZE = 256
T = TypeVar("T")
TOKENIZE = "porter unicode61"  # the index's tokenizer; query terms are stemmed with it too
BUSY_TIMEOUT_S = 60.0
PAGE_SIZE = 500
MODES = ("auto", "bm25", "embedding", "hybrid")
# Below this many vectors an exact scan is fast enough (~2 ms) and exact; from it on, searches go
# to the approximate index (benchmarks/memory.py times both at each size).
ANN_MIN_VECTORS = 20_000
# A filtered search over the approximate index asks for this many times ``depth`` neighbours; if
# fewer than ``depth`` pass the filter, it scans the passing entries exactly instead.
FILTER_OVERSAMPLE = 10
# The index's 8-bit distances order near neighbours only roughly: it is asked for this many times
# ``depth`` candidates, which are reranked by exact cosine.
RERANK_FACTOR = 2

ENTRY_COLUMNS = ("id", "kind", "title", "text", "env", "family", "task", "tags", "data", "created", "updated")

MIGRATIONS: list[str] = [
    # v1: entries + external-content FTS5 index + tag table + vectors, all kept in step by triggers.
    f"""
    CREATE TABLE entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids are never reused: other records point at them
        kind TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL,
        env TEXT NOT NULL DEFAULT '',
        family TEXT NOT NULL DEFAULT '',
        task TEXT NOT NULL DEFAULT '',
        tags TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags)),
        data TEXT NOT NULL DEFAULT '{{}}' CHECK (json_valid(data)),
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE INDEX entries_kind ON entries(kind);
    CREATE INDEX entries_env ON entries(env);
    CREATE INDEX entries_family ON entries(family);

    CREATE TABLE entry_tags (
        tag TEXT NOT NULL,
        entry_id INTEGER NOT NULL,
        PRIMARY KEY (tag, entry_id)
    ) WITHOUT ROWID;

    -- seq only grows, so a process can load the vectors added since it last looked.
    CREATE TABLE embeddings (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        entry_id INTEGER NOT NULL UNIQUE,
        model TEXT NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO counters VALUES ('embedding_deletes', 0);

    CREATE VIRTUAL TABLE entries_fts USING fts5(
        title, text, content='entries', content_rowid='id', tokenize='{TOKENIZE}');
    INSERT INTO entries_fts(entries_fts, rank) VALUES ('rank', 'bm25({TITLE_WEIGHT}, 1.0)');

    CREATE TRIGGER entries_after_insert AFTER INSERT ON entries BEGIN
        INSERT INTO entries_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
        INSERT OR IGNORE INTO entry_tags(tag, entry_id) SELECT value, new.id FROM json_each(new.tags);
    END;
    CREATE TRIGGER entries_after_delete AFTER DELETE ON entries BEGIN
        INSERT INTO entries_fts(entries_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
        DELETE FROM entry_tags
            WHERE tag IN (SELECT value FROM json_each(old.tags)) AND entry_id = old.id;
        DELETE FROM embeddings WHERE entry_id = old.id;
    END;
    CREATE TRIGGER entries_after_text_update AFTER UPDATE OF title, text ON entries BEGIN
        INSERT INTO entries_fts(entries_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
        INSERT INTO entries_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
        DELETE FROM embeddings WHERE entry_id = old.id;  -- the vector described the old text
    END;
    CREATE TRIGGER entries_after_tags_update AFTER UPDATE OF tags ON entries BEGIN
        DELETE FROM entry_tags
            WHERE tag IN (SELECT value FROM json_each(old.tags)) AND entry_id = old.id;
        INSERT OR IGNORE INTO entry_tags(tag, entry_id) SELECT value, new.id FROM json_each(new.tags);
    END;
    CREATE TRIGGER embeddings_after_delete AFTER DELETE ON embeddings BEGIN
        UPDATE counters SET value = value + 1 WHERE name = 'embedding_deletes';
    END;
    """,
    # v2: a log of removed vectors, so that an approximate index (ann_index) applies deletes and
    # updates incrementally, and a random id that tells an index file which store it belongs to.
    """
    CREATE TABLE embedding_removals (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry_id INTEGER NOT NULL);
    DROP TRIGGER embeddings_after_delete;
    CREATE TRIGGER embeddings_after_delete AFTER DELETE ON embeddings BEGIN
        UPDATE counters SET value = value + 1 WHERE name = 'embedding_deletes';
        INSERT INTO embedding_removals(entry_id) VALUES (old.entry_id);
    END;
    INSERT INTO counters VALUES ('store_id', abs(random() % 9007199254740992));
    """,
]

# Connections inherited through fork(): closing one in the child could release the parent's (or
# the child's own) POSIX locks on the file, so they are kept referenced and never used again.
_FORK_ABANDONED: list[sqlite3.Connection] = []


class SchemaError(RuntimeError):
    """The file's schema version cannot be used by this code."""


@dataclass
class Entry:
    """One memory: an episode summary, a skill, ... (``kind`` is a free string)."""

    kind: str
    text: str
    title: str = ""
    env: str = ""
    family: str = ""
    task: str = ""
    tags: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    id: int | None = None
    # Set by the store (time.time()); a non-zero ``created`` passed to add() is kept (imports).
    created: float = 0.0
    updated: float = 0.0


@dataclass
class Hit:
    entry: Entry
    score: float  # fused RRF score, higher is better
    ranks: dict[str, int]  # 1-based rank in each retriever that returned the entry


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each id scores sum(1 / (k + rank)) over the rankings it is in.

    Ranks count from 1; an id repeated within one ranking counts once, at its best rank. Best
    first; equal scores keep the order in which the ids first appear.
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        seen = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


def query_tokens(text: str) -> list[str]:
    """The distinct lowercased word tokens of free text (at most MAX_QUERY_TERMS)."""
    return list(dict.fromkeys(token.lower() for token in re.findall(r"\w+", text)))[:MAX_QUERY_TERMS]


def fts_query(tokens: Sequence[str]) -> str:
    """An FTS5 MATCH expression matching any of ``tokens``: each quoted, joined by OR.

    Quoting makes every token a plain string to FTS5 (``AND``, ``*``, ``-``, ``"``, ``(`` lose
    their meaning); ``\\w`` tokens contain no quote, so no escaping is needed.
    """
    return " OR ".join(f'"{token}"' for token in tokens)


def prune_terms(frequencies: Sequence[int], budget: int) -> list[int]:
    """Indices of the terms to keep: rarest first while their frequencies sum to at most
    ``budget``, and always the rarest one; in the original order."""
    kept: list[int] = []
    total = 0
    for index in sorted(range(len(frequencies)), key=lambda i: frequencies[i]):
        if kept and total + frequencies[index] > budget:
            break
        kept.append(index)
        total += frequencies[index]
    return sorted(kept)


def postings_budget(size: int) -> int:
    """Postings one BM25 query may score in a store whose ids reach ``size``.

    ``POSTINGS_BUDGET`` up to ``BUDGET_BASE_SIZE`` entries, then growing with the square root of
    the size: every posting list lengthens with the store, so a fixed budget would keep fewer
    and fewer terms (at 1M entries a 10k budget kept so few that ranking @1 fell from 0.71 to
    0.22), while a budget growing with the size would make the cost grow with it.
    """
    return max(POSTINGS_BUDGET, int(POSTINGS_BUDGET * math.sqrt(size / BUDGET_BASE_SIZE)))


def plan_postings(frequencies: Sequence[int], budget: int) -> tuple[list[int], float]:
    """(indices of the terms to keep, share of the newest entries to score).

    Terms are kept as ``prune_terms`` keeps them. When even the rarest kept term matches more
    than ``budget`` entries, only the newest ``budget / its frequency`` share of the store is
    scored (FTS5 seeks a rowid bound in every posting list), so no query reads much more than
    the budget (the search widens the share while fewer than ``k`` entries match in it).
    """
    kept = prune_terms(frequencies, budget)
    postings = sum(frequencies[i] for i in kept)
    return kept, 1.0 if postings <= budget else budget / postings


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, largest first."""
    k = min(k, len(scores))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.argsort(-scores[part], kind="stable")]


def split_statements(script: str) -> list[str]:
    """SQL statements of a script (trigger bodies kept whole); executescript() would COMMIT."""
    statements, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                statements.append(pending.strip())
            pending = ""
    return statements


def filter_sql(kind=None, env=None, family=None, tags: Iterable[str] | str = ()) -> tuple[str, list]:
    """A WHERE condition over ``entries AS e`` (and its parameters); "" when nothing is filtered.

    kind/env/family take one value or a collection of accepted values; an entry must carry every
    tag in ``tags``.
    """
    clauses, params = [], []
    for column, value in (("kind", kind), ("env", env), ("family", family)):
        if value is None:
            continue
        values = [value] if isinstance(value, str) else list(value)
        clauses.append(f"e.{column} IN ({', '.join('?' * len(values))})")
        params += values
    for tag in dict.fromkeys([tags] if isinstance(tags, str) else tags):
        clauses.append("e.id IN (SELECT entry_id FROM entry_tags WHERE tag = ?)")
        params.append(tag)
    return " AND ".join(clauses), params


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _retry_busy(fn: Callable[[], object]) -> object:
    """fn(), retried while SQLite reports busy: the busy handler covers most waits, not all
    (e.g. a WAL file being recovered by another opener)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.001, 0.02))


def _embedding_text(title: str, text: str) -> str:
    return f"{title}\n{text}" if title else text


def _model_name(embedder: Embedder) -> str:
    return getattr(embedder, "name", None) or type(embedder).__name__


def _entry_row(entry: Entry, now: float) -> tuple:
    tags = list(dict.fromkeys(str(tag) for tag in entry.tags))
    return (
        entry.kind,
        entry.title,
        entry.text,
        entry.env,
        entry.family,
        entry.task,
        json.dumps(tags),
        json.dumps(entry.data),
        entry.created or now,
        now,
    )


def _to_entry(row: Sequence) -> Entry:
    values = dict(zip(ENTRY_COLUMNS, row))
    values["tags"] = json.loads(values["tags"])
    values["data"] = json.loads(values["data"])
    return Entry(**values)


class _VectorCache:
    """One model's vectors from the ``embeddings`` table as an in-memory matrix.

    Appends rows with a larger ``seq`` than seen (capacity doubles, so n inserts cost O(n)); when
    the delete counter moved, some cached row is stale and the matrix is rebuilt from scratch
    (locating a deleted row would cost a scan anyway).
    """

    def __init__(self, model: str, dim: int):
        self.model, self.dim = model, dim
        self.lock = threading.Lock()
        self._reset(deletes=-1)

    def _reset(self, deletes: int) -> None:
        self.deletes = deletes
        self.last_seq = 0
        self.size = 0
        self.ids = np.empty(0, dtype=np.int64)
        self.matrix = np.empty((0, self.dim), dtype=np.float32)

    def refresh(self, conn: sqlite3.Connection) -> tuple[np.ndarray, np.ndarray]:
        """(entry ids, vectors) as of ``conn``'s current read snapshot."""
        deletes = conn.execute("SELECT value FROM counters WHERE name = 'embedding_deletes'").fetchone()[0]
        with self.lock:
            if deletes != self.deletes:
                self._reset(deletes)
            cursor = conn.execute(
                "SELECT seq, entry_id, vector FROM embeddings WHERE seq > ? AND model = ? "
                "AND length(vector) = ? ORDER BY seq",
                (self.last_seq, self.model, 4 * self.dim),
            )
            while rows := cursor.fetchmany(4096):  # in pieces: a full load is 1.5 GB at 1M entries
                seqs, ids, blobs = zip(*rows)
                self._grow(self.size + len(rows))
                self.ids[self.size : self.size + len(rows)] = ids
                self.matrix[self.size : self.size + len(rows)] = np.frombuffer(
                    b"".join(blobs), dtype=np.float32
                ).reshape(len(rows), self.dim)
                self.size += len(rows)
                self.last_seq = seqs[-1]
            return self.ids[: self.size], self.matrix[: self.size]

    def _grow(self, needed: int) -> None:
        if needed <= len(self.ids):
            return
        capacity = max(needed, 2 * len(self.ids), 1024)
        ids = np.empty(capacity, dtype=np.int64)
        matrix = np.empty((capacity, self.dim), dtype=np.float32)
        ids[: self.size] = self.ids[: self.size]
        matrix[: self.size] = self.matrix[: self.size]
        self.ids, self.matrix = ids, matrix


class _Background(Generic[T]):
    """``fn(*args)`` running in a thread of its own; ``result()`` waits for it and returns its
    value or raises its exception. A thread per call, not a pool: a store survives ``fork()``,
    and a pool's threads would not."""

    def __init__(self, fn: Callable[..., T], *args):
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., T], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # set whenever no error was


class MemoryStore:
    """Entries in one SQLite file, safe for concurrent writers (processes and threads).

    ``embedder`` enables embedding and hybrid search: entries added or re-texted through this
    store get a vector in the same transaction (computed before the write lock is taken).
    ``read_only`` opens the file with ``mode=ro`` and never migrates it. Each thread gets its own
    connection; a store object may be shared across threads and survives ``fork()`` (the child
    opens fresh connections).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        embedder: Embedder | None = None,
        read_only: bool = False,
        synchronous: str = "NORMAL",
    ):
        # synchronous=NORMAL in WAL: a crashed or killed process loses nothing committed; an OS
        # crash or power cut may lose the last commits but never corrupts. FULL fsyncs each commit.
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = Path(path)
        self.embedder = embedder
        self.read_only = read_only
        self.synchronous = synchronous
        self._lock = threading.Lock()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        self._vectors: _VectorCache | None = None
        self._ann: AnnIndex | None = None
        self._query_vectors: dict[tuple[str, str], np.ndarray] = {}
        self._df_cache: dict[str, tuple[int, int]] = {}  # stem -> (entries containing it, max id then)
        if read_only:
            self._check_version(self.schema_version)
        else:
            self._migrate()

    # -- connections and transactions --------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self.read_only:
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        else:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            _retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone())
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            # A fork child: start over, locks included (a parent thread may have held one).
            _FORK_ABANDONED.extend(self._conns)
            self._lock, self._local, self._conns, self._pid = threading.Lock(), threading.local(), [], os.getpid()
            self._vectors = self._ann = None
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError("MemoryStore is closed")
            conn = self._open()
            self._local.conn, self._local.depth = conn, 0
            with self._lock:
                self._conns.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self):
        """A write transaction (``BEGIN IMMEDIATE``); nested calls become savepoints.

        Taking the write lock up front means a transaction never fails half-way on a lock held
        by another writer: it waits (up to ``BUSY_TIMEOUT_S``) before doing anything.
        """
        conn = self._conn()
        local = self._local
        if local.depth == 0:
            _retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))
            local.depth = 1
            try:
                yield self
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                local.depth = 0
        else:
            name = f"nested_{local.depth}"
            conn.execute(f"SAVEPOINT {name}")
            local.depth += 1
            try:
                yield self
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                raise
            finally:
                conn.execute(f"RELEASE {name}")
                local.depth -= 1

    @contextlib.contextmanager
    def _snapshot(self):
        """Consecutive reads that see one state of the file (a deferred read transaction)."""
        conn = self._conn()
        if self._local.depth:
            yield conn
            return
        conn.execute("BEGIN")
        self._local.depth = 1
        try:
            yield conn
        finally:
            self._local.depth = 0
            conn.execute("COMMIT")

    # -- schema ----------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return self._conn().execute("PRAGMA user_version").fetchone()[0]

    def _check_version(self, version: int) -> None:
        if version > len(MIGRATIONS):
            raise SchemaError(
                f"{self.path} has memory schema v{version}, newer than this agentgym knows "
                f"(v{len(MIGRATIONS)}); upgrade agentgym to open it"
            )
        if self.read_only and version < len(MIGRATIONS):
            raise SchemaError(
                f"{self.path} has memory schema v{version}, older than v{len(MIGRATIONS)}; open it "
                "once without read_only to migrate it"
            )

    def _migrate(self) -> None:
        self._check_version(self.schema_version)
        if self.schema_version == len(MIGRATIONS):
            return
        with self.transaction():
            conn = self._conn()
            version = self.schema_version  # again, under the write lock: another opener may have migrated
            self._check_version(version)
            for target in range(version + 1, len(MIGRATIONS) + 1):
                for statement in split_statements(MIGRATIONS[target - 1]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target}")

    # -- writes -----------------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> np.ndarray:
        vectors = normalise(self.embedder.embed(texts))
        if vectors.shape != (len(texts), self.embedder.dim):
            raise ValueError(f"embedder returned {vectors.shape}, expected {(len(texts), self.embedder.dim)}")
        return vectors

    def _insert_vector(self, conn: sqlite3.Connection, entry_id: int, vector: np.ndarray) -> None:
        conn.execute(
            "INSERT INTO embeddings(entry_id, model, vector) VALUES (?, ?, ?)",
            (entry_id, _model_name(self.embedder), np.asarray(vector, dtype=np.float32).tobytes()),
        )

    def add(self, entry: Entry) -> int:
        """Store ``entry``; returns its id (also set on ``entry``, with created/updated)."""
        return self.add_many([entry])[0]

    def add_many(self, entries: Iterable[Entry], *, vectors: np.ndarray | None = None) -> list[int]:
        """Store all ``entries`` in one transaction; returns their ids in order.

        ``vectors`` (n, dim) supplies precomputed unit vectors instead of calling the embedder
        (which must still be set, for its name).
        """
        entries = list(entries)
        if vectors is None and self.embedder is not None:
            vectors = self._embed([_embedding_text(e.title, e.text) for e in entries])
        if vectors is not None:
            if self.embedder is None:
                raise ValueError("vectors given but the store has no embedder to name their model")
            if len(vectors) != len(entries):
                raise ValueError(f"{len(vectors)} vectors for {len(entries)} entries")
        now = time.time()
        rows = [_entry_row(entry, now) for entry in entries]
        ids = []
        with self.transaction():
            conn = self._conn()
            for index, row in enumerate(rows):
                entry_id = conn.execute(
                    "INSERT INTO entries(kind, title, text, env, family, task, tags, data, created, updated) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                ).lastrowid
                if vectors is not None:
                    self._insert_vector(conn, entry_id, vectors[index])
                ids.append(entry_id)
        for entry, entry_id, row in zip(entries, ids, rows):
            entry.id, entry.created, entry.updated = entry_id, row[-2], row[-1]
        return ids

    def get(self, entry_id: int) -> Entry | None:
        row = (
            self._conn().execute(f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE id = ?", (entry_id,)).fetchone()
        )
        return None if row is None else _to_entry(row)

    def update(self, entry_id: int, **fields) -> None:
        """Set the given Entry fields (any but ``id``); the index, tags and vector follow.

        ``updated`` is set to now unless given. Raises KeyError if the entry does not exist.
        """
        known = {f.name for f in dataclasses.fields(Entry)} - {"id"}
        unknown = set(fields) - known
        if unknown:
            raise TypeError(f"unknown Entry fields: {sorted(unknown)}")
        values = dict(fields)
        values.setdefault("updated", time.time())
        if "tags" in values:
            values["tags"] = json.dumps(list(dict.fromkeys(str(tag) for tag in values["tags"])))
        if "data" in values:
            values["data"] = json.dumps(values["data"])
        retext = self.embedder is not None and ("title" in fields or "text" in fields)

        def new_text(current: Entry) -> str:
            return _embedding_text(fields.get("title", current.title), fields.get("text", current.text))

        vector = None
        if retext:  # embed before taking the write lock; redone below if the row moved meanwhile
            current = self.get(entry_id)
            if current is None:
                raise KeyError(entry_id)
            text = new_text(current)
            vector = self._embed([text])[0]
        with self.transaction():
            conn = self._conn()
            current = self.get(entry_id)
            if current is None:
                raise KeyError(entry_id)
            conn.execute(
                f"UPDATE entries SET {', '.join(f'{name} = ?' for name in values)} WHERE id = ?",
                (*values.values(), entry_id),
            )
            if retext:
                if new_text(current) != text:
                    vector = self._embed([new_text(current)])[0]
                self._insert_vector(conn, entry_id, vector)

    def update_data(self, entry_id: int, fn: Callable[[dict], dict]) -> dict:
        """Atomically replace the entry's ``data`` by ``fn(data)``; returns the new data.

        The read and the write happen under one write lock, so counters bumped by concurrent
        workers never lose an increment. Raises KeyError if the entry does not exist.
        """
        with self.transaction():
            conn = self._conn()
            row = conn.execute("SELECT data FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                raise KeyError(entry_id)
            data = fn(json.loads(row[0]))
            if not isinstance(data, dict):
                raise TypeError(f"update_data fn must return a dict, got {type(data).__name__}")
            conn.execute(
                "UPDATE entries SET data = ?, updated = ? WHERE id = ?", (json.dumps(data), time.time(), entry_id)
            )
        return data

    def delete(self, entry_id: int) -> None:
        """Remove the entry with its index rows, tags and vector; no-op if it does not exist."""
        with self.transaction():
            self._conn().execute("DELETE FROM entries WHERE id = ?", (entry_id,))

    def embed_missing(self, batch_size: int = 256) -> int:
        """Give a vector from this store's embedder to every entry without one (or with another
        model's); returns how many. For entries written by processes that had no embedder."""
        if self.embedder is None:
            raise ValueError("embed_missing needs a store opened with an embedder")
        model = _model_name(self.embedder)
        done = 0
        while True:
            rows = (
                self._conn()
                .execute(
                    "SELECT e.id, e.title, e.text FROM entries AS e LEFT JOIN embeddings AS m "
                    "ON m.entry_id = e.id WHERE m.model IS NULL OR m.model != ? LIMIT ?",
                    (model, batch_size),
                )
                .fetchall()
            )
            if not rows:
                return done
            vectors = self._embed([_embedding_text(title, text) for _, title, text in rows])
            with self.transaction():
                conn = self._conn()
                for (entry_id, title, text), vector in zip(rows, vectors):
                    # Only if the text is still the one embedded: a concurrent update wins.
                    if (
                        conn.execute(
                            "SELECT 1 FROM entries WHERE id = ? AND title = ? AND text = ?", (entry_id, title, text)
                        ).fetchone()
                        is None
                    ):
                        continue
                    conn.execute("DELETE FROM embeddings WHERE entry_id = ?", (entry_id,))
                    self._insert_vector(conn, entry_id, vector)
                    done += 1

    # -- reads ------------------------------------------------------------------------------

    def entries(self, *, kind=None, env=None, family=None, tags=()) -> Iterator[Entry]:
        """Matching entries in id order, read in pages (so callers may write while iterating)."""
        where, params = filter_sql(kind, env, family, tags)
        columns = ", ".join(f"e.{c}" for c in ENTRY_COLUMNS)
        last = 0
        while True:
            rows = (
                self._conn()
                .execute(
                    f"SELECT {columns} FROM entries AS e WHERE e.id > ? {'AND ' + where if where else ''} "
                    "ORDER BY e.id LIMIT ?",
                    (last, *params, PAGE_SIZE),
                )
                .fetchall()
            )
            for row in rows:
                yield _to_entry(row)
            if len(rows) < PAGE_SIZE:
                return
            last = rows[-1][0]

    def envs(self) -> list[str]:
        """The env kinds entries are stored under, sorted."""
        rows = self._conn().execute("SELECT DISTINCT env FROM entries WHERE env != '' ORDER BY env").fetchall()
        return [row[0] for row in rows]

    def count(self, *, kind=None, env=None, family=None, tags=()) -> int:
        where, params = filter_sql(kind, env, family, tags)
        return (
            self._conn()
            .execute(f"SELECT count(*) FROM entries AS e {'WHERE ' + where if where else ''}", params)
            .fetchone()[0]
        )

    def search(
        self, query: str, k: int = 5, *, kind=None, env=None, family=None, tags=(), mode: str = "auto"
    ) -> list[Hit]:
        """The ``k`` best entries for ``query`` among those passing the filters.

        mode: "bm25", "embedding", "hybrid" (both, fused by RRF) or "auto" (hybrid when the
        store has an embedder, else bm25). Any text is a valid query.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "auto":
            mode = "hybrid" if self.embedder is not None else "bm25"
        if mode != "bm25" and self.embedder is None:
            raise ValueError(f"mode={mode!r} needs a store opened with an embedder")
        if k <= 0:
            return []
        where, params = filter_sql(kind, env, family, tags)
        depth = max(k, HYBRID_DEPTH) if mode == "hybrid" else k
        query_vector = None if mode == "bm25" else self._query_vectors.get(self._query_key(query))
        if mode == "embedding" and query_vector is None:
            query_vector = self._query_vector(query)
        with self._snapshot() as conn:
            # The model call, the index search and the BM25 query all release the GIL: in hybrid
            # search the first two run in a thread beside the third, so a search costs the longer
            # of the two sides instead of their sum. (The index is brought up to this snapshot
            # first; a filtered search needs the connection for its filter, so only its model call
            # runs beside.)
            candidates: _Background[tuple[np.ndarray, list[int]]] | None = None
            embedding: _Background[np.ndarray] | None = None
            if mode == "hybrid" and not where and self._uses_index(conn):
                candidates = _Background(self._index_candidates, self._ann_index(conn), query, query_vector, depth)
            elif mode == "hybrid" and query_vector is None:
                embedding = _Background(self._query_vector, query)
            rankings = {}
            if mode in ("bm25", "hybrid"):
                rankings["bm25"] = self._bm25_ids(conn, query, depth, where, params)
            if candidates is not None:
                query_vector, proposed = candidates.result()
                rankings["embedding"] = self._rerank(conn, proposed, query_vector, depth)
            elif mode in ("embedding", "hybrid"):
                if embedding is not None:
                    query_vector = embedding.result()
                rankings["embedding"] = self._embedding_ids(conn, query_vector, depth, where, params)
            fused = rrf(list(rankings.values()))[:k]
            found = self._fetch(conn, [entry_id for entry_id, _ in fused])
        positions = {
            name: {entry_id: rank for rank, entry_id in enumerate(ids, start=1)} for name, ids in rankings.items()
        }
        return [
            Hit(
                found[entry_id],
                score,
                {name: ranks[entry_id] for name, ranks in positions.items() if entry_id in ranks},
            )
            for entry_id, score in fused
            if entry_id in found
        ]

    def _query_key(self, query: str) -> tuple[str, str]:
        return (_model_name(self.embedder), query)

    def _query_vector(self, query: str) -> np.ndarray:
        # Rollout groups search with the same task text many times; the model call dominates
        # hybrid latency, so recent query vectors are kept (first in, first out).
        key = self._query_key(query)
        vector = self._query_vectors.get(key)
        if vector is None:
            vector = self._embed([query])[0]
            with self._lock:
                if len(self._query_vectors) >= QUERY_CACHE_SIZE:
                    self._query_vectors.pop(next(iter(self._query_vectors)))
                self._query_vectors[key] = vector
        return vector

    def _bm25_ids(self, conn, query: str, depth: int, where: str, params: list) -> list[int]:
        tokens = query_tokens(query)
        if not tokens:
            return []
        size = conn.execute("SELECT coalesce(max(id), 0) FROM entries").fetchone()[0]
        budget = postings_budget(size)
        lowest_id = 0
        if size > budget:  # below it, even a query matching everything is cheap
            frequencies = self._frequencies(conn, tokens, size)
            kept, share = plan_postings(frequencies, budget)
            tokens = [tokens[i] for i in kept if frequencies[i]]
            if not tokens:
                return []
            lowest_id = size - math.ceil(size * share)
        match = fts_query(tokens)
        if not where:
            # "+rank" keeps the ORDER BY from FTS5: given it, FTS5 scores every match in a nested
            # statement and sorts them all, while SQLite's own sorter keeps only the best LIMIT
            # rows: the same ranking, 1.3x faster at 1M (benchmarks/memory.py, "BM25 sorter" rows).
            # With a filter (the join below) it was slower, so that one is left to FTS5.
            sql = "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? AND rowid > ? ORDER BY +rank, rowid LIMIT ?"
        else:
            # CROSS JOIN keeps FTS as the outer loop: the filter is checked per match, by rowid.
            sql = (
                "SELECT entries_fts.rowid FROM entries_fts CROSS JOIN entries AS e "
                f"ON e.id = entries_fts.rowid WHERE entries_fts MATCH ? AND entries_fts.rowid > ? AND {where} "
                "ORDER BY entries_fts.rank LIMIT ?"
            )
        while True:
            ids = [row[0] for row in conn.execute(sql, (match, lowest_id, *params, depth))]
            if len(ids) >= depth or lowest_id <= 0:
                return ids
            # Too few matches among the newest entries: widen the window (4x) until k come back.
            lowest_id = max(0, size - 4 * (size - lowest_id))

    def _frequencies(self, conn, tokens: list[str], size: int) -> list[int]:
        """How many entries each token occurs in (0: none, or no indexable characters).

        The tokens go through the index's own tokenizer (a scratch FTS5 table in the connection's
        temp schema, one row per token) to get the stems the index holds; a token that is several
        stems ("run_tests") is a phrase, rarer than its rarest stem.
        """
        if not getattr(self._local, "scratch", False):
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms "
                f"USING fts5(token, content='', tokenize='{TOKENIZE}')"
            )
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_stems USING fts5vocab(temp, query_terms, 'instance')"
            )
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.entry_terms USING fts5vocab(main, entries_fts, 'row')"
            )
            self._local.scratch = True
        conn.executemany("INSERT INTO temp.query_terms(rowid, token) VALUES (?, ?)", enumerate(tokens))
        stems = conn.execute("SELECT doc, term FROM temp.query_stems").fetchall()
        conn.execute("INSERT INTO temp.query_terms(query_terms) VALUES ('delete-all')")
        frequencies: list[int | None] = [None] * len(tokens)
        for index, stem in stems:
            df = self._stem_frequency(conn, stem, size)
            frequencies[index] = df if frequencies[index] is None else min(frequencies[index], df)
        return [df or 0 for df in frequencies]

    def _stem_frequency(self, conn, stem: str, size: int) -> int:
        # Counting a stem's rows walks its whole posting list, so counts are reused until the
        # store has grown by a quarter; a stale count only shifts which terms get pruned.
        cached = self._df_cache.get(stem)
        if cached is not None and size <= cached[1] * 1.25:
            return cached[0]
        row = conn.execute("SELECT doc FROM temp.entry_terms WHERE term = ?", (stem,)).fetchone()
        if len(self._df_cache) >= DF_CACHE_SIZE:
            self._df_cache.clear()
        self._df_cache[stem] = (row[0] if row else 0, size)
        return self._df_cache[stem][0]

    @staticmethod
    def _uses_index(conn) -> bool:
        """Whether vector searches go to the approximate index (else: an exact scan)."""
        # max(seq) is a cheap upper bound on the vectors held (it also counts removed ones).
        return conn.execute("SELECT coalesce(max(seq), 0) FROM embeddings").fetchone()[0] >= ANN_MIN_VECTORS

    def _index_candidates(
        self, index: AnnIndex, query: str, query_vector: np.ndarray | None, depth: int
    ) -> tuple[np.ndarray, list[int]]:
        """(the query's vector, the index's candidates for an unfiltered top ``depth``), without the connection."""
        if query_vector is None:
            query_vector = self._query_vector(query)
        return query_vector, index.search(query_vector, depth * RERANK_FACTOR).tolist()

    def _embedding_ids(self, conn, query_vector: np.ndarray, depth: int, where: str, params: list) -> list[int]:
        if not self._uses_index(conn):
            return self._exact_ids(conn, query_vector, depth, where, params)
        index = self._ann_index(conn)
        if not where:
            _, candidates = self._index_candidates(index, "", query_vector, depth)
            return self._rerank(conn, candidates, query_vector, depth)
        # A filter passed by a good share of the store leaves enough of the nearest neighbours;
        # a selective one does not, and then the entries it passes are few enough to scan.
        candidates = index.search(query_vector, depth * FILTER_OVERSAMPLE).tolist()
        passing = self._passing(conn, candidates, where, params)
        if len(passing) >= depth:
            return self._rerank(conn, passing, query_vector, depth)
        # entries first (CROSS JOIN keeps the order): the filter's index finds the few that pass
        ids, vectors = self._stored_vectors(
            conn, f"entries AS e CROSS JOIN embeddings AS m ON m.entry_id = e.id WHERE {where}", params
        )
        return ids[top_k(vectors @ query_vector, depth)].tolist()

    def _rerank(self, conn, candidates: list[int], query_vector: np.ndarray, depth: int) -> list[int]:
        """The ``depth`` candidates nearest to the query by their exact (float32) cosine."""
        if not candidates:
            return []
        ids, vectors = self._stored_vectors(
            conn, f"embeddings AS m WHERE m.entry_id IN ({', '.join('?' * len(candidates))})", candidates
        )
        return ids[top_k(vectors @ query_vector, depth)].tolist()

    def _stored_vectors(self, conn, source: str, params) -> tuple[np.ndarray, np.ndarray]:
        """(entry ids, float32 vectors) of this model's vectors in ``source`` (a FROM ... WHERE
        clause over ``embeddings AS m``)."""
        dim = self.embedder.dim
        rows = conn.execute(
            f"SELECT m.entry_id, m.vector FROM {source} AND m.model = ? AND length(m.vector) = ?",
            (*params, _model_name(self.embedder), 4 * dim),
        ).fetchall()
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty((0, dim), dtype=np.float32)
        ids, blobs = zip(*rows)
        return np.asarray(ids, dtype=np.int64), np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, dim)

    def _exact_ids(self, conn, query_vector: np.ndarray, depth: int, where: str, params: list) -> list[int]:
        model = _model_name(self.embedder)
        if self._vectors is None or self._vectors.model != model or self._vectors.dim != self.embedder.dim:
            self._vectors = _VectorCache(model, self.embedder.dim)
        ids, matrix = self._vectors.refresh(conn)
        if not len(ids):
            return []
        scores = matrix @ query_vector
        if where:
            allowed = np.fromiter(
                (row[0] for row in conn.execute(f"SELECT e.id FROM entries AS e WHERE {where}", params)), dtype=np.int64
            )
            mask = np.isin(ids, allowed)
            scores = np.where(mask, scores, -np.inf)
            depth = min(depth, int(mask.sum()))
        return ids[top_k(scores, depth)].tolist()

    def _ann_index(self, conn) -> AnnIndex:
        """This process's approximate index for the embedder's model, brought up to ``conn``'s snapshot."""
        model = _model_name(self.embedder)
        if self._ann is None or self._ann.model != model or self._ann.dim != self.embedder.dim:
            self._vectors = None  # the exact matrix is not needed at this size
            self._ann = AnnIndex(index_path(self.path, model), model, self.embedder.dim)
        store_id = conn.execute("SELECT value FROM counters WHERE name = 'store_id'").fetchone()[0]
        self._ann.refresh(conn, store_id)
        return self._ann

    @staticmethod
    def _passing(conn, ids: list[int], where: str, params: list) -> list[int]:
        """``ids`` that pass the filter, in their order."""
        if not ids:
            return []
        passed = {
            row[0]
            for row in conn.execute(
                f"SELECT e.id FROM entries AS e WHERE e.id IN ({', '.join('?' * len(ids))}) AND {where}",
                (*ids, *params),
            )
        }
        return [entry_id for entry_id in ids if entry_id in passed]

    @staticmethod
    def _fetch(conn, ids: list[int]) -> dict[int, Entry]:
        if not ids:
            return {}
        rows = conn.execute(
            f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE id IN ({', '.join('?' * len(ids))})", ids
        ).fetchall()
        return {row[0]: _to_entry(row) for row in rows}

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Close this process's connections (all threads'); the store cannot be used after."""
        with self._lock:
            self._closed = True
            if self._pid == os.getpid():
                for conn in self._conns:
                    conn.close()
            self._conns = []
            self._local = threading.local()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
