"""Approximate retrieval with Seismic (Bruch et al., SIGIR 2024, "Efficient Inverted Indexes for
Approximate Retrieval over Learned Sparse Representations") through ``pyseismic-lsr``.

The index is built from our CSR vectors with ``SeismicDataset.add_documents_by_id`` (column ids as
components; a query addresses column 42 as the component ``"42"``) and the document's row number
as its Seismic id, so results map back to rows exactly. Queries are normalised first (sorted,
repeated columns summed): Seismic itself keeps only one of two equal query components, which
would mis-score an un-merged query.

Results follow :func:`spladekit.index.exact.exact_search`: per query ``(row, score)`` pairs,
score descending then row ascending (document id ascending when ``doc_ids`` are given), scores > 0 only; a query with no active term, or none that
any document has, gets ``[]`` in its own slot. Which of several documents tied at the k-th score
Seismic returns is Seismic's choice; the order of what it returns follows the rule above.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from abc import abstractmethod
from collections.abc import Sequence
from operator import itemgetter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, field_validator

from spladekit.data.numbers import check_int
from spladekit.errors import require_extra
from spladekit.index.exact import tie_ranks
from spladekit.index.searcher import Searcher

_SCORE, _DOC = itemgetter(1), itemgetter(2)  # a pyseismic hit is (query id, score, document id)


MAX_N_POSTINGS = 1 << 32
"""Largest ``n_postings`` taken: pyseismic multiplies it by the vocabulary size in 64-bit integers
(a larger value wraps around and keeps almost nothing); 2^32 is beyond any list length."""


MAX_NKNN = 1024
"""Largest ``nknn`` taken: the graph holds ``nknn`` neighbours of every document (8.8M × 1024 ids
would be 72 GB); Seismic's k-NN paper uses tens."""

MIN_KNN_DOCUMENTS = 2
"""A k-NN graph of ``nknn`` neighbours needs at least ``nknn + MIN_KNN_DOCUMENTS`` documents with a
term: pyseismic-lsr 0.5.4 crashed the process (a segmentation fault) searching a 2-document index
with ``nknn`` 1, and panicked with ``nknn`` 9 of 10 documents (a document cannot have more
neighbours than there are other documents)."""


def check_knn_documents(nknn: int, documents: int, where: str = "the index", other_way: str = "") -> None:
    """Raise ValueError when ``documents`` (with a term) are too few for a k-NN graph of ``nknn``
    (:data:`MIN_KNN_DOCUMENTS`); nothing for ``nknn`` 0. ``other_way`` ends the message (another remedy)."""
    if nknn and documents < nknn + MIN_KNN_DOCUMENTS:
        raise ValueError(
            f"seismic nknn {nknn}: a k-NN graph of {nknn} neighbours needs at least {nknn + MIN_KNN_DOCUMENTS} documents "
            f"with a term, and {where} has {documents}; build with a smaller nknn (`--knn`){other_way}"
        )


def import_seismic():
    """The ``seismic`` module of pyseismic-lsr.

    Raises:
        MissingExtraError: pyseismic-lsr is not installed (an ``ImportError`` naming ``pip install 'spladekit[seismic]'``).
    """
    return require_extra("seismic", "Seismic search", "pyseismic-lsr", "seismic")


