"""Tests of the SQLite memory store: retrieval, filters, fusion math, concurrency, crashes, migrations."""

from __future__ import annotations

import copy
import math
import multiprocessing
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import numpy as np
import pytest

from agentgym.memory import store as store_module
from agentgym.memory.embeddings import normalise
from agentgym.memory.store import (
    Entry,
    MemoryStore,
    SchemaError,
    filter_sql,
    fts_query,
    prune_terms,
    query_tokens,
    rrf,
    split_statements,
    top_k,
)


class BagOfWords:
    """A deterministic stand-in embedder: hashed word counts, so similarity is word overlap."""

    name = "bag-of-words-test"
    dim = 64

    def __init__(self):
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, zlib.crc32(word.encode()) % self.dim] += 1
        return normalise(out)


EPISODES = [
    Entry(
        "episode",
        "Fixed the tokenizer crash on empty input by returning an empty list early.",
        title="tokenizer crash fix",
        env="code",
        family="repofix",
        task="toolz-3",
        tags=["python", "bugfix"],
    ),
    Entry(
        "episode",
        "Summed column B of the spreadsheet and saved the file as totals.csv.",
        title="spreadsheet sum",
        env="desktop",
        family="spreadsheet",
        task="sheet-1",
        tags=["gui"],
    ),
    Entry(
        "skill",
        "To rename files, list the folder first, then move each file to its new name.",
        title="rename files",
        env="desktop",
        family="files",
        tags=["gui", "files"],
    ),
    Entry(
        "episode",
        "Booked a flight and messaged the user the confirmation number.",
        title="travel booking",
        env="bfcl",
        family="travel",
        tags=["api"],
    ),
    Entry(
        "skill",
        "When a test fails, read the traceback, open the file at the failing line, fix, rerun.",
        title="debug failing tests",
        env="code",
        family="repofix",
        tags=["python", "debugging"],
    ),
]


def fresh(entries=EPISODES):
    """Copies: add() sets ids on the entries it is given."""
    return copy.deepcopy(entries)


@pytest.fixture
def store(tmp_path):
    with MemoryStore(tmp_path / "memory.db") as s:
        s.add_many(fresh())
        yield s


