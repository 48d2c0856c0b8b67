"""Retrieval benchmark: spladekit's Index vs PISA (MaxScore) vs Seismic used directly, in one run.

Corpora (seeded):
- ``synthetic-N``: document ``i`` is real SciFact document ``i mod 5,183`` (splade-tiny vectors),
  each term kept with probability 0.8 and its weight multiplied by U(0.8, 1.2) (≈ 199 terms per
  document as in the issue); generated block by block, never whole in memory;
- ``scifact``: the real 5,183 SciFact documents (a real distribution).
Queries: the 300 real SciFact test queries (splade-tiny). Every weight is quantised to an integer
impact ``round(100·w)`` (queries too), so spladekit, PISA and Seismic see the very same vectors and
exact dot products (integer sums below 2^24 are exact in float32), so exact top-k lists agree.

Measured per system, each phase in a fresh process (peak RSS = that process's ``ru_maxrss``):
build time, open time, bytes on disk, ms/query for k = 10 and 1000 in one batch and one query per
call (1 thread everywhere), recall@10 of the approximate backends against exact, and for spladekit
2 shard folders = 1 folder. Times are wall clock (``perf_counter``) and process CPU
(``process_time``); the machine is shared, so the CPU figures and the ratios inside one run are the
ones to read. A Seismic parameter sweep looks for recall@10 ≥ 0.95 at ≤ 1/10 of exact latency.

Usage::

    PYTHONPATH=src python benchmarks/retrieval.py --docs 100000 --docs 1000000 --work /tmp/bench

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
ONE_AT_A_TIME = 100  # queries timed one per call (the first ones of the 300)
SWEEP_CUTS = (10, 20, 40, 80)  # Seismic query_cut values swept
SWEEP_HEAPS = (0.9, 0.7, 0.5, 0.3)  # Seismic heap_factor values swept (lower: more blocks scored, higher recall)


def shared() -> Path:
    return Path(os.environ.get("SPLADEKIT_SHARED", HERE.parent.parent / "shared"))


# ----------------------------------------------------------------------------------- data
def scifact_vectors() -> tuple[sp.csr_matrix, sp.csr_matrix, list[str], list[str]]:
    """splade-tiny vectors of SciFact (documents, test queries), encoded once and cached."""
    docs_path, queries_path, ids_path = CACHE / "scifact-docs.npz", CACHE / "scifact-queries.npz", CACHE / "scifact-ids.json"
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


def queries() -> tuple[sp.csr_matrix, list[str]]:
    _, q, _, qids = scifact_vectors()
    return quantise(q), qids


def corpus_blocks(name: str, seed: int = 0):
    """``(blocks() factory, doc_ids, vocab_size)`` of a corpus; blocks are canonical quantised CSR."""
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
            yield sp.csr_matrix((values[keep], base.indices[offsets][keep].astype(np.int32), indptr), shape=(rows.size, base.shape[1]))

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
    return {"hits": hits, f"batch_ms_k{k}": 1000 * batch.wall / q.shape[0], f"batch_cpu_ms_k{k}": 1000 * batch.cpu / q.shape[0],
            f"one_ms_k{k}": 1000 * one.wall / n1, f"one_cpu_ms_k{k}": 1000 * one.cpu / n1}


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
    with Clock() as c:
        write_index(out, blocks, ids, vocab, {"corpus": corpus})
    arrays = sum(f.stat().st_size for f in out.glob("*.npy"))
    meta = json.loads((out / "index.json").read_text())
    return {"build_s": c.wall, "build_cpu_s": c.cpu, "bytes": folder_bytes(out), "array_bytes": arrays,
            "nnz": meta["nnz"], "terms_per_doc": meta["nnz"] / meta["num_docs"], "build_rss": peak_rss()}


def phase_search(corpus: str, work: Path) -> dict:
    from spladekit.index.index import Index

    q, qids = queries()
    with Clock() as c:
        index = Index.open(work / corpus / "spladekit")
    out = {"open_s": c.wall, "open_rss": peak_rss()}
    for k in (10, 1000):
        r = timed_search(lambda qq, kk: [[d for d, _ in h] for h in index.search(qq, k=kk).hits],
                         lambda qq, i, kk: index.search(qq[i : i + 1], k=kk), q, k)
        hits = r.pop("hits")
        out.update(r)
        (work / corpus / f"exact-top{k}.json").write_text(json.dumps(hits))
    out["search_rss"] = peak_rss()
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
    q, _ = queries()
    one = Index.open(work / corpus / "spladekit").search(q, k=1000)
    two = ShardedIndex([Index.open(work / corpus / f"shard{p}") for p in (0, 1)]).search(q, k=1000)
    for p in (0, 1):
        shutil.rmtree(work / corpus / f"shard{p}")
    return {"shards_equal_one_folder": one.hits == two.hits, "shards_ms": two.latency.mean_ms, "one_folder_ms": one.latency.mean_ms}


def phase_pisa_build(corpus: str, work: Path) -> dict:
    from pyterrier_pisa import PisaIndex

    blocks, ids, _ = corpus_blocks(corpus)

    def docs():
        row = 0
        for block in blocks():
            for i in range(block.shape[0]):
                a, b = block.indptr[i], block.indptr[i + 1]
                yield {"docno": ids[row], "toks": dict(zip(map(str, block.indices[a:b].tolist()), block.data[a:b].astype(int).tolist()))}
                row += 1

    path = work / corpus / "pisa"
    shutil.rmtree(path, ignore_errors=True)
    with Clock() as c:
        PisaIndex(str(path), stemmer="none", threads=1).toks_indexer(scale=1.0).index(docs())
    return {"build_s": c.wall, "build_cpu_s": c.cpu, "bytes": folder_bytes(path), "build_rss": peak_rss()}


def phase_pisa_search(corpus: str, work: Path) -> dict:
    import pandas as pd
    from pyterrier_pisa import PisaIndex

    q, qids = queries()
    frames = [{"qid": qid, "query_toks": {str(j): float(v) for j, v in zip(q[i].indices, q[i].data)}} for i, qid in enumerate(qids)]
    with Clock() as c:
        index = PisaIndex(str(work / corpus / "pisa"), stemmer="none", threads=1)
        retrievers = {k: index.quantized(num_results=k, query_algorithm="maxscore", toks_scale=1.0, threads=1) for k in (10, 1000)}
        retrievers[10](pd.DataFrame(frames[:1]))  # opening happens on first use
    out = {"open_s": c.wall}

    def run(rows, k):
        res = retrievers[k](pd.DataFrame(rows))
        ranked = {}
        for qid, docno, score in zip(res["qid"], res["docno"], res["score"]):
            ranked.setdefault(qid, []).append((docno, score))
        # PISA's order among equal scores is its own; apply the tie rule for the comparison
        return [[d for d, _ in sorted(ranked.get(r["qid"], []), key=lambda p: (-p[1], p[0]))] for r in rows]

    for k in (10, 1000):
        r = timed_search(lambda qq, kk: run(frames, kk), lambda qq, i, kk: run(frames[i : i + 1], kk), q, k)
        hits = r.pop("hits")
        out.update(r)
        exact = json.loads((work / corpus / f"exact-top{k}.json").read_text())
        out[f"same_top{k}_as_exact"] = float(np.mean([a == e for a, e in zip(hits, exact)]))
    out["search_rss"] = peak_rss()
    return out


def seismic_dataset(index_folder: Path):
    import seismic

    from spladekit.index.index import Index

    docs = Index.open(index_folder).docs
    dataset = seismic.SeismicDataset()
    dataset.add_documents_by_id([str(i) for i in range(docs.shape[0])], docs.indices.astype(np.int64), docs.data.astype(np.float32),
                                docs.indptr.astype(np.int64))
    return dataset, docs.shape[0]


def phase_seismic_direct(corpus: str, work: Path, n_postings: int = 3500) -> dict:
    """Seismic used directly (pyseismic-lsr): build (default parameters but n_postings), save, load, search, sweep."""
    import seismic

    q, _ = queries()
    string = seismic.get_seismic_string()
    with Clock() as c:
        dataset, num_docs = seismic_dataset(work / corpus / "spladekit")
        index = seismic.SeismicIndex.build_from_dataset(dataset, n_postings=n_postings, centroid_fraction=0.1, min_cluster_size=2,
                                                        summary_energy=0.4, max_fraction=1.5, doc_cut=15, nknn=0)
    del dataset
    out = {"n_postings": n_postings, "build_s": c.wall, "build_cpu_s": c.cpu, "build_rss": peak_rss()}
    path = work / corpus / f"seismic-{n_postings}"
    index.save(str(path))
    out["bytes"] = (path.parent / (path.name + ".index.seismic")).stat().st_size
    del index
    with Clock() as c:
        index = seismic.SeismicIndex.load(str(path) + ".index.seismic")
    out["open_s"] = c.wall
    qids = np.array([str(i) for i in range(q.shape[0])], dtype=string)
    comps = [np.array([str(j) for j in q[i].indices], dtype=string) for i in range(q.shape[0])]
    vals = [q[i].data.astype(np.float32) for i in range(q.shape[0])]

    def batch(k, cut, heap, rows=None):
        rows = range(q.shape[0]) if rows is None else rows
        res = index.batch_search(qids[list(rows)], [comps[i] for i in rows], [vals[i] for i in rows], k=k, query_cut=cut,
                                 heap_factor=heap, n_knn=0, sorted=True, num_threads=1)
        by = {int(h[0][0]): [f"doc{int(d)}" if corpus != "scifact" else int(d) for _, _, d in sorted(h, key=lambda t: (-t[1], int(t[2])))] for h in res if h}
        return [by.get(i, []) for i in rows]

    base_ids = scifact_vectors()[2] if corpus == "scifact" else None
    exact10 = json.loads((work / corpus / "exact-top10.json").read_text())

    def named(hits):
        return [[base_ids[d] for d in h] for h in hits] if base_ids is not None else hits

    for k in (10, 1000):
        r = timed_search(lambda qq, kk: named(batch(kk, 20, 0.8)), lambda qq, i, kk: batch(kk, 20, 0.8, [i]), q, k)
        hits = r.pop("hits")
        out.update(r)
        if k == 10:
            out["recall@10"] = recall10(hits, exact10)
    sweep = []
    for cut in SWEEP_CUTS:
        for heap in SWEEP_HEAPS:
            with Clock() as c:
                hits = named(batch(10, cut, heap))
            sweep.append({"query_cut": cut, "heap_factor": heap, "ms": 1000 * c.wall / q.shape[0], "cpu_ms": 1000 * c.cpu / q.shape[0],
                          "recall@10": recall10(hits, exact10)})
    out["sweep"] = sweep
    out["search_rss"] = peak_rss()
    (path.parent / (path.name + ".index.seismic")).unlink()
    return out


def phase_seismic_index(corpus: str, work: Path) -> dict:
    """spladekit's stored approximate index: first search builds and stores it; a new process reopens it."""
    from spladekit.index.index import Index

    q, _ = queries()
    index = Index.open(work / corpus / "spladekit")
    with Clock() as c:
        index.seismic()
    return {"first_use_s": c.wall, "rss": peak_rss(), "bytes": folder_bytes(work / corpus / "spladekit" / "seismic")}