class SeismicBuildParams(BaseModel):
    """``SeismicIndex.build_from_dataset`` parameters (names of pyseismic-lsr 0.5; its defaults but
    ``max_fraction``, which follows Seismic's guidelines, ``docs/Guidelines.md`` of TusKANNy/seismic).

    Attributes:
        n_postings: average posting-list length kept after static pruning (3500 is Seismic's
            MS MARCO setting: at most ``V × n_postings`` postings are kept in all). For
            the whole index: an index by shards builds each shard with its share
            (:func:`spladekit.index.seismic_shards.shard_params`).
        centroid_fraction: fraction of each posting list used as cluster centroids (blocks).
        min_cluster_size: minimum documents per block.
        summary_energy: fraction of a block's L1 mass its summary keeps.
        max_fraction: longest posting list = ``n_postings × max_fraction``. 6, the guidelines'
            value (pyseismic's own default is 1.5): lists of frequent, heavy terms keep more than the
            average, and near-duplicate documents then keep their postings (recall against
            ``max_fraction``: ``benchmarks/RESULTS.md``).
        doc_cut: document terms used when clustering.
        nknn: neighbours kept per document in a k-NN graph built with the index (0: none): a
            search then also scores the ``n_knn`` nearest neighbours of each document it found
            (Bruch, Nardini, Rulli, Venturini, "Pairing Clustered Inverted Indexes with κ-NN Graphs
            for Fast Approximate Retrieval over Learned Sparse Representations", CIKM 2024). The
            graph is found by searching every document as a query: its build costs several times
            the index's.

    Raises:
        ValueError (pydantic's ``ValidationError``): a value outside its range (it would build a
            degenerate index), naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_postings: int = 3500
    centroid_fraction: float = 0.1
    min_cluster_size: int = 2
    summary_energy: float = 0.4
    max_fraction: float = 6.0
    doc_cut: int = 15
    nknn: int = 0

    @field_validator("n_postings", "min_cluster_size", "doc_cut", "nknn", mode="before")
    @classmethod
    def _integers(cls, value, info):
        low, high = {"n_postings": (1, MAX_N_POSTINGS), "nknn": (0, MAX_NKNN)}.get(info.field_name, (1, None))
        return check_int(value, f"seismic {info.field_name}", low, high)

    @field_validator("centroid_fraction", "summary_energy", mode="before")
    @classmethod
    def _fractions(cls, value, info):
        if not (_is_number(value) and math.isfinite(value) and 0 < value <= 1):
            raise ValueError(f"seismic {info.field_name} must be in (0, 1], got {value!r}")
        return value

    @field_validator("max_fraction", mode="before")
    @classmethod
    def _max_fraction(cls, value):
        if not (_is_number(value) and math.isfinite(value) and value >= 1):
            raise ValueError(f"seismic max_fraction must be a finite number ≥ 1, got {value!r}")
        return value


class SeismicSearchParams(BaseModel):
    """``SeismicIndex.batch_search`` parameters.

    Attributes:
        query_cut: the query's ``query_cut`` heaviest terms are traversed (0 would return nothing).
        heap_factor: a block is scored when its summary score ≥ ``heap_factor`` × the heap's minimum.
        n_knn: neighbours of each found document scored as well (the k-NN graph: ≤ the build's ``nknn``).
        sorted: visit blocks by summary score.
        num_threads: 0 = Rayon's default.

    Raises:
        ValueError (pydantic's ``ValidationError``): a value outside its range, naming the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_cut: int = 20
    heap_factor: float = 0.8
    n_knn: int = 0
    sorted: bool = True
    num_threads: int = 0

    @field_validator("query_cut", "n_knn", "num_threads", mode="before")
    @classmethod
    def _integers(cls, value, info):
        return check_int(value, f"seismic {info.field_name}", 1 if info.field_name == "query_cut" else 0)

    @field_validator("heap_factor", mode="before")
    @classmethod
    def _heap_factor(cls, value):
        if not (_is_number(value) and math.isfinite(value) and value > 0):
            raise ValueError(f"seismic heap_factor must be a finite number > 0, got {value!r}")
        return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@contextlib.contextmanager
def _quiet():
    """Silence the Rust library's progress prints on stdout (file descriptor 1)."""
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class SeismicBase(Searcher):
    """What the Seismic searchers share (:class:`SeismicSearcher`, one pyseismic index; and
    :class:`~spladekit.index.seismic_shards.ShardedSeismic`, one per range of rows): the queries'
    preparation, the search as Python pairs, and the :class:`~spladekit.index.searcher.Searcher`
    interface with the query-time parameters :attr:`search_params`.

    Subclasses set ``params`` (:class:`SeismicBuildParams`), ``num_docs``, ``vocab_size`` and
    ``empty``, and give :meth:`component_names` and :meth:`search_arrays`.
    """

    search_params: SeismicSearchParams = SeismicSearchParams()
    """The parameters :meth:`search_rows` searches with (:meth:`with_search` sets them)."""

    @abstractmethod
    def component_names(self) -> np.ndarray:
        """``[V]`` Seismic's name of each column (``"0"``, ``"1"``, ... in its string type)."""

    @abstractmethod
    def search_arrays(
        self,
        queries: SeismicQueries,
        k: int,
        params: SeismicSearchParams | None = None,
        tie_rank: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` of prepared queries as arrays: per query ``(rows [n] int64, scores [n] float32)``,
        scores > 0, score descending then ``tie_rank`` ascending (row ascending without it)."""

    def with_search(self, params: SeismicSearchParams) -> SeismicBase:
        """This searcher (the same built index, nothing copied) answering :meth:`search_rows` with ``params``."""
        view = copy.copy(self)
        view.search_params = params
        return view

    def search_rows(self, queries, k, tie_rank=None, timings=None):
        """:meth:`search_arrays` with :attr:`search_params` (the :class:`~spladekit.index.searcher.Searcher`
        interface); a batch is timed as a whole (its preparation included), each query given an equal share."""
        began = time.perf_counter()
        found = self.search_arrays(self.prepare(queries), k, self.search_params, tie_rank)
        if timings is not None:
            timings.extend([(time.perf_counter() - began) / max(1, queries.shape[0])] * queries.shape[0])
        return [(rows, scores.tolist()) for rows, scores in found]

    def record(self) -> dict:
        """``seismic_build`` (the parameters the index was built with) and ``seismic_search``."""
        return {"seismic_build": self.params.model_dump(), "seismic_search": self.search_params.model_dump()}

    def search(
        self,
        queries: sp.spmatrix,
        k: int = 10,
        params: SeismicSearchParams | None = None,
        doc_ids: Sequence[str] | None = None,
        tie_rank: np.ndarray | None = None,
    ) -> list[list[tuple[int, float]]]:
        """Approximate top-``k`` dot-product search of each ``[Q, V]`` query row: per query
        ``(row, score)`` pairs (:meth:`search_arrays` as Python pairs).

        Args:
            params: search parameters (None: the defaults).
            doc_ids: when given, ties are listed by document id ascending (the exact-search rule).
            tie_rank: the same rule given as each row's rank in document-id order (instead of ``doc_ids``).

        Raises:
            ValueError: vocabulary mismatch, ``k`` < 1, or ``doc_ids`` of the wrong length.
        """
        if doc_ids is not None and len(doc_ids) != self.num_docs:
            raise ValueError(f"{len(doc_ids)} document ids for {self.num_docs} document vectors")
        ranks = tie_rank if tie_rank is not None else tie_ranks(doc_ids) if doc_ids is not None else None
        return [
            list(zip(rows.tolist(), scores.tolist()))
            for rows, scores in self.search_arrays(self.prepare(queries), k, params, ranks)
        ]

    def prepare(self, queries: sp.spmatrix) -> SeismicQueries:
        """The queries in pyseismic's input form (:class:`SeismicQueries`), made once for any number
        of searches.

        Raises:
            ValueError: vocabulary mismatch.
        """
        if queries.shape[1] != self.vocab_size:
            raise ValueError(
                f"vocabulary mismatch: queries have {queries.shape[1]} columns, documents {self.vocab_size}"
            )
        return SeismicQueries(queries, self.component_names())


class SeismicSearcher(SeismicBase):
    """A Seismic index over the rows of a ``[D, V]`` matrix.

    Args:
        docs: ``[D, V]`` document vectors.
        params: build parameters.
        verbose: let Seismic print its build log.

    Raises:
        MissingExtraError: ``pyseismic-lsr`` is not installed (an ``ImportError`` naming ``pip install 'spladekit[seismic]'``).
    """

    INDEX_FILE = "index.index.seismic"  # what ``SeismicIndex.save(folder / "index")`` writes

    def __init__(
        self,
        docs: sp.spmatrix,
        params: SeismicBuildParams | None = None,
        verbose: bool = False,
        canonical: bool = False,
    ):
        """``canonical``: ``docs`` is already float32 CSR with sorted, unique, non-zero entries (as an
        index folder's are); it is then used as it is (read-only, no copy of the matrix)."""
        seismic = import_seismic()

        self.params = params or SeismicBuildParams()
        self.num_docs, self.vocab_size = docs.shape
        if canonical:
            matrix = docs
        else:
            matrix = sp.csr_matrix(docs, dtype=np.float32, copy=True)
            matrix.sum_duplicates()
            matrix.sort_indices()
            matrix.eliminate_zeros()
        dataset = seismic.SeismicDataset()
        dataset.add_documents_by_id(
            [str(i) for i in range(self.num_docs)],
            matrix.indices.astype(np.int64),
            matrix.data.astype(np.float32),
            matrix.indptr.astype(np.int64),
        )
        self._string = seismic.get_seismic_string()
        self.empty = dataset.len == 0
        if self.empty:
            self.index = None
            return
        p = self.params
        check_knn_documents(p.nknn, dataset.len)
        with contextlib.nullcontext() if verbose else _quiet():
            self.index = seismic.SeismicIndex.build_from_dataset(
                dataset,
                n_postings=p.n_postings,
                centroid_fraction=p.centroid_fraction,
                min_cluster_size=p.min_cluster_size,
                summary_energy=p.summary_energy,
                max_fraction=p.max_fraction,
                doc_cut=p.doc_cut,
                nknn=p.nknn,
            )

    def save(self, folder: str | Path) -> None:
        """Write the built index into ``folder`` (``SeismicIndex.save``; nothing for an empty index)."""
        if self.index is not None:
            with _quiet():
                self.index.save(str(Path(folder) / "index"))

    @classmethod
    def load(
        cls, folder: str | Path, params: SeismicBuildParams, shape: tuple[int, int], empty: bool = False
    ) -> SeismicSearcher:
        """Reopen an index written by :meth:`save` (``SeismicIndex.load``), built with ``params`` over a
        ``shape`` = ``[D, V]`` matrix; ``empty``: it was built over no document vector (no file).

        Raises:
            DataFormatError: the stored file cannot be read, or is missing for a non-empty index
                (searching would return nothing for every query).
        """
        seismic = import_seismic()

        from spladekit.errors import DataFormatError

        self = cls.__new__(cls)
        self.params, (self.num_docs, self.vocab_size) = params, shape
        self._string = seismic.get_seismic_string()
        path = Path(folder) / cls.INDEX_FILE
        self.empty = empty
        self.index = None
        if not empty and not path.exists():
            raise DataFormatError(
                path, "missing: the stored Seismic index is incomplete (delete the seismic/ folder to rebuild it)"
            )
        if not self.empty:
            try:
                with _quiet():
                    self.index = seismic.SeismicIndex.load(str(path))
            except Exception as exc:  # the Rust loader raises IOError/ValueError/PanicException
                raise DataFormatError(path, f"cannot load the Seismic index ({type(exc).__name__}: {exc})") from exc
        return self

    def component_names(self) -> np.ndarray:
        """``[V]`` Seismic's name of each column (``"0"``, ``"1"``, ... in its string type), made on
        first use: a query's components are then one gather, not a string conversion per term."""
        if getattr(self, "_components", None) is None:
            self._components = np.array([str(j) for j in range(self.vocab_size)], dtype=self._string)
        return self._components

    @property
    def knn_len(self) -> int:
        """Neighbours per document of the index's k-NN graph (0: none; the largest ``n_knn``)."""
        return 0 if self.index is None else int(self.index.knn_len)

    def search_arrays(
        self,
        queries: SeismicQueries,
        k: int,
        params: SeismicSearchParams | None = None,
        tie_rank: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` of prepared queries as arrays: per query ``(rows [n] int64, scores [n] float32)``,
        scores > 0, score descending then ``tie_rank`` ascending (row ascending without it); no Python
        object per hit beyond what pyseismic itself returns.

        Raises:
            ValueError: ``k`` < 1; ``n_knn`` > the neighbours the index's k-NN graph holds (pyseismic
                would ignore the graph it lacks, or scan fewer neighbours, without a word).
            EngineFailure: pyseismic panicked (seen with a k-NN graph of documents with fewer
                neighbours than ``nknn``: :data:`MIN_KNN_DOCUMENTS`).
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an integer ≥ 1, got {k!r}")
        p = params or SeismicSearchParams()
        if p.n_knn and self.index is not None and p.n_knn > self.knn_len:
            held = self.knn_len
            raise ValueError(
                f"seismic n_knn {p.n_knn} asks for more neighbours than the index's k-NN graph holds ({held}): "
                + (
                    "build the index with nknn ≥ n_knn (`--knn`)"
                    if not held
                    else f"ask for n_knn ≤ {held}, or rebuild with nknn ≥ {p.n_knn}"
                )
            )
        tie_rank = None if tie_rank is None else np.asarray(tie_rank)
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        results = [empty] * queries.count
        if self.empty or not queries.todo.size:
            return results
        options = dict(k=int(k), query_cut=p.query_cut, heap_factor=p.heap_factor, n_knn=p.n_knn, sorted=p.sorted)
        try:
            if queries.todo.size == 1:  # one query: pyseismic's single search (cheaper than its batch call)
                hits = [self.index.search(str(queries.todo[0]), queries.components[0], queries.values[0], **options)]
            else:
                hits = self.index.batch_search(
                    queries.ids, queries.components, queries.values, num_threads=p.num_threads, **options
                )
        except (
            BaseException
        ) as exc:  # pyo3's PanicException derives from BaseException: `except Exception` would let it through
            if type(exc).__name__ != "PanicException":
                raise
            knn = (
                f" with n_knn {p.n_knn} (its k-NN graph may hold fewer neighbours than nknn for some documents: search with n_knn 0, or rebuild with a smaller nknn)"
                if p.n_knn
                else ""
            )
            from spladekit.errors import EngineFailure

            raise EngineFailure(f"pyseismic failed{knn}: {exc}") from None
        for hit_list in hits:
            if not hit_list:
                continue
            n = len(hit_list)
            rows = np.fromiter(
                map(int, map(_DOC, hit_list)), np.int64, count=n
            )  # Seismic's ids: row numbers as strings
            scores = np.fromiter(map(_SCORE, hit_list), np.float32, count=n)
            keep = scores > 0
            if not keep.all():
                rows, scores = rows[keep], scores[keep]
            if (
                n > 1 and not (scores[1:] < scores[:-1]).all()
            ):  # strictly descending: already in rank order, no tie to break
                order = np.lexsort((rows if tie_rank is None else tie_rank[rows], -scores))[:k]
                rows, scores = rows[order], scores[order]
            results[int(hit_list[0][0])] = (rows, scores)
        return results


class SeismicQueries:
    """``[Q, V]`` query vectors in pyseismic's input form, normalised (sorted, repeated columns
    summed; Seismic keeps only one of two equal components): query ids (the row numbers), per query
    its components (column numbers as Seismic strings) and float32 values; queries with no active
    term are left out (their result is empty)."""

    def __init__(self, queries: sp.spmatrix, component_names: np.ndarray):
        """``component_names``: ``[V]`` Seismic's string of each column
        (:meth:`SeismicSearcher.component_names`)."""
        matrix = queries
        if not (
            isinstance(matrix, sp.csr_matrix | sp.csr_array)
            and matrix.dtype == np.float32
            and matrix.has_canonical_format
            and not (matrix.data <= 0).any()
        ):
            matrix = sp.csr_matrix(queries, dtype=np.float32, copy=True)  # normalised: sorted, repeats summed, > 0 only
            matrix.sum_duplicates()
            matrix.data[matrix.data < 0] = 0
            matrix.eliminate_zeros()
        indptr = matrix.indptr
        self.count = matrix.shape[0]
        self.todo = np.flatnonzero(np.diff(indptr)).astype(np.int64)
        self.ids = np.array([str(i) for i in self.todo.tolist()], dtype=component_names.dtype)
        self.components = [component_names[matrix.indices[indptr[i] : indptr[i + 1]]] for i in self.todo.tolist()]
        self.values = [np.ascontiguousarray(matrix.data[indptr[i] : indptr[i + 1]]) for i in self.todo.tolist()]
