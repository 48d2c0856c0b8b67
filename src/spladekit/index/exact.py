"""Exact sparse retrieval: score = dot product of SPLADE vectors, ``s(q, d) = Σ_j q_j d_j``.

The document matrix is held as CSC-friendly CSR ``[D, V]``; each block of queries is multiplied by
``docs.T`` with ``scipy.sparse`` (an inverted-index traversal in effect: only shared terms cost
work). Blocks are sized so the dense ``[block, D]`` score array stays under ``max_memory_bytes``.

Ranking rule (the one tie-break used everywhere in spladekit): score descending, then document id
ascending (:func:`spladekit.data.trec.sorted_ranking`) when ``doc_ids`` are passed, as the pipeline and
the CLI do, so the top-k cut among tied documents follows the rule of run files and evaluation;
without ``doc_ids``, document row index ascending.
Documents with score 0 (no shared term) are not returned, so a query with no match gets ``[]``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp


def _top_k_row(scores: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> list[tuple[int, float]]:
    positive = np.flatnonzero(scores > 0)
    if positive.size == 0:
        return []
    values = scores[positive]
    if positive.size > k:
        # Keep everything tied with the k-th score, then order exactly.
        kth = np.partition(values, positive.size - k)[positive.size - k]
        keep = values >= kth
        positive, values = positive[keep], values[keep]
    ties = positive if tie_rank is None else tie_rank[positive]
    order = np.lexsort((ties, -values))[:k]
    return [(int(positive[i]), float(values[i])) for i in order]


def exact_search(
    queries: sp.spmatrix,
    docs: sp.spmatrix,
    k: int = 1000,
    max_memory_bytes: int = 256 * 2**20,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` dot-product search.

    Args:
        queries: ``[Q, V]`` sparse query vectors.
        docs: ``[D, V]`` sparse document vectors (same V).
        k: results per query.
        max_memory_bytes: bound on the dense score block (``block × D × 4`` bytes).
        doc_ids: when given (one id per document row), ties are broken by document id ascending
            instead of row index, so that which tied documents make the top ``k`` follows the same
            rule as run files and evaluation (:func:`spladekit.data.trec.sorted_ranking`).

    Returns:
        For each query, a list of ``(doc_index, score)`` ordered by score desc then index asc (doc id
        asc with ``doc_ids``); only documents with score > 0; at most ``k``.

    Raises:
        ValueError: vocabulary sizes differ, ``k`` < 1, or ``doc_ids`` has the wrong length.
    """
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {docs.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    queries = sp.csr_matrix(queries, dtype=np.float32)
    docs_t = sp.csr_matrix(docs, dtype=np.float32).T.tocsr()
    n_docs = docs.shape[0]
    tie_rank = None
    if doc_ids is not None:
        if len(doc_ids) != n_docs:
            raise ValueError(f"{len(doc_ids)} document ids for {n_docs} document vectors")
        tie_rank = np.empty(n_docs, dtype=np.int64)
        tie_rank[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(n_docs)
    block = max(1, int(max_memory_bytes // max(1, n_docs * 4)))
    results: list[list[tuple[int, float]]] = []
    for start in range(0, queries.shape[0], block):
        scores = (queries[start : start + block] @ docs_t).toarray()
        results.extend(_top_k_row(row, k, tie_rank) for row in scores)
    return results


def results_to_run(
    results: Sequence[Sequence[tuple[int, float]]], query_ids: Sequence[str], doc_ids: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Turn :func:`exact_search` output into a run ``{qid: {docid: score}}``.

    Raises:
        ValueError: ``results`` and ``query_ids`` differ in length.
    """
    if len(results) != len(query_ids):
        raise ValueError(f"{len(results)} result lists for {len(query_ids)} query ids")
    return {qid: {doc_ids[i]: score for i, score in hits} for qid, hits in zip(query_ids, results)}
