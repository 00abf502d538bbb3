"""A durable, append-only trajectory store (JSONL) and its Hugging Face ``datasets`` views.

:class:`TrajectoryStore` writes one line per finished record, ``{"kind": "trajectory" | "tree",
"record": {...}}``, with the records' own compact encoding (a prompt that extends the previous
turn is stored as a length plus the new ids, so a long episode costs linear, not quadratic,
space). Every append is flushed and ``fsync``-ed before it returns: an append marks an episode's
end, and a crash must not lose episodes the caller already counted.

Reading gives back objects equal (``==``) to those written. A crash in the middle of a write
leaves a last line without its newline; reading skips it with a warning, and reopening the store
for appending cuts it off so the next record starts on a line of its own. Any other line that
does not parse is corruption and raises with its line number.

Images (a vision-language policy's prompts) are kept once per content hash, as files named by
their hash in ``<path>.images/`` beside the JSONL: :meth:`TrajectoryStore.append` writes a
record's images (``record.images``) that are not there yet, fsync-ed before the record's line, so
a stored record never points at a missing image. Records are read back without their bytes;
:meth:`TrajectoryStore.images` (or :meth:`~TrajectoryStore.load_images`) fetches them by hash,
which, with the stored ids, is what a trainer needs to recompute logprobs
(:class:`~agentgym.rollout.vision.VisionChatFormat` turns them into ``pixel_values``).

:meth:`TrajectoryStore.to_dataset` gives one row per record (filterable columns plus the record
as JSON, which :func:`records_from_dataset` decodes losslessly); :meth:`TrajectoryStore.sequences_dataset`
gives the training view, one row per training sequence.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from agentgym.extras import requires
from agentgym.rollout.trajectory import RolloutTree, Trajectory

__all__ = ["Record", "StoreCorruptError", "TrajectoryStore", "records_from_dataset"]

Record = Trajectory | RolloutTree

_HASH = re.compile(r"[0-9a-f]{64}")
_KINDS: dict[str, type[Trajectory] | type[RolloutTree]] = {"trajectory": Trajectory, "tree": RolloutTree}


class StoreCorruptError(ValueError):
    """A line of the store (other than a torn last line) is not a valid record."""


class TrajectoryStore:
    """Append-only JSONL of :class:`Trajectory` and :class:`RolloutTree` records at ``path``.

    Appends are thread-safe (the runner appends from worker threads) and durable when they
    return. The file is opened lazily in append mode, so a store can be reopened by a later
    process and read while being written. Use it as a context manager or call :meth:`close`.
    Images live in :attr:`images_dir` (see the module docstring).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.images_dir = self.path.with_name(self.path.name + ".images")
        self._file: TextIO | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ writing
    def append(self, record: Record) -> None:
        """Write one record and fsync it."""
        self.extend([record])

    def extend(self, records: Iterable[Record]) -> None:
        """Write several records with a single fsync (their new images first, each fsync-ed)."""
        records = list(records)
        text = "".join(_encode(record) + "\n" for record in records)
        if not text:
            return
        with self._lock:
            for record in records:
                self._write_images(record)
            file = self._open()
            file.write(text)
            file.flush()
            os.fsync(file.fileno())

    def _write_images(self, record: Record) -> None:
        """The record's images not yet stored, each written whole (temp file, fsync, rename) under its hash."""
        missing, written = [], False
        for digest in record.image_hashes():
            target = self.images_dir / digest
            if target.exists():
                continue
            data = record.images.get(digest)
            if data is None:
                missing.append(digest)
                continue
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise ValueError(f"record {record.id}: the bytes given for image {digest} hash to {actual}")
            self.images_dir.mkdir(parents=True, exist_ok=True)
            staging = self.images_dir / f".{digest}.{os.getpid()}.{threading.get_ident()}"
            with open(staging, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(staging, target)
            written = True
        if written:  # the renames themselves must survive a crash before the record line does
            directory = os.open(self.images_dir, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        if missing:
            warnings.warn(
                f"record {record.id}: {len(missing)} images its turns refer to have no bytes in record.images "
                f"and are not in the store (e.g. {missing[0]}); its prompts that hold them cannot be recomputed",
                RuntimeWarning,
                stacklevel=4,
            )

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self):
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._cut_torn_tail()
            self._file = open(self.path, "a", encoding="utf-8")
        return self._file

    def _cut_torn_tail(self) -> None:
        """Drop an unterminated last line (a write that never returned) so appends start on a fresh line."""
        if not self.path.exists():
            return
        with open(self.path, "rb+") as file:
            size = file.seek(0, os.SEEK_END)
            if size == 0:
                return
            file.seek(size - 1)
            if file.read(1) == b"\n":
                return
            # Scan back in blocks for the last newline; everything after it is the torn write.
            end, block = size, 1 << 16
            keep = 0
            while end > 0:
                start = max(0, end - block)
                file.seek(start)
                chunk = file.read(end - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                end = start
            warnings.warn(
                f"{self.path}: dropping a torn last record ({size - keep} bytes) left by an interrupted write",
                RuntimeWarning,
                stacklevel=4,
            )
            file.truncate(keep)
            file.flush()
            os.fsync(file.fileno())

    # ------------------------------------------------------------------ reading
    def __iter__(self) -> Iterator[Record]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as file:
            number = 0
            for number, raw in enumerate(file, 1):
                if not raw.endswith(b"\n"):
                    warnings.warn(
                        f"{self.path}:{number}: skipping a torn last record ({len(raw)} bytes) "
                        f"left by an interrupted write",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    return
                try:
                    yield _decode(json.loads(raw))
                except (ValueError, KeyError, TypeError) as exc:
                    raise StoreCorruptError(f"{self.path}:{number}: not a valid record: {exc}") from exc

    def read(self) -> list[Record]:
        """Every record in the store, in the order written."""
        return list(self)

    def image(self, digest: str) -> bytes:
        """The encoded bytes of the stored image with this content hash; KeyError if the store has none."""
        if not isinstance(digest, str) or not _HASH.fullmatch(digest):
            raise ValueError(f"an image hash is 64 lowercase hex digits (sha256), got {digest!r}")
        try:
            return (self.images_dir / digest).read_bytes()
        except FileNotFoundError:
            raise KeyError(f"{self.images_dir} holds no image {digest}") from None

    def images(self, record: Record) -> dict[str, bytes]:
        """hash -> bytes of every image ``record``'s turns refer to (KeyError naming the first one missing)."""
        return {digest: self.image(digest) for digest in record.image_hashes()}

    def load_images(self, record: Record) -> Record:
        """``record`` with :attr:`~agentgym.rollout.trajectory.Trajectory.images` filled from the store; returns it."""
        record.images = self.images(record)
        return record

    # ------------------------------------------------------------------ datasets
    def to_dataset(self):
        """A :class:`datasets.Dataset` with one row per record (see :func:`records_to_dataset`)."""
        return records_to_dataset(self)

    def sequences_dataset(self):
        """The training view, one row per training sequence (see :func:`sequences_to_dataset`)."""
        return sequences_to_dataset(self)

    @staticmethod
    def from_dataset(dataset) -> list[Record]:
        """The records of a dataset made by :meth:`to_dataset` (see :func:`records_from_dataset`)."""
        return records_from_dataset(dataset)

    def __repr__(self) -> str:
        return f"TrajectoryStore({str(self.path)!r})"


def _kind(record: Record) -> str:
    if isinstance(record, Trajectory):
        return "trajectory"
    if isinstance(record, RolloutTree):
        return "tree"
    raise TypeError(f"a store holds Trajectory and RolloutTree records, not {type(record).__name__}")


def _encode(record: Record) -> str:
    # allow_nan: an entropy or reward can legitimately be NaN; Python's json reads it back.
    return json.dumps({"kind": _kind(record), "record": record.to_dict()}, separators=(",", ":"), ensure_ascii=False)


def _decode(line: dict) -> Record:
    return _KINDS[line["kind"]].from_dict(line["record"])


# --- datasets ------------------------------------------------------------------------------


def _record_row(record: Record) -> dict:
    if isinstance(record, Trajectory):
        turns = record.turns
        reward, success, error = record.reward, record.success, record.error
    else:
        turns = [n.turn for n in record.nodes]
        leaves = record.leaves
        # A tree is summarised by its leaves: the mean leaf reward, and whether any leaf succeeded.
        reward = math.fsum(record.leaf_reward(n.id) for n in leaves) / len(leaves) if leaves else 0.0
        success = any(record.leaf_success.get(n.id, False) for n in leaves)
        error = "; ".join(record.leaf_errors.values()) or None
    versions = [t.policy_version for t in turns]
    return {
        "kind": _kind(record),
        "id": record.id,
        "task_id": record.task_id,
        "env_id": record.env_id,
        "reward": float(reward),
        "success": bool(success),
        "error": error,
        "num_turns": len(turns),
        "num_generated_tokens": record.num_generated_tokens,
        "policy_version_min": min(versions, default=None),
        "policy_version_max": max(versions, default=None),
        "group": _group(record),
        "record": _encode(record),
    }


def _group(record: Record) -> str | None:
    group = record.metadata.get("group")
    return None if group is None else str(group)


def records_to_dataset(records: Iterable[Record]):
    """One row per record: ``kind``, ``id``, ``task_id``, ``env_id``, ``reward``, ``success``,
    ``error``, ``num_turns``, ``num_generated_tokens``, ``policy_version_min``/``_max``, ``group``
    (from ``metadata["group"]``) for filtering, and ``record``: the stored JSON line, which
    :func:`records_from_dataset` turns back into equal objects.

    Trees count all their nodes as turns; their ``reward`` is the mean leaf reward and
    ``success`` whether any leaf succeeded. Built in memory.
    """
    with requires("train"):
        from datasets import Dataset, Features, Value

    features = Features(
        {
            "kind": Value("string"),
            "id": Value("string"),
            "task_id": Value("string"),
            "env_id": Value("string"),
            "reward": Value("float64"),
            "success": Value("bool"),
            "error": Value("string"),
            "num_turns": Value("int64"),
            "num_generated_tokens": Value("int64"),
            "policy_version_min": Value("int64"),
            "policy_version_max": Value("int64"),
            "group": Value("string"),
            "record": Value("string"),
        }
    )
    rows = [_record_row(record) for record in records]
    return Dataset.from_dict({name: [row[name] for row in rows] for name in features}, features=features)


def records_from_dataset(dataset) -> list[Record]:
    """The records of a dataset made by :func:`records_to_dataset` (or a filtered/shuffled copy)."""
    return [_decode(json.loads(line)) for line in dataset["record"]]


def sequences_to_dataset(records: Iterable[Record]):
    """One row per :meth:`Trajectory.sequences` item; a tree contributes every root-to-leaf path.

    Columns: ``input_ids``, ``mask`` (1 = sampled by the policy, gets loss), ``logprobs`` (the
    sampling logprobs aligned to ``input_ids``, 0.0 under mask 0), ``policy_versions`` (of the
    sequence's turns), ``image_hashes`` (the images of ``input_ids``' runs of image tokens, in
    order: :meth:`TrajectoryStore.image` gives their bytes), ``reward``, ``success`` and ``error`` of the whole trajectory,
    ``trajectory_id`` (a tree path's is ``"<tree id>-<leaf>"``), ``record_id`` (the stored
    record), ``task_id`` and ``group``.
    """
    with requires("train"):
        from datasets import Dataset, Features, Sequence, Value

    features = Features(
        {
            "input_ids": Sequence(Value("int64")),
            "mask": Sequence(Value("int8")),
            "logprobs": Sequence(Value("float64")),
            "policy_versions": Sequence(Value("int64")),
            "image_hashes": Sequence(Value("string")),
            "reward": Value("float64"),
            "success": Value("bool"),
            "error": Value("string"),
            "trajectory_id": Value("string"),
            "record_id": Value("string"),
            "task_id": Value("string"),
            "group": Value("string"),
        }
    )
    columns: dict[str, list] = {name: [] for name in features}
    for record in records:
        trajectories = [record] if isinstance(record, Trajectory) else list(record.paths())
        for trajectory in trajectories:
            for sequence in trajectory.sequences():
                for name, value in (
                    ("input_ids", sequence.input_ids),
                    ("mask", sequence.mask),
                    ("logprobs", sequence.logprobs),
                    ("policy_versions", sequence.policy_versions),
                    ("image_hashes", sequence.image_hashes),
                    ("reward", trajectory.reward),
                    ("success", trajectory.success),
                    ("error", trajectory.error),
                    ("trajectory_id", trajectory.id),
                    ("record_id", record.id),
                    ("task_id", trajectory.task_id),
                    ("group", _group(record)),
                ):
                    columns[name].append(value)
    return Dataset.from_dict(columns, features=features)