def fts_consistent(path) -> bool:
    """SQLite's own checks: the file, and the FTS index against the entries table (rank=1)."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO entries_fts(entries_fts, rank) VALUES ('integrity-check', 1)")
        return True
    finally:
        conn.close()


def run_python(script: str, *args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)], stdout=subprocess.PIPE, text=True, **kwargs
    )


# -- pure functions -------------------------------------------------------------------------


def test_rrf_hand_computed():
    fused = rrf([[1, 2, 3], [3, 1]], k=60)
    assert [item for item, _ in fused] == [1, 3, 2]
    scores = dict(fused)
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)  # 0.032522
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)  # 0.032266
    assert scores[2] == pytest.approx(1 / 62)

    assert rrf([[10, 20], [20, 30]], k=1) == [(20, pytest.approx(1 / 3 + 1 / 2)), (10, 0.5), (30, pytest.approx(1 / 3))]


def test_rrf_duplicates_ties_and_empty():
    assert rrf([[7, 7, 8]], k=0) == [(7, 1.0), (8, pytest.approx(1 / 3))]  # a repeat counts once
    assert [item for item, _ in rrf([[5], [6]])] == [5, 6]  # ties keep first appearance
    assert rrf([]) == [] and rrf([[], []]) == []


def test_query_tokens_and_fts_query():
    assert query_tokens('fix "parser" AND (lexer*) -x') == ["fix", "parser", "and", "lexer", "x"]
    assert fts_query(["fix", "and", "x"]) == '"fix" OR "and" OR "x"'
    assert query_tokens('*"()-^:') == [] and query_tokens("Fix FIX fix") == ["fix"]
    assert len(query_tokens(" ".join(f"w{i}" for i in range(500)))) == store_module.MAX_QUERY_TERMS


def test_prune_terms_keeps_rarest_within_budget():
    assert prune_terms([900, 10, 300, 50], budget=400) == [1, 2, 3]  # 10 + 50 + 300 <= 400
    assert prune_terms([900, 10, 300, 50], budget=100) == [1, 3]
    assert prune_terms([900, 800], budget=100) == [1]  # the rarest always stays
    assert prune_terms([5, 5, 5], budget=10) == [0, 1]
    assert prune_terms([], budget=10) == []


def test_top_k_and_split_statements():
    assert top_k(np.array([0.1, 0.9, 0.5, 0.7]), 2).tolist() == [1, 3]
    assert top_k(np.array([0.1]), 5).tolist() == [0]
    assert top_k(np.array([]), 3).tolist() == []
    script = "CREATE TABLE t(a); CREATE TRIGGER x AFTER INSERT ON t BEGIN SELECT 1; SELECT 2; END;\n"
    assert len(split_statements(script)) == 2


def test_filter_sql():
    assert filter_sql() == ("", [])
    where, params = filter_sql(kind="skill", env=["a", "b"], tags=["x", "y", "x"])
    assert where.count("entry_tags") == 2 and params == ["skill", "a", "b", "x", "y"]
    assert filter_sql(tags="solo")[1] == ["solo"]  # a bare string is one tag, not characters


# -- retrieval ------------------------------------------------------------------------------


def test_bm25_ranks_obvious_match_first(store):
    hits = store.search("tokenizer crashes on empty input", mode="bm25")
    assert hits[0].entry.task == "toolz-3"
    assert hits[0].ranks == {"bm25": 1} and hits[0].score == pytest.approx(1 / 61)
    assert store.search("spreadsheet column")[0].entry.title == "spreadsheet sum"  # auto = bm25
    assert store.search("flight booking confirmation", k=1)[0].entry.env == "bfcl"


def test_title_weighs_more_than_text(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        s.add(Entry("skill", "nothing here about it, padding words", title="checkpoint"))
        s.add(Entry("skill", "nothing here about checkpoint, padding words", title="other"))
        assert s.search("checkpoint")[0].entry.title == "checkpoint"


def test_filters_env_family_kind_and_tags_all(store):
    assert {h.entry.env for h in store.search("file test fix", k=10, env="code")} == {"code"}
    assert [h.entry.family for h in store.search("file", k=10, family="files")] == ["files"]
    assert {h.entry.kind for h in store.search("file fix test", k=10, kind="skill")} == {"skill"}
    assert {h.entry.title for h in store.search("file", k=10, tags=["gui"])} == {"spreadsheet sum", "rename files"}
    assert [h.entry.title for h in store.search("file", k=10, tags=["gui", "files"])] == ["rename files"]
    assert store.search("file", k=10, tags=["gui", "python"]) == []
    assert (
        store.search("tokenizer", k=10, env=["code", "desktop"], kind="episode", tags=["python"])[0].entry.task
        == "toolz-3"
    )


def test_filters_apply_before_top_k(tmp_path):
    """k results come back even when many better-scoring entries fail the filter."""
    with MemoryStore(tmp_path / "m.db", embedder=BagOfWords()) as s:
        s.add_many([Entry("episode", "deploy deploy deploy service", env="noise") for _ in range(60)])
        s.add_many([Entry("episode", f"deploy once, then other words {i}", env="wanted") for i in range(3)])
        for mode in ("bm25", "embedding", "hybrid"):
            hits = s.search("deploy service", k=3, env="wanted", mode=mode)
            assert len(hits) == 3 and {h.entry.env for h in hits} == {"wanted"}, mode


class FailingEmbedder(BagOfWords):
    """Embeds the entries, then fails on queries (a crashed model process, an out-of-memory)."""

    fail = False

    def embed(self, texts):
        if self.fail:
            raise RuntimeError("embedding model crashed")
        return super().embed(texts)


def test_hybrid_search_embeds_beside_bm25_and_hands_back_the_models_error(tmp_path):
    embedder = FailingEmbedder()
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as s:
        s.add_many(fresh())
        expected = s.search("tokenizer crash", k=3, mode="hybrid")
        s._query_vectors.clear()
        assert s.search("tokenizer crash", k=3, mode="hybrid") == expected  # the background path
        assert "embedding" in expected[0].ranks and "bm25" in expected[0].ranks
        embedder.fail = True
        with pytest.raises(RuntimeError, match="embedding model crashed"):
            s.search("a new query", k=3, mode="hybrid")
        assert s.search("tokenizer crash", k=3, mode="hybrid") == expected  # cached: no model call
        assert s.search("a new query", k=3, mode="bm25")  # the store still answers


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        '"unbalanced',
        "*",
        "a*",
        "(",
        ")",
        "((",
        "AND",
        "OR",
        "NOT",
        "a AND",
        "NEAR(a b)",
        "-",
        "-x",
        "x - y",
        "col:val",
        "title:parser",
        "^start",
        "+",
        "{a b}",
        "'",
        ";",
        "\\",
        "\x00",
        "",
        "   ",
        "_",
        "__init__",
        "ünïcödé 日本語",
        "x" * 5000,
        " ".join(f"w{i}" for i in range(500)),
    ],
)
def test_any_query_text_is_safe(store, query, monkeypatch):
    store.search(query, k=3)
    store.search(query, k=3, env="code", tags=["python"])
    monkeypatch.setattr(store_module, "POSTINGS_BUDGET", 1)  # through the term-pruning path too
    store.search(query, k=3)


def test_bm25_prunes_common_terms_on_large_stores(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "POSTINGS_BUDGET", 5)
    with MemoryStore(tmp_path / "m.db") as s:
        s.add_many([Entry("episode", f"common words everywhere {i}") for i in range(20)])
        target = s.add(Entry("episode", "common words and one rarity, running"))
        assert s._frequencies(s._conn(), ["common", "rarity", "runs", "run_tests", "_"], 21) == [21, 1, 1, 0, 0]
        hits = s.search("common words rarity", k=5)
        assert [h.entry.id for h in hits] == [target]  # only the rare term was kept
        assert len(s.search("common words", k=10)) == 10  # the rarest term stays even over budget
        assert s.search("runs")[0].entry.id == target  # stemmed as the index is: running ~ runs
        s.add_many([Entry("episode", f"rarity number {i}") for i in range(20)])
        assert s._frequencies(s._conn(), ["rarity"], 41) == [21]  # recounted once the store grew


def test_bm25_ranking_is_fts5_ranking_best_first_ties_by_id(tmp_path):
    # The store sorts FTS5's rank itself (ORDER BY +rank LIMIT: a bounded sort); it must give the
    # top of FTS5's full ranking, equal scores by id. A small vocabulary makes many ties.
    rng = random.Random(7)
    words = [f"w{i}" for i in range(12)]
    with MemoryStore(tmp_path / "m.db") as s:
        s.add_many(
            [
                Entry("episode", " ".join(rng.choices(words, k=rng.randint(1, 6))), title=rng.choice(words))
                for _ in range(300)
            ]
        )
        conn = s._conn()
        for _ in range(40):
            query = " ".join(rng.sample(words, rng.randint(1, 4)))
            ranked = conn.execute(
                "SELECT rowid, rank FROM entries_fts WHERE entries_fts MATCH ?", (fts_query(query_tokens(query)),)
            ).fetchall()
            expected = [rowid for rowid, _ in sorted(ranked, key=lambda row: (row[1], row[0]))]
            for depth in (1, 5, 50):
                assert s._bm25_ids(conn, query, depth, "", []) == expected[:depth], (query, depth)


def test_exact_search_finds_underscored_and_dotted_words(store):
    store.add(Entry("skill", "call run_tests() after editing solution.py"))
    assert store.search("run_tests")[0].entry.text.startswith("call run_tests")
    assert store.search("solution.py")[0].entry.text.startswith("call run_tests")


# -- CRUD, transactions ---------------------------------------------------------------------


def test_add_get_roundtrip_sets_id_and_times(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        entry = Entry(
            "skill",
            "body",
            title="t",
            env="e",
            family="f",
            task="k",
            tags=["a", "b", "a"],
            data={"uses": 3, "nested": {"x": [1, 2]}},
        )
        before = time.time()
        entry_id = s.add(entry)
        assert entry.id == entry_id and before <= entry.created == entry.updated <= time.time()
        got = s.get(entry_id)
        assert got == Entry(
            "skill",
            "body",
            title="t",
            env="e",
            family="f",
            task="k",
            tags=["a", "b"],
            data={"uses": 3, "nested": {"x": [1, 2]}},
            id=entry_id,
            created=entry.created,
            updated=entry.updated,
        )
        assert s.get(entry_id + 100) is None
        imported = Entry("skill", "old", created=1234.5)
        s.add(imported)
        assert s.get(imported.id).created == 1234.5


def test_update_keeps_index_and_tags_in_sync(store, tmp_path):
    target = store.search("tokenizer")[0].entry
    store.update(target.id, text="Rewrote the lexer state machine.", tags=["rust"], data={"v": 2})
    assert store.search("empty input") == []  # the old text left the index
    got = store.get(target.id)
    assert got.text.startswith("Rewrote") and got.tags == ["rust"] and got.data == {"v": 2}
    assert got.updated > target.updated and got.created == target.created
    assert store.search("lexer state machine")[0].entry.id == target.id
    assert [h.entry.id for h in store.search("lexer", tags=["rust"])] == [target.id]
    assert store.search("lexer", tags=["python"]) == []
    store.update(target.id, title="renamed")
    assert store.search("renamed")[0].entry.id == target.id
    with pytest.raises(TypeError):
        store.update(target.id, id=5)
    with pytest.raises(TypeError):
        store.update(target.id, colour="red")
    with pytest.raises(KeyError):
        store.update(10_000, text="x")
    assert fts_consistent(tmp_path / "memory.db")


def test_update_data_and_delete(store, tmp_path):
    entry_id = store.search("rename files")[0].entry.id
    assert store.update_data(entry_id, lambda d: {**d, "uses": d.get("uses", 0) + 1}) == {"uses": 1}
    assert store.update_data(entry_id, lambda d: {**d, "uses": d["uses"] + 1}) == {"uses": 2}
    assert store.get(entry_id).data == {"uses": 2}
    with pytest.raises(TypeError):
        store.update_data(entry_id, lambda d: [d])
    with pytest.raises(KeyError):
        store.update_data(10_000, lambda d: d)
    n = store.count()
    store.delete(entry_id)
    store.delete(entry_id)  # no-op
    assert store.get(entry_id) is None and store.count() == n - 1
    assert all(h.entry.id != entry_id for h in store.search("rename files list folder", k=10))
    assert store.search("anything", tags=["files"]) == []
    assert fts_consistent(tmp_path / "memory.db")


def test_entries_and_count_with_filters(store, monkeypatch):
    monkeypatch.setattr(store_module, "PAGE_SIZE", 2)  # several pages
    assert [e.title for e in store.entries()] == [e.title for e in EPISODES]
    assert [e.title for e in store.entries(env="desktop", tags=["gui"])] == ["spreadsheet sum", "rename files"]
    assert store.count() == 5 and store.count(kind="skill") == 2 and store.count(env="code", kind="skill") == 1
    # writing while iterating is allowed: pages are separate statements
    for entry in store.entries(kind="skill"):
        store.update_data(entry.id, lambda d: {"seen": True})
    assert all(e.data == {"seen": True} for e in store.entries(kind="skill"))


def test_transaction_rolls_back_and_nests(store):
    n = store.count()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add(Entry("episode", "zebra inside a rolled back transaction"))
            raise RuntimeError("boom")
    assert store.count() == n and store.search("zebra") == []

    with store.transaction():
        store.add(Entry("episode", "outer one"))
        with pytest.raises(ValueError):
            with store.transaction():
                store.add(Entry("episode", "inner rolled back"))
                raise ValueError
        store.add(Entry("episode", "outer two"))
    assert store.count() == n + 2 and store.search("inner") == [] and len(store.search("outer", k=10)) == 2

    with pytest.raises(TypeError):  # data that is not JSON: nothing of the batch is written
        store.add_many([Entry("episode", "good"), Entry("episode", "bad", data={"x": object()})])
    assert store.count() == n + 2


def test_read_only(store, tmp_path):
    with MemoryStore(tmp_path / "memory.db", read_only=True) as ro:
        assert ro.count() == 5 and ro.search("tokenizer")[0].entry.task == "toolz-3"
        with pytest.raises(sqlite3.OperationalError):
            ro.add(Entry("episode", "nope"))
    with pytest.raises(sqlite3.OperationalError):
        MemoryStore(tmp_path / "missing.db", read_only=True)


# -- schema versions --------------------------------------------------------------------------


def test_new_file_is_current_and_newer_file_is_refused(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        assert s.schema_version == len(store_module.MIGRATIONS)
    conn = sqlite3.connect(tmp_path / "m.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(SchemaError, match="v99, newer"):
        MemoryStore(tmp_path / "m.db")
    with pytest.raises(SchemaError, match="v99, newer"):
        MemoryStore(tmp_path / "m.db", read_only=True)


def test_older_file_is_migrated_in_one_transaction(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    current = len(store_module.MIGRATIONS)
    with MemoryStore(path) as s:  # a file at the current version, with data
        s.add(Entry("skill", "kept across the migration", env="code"))
    v2 = store_module.MIGRATIONS + [
        "ALTER TABLE entries ADD COLUMN source TEXT NOT NULL DEFAULT 'v1';"
        "CREATE INDEX entries_source ON entries(source);"
    ]
    broken = store_module.MIGRATIONS + ["ALTER TABLE entries ADD COLUMN source TEXT; SELECT * FROM nowhere;"]

    monkeypatch.setattr(store_module, "MIGRATIONS", broken)
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        MemoryStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (current,)
    assert "source" not in [row[1] for row in conn.execute("PRAGMA table_info(entries)")]  # rolled back
    conn.close()
    with pytest.raises(SchemaError, match="older"):
        MemoryStore(path, read_only=True)

    monkeypatch.setattr(store_module, "MIGRATIONS", v2)
    with MemoryStore(path) as s:
        assert s.schema_version == current + 1
        assert s.search("kept migration")[0].entry.env == "code"
        assert s._conn().execute("SELECT source FROM entries").fetchone() == ("v1",)


# -- embeddings ------------------------------------------------------------------------------


def test_embedding_and_hybrid_search_with_a_stub_embedder(tmp_path):
    embedder = BagOfWords()
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as s:
        s.add_many(fresh())
        hits = s.search("spreadsheet column sum saved", mode="embedding", k=2)
        assert hits[0].entry.title == "spreadsheet sum" and set(hits[0].ranks) == {"embedding"}
        hybrid = s.search("spreadsheet column sum saved", k=3)  # auto = hybrid
        assert hybrid[0].entry.title == "spreadsheet sum"
        assert hybrid[0].ranks == {"bm25": 1, "embedding": 1}
        assert hybrid[0].score == pytest.approx(2 / 61)
        calls = embedder.calls
        s.search("spreadsheet column sum saved", k=3)
        assert embedder.calls == calls  # the query's vector was cached
        with pytest.raises(ValueError):
            s.search("x", mode="fuzzy")
    with MemoryStore(tmp_path / "m.db") as plain, pytest.raises(ValueError, match="embedder"):
        plain.search("x", mode="hybrid")


def test_vector_cache_follows_adds_updates_and_deletes_by_other_writers(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path, embedder=BagOfWords()) as reader, MemoryStore(path, embedder=BagOfWords()) as writer:
        first = writer.add(Entry("episode", "alpha beta gamma"))
        assert [h.entry.id for h in reader.search("alpha beta gamma", mode="embedding")] == [first]
        second = writer.add(Entry("episode", "delta epsilon zeta"))
        assert reader.search("delta epsilon zeta", mode="embedding")[0].entry.id == second  # appended
        writer.update(first, text="omicron sigma tau")
        assert reader.search("omicron sigma tau", mode="embedding")[0].entry.id == first  # re-embedded
        hits = reader.search("omicron", mode="embedding", k=10)
        assert sorted(h.entry.id for h in hits) == [first, second]  # one vector per entry
        writer.delete(second)
        assert [h.entry.id for h in reader.search("delta epsilon", mode="embedding", k=10)] == [first]
        assert writer._conn().execute("SELECT count(*) FROM embeddings").fetchone() == (1,)


def test_embed_missing_and_precomputed_vectors(tmp_path):
    path = tmp_path / "m.db"
    with MemoryStore(path) as plain:  # a worker without an embedder
        plain.add_many(fresh())
    embedder = BagOfWords()
    with MemoryStore(path, embedder=embedder) as s:
        assert s.search("spreadsheet", mode="embedding") == []
        assert s.embed_missing(batch_size=2) == 5 and s.embed_missing() == 0
        assert s.search("spreadsheet column sum saved", mode="embedding")[0].entry.title == "spreadsheet sum"
        calls = embedder.calls
        vectors = embedder.embed(["precomputed vector text"])
        new_id = s.add_many([Entry("episode", "text that differs")], vectors=vectors)[0]
        assert embedder.calls == calls + 1  # only the call above
        assert s.search("precomputed vector text", mode="embedding")[0].entry.id == new_id
        with pytest.raises(ValueError):
            s.add_many([Entry("episode", "a"), Entry("episode", "b")], vectors=vectors)


@pytest.mark.slow
def test_real_minilm_finds_paraphrases(tmp_path):
    from agentgym.memory.embeddings import default_embedder

    embedder = default_embedder(num_threads=1)
    assert embedder.dim == 384
    vectors = embedder.embed(["hello world", "Hello, world!"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5) and vectors[0] @ vectors[1] > 0.8
    with MemoryStore(tmp_path / "m.db", embedder=embedder) as s:
        s.add_many(fresh())
        # no word in common with the spreadsheet entry: BM25 cannot, the embedding can
        hits = s.search("add up numbers in a table", mode="embedding", k=1)
        assert hits[0].entry.title == "spreadsheet sum"
        hits = s.search("airplane ticket reservation", k=2)
        assert hits[0].entry.title == "travel booking" and "embedding" in hits[0].ranks


# -- concurrency and crashes --------------------------------------------------------------------

WRITER = """
import sys
from agentgym.memory.store import Entry, MemoryStore
path, worker, n, bumps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = MemoryStore(path)
for i in range(n):
    store.add(Entry("episode", f"worker {worker} wrote marker w{worker}x{i}", env=f"env{worker % 2}",
                    tags=[f"w{worker}"], data={"i": i}))
    if i < bumps:
        store.update_data(1, lambda d: {**d, "count": d.get("count", 0) + 1})
