"""The term-at-a-time kernel's two low-level pieces, shared by exact search (:mod:`spladekit.index.exact`)
and its pruned form (:mod:`spladekit.index.maxscore`): adding one posting-list segment into a score
row, and the error of a damaged posting list."""

from __future__ import annotations

import numpy as np
from scipy.sparse._sparsetools import csc_matvec  # see add_segment


def add_segment(
    scores: np.ndarray, rows: np.ndarray, impacts: np.ndarray, weight: np.ndarray, pointer: np.ndarray
) -> None:
    """``scores[rows[i]] += impacts[i] * weight[0]`` for each ``i`` in order, float32 product then
    float32 sum, in place (``pointer`` = ``[0, len(rows)]`` in ``rows``' integer type).

    scipy's ``csc_matvec`` (``y += A x`` for a CSC ``A``; here one column) is the compiled loop
    behind every ``csc_matrix @ vector``; it is called directly because the public product would
    allocate a new ``[D]`` result for each segment. The routine is private to scipy (present with
    these arguments in every scipy this package admits, ≥ 1.11); every argument is passed in the
    type it computes in (no conversion: a converted ``scores`` would be a copy, the sum lost). It
    checks no bounds: callers check each segment's rows first (:func:`check_segment`).
    ``tests/index/test_search_inputs.py`` checks this kernel against a float64 brute force and against
    the sparse-product kernel."""
    pointer[1] = rows.size
    csc_matvec(scores.size, 1, pointer, rows, impacts, weight, scores)


def block_cuts(
    doc_rows: np.ndarray, first: int, length: int, edges: np.ndarray, term: int, num_docs: int
) -> np.ndarray:
    """Positions in ``doc_rows`` where the posting list ``[first, first + length)`` crosses each of
    ``edges`` (document rows ascending, first 0, last ``D``; in ``doc_rows``' integer type, so
    searchsorted converts nothing).

    Raises:
        ValueError: the list holds a row outside ``[0, D)`` or is out of order (:func:`damaged`).
    """
    cut = first + np.searchsorted(doc_rows[first : first + length], edges)
    if cut[0] != first or cut[-1] != first + length:
        damaged(term, doc_rows[first : first + length], num_docs)
    return cut


def check_segment(rows: np.ndarray, low: int, high: int, term: int, num_docs: int) -> None:
    """Raise unless every row of a non-empty segment lies in ``[low, high)`` (its block): two
    reductions over a segment about to be read anyway; a damaged list cut by searchsorted fails here.

    Raises:
        ValueError: (:func:`damaged`).
    """
    if rows.min() < low or rows.max() >= high:
        damaged(term, rows, num_docs)


def damaged(term: int, rows: np.ndarray, num_docs: int):
    """Raise the error of a posting list that is not sorted rows in ``[0, D)``."""
    outside = rows[(rows < 0) | (rows >= num_docs)]
    what = f"document row {int(outside[0])} outside [0, {num_docs})" if outside.size else "document rows out of order"
    raise ValueError(
        f"the posting list of term {term} holds {what}: the index's postings are damaged "
        "(Index.open(folder, verify=True) checks the stored files)"
    )
