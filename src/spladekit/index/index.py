"""The index a user keeps: built once from a corpus, opened instantly, searched many times.

:class:`Index` is the one retrieval path of spladekit (evaluation, ``spladekit search``, ``spladekit
serve``, the reproduction grid and negative mining all go through it); :class:`ShardedIndex` searches
several folders as one.

Folder layout (format 2; :mod:`spladekit.index.layout`)::

    INDEX/
      index.json             format, model id and revision, max lengths, pruning, counts, content hash, ...
      doc_ids.offsets.npy    D document ids, row order: int64 offsets [D + 1] into
      doc_ids.utf8.npy       their UTF-8 bytes end to end (memory-mapped; a search decodes only its hits)
      vocab.json             V token strings, column order (optional)
      docs.indptr.npy        CSR [D, V] of the document vectors (uncompressed .npy, memory-mapped)
      docs.indices.npy
      docs.data.npy          float32 impacts
      postings.indptr.npy    the term-major copy: CSR [V, D] (= CSC of the documents), i.e. one
      postings.indices.npy   posting list per term (document rows ascending) with its impacts;
      postings.data.npy      exact search multiplies queries by it, never transposing per call
      tie_rank.npy           rank of each row in document-id order (the tie rule below)
      seismic/               the approximate index, once built (:mod:`spladekit.index.seismic_store`)
      pruned/                the pruned copy of the postings two-step search answers from, once built
                             (:mod:`spladekit.index.pruned_store`)

Index arrays (``indptr``/``indices``) are int32 when every value fits, else int64 (both arrays of a
matrix share a type so that ``scipy.sparse`` never converts, i.e. copies, them). A folder of another
format is refused: rebuild it.

Ranking rule (the one tie rule of spladekit): score descending, then document id ascending (the
order of :func:`spladekit.data.trec.sorted_ranking`); documents with score 0 are not returned.
Shards merge by the same rule, so a search over shard folders returns the run of one folder.

Searching: :meth:`Index.search` takes a searcher's configuration (:mod:`spladekit.index.searcher`;
by name: :data:`SEARCHERS`); building: :class:`spladekit.index.builder.IndexBuilder`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.exact import check_k, tie_ranks
from spladekit.index.layout import (
    DEFAULT_BUDGET,
    FORMAT,
    MATRICES,
    PARTS,
    hash_arrays,
    load_metadata,
    load_vocabulary,
    read_doc_ids,
    take_ids,
)
from spladekit.index.maxscore import BlockMaxima
from spladekit.index.pruned_store import PrunedCopy
from spladekit.index.pruned_store import open_or_build as open_pruned
from spladekit.index.pruned_store import verify as verify_pruned
from spladekit.index.results import LatencyStats, SearchResult, SearchSettings
from spladekit.index.searcher import ExactConfig, Searcher, SearcherConfig
from spladekit.index.seismic import SeismicBuildParams
from spladekit.index.seismic_shards import ShardedSeismic
from spladekit.index.seismic_store import SeismicConfig, open_or_build, verify_files
from spladekit.index.two_step import TwoStepConfig
from spladekit.io import recover_folder

log = logging.getLogger(__name__)

SEARCHERS: dict[str, type[SearcherConfig]] = {
    config.name: config for config in (ExactConfig, SeismicConfig, TwoStepConfig)
}
"""The searchers' configurations by name (``spladekit search --backend``, the server's ``backend``)."""


def searcher_config(name: str, **params) -> SearcherConfig:
    """The configuration of the searcher ``name`` (:data:`SEARCHERS`) with ``params``.

    Raises:
        ValueError: an unknown name (listing the known ones), or a parameter refused by the configuration.
    """
    if name not in SEARCHERS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(SEARCHERS)}")
    return SEARCHERS[name](**params)


class Index:
    """An index folder, open: document vectors, posting lists, ids, metadata; searchable.

    Use :meth:`open` (a folder), :meth:`build` (encoder + corpus → folder), :meth:`from_vectors`
    (vectors in memory → folder) or :func:`open_index` (several folders searched as one).

    Attributes:
        folder: the index folder.
        docs: ``[D, V]`` CSR document vectors (memory-mapped, read-only).
        postings: ``[V, D]`` CSR term-major copy (memory-mapped, read-only).
        doc_ids: D document ids, row order.
        metadata: ``index.json``.
        tie_rank: ``[D]`` rank of each row in document-id order.

    Example::

        >>> import numpy as np, scipy.sparse as sp, tempfile
        >>> from spladekit import Index
        >>> docs = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0], [2, 0, 0]], dtype=np.float32))
        >>> index = Index.from_vectors(tempfile.mkdtemp() + "/i", docs, ["d1", "d2", "d3"])
        >>> index.search(sp.csr_matrix(np.array([[1, 0, 1]], dtype=np.float32)), k=2).run
        {'0': {'d1': 3.0, 'd3': 2.0}}
    """

    def __init__(
        self,
        folder: Path,
        docs: sp.csr_matrix,
        postings: sp.csr_matrix,
        doc_ids: Sequence[str],
        metadata: dict,
        tie_rank: np.ndarray,
    ):
        self.folder = folder
        self.docs = docs
        self.postings = postings
        self.doc_ids = doc_ids
        self.metadata = metadata
        self.tie_rank = tie_rank
        self._seismic: ShardedSeismic | None = None
        self._pruned: PrunedCopy | None = None
        self._encoder = None
        self._maxima: BlockMaxima | None = None

    # ---------------------------------------------------------------- open
    @classmethod
    def open(cls, folder: str | Path, verify: bool = False) -> Index:
        """Open an index folder: arrays memory-mapped (no copy, nothing read until searched).

        Args:
            verify: also recompute the content hashes (:meth:`verify`: reads every array; seconds at 1M).

        Raises:
            DataFormatError: a file is missing, unreadable or inconsistent (naming it), the folder is of
                another format (rebuild it), or (with ``verify``) a hash does not match.
        """
        folder = recover_folder(Path(folder))
        meta = load_metadata(folder)
        if meta.get("format") != FORMAT:
            raise DataFormatError(
                folder / "index.json",
                f"index format {meta.get('format')!r}, not {FORMAT}: written by an older "
                "spladekit; rebuild it (`spladekit index`)",
                field="format",
            )
        docs, postings = _read_matrices(folder, meta)
        doc_ids = read_doc_ids(folder, docs.shape[0])
        tie = folder / "tie_rank.npy"
        if not tie.exists():
            raise DataFormatError(tie, "missing: the index folder is incomplete")
        tie_rank = np.load(tie, mmap_mode="r")
        if tie_rank.shape != (docs.shape[0],):
            raise DataFormatError(tie, f"expected {docs.shape[0]} ranks")
        index = cls(folder, docs, postings, doc_ids, meta, tie_rank)
        if verify:
            index.verify()
        return index

    def verify(self) -> None:
        """Recompute the content hashes and compare them with ``index.json``'s: ``content_hash``
        (document arrays and ids) and ``postings_hash`` (the term-major copy that exact search reads);
        recompute ``tie_rank.npy`` from the ids; the stored Seismic shards' files against their
        SHA-256 (:func:`spladekit.index.seismic_store.verify_files`); and the stored pruned copy's
        arrays against its ``postings_hash`` (:func:`spladekit.index.pruned_store.verify`). Reads every array once.

        Raises:
            DataFormatError: a hash differs or is missing, or the tie ranks (naming the file at fault).
        """
        for key, matrix, ids, what in (
            ("content_hash", self.docs, self.doc_ids, "docs.*.npy / the document ids"),
            ("postings_hash", self.postings, (), "postings.*.npy"),
        ):
            want = self.metadata.get(key)
            if not want:
                raise DataFormatError(
                    self.folder / "index.json", f"no {key}: nothing to check the folder against; rebuild it", field=key
                )
            if want != hash_arrays(matrix.indptr, matrix.indices, matrix.data, ids, matrix.shape):
                raise DataFormatError(
                    self.folder / "index.json",
                    f"{key.replace('_', ' ')} does not match {what} (the folder was altered or damaged; rebuild it)",
                    field=key,
                )
        if not np.array_equal(self.tie_rank, tie_ranks(self.doc_ids)):  # derived from the ids: recomputed, not hashed
            raise DataFormatError(
                self.folder / "tie_rank.npy", "does not rank the document ids in order (damaged; rebuild the folder)"
            )
        verify_files(self.folder / "seismic", self.metadata.get("content_hash"), self.docs.shape[0])
        verify_pruned(self.folder / "pruned", self.metadata.get("content_hash"), self.postings)

    @classmethod
    def from_vectors(
        cls,
        out: str | Path,
        vectors: sp.spmatrix,
        doc_ids: Sequence[str],
        metadata: dict | None = None,
        vocabulary: Sequence[str] | None = None,
        memory_budget: int = DEFAULT_BUDGET,
    ) -> Index:
        """Write ``[D, V]`` vectors as an index folder and open it. A CSR matrix (in memory or over
        memory-mapped arrays) is read in place, block by block; the write holds at most
        ``memory_budget`` bytes beyond it (:mod:`spladekit.index.writer`).

        Raises:
            ValueError: rows and ids differ in number, ids repeat, a bad vocabulary, or a budget
                below :data:`spladekit.index.writer.MIN_BUDGET`.
        """
        from spladekit.index.writer import matrix_blocks, write_index

        if vectors.shape[0] != len(doc_ids):
            raise ValueError(f"{vectors.shape[0]} vectors for {len(doc_ids)} document ids")
        matrix = vectors if isinstance(vectors, sp.csr_matrix) else sp.csr_matrix(vectors)
        write_index(
            out,
            matrix_blocks(matrix, memory_budget),
            doc_ids,
            vectors.shape[1],
            metadata or {},
            vocabulary,
            memory_budget,
        )
        return cls.open(out)

    @classmethod
    def build(
        cls,
        encoder,
        corpus: str | Path | Mapping[str, str] | Iterable[tuple[str, str]],
        out: str | Path,
        chunk_size: int = 10_000,
        metadata: dict | None = None,
        show_progress: bool = False,
        distributed: bool = True,
        memory_budget: int = DEFAULT_BUDGET,
    ) -> Index | None:
        """Encode a corpus into the index folder ``out`` (streamed, resumable, data-parallel):
        :class:`spladekit.index.builder.IndexBuilder` with these arguments, its :meth:`~IndexBuilder.build`.
        The index searches text queries with ``encoder`` itself when it encodes them as ``index.json``
        records (the model is not loaded a second time).

        Returns:
            The open index on rank 0 (its ``build_stats``: chunks, encoded, reused, truncated_docs);
            None on other ranks.

        Raises:
            ValueError: ``chunk_size`` < 1, a repeated document id, or an empty corpus.
            DataFormatError: a malformed corpus file.
            OutputPathError: ``out`` is an existing file (checked before encoding).
        """
        from spladekit.index.builder import IndexBuilder

        builder = IndexBuilder(encoder, out, chunk_size, metadata, show_progress, distributed, memory_budget)
        folder = builder.build(corpus)
        if folder is None:
            return None
        index = cls.open(folder)
        index.build_stats = builder.stats
        if builder.encodes_queries_as_recorded(index.metadata):
            index.adopt_query_encoder(encoder)
        return index

    # ---------------------------------------------------------------- what searchers use
    def seismic(self, build: SeismicBuildParams | None = None, memory_budget: int | None = None) -> ShardedSeismic:
        """The Seismic index of this folder, by shards (:mod:`spladekit.index.seismic_store`): kept from
        an earlier call, or reopened from ``seismic/``, when it was built with ``build`` (None: whatever
        it was built with, else the defaults) and ``memory_budget`` (None: any shard size); else built
        shard by shard (resumable) and stored there, replacing another parameter set.

        Raises:
            MissingExtraError: ``pyseismic-lsr`` is not installed (``pip install 'spladekit[seismic]'``).
        """
        kept = self._seismic
        if kept is not None and (build is None or kept.params == build) and memory_budget in (None, kept.memory_budget):
            return kept
        from spladekit.index.seismic import import_seismic

        import_seismic()  # before a build's journal is written
        self._seismic = open_or_build(self.folder, self.docs, self.metadata.get("content_hash"), build, memory_budget)
        return self._seismic

    def pruned(self, rule=None, memory_budget: int = DEFAULT_BUDGET, default=None) -> PrunedCopy:
        """The pruned copy of this folder's postings (:mod:`spladekit.index.pruned_store`): kept from an
        earlier call, or reopened from ``pruned/``, when it holds ``rule`` (None: whatever rule it
        holds); else built with ``rule`` (None: ``default``; resumable) within ``memory_budget`` bytes
        and stored there, replacing another rule's copy.

        Args:
            rule: a :class:`~spladekit.model.pruning.PruningRule`, its record or its ``KIND=VALUE`` text.

        Raises:
            DataFormatError: the stored copy is not this index's (naming the file).
            ValueError: an invalid rule; no rule given, none stored and no ``default``.
        """
        from spladekit.model.pruning import record_of

        kept = self._pruned
        if kept is not None and (rule is None or kept.rule == record_of(rule)):
            return kept
        self._pruned = open_pruned(
            self.folder,
            self.docs,
            self.postings,
            self.metadata.get("content_hash"),
            rule,
            memory_budget,
            default=default,
        )
        return self._pruned

    def block_maxima(self) -> BlockMaxima:
        """The posting matrix's block maxima of pruned exact search (kept here: they fill as terms are queried)."""
        if self._maxima is None:
            self._maxima = BlockMaxima(self.postings)
        return self._maxima

    def query_encoder(self, model: str | None = None, batch_size: int = 32, trust_remote_code: bool = False):
        """The encoder of this index's queries (the model and query settings of ``index.json``, or
        ``model``; created once, or the one the index was built with: :meth:`build`;
        ``trust_remote_code``: run the model folder's own code)."""
        if self._encoder is None or model is not None:
            from spladekit.index.search import query_encoder

            self._encoder = query_encoder(
                self.metadata, model, batch_size, path=self.folder / "index.json", trust_remote_code=trust_remote_code
            )
        return self._encoder

    def adopt_query_encoder(self, encoder) -> None:
        """Encode this index's text queries with ``encoder`` (one that encodes them as ``index.json``
        records: the one the index was built with)."""
        self._encoder = encoder

    # ---------------------------------------------------------------- search
    def check(self, searcher: SearcherConfig) -> None:
        """Refuse, before any query is encoded or anything built, what ``searcher`` cannot do on this
        index (:meth:`SearcherConfig.check <spladekit.index.searcher.SearcherConfig.check>`).

        Raises:
            MissingExtraError, ValueError, DataFormatError: the searcher's refusal.
        """
        searcher.check(self)

    def search(
        self,
        queries,
        k: int = 1000,
        searcher: SearcherConfig | None = None,
        query_ids: Sequence[str] | None = None,
        encoder=None,
        one_at_a_time: bool = False,
    ) -> SearchResult:
        """Top-``k`` documents of each query.

        Args:
            queries: ``[Q, V]`` sparse query vectors, a ``{query_id: text}`` mapping, or a list of texts
                (encoded with ``encoder``, else :meth:`query_encoder`).
            k: results per query (≥ 1).
            searcher: the search method and its parameters (None: :class:`~spladekit.index.searcher.ExactConfig`);
                what it needs is loaded, or built and stored, on first use (not timed).
            query_ids: ids of vector or list queries (default ``"0"``, ``"1"``, ...).
            one_at_a_time: search each query in its own call (as an application serving one query
                at a time does); latency is then measured per call.

        Returns:
            :class:`SearchResult` (run, hits, latency statistics, settings record, what was built).

        Raises:
            ValueError: ``k`` < 1, vocabulary mismatch, ids of the wrong number, or a searcher's refusal.
            MissingExtraError: the searcher needs an extra that is not installed (before any text is encoded).
        """
        searcher = searcher or ExactConfig()
        vectors, ids, settings = self.prepare(queries, k, searcher, query_ids, encoder, one_at_a_time)
        opened = searcher.open(self)
        for key, value in opened.record().items():
            setattr(settings, key, value)
        hits, seconds = named_hits(opened, vectors, k, self.doc_ids, self.tie_rank, one_at_a_time)
        return SearchResult(
            ids,
            hits,
            LatencyStats.of(seconds, "one_at_a_time" if one_at_a_time else "batch"),
            settings,
            vectors,
            np.asarray(seconds, dtype=np.float64),
            built=[opened.built] if opened.built else [],
        )

    def prepare(
        self, queries, k: int, searcher: SearcherConfig, query_ids=None, encoder=None, one_at_a_time: bool = False
    ):
        """Check a search's arguments and encode text queries: ``([Q, V] vectors, Q ids, settings)``
        (the first half of :meth:`search`, shared with :class:`ShardedIndex`).

        Raises:
            ValueError: ``k`` < 1, ids of the wrong number, vocabulary mismatch, a searcher's refusal.
            MissingExtraError: the searcher's extra is missing (before any text is encoded).
        """
        k = check_k(k)  # before the settings record's own (pydantic) check
        self.check(searcher)
        settings = SearchSettings(
            backend=searcher.name,
            k=k,
            one_at_a_time=one_at_a_time,
            index=[str(self.folder)],
            index_hash=[self.metadata.get("content_hash")],
            num_docs=self.docs.shape[0],
        )
        if sp.issparse(queries):
            vectors = queries if isinstance(queries, sp.csr_matrix) else sp.csr_matrix(queries)
            ids = list(query_ids) if query_ids is not None else [str(i) for i in range(vectors.shape[0])]
        else:
            if isinstance(queries, Mapping):
                ids, texts = list(queries), list(queries.values())
            else:
                texts = list(queries)
                ids = list(query_ids) if query_ids is not None else [str(i) for i in range(len(texts))]
            enc = encoder or self.query_encoder()
            vectors = enc.encode_queries(texts) if texts else sp.csr_matrix((0, self.docs.shape[1]), dtype=np.float32)
            meta = getattr(enc, "metadata", None)
            settings.model = self.metadata.get("model") if encoder is None else (getattr(meta, "source", None) or None)
            settings.query_max_length = getattr(meta, "query_max_length", None)
            settings.query_top_k = getattr(meta, "query_top_k", None)
            settings.query_pruning = getattr(meta, "query_pruning", None)
        if len(ids) != vectors.shape[0]:
            raise ValueError(f"{len(ids)} query ids for {vectors.shape[0]} queries")
        if vectors.shape[1] != self.docs.shape[1]:
            raise ValueError(
                f"vocabulary mismatch: queries have {vectors.shape[1]} columns, documents {self.docs.shape[1]}"
            )
        return vectors, ids, settings

    def __len__(self) -> int:
        return self.docs.shape[0]

    def __repr__(self) -> str:
        return f"Index({str(self.folder)!r}, {self.docs.shape[0]} documents, {self.docs.nnz} entries)"


