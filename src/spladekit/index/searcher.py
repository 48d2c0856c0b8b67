"""The searcher interface of an index: every search method (exact, Seismic, Seismic by shards, and any
later one) is a :class:`Searcher`, chosen by a typed configuration (:class:`SearcherConfig`) that names it.

A configuration holds a method's own parameters (pydantic, checked at construction) and opens its
searcher over an index (:meth:`SearcherConfig.open`: loading, or building and storing, what the method
needs); :meth:`spladekit.index.index.Index.search` takes the configuration, the searcher answers with
row numbers and scores (:meth:`Searcher.search_rows`), and the index names the rows and times the calls.
The configurations by name (``exact``, ``seismic``: what ``spladekit search --backend`` and the
server's ``backend`` field choose) are :data:`spladekit.index.index.SEARCHERS`.

A new method is one :class:`Searcher` subclass and its configuration class, added to that table.

Example::

    >>> import numpy as np, scipy.sparse as sp, tempfile
    >>> from spladekit.index.index import Index
    >>> from spladekit.index.searcher import ExactConfig
    >>> docs = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0]], dtype=np.float32))
    >>> index = Index.from_vectors(tempfile.mkdtemp() + "/i", docs, ["a", "b"])
    >>> index.search(sp.csr_matrix(np.array([[0, 1, 1]], dtype=np.float32)), k=2, searcher=ExactConfig()).hits
    [[('b', 3.0), ('a', 2.0)]]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict

from spladekit.index.exact import search_postings
from spladekit.index.maxscore import BlockMaxima

Rows = list[tuple[Sequence[int], list[float]]]
"""Per query ``(rows, scores)``: document rows (an int64 array or a list) and their scores (Python
floats), score descending then document id ascending (the tie rule of :mod:`spladekit.index.exact`),
scores > 0 only, at most ``k``."""


class Searcher(ABC):
    """Top-``k`` document rows of query vectors over one index, by one method.

    Attributes:
        built: what opening this searcher built and stored, as a phrase for the user (e.g. ``"the
            Seismic index and stored it in INDEX/seismic"``); None when it built nothing (reopened,
            or nothing to build).
    """

    built: str | None = None

    @abstractmethod
    def search_rows(
        self, queries: sp.csr_matrix, k: int, tie_rank: np.ndarray | None = None, timings: list[float] | None = None
    ) -> Rows:
        """The top ``k`` rows of each ``[Q, V]`` query row (:data:`Rows`).

        Args:
            queries: ``[Q, V]`` query vectors (float32 CSR).
            k: results per query (≥ 1).
            tie_rank: ``[D]`` rank of each row in document-id order (ties by row without it).
            timings: when given, receives the seconds each query took (``Q`` entries).

        Raises:
            ValueError: vocabulary mismatch, ``k`` < 1, a query weight that is not finite.
        """

    def record(self) -> dict:
        """The entries of a search's settings record (:class:`spladekit.index.results.SearchSettings`)
        that describe this searcher's parameters: none by default."""
        return {}


class SearcherConfig(BaseModel):
    """The configuration of one search method: its parameters, and the searcher class it opens.

    Subclasses set :attr:`name` (the method's name in settings records, ``--backend`` and the
    server's ``backend`` field) and :attr:`searcher` (the class :meth:`open` makes).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ClassVar[str]
    searcher: ClassVar[type[Searcher]]

    def check(self, index) -> None:
        """Refuse, before any query is encoded or anything built, what this method cannot do on
        ``index`` (a missing extra, parameters the stored index cannot honour); nothing by default."""

    @abstractmethod
    def open(self, index) -> Searcher:
        """The searcher of this configuration over ``index`` (loaded, or built and stored, as needed)."""


class ExactSearcher(Searcher):
    """Exact dot-product search over an index's term-major posting matrix
    (:func:`spladekit.index.exact.search_postings`).

    Args:
        postings: ``[V, D]`` CSR posting matrix.
        maxima: its :class:`~spladekit.index.maxscore.BlockMaxima` (MaxScore pruning of long-list
            queries: the same results); None adds every posting.
    """

    def __init__(self, postings: sp.csr_matrix, maxima: BlockMaxima | None = None):
        self.postings = postings
        self.maxima = maxima

    def search_rows(self, queries, k, tie_rank=None, timings=None) -> Rows:
        found = search_postings(queries, self.postings, k, tie_rank, timings, maxima=self.maxima)
        return [([row for row, _ in hits], [score for _, score in hits]) for hits in found]


class ExactConfig(SearcherConfig):
    """Exact search: every document scored (:class:`ExactSearcher`).

    Attributes:
        prune: prune long-list queries (MaxScore over blocks, :mod:`spladekit.index.maxscore`: the same
            results, fewer postings read); False adds every posting (the anchor of the benchmarks).
    """

    name: ClassVar[str] = "exact"
    searcher: ClassVar[type[Searcher]] = ExactSearcher

    prune: bool = True

    def open(self, index) -> ExactSearcher:
        return ExactSearcher(index.postings, index.block_maxima() if self.prune else None)
