"""Exact top-k with safe dynamic pruning: MaxScore term at a time over blocks of documents.

MaxScore (Turtle & Flood, "Query evaluation: strategies and optimizations", IP&M 31(6), 1995) stops
reading the posting lists whose scores cannot lift a document into the top k; here with a bound per
block of :data:`PRUNE_BLOCK` documents (a term's largest impact in the block, as block-max indexes do:
Ding & Suel, SIGIR 2011). For each block, in row order:

1. the query's terms are taken by bound ``u_j = q_j · max(d_j in the block)`` descending, and their
   segments added into the block's float32 scores ``acc`` (the kernel of exact search);
2. ``θ`` is a lower bound on the k-th best score of the whole query (k distinct documents are known
   to reach it); once the bounds of the terms not yet added sum to ``rest`` with
   ``rest · (1 + 3g) + η < θ``, only documents with ``(acc + rest) · (1 + 3g) + η ≥ θ`` can still enter the
   top k (the candidates); the block stops adding segments when they are few (their number ×
   :data:`CANDIDATE_COST` ≤ the postings left in the block), and the candidates' sums are completed
   by looking them up in the remaining segments (:func:`_complete`, dropping those that fall short
   of ``θ`` on the way);
3. the block's candidates (all documents with ``acc · (1 + 3g) + η ≥ θ`` when it did not stop) join a
   pool with their whole sum's bounds ``acc · (1 − 2g) − η`` and ``acc · (1 + 3g) + η``; ``θ`` rises to the
   k-th largest lower bound, and the pool keeps the documents whose upper bound reaches it;
4. at the end the pooled documents are scored again from the query's posting lists, the float32
   products ``q_j · d_j`` added in ascending term order: the very sum the unpruned kernel makes
   (:func:`rescore`); in batches by upper bound, highest first, ``θ`` rising to the k-th score
   found, until the next upper bound is below ``θ``; the top k follow the tie rule.

A document never scored has a score below ``θ`` ≤ the k-th best score, so the result is the
unpruned one, ties included.

``g = 2 (T + 1) · 2⁻²⁴`` for ``T`` query terms bounds the relative rounding of a float32 sum of
``T`` non-negative products (each product and each addition rounds by at most ``2⁻²⁴``: Higham,
*Accuracy and Stability of Numerical Algorithms*, §3.1, ``γ_T = T u / (1 − T u)``), whichever order
the terms are added in, above float32's normal range; below it a product rounds by up to half the
smallest subnormal whatever its size, so every bound also carries ``η = T ·`` that subnormal: lower
bounds ``acc · (1 − 2g) − η``, upper ``(acc + rest) · (1 + 3g) + η`` (all in float64). Pruning needs
every weight and impact ≥ 0 (SPLADE's are) and sums that cannot overflow float32 (the bounds of a
block summed, times ``1 + 3g``, below its largest value): any other query is scored unpruned.
"""

from __future__ import annotations

import threading

import numpy as np
import scipy.sparse as sp

from spladekit.data.numbers import FLOAT32_MAX
from spladekit.index.segments import add_segment, block_cuts, damaged

PRUNE_BLOCK = 1 << 17
"""Documents per block of the pruned kernel (512 KiB of float32 scores, inside a core's L2 cache):
smaller blocks bound tighter but cost more calls. Measured with ``benchmarks/exact_kernels.py --prune``
(``benchmarks/RESULTS.md``)."""

CANDIDATE_COST = 4000
"""Postings the pruned kernel would rather add than complete one more candidate by looking it up in
the remaining segments (the stopping rule of step 2 above). Measured with
``benchmarks/exact_kernels.py --prune`` (``benchmarks/RESULTS.md``)."""

U32 = 2.0**-24  # float32 unit roundoff


