"""BMP, block-max pruning (Mallia, Suel & Tonellotto, "Faster Learned Sparse Retrieval with
Block-Max Pruning", SIGIR 2024; the ``bmp`` package): built by BMP's own converter from a CIFF
export (:mod:`spladekit.index.formats.ciff`, ``bmp.ciff2bmp``), searched with ``bmp.Searcher``.

BMP scores ``Σ_j q_j · d_j`` over integers, and with ``alpha = beta = 1`` (no block or query-term
pruning) it returns the exact top-k of that score. Two limits of BMP 0.2 shape the quantisation:

* document impacts: its block maxima are 8-bit (``score as u8`` in ``IndexBuilder::build``): an
  impact above :data:`MAX_IMPACT` would wrap, so :func:`document_scale` picks the CIFF scale
  ``255 / max w`` and :func:`build` refuses a file whose largest impact exceeds 255;
* query weights: integers, which ``bmp.Searcher`` 0.2 rescales to ``⌈q_j · 32 / max q⌉``
  (:data:`MAX_QUERY_WEIGHT`, BMP's ``MAX_TERM_WEIGHT``; observed for queries above and below 32):
  rounding every term up is not a uniform scale, so BMP would rank another query than the one
  given. :func:`query_weights` quantises each query to ``⌊w_j · 32 / max w + 1/2⌋``: its largest
  weight is exactly 32, BMP's factor is 1 and the query is scored as given; each query has its own
  scale, so its ranking is that of the integer vector handed to BMP (the vector exact search is
  checked against, ``tests/index/formats/test_engines.py``);
* scores: BMP's top-k heap and block upper bounds are 16-bit, so exactness needs a query's bound
  ``Σ_j q_j · max_d d_j`` below 2^16 (:func:`score_bound`); a query above it (in the tests, one
  with 406 matching terms) may lose documents;
* block size: BMP 0.2.8 skips whole blocks of documents whose upper bound ties the documents it
  already holds, even while its heap is not full: 300 documents that all score the same, searched
  to depth 1000, come back without the last, partial block (rows 288–299 at ``bsize`` 16 and 32,
  256–299 at 64), and a term with a single posting finds nothing at any depth
  (``tests/index/formats/test_engines.py::test_bmp_loses_whole_blocks_of_tied_documents``; the CIFF file reads
  back identical, so the cause is BMP's pruning, not our export; BMP's source was not read to name
  the line). On the 40 test queries, the documents lost with ``bsize`` 32 (6 queries) lie in the
  last, partial block (rows 288–299) and at 64 (26 queries) in several; with 8 and 16 none of the
  top-10 lists is affected there, so :func:`build` uses 16. Tied scores come from the
  quantisation (8-bit impacts, 32-level queries), so larger corpora can meet this at any block size;
  the benchmark compares BMP with exact search as recall, not identity;
* a query term BMP's index does not hold makes ``Searcher.search`` panic, so :func:`search` drops
  the terms outside ``indexed`` (those with a posting in the CIFF file);
* depth: ``Searcher.search`` takes ``k`` ∈ {10, 100, 1000} only (other values index BMP's table of
  k-th list scores out of bounds and panic), and its heap starts at a threshold, the k-th score of
  the best list times its weight, that a document must *exceed*: the k-th document of a one-term
  query (and any tied with it) is lost. :func:`search` therefore asks BMP for the next depth above
  ``k`` (:func:`depth`: 100 for k ≤ 10, 1000 for k ≤ 100) and keeps the top ``k``, the exact top-k
  (tested); for 100 < k ≤ 1000 it asks for 1000 and the last ranks may miss documents tied at that
  threshold.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.index.formats import iter_rows, quantise, rank_hits

MAX_IMPACT = 255
MAX_QUERY_WEIGHT = 32


def document_scale(max_weight: float) -> float:
    """The scale ``255 / max_weight``: impacts ``⌊w · scale + 1/2⌋`` use BMP's 8 bits fully and
    stay ≤ :data:`MAX_IMPACT` for weights up to ``max_weight``.

    Raises:
        ValueError: ``max_weight`` is not a finite number > 0.
    """
    if not np.isfinite(max_weight) or max_weight <= 0:
        raise ValueError(f"max_weight must be a finite number > 0, got {max_weight!r}")
    return MAX_IMPACT / float(max_weight)


def build(path: str | Path, ciff_file: str | Path, max_tf: int, bsize: int = 16) -> None:
    """Convert a CIFF file (written by :func:`spladekit.index.formats.ciff.write_ciff`, which
    returns its ``max_tf``) into the BMP index file ``path`` with BMP's own converter.

    Raises:
        ValueError: ``max_tf`` > :data:`MAX_IMPACT` (BMP would wrap it), or ``bsize`` < 1.
    """
    import bmp

    if max_tf > MAX_IMPACT:
        raise ValueError(
            f"largest impact {max_tf} > {MAX_IMPACT}: BMP keeps 8-bit block maxima; export with a scale from document_scale()"
        )
    if bsize < 1:
        raise ValueError(f"bsize must be ≥ 1, got {bsize}")
    bmp.ciff2bmp(ciff_file=str(ciff_file), output=str(path), bsize=int(bsize), compress_range=False)


def _integer_query(indices: np.ndarray, values: np.ndarray, vocabulary: Sequence[str], indexed: Collection[str] | None):
    """``(columns, integer weights)`` of one query as BMP gets it: terms outside ``indexed`` dropped
    first (BMP would rescale by the remaining maximum), then ``⌊w_j · 32 / max w + 1/2⌋``, zeros dropped."""
    indices, values = np.asarray(indices), np.asarray(values, dtype=np.float64)
    if indexed is not None:
        keep = np.fromiter((vocabulary[j] in indexed for j in indices.tolist()), bool, count=indices.size)
        indices, values = indices[keep], values[keep]
    if values.size == 0 or values.max() <= 0:
        return indices[:0], np.zeros(0, np.int64)
    weights = np.floor(values * (MAX_QUERY_WEIGHT / values.max()) + 0.5).astype(np.int64)
    return indices[weights > 0], weights[weights > 0]


def query_weights(
    indices: np.ndarray, values: np.ndarray, vocabulary: Sequence[str], indexed: Collection[str] | None = None
) -> dict[str, int]:
    """One query as BMP's ``{term: integer weight}`` (module docstring): the terms of ``indexed``
    only (all when None), largest weight exactly 32; ``{}`` when no term is left."""
    columns, weights = _integer_query(indices, values, vocabulary, indexed)
    return {vocabulary[j]: int(w) for j, w in zip(columns.tolist(), weights.tolist())}


def quantised_queries(
    queries: sp.spmatrix, vocabulary: Sequence[str], indexed: Collection[str] | None = None
) -> sp.csr_matrix:
    """``[Q, V]`` the integer query vectors :func:`query_weights` hands BMP (what exact search is
    compared with)."""
    rows, cols, vals = [], [], []
    for q, (idx, val) in enumerate(iter_rows(queries)):
        columns, weights = _integer_query(idx, val, vocabulary, indexed)
        rows += [q] * columns.size
        cols += columns.tolist()
        vals += weights.tolist()
    return sp.csr_matrix((np.array(vals, np.float32), (rows, cols)), shape=(queries.shape[0], len(vocabulary)))


def score_bound(queries: sp.spmatrix, docs: sp.spmatrix) -> np.ndarray:
    """``[Q]`` the largest score each integer query could give, ``Σ_j q_j · max_d d_j`` (float64)."""
    top = np.asarray(sp.csr_matrix(docs).max(axis=0).todense(), dtype=np.float64).ravel()
    return np.asarray(sp.csr_matrix(queries, dtype=np.float64) @ top).ravel()


def indexed_terms(docs: sp.spmatrix, vocabulary: Sequence[str], scale: float) -> set[str]:
    """The terms of a CIFF export of ``docs`` at ``scale`` (a posting whose impact is ≥ 1)."""
    docs = sp.csr_matrix(docs)
    return {vocabulary[j] for j in np.unique(np.asarray(docs.indices)[quantise(docs.data, scale) > 0]).tolist()}


DEPTHS = (10, 100, 1000)


def depth(k: int) -> int:
    """The ``k`` to ask BMP for (module docstring): the smallest of :data:`DEPTHS` above ``k``, else 1000.

    Raises:
        ValueError: ``k`` is not in ``[1, 1000]``.
    """
    if not 1 <= k <= DEPTHS[-1]:
        raise ValueError(f"BMP searches to depth 1000 at most; k must be in [1, 1000], got {k}")
    return next((d for d in DEPTHS if d > k), DEPTHS[-1])


def search(
    searcher,
    queries: sp.spmatrix,
    vocabulary: Sequence[str],
    doc_ids: Sequence[str],
    indexed: Collection[str],
    k: int = 10,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> list[list[tuple[int, float]]]:
    """Top-``k`` of each query with a ``bmp.Searcher``: ``(row, score)`` lists like ``exact_search``
    (ties by document id). Terms outside ``indexed`` (:func:`indexed_terms`) match nothing and are
    dropped; a query with no term left returns ``[]`` without calling BMP (which cannot take it)."""
    rows = {str(d): r for r, d in enumerate(doc_ids)}
    results: list[list[tuple[int, float]]] = []
    for idx, val in iter_rows(queries):
        weights = query_weights(idx, val, vocabulary, indexed)
        if not weights:
            results.append([])
            continue
        docnos, scores = searcher.search(weights, k=depth(k), alpha=float(alpha), beta=float(beta))
        results.append(rank_hits(((rows[d], s) for d, s in zip(docnos, scores)), k, doc_ids))
    return results