def phase_seismic_reopen(corpus: str, work: Path) -> dict:
    from spladekit.index.index import Index
    from spladekit.index.seismic import SeismicSearchParams

    q, _ = queries()
    with Clock() as c:
        index = Index.open(work / corpus / "spladekit")
        index.seismic()
    result = index.search(q, k=10, backend="seismic", seismic=SeismicSearchParams(num_threads=1))
    exact10 = json.loads((work / corpus / "exact-top10.json").read_text())
    out = {"reopen_s": c.wall, "ms": result.latency.mean_ms, "recall@10": recall10([[d for d, _ in h] for h in result.hits], exact10),
           "n_postings": index.seismic().params.n_postings}
    sweep = []  # through spladekit's own backend (the stored index), the same grid as the direct sweep
    for cut in SWEEP_CUTS:
        for heap in SWEEP_HEAPS:
            params = SeismicSearchParams(query_cut=cut, heap_factor=heap, num_threads=1)
            with Clock() as t:
                hits = index.search(q, k=10, backend="seismic", seismic=params).hits
            sweep.append({"query_cut": cut, "heap_factor": heap, "ms": 1000 * t.wall / q.shape[0], "cpu_ms": 1000 * t.cpu / q.shape[0],
                          "recall@10": recall10([[d for d, _ in h] for h in hits], exact10)})
    out.update(sweep=sweep, rss=peak_rss())
    return out


