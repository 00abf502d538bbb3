"""Tests of the memory store's approximate vector index: in step with the store, rebuilt when stale or corrupt, crash-safe, and the BM25 posting budget."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

from agentgym.memory import ann_index
from agentgym.memory import store as store_module
from agentgym.memory.ann_index import CorruptIndex, Stamp, decode, encode, index_path
from agentgym.memory.embeddings import normalise
from agentgym.memory.store import Entry, MemoryStore, plan_postings, postings_budget

DIM = 32


class NamedVectors:
    """An Embedder whose vectors are given with add_many; texts embed to a fixed random vector
    (queries in these tests are vectors, passed to the store's vector search directly)."""

    name = "test-vectors"
    dim = DIM

    def embed(self, texts):
        rng = np.random.default_rng(len(texts))
        return normalise(rng.standard_normal((len(texts), DIM)))


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 50 centres, like embeddings of texts on a few topics."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, DIM))
    return normalise(centres[rng.integers(50, size=n)] + 0.4 * rng.standard_normal((n, DIM)))


def add(store: MemoryStore, vectors: np.ndarray, env: str = "code") -> list[int]:
    return store.add_many([Entry("episode", f"entry {i}", env=env) for i in range(len(vectors))], vectors=vectors)


def vector_search(store: MemoryStore, query: np.ndarray, k: int = 10, **filters) -> list[int]:
    where, params = store_module.filter_sql(**filters)
    with store._snapshot() as conn:
        return store._embedding_ids(conn, query, k, where, params)


def exact_search(store: MemoryStore, query: np.ndarray, k: int = 10, **filters) -> list[int]:
    where, params = store_module.filter_sql(**filters)
    with store._snapshot() as conn:
        return store._exact_ids(conn, query, k, where, params)


def stored_ids(store: MemoryStore) -> set[int]:
    return {row[0] for row in store._conn().execute("SELECT entry_id FROM embeddings")}


def index_ids(store: MemoryStore) -> set[int]:
    return {int(key) for key in np.asarray(store._ann.index.keys)}


@pytest.fixture
def ann_always(monkeypatch):
    """Every vector search goes through the approximate index, however small the store."""
    monkeypatch.setattr(store_module, "ANN_MIN_VECTORS", 0)


# -- the file format --------------------------------------------------------------------------


def test_index_file_round_trips_and_rejects_torn_or_altered_bytes():
    stamp = Stamp(7, "m", 4, 16, 10, 2, 3)
    data = encode(stamp, b"body bytes")
    decoded, body = decode(data)
    assert decoded == stamp and bytes(body) == b"body bytes"
    for bad in (data[:-1], data[:20], data[:-3] + b"xyz", b"not an index", b"", b"X" + data[1:]):
        with pytest.raises(CorruptIndex):
            decode(bad)
    header_end = data.index(b"}") + 1
    with pytest.raises(CorruptIndex):  # a header that is not a stamp
        decode(data[: len(ann_index.MAGIC) + 4] + b"{" + data[len(ann_index.MAGIC) + 5 : header_end - 1] + b"]")


def test_index_path_is_beside_the_store_and_file_safe(tmp_path):
    assert index_path(tmp_path / "m.db", "org/model v2") == tmp_path / "m.db.org_model_v2.ann"


# -- search -----------------------------------------------------------------------------------


def test_small_store_is_searched_exactly(tmp_path):
    vectors = clustered(300, seed=1)
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        add(s, vectors)
        for query in clustered(20, seed=2):
            expected = (np.argsort(-(vectors @ query), kind="stable")[:10] + 1).tolist()
            assert vector_search(s, query) == expected
        assert s._ann is None  # below ANN_MIN_VECTORS no index is built


def test_ann_recall_against_exact_on_clustered_vectors(tmp_path, ann_always):
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        add(s, clustered(5000, seed=3))
        recalls = [len(set(vector_search(s, q)) & set(exact_search(s, q))) / 10 for q in clustered(50, seed=4)]
        assert s._ann is not None and len(s._ann) == 5000
        assert np.mean(recalls) >= 0.95


def test_adds_deletes_and_updates_are_applied_incrementally(tmp_path, ann_always):
    vectors = clustered(400, seed=5)
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        ids = add(s, vectors[:300])
        query = vectors[10]
        assert vector_search(s, query)[0] == ids[10]
        index = s._ann
        add(s, vectors[300:])
        s.delete(ids[10])
        s.update(ids[20], text="re-texted")  # the store re-embeds it: its old vector goes
        vector_search(s, query)
        assert s._ann is index and index.rebuilds == 1  # caught up, not rebuilt
        assert index_ids(s) == stored_ids(s) and ids[10] not in index_ids(s)
        assert ids[10] not in vector_search(s, query, k=50)
        new_vector = s._conn().execute("SELECT vector FROM embeddings WHERE entry_id = ?", (ids[20],)).fetchone()[0]
        assert vector_search(s, np.frombuffer(new_vector, dtype=np.float32))[0] == ids[20]
        for query in clustered(20, seed=6):
            assert set(vector_search(s, query)) <= stored_ids(s)


def test_filtered_search_returns_only_passing_entries_and_is_exact_when_selective(tmp_path, ann_always):
    vectors = clustered(2000, seed=7)
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        add(s, vectors[:1990], env="code")
        rare = add(s, vectors[1990:], env="web")  # 10 of 2000: far too few among the neighbours
        for query in clustered(10, seed=8):
            assert vector_search(s, query, k=5, env="web") == exact_search(s, query, k=5, env="web")
            assert set(vector_search(s, query, k=20, env="web")) == set(rare)
            found = vector_search(s, query, k=10, env="code")
            assert len(found) == 10 and not set(found) & set(rare)


def test_mode_embedding_and_hybrid_use_the_index(tmp_path, ann_always):
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        add(s, clustered(200, seed=9))
        assert len(s.search("entry", k=5, mode="embedding")) == 5
        assert len(s.search("entry 3", k=5, mode="hybrid", env="code")) == 5
        assert s._ann is not None


def test_hybrid_search_with_the_index_beside_bm25_fuses_the_two_rankings(tmp_path, ann_always):
    # Unfiltered hybrid search runs the model call and the index search in a thread beside BM25;
    # what it fuses must be what the two retrievers give one after the other.
    with MemoryStore(tmp_path / "m.db", embedder=NamedVectors()) as s:
        add(s, clustered(300, seed=4))
        for query in ("entry 7", "entry 12 entry", "nothing matches", "entry"):
            hits = s.search(query, k=10, mode="hybrid")
            with s._snapshot() as conn:
                rankings = [
                    s._bm25_ids(conn, query, store_module.HYBRID_DEPTH, "", []),
                    s._embedding_ids(conn, s._query_vector(query), store_module.HYBRID_DEPTH, "", []),
                ]
            assert [(h.entry.id, h.score) for h in hits] == store_module.rrf(rankings)[:10], query
            assert any("embedding" in h.ranks for h in hits)
        assert s._ann is not None


# -- the file: reused, caught up, or rebuilt ---------------------------------------------------


def reopen(path) -> MemoryStore:
    return MemoryStore(path, embedder=NamedVectors())


def test_a_new_process_loads_the_saved_index_and_catches_up(tmp_path, ann_always, monkeypatch):
    monkeypatch.setattr(ann_index, "SAVE_MIN_CHANGES", 10**9)  # only the build saves
    path = tmp_path / "m.db"
    vectors = clustered(600, seed=10)
    with reopen(path) as s:
        ids = add(s, vectors[:500])
        vector_search(s, vectors[0])
    assert index_path(path, NamedVectors.name).exists()
    with reopen(path) as writer:  # no search: the file is not touched
        add(writer, vectors[500:])
        writer.delete(ids[0])
    with reopen(path) as s:
        assert vector_search(s, vectors[550])[0] == 551
        assert s._ann.rebuilds == 0 and index_ids(s) == stored_ids(s)


@pytest.mark.parametrize(
    "damage",
    ["missing", "truncated", "flipped byte", "garbage", "other store", "ahead of the store"],
)
def test_a_stale_or_corrupt_index_file_is_rebuilt_never_trusted(tmp_path, ann_always, damage):
    path = tmp_path / "m.db"
    vectors = clustered(300, seed=11)
    with reopen(path) as s:
        add(s, vectors)
        vector_search(s, vectors[0])
    file = index_path(path, NamedVectors.name)
    data = file.read_bytes()
    if damage == "missing":
        file.unlink()
    elif damage == "truncated":
        file.write_bytes(data[: len(data) // 2])
    elif damage == "flipped byte":
        file.write_bytes(data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:])
    elif damage == "garbage":
        file.write_bytes(os.urandom(len(data)))
    elif damage == "other store":
        other = tmp_path / "other.db"
        with reopen(other) as s:
            add(s, clustered(300, seed=12))
            vector_search(s, vectors[0])
        file.write_bytes(index_path(other, NamedVectors.name).read_bytes())
    elif damage == "ahead of the store":
        with reopen(path) as s:  # the index file moves on; the store is then put back as it was
            backup = path.read_bytes()
            s.delete(1)
            vector_search(s, vectors[0])
            assert s._ann.save()
        path.write_bytes(backup)
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
    with reopen(path) as s:
        assert vector_search(s, vectors[5])[0] == 6
        assert s._ann.rebuilds == 1 and index_ids(s) == stored_ids(s)


def test_an_index_file_that_cannot_be_written_still_searches(tmp_path, ann_always):
    path = tmp_path / "m.db"
    with reopen(path) as s:
        add(s, clustered(100, seed=13))
    index_path(path, NamedVectors.name).mkdir()  # a rename over a directory fails, even as root
    with MemoryStore(path, embedder=NamedVectors(), read_only=True) as s:
        assert len(vector_search(s, clustered(1, seed=14)[0])) == 10
        assert not s._ann.save() and s._ann.rebuilds == 1
    assert not list(tmp_path.glob(".*.tmp"))


# -- several processes --------------------------------------------------------------------------


def _write(path: str, seed: int, n: int) -> None:
    store_module.ANN_MIN_VECTORS = 0  # a spawned process: the fixture's patch is not inherited
    ann_index.SAVE_MIN_CHANGES = 50
    vectors = clustered(n, seed)
    with MemoryStore(path, embedder=NamedVectors()) as s:
        for start in range(0, n, 20):
            ids = add(s, vectors[start : start + 20])
            s.delete(ids[0])
            vector_search(s, vectors[start])  # each writer keeps (and saves) its own index


def test_two_writer_processes_and_a_reader_stay_in_step(tmp_path, ann_always, monkeypatch):
    monkeypatch.setattr(ann_index, "SAVE_MIN_CHANGES", 50)
    path = tmp_path / "m.db"
    reopen(path).close()
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write, args=(str(path), seed, 400)) for seed in (20, 21)]
    for writer in writers:
        writer.start()
    with reopen(path) as reader:
        while any(writer.is_alive() for writer in writers):
            vector_search(reader, clustered(1, seed=22)[0])
        for writer in writers:
            writer.join()
            assert writer.exitcode == 0
        vector_search(reader, clustered(1, seed=22)[0])
        assert len(stored_ids(reader)) == 2 * (400 - 400 // 20)
        assert index_ids(reader) == stored_ids(reader)
    with reopen(path) as fresh:  # from the file the writers saved last
        vector_search(fresh, clustered(1, seed=23)[0])
        assert index_ids(fresh) == stored_ids(fresh)


def _save_forever(path: str) -> None:
    store_module.ANN_MIN_VECTORS = 0
    with MemoryStore(path, embedder=NamedVectors()) as s:
        vector_search(s, clustered(1, seed=30)[0])
        print("ready", flush=True)
        while True:
            s._ann.save()


def test_a_saver_killed_mid_write_leaves_a_usable_store_and_index(tmp_path, ann_always):
    path = tmp_path / "m.db"
    with reopen(path) as s:
        add(s, clustered(3000, seed=31))
    context = multiprocessing.get_context("spawn")
    for delay in (0.0, 0.05, 0.13):
        saver = context.Process(target=_save_forever, args=(str(path),))
        saver.start()
        deadline = time.monotonic() + 60
        while not index_path(path, NamedVectors.name).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        os.kill(saver.pid, signal.SIGKILL)
        saver.join()
        with reopen(path) as s:
            query = clustered(1, seed=32)[0]
            assert len(vector_search(s, query)) == 10 and s._ann.rebuilds <= 1
            assert index_ids(s) == stored_ids(s)
            assert s._ann.save()  # and the orphaned temporary files of the dead saver go
        assert not list(tmp_path.glob(".*.tmp"))


# -- BM25 posting budget ------------------------------------------------------------------------


def test_postings_budget_grows_with_the_square_root_of_the_store():
    assert postings_budget(0) == 10_000
    assert postings_budget(100_000) == 10_000
    assert postings_budget(400_000) == 20_000  # 10k * sqrt(4)
    assert postings_budget(1_000_000) == 31_622  # 10k * sqrt(10)


def test_plan_postings_keeps_rare_terms_and_windows_common_ones():
    assert plan_postings([900, 10, 300, 50], budget=400) == ([1, 2, 3], 1.0)
    assert plan_postings([900, 10, 300, 50], budget=100) == ([1, 3], 1.0)
    assert plan_postings([900, 800], budget=100) == ([1], 0.125)  # only the newest 100/800
    assert plan_postings([], budget=10) == ([], 1.0)


def test_bm25_scores_only_the_newest_entries_for_a_common_term_and_widens_to_k(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "POSTINGS_BUDGET", 5)
    with MemoryStore(tmp_path / "m.db") as s:
        s.add_many([Entry("episode", f"common word {i}") for i in range(40)])
        # budget 5 of 40 postings: ids 36..40 are scored; all five match, so no widening
        assert sorted(h.entry.id for h in s.search("common", k=5, mode="bm25")) == [36, 37, 38, 39, 40]
        # k = 8 > 5 matches in the window: widened 4x (the newest 20), then cut to 8
        hits = s.search("common", k=8, mode="bm25")
        assert len(hits) == 8 and min(h.entry.id for h in hits) > 20
        assert len(s.search("common", k=40, mode="bm25")) == 40  # widened to the whole store


def test_every_stored_vector_finds_itself_in_every_build(tmp_path, ann_always):
    """usearch's threaded add now and then builds a graph that misses a stored vector even as its own
    query (2 of 300 builds on 2 threads); the index adds with one thread unless told otherwise."""
    vectors = clustered(300, seed=11)
    for build in range(40):
        with MemoryStore(tmp_path / f"m{build}.db", embedder=NamedVectors()) as s:
            ids = add(s, vectors)
            missed = [i for i, v in zip(ids, vectors) if vector_search(s, v)[0] != i]
            assert s._ann.threads == 1 and missed == [], f"build {build} missed {missed}"


def test_search_candidates_grow_with_the_index():
    from agentgym.memory.ann_index import search_expansion

    # 128 up to 128k vectors, then one per 1,000 (1M: 1,000), never above 1,024.
    assert [search_expansion(n) for n in (0, 100_000, 128_000, 300_000, 1_000_000, 10_000_000)] == [
        128,
        128,
        128,
        300,
        1000,
        1024,
    ]
