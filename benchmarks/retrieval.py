"""Retrieval benchmark: spladekit's Index vs PISA (MaxScore, BlockMaxWAND) vs BMP vs Seismic, in one run.

Corpora (seeded, deterministic):
- ``synthetic-N``: document ``i`` is real SciFact document ``i mod 5,183`` (splade-tiny vectors),
  each term kept with probability 0.8 and its weight multiplied by U(0.8, 1.2) (≈ 199 terms per
  document as in the issue); generated block by block (seed ``[0, block]``), never whole in memory;
- ``scifact``: the real 5,183 SciFact documents (a real distribution);
- ``zipf-N``: Zipf-drawn terms and integer impacts (:func:`zipf_rows`; ≈ 120 terms a document,
  300 queries of ≈ 20 terms), for runs without the model (no encoding at all).
Queries: the SciFact test queries (splade-tiny; the first ``$SPLADEKIT_BENCH_QUERIES``, default all
300). Every weight is quantised to an integer impact ``round(100·w)`` (queries too), so spladekit,
PISA and Seismic see the very same vectors and exact dot products (integer sums below 2^24 are
exact in float32), so exact top-k lists agree. BMP gets 8-bit impacts (× 255 / max, from
spladekit's CIFF export) and queries scaled to a largest weight of 32 (its own limits:
``spladekit.index.formats.bmp``), so its lists are compared with exact search as overlap.

Phases, each in a fresh process (peak RSS = that process's ``ru_maxrss``): ``build`` (the folder
written by ``spladekit.index.writer`` under ``$SPLADEKIT_BENCH_BUDGET`` bytes, default 1 GiB),
``search`` (open, exact ms/query for k = 10 and 1000, batch and one query per call), ``shards``,
``pisa_build``/``pisa_search``, ``bmp_build`` (CIFF export + ``ciff2bmp``)/``bmp_search``,
``seismic_index`` (``Index.seismic()``: built and stored), ``seismic_shards`` (Seismic by shards,
:mod:`spladekit.index.seismic_shards`: for each count of ``$SPLADEKIT_BENCH_SHARDS``, default
1,2,4, a build process (peak RSS, time, size) and a search process (loaded RSS; three settings along
the recall/latency curve, the documented one in the middle; k = 10 and 1000; recall against exact)), ``seismic_reopen`` (a new process:
``Index.open`` + the stored index, then ``Index.search(searcher=SeismicConfig(...))`` at query_cut 20 /
heap_factor 0.5, the setting of docs/serving.md, and a sweep), ``seismic_direct`` (pyseismic alone
on the same stored file: ``SeismicIndex.load`` and its own ``batch_search``/``search`` calls with
the query arrays made beforehand: the anchor of the wrapper's cost). 1 thread everywhere. Times are
wall clock (``perf_counter``) and process CPU (``process_time``); the machine is shared, so the CPU
figures and the ratios inside one run are the ones to read.

Usage::

    PYTHONPATH=src python benchmarks/retrieval.py --docs 1000000 --no-scifact --work /tmp/bench --json /tmp/bench/r.json

The SciFact vectors are encoded once with ``../shared/models/splade-tiny`` and cached in
``benchmarks/.cache`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPLADEKIT_BENCH_CACHE", HERE / ".cache"))
SCALE = 100.0
BLOCK = 50_000  # synthetic rows generated at a time
ONE_AT_A_TIME = int(os.environ.get("SPLADEKIT_BENCH_ONE", 100))  # queries timed one per call (the first ones)
SWEEP_CUTS = (10, 20, 40, 80)  # Seismic query_cut values swept
SWEEP_HEAPS = (0.9, 0.7, 0.5, 0.3)  # Seismic heap_factor values swept (lower: more blocks scored, higher recall)
SEISMIC_AT = {"query_cut": 20, "heap_factor": 0.5}  # the setting of docs/serving.md (recall@10 ≥ 0.95 at 1M)
BUDGET = int(os.environ.get("SPLADEKIT_BENCH_BUDGET", 1 << 30))  # the index writer's memory budget, bytes
PISA_ALGORITHMS = tuple(
    os.environ.get("SPLADEKIT_BENCH_PISA", "maxscore,block_max_wand").split(",")
)  # e.g. "maxscore" alone


def shared() -> Path:
    return Path(os.environ.get("SPLADEKIT_SHARED", HERE.parent.parent / "shared"))


# ----------------------------------------------------------------------------------- data
def scifact_vectors() -> tuple[sp.csr_matrix, sp.csr_matrix, list[str], list[str]]:
    """splade-tiny vectors of SciFact (documents, test queries), encoded once and cached."""
    docs_path, queries_path, ids_path = (
        CACHE / "scifact-docs.npz",
        CACHE / "scifact-queries.npz",
        CACHE / "scifact-ids.json",
    )
    if not ids_path.exists():
        import torch

        from spladekit.data.beir import load_beir
        from spladekit.model.encoder import SpladeEncoder

        torch.set_num_threads(1)
        dataset = load_beir(shared() / "data/beir/scifact", "test")
        encoder = SpladeEncoder.from_pretrained(str(shared() / "models/splade-tiny"), batch_size=32)
        CACHE.mkdir(exist_ok=True)
        sp.save_npz(queries_path, encoder.encode_queries(list(dataset.queries.values())))
        sp.save_npz(docs_path, encoder.encode_documents(list(dataset.corpus.values()), show_progress=True))
        ids_path.write_text(json.dumps({"doc_ids": list(dataset.corpus), "query_ids": list(dataset.queries)}))
    ids = json.loads(ids_path.read_text())
    return sp.load_npz(docs_path).tocsr(), sp.load_npz(queries_path).tocsr(), ids["doc_ids"], ids["query_ids"]


def quantise(m: sp.csr_matrix) -> sp.csr_matrix:
    m = sp.csr_matrix(m, dtype=np.float32, copy=True)
    m.data = np.rint(m.data * SCALE).astype(np.float32)
    m.eliminate_zeros()
    m.sort_indices()
    return m


QUERIES = int(
    os.environ.get("SPLADEKIT_BENCH_QUERIES", 300)
)  # the first N SciFact test queries (fewer for the largest corpora)


def queries(corpus: str | None = None) -> tuple[sp.csr_matrix, list[str]]:
    if corpus is not None and corpus.startswith("zipf-"):
        return zipf_rows(QUERIES, ZIPF_QUERY_TERMS, seed=[1, 0]), [f"q{i}" for i in range(QUERIES)]
    _, q, _, qids = scifact_vectors()
    return quantise(q)[:QUERIES], qids[:QUERIES]


ZIPF_VOCAB, ZIPF_DOC_TERMS, ZIPF_QUERY_TERMS = (
    30_522,
    120,
    20,
)  # a BERT vocabulary; mean active terms of a document, of a query


def zipf_rows(n: int, mean_terms: int, seed) -> sp.csr_matrix:
    """``zipf-N`` rows: a Poisson(``mean_terms``) number of term draws, term ``j`` with probability
    ∝ (j + 1)^-0.8 (Zipf-like, as SPLADE's frequent terms; a term drawn twice is one entry, its
    impacts summed), integer impacts 1..300 (Gamma-shaped): integer weights like the other corpora."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, ZIPF_VOCAB + 1) ** 0.8
    p /= p.sum()
    counts = np.clip(rng.poisson(mean_terms, n), 1, None)
    cols = rng.choice(ZIPF_VOCAB, size=int(counts.sum()), p=p).astype(np.int32)
    rows = np.repeat(np.arange(n), counts)
    m = sp.csr_matrix(
        (np.minimum(300, 1 + rng.gamma(1.5, 30, rows.size)).astype(np.int32).astype(np.float32), (rows, cols)),
        shape=(n, ZIPF_VOCAB),
    )
    m.sum_duplicates()
    m.data = np.minimum(m.data, 300).astype(np.float32)
    m.sort_indices()
    return m