def _read_matrices(folder: Path, meta: dict) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The ``[D, V]`` document and ``[V, D]`` posting matrices of a format-2 folder, memory-mapped.

    Raises:
        DataFormatError: an array is missing, unreadable, or the arrays do not form the matrices
            ``index.json`` describes (naming the file).
    """
    arrays = {}
    for name in MATRICES:
        for part in PARTS:
            path = folder / f"{name}.{part}.npy"
            if not path.exists():
                raise DataFormatError(path, "missing: the index folder is incomplete")
            try:
                arrays[name, part] = np.load(path, mmap_mode="r")
            except (ValueError, OSError) as exc:
                raise DataFormatError(path, f"cannot read ({exc})") from exc
    num_docs, vocab_size = arrays["docs", "indptr"].shape[0] - 1, arrays["postings", "indptr"].shape[0] - 1
    if meta.get("vocab_size") != vocab_size or meta.get("num_docs") != num_docs:
        raise DataFormatError(
            folder / "index.json",
            f"num_docs/vocab_size do not describe the [{num_docs}, {vocab_size}] arrays",
            field="num_docs",
        )
    matrices = []
    for name, shape in (("docs", (num_docs, vocab_size)), ("postings", (vocab_size, num_docs))):
        indptr, indices, data = (arrays[name, part] for part in PARTS)
        if (
            indptr.shape != (shape[0] + 1,)
            or indices.shape != data.shape
            or int(indptr[-1]) != indices.size
            or indices.dtype != indptr.dtype
        ):
            raise DataFormatError(
                folder / f"{name}.indptr.npy", f"arrays of {name} do not form a [{shape[0]}, {shape[1]}] CSR matrix"
            )
        matrix = sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
        matrix.has_sorted_indices = True  # written sorted; saves a scan
        matrices.append(matrix)
    return matrices[0], matrices[1]


def named_hits(
    searcher: Searcher,
    vectors: sp.csr_matrix,
    k: int,
    doc_ids: Sequence[str],
    tie_rank: np.ndarray,
    one_at_a_time: bool,
) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """Per query ``(doc_id, score)`` hits of ``searcher`` and the seconds each took, from the query
    vectors to the named hits (what :class:`~spladekit.index.results.LatencyStats` reports): each
    query in its own call with ``one_at_a_time``, else one call, every query's ids decoded in one
    gather whose time is shared equally."""
    hits, seconds = [], []
    if one_at_a_time:
        for i in range(vectors.shape[0]):
            began = time.perf_counter()
            hits.extend(
                [
                    list(zip(take_ids(doc_ids, rows), scores))
                    for rows, scores in searcher.search_rows(vectors[i : i + 1], k, tie_rank)
                ]
            )
            seconds.append(time.perf_counter() - began)
        return hits, seconds
    found = searcher.search_rows(vectors, k, tie_rank, seconds)
    began = time.perf_counter()
    cuts = np.cumsum([0] + [len(rows) for rows, _ in found]).tolist()
    names = take_ids(doc_ids, np.concatenate([np.asarray(rows, np.int64) for rows, _ in found]) if found else [])
    hits = [list(zip(names[a:b], scores)) for a, b, (_, scores) in zip(cuts[:-1], cuts[1:], found)]
    share = (time.perf_counter() - began) / max(1, len(found))
    return hits, [spent + share for spent in seconds]


def load_index(folder: str | Path) -> tuple[sp.csr_matrix, list[str], dict]:
    """Read an index folder into memory and check its content hashes: ``(vectors [D, V], doc_ids,
    metadata)``. To search, open it instead (:meth:`Index.open`: mapped, not read).

    Raises:
        DataFormatError: a file is missing, unreadable or malformed (naming it), or a hash does not match.
    """
    index = Index.open(folder, verify=True)
    docs = index.docs
    docs = sp.csr_matrix((np.array(docs.data), np.array(docs.indices), np.array(docs.indptr)), shape=docs.shape)
    return docs, list(index.doc_ids), index.metadata


def check_compatible(shards: Sequence[Index]) -> None:
    """Refuse shards that cannot be searched or merged as one index: none, different vocabulary
    sizes, models (``model``, ``model_revision``) or vocabularies (``vocab.json``).

    Raises:
        ValueError: naming the two folders that differ.
    """
    if not shards:
        raise ValueError("no shard folder given")
    sizes = {s.docs.shape[1] for s in shards}
    if len(sizes) != 1:
        raise ValueError(f"shards have different vocabulary sizes: {sorted(sizes)}")
    first = shards[0]
    for shard in shards[1:]:  # a query vector means the same terms in every shard only for one model
        for key in ("model", "model_revision"):
            if shard.metadata.get(key) != first.metadata.get(key):
                raise ValueError(
                    f"shards were built by different models: {key} {first.metadata.get(key)!r} "
                    f"({first.folder}) vs {shard.metadata.get(key)!r} ({shard.folder})"
                )
        if load_vocabulary(shard.folder) != load_vocabulary(first.folder):
            raise ValueError(f"shards have different vocabularies (vocab.json of {first.folder} and {shard.folder})")


class ShardedIndex:
    """Several index folders (one per shard, same model and vocabulary) searched as one: each shard's
    top-``k`` is merged by the tie rule, so the run equals that of one folder holding every document.
    Making one checks that no document id is in two shards (it decodes every id: O(D), unlike
    :meth:`Index.open`).

    Raises:
        ValueError: no shard, vocabularies differ, or a document id is in two shards.
    """

    def __init__(self, shards: Sequence[Index]):
        check_compatible(shards)
        seen: set[str] = set()
        for shard in shards:
            overlap = seen.intersection(shard.doc_ids)
            if overlap:
                raise ValueError(f"document id {next(iter(overlap))!r} is in two shards ({shard.folder})")
            seen.update(shard.doc_ids)
        self.shards = list(shards)
        self.metadata = shards[0].metadata

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def query_encoder(self, model: str | None = None, batch_size: int = 32, trust_remote_code: bool = False):
        """The encoder of the queries (the first shard's; every shard has the same model)."""
        return self.shards[0].query_encoder(model, batch_size=batch_size, trust_remote_code=trust_remote_code)

    def check(self, searcher: SearcherConfig) -> None:
        """:meth:`Index.check` of every shard."""
        for shard in self.shards:
            shard.check(searcher)

    def search(
        self,
        queries,
        k: int = 1000,
        searcher: SearcherConfig | None = None,
        query_ids=None,
        encoder=None,
        one_at_a_time: bool = False,
    ) -> SearchResult:
        """:meth:`Index.search` over every shard, merged (score descending, then document id); each
        shard's ``searcher`` checked before any text is encoded."""
        searcher = searcher or ExactConfig()
        for shard in self.shards[1:]:
            shard.check(searcher)
        vectors, ids, settings = self.shards[0].prepare(queries, k, searcher, query_ids, encoder, one_at_a_time)
        merged: list[list[tuple[str, float]]] = [[] for _ in ids]
        seconds = np.zeros(len(ids))
        built = []
        for shard in self.shards:
            result = shard.search(vectors, k, searcher, ids, None, one_at_a_time)
            for slot, hits in enumerate(result.hits):
                merged[slot].extend(hits)
            if len(result.seconds):
                seconds += result.seconds  # per query; shards searched one after the other here (in parallel elsewhere)
            built += result.built
        hits = [sorted(h, key=lambda pair: (-pair[1], pair[0]))[:k] for h in merged]
        settings = result.settings.model_copy(
            update=dict(
                index=[str(s.folder) for s in self.shards],
                index_hash=[s.metadata.get("content_hash") for s in self.shards],
                num_docs=len(self),
                model=settings.model,
                query_max_length=settings.query_max_length,
                query_top_k=settings.query_top_k,
                query_pruning=settings.query_pruning,
            )
        )
        return SearchResult(
            ids,
            hits,
            LatencyStats.of(seconds, "one_at_a_time" if one_at_a_time else "batch"),
            settings,
            vectors,
            seconds,
            built=built,
        )


def open_index(folders: str | Path | Sequence[str | Path], verify: bool = False) -> Index | ShardedIndex:
    """One folder → :class:`Index`; several → :class:`ShardedIndex` (``verify``: see :meth:`Index.open`)."""
    if isinstance(folders, (str, Path)):
        return Index.open(folders, verify=verify)
    if len(folders) == 1:
        return Index.open(folders[0], verify=verify)
    return ShardedIndex([Index.open(f, verify=verify) for f in folders])
