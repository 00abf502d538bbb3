"""World-state backends that env snapshots copy: plain Python objects (pickled, or deep-copied) and SQLite databases (copied with the backup API).

Shared by the env families (ToolEnv's world state, the web apps' databases), so it lives beside
them rather than in one of them. A world state is any Python object: dicts, lists, dataclasses,
a :class:`SQLiteState`, or a Python object holding databases (``{"db": SQLiteState(...),
"log": [...]}``). :class:`StateCopy` freezes one:

* the Python part is pickled — two to three times faster than ``copy.deepcopy`` for plain data,
  and the snapshot is one compact bytes object; state that cannot be pickled (a lambda, a lock)
  is deep-copied instead;
* every :class:`SQLiteState` inside is copied with SQLite's online backup API into a fresh
  in-memory connection (a page copy, much faster than dumping SQL), and copied again into a
  fresh connection at each restore.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import pickle
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["SQLiteState", "StateCopy"]


class SQLiteState:
    """A SQLite database as (part of) an env's world state.

    ``SQLiteState(":memory:")`` (the default) is a private in-memory database;
    ``SQLiteState(path)`` opens a file, and its copies (snapshots, forks) are in-memory — a
    branch never writes to the original file. (A file keeps its own page size; copies of
    databases with small pages are slower, see ``__init__``.) ``script`` (SQL) runs once at
    creation, e.g. to create tables and seed rows.

    The connection is in autocommit mode: every statement is committed when it returns, so a
    snapshot taken between tool calls sees everything the tools did. It may be used from any
    thread (tools run in worker threads), one at a time.
    """

    def __init__(self, path: str = ":memory:", script: str | None = None):
        self.path = path
        self.conn = _connect(path)
        if path == ":memory:":
            # The backup API copies page by page; SQLite's largest pages (64 KiB) make a 10 MB
            # copy about 3x faster than the default 4 KiB ones, for a little more memory copied
            # per write. Copies keep the source's page size.
            self.conn.execute("PRAGMA page_size = 65536")
        if script:
            self.conn.executescript(script)

    def execute(self, sql: str, parameters: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, parameters)

    def query(self, sql: str, parameters: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple]:
        """All rows of a query, as tuples."""
        return self.conn.execute(sql, parameters).fetchall()

    def close(self) -> None:
        self.conn.close()

    def __deepcopy__(self, memo: dict) -> SQLiteState:
        clone = SQLiteState.__new__(SQLiteState)
        clone.path = ":memory:"
        clone.conn = _connect(":memory:")
        self.conn.backup(clone.conn)
        memo[id(self)] = clone
        return clone

    def __reduce__(self):
        # Plain pickling (a snapshot exported to another process) carries the database's bytes;
        # StateCopy's own pickler never gets here (it copies databases with the backup API).
        return _deserialized, (self.conn.serialize(),)

    def __repr__(self) -> str:
        return f"SQLiteState({self.path!r})"


def _deserialized(data: bytes) -> SQLiteState:
    """A private in-memory database holding ``data`` (what :meth:`SQLiteState.__reduce__` pickled)."""
    state = SQLiteState.__new__(SQLiteState)
    state.path = ":memory:"
    state.conn = _connect(":memory:")
    state.conn.deserialize(data)
    return state


class StateCopy:
    """A frozen copy of a world state; :meth:`restore` gives a fresh, independent state each time."""

    def __init__(self, state: Any):
        self._databases: list[SQLiteState] = []
        buffer = io.BytesIO()
        try:
            _Pickler(buffer, self._databases).dump(state)
            self._pickled: bytes | None = buffer.getvalue()
            self._copy = None
        except (pickle.PicklingError, TypeError, AttributeError):  # what pickle raises for unpicklable objects
            self._databases.clear()
            self._pickled = None
            self._copy = copy.deepcopy(state)

    def restore(self) -> Any:
        """A new state equal to the frozen one; the copy stays usable."""
        with _gc_paused():
            if self._pickled is None:
                return copy.deepcopy(self._copy)
            return _Unpickler(self._pickled, [copy.deepcopy(db) for db in self._databases]).load()

    def take(self) -> Any:
        """The frozen state itself, without a second copy; the copy must not be used afterwards."""
        if self._pickled is None:
            return self._copy
        with _gc_paused():
            return _Unpickler(self._pickled, self._databases).load()


class _Pickler(pickle.Pickler):
    """Pickles Python objects; databases go aside as backup copies, pickled as a call of :func:`_database`."""

    def __init__(self, file: io.BytesIO, databases: list[SQLiteState]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._databases = databases
        self._index: dict[int, int] = {}

    # reducer_override rather than persistent_id: pickle skips it for built-in types (dicts,
    # lists, strs, ints), where a Python call per object would make pickling 4x slower.
    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, SQLiteState):
            return NotImplemented
        if id(obj) not in self._index:  # a database referenced twice stays one database
            self._index[id(obj)] = len(self._databases)
            self._databases.append(copy.deepcopy(obj))
        return _database, (self._index[id(obj)],)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, databases: list[SQLiteState]):
        super().__init__(io.BytesIO(data))
        self._databases = databases

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (__name__, _database.__name__):
            return self._databases.__getitem__
        return super().find_class(module, name)


def _database(index: int) -> SQLiteState:
    """The name a pickled database is loaded by; :class:`_Unpickler` maps it to the copies it was given."""
    raise RuntimeError("a pickled SQLiteState loads only through StateCopy")


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # Rebuilding a state makes objects by the million, none of them garbage; the cycle collector
    # would traverse the growing heap again and again (unpickling 10 MB: 450 ms → 180 ms).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
