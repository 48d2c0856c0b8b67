"""Two-step search: a pruned copy of the index answers first, and its top ``c`` candidates are
rescored with the full vectors (Two-step SPLADE, Lassance et al., ECIR 2024, arXiv 2404.13357;
OpenSearch's two-phase search processor does the same with a pruned query).

1. **First step**: each query, optionally pruned by a rule of its own (``first_query``), is scored
   term at a time over the index's pruned copy (``INDEX/pruned/``, :mod:`spladekit.index.pruned_store`:
   every document pruned by the rule ``first``; :func:`spladekit.index.exact.term_at_a_time`, exact
   search's long-list kernel); its top ``max(c, k)`` documents by the pruned dot product are the
   candidates (ties at the cut by the tie rule).
2. **Rescoring**: each candidate's score is the full query's dot product with its full vector, read
   from the index's document rows (:func:`rescore_rows`: the float32 products ``q_j · d_j`` added
   one after the other in ascending term order, the very sum exact search makes), and the top ``k``
   follow the tie rule (score descending, then document id).

So the result is exact search restricted to the candidates, with exact's scores: whenever the
candidates hold every document of exact search's top ``k`` (for instance when ``c`` reaches the number
of documents with a nonzero first-step score and every document with a nonzero score keeps one of the
query's terms in the pruned copy) it equals exact search, scores included. A document whose every
shared term the rule dropped, or that ranks below ``c`` in the first step, can be missed: the recall
against exact search is the measure of a rule and a ``c`` (``benchmarks/two_step.py``).

Example::

    >>> import numpy as np, scipy.sparse as sp, tempfile
    >>> from spladekit.index.index import Index
    >>> docs = sp.csr_matrix(np.array([[3, 1, 0], [0, 2, 5], [1, 0, 1]], dtype=np.float32))
    >>> index = Index.from_vectors(tempfile.mkdtemp() + "/i", docs, ["a", "b", "c"])
    >>> query = sp.csr_matrix(np.array([[1, 1, 1]], dtype=np.float32))
    >>> index.search(query, k=2, searcher=TwoStepConfig(first="top_k=1", candidates=2)).hits
    [[('b', 7.0), ('a', 4.0)]]
"""

from __future__ import annotations

import time
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from pydantic import field_validator
from scipy.sparse._sparsetools import csr_matvec, csr_row_index  # see rescore_rows

from spladekit.index.exact import check_finite, check_k, term_at_a_time, top_k_arrays
from spladekit.index.layout import DEFAULT_BUDGET
from spladekit.index.pruned_store import PrunedCopy
from spladekit.index.searcher import Rows, Searcher, SearcherConfig

DEFAULT_FIRST = "top_k=80"
"""The documents' rule of a pruned copy built when none is asked and none is stored: chosen from the
measurement of ``benchmarks/two_step.py`` (``benchmarks/RESULTS.md``, "Two-step search")."""

DEFAULT_CANDIDATES = 700
"""Candidates rescored per query (at least ``k`` are): chosen from the same measurement."""

DEFAULT_FIRST_QUERY = "top_k=16"
"""The rule pruning each query for the first step (the rescoring takes the whole query): chosen from
the same measurement."""