class BlockMaxima:
    """Each term's largest impact in each block of ``block`` documents, and where its list crosses
    the blocks, computed the first time a query holds the term (one pass over its list) and kept.

    Args:
        postings: ``[V, D]`` CSR posting matrix (rows sorted by document).
        block: documents per block (:data:`PRUNE_BLOCK` when None).

    Memory: ``(8 + 12 · ⌈D / block⌉)`` bytes per term seen (≈ 0.8 KiB at 8.8M documents).
    """

    def __init__(self, postings: sp.csr_matrix, block: int | None = None):
        self.postings = postings
        self.block = int(block or PRUNE_BLOCK)
        num_docs = postings.shape[1]
        edges = np.arange(0, num_docs + self.block, self.block)
        edges[-1] = num_docs
        self.edges = edges.astype(postings.indices.dtype)  # searchsorted in the lists' own type: no copy
        self._terms: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self._lock = threading.Lock()

    def of(self, term: int) -> tuple[np.ndarray, np.ndarray, float]:
        """``(maxima [blocks] float32, cuts [blocks + 1] int64, lowest impact)`` of one term (an
        empty segment's maximum is 0).

        Raises:
            ValueError: the term's list is damaged (a row outside ``[0, D)`` or out of order).
        """
        found = self._terms.get(term)
        if found is None:
            first, end = int(self.postings.indptr[term]), int(self.postings.indptr[term + 1])
            rows = self.postings.indices[first:end]
            if rows.size and (rows[0] < 0 or rows[-1] >= self.postings.shape[1] or not (rows[1:] > rows[:-1]).all()):
                damaged(
                    term, rows, self.postings.shape[1]
                )  # checked whole, once: the pruned kernel adds its segments unchecked
            cuts = block_cuts(self.postings.indices, first, end - first, self.edges, term, self.postings.shape[1])
            impacts = self.postings.data[first:end]
            maxima = np.zeros(self.edges.size - 1, np.float32)
            full = np.flatnonzero(cuts[1:] > cuts[:-1])
            if full.size:  # each non-empty segment reduced up to the next non-empty one's start: its own end
                maxima[full] = np.maximum.reduceat(impacts, cuts[:-1][full] - first)
            found = (maxima, cuts.astype(np.int64), float(impacts.min()) if impacts.size else 0.0)
            with self._lock:
                self._terms[term] = found
        return found


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (``k ≤ values.size``); for a block's scores, first among
    those ≥ half the largest (the k-th is there when at least ``k`` are), a fraction of a full partition."""
    if values.size > 64 * k:
        top = values[values >= 0.5 * float(values.max())]
        if top.size >= k:
            values = top
    return float(np.partition(values, values.size - k)[values.size - k])


def _at_least(value: float) -> float:
    """A threshold ``t`` ≤ ``value`` (> 0) whose float32 rounding is ≤ ``value`` too (``value ·
    (1 − 2⁻²³)`` rounds to at most ``value``), and ≥ the smallest positive float32: ``acc ≥ t`` on a
    float32 ``acc`` (compared in float32 or float64) keeps every ``acc ≥ value`` and no zero."""
    return max(value * (1 - 2.0**-23), SMALLEST)


SMALLEST = float(np.finfo(np.float32).smallest_subnormal)


def rescore(postings: sp.csr_matrix, rows: np.ndarray, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Scores of document ``rows`` (ascending) from the query terms' posting lists: term by term in
    the given order, each row looked up in the term's list (binary search) and the float32 product
    ``impact · weight`` added to its float32 sum (the sums the term-at-a-time kernel makes, in the
    same order; the lists read are the query's own, already in memory).

    Args:
        postings: ``[V, D]`` CSR posting matrix, each list sorted by document row.
        rows: ``[n]`` document rows, ascending.
        terms, weights: the query's terms (in the order their products are added) and float32 weights.

    Returns:
        ``[n]`` float32 scores.
    """
    doc_rows, impacts = np.asarray(postings.indices), np.asarray(postings.data)
    keys = rows.astype(doc_rows.dtype)
    scores = np.zeros(rows.size, np.float32)
    for term, weight in zip(terms.tolist(), weights.tolist()):
        a, z = int(postings.indptr[term]), int(postings.indptr[term + 1])
        if z == a:
            continue
        segment = doc_rows[a:z]
        at = np.minimum(np.searchsorted(segment, keys), z - a - 1)
        hit = np.flatnonzero(segment[at] == keys)
        scores[hit] += impacts[a + at[hit]] * np.float32(weight)
    return scores


