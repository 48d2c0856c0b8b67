"""Exact sparse retrieval: score = dot product of SPLADE vectors, ``s(q, d) = Σ_j q_j d_j``.

The core is :func:`search_postings`: queries ``[Q, V]`` times the term-major posting matrix ``[V, D]``
(the CSC of the documents held as CSR), with ``scipy.sparse`` — an inverted-index traversal in
effect: for each query term its posting list is added, weighted, into the score row, so only
shared terms cost work. Blocks of queries are sized so the dense ``[block, D]`` score array stays
under ``max_memory_bytes``. :class:`spladekit.index.index.Index` keeps the posting matrix on disk
(memory-mapped); :func:`exact_search` over an in-memory document matrix makes it once per call.

Ranking rule (:data:`TIE_RULE`, the one tie-break used everywhere in spladekit): score descending,
then document id ascending (:func:`spladekit.data.trec.sorted_ranking`) when ``doc_ids`` are passed,
as every caller does, so the top-k cut among tied documents follows the rule of run files and
evaluation; without ``doc_ids``, document row index ascending.
Documents with score 0 (no shared term) are not returned, so a query with no match gets ``[]``.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import scipy.sparse as sp

TIE_RULE = "score descending, then document id ascending"


def tie_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Rank of each row when rows are ordered by document id ascending (ties of score break by it)."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(len(doc_ids))
    return ranks


def top_k_row(scores: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The top ``k`` ``(row, score)`` of a dense score row: score > 0 only, score descending, then
    ``tie_rank`` ascending (row ascending without it); everything tied with the k-th score is
    ordered exactly before the cut."""
    positive = np.flatnonzero(scores > 0)
    if positive.size == 0:
        return []
    values = scores[positive]
    if positive.size > k:
        kth = np.partition(values, positive.size - k)[positive.size - k]
        keep = values >= kth
        positive, values = positive[keep], values[keep]
    ties = positive if tie_rank is None else tie_rank[positive]
    order = np.lexsort((ties, -values))[:k]
    return [(int(positive[i]), float(values[i])) for i in order]


def search_postings(
    queries: sp.spmatrix,
    postings: sp.csr_matrix,
    k: int,
    tie_rank: np.ndarray | None = None,
    max_memory_bytes: int = 256 * 2**20,
    timings: list[float] | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` of each ``[Q, V]`` query row against the term-major ``[V, D]`` posting matrix.

    Scores are ``q @ postings`` (scipy's sparse product: for each query term, its posting list is
    added, weighted, into the score row, so only shared terms cost work), in blocks of queries
    whose dense ``[block, D]`` float32 scores stay under ``max_memory_bytes``.

    Args:
        timings: when given, receives the seconds spent per query (block time / block size).

    Raises:
        ValueError: vocabulary mismatch or ``k`` < 1.
    """
    if queries.shape[1] != postings.shape[0]:
        raise ValueError(f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {postings.shape[0]}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    num_docs = postings.shape[1]
    queries = sp.csr_matrix(queries, dtype=np.float32)
    itype = postings.indices.dtype
    # same index type as the postings, so scipy converts (copies) nothing of the large matrix
    queries = sp.csr_matrix((queries.data, queries.indices.astype(itype), queries.indptr.astype(itype)), shape=queries.shape)
    block = max(1, int(max_memory_bytes // max(1, num_docs * 4)))
    results: list[list[tuple[int, float]]] = []
    for start in range(0, queries.shape[0], block):
        began = time.perf_counter()
        part = queries[start : start + block]
        scores = (part @ postings).toarray() if num_docs else np.zeros((part.shape[0], 0), np.float32)
        results.extend(top_k_row(row, k, tie_rank) for row in scores)
        if timings is not None:
            timings.extend([(time.perf_counter() - began) / part.shape[0]] * part.shape[0])
    return results


def exact_search(
    queries: sp.spmatrix,
    docs: sp.spmatrix,
    k: int = 1000,
    max_memory_bytes: int = 256 * 2**20,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` dot-product search against in-memory document vectors.

    Transposes ``docs`` into its posting matrix on every call: to search many times, keep an
    :class:`spladekit.index.index.Index` (its posting matrix is stored).

    Args:
        queries: ``[Q, V]`` sparse query vectors.
        docs: ``[D, V]`` sparse document vectors (same V).
        k: results per query.
        max_memory_bytes: bound on the dense score block (``block × D × 4`` bytes).
        doc_ids: when given (one id per document row), ties are broken by document id ascending
            instead of row index (:data:`TIE_RULE`).

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
    if doc_ids is not None and len(doc_ids) != docs.shape[0]:
        raise ValueError(f"{len(doc_ids)} document ids for {docs.shape[0]} document vectors")
    postings = sp.csr_matrix(docs, dtype=np.float32).T.tocsr()
    tie_rank = tie_ranks(doc_ids) if doc_ids is not None else None
    return search_postings(queries, postings, k, tie_rank, max_memory_bytes)


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