def rescore_rows(docs: sp.csr_matrix, rows: np.ndarray, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The float32 dot products of one query with the document ``rows`` of ``docs``, each the sum exact
    search makes (:func:`spladekit.index.exact.search_postings`): the float32 products ``d_j · q_j``
    added one after the other in ascending term order, each product and each sum rounded on its own.

    The rows are gathered and multiplied by the dense query with scipy's compiled loops (``csr_row_index``,
    then ``csr_matvec``: per row, ``sum += d_j · q_j`` over its entries in column order, in float32),
    called directly as :func:`spladekit.index.segments.add_segment` calls ``csc_matvec`` (the public
    ``docs[rows] @ query`` runs the same loops after building two sparse matrices); a term the query
    lacks adds ``+0``, which leaves a float32 sum unchanged, so the sum is that of the shared terms in
    ascending order: the loop exact search's kernels run.

    Args:
        docs: ``[D, V]`` canonical CSR document vectors (columns ascending in each row; ``indptr`` and
            ``indices`` of one integer type, float32 ``data``: an index folder's).
        rows: ``[n]`` document rows in ``[0, D)``.
        terms, weights: the query's terms (none repeated) and float32 weights.

    Returns:
        ``[n]`` float32 scores.

    Raises:
        ValueError: the rows' offsets in ``docs.indptr`` fall outside its entries, or a row holds a
            column outside ``[0, V)`` (a damaged folder; checked before the compiled loops read them).
    """
    dense = np.zeros(docs.shape[1], np.float32)
    dense[terms] = weights
    indptr, indices, data = np.asarray(docs.indptr), np.asarray(docs.indices), np.asarray(docs.data, dtype=np.float32)
    rows = np.asarray(rows, dtype=indptr.dtype)
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    if rows.size and (lengths.min() < 0 or starts.min() < 0 or ends.max() > indices.size):
        raise ValueError(
            "the document rows' offsets fall outside the index's entries: docs.indptr.npy is damaged "
            "(Index.open(folder, verify=True) checks the stored files)"
        )
    gathered = np.zeros(rows.size + 1, indptr.dtype)
    np.cumsum(lengths, out=gathered[1:])
    columns, values = np.empty(int(gathered[-1]), indices.dtype), np.empty(int(gathered[-1]), np.float32)
    csr_row_index(rows.size, rows, indptr, indices, data, columns, values)
    if columns.size and (columns.min() < 0 or columns.max() >= docs.shape[1]):  # csr_matvec reads the query at each
        raise ValueError(
            "a document row holds a column outside the vocabulary: docs.indices.npy is damaged "
            "(Index.open(folder, verify=True) checks the stored files)"
        )
    scores = np.zeros(rows.size, np.float32)
    csr_matvec(rows.size, docs.shape[1], gathered, columns, values, dense, scores)
    return scores


class TwoStepSearcher(Searcher):
    """Two-step search (module docstring) over an index's pruned copy and its document vectors.

    Args:
        copy: the index's :class:`~spladekit.index.pruned_store.PrunedCopy` (the first step's postings).
        docs: the index's ``[D, V]`` document vectors (the rescoring's).
        candidates: documents rescored per query (``max(candidates, k)``).
        first_query: the rule pruning each query for the first step (a
            :class:`~spladekit.model.pruning.PruningRule` or any form it takes; None: the whole query).

    Memory: one ``[D]`` float32 score row per call, reused query after query.
    """

    def __init__(self, copy: PrunedCopy, docs: sp.csr_matrix, candidates: int, first_query=None):
        from spladekit.model.pruning import of_record

        self.copy, self.docs, self.candidates, self.first_query = copy, docs, candidates, of_record(first_query)
        self.built = copy.built

    def search_rows(self, queries, k, tie_rank=None, timings=None) -> Rows:
        from spladekit.model.pruning import prune

        if queries.shape[1] != self.docs.shape[1]:
            raise ValueError(
                f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {self.docs.shape[1]}"
            )
        k = check_k(k)
        queries = sp.csr_matrix(queries, dtype=np.float32, copy=True)
        queries.sum_duplicates()  # canonical: terms ascending, the order both steps add them in
        check_finite(queries, "query")
        first = prune(queries, self.first_query) if self.first_query is not None else queries
        row = np.empty(self.docs.shape[0], np.float32)
        out = []
        for i in range(queries.shape[0]):
            began = time.perf_counter()
            row.fill(0)
            lo, hi = first.indptr[i], first.indptr[i + 1]
            term_at_a_time(row, self.copy.postings, first.indices[lo:hi], first.data[lo:hi])
            candidates, _ = top_k_arrays(row, max(self.candidates, k), tie_rank)
            out.append(self._rescored(queries, i, candidates, k, tie_rank))
            if timings is not None:
                timings.append(time.perf_counter() - began)
        return out

    def _rescored(
        self, queries: sp.csr_matrix, i: int, candidates: np.ndarray, k: int, tie_rank
    ) -> tuple[np.ndarray, list[float]]:
        """The top ``k`` of query ``i``'s candidate rows by their full scores (tie rule)."""
        if not candidates.size:
            return np.zeros(0, np.int64), []
        rows = np.sort(candidates)
        lo, hi = queries.indptr[i], queries.indptr[i + 1]
        scores = rescore_rows(self.docs, rows, queries.indices[lo:hi], queries.data[lo:hi])
        positive = scores > 0
        rows, scores = rows[positive], scores[positive]
        ties = rows if tie_rank is None else np.asarray(tie_rank)[rows]
        order = np.lexsort((ties, -scores))[:k]
        return rows[order], scores[order].tolist()

    def record(self) -> dict:
        first_query = None if self.first_query is None else self.first_query.record()
        return {
            "two_step": {
                "first": self.copy.rule,
                "first_query": first_query,
                "candidates": self.candidates,
                "pruned_hash": self.copy.record.get("postings_hash"),
            }
        }


class TwoStepConfig(SearcherConfig):
    """Two-step search (:class:`TwoStepSearcher`) over the pruned copy stored in the index folder
    (built and stored on first use, like the Seismic index).

    Attributes:
        first: the documents' pruning rule of the copy, ``KIND=VALUE`` (:mod:`spladekit.model.pruning`;
            a rule or its record are taken too); None: the stored copy as it is, else :data:`DEFAULT_FIRST`.
            A copy of another rule is rebuilt and stored in its place.
        candidates: documents rescored per query (at least ``k`` are).
        first_query: a rule pruning each query for the first step only (None, or the text ``none``:
            the whole query); the rescoring always takes the whole query.
        memory_budget: bytes of working memory of building the copy (the index writer's).

    Raises:
        ValueError (pydantic's ``ValidationError``): a rule that is not valid, ``candidates`` < 1.
    """

    name: ClassVar[str] = "two_step"
    searcher: ClassVar[type[Searcher]] = TwoStepSearcher

    first: str | None = None
    candidates: int = DEFAULT_CANDIDATES
    first_query: str | None = DEFAULT_FIRST_QUERY
    memory_budget: int = DEFAULT_BUDGET

    @field_validator("first", "first_query", mode="before")
    @classmethod
    def _rule(cls, value, info):
        from spladekit.model.pruning import of_record

        if value is None or (
            info.field_name == "first_query" and isinstance(value, str) and value.strip().lower() == "none"
        ):
            return None
        try:
            return str(of_record(value))
        except ValueError as exc:
            raise ValueError(f"{info.field_name}: {exc}") from None

    @field_validator("candidates", mode="before")
    @classmethod
    def _integer(cls, value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"candidates must be an integer ≥ 1, got {value!r}")
        return int(value)

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _budget(cls, value):
        from spladekit.index.writer import check_budget

        return check_budget(value)

    def check(self, index) -> None:
        """Refuse a stored copy whose ``pruned.json`` cannot be read, before any query is encoded.

        Raises:
            DataFormatError: naming the file.
        """
        from spladekit.index.pruned_store import stored_rule

        stored_rule(index.folder)

    def open(self, index) -> TwoStepSearcher:
        """The stored copy (:meth:`Index.pruned`, built there when missing or of another rule)."""
        copy = index.pruned(self.first, self.memory_budget, default=DEFAULT_FIRST)
        return TwoStepSearcher(copy, index.docs, self.candidates, self.first_query)