def corpus_blocks(name: str, seed: int = 0):
    """``(blocks() factory, doc_ids, vocab_size)`` of a corpus; blocks are canonical quantised CSR."""
    if name.startswith("zipf-"):  # no model needed: zipf_rows, block by block (seed [2, block])
        n = int(name.split("-")[1])
        return (
            lambda: (
                zipf_rows(min(BLOCK, n - start), ZIPF_DOC_TERMS, seed=[2, b])
                for b, start in enumerate(range(0, n, BLOCK))
            ),
            [f"doc{i}" for i in range(n)],
            ZIPF_VOCAB,
        )
    base, _, base_ids, _ = scifact_vectors()
    if name == "scifact":
        return (lambda: iter([quantise(base)])), list(base_ids), base.shape[1]
    n = int(name.split("-")[1])
    base.sort_indices()
    lengths = np.diff(base.indptr)

    def blocks():
        for b, start in enumerate(range(0, n, BLOCK)):
            rng = np.random.default_rng([seed, b])
            rows = np.arange(start, min(n, start + BLOCK)) % base.shape[0]
            counts = lengths[rows]
            offsets = np.repeat(base.indptr[rows] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            keep = rng.random(offsets.size) < 0.8
            weights = base.data[offsets] * rng.uniform(0.8, 1.2, offsets.size).astype(np.float32)
            values = np.rint(weights * SCALE).astype(np.float32)
            keep &= values > 0
            row_of = np.repeat(np.arange(rows.size), counts)[keep]
            indptr = np.concatenate([[0], np.cumsum(np.bincount(row_of, minlength=rows.size))])
            yield sp.csr_matrix(
                (values[keep], base.indices[offsets][keep].astype(np.int32), indptr), shape=(rows.size, base.shape[1])
            )

    return blocks, [f"doc{i}" for i in range(n)], base.shape[1]


# ----------------------------------------------------------------------------------- helpers
def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


class Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def timed_search(search_batch, search_one, q, k: int) -> dict:
    """ms/query (wall, CPU) for the 300 queries in one call and for ONE_AT_A_TIME single-query calls."""
    search_batch(q[:5], k)  # warm-up (page cache, lazy set-up)
    with Clock() as batch:
        hits = search_batch(q, k)
    with Clock() as one:
        for i in range(min(ONE_AT_A_TIME, q.shape[0])):
            search_one(q, i, k)
    n1 = min(ONE_AT_A_TIME, q.shape[0])
    return {
        "hits": hits,
        f"batch_ms_k{k}": 1000 * batch.wall / q.shape[0],
        f"batch_cpu_ms_k{k}": 1000 * batch.cpu / q.shape[0],
        f"one_ms_k{k}": 1000 * one.wall / n1,
        f"one_cpu_ms_k{k}": 1000 * one.cpu / n1,
    }


def recall10(approx, exact) -> float:
    values = []
    for a, e in zip(approx, exact):
        truth = set(e[:10])
        if truth:
            values.append(len(truth & set(a[:10])) / len(truth))
    return float(np.mean(values))


# ----------------------------------------------------------------------------------- phases
def phase_build(corpus: str, work: Path) -> dict:
    from spladekit.index.writer import write_index

    blocks, ids, vocab = corpus_blocks(corpus)
    out = work / corpus / "spladekit"
    metadata, vocabulary = {"corpus": corpus}, None
    if not corpus.startswith(
        "zipf-"
    ):  # splade-tiny's vectors: its model recorded, so text queries work (benchmarks/serve.py --index)
        from spladekit.index.export import model_vocabulary

        model = shared() / "models" / "splade-tiny"
        metadata, vocabulary = {"corpus": corpus, "model": str(model)}, model_vocabulary(model)
    base = peak_rss()
    with Clock() as c:
        write_index(out, blocks, ids, vocab, metadata, vocabulary, memory_budget=BUDGET)
    arrays = sum(f.stat().st_size for f in out.glob("*.npy"))
    meta = json.loads((out / "index.json").read_text())
    return {
        "build_s": c.wall,
        "build_cpu_s": c.cpu,
        "bytes": folder_bytes(out),
        "array_bytes": arrays,
        "nnz": meta["nnz"],
        "terms_per_doc": meta["nnz"] / meta["num_docs"],
        "build_rss": peak_rss(),
        "build_base_rss": base,
        "budget": BUDGET,
    }


def phase_search(corpus: str, work: Path) -> dict:
    """Exact search as users get it (pruned: MaxScore over blocks) and with every posting added
    (``ExactConfig(prune=False)``, the anchor), k = 10 and 1000, batch and one per call; then the two
    interleaved query by query (:func:`pruned_anchor`)."""
    from spladekit.index.index import Index
    from spladekit.index.searcher import ExactConfig

    q, qids = queries(corpus)
    with Clock() as c:
        index = Index.open(work / corpus / "spladekit")
    out = {"open_s": c.wall, "open_rss": peak_rss()}
    with Clock() as c:  # untimed pass: the block maxima of every query term (once per term) and the lists' pages,
        index.search(q, k=10)  # as PISA's open reads its whole index into memory
    out.update(first_pass_s=c.wall, first_pass_cpu_s=c.cpu)
    for prune in (True, False):
        exact = ExactConfig(prune=prune)
        for k in (10, 1000):
            r = timed_search(
                lambda qq, kk: [[d for d, _ in h] for h in index.search(qq, k=kk, searcher=exact).hits],  # noqa: B023 (called in this iteration only)
                lambda qq, i, kk: index.search(qq[i : i + 1], k=kk, searcher=exact),  # noqa: B023 (called in this iteration only)
                q,
                k,
            )
            hits = r.pop("hits")
            out.update(r if prune else {f"unpruned_{key}": v for key, v in r.items()})
            path = work / corpus / f"exact-top{k}.json"
            if prune:
                path.write_text(json.dumps(hits))
            else:
                out[f"pruned_same_as_unpruned_k{k}"] = hits == json.loads(path.read_text())
    out.update(pruned_anchor(index, q))
    out["search_rss"] = peak_rss()
    return out


def pruned_anchor(index, q) -> dict:
    """One per call, k = 10 and 1000: exact search pruned and with every posting added, interleaved
    query by query in this process (alternating which runs first: the second runs on warm caches):
    CPU ms of each and their ratio."""
    from spladekit.index.searcher import ExactConfig

    n, out = min(ONE_AT_A_TIME, q.shape[0]), {}
    for k in (10, 1000):
        pruned, every = [], []
        for i in range(n):
            pair = ((True, pruned), (False, every))
            for prune, into in pair if i % 2 == 0 else pair[::-1]:
                began = time.process_time()
                index.search(q[i : i + 1], k=k, searcher=ExactConfig(prune=prune))
                into.append(time.process_time() - began)
        out.update(
            {
                f"interleaved_pruned_cpu_ms_k{k}": 1000 * float(np.mean(pruned)),
                f"interleaved_unpruned_cpu_ms_k{k}": 1000 * float(np.mean(every)),
                f"pruned_over_unpruned_k{k}": float(np.sum(pruned) / np.sum(every)),
            }
        )
    return out


def phase_shards(corpus: str, work: Path) -> dict:
    """2 shard folders (even / odd rows) searched as one vs the one folder: identical runs?"""
    from spladekit.index.index import Index, ShardedIndex
    from spladekit.index.writer import write_index

    blocks, ids, vocab = corpus_blocks(corpus)
    for part in (0, 1):

        def half(part=part):
            start = 0
            for block in blocks():
                rows = np.arange(block.shape[0])
                yield block[rows[(rows + start) % 2 == part]]
                start += block.shape[0]

        write_index(work / corpus / f"shard{part}", half, ids[part::2], vocab, {"corpus": corpus, "shard": part})
    q, _ = queries(corpus)
    one = Index.open(work / corpus / "spladekit").search(q, k=1000)
    two = ShardedIndex([Index.open(work / corpus / f"shard{p}") for p in (0, 1)]).search(q, k=1000)
    for p in (0, 1):
        shutil.rmtree(work / corpus / f"shard{p}")
    return {
        "shards_equal_one_folder": one.hits == two.hits,
        "shards_ms": two.latency.mean_ms,
        "one_folder_ms": one.latency.mean_ms,
    }


def phase_pisa_build(corpus: str, work: Path) -> dict:
    from pyterrier_pisa import PisaIndex

    blocks, ids, _ = corpus_blocks(corpus)

    def docs():
        row = 0
        for block in blocks():
            for i in range(block.shape[0]):
                a, b = block.indptr[i], block.indptr[i + 1]
                yield {
                    "docno": ids[row],
                    "toks": dict(zip(map(str, block.indices[a:b].tolist()), block.data[a:b].astype(int).tolist())),
                }
                row += 1

    path = work / corpus / "pisa"
    shutil.rmtree(path, ignore_errors=True)
    with Clock() as c:
        PisaIndex(str(path), stemmer="none", threads=1).toks_indexer(scale=1.0).index(docs())
    return {"build_s": c.wall, "build_cpu_s": c.cpu, "bytes": folder_bytes(path), "build_rss": peak_rss()}


def phase_pisa_search(corpus: str, work: Path) -> dict:
    import pandas as pd
    from pyterrier_pisa import PisaIndex

    q, qids = queries(corpus)
    frames = [
        {"qid": qid, "query_toks": {str(j): float(v) for j, v in zip(q[i].indices, q[i].data)}}
        for i, qid in enumerate(qids)
    ]
    with Clock() as c:
        index = PisaIndex(str(work / corpus / "pisa"), stemmer="none", threads=1)
        retrievers = {
            (a, k): index.quantized(num_results=k, query_algorithm=a, toks_scale=1.0, threads=1)
            for a in PISA_ALGORITHMS
            for k in (10, 1000)
        }
        retrievers["maxscore", 10](pd.DataFrame(frames[:1]))  # opening happens on first use
    out = {"open_s": c.wall}

    def run(rows, algorithm, k):
        res = retrievers[algorithm, k](pd.DataFrame(rows))
        ranked = {}
        for qid, docno, score in zip(res["qid"], res["docno"], res["score"]):
            ranked.setdefault(qid, []).append((docno, score))
        # PISA's order among equal scores is its own; apply the tie rule for the comparison
        return [[d for d, _ in sorted(ranked.get(r["qid"], []), key=lambda p: (-p[1], p[0]))] for r in rows]

    for algorithm in PISA_ALGORITHMS:
        part = {}
        for k in (10, 1000):
            r = timed_search(
                lambda qq, kk: run(frames, algorithm, kk),  # noqa: B023 (called in this iteration only)
                lambda qq, i, kk: run(frames[i : i + 1], algorithm, kk),  # noqa: B023 (called in this iteration only)
                q,
                k,
            )
            hits = r.pop("hits")
            part.update(r)
            exact = json.loads((work / corpus / f"exact-top{k}.json").read_text())
            part[f"same_top{k}_as_exact"] = float(np.mean([a == e for a, e in zip(hits, exact)]))
        out[algorithm] = part
    out["search_rss"] = peak_rss()
    return out


def seismic_file(corpus: str, work: Path) -> Path:
    """pyseismic's own file inside spladekit's stored Seismic index (built by phase seismic_index)."""
    from spladekit.index.seismic import SeismicSearcher

    return work / corpus / "spladekit" / "seismic" / SeismicSearcher.INDEX_FILE


def phase_seismic_direct(corpus: str, work: Path) -> dict:
    """pyseismic-lsr alone on the same stored file: ``SeismicIndex.load``, then its own calls timed
    (``batch_search`` for all queries, ``search`` per query), with the query arrays made beforehand
    (untimed) and nothing done with the results inside the clock: the anchor of spladekit's wrapper."""
    import seismic

    q, _ = queries(corpus)
    string = seismic.get_seismic_string()
    with Clock() as c:
        index = seismic.SeismicIndex.load(str(seismic_file(corpus, work)))
    out = {"open_s": c.wall, "open_cpu_s": c.cpu}
    qids = np.array([str(i) for i in range(q.shape[0])], dtype=string)
    comps = [np.array([str(j) for j in q[i].indices], dtype=string) for i in range(q.shape[0])]
    vals = [q[i].data.astype(np.float32) for i in range(q.shape[0])]
    exact10 = json.loads((work / corpus / "exact-top10.json").read_text())
    base_ids = scifact_vectors()[2] if corpus == "scifact" else None

    def named(res, rows):
        by = {int(h[0][0]): [int(d) for _, _, d in sorted(h, key=lambda t: (-t[1], int(t[2])))] for h in res if h}
        return [[base_ids[d] if base_ids is not None else f"doc{d}" for d in by.get(i, [])] for i in rows]

    def batch(k, cut, heap):
        return index.batch_search(
            qids, comps, vals, k=k, query_cut=cut, heap_factor=heap, n_knn=0, sorted=True, num_threads=1
        )

    def one(i, k, cut, heap):
        return index.search(str(i), comps[i], vals[i], k=k, query_cut=cut, heap_factor=heap, n_knn=0, sorted=True)

    cut, heap = SEISMIC_AT["query_cut"], SEISMIC_AT["heap_factor"]
    for k in (10, 1000):
        batch(k, cut, heap)  # warm-up
        with Clock() as b:
            res = batch(k, cut, heap)
        n1 = min(ONE_AT_A_TIME, q.shape[0])
        with Clock() as o:
            for i in range(n1):
                one(i, k, cut, heap)
        out.update(
            {
                f"batch_ms_k{k}": 1000 * b.wall / q.shape[0],
                f"batch_cpu_ms_k{k}": 1000 * b.cpu / q.shape[0],
                f"one_ms_k{k}": 1000 * o.wall / n1,
                f"one_cpu_ms_k{k}": 1000 * o.cpu / n1,
            }
        )
        if k == 10:
            out["recall@10"] = recall10(named(res, range(q.shape[0])), exact10)
    sweep = []
    for cut in SWEEP_CUTS:
        for heap in SWEEP_HEAPS:
            with Clock() as c:
                res = batch(10, cut, heap)
            sweep.append(
                {
                    "query_cut": cut,
                    "heap_factor": heap,
                    "ms": 1000 * c.wall / q.shape[0],
                    "cpu_ms": 1000 * c.cpu / q.shape[0],
                    "recall@10": recall10(named(res, range(q.shape[0])), exact10),
                }
            )
    out.update(sweep=sweep, search_rss=peak_rss())
    return out


def phase_seismic_interleaved(corpus: str, work: Path, rounds: int = 3) -> dict:
    """The wrapper's cost, in one process on one loaded index: pyseismic's own ``search`` /
    ``batch_search`` on the very ``SeismicIndex`` object that spladekit's searcher holds (query arrays
    made beforehand, results untouched) against ``Index.search(searcher=SeismicConfig(...))`` (named hits,
    the tie rule, the settings record), interleaved query by query (one per call) or call by call
    (batch), ``rounds`` rounds; medians of per-call CPU times (``process_time``) and their ratio."""
    from spladekit.index.index import Index
    from spladekit.index.seismic import SeismicSearchParams
    from spladekit.index.seismic_store import SeismicConfig

    q, _ = queries(corpus)
    index = Index.open(work / corpus / "spladekit")
    engine = index.seismic().index
    string = index.seismic().component_names().dtype
    at = SeismicSearchParams(num_threads=1, **SEISMIC_AT)
    comps = [np.array([str(j) for j in q[i].indices], dtype=string) for i in range(q.shape[0])]
    vals = [q[i].data.astype(np.float32) for i in range(q.shape[0])]
    qids = np.array([str(i) for i in range(q.shape[0])], dtype=string)
    rows = [q[i : i + 1] for i in range(q.shape[0])]
    out = {"rounds": rounds, "queries": q.shape[0]}
    for k in (10, 1000):
        opts = dict(k=k, query_cut=at.query_cut, heap_factor=at.heap_factor, n_knn=0, sorted=True)
        calls = {
            "direct_one": lambda i: engine.search(str(i), comps[i], vals[i], **opts),  # noqa: B023 (called in this iteration only)
            "spladekit_one": lambda i: index.search(rows[i], k=k, searcher=SeismicConfig(search=at)),  # noqa: B023 (called in this iteration only)
            "direct_batch": lambda i: engine.batch_search(qids, comps, vals, num_threads=1, **opts),  # noqa: B023 (called in this iteration only)
            "spladekit_batch": lambda i: index.search(q, k=k, searcher=SeismicConfig(search=at)),  # noqa: B023 (called in this iteration only)
        }
        spent = {name: [] for name in calls}
        for i in range(20):  # warm-up
            calls["direct_one"](i), calls["spladekit_one"](i)
        for _ in range(rounds):
            for i in range(q.shape[0]):
                for name in ("direct_one", "spladekit_one"):
                    began = time.process_time()
                    calls[name](i)
                    spent[name].append(time.process_time() - began)
            for name in ("direct_batch", "spladekit_batch"):
                began = time.process_time()
                calls[name](0)
                spent[name].append((time.process_time() - began) / q.shape[0])
        for name, values in spent.items():
            out[f"{name}_cpu_ms_k{k}"] = 1000 * float(np.median(values))
        for mode in ("one", "batch"):
            out[f"ratio_{mode}_k{k}"] = out[f"spladekit_{mode}_cpu_ms_k{k}"] / out[f"direct_{mode}_cpu_ms_k{k}"]
    out["rss"] = peak_rss()
    return out


def phase_seismic_index(corpus: str, work: Path) -> dict:
    """spladekit's stored approximate index: first search builds and stores it (default parameters)."""
    from spladekit.index.index import Index

    index = Index.open(work / corpus / "spladekit")
    with Clock() as c:
        index.seismic()
    return {
        "first_use_s": c.wall,
        "first_use_cpu_s": c.cpu,
        "rss": peak_rss(),
        "bytes": folder_bytes(work / corpus / "spladekit" / "seismic"),
        "n_postings": index.seismic().params.n_postings,
    }


def phase_seismic_reopen(corpus: str, work: Path) -> dict:
    """A new process: Index.open + the stored Seismic index reopened, then Index.search(searcher=SeismicConfig(...))
    at SEISMIC_AT (k = 10 and 1000, batch and one per call; named hits, the tie rule) and the sweep."""
    from spladekit.index.index import Index
    from spladekit.index.seismic import SeismicSearchParams
    from spladekit.index.seismic_store import SeismicConfig

    q, _ = queries(corpus)
    with Clock() as c:
        index = Index.open(work / corpus / "spladekit")
        index.seismic()
    out = {"reopen_s": c.wall, "reopen_cpu_s": c.cpu}
    at = SeismicSearchParams(num_threads=1, **SEISMIC_AT)
    for k in (10, 1000):
        r = timed_search(
            lambda qq, kk: [[d for d, _ in h] for h in index.search(qq, k=kk, searcher=SeismicConfig(search=at)).hits],
            lambda qq, i, kk: index.search(qq[i : i + 1], k=kk, searcher=SeismicConfig(search=at)),
            q,
            k,
        )
        hits = r.pop("hits")
        out.update(r)
        if k == 10:
            out["recall@10"] = recall10(hits, json.loads((work / corpus / "exact-top10.json").read_text()))
    exact10 = json.loads((work / corpus / "exact-top10.json").read_text())
    sweep = []  # through spladekit's own backend (the stored index), the same grid as the direct sweep
    for cut in SWEEP_CUTS:
        for heap in SWEEP_HEAPS:
            params = SeismicSearchParams(query_cut=cut, heap_factor=heap, num_threads=1)
            with Clock() as t:
                hits = index.search(q, k=10, searcher=SeismicConfig(search=params)).hits
            sweep.append(
                {
                    "query_cut": cut,
                    "heap_factor": heap,
                    "ms": 1000 * t.wall / q.shape[0],
                    "cpu_ms": 1000 * t.cpu / q.shape[0],
                    "recall@10": recall10([[d for d, _ in h] for h in hits], exact10),
                }
            )
    out.update(sweep=sweep, rss=peak_rss(), n_postings=index.seismic().params.n_postings)
    return out


SHARD_COUNTS = tuple(
    int(n) for n in os.environ.get("SPLADEKIT_BENCH_SHARDS", "1,2,4").split(",")
)  # Seismic shard counts compared
SHARD_SETTINGS = tuple(
    dict(zip(("query_cut", "heap_factor", "n_knn"), (kind(v) for kind, v in zip((int, float, int), triple.split(":")))))
    for triple in os.environ.get("SPLADEKIT_BENCH_SHARD_SETTINGS", "10:0.7,20:0.5,40:0.3").split(",")
)
"""Seismic settings along the recall/latency curve (``query_cut:heap_factor`` or
``query_cut:heap_factor:n_knn``, comma-separated in ``$SPLADEKIT_BENCH_SHARD_SETTINGS``; ``n_knn`` needs
shards built with a k-NN graph, ``$SPLADEKIT_BENCH_NKNN``); the default's middle one is :data:`SEISMIC_AT`."""


def _shard_count() -> int:
    return int(os.environ.get("SPLADEKIT_BENCH_SHARD_COUNT", 1))


def phase_seismic_shards_build(corpus: str, work: Path) -> dict:
    """Seismic by shards (``spladekit.index.seismic_shards.build_shards``, default parameters but
    ``n_postings`` = ``$SPLADEKIT_BENCH_N_POSTINGS`` when set (the whole index's, each shard its
    share), ``max_fraction`` = ``$SPLADEKIT_BENCH_MAX_FRACTION`` and the k-NN graph's ``nknn`` =
    ``$SPLADEKIT_BENCH_NKNN`` when set) in
    ``$SPLADEKIT_BENCH_SHARD_COUNT`` shards of at most ⌈nnz / count⌉ + the longest row entries (so
    the greedy ranges number ``count``); this process's peak RSS is the build's (the
    folder is memory-mapped; nothing is loaded back)."""
    from dataclasses import asdict

    from spladekit.index.index import Index
    from spladekit.index.seismic import SeismicBuildParams
    from spladekit.index.seismic_rule import budget_for, rule_corpus
    from spladekit.index.seismic_shards import shard_ranges
    from spladekit.index.seismic_store import build_shards

    index = Index.open(work / corpus / "spladekit")
    count = _shard_count()
    entries = -(-index.docs.nnz // count) + int(np.diff(index.docs.indptr).max())
    ranges = shard_ranges(np.asarray(index.docs.indptr), entries)
    asked = {
        name: kind(os.environ[var])
        for name, kind, var in (
            ("n_postings", int, "SPLADEKIT_BENCH_N_POSTINGS"),
            ("max_fraction", float, "SPLADEKIT_BENCH_MAX_FRACTION"),
            ("nknn", int, "SPLADEKIT_BENCH_NKNN"),
        )
        if os.environ.get(var)
    }
    params = SeismicBuildParams(**asked)
    rule_bytes = budget_for(entries, params, rule_corpus(index.docs))  # the library's rule
    base = peak_rss()
    record = {
        "build": asdict(params),
        "content_hash": index.metadata.get("content_hash"),
        "memory_budget": rule_bytes,
        "max_entries": entries,
    }
    with Clock() as c:
        build_shards(index.folder, index.docs, params, ranges, record)
    return {
        "shards": len(ranges),
        "max_entries": entries,
        "n_postings": params.n_postings,
        "max_fraction": params.max_fraction,
        "nknn": params.nknn,
        "build_s": c.wall,
        "build_cpu_s": c.cpu,
        "build_rss": peak_rss(),
        "base_rss": base,
        "bytes": folder_bytes(index.folder / "seismic"),
        "rule_bytes": rule_bytes,
    }


def phase_seismic_shards_search(corpus: str, work: Path) -> dict:
    """The stored shards reopened (a new process) and searched through ``Index.search(searcher=SeismicConfig(...))``
    at :data:`SHARD_SETTINGS` (k = 10 batch and one per call, k = 1000 batch): CPU and wall ms/query,
    recall@10 and recall@1000 against exact, loaded RSS. Shards are searched one after the other, each with
    ``num_threads`` 1."""
    from spladekit.index.index import Index
    from spladekit.index.seismic import SeismicSearchParams
    from spladekit.index.seismic_store import SeismicConfig

    q, _ = queries(corpus)
    with Clock() as c:
        index = Index.open(work / corpus / "spladekit")
        shards = len(index.seismic())
    out = {"shards": shards, "reopen_s": c.wall, "loaded_rss": peak_rss(), "settings": []}
    exact10 = json.loads((work / corpus / "exact-top10.json").read_text())
    exact1000 = json.loads((work / corpus / "exact-top1000.json").read_text())
    for setting in SHARD_SETTINGS:
        at = SeismicSearchParams(num_threads=1, **setting)
        row = dict(setting)
        for k in (10, 1000):
            r = timed_search(
                lambda qq, kk: [
                    [d for d, _ in h]
                    for h in index.search(qq, k=kk, searcher=SeismicConfig(search=at)).hits  # noqa: B023 (called in this iteration only)
                ],
                lambda qq, i, kk: index.search(qq[i : i + 1], k=kk, searcher=SeismicConfig(search=at)),  # noqa: B023 (called in this iteration only)
                q,
                k,
            )
            hits = r.pop("hits")
            row.update(r)
            truth = exact10 if k == 10 else exact1000
            row[f"recall@{k}"] = float(
                np.mean([len(set(e[:k]) & set(a[:k])) / len(set(e[:k])) for a, e in zip(hits, truth) if e])
            )
        out["settings"].append(row)
    out["search_rss"] = peak_rss()
    return out


def shard_table(corpus: str, r: dict) -> str:
    """The shard-count trade: build peak and time, loaded RSS, and per setting ms/query and recall."""
    exact = r.get("search", {})
    lines = [
        f"### {corpus}: Seismic by shards (default build parameters; each shard its share of n_postings)",
        "",
        "| shards (n_postings) | build CPU s (wall) | build peak RSS (growth) | on disk | loaded RSS | query_cut / heap (/ n_knn) | k=10 batch CPU ms (÷ exact) | "
        "k=10 one per call CPU ms (÷ exact) | recall@10 | k=1000 batch CPU ms | recall@1000 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for count in SHARD_COUNTS:
        b, s = r.get(f"seismic_shards_build_{count}", {}), r.get(f"seismic_shards_search_{count}", {})
        for e in s.get("settings", []):
            lines.append(
                f"| {b.get('shards', count)} ({b.get('n_postings', '-')}) | {b.get('build_cpu_s', float('nan')):.0f} ({b.get('build_s', float('nan')):.0f}) | "
                f"{gb(b.get('build_rss', 0))} ({gb(b.get('build_rss', 0) - b.get('base_rss', 0))}) | {gb(b.get('bytes', 0))} | {gb(s.get('loaded_rss', 0))} | {e['query_cut']} / {e['heap_factor']}{' / ' + str(e['n_knn']) if e.get('n_knn') else ''} | "
                f"{e['batch_cpu_ms_k10']:.3f} ({e['batch_cpu_ms_k10'] / exact.get('batch_cpu_ms_k10', float('nan')):.3f}) | "
                f"{e['one_cpu_ms_k10']:.3f} ({e['one_cpu_ms_k10'] / exact.get('one_cpu_ms_k10', float('nan')):.3f}) | {e['recall@10']:.3f} | "
                f"{e['batch_cpu_ms_k1000']:.3f} | {e['recall@1000']:.3f} |"
            )
    return "\n".join(lines)


def phase_bmp_build(corpus: str, work: Path) -> dict:
    """CIFF export of spladekit's folder (8-bit impacts: × 255 / max), then BMP's own ciff2bmp."""
    from spladekit.index.formats import bmp, ciff
    from spladekit.index.index import Index

    index = Index.open(work / corpus / "spladekit")
    vocab = [str(j) for j in range(index.docs.shape[1])]
    scale = bmp.document_scale(float(np.max(index.docs.data)))
    with Clock() as export:
        stats = ciff.write_ciff(
            work / corpus / "index.ciff", index.docs, index.postings, index.doc_ids, vocab, scale=scale
        )
    with Clock() as c:
        bmp.build(work / corpus / "index.bmp", work / corpus / "index.ciff", stats["max_tf"])
    (work / corpus / "index.ciff").unlink()
    return {
        "ciff_export_s": export.wall,
        "ciff_export_cpu_s": export.cpu,
        "build_s": c.wall,
        "build_cpu_s": c.cpu,
        "scale": scale,
        "bytes": (work / corpus / "index.bmp").stat().st_size,
        "build_rss": peak_rss(),
    }


def phase_bmp_search(corpus: str, work: Path) -> dict:
    import bmp as bmp_engine

    from spladekit.index.formats import bmp

    q, _ = queries(corpus)
    vocab = [str(j) for j in range(q.shape[1])]
    with Clock() as c:
        searcher = bmp_engine.Searcher(str(work / corpus / "index.bmp"))
    out = {"open_s": c.wall}
    weights = [
        bmp.query_weights(q[i].indices, q[i].data, vocab) for i in range(q.shape[0])
    ]  # every query term is indexed here

    def run(rows, k):
        hits = []
        for i in rows:
            docnos, scores = (
                searcher.search(weights[i], k=bmp.depth(k), alpha=1.0, beta=1.0) if weights[i] else ([], [])
            )
            hits.append([d for d, _ in sorted(zip(docnos, scores), key=lambda p: (-p[1], p[0]))[:k]])
        return hits

    for k in (10, 1000):
        r = timed_search(lambda qq, kk: run(range(q.shape[0]), kk), lambda qq, i, kk: run([i], kk), q, k)
        hits = r.pop("hits")
        out.update(r)
        exact = json.loads((work / corpus / f"exact-top{k}.json").read_text())
        out[f"same_top{k}_as_exact"] = float(np.mean([a == e for a, e in zip(hits, exact)]))
        if k == 10:
            out["recall@10"] = recall10(hits, exact)
    out["search_rss"] = peak_rss()
    return out


PHASES = {
    f.__name__[6:]: f
    for f in (
        phase_build,
        phase_search,
        phase_shards,
        phase_pisa_build,
        phase_pisa_search,
        phase_seismic_direct,
        phase_seismic_interleaved,
        phase_seismic_index,
        phase_seismic_reopen,
        phase_bmp_build,
        phase_bmp_search,
        phase_seismic_shards_build,
        phase_seismic_shards_search,
    )
}


def run_phase(name: str, corpus: str, work: Path, extra: list[str] | None = None, timeout: int = 7200) -> dict:
    cmd = [sys.executable, __file__, "--phase", name, "--corpus", corpus, "--work", str(work), *(extra or [])]
    began = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(f"  {name} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"error": proc.stderr[-500:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {corpus} {name}: {time.time() - began:.0f} s", file=sys.stderr)
    return result


# ----------------------------------------------------------------------------------- report
def gb(n):
    return f"{n / 1e9:.2f} GB"


def table(corpus: str, r: dict) -> str:
    s = r.get("build", {}) | r.get("search", {})
    p = r.get("pisa_build", {}) | {"open_s": r.get("pisa_search", {}).get("open_s", float("nan"))}
    b = r.get("bmp_build", {}) | r.get("bmp_search", {})
    si, sd, sx = r.get("seismic_index", {}), r.get("seismic_direct", {}), r.get("seismic_reopen", {})
    exact_ms = s.get("batch_cpu_ms_k10", float("nan"))
    lines = [
        f"### {corpus}: {s.get('nnz', 0) / 1e6:.1f} M entries, {s.get('terms_per_doc', 0):.0f} terms/doc; arrays {gb(s.get('array_bytes', 0))}",
        "",
        "| system | build CPU s (wall) | open s | on disk | peak RSS build / search | k=10 batch | k=10 one per call | k=1000 batch | k=1000 one per call | quality |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def row(name, x, quality):
        def ms(key):
            return f"{x[key.replace('_ms', '_cpu_ms')]:.2f} ({x[key]:.2f})" if key in x else "–"

        build = f"{x['build_cpu_s']:.0f} ({x['build_s']:.0f})" if "build_s" in x else "–"
        rss = f"{gb(x['build_rss']) if 'build_rss' in x else '–'} / {gb(x['search_rss']) if 'search_rss' in x else '–'}"
        return (
            f"| {name} | {build} | {x.get('open_s', float('nan')):.3f} | {gb(x['bytes']) if 'bytes' in x else '–'} | {rss} | "
            f"{ms('batch_ms_k10')} | {ms('one_ms_k10')} | {ms('batch_ms_k1000')} | {ms('one_ms_k1000')} | {quality} |"
        )

    def same(x):
        return f"same top-10 as exact {x.get('same_top10_as_exact', float('nan')):.3f}, top-1000 {x.get('same_top1000_as_exact', float('nan')):.3f}"

    lines.append(row("spladekit `Index` exact (pruned: MaxScore over blocks)", s, "exact"))
    if "unpruned_batch_ms_k10" in s:
        lines.append(
            row(
                "spladekit exact, every posting added (`prune=False`, the anchor)",
                {key[9:]: v for key, v in s.items() if key.startswith("unpruned_")},
                "same lists as pruned: "
                + ", ".join(f"k={k} {s.get(f'pruned_same_as_unpruned_k{k}')}" for k in (10, 1000)),
            )
        )
    if "first_pass_s" in s:
        lines.append(
            f"| (exact's untimed first pass over the queries: block maxima and pages) | {s['first_pass_cpu_s']:.0f} ({s['first_pass_s']:.0f}) | | | | | | | | |"
        )
    for algorithm in PISA_ALGORITHMS:
        if algorithm in r.get("pisa_search", {}):
            lines.append(
                row(f"PISA {algorithm}", dict(p, **r["pisa_search"][algorithm]), same(r["pisa_search"][algorithm]))
            )
    if b:
        lines.append(row(f"BMP (8-bit impacts, ×{b.get('scale', float('nan')):.3f})", b, same(b)))
    if sd:
        lines.append(
            row(
                f"Seismic direct (pyseismic calls only), cut {SEISMIC_AT['query_cut']} heap {SEISMIC_AT['heap_factor']}",
                dict(sd, bytes=si.get("bytes", 0)),
                f"recall@10 {sd.get('recall@10', float('nan')):.3f}",
            )
        )
    if sx:
        lines.append(
            row(
                "spladekit `Index.search(backend='seismic')`, same setting",
                dict(
                    sx,
                    open_s=sx.get("reopen_s", float("nan")),
                    build_s=si.get("first_use_s", float("nan")),
                    build_cpu_s=si.get("first_use_cpu_s", float("nan")),
                    build_rss=si.get("rss", 0),
                ),
                f"recall@10 {sx.get('recall@10', float('nan')):.3f}",
            )
        )
    lines += [
        "",
        "ms/q = process CPU ms per query (wall ms in brackets), 1 thread; one per call = the first "
        f"{ONE_AT_A_TIME} queries each in its own call.",
    ]
    ratios = []
    if "pruned_over_unpruned_k10" in s:
        ratios.append(
            "exact pruned ÷ every posting, one per call interleaved, same run: "
            + ", ".join(
                f"k={k} {s[f'pruned_over_unpruned_k{k}']:.2f} ({s[f'interleaved_pruned_cpu_ms_k{k}']:.2f} vs {s[f'interleaved_unpruned_cpu_ms_k{k}']:.2f} ms)"
                for k in (10, 1000)
            )
        )
    if "one_cpu_ms_k10" in s:
        ratios.append(
            f"exact one per call ÷ batch: k=10 {s['one_cpu_ms_k10'] / s['batch_cpu_ms_k10']:.2f}, k=1000 {s['one_cpu_ms_k1000'] / s['batch_cpu_ms_k1000']:.2f}"
        )
    for algorithm in PISA_ALGORITHMS:
        x = r.get("pisa_search", {}).get(algorithm)
        if x and "batch_cpu_ms_k10" in s:
            ratios.append(
                f"PISA {algorithm} ÷ exact (CPU): batch k=10 {x['batch_cpu_ms_k10'] / exact_ms:.2f}, k=1000 {x['batch_cpu_ms_k1000'] / s['batch_cpu_ms_k1000']:.2f}; "
                f"one per call k=10 {x['one_cpu_ms_k10'] / s['one_cpu_ms_k10']:.2f}, k=1000 {x['one_cpu_ms_k1000'] / s['one_cpu_ms_k1000']:.2f}"
                + (
                    f"; ÷ exact with every posting: batch k=10 {x['batch_cpu_ms_k10'] / s['unpruned_batch_cpu_ms_k10']:.2f}"
                    if "unpruned_batch_cpu_ms_k10" in s
                    else ""
                )
            )
    if b and "batch_cpu_ms_k10" in s:
        ratios.append(
            f"BMP ÷ exact: k=10 {b['batch_cpu_ms_k10'] / exact_ms:.2f}, k=1000 {b['batch_cpu_ms_k1000'] / s['batch_cpu_ms_k1000']:.2f}"
        )
    if sd and sx:
        ratios.append(
            "spladekit Seismic ÷ pyseismic's own calls (CPU): "
            + ", ".join(
                f"{mode} k={k} {sx[f'{mode}_cpu_ms_k{k}'] / sd[f'{mode}_cpu_ms_k{k}']:.2f}"
                for mode in ("batch", "one")
                for k in (10, 1000)
            )
        )
        ratios.append(
            f"reopen: spladekit (Index.open + stored Seismic) {sx['reopen_s']:.2f} s vs pyseismic's SeismicIndex.load {sd['open_s']:.2f} s"
        )
        ratios.append(f"Seismic at the setting ÷ exact (batch CPU, k=10): {sx['batch_cpu_ms_k10'] / exact_ms:.3f}")
    si2 = r.get("seismic_interleaved", {})
    if "ratio_one_k10" in si2:
        ratios.append(
            f"spladekit Seismic ÷ pyseismic, same process and index, interleaved, medians of {si2['rounds']} rounds (CPU): "
            + ", ".join(
                f"{mode} k={k} {si2[f'ratio_{mode}_k{k}']:.2f} ({si2[f'spladekit_{mode}_cpu_ms_k{k}']:.2f} vs {si2[f'direct_{mode}_cpu_ms_k{k}']:.2f} ms)"
                for mode in ("one", "batch")
                for k in (10, 1000)
            )
        )
    if "build_rss" in s:
        ratios.append(
            f"build: peak RSS {gb(s['build_rss'])} (process before the write {gb(s['build_base_rss'])}; writer budget "
            f"{gb(s['budget'])}) for {gb(s['array_bytes'])} of arrays; open {s.get('open_s', float('nan')):.3f} s"
        )
    if "shards_equal_one_folder" in r.get("shards", {}):
        ratios.append(f"2 shard folders = 1 folder (k=1000 runs identical): {r['shards']['shards_equal_one_folder']}")
    lines += [f"- {x}" for x in ratios]
    sweeps = [("pyseismic direct", sd), ("spladekit Index", sx)]
    if any(x.get("sweep") for _, x in sweeps):
        lines += [
            "",
            "Seismic sweep (k=10, default build; ÷ exact = CPU ms ÷ exact batch CPU ms):",
            "",
            "| through | query_cut | heap_factor | CPU ms/q | ÷ exact | recall@10 |",
            "|---|---|---|---|---|---|",
        ]
        for name, x in sweeps:
            for e in x.get("sweep", []):
                mark = " **≥0.95**" if e["recall@10"] >= 0.95 else ""
                lines.append(
                    f"| {name} | {e['query_cut']} | {e['heap_factor']} | {e['cpu_ms']:.3f} | {e['cpu_ms'] / exact_ms:.3f} | {e['recall@10']:.3f}{mark} |"
                )
    return "\n".join(lines)


ORDER = (
    "build",
    "search",
    "shards",
    "pisa_build",
    "pisa_search",
    "bmp_build",
    "bmp_search",
    "seismic_index",
    "seismic_reopen",
    "seismic_direct",
    "seismic_interleaved",
    "seismic_shards",
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, action="append", default=[], help="synthetic corpus size (repeat)")
    ap.add_argument(
        "--zipf", type=int, action="append", default=[], help="zipf-N corpus size (repeat): no model, no SciFact"
    )
    ap.add_argument("--no-scifact", action="store_true", help="skip the real SciFact corpus")
    ap.add_argument("--work", type=Path, default=Path("/tmp/spladekit-bench"))
    ap.add_argument("--skip", action="append", default=[], help=f"phases to skip ({', '.join(ORDER)})")
    ap.add_argument("--keep", action="store_true", help="keep the folders under --work")
    ap.add_argument("--phase")
    ap.add_argument("--corpus")
    ap.add_argument("--json", type=Path, help="also write all results here")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent / "src"))
    if args.phase:
        print(json.dumps(PHASES[args.phase](args.corpus, args.work), default=float))
        return
    corpora = (
        [f"synthetic-{n}" for n in args.docs]
        + [f"zipf-{n}" for n in args.zipf]
        + ([] if args.no_scifact else ["scifact"])
    )
    if any(not c.startswith("zipf-") for c in corpora):
        scifact_vectors()
    results = {}
    for corpus in corpora:
        r = {}
        for name in ORDER:
            if name == "seismic_shards" and name not in args.skip:  # one build and one search process per shard count
                for count in SHARD_COUNTS:
                    os.environ["SPLADEKIT_BENCH_SHARD_COUNT"] = str(count)
                    for step in ("build", "search"):
                        r[f"seismic_shards_{step}_{count}"] = run_phase(f"seismic_shards_{step}", corpus, args.work)
                        if args.json:
                            args.json.write_text(json.dumps(dict(results, **{corpus: r}), indent=1, default=float))
            elif name not in args.skip:
                r[name] = run_phase(name, corpus, args.work)
                if args.json:  # partial results survive an interrupted run
                    args.json.write_text(json.dumps(dict(results, **{corpus: r}), indent=1, default=float))
        results[corpus] = r
        print(table(corpus, r), flush=True)
        if any(key.startswith("seismic_shards_") for key in r):
            print("\n" + shard_table(corpus, r), flush=True)
        print(flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, default=float))
        if not args.keep:
            shutil.rmtree(args.work / corpus, ignore_errors=True)


if __name__ == "__main__":
    main()