def _complete(
    rows: np.ndarray,
    acc: np.ndarray,
    doc_rows: np.ndarray,
    impacts: np.ndarray,
    starts: list,
    ends: list,
    order: list,
    term_weights: list,
    rest: list,
    m: int,
    theta: float,
    g: float,
    eta: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of a block that stopped before term ``order[m]``: each remaining term's
    segment looked up at their rows (binary search; the candidates are sorted) and its float32
    product added to their float32 partial sums ``acc``, term by term in bound order; after each
    term, those whose sum plus the bounds still to come ``rest`` cannot reach ``θ`` leave.

    Returns:
        ``(rows, float64 sums)`` of the candidates left, every query term added.
    """
    rows = rows.astype(doc_rows.dtype)
    acc = acc.copy()
    for j in range(m, len(order)):
        a, z = starts[j], ends[j]
        segment = doc_rows[a:z]
        at = np.minimum(np.searchsorted(segment, rows), z - a - 1)
        hit = np.flatnonzero(segment[at] == rows)
        acc[hit] += impacts[a + at[hit]] * term_weights[order[j]]  # float32 product, then float32 sum
        keep = (acc.astype(np.float64) + rest[j + 1]) * (1 + 3 * g) + eta >= theta
        if not keep.all():
            rows, acc = rows[keep], acc[keep]
    return rows.astype(np.int64), acc.astype(np.float64)


def pruned_top_k(
    scores: np.ndarray,
    maxima: BlockMaxima,
    terms: np.ndarray,
    weights: np.ndarray,
    k: int,
    tie_rank: np.ndarray | None = None,
) -> list[tuple[int, float]] | None:
    """The exact top-``k`` ``(row, score)`` of one query (module docstring), or None when it cannot be
    pruned (a negative weight or impact): the caller then scores it unpruned.

    Args:
        scores: ``[D]`` float32 work row (overwritten).
        maxima: the posting matrix's :class:`BlockMaxima`.
        terms, weights: the query's terms, ascending, and their float32 weights (finite).
        k: results wanted.
        tie_rank: ``[D]`` rank of each row under the document id order (row order when None).

    Raises:
        ValueError: a damaged posting list (naming its term).
    """
    if terms.size == 0:
        return []
    prepared = _bounds(maxima, terms, weights)
    if prepared is None:
        return None
    bounds, cuts, g, eta = prepared
    postings = maxima.postings
    # plain views: slicing a memmap costs µs
    doc_rows, impacts = np.asarray(postings.indices), np.asarray(postings.data)
    pointer = np.zeros(2, dtype=doc_rows.dtype)
    term_weights = [np.array([w], np.float32) for w in weights.tolist()]
    edges = maxima.edges.tolist()
    theta = 0.0
    pool_rows, pool_low, pool_high = np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    for b in range(len(edges) - 1):
        column = bounds[:, b]
        order = np.argsort(-column, kind="stable")
        order = order[column[order] > 0]  # a term with no posting here, or only zeros, adds nothing
        if order.size == 0:
            continue
        rest = np.append(np.cumsum(column[order][::-1])[::-1], 0.0).tolist()  # rest[m]: bounds of order[m:]
        starts, ends = cuts[order, b], cuts[order, b + 1]
        left = np.append(np.cumsum((ends - starts)[::-1])[::-1], 0).tolist()  # postings of order[m:]
        starts, ends, order = starts.tolist(), ends.tolist(), order.tolist()
        low, high = edges[b], edges[b + 1]
        block = scores[low:high]
        block.fill(0)
        sample = block[: -(-block.size // 16)]
        th, probe, stop = theta, theta == 0.0, None
        for m in range(len(order)):
            a, z = starts[m], ends[m]
            add_segment(scores, doc_rows[a:z], impacts[a:z], term_weights[order[m]], pointer)
            r = rest[m + 1]
            if probe and 2 * r <= rest[0] and high - low >= k:  # half the bound added: a first θ from this block
                th, probe = max(th, _kth_largest(block, k) * (1 - 2 * g) - eta), False
            if 0 < r and r * (1 + 3 * g) + eta < th and left[m + 1] >= CANDIDATE_COST:
                cut = _at_least((th - eta) / (1 + 3 * g) - r)
                # the candidates counted in the block's first 16th (an estimate: it decides cost only, never the result)
                if 16 * np.count_nonzero(sample >= cut) * CANDIDATE_COST <= left[m + 1]:
                    stop = (cut, m + 1)
                    break
        if stop:
            cut, m = stop
            found_rows = np.flatnonzero(block >= cut)
            segments = (doc_rows, impacts, starts, ends, order, term_weights, rest, m, th, g, eta)
            found_rows, acc = _complete(found_rows + low, block[found_rows], *segments)
        else:
            found_rows = np.flatnonzero(block >= (_at_least((th - eta) / (1 + 3 * g)) if th > eta else SMALLEST)) + low
            acc = block[found_rows - low].astype(np.float64)
        theta = max(theta, th)
        pool_rows = np.concatenate([pool_rows, found_rows])
        pool_low = np.concatenate([pool_low, acc * (1 - 2 * g) - eta])
        pool_high = np.concatenate([pool_high, acc * (1 + 3 * g) + eta])
        if pool_low.size >= k:
            theta = max(theta, _kth_largest(pool_low, k))
        keep = pool_high >= theta
        pool_rows, pool_low, pool_high = pool_rows[keep], pool_low[keep], pool_high[keep]
    if pool_rows.size == 0:
        return []
    return _rescore_pool(postings, pool_rows, pool_high, theta, terms, weights, k, tie_rank)


def _bounds(
    maxima: BlockMaxima, terms: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """``(bounds [T, blocks], cuts [T, blocks + 1], g, eta)`` of one query (module docstring): each term's
    weight × its block maxima (exact in float64), where its list crosses each block edge, and the
    relative and absolute (underflow) rounding terms; None where bounds say nothing (a negative weight
    or impact, or a sum that could overflow to inf)."""
    if weights.min() < 0:
        return None
    found = [maxima.of(int(t)) for t in terms.tolist()]
    if min(lowest for _, _, lowest in found) < 0:
        return None
    bounds = weights.astype(np.float64)[:, None] * np.stack([m for m, _, _ in found])
    cuts = np.stack([c for _, c, _ in found])
    g, eta = 2 * (terms.size + 1) * U32, terms.size * SMALLEST
    if float(bounds.sum(axis=0).max()) * (1 + 3 * g) + eta >= FLOAT32_MAX:
        return None
    return bounds, cuts, g, eta


def _rescore_pool(
    postings,
    pool_rows: np.ndarray,
    pool_high: np.ndarray,
    theta: float,
    terms: np.ndarray,
    weights: np.ndarray,
    k: int,
    tie_rank: np.ndarray | None,
) -> list[tuple[int, float]]:
    """Step 4 (module docstring): the pool's candidates rescored exactly in batches by upper bound,
    highest first (k, then doubling); a real score is its own lower bound, so θ rises to the k-th real
    score and the pool stops at the first bound below it. The top ``k`` ``(row, score)``, scores > 0,
    ties by ``tie_rank`` (row order when None)."""
    order = np.argsort(-pool_high, kind="stable")
    done_rows, done_scores = [], []
    at, size = 0, max(k, 64)
    while at < order.size and pool_high[order[at]] >= theta:
        take = order[at : at + size]
        take = take[pool_high[take] >= theta]
        rows = np.sort(pool_rows[take])
        done_rows.append(rows)
        done_scores.append(rescore(postings, rows, terms, weights))
        at, size = at + size, 2 * size
        scored = np.concatenate(done_scores)
        if scored.size >= k:
            theta = max(theta, _kth_largest(scored, k))
    rows, final = np.concatenate(done_rows), np.concatenate(done_scores)
    positive = final > 0
    rows, final = rows[positive], final[positive]
    ties = rows if tie_rank is None else tie_rank[rows]
    ranked = np.lexsort((ties, -final))[:k]
    return [(int(rows[i]), float(final[i])) for i in ranked]
