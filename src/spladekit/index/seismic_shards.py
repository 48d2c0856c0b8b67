"""Seismic by shards: one Seismic index per consecutive range of document rows, searched together and
merged by the tie rule of :mod:`spladekit.index.exact` (:class:`ShardedSeismic`); the ranges
(:func:`shard_ranges`) and each range's build parameters (:func:`shard_params`).

pyseismic's builder holds its whole input and every posting in memory, so an index too large to build
at once is built as ranges of rows whose builds each fit a memory budget (the rule of
:mod:`spladekit.index.seismic_rule`), one after the other; a built index is small. Where the shards
are stored and how they are built, resumed and checked: :mod:`spladekit.index.seismic_store`.

``n_postings`` is the whole index's: each shard keeps its share, ``⌈n_postings × shard entries / all
entries⌉`` (:func:`shard_params`). Seismic's static pruning keeps the ``V × n_postings`` largest
values of its input (a global threshold), so a shard holding a fraction ``f`` of the entries and
keeping ``f × V × n_postings`` of them cuts at about the value one index over every row would: the
shards together keep about the postings one index keeps when they hold alike documents (rows in no
particular order). Rows grouped by topic keep fewer: each shard's budget counts only the terms it
holds, and each list's cap (``n_postings × max_fraction``) shrinks with the share.

Search: every shard is searched with the whole query set, one after the other in the calling thread
(pyseismic's searches hold the GIL; a batch is parallel inside each shard, ``num_threads``), shard rows
are shifted to global rows, and each query's hits are merged by score descending, then ``tie_rank``
(document id) ascending, cut to ``k``: the top ``k`` of the union of the shards' own top ``k``. With
one shard no merge is done. Each shard is approximate on its own: each keeps its share of the
postings, and each shard's heap holds its own top ``k`` (a lower k-th score than the whole index's), so
more shards score more blocks (recall and query time both rise). A k-NN graph (``nknn``) is built by
each shard over its own rows, and ``n_knn`` refines each shard's own hits before the merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.index.seismic import (
    SeismicBase,
    SeismicBuildParams,
    SeismicQueries,
    SeismicSearcher,
    SeismicSearchParams,
)

SHARD_POSTINGS = "share"
"""``params.json``'s name of the rule by which each shard's ``n_postings`` is set (:func:`shard_params`)."""


def shard_ranges(indptr: np.ndarray, max_entries: int) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[(start, stop), ...]`` covering ``[0, D)`` (``indptr``: ``[D + 1]``
    CSR row pointers), each of at most ``max_entries`` entries, of about equal size: the ``n =
    ⌈entries / max_entries⌉`` ranges the limit needs, each ending at the first row boundary at or past
    ``⌈entries / n⌉`` entries (empty rows after it included), or, where that row would pass
    ``max_entries``, at the last boundary within it (so the last range is not a remnant: every range
    costs its own query time). A row longer than ``max_entries`` is a range of its own. An index with
    no row (D = 0) has one empty range ``(0, 0)``.

    Raises:
        ValueError: ``max_entries`` < 1.
    """
    if max_entries < 1:
        raise ValueError(f"max_entries must be ≥ 1, got {max_entries}")
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = len(indptr) - 1
    total = int(indptr[-1] - indptr[0]) if rows else 0
    target = -(-total // max(1, -(-total // max_entries)))  # ⌈entries / n⌉
    ranges, start = [], 0
    while start < rows:
        end = min(rows, int(np.searchsorted(indptr, indptr[start] + target, side="left")))
        end = max(
            start + 1, int(np.searchsorted(indptr, indptr[end], side="right")) - 1
        )  # through the empty rows after it
        if indptr[end] - indptr[start] > max_entries:
            end = max(start + 1, int(np.searchsorted(indptr, indptr[start] + max_entries, side="right")) - 1)
        ranges.append((start, end))
        start = end
    return ranges or [(0, 0)]


def shard_params(
    params: SeismicBuildParams, indptr: np.ndarray, ranges: Sequence[tuple[int, int]]
) -> list[SeismicBuildParams]:
    """Each range's build parameters: ``params`` with ``n_postings`` cut to the range's share of the
    entries, ``max(1, ⌈n_postings × entries(range) / entries(all)⌉)`` (module docstring); one range,
    or no entry at all, keeps ``params`` itself."""
    indptr = np.asarray(indptr, dtype=np.int64)
    total = int(indptr[-1] - indptr[0]) if len(indptr) > 1 else 0
    if len(ranges) <= 1 or total == 0:
        return [params] * len(ranges)
    return [
        params.model_copy(
            update={"n_postings": max(1, -(-params.n_postings * int(indptr[stop] - indptr[start]) // total))}
        )
        for start, stop in ranges
    ]


def row_slice(docs: sp.csr_matrix, start: int, stop: int) -> sp.csr_matrix:
    """Rows ``[start, stop)`` of a canonical CSR as a CSR over views of its arrays (a memory-mapped
    folder's pages are read, nothing is copied but the ``[stop - start + 1]`` row pointers)."""
    a, b = int(docs.indptr[start]), int(docs.indptr[stop])
    indptr = np.asarray(docs.indptr[start : stop + 1]) - a
    part = sp.csr_matrix((docs.data[a:b], docs.indices[a:b], indptr), shape=(stop - start, docs.shape[1]), copy=False)
    part.has_sorted_indices = True
    return part


class ShardedSeismic(SeismicBase):
    """Seismic indexes over consecutive row ranges of one ``[D, V]`` matrix, searched as one (a
    :class:`~spladekit.index.seismic.SeismicBase`: :meth:`search`, :meth:`search_arrays`,
    :meth:`search_rows`).

    Attributes:
        shards: ``(start, SeismicSearcher)`` per range, in row order.
        ranges: ``[(start, stop)]`` row range of each shard.
        params: the whole index's build parameters (each shard's: :func:`shard_params`).
        max_entries: entries of a shard at most (None: unknown, e.g. built in memory by a caller).
        memory_budget: the build budget of one shard the ranges were cut by (None: unknown).
    """

    def __init__(
        self,
        shards: Sequence[tuple[int, SeismicSearcher]],
        ranges: Sequence[tuple[int, int]],
        params: SeismicBuildParams,
        shape: tuple[int, int],
        max_entries: int | None = None,
        memory_budget: int | None = None,
    ):
        self.shards, self.ranges, self.params = list(shards), [tuple(r) for r in ranges], params
        self.num_docs, self.vocab_size = shape
        self.max_entries = max_entries
        self.memory_budget = memory_budget
        self.empty = all(s.empty for _, s in self.shards)

    def __len__(self) -> int:
        return len(self.shards)

    @property
    def index(self):
        """pyseismic's ``SeismicIndex`` of a one-shard index (what benchmarks call directly).

        Raises:
            ValueError: the index has several shards (search them through :meth:`search_arrays`).
        """
        if len(self.shards) != 1:
            raise ValueError(f"{len(self.shards)} Seismic shards: there is no single pyseismic index")
        return self.shards[0][1].index

    def component_names(self) -> np.ndarray:
        """``[V]`` Seismic's name of each column (the same in every shard)."""
        return self.shards[0][1].component_names()

    @property
    def knn_len(self) -> int:
        """Neighbours per document of the shards' k-NN graphs (the fewest of a shard with documents; 0: none)."""
        held = [searcher.knn_len for _, searcher in self.shards if not searcher.empty]
        return min(held) if held else 0

    def search_arrays(
        self,
        queries: SeismicQueries,
        k: int,
        params: SeismicSearchParams | None = None,
        tie_rank: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` of prepared queries over every shard: per query ``(global rows [n] int64, scores
        [n] float32)``, score descending then ``tie_rank`` ascending (row ascending without it).
        Shards are searched one after the other (module docstring).

        Raises:
            ValueError: ``k`` < 1.
        """
        tie_rank = None if tie_rank is None else np.asarray(tie_rank)
        if len(self.shards) == 1:  # one shard: the searcher's own answer, no merge
            return self.shards[0][1].search_arrays(queries, k, params, tie_rank)
        per_shard = []
        for (start, searcher), (_, stop) in zip(self.shards, self.ranges):
            part = searcher.search_arrays(queries, k, params, None if tie_rank is None else tie_rank[start:stop])
            per_shard.append([(rows + start, scores) for rows, scores in part])
        return [merge_hits([found[q] for found in per_shard], k, tie_rank) for q in range(queries.count)]


def merge_hits(
    lists: Sequence[tuple[np.ndarray, np.ndarray]], k: int, tie_rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One query's hits of several shards ``[(global rows, scores)]`` merged: the top ``k`` by score
    descending, then ``tie_rank[row]`` ascending (row ascending when None): the tie rule of
    :mod:`spladekit.index.exact`."""
    lists = [pair for pair in lists if len(pair[0])]
    if not lists:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if len(lists) == 1:
        return lists[0]
    rows = np.concatenate([r for r, _ in lists])
    scores = np.concatenate([s for _, s in lists])
    order = np.lexsort((rows if tie_rank is None else tie_rank[rows], -scores))[:k]
    return rows[order], scores[order]
