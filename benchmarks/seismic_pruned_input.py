"""Seismic over a pruned build input, its candidates rescored exactly: does it pay? (issue 35)

A build input cut to each document's ``M`` largest weights holds fewer entries, so by the shard rule
(:mod:`spladekit.index.seismic_rule`) fewer, larger shards would fit one budget; but Seismic scores
the documents it visits with its forward index, i.e. with the cut vectors, so its top-``k'``
candidates are rescored here with the full rows (the index folder holds them) and cut to 10.

One index over the first ``N`` rows of ``synthetic-N`` (``benchmarks/retrieval.py``; ``N`` = 1.1M is
one of the 8 default shards at 8.8M), ``n_postings`` that shard's share of 3500 counted on the full
entries (as :func:`spladekit.index.seismic_shards.shard_params`), ``max_fraction`` 6, the other build
parameters pyseismic's defaults. The anchor, in the same run: the full input, its own scores. Each
variant is built, searched and freed before the next. Recall@10 against the exact top-10 (score
descending, row ascending); process CPU ms a query, one query per call (the first 30 queries), one
thread; the rescoring's time included.

Usage::

    PYTHONPATH=src python benchmarks/seismic_pruned_input.py [N] [M ...]   # default 1100000 and 16 32 64 128
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retrieval  # noqa: E402

QUERIES, ONE, ROWS_8M, N_POSTINGS_8M = 100, 30, 8_800_000, 3500
SETTINGS = [(6, 0.7), (10, 0.7), (12, 0.6), (20, 0.5)]  # query_cut / heap_factor
CANDIDATES = [10, 30, 100]


def top_terms(m: sp.csr_matrix, keep: int) -> sp.csr_matrix:
    """Each row of ``m`` cut to its ``keep`` largest values (ties: the lower column first)."""
    lengths = np.diff(m.indptr)
    rows = np.repeat(np.arange(m.shape[0]), lengths)
    order = np.lexsort((m.indices, -m.data, rows))  # row, then value descending
    rank = np.arange(m.nnz) - np.repeat(m.indptr[:-1], lengths)  # position inside the row, in that order
    chosen = np.zeros(m.nnz, bool)
    chosen[order[rank < keep]] = True
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[chosen], minlength=m.shape[0]))])
    return sp.csr_matrix((m.data[chosen], m.indices[chosen], indptr), shape=m.shape)


def main() -> None:
    import seismic

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_100_000
    cuts = [int(a) for a in sys.argv[2:]] or [16, 32, 64, 128]
    blocks, _, vocab = retrieval.corpus_blocks(f"synthetic-{n}")
    docs = sp.vstack(list(blocks()), format="csr")
    docs.sort_indices()
    q, _ = retrieval.queries()
    q = q[:QUERIES]
    scores = np.zeros((q.shape[0], n), np.float32)
    dense = q.T.toarray()
    for start in range(0, n, 500_000):
        scores[:, start : start + 500_000] = (docs[start : start + 500_000] @ dense).T
    truth = [set(np.lexsort((np.arange(n), -row))[:10].tolist()) for row in scores]
    del scores
    n_postings = int(np.ceil(N_POSTINGS_8M * docs.nnz / (docs.nnz * ROWS_8M / n)))
    names = np.array([str(j) for j in range(vocab)], dtype=seismic.get_seismic_string())
    components = [names[q.indices[q.indptr[i] : q.indptr[i + 1]]] for i in range(q.shape[0])]
    values = [np.ascontiguousarray(q.data[q.indptr[i] : q.indptr[i + 1]]) for i in range(q.shape[0])]
    print(f"synthetic-{n}: {docs.nnz:,} entries, n_postings {n_postings}, {q.shape[0]} queries ({ONE} one per call)")
    print(
        "| input | entries | build CPU s | query_cut / heap_factor | candidates | recall@10 | ms a query | ÷ full input's ms (same setting) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    anchor = {}
    for keep in [0] + cuts:
        built = top_terms(docs, keep) if keep else docs
        started = time.process_time()
        dataset = seismic.SeismicDataset()
        dataset.add_documents_by_id(
            [str(i) for i in range(n)],
            built.indices.astype(np.int64),
            built.data.astype(np.float32),
            built.indptr.astype(np.int64),
        )
        index = seismic.SeismicIndex.build_from_dataset(dataset, n_postings=n_postings, max_fraction=6.0)
        build = time.process_time() - started
        entries = built.nnz
        del dataset, built

        def search(i, k, cut, heap):  # called in this iteration only, before `del index` below frees the build
            hits = index.search(  # noqa: B023, F821 (called in this iteration only, before `del index` frees the build)
                str(i), components[i], values[i], k=k, query_cut=cut, heap_factor=heap, n_knn=0, sorted=True
            )
            rows = np.fromiter((int(h[2]) for h in hits), np.int64)
            found = (
                np.fromiter((h[1] for h in hits), np.float32) if not keep else (docs[rows] @ q[i].T).toarray().ravel()  # noqa: B023 (called in this iteration only)
            )
            return rows[np.lexsort((rows, -found))[:10]]

        for cut, heap in SETTINGS:
            for k in CANDIDATES if keep else [10]:
                recall = np.mean(
                    [len(truth[i] & set(search(i, k, cut, heap).tolist())) / 10 for i in range(q.shape[0])]
                )
                started = time.process_time()
                for i in range(ONE):
                    search(i, k, cut, heap)
                ms = (time.process_time() - started) / ONE * 1e3
                anchor.setdefault((cut, heap), ms)
                print(
                    f"| {f'top {keep}' if keep else 'full (anchor)'} | {entries:,} | {build:.0f} | {cut} / {heap} | {k} | {recall:.3f} | "
                    f"{ms:.3f} | {ms / anchor[(cut, heap)]:.2f} |",
                    flush=True,
                )
        del index


if __name__ == "__main__":
    main()
