"""Exact sparse retrieval: score = dot product of SPLADE vectors, ``s(q, d) = Σ_j q_j d_j``.

The core is :func:`search_postings`: term-at-a-time accumulation over the term-major posting matrix
``[V, D]`` (the CSC of the documents held as CSR). For each query, a dense float32 score row of ``D``
entries (``4·D`` bytes, the memory bound: one row, whatever the number of queries) receives, for each
query term ``j`` in turn, its posting list weighted by ``q_j`` (``torch.Tensor.index_add_``: one
compiled scatter-add per list, no temporary), so only shared terms cost work: the work of a query is
the total length of its terms' posting lists. Term-at-a-time evaluation: Turtle & Flood, "Query
evaluation: strategies and optimizations", IP&M 31(6), 1995. Every posting is scored (no dynamic
pruning), so the result is exact for any ``k``. :class:`spladekit.index.index.Index` keeps the posting
matrix on disk (memory-mapped, read in place); :func:`exact_search` over an in-memory document
matrix makes it once per call.

Ranking rule (:data:`TIE_RULE`, the one tie-break used everywhere in spladekit): score descending,
then document id ascending (:func:`spladekit.data.trec.sorted_ranking`) when ``doc_ids`` are passed,
as every caller does, so the top-k cut among tied documents follows the rule of run files and
evaluation; without ``doc_ids``, document row index ascending.
Documents with score 0 (no shared term) are not returned, so a query with no match gets ``[]``.
"""

from __future__ import annotations

import time
import warnings
from typing import Sequence

import numpy as np
import scipy.sparse as sp
import torch

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


def _read_only_tensor(array: np.ndarray, dtype) -> torch.Tensor:
    """A torch view of a (possibly memory-mapped, read-only) array; copied only to change its dtype.
    The view is only ever read (the source of ``index_add_``), so torch's warning about
    non-writable arrays does not apply."""
    array = np.asarray(array, dtype=dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def search_postings(
    queries: sp.spmatrix,
    postings: sp.csr_matrix,
    k: int,
    tie_rank: np.ndarray | None = None,
    timings: list[float] | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` of each ``[Q, V]`` query row against the term-major ``[V, D]`` posting matrix.

    Term-at-a-time (module docstring): per query, a float32 score row ``[D]`` accumulates
    ``q_j · postings[j]`` for each query term ``j`` in the row's order; then :func:`top_k_row`.
    Memory beyond the postings: one ``[D]`` float32 row (``4·D`` bytes). One thread per query.

    Args:
        queries: ``[Q, V]`` sparse query vectors (any dtype; cast to float32).
        postings: ``[V, D]`` CSR, row ``j`` = posting list of term ``j`` (document rows, impacts).
        k: results per query.
        tie_rank: ``[D]`` rank of each document row under the id order (:func:`tie_ranks`).
        timings: when given, receives the seconds spent on each query.

    Raises:
        ValueError: vocabulary mismatch or ``k`` < 1.
    """
    if queries.shape[1] != postings.shape[0]:
        raise ValueError(f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {postings.shape[0]}")
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    num_docs = postings.shape[1]
    queries = sp.csr_matrix(queries, dtype=np.float32)
    starts = np.asarray(postings.indptr, dtype=np.int64)
    impacts = _read_only_tensor(postings.data, np.float32)
    rows = _read_only_tensor(postings.indices, postings.indices.dtype)
    scores = torch.zeros(num_docs, dtype=torch.float32)
    scores_np = scores.numpy()  # same memory
    results: list[list[tuple[int, float]]] = []
    for i in range(queries.shape[0]):
        began = time.perf_counter()
        scores.zero_()
        lo, hi = queries.indptr[i], queries.indptr[i + 1]
        for term, weight in zip(queries.indices[lo:hi].tolist(), queries.data[lo:hi].tolist()):
            a, b = starts[term], starts[term + 1]
            if b > a:
                scores.index_add_(0, rows[a:b], impacts[a:b], alpha=weight)
        results.append(top_k_row(scores_np, k, tie_rank))
        if timings is not None:
            timings.append(time.perf_counter() - began)
    return results


def exact_search(
    queries: sp.spmatrix,
    docs: sp.spmatrix,
    k: int = 1000,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` dot-product search against in-memory document vectors.

    Transposes ``docs`` into its posting matrix on every call: to search many times, keep an
    :class:`spladekit.index.index.Index` (its posting matrix is stored).

    Args:
        queries: ``[Q, V]`` sparse query vectors.
        docs: ``[D, V]`` sparse document vectors (same V).
        k: results per query.
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
    return search_postings(queries, postings, k, tie_rank)


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
