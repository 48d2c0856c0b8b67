"""Efficiency of sparse vectors: active terms and FLOPS.

FLOPS (Paria et al., ICLR 2020, "Minimizing FLOPs to Learn Efficient Sparse Representations", §3):
the expected number of multiply-adds of a query-document dot product,

    FLOPS = Σ_j p_q(j) · p_d(j),

with ``p_q(j)`` (``p_d(j)``) the fraction of query (document) vectors in which term ``j`` is active.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _activity(matrix: sp.spmatrix, what: str) -> np.ndarray:
    if matrix.shape[0] == 0:
        raise ValueError(f"efficiency statistics need at least one {what} vector; got an empty {what} set")
    binary = sp.csr_matrix(matrix, copy=True)
    binary.eliminate_zeros()
    return np.asarray((binary != 0).sum(axis=0)).ravel() / matrix.shape[0]


def flops(queries: sp.spmatrix, docs: sp.spmatrix) -> float:
    """FLOPS = Σ_j p_q(j)·p_d(j) (Paria et al. 2020).

    Raises:
        ValueError: an empty query or document set, or different vocabulary sizes.
    """
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(f"vocabulary mismatch: {queries.shape[1]} vs {docs.shape[1]} columns")
    return float(np.dot(_activity(queries, "query"), _activity(docs, "document")))


def avg_active_terms(matrix: sp.spmatrix, what: str = "vector") -> float:
    """Mean number of non-zero entries per row.

    Raises:
        ValueError: no rows.
    """
    return float(_activity(matrix, what).sum())


def efficiency_stats(queries: sp.spmatrix, docs: sp.spmatrix) -> dict[str, float]:
    """``avg_query_terms``, ``avg_doc_terms`` and ``flops`` of a query set against a collection."""
    return {
        "avg_query_terms": avg_active_terms(queries, "query"),
        "avg_doc_terms": avg_active_terms(docs, "document"),
        "flops": flops(queries, docs),
    }
