"""Exact sparse retrieval: score = dot product of SPLADE vectors, ``s(q, d) = Σ_j q_j d_j``.

The core is :func:`search_postings`, over the term-major posting matrix ``[V, D]`` (the CSC of the
documents held as CSR): only a query's own terms' posting lists are read, each added, weighted by
``q_j``, into the query's dense float32 score row of ``D`` entries, so the work of a query is the
total length of its terms' lists. Large indexes (long lists) are scored term at a time (Turtle & Flood, "Query
evaluation: strategies and optimizations", IP&M 31(6), 1995), the score row filled one block of
:data:`DOC_BLOCK` documents after another (every term's segment of the block, in the query's term
order, so each block's scores stay in the core's cache while the terms pass over them: a pass of a
whole list over a row of millions of scores streams the row from memory once per term), each
segment added by scipy's compiled CSC product kernel; small indexes by scipy's sparse product over
blocks of queries. The switch (:data:`TAAT_FROM`) is where one overtakes the other on this
project's machine. Given each term's largest impact per block of documents, a long-list query skips the postings that cannot
change its top k (MaxScore over blocks of documents, :mod:`spladekit.index.maxscore`): the same
result, exact for any ``k``. Memory: one ``[D]`` row (``4·D`` bytes) per long-list query, at most
:data:`BLOCK_SCORES` scores per block of short-list queries.
:class:`spladekit.index.index.Index` keeps the posting matrix on disk (memory-mapped, read in place);
:func:`exact_search` over an in-memory document matrix makes it once per call.

Ranking rule (:data:`TIE_RULE`, the one tie-break used everywhere in spladekit): score descending,
then document id ascending (:func:`spladekit.data.trec.sorted_ranking`) when ``doc_ids`` are passed,
as every caller does, so the top-k cut among tied documents follows the rule of run files and
evaluation; without ``doc_ids``, document row index ascending.
Documents with score 0 (no shared term) are not returned, so a query with no match gets ``[]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.index.maxscore import BlockMaxima, pruned_top_k
from spladekit.index.segments import add_segment, block_cuts, check_segment

TIE_RULE = "score descending, then document id ascending"


def check_k(k) -> int:
    """``k`` as an ``int`` (Python or numpy integer, not bool).

    Raises:
        ValueError: ``k`` is not an integer ≥ 1.
    """
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer ≥ 1, got {k!r}")
    return int(k)


def check_finite(matrix: sp.csr_matrix, what: str, first_row: int = 0) -> None:
    """Refuse a CSR matrix holding a NaN or ±inf weight: a NaN score fails ``score > 0`` and its
    document would vanish from every result silently.

    Args:
        what: the rows' name in the message (``"query"``, ``"document"``).
        first_row: the row number of ``matrix``'s first row (a block of a larger matrix).

    Raises:
        ValueError: naming the first row that holds a non-finite weight, and the weight.
    """
    bad = np.flatnonzero(~np.isfinite(matrix.data))
    if bad.size:
        row = first_row + int(np.searchsorted(matrix.indptr, bad[0], side="right") - 1)
        raise ValueError(f"{what} row {row} holds a weight that is not finite ({matrix.data[bad[0]]})")


def tie_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Rank of each row when rows are ordered by document id ascending (ties of score break by it)."""
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.argsort(np.asarray(doc_ids, dtype=object), kind="stable")] = np.arange(len(doc_ids))
    return ranks


SAMPLE_FROM = 1 << 16
"""Score rows of at least this many documents are first cut at a threshold taken from a sample
(:func:`top_k_row`): a pass over the row instead of gathering and partitioning all its positive scores."""