"""


def test_eight_writer_processes_lose_nothing(tmp_path):
    path, workers, n, bumps = tmp_path / "m.db", 8, 40, 25
    with MemoryStore(path) as s:
        counter_id = s.add(Entry("skill", "shared counter"))
        assert counter_id == 1
    procs = [run_python(WRITER, path, w, n, bumps) for w in range(workers)]
    assert [p.wait(timeout=120) for p in procs] == [0] * workers
    with MemoryStore(path) as s:
        assert s.count() == 1 + workers * n
        assert s.get(counter_id).data == {"count": workers * bumps}
        for w in range(workers):
            assert sorted(e.data["i"] for e in s.entries(tags=[f"w{w}"])) == list(range(n))
            for i in range(n):
                hits = s.search(f"w{w}x{i}", k=3)
                assert [h.entry.text for h in hits] == [f"worker {w} wrote marker w{w}x{i}"]
    assert fts_consistent(path)


def test_concurrent_first_opens_migrate_once(tmp_path):
    path = tmp_path / "new.db"
    procs = [run_python(WRITER, path, w, 1, 0) for w in range(6)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    with MemoryStore(path) as s:
        assert s.count() == 6 and s.schema_version == len(store_module.MIGRATIONS)


def test_threads_share_one_store(tmp_path):
    with MemoryStore(tmp_path / "m.db") as s:
        counter = s.add(Entry("skill", "counter"))
        errors = []

        def work(t):
            try:
                for i in range(30):
                    s.add(Entry("episode", f"thread t{t}n{i}"))
                    s.update_data(counter, lambda d: {"n": d.get("n", 0) + 1})
                    s.search(f"t{t}n{i}")
            except Exception as exc:  # surfaced below: pytest does not see thread exceptions
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert s.count() == 1 + 4 * 30 and s.get(counter).data == {"n": 120}


def _forked_child(path, queue):
    queue.put(_STORE_FOR_FORK.search("inherited")[0].entry.text)
    _STORE_FOR_FORK.add(Entry("episode", "written by the child"))


_STORE_FOR_FORK = None


def test_store_survives_fork(tmp_path):
    global _STORE_FOR_FORK
    path = tmp_path / "m.db"
    _STORE_FOR_FORK = MemoryStore(path)
    try:
        _STORE_FOR_FORK.add(Entry("episode", "inherited from the parent"))
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_forked_child, args=(path, queue))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0 and queue.get(timeout=5) == "inherited from the parent"
        assert _STORE_FOR_FORK.search("written by the child")[0].entry.text == "written by the child"
    finally:
        _STORE_FOR_FORK.close()


KILLED_WRITER = """
import sys, time
from agentgym.memory.store import Entry, MemoryStore
path, batch_size, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = MemoryStore(path)
def batch(b):
    return [Entry("episode", f"batch b{b} item {i} " + "lorem ipsum dolor sit amet " * 12,
                  tags=[f"b{b}"], data={"b": b}) for i in range(batch_size)]