PHASES = {f.__name__[6:]: f for f in (phase_build, phase_search, phase_shards, phase_pisa_build, phase_pisa_search,
                                       phase_seismic_direct, phase_seismic_index, phase_seismic_reopen)}


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
def gb(n): return f"{n / 1e9:.2f} GB"


def table(corpus: str, r: dict) -> str:
    s, p, d, si = r["build"] | r["search"], r["pisa_build"] | r["pisa_search"], r["seismic_direct"], r.get("seismic_reopen", {})
    exact_ms = s["batch_cpu_ms_k10"]
    lines = [f"### {corpus}: {s['nnz'] / 1e6:.1f} M entries, {s['terms_per_doc']:.0f} terms/doc; arrays {gb(s['array_bytes'])}", "",
             "| | build s | open s | on disk | peak RSS build / open+search | ms/q k=10 batch | k=10 one/call | k=1000 batch | k=1000 one/call | recall@10 |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def row(name, x, recall="exact"):
        def ms(key):
            return f"{x[key.replace('_ms', '_cpu_ms')]:.2f} ({x[key]:.2f})" if key in x else "–"
        rss = f"{gb(x.get('build_rss', 0))} / {gb(x.get('search_rss', 0))}"
        return (f"| {name} | {x.get('build_s', float('nan')):.1f} | {x.get('open_s', float('nan')):.3f} | {gb(x.get('bytes', 0))} | {rss} | "
                f"{ms('batch_ms_k10')} | {ms('one_ms_k10')} | {ms('batch_ms_k1000')} | {ms('one_ms_k1000')} | {recall} |")

    lines.append(row("spladekit exact", s))
    lines.append(row("PISA MaxScore", p, f"same top-10 {p.get('same_top10_as_exact', float('nan')):.3f}"))
    lines.append(row(f"Seismic direct (default)", d, f"{d.get('recall@10', float('nan')):.3f}"))
    lines += ["", "ms/q = process CPU ms per query (wall ms in brackets), 1 thread.",
              f"Ratios (CPU, same run): exact one-query ÷ batch k=10 = {s['one_cpu_ms_k10'] / s['batch_cpu_ms_k10']:.2f}, "
              f"k=1000 = {s['one_cpu_ms_k1000'] / s['batch_cpu_ms_k1000']:.2f}; PISA ÷ spladekit exact batch k=10 = "
              f"{p['batch_cpu_ms_k10'] / exact_ms:.2f}, k=1000 = {p['batch_cpu_ms_k1000'] / s['batch_cpu_ms_k1000']:.2f}; "
              f"peak RSS ÷ arrays: build {s['build_rss'] / s['array_bytes']:.2f}, open+search {s['search_rss'] / s['array_bytes']:.2f}; "
              f"open {s['open_s']:.3f} s."]
    if "shards_equal_one_folder" in r.get("shards", {}):
        lines.append(f"2 shard folders = 1 folder (k=1000 runs identical): {r['shards']['shards_equal_one_folder']}.")
    if si:
        lines.append(f"spladekit Seismic backend: first use (build + store) {r['seismic_index'].get('first_use_s', float('nan')):.1f} s, "
                     f"new process reopens in {si['reopen_s']:.2f} s, {si['ms']:.2f} ms/q, recall@10 {si['recall@10']:.3f}.")
    lines += ["", "Seismic search sweep (k=10; `n_postings` = build parameter):", "",
              "| n_postings | query_cut | heap_factor | CPU ms/q | ÷ exact | recall@10 |", "|---|---|---|---|---|---|"]
    runs = [d] + r.get("seismic_more", []) + ([dict(si, n_postings=f"{si.get('n_postings')} (spladekit Index, stored)")] if si.get("sweep") else [])
    for sweep_run in runs:
        for x in sweep_run.get("sweep", []):
            mark = " **≥0.95 at ≤1/10**" if x["recall@10"] >= 0.95 and x["cpu_ms"] <= exact_ms / 10 else ""
            lines.append(f"| {sweep_run['n_postings']} | {x['query_cut']} | {x['heap_factor']} | {x['cpu_ms']:.3f} | {x['cpu_ms'] / exact_ms:.3f} | {x['recall@10']:.3f}{mark} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, action="append", default=[], help="synthetic corpus size (repeat)")
    ap.add_argument("--no-scifact", action="store_true", help="skip the real SciFact corpus")
    ap.add_argument("--work", type=Path, default=Path("/tmp/spladekit-bench"))
    ap.add_argument("--n-postings", type=int, action="append", default=[], help="extra Seismic builds for the sweep")
    ap.add_argument("--skip", action="append", default=[], help="phases to skip")
    ap.add_argument("--phase")
    ap.add_argument("--corpus")
    ap.add_argument("--json", type=Path, help="also write all results here")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent / "src"))
    if args.phase:
        extra = {"n_postings": args.n_postings[0]} if args.n_postings and args.phase == "seismic_direct" else {}
        print(json.dumps(PHASES[args.phase](args.corpus, args.work, **extra), default=float))
        return
    scifact_vectors()
    corpora = [f"synthetic-{n}" for n in args.docs] + ([] if args.no_scifact else ["scifact"])
    results = {}
    for corpus in corpora:
        r = {}
        for name in ("build", "search", "shards", "pisa_build", "pisa_search", "seismic_index", "seismic_reopen", "seismic_direct"):
            if name not in args.skip:
                r[name] = run_phase(name, corpus, args.work)
                if args.json:  # partial results survive an interrupted run
                    args.json.write_text(json.dumps(dict(results, **{corpus: r}), indent=1, default=float))
        r["seismic_more"] = [run_phase("seismic_direct", corpus, args.work, ["--n-postings", str(n)]) for n in args.n_postings]
        results[corpus] = r
        print(table(corpus, r), flush=True)
        print(flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, default=float))
        shutil.rmtree(args.work / corpus, ignore_errors=True)


if __name__ == "__main__":
    main()