def _sampled_cut(scores: np.ndarray, k: int) -> np.ndarray | None:
    """The rows whose score reaches a threshold ``t`` > 0 read off a strided sample of the row (its
    value about ``2k`` of the row's scores reach), when at least ``k`` do; else None. With ``k`` of
    them ≥ ``t``, the k-th largest score is ≥ ``t``: every score of the top ``k``, ties with the k-th
    included, is among them."""
    stride = max(1, scores.size // max(4096, 16 * k))
    sample = scores[::stride]
    rank = -(-2 * k * sample.size // scores.size) + 2
    sample = sample[sample > 0]
    if sample.size < rank:
        return None
    threshold = np.partition(sample, sample.size - rank)[sample.size - rank]
    found = np.flatnonzero(scores >= threshold)
    return found if found.size >= k else None


def top_k_arrays(scores: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of a dense score row as arrays ``(rows, scores)``: score > 0 only, score
    descending, then ``tie_rank`` ascending (row ascending without it); everything tied with the
    k-th score is ordered exactly before the cut. A row of :data:`SAMPLE_FROM` scores or more is
    first cut at a sampled threshold (:func:`_sampled_cut`; the same result)."""
    cut = _sampled_cut(scores, k) if scores.size >= SAMPLE_FROM else None
    positive = np.flatnonzero(scores > 0) if cut is None else cut
    if positive.size == 0:
        return positive, scores[positive]
    values = scores[positive]
    if positive.size > k:
        kth = np.partition(values, positive.size - k)[positive.size - k]
        keep = values >= kth
        positive, values = positive[keep], values[keep]
    ties = positive if tie_rank is None else tie_rank[positive]
    order = np.lexsort((ties, -values))[:k]
    return positive[order], values[order]


def top_k_row(scores: np.ndarray, k: int, tie_rank: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The top ``k`` ``(row, score)`` of a dense score row (:func:`top_k_arrays` as Python pairs)."""
    rows, values = top_k_arrays(scores, k, tie_rank)
    return list(zip(rows.tolist(), values.tolist()))


TAAT_FROM = 1 << 15
"""Mean posting-list length (over one query's terms) from which the query is scored term at a time;
below it, blocks of such queries go through scipy's sparse product. The product's cost per posting
grows with the score row (``D``: cache misses, and its sparse result to build), while each list
segment costs a call; the cross-over was measured with ``benchmarks/retrieval.py``
(``benchmarks/runs/2026-12-07-index-constants.md``)."""

PRUNE_FROM = 2500
"""A long-list query is pruned (given the block maxima) when ``D ≥ PRUNE_FROM · k``: with few
documents per wanted result the pruned kernel's bookkeeping (per block and term) and its candidates
outweigh the postings it skips (``benchmarks/exact_kernels.py --prune``;
``benchmarks/runs/2026-12-07-index-constants.md``)."""

DOC_BLOCK = 1 << 19
"""Documents per block of the term-at-a-time kernel (2 MiB of float32 scores, inside a current
server's shared L3 cache). Smaller blocks cost more calls (one per term segment), larger ones fall out
of the cache; measured with ``benchmarks/exact_kernels.py --blocks`` (``benchmarks/RESULTS.md``)."""

BLOCK_SCORES = 1 << 26
"""Most entries of a block's dense ``[block, D]`` float32 scores in the sparse-product path (256 MiB)."""


def _term_at_a_time(
    scores: np.ndarray,
    doc_rows: np.ndarray,
    impacts: np.ndarray,
    first: np.ndarray,
    lengths: np.ndarray,
    weights: np.ndarray,
    terms: np.ndarray,
) -> None:
    """Add ``weights[t] · impacts`` of the posting list ``[first[t], first[t] + lengths[t])`` of each
    query term ``t`` (column ``terms[t]``) into ``scores`` (``[D]`` float32, in place): block of
    :data:`DOC_BLOCK` rows by block, within a block term by term in the given order, so each
    document's sum takes its terms in that order whatever the blocking (lists are sorted by document
    row). Each segment is checked to lie in its block before it is added (two reductions over a
    segment about to be read anyway): scipy's loop does no bounds check, and a damaged list (a row
    outside ``[0, D)``, or out of order) would otherwise write outside ``scores`` or be cut wrongly.

    Raises:
        ValueError: a posting list holds a row outside ``[0, D)`` or rows out of order, naming the term.
    """
    num_docs = scores.size
    edges = np.arange(0, num_docs + DOC_BLOCK, DOC_BLOCK)
    edges[-1] = num_docs
    edges = edges.astype(doc_rows.dtype)  # searchsorted in the lists' own type: no copy of a whole list
    lists = [
        (a, n, np.array([w], np.float32), int(j))
        for a, n, w, j in zip(first.tolist(), lengths.tolist(), weights.tolist(), terms.tolist())
        if n
    ]
    cuts = [block_cuts(doc_rows, a, n, edges, term, num_docs) for a, n, _, term in lists]
    pointer = np.zeros(2, dtype=doc_rows.dtype)
    for b in range(edges.size - 1):
        for cut, (_, _, weight, term) in zip(cuts, lists):
            lo, hi = cut[b], cut[b + 1]
            if hi > lo:
                rows = doc_rows[lo:hi]
                check_segment(rows, edges[b], edges[b + 1], term, num_docs)
                add_segment(scores, rows, impacts[lo:hi], weight, pointer)


def term_at_a_time(scores: np.ndarray, postings: sp.csr_matrix, terms: np.ndarray, weights: np.ndarray) -> None:
    """Add one query's float32 products into its score row ``scores`` (``[D]`` float32, in place),
    term at a time over the ``[V, D]`` posting matrix: the long-list kernel of
    :func:`search_postings` (the same sums, in the order of ``terms``).

    Raises:
        ValueError: a posting list holds a row outside ``[0, D)`` or rows out of order, naming the term.
    """
    starts = np.asarray(postings.indptr)
    first = starts[terms].astype(np.int64)
    _term_at_a_time(
        scores,
        np.asarray(postings.indices),
        np.asarray(postings.data, dtype=np.float32),
        first,
        starts[terms + 1].astype(np.int64) - first,
        np.asarray(weights, np.float32),
        np.asarray(terms),
    )


def search_postings(
    queries: sp.spmatrix,
    postings: sp.csr_matrix,
    k: int,
    tie_rank: np.ndarray | None = None,
    timings: list[float] | None = None,
    maxima: BlockMaxima | None = None,
) -> list[list[tuple[int, float]]]:
    """Exact top-``k`` of each ``[Q, V]`` query row against the term-major ``[V, D]`` posting matrix.

    A query's float32 score row ``[D]`` receives the float32 products ``q_j · d_j`` of every posting
    of every query term ``j``, added in ascending term order (the query rows are taken in canonical
    form: terms sorted, a repeated term's weights summed); then :func:`top_k_row`. Two kernels
    compute these sums, chosen per query from its terms' mean posting-list length:

    - long lists (≥ :data:`TAAT_FROM`): term at a time (module docstring), block of
      :data:`DOC_BLOCK` documents by block, each term's segment of the block added in order into
      the query's own row (:func:`spladekit.index.segments.add_segment`); memory: the ``[D]`` row.
      With ``maxima`` (and ``D ≥`` :data:`PRUNE_FROM` ``· k``), such a query is pruned instead (MaxScore over blocks,
      :func:`spladekit.index.maxscore.pruned_top_k`): the same top ``k``, the same scores, reading
      the postings that can change them;
    - short lists: consecutive such queries form a block of at most :data:`BLOCK_SCORES` scores,
      multiplied by the posting matrix with scipy's sparse product (SMMP: per query row, each
      term's postings added, weighted, in the row's order) and made dense.

    Both add the same float32 products in the same order, so they agree within float32 rounding
    (tested, against a float64 brute force); on this project's x86 machine they gave the same bits
    (at SciFact scale and at 1M documents), which a build that fuses multiply and add need not. A
    query takes the same kernel whatever batch it comes in, so one-at-a-time and batched searches
    give the same results. One thread.

    Args:
        queries: ``[Q, V]`` sparse query vectors (any real dtype; cast to float32).
        postings: ``[V, D]`` CSR, row ``j`` = posting list of term ``j`` (document rows, impacts).
        k: results per query.
        tie_rank: ``[D]`` rank of each document row under the id order (:func:`tie_ranks`).
        timings: when given, receives the seconds spent on each query (for short-list queries, their
            block's time divided by its number of queries).
        maxima: the posting matrix's :class:`spladekit.index.maxscore.BlockMaxima` (kept between
            calls: it fills as terms are queried); without it every posting is added.

    Raises:
        ValueError: vocabulary mismatch, ``k`` not an integer ≥ 1, a query weight that is not
            finite (NaN or ±inf, naming the query row), or (term at a time) a posting list holding
            a row outside ``[0, D)`` or rows out of order across blocks (pruned: out of order at all),
            naming the term.
    """
    if queries.shape[1] != postings.shape[0]:
        raise ValueError(f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {postings.shape[0]}")
    k = check_k(k)
    num_docs = postings.shape[1]
    queries = sp.csr_matrix(queries, dtype=np.float32, copy=True)
    queries.sum_duplicates()  # canonical: terms ascending (the order every kernel adds them in), no repeats
    check_finite(queries, "query")  # after the float32 cast: a float64 weight beyond float32 is inf here
    starts = np.asarray(postings.indptr, dtype=np.int64)
    doc_rows, impacts = np.asarray(postings.indices), np.asarray(postings.data, dtype=np.float32)
    # per query entry: where its posting list starts and how long it is; per query: total postings
    qptr = queries.indptr.astype(np.int64)
    first = starts[queries.indices]
    lengths = starts[queries.indices + 1] - first
    cumulative = np.concatenate([[0], np.cumsum(lengths)])
    totals = cumulative[qptr[1:]] - cumulative[qptr[:-1]]
    counts = np.diff(qptr)
    blocked = (totals < TAAT_FROM * counts) | (counts == 0)
    itype = postings.indices.dtype
    # same index type as the postings, so scipy converts (copies) nothing of the large matrix
    queries = sp.csr_matrix(
        (queries.data, queries.indices.astype(itype), queries.indptr.astype(itype)), shape=queries.shape
    )
    row_limit = max(1, BLOCK_SCORES // max(1, num_docs))
    results: list[list[tuple[int, float]]] = []
    work = None  # the pruned kernel's score row, reused query after query
    i = 0
    while i < queries.shape[0]:
        began = time.perf_counter()
        if blocked[i]:
            j = i + 1
            while j < queries.shape[0] and blocked[j] and j - i < row_limit:
                j += 1
            block = (queries[i:j] @ postings).toarray() if num_docs else np.zeros((j - i, 0), np.float32)
            results.extend(top_k_row(row, k, tie_rank) for row in block)
            if timings is not None:
                timings.extend([(time.perf_counter() - began) / (j - i)] * (j - i))
            i = j
            continue
        lo, hi = qptr[i], qptr[i + 1]
        if (
            maxima is not None and num_docs >= PRUNE_FROM * k and postings.data.dtype == np.float32
        ):  # the kernel reads impacts as stored
            if work is None:
                work = np.empty(num_docs, dtype=np.float32)
            found = pruned_top_k(work, maxima, queries.indices[lo:hi], queries.data[lo:hi], k, tie_rank)
            if found is not None:
                results.append(found)
                if timings is not None:
                    timings.append(time.perf_counter() - began)
                i += 1
                continue
        scores = np.zeros(num_docs, dtype=np.float32)
        _term_at_a_time(
            scores, doc_rows, impacts, first[lo:hi], lengths[lo:hi], queries.data[lo:hi], queries.indices[lo:hi]
        )
        results.append(top_k_row(scores, k, tie_rank))
        if timings is not None:
            timings.append(time.perf_counter() - began)
        i += 1
    return results


def exact_search(
    queries: sp.spmatrix,
    docs: sp.spmatrix,
    k: int = 1000,
    doc_ids: Sequence[str] | None = None,
    prune: bool = True,
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
        prune: score long-list queries with MaxScore over blocks (:mod:`spladekit.index.maxscore`;
            the same results); False adds every posting.

    Returns:
        For each query, a list of ``(doc_index, score)`` ordered by score desc then index asc (doc id
        asc with ``doc_ids``); only documents with score > 0; at most ``k``.

    Raises:
        ValueError: vocabulary sizes differ, ``k`` not an integer ≥ 1, ``doc_ids`` of the wrong
            length, or a non-finite query or document weight (naming its row).
    """
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {docs.shape[1]}")
    k = check_k(k)
    if doc_ids is not None and len(doc_ids) != docs.shape[0]:
        raise ValueError(f"{len(doc_ids)} document ids for {docs.shape[0]} document vectors")
    docs = sp.csr_matrix(docs, dtype=np.float32)
    if (
        not docs.has_canonical_format
    ):  # a term twice in a row: summed (on a copy), so each posting list is strictly ascending
        docs = docs.copy()
        docs.sum_duplicates()
    check_finite(docs, "document")
    postings = docs.T.tocsr()
    tie_rank = tie_ranks(doc_ids) if doc_ids is not None else None
    return search_postings(queries, postings, k, tie_rank, maxima=BlockMaxima(postings) if prune else None)


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