if mode == "hang":  # a whole batch written, transaction still open
    with store.transaction():
        store.add_many(batch(10**6))
        print("inside", flush=True)
        time.sleep(60)
b = int(time.time() * 1000) % 10**6 * 100
while True:
    store.add_many(batch(b))
    print(b, flush=True)
    b += 1
"""


def check_batches(path, batch_size, committed):
    assert fts_consistent(path)
    with MemoryStore(path) as s:
        sizes = {}
        for entry in s.entries():
            sizes[entry.data["b"]] = sizes.get(entry.data["b"], 0) + 1
        assert set(sizes.values()) <= {batch_size}, "a torn batch"
        assert committed <= set(sizes)
        for b in random.Random(0).sample(sorted(sizes), min(5, len(sizes))):
            assert len(s.search(f"b{b}", k=batch_size + 1)) == batch_size
        return sizes


def test_sigkill_inside_transaction_leaves_nothing(tmp_path):
    path, batch_size = tmp_path / "m.db", 300
    proc = run_python(KILLED_WRITER, path, batch_size, "hang")
    assert proc.stdout.readline().strip() == "inside"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert check_batches(path, batch_size, set()) == {}
    with MemoryStore(path) as s:  # the lock died with the writer
        s.add(Entry("episode", "after the crash"))
        assert s.count() == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_write_keeps_store_consistent(tmp_path, seed):
    path, batch_size = tmp_path / "m.db", 400
    committed = set()
    for round_ in range(2):  # the second writer starts on a file recovered from a kill
        proc = run_python(KILLED_WRITER, path, batch_size, "loop")
        committed.add(int(proc.stdout.readline()))
        time.sleep(random.Random(seed * 10 + round_).uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        committed |= {int(line) for line in proc.stdout.read().split()}
        proc.wait(timeout=30)
        sizes = check_batches(path, batch_size, committed)
        assert math.isclose(sum(sizes.values()), batch_size * len(sizes))
