"""The index a user keeps: built once from a corpus, opened instantly, searched many times.

:class:`Index` is the one retrieval path of spladekit (evaluation, ``spladekit search``, the
reproduction grid and negative mining all go through it).

Folder layout (format 2)::

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
      seismic/               the approximate index, once built: index.index.seismic + params.json (one shard),
                             or one shard-NNNNNN/ per row range (:mod:`spladekit.index.seismic_shards`)

Index arrays (``indptr``/``indices``) are int32 when every value fits, else int64 (both arrays of a
matrix share a type so that ``scipy.sparse`` never converts, i.e. copies, them).

Ranking rule (the one tie rule of spladekit): score descending, then document id ascending (the
order of :func:`spladekit.data.trec.sorted_ranking`); documents with score 0 are not returned.
Shards merge by the same rule, so a search over shard folders returns the run of one folder.

Building (:meth:`Index.build`) streams the corpus in chunks of ``chunk_size`` documents; each encoded
chunk is written to ``.NAME.build/chunk-NNNNNN.npz`` (temporary file, then rename) before the next
one starts, so a killed build restarts where it stopped and never encodes a finished chunk twice.
Under ``torchrun`` chunk ``c`` is encoded by rank ``c mod W``; rank 0 then writes the folder. A chunk
holds the same documents whatever ``W`` is, so the folder does not depend on the number of processes.
The folder is written atomically (:func:`spladekit.io.atomic_folder`).

Folders of format 1 (``vectors.npz``, written before this module) still open: they are read into
memory and their term-major copy is made at open (seconds at 1M documents, not memory-mapped);
:meth:`Index.upgrade` (``spladekit index-upgrade FOLDER``) rewrites one in format 2.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.exact import check_k, search_postings, tie_ranks
from spladekit.index.maxscore import BlockMaxima
from spladekit.index.layout import (DEFAULT_BUDGET, model_record, FORMAT, MATRICES, PARTS, canonical, hash_arrays, load_metadata, load_vocabulary, read_doc_ids,
                                    take_ids)
from spladekit.index.seismic import SeismicBuildParams, SeismicSearcher, SeismicSearchParams, import_seismic
from spladekit.io import atomic_folder, read_json, recover_folder, write_json
from spladekit.index.seismic_shards import open_or_build, verify_files

# moved to rooms of their own (mechanically; their old import path stays): the records of a search,
# and the chunk files of a resumable build
from spladekit.index.results import LatencyStats, SearchResult, SearchSettings, recall_at_k  # noqa: F401
from spladekit.index.build_chunks import (_ChunkIds, _chunk_digest, _chunks, _corpus_size, _documents,  # noqa: F401
                                          _load_chunk, _reports_batches, _save_chunk, _stored_digest)

log = logging.getLogger(__name__)

BACKENDS = ("exact", "seismic")


# ----------------------------------------------------------------------------------- the index
class Index:
    """An index folder, open: document vectors, posting lists, ids, metadata; searchable.

    Use :meth:`open` (a folder), :meth:`build` (encoder + corpus → folder), :meth:`from_vectors`
    (vectors in memory → folder) or :func:`open_shards` (several folders searched as one).

    Attributes:
        folder: the index folder.
        docs: ``[D, V]`` CSR document vectors (memory-mapped, read-only, for format-2 folders).
        postings: ``[V, D]`` CSR term-major copy (memory-mapped, read-only).
        doc_ids: D document ids, row order.
        metadata: ``index.json``.
        tie_rank: ``[D]`` rank of each row in document-id order.
    """

    def __init__(self, folder: Path, docs: sp.csr_matrix, postings: sp.csr_matrix, doc_ids: list[str], metadata: dict,
                 tie_rank: np.ndarray, legacy: bool = False):
        self.folder = folder
        self.docs = docs
        self.postings = postings
        self.doc_ids = doc_ids
        self.metadata = metadata
        self.tie_rank = tie_rank
        self.legacy = legacy
        self._seismic: SeismicSearcher | None = None
        self._encoder = None
        self._maxima: BlockMaxima | None = None

    prune = True
    """Exact search prunes long-list queries (MaxScore over blocks, :mod:`spladekit.index.maxscore`:
    the same results); False on an instance adds every posting (the anchor of the benchmarks)."""

    def _pruning(self) -> BlockMaxima | None:
        """The pruned kernel's block maxima (kept here: they fill as terms are queried), None when not pruning."""
        if self.prune and self._maxima is None:
            self._maxima = BlockMaxima(self.postings)
        return self._maxima if self.prune else None

    # ---------------------------------------------------------------- open
    @classmethod
    def open(cls, folder: str | Path, verify: bool = False) -> "Index":
        """Open an index folder: arrays memory-mapped (no copy, nothing read until searched).

        Args:
            verify: also recompute the content hash (reads every document array; seconds at 1M).

        Raises:
            DataFormatError: a file is missing, unreadable or inconsistent (naming it), or (with
                ``verify``) the content hash does not match.
        """
        folder = recover_folder(Path(folder))
        meta = load_metadata(folder)
        if meta.get("format") != FORMAT:
            if (folder / "vectors.npz").exists():
                return cls._open_legacy(folder, meta)
            raise DataFormatError(folder / "index.json", f"index format {meta.get('format')!r} is not {FORMAT} and there is no vectors.npz", field="format")
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
        doc_ids = read_doc_ids(folder, num_docs)
        if meta.get("vocab_size") != vocab_size or meta.get("num_docs") != num_docs:
            raise DataFormatError(folder / "index.json", f"num_docs/vocab_size do not describe the [{num_docs}, {vocab_size}] arrays", field="num_docs")
        for name, rows, cols in (("docs", num_docs, vocab_size), ("postings", vocab_size, num_docs)):
            indptr, indices, data = (arrays[name, part] for part in PARTS)
            if indptr.shape != (rows + 1,) or indices.shape != data.shape or int(indptr[-1]) != indices.size or indices.dtype != indptr.dtype:
                raise DataFormatError(folder / f"{name}.indptr.npy", f"arrays of {name} do not form a [{rows}, {cols}] CSR matrix")
        docs = sp.csr_matrix((arrays["docs", "data"], arrays["docs", "indices"], arrays["docs", "indptr"]), shape=(num_docs, vocab_size), copy=False)
        postings = sp.csr_matrix((arrays["postings", "data"], arrays["postings", "indices"], arrays["postings", "indptr"]), shape=(vocab_size, num_docs), copy=False)
        docs.has_sorted_indices = postings.has_sorted_indices = True  # written sorted; saves a scan
        tie = folder / "tie_rank.npy"
        tie_rank = np.load(tie, mmap_mode="r") if tie.exists() else tie_ranks(doc_ids)
        if tie_rank.shape != (num_docs,):
            raise DataFormatError(tie, f"expected {num_docs} ranks")
        index = cls(folder, docs, postings, doc_ids, meta, tie_rank)
        if verify:
            index.verify()
        return index

    @classmethod
    def _open_legacy(cls, folder: Path, meta: dict) -> "Index":
        from spladekit.index.layout import load_legacy

        matrix, doc_ids, meta = load_legacy(folder)
        log.warning("%s: index format 1 (vectors.npz) is read into memory; `spladekit index-upgrade %s` rewrites it "
                    "as format 2 (memory-mapped, opens instantly)", folder, folder)
        return cls(folder, matrix, matrix.T.tocsr(), doc_ids, meta, tie_ranks(doc_ids), legacy=True)

    def verify(self) -> None:
        """Recompute the content hashes and compare them with ``index.json``'s: ``content_hash``
        (document arrays and ids) and ``postings_hash`` (the term-major copy that exact search reads;
        folders written before it have none); recompute ``tie_rank.npy`` from the ids; and the stored
        Seismic shards' files against their SHA-256 (:func:`spladekit.index.seismic_shards.verify_files`).
        Reads every array once (≈ 3 GB at 1M documents).

        Raises:
            DataFormatError: a hash differs, or the tie ranks (naming the file at fault).
        """
        checks = [("content_hash", self.docs, self.doc_ids, "docs.*.npy / the document ids")]
        if not self.legacy:
            checks.append(("postings_hash", self.postings, (), "postings.*.npy"))
        for key, matrix, ids, what in checks:
            want = self.metadata.get(key)
            if want and want != hash_arrays(matrix.indptr, matrix.indices, matrix.data, ids, matrix.shape):
                raise DataFormatError(self.folder / "index.json", f"{key.replace('_', ' ')} does not match {what} (the folder was altered or damaged; rebuild it)", field=key)
        if not np.array_equal(self.tie_rank, tie_ranks(self.doc_ids)):  # derived from the ids: recomputed, not hashed
            raise DataFormatError(self.folder / "tie_rank.npy", "does not rank the document ids in order (damaged; rebuild the folder)")
        verify_files(self.folder / "seismic", self.metadata.get("content_hash"))  # the stored Seismic shards' files

    @classmethod
    def upgrade(cls, folder: str | Path) -> bool:
        """Rewrite an old folder in the current layout, in place and atomically: format 1
        (``vectors.npz``), or format 2 with its ids in ``doc_ids.json`` (read whole at every open).
        The content hash is checked first and is unchanged (same vectors, same ids).

        Returns:
            True when the folder was rewritten, False when it was already current (nothing written).

        Raises:
            DataFormatError: the folder cannot be read or its content hash does not match.
        """
        from spladekit.index.writer import matrix_blocks, write_index

        index = cls.open(folder, verify=True)
        if not index.legacy and not isinstance(index.doc_ids, list):
            return False
        meta = {k: v for k, v in index.metadata.items() if k not in ("content_hash", "nnz", "num_docs", "vocab_size")}
        vocabulary = load_vocabulary(index.folder)
        docs = index.docs if index.legacy else sp.csr_matrix(  # read into memory: the mapped files are replaced
            (np.array(index.docs.data), np.array(index.docs.indices), np.array(index.docs.indptr)), shape=index.docs.shape)
        seismic = index.folder / "seismic"
        with atomic_folder(index.folder) as tmp:
            write_index(tmp / "index", matrix_blocks(docs), list(index.doc_ids), docs.shape[1], meta, vocabulary)
            for item in (tmp / "index").iterdir():
                item.rename(tmp / item.name)
            (tmp / "index").rmdir()
            if seismic.is_dir():  # the stored approximate index depends on the vectors only: kept
                shutil.copytree(seismic, tmp / "seismic")
        return True

    @classmethod
    def from_vectors(cls, out: str | Path, vectors: sp.spmatrix, doc_ids: Sequence[str], metadata: dict | None = None,
                     vocabulary: Sequence[str] | None = None, memory_budget: int = DEFAULT_BUDGET) -> "Index":
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
        write_index(out, matrix_blocks(matrix, memory_budget), doc_ids, vectors.shape[1], metadata or {}, vocabulary, memory_budget)
        return cls.open(out)

    # ---------------------------------------------------------------- build
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
    ) -> "Index | None":
        """Encode a corpus into the index folder ``out`` (streamed, resumable, data-parallel).

        Args:
            encoder: a :class:`~spladekit.model.encoder.SpladeEncoder` (anything with
                ``encode_documents``, ``last_truncated``, ``vocab_size``, and optionally ``metadata``
                and ``vocabulary``).
            corpus: a BEIR folder or ``corpus.jsonl[.gz]`` (streamed from disk), a ``{doc_id: text}``
                mapping, or an iterable of ``(doc_id, text)``; it is read again on resume, so it must
                give the same documents in the same order.
            out: the index folder (replaced atomically when it exists).
            chunk_size: documents per chunk (the unit of memory, resumption and parallelism).
            metadata: extra ``index.json`` entries (model id, revision, configuration, ...).
            distributed: share the chunks among the processes of a ``torchrun`` job; False: this
                process builds alone (e.g. an evaluation on rank 0 during training).
            memory_budget: bytes of working memory of writing the folder from the chunks
                (:mod:`spladekit.index.writer`: independent of the corpus size but for the ids).

        Returns:
            The open index on rank 0 (its ``build_stats``: chunks, encoded, reused, truncated_docs);
            None on other ranks.

        Raises:
            ValueError: ``chunk_size`` < 1, a repeated document id, or an empty corpus.
            DataFormatError: a malformed corpus file.
            OutputPathError: ``out`` is an existing file (checked before encoding).
        """
        from tqdm.auto import tqdm

        from spladekit.distributed import DistInfo, barrier, init_distributed
        from spladekit.errors import OutputPathError
        from spladekit.index.writer import check_budget, write_index

        check_budget(memory_budget)

        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer ≥ 1, got {chunk_size!r}")
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise OutputPathError(f"{out}: is a file; an index is a folder (the file is left as it is)")
        dist = init_distributed() if distributed else DistInfo()
        sync = barrier if distributed else (lambda: None)
        work = out.with_name(f".{out.name}.build")
        encoder_meta = asdict(encoder.metadata) if getattr(encoder, "metadata", None) is not None else {}
        fingerprint = {"format": FORMAT, "chunk_size": chunk_size, "vocab_size": int(encoder.vocab_size), "encoder": encoder_meta,
                       "corpus": str(corpus) if isinstance(corpus, (str, Path)) else None,
                       "metadata": json.loads(json.dumps(metadata or {}, default=str))}
        try:
            if dist.is_main:
                stored = read_json(work / "build.json") if (work / "build.json").exists() else None
                if stored != fingerprint:
                    if stored is not None:
                        log.warning("%s: left by a build with other settings; starting over", work)
                    shutil.rmtree(work, ignore_errors=True)
                    work.mkdir(parents=True)
                    write_json(work / "build.json", fingerprint)
            sync()
            stats = {"chunks": 0, "encoded": 0, "reused": 0}
            seen: set[str] = set()
            bar = tqdm(desc="documents", unit="doc", total=_corpus_size(corpus) if show_progress and dist.is_main else None,
                       disable=not (show_progress and dist.is_main))
            for number, chunk in enumerate(_chunks(_documents(corpus), chunk_size)):
                stats["chunks"] += 1
                ids = [doc_id for doc_id, _ in chunk]
                for doc_id in ids:
                    if doc_id in seen:
                        raise ValueError(f"document id {doc_id!r} repeats in the corpus")
                    seen.add(doc_id)
                if number % dist.world_size != dist.rank:
                    bar.update(len(chunk))  # another process encodes it
                    continue
                path = work / f"chunk-{number:06d}.npz"
                digest = _chunk_digest(chunk)
                if path.exists():
                    if _stored_digest(path) == digest:
                        stats["reused"] += 1
                        bar.update(len(chunk))
                        continue
                    log.warning("%s: holds other documents than chunk %d of this corpus; encoding it again", path, number)
                per_batch = show_progress and dist.is_main and _reports_batches(encoder)  # the bar moves as batches finish
                extra = {"on_batch": bar.update} if per_batch else {}
                vectors = canonical(encoder.encode_documents([text for _, text in chunk], batch_size=getattr(encoder, "batch_size", 32), **extra))
                _save_chunk(path, vectors, ids, int(getattr(encoder, "last_truncated", 0)), digest)
                stats["encoded"] += 1
                if not per_batch:
                    bar.update(len(chunk))
            bar.close()
            if not seen:
                raise ValueError(f"the corpus {corpus if isinstance(corpus, (str, Path)) else ''} holds no document")
            sync()
            if not dist.is_main:
                sync()
                return None
            paths = [work / f"chunk-{c:06d}.npz" for c in range(stats["chunks"])]
            missing = [p.name for p in paths if not p.exists()]
            if missing:
                raise RuntimeError(f"{work}: chunks {missing[:3]} were not written (a process failed?)")
            truncated = 0
            for path in paths:
                with np.load(path) as f:
                    truncated += int(f["truncated"])

            def blocks():
                for path in paths:
                    yield _load_chunk(path)

            meta = dict(encoder_meta)
            meta.update(metadata or {})
            if "model" not in meta and encoder_meta.get("source"):  # the query model, so search takes texts
                from spladekit.data.resolve import resolve_model

                meta.update(model_record(encoder_meta["source"], resolve_model(encoder_meta["source"])))
            meta.update(truncated_docs=truncated, world_size=dist.world_size, chunk_size=chunk_size)
            vocabulary = getattr(encoder, "vocabulary", None)
            num_docs = len(seen)
            seen.clear()  # the writer checks the ids again, without Python strings of them all
            write_index(out, blocks, _ChunkIds(paths, num_docs), int(encoder.vocab_size), meta,
                        list(vocabulary) if vocabulary is not None else None, memory_budget)
            shutil.rmtree(work, ignore_errors=True)
            stats["truncated_docs"] = truncated
            sync()
            index = cls.open(out)
            index.build_stats = stats
            return index
        finally:
            dist.close()

    # ---------------------------------------------------------------- seismic
    def seismic(self, build: SeismicBuildParams | None = None, memory_budget: int | None = None):
        """The Seismic index of this folder, by shards (:mod:`spladekit.index.seismic_shards`):
        reopened from ``seismic/`` when it was built with ``build`` (None: whatever it was built
        with, else the defaults) and ``memory_budget`` (None: any shard size), else built shard by
        shard (resumable) and stored there, replacing another parameter set.

        Raises:
            MissingExtraError: ``pyseismic-lsr`` is not installed (``pip install 'spladekit[seismic]'``).
        """
        if self._seismic is not None and (build is None or self._seismic.built_with(build)) and memory_budget is None:
            return self._seismic
        import_seismic()  # before a build's journal is written
        self._seismic = open_or_build(self.folder, self.docs, self.metadata.get("content_hash"), build, memory_budget)
        return self._seismic

    # ---------------------------------------------------------------- search
    def query_encoder(self, model: str | None = None, batch_size: int = 32, trust_remote_code: bool = False):
        """The encoder of this index's queries (the model and query settings of ``index.json``;
        created once; ``trust_remote_code``: run the model folder's own code)."""
        if self._encoder is None or model is not None:
            from spladekit.index.search import query_encoder

            self._encoder = query_encoder(self.metadata, model, batch_size, path=self.folder / "index.json", trust_remote_code=trust_remote_code)
        return self._encoder

    def search(
        self,
        queries,
        k: int = 1000,
        backend: str = "exact",
        query_ids: Sequence[str] | None = None,
        encoder=None,
        one_at_a_time: bool = False,
        seismic: SeismicSearchParams | None = None,
        seismic_build: SeismicBuildParams | None = None,
    ) -> SearchResult:
        """Top-``k`` documents of each query.

        Args:
            queries: ``[Q, V]`` sparse query vectors, a ``{query_id: text}`` mapping, or a list of texts
                (encoded with ``encoder``, else the model recorded in the index).
            k: results per query (≥ 1).
            backend: ``exact`` or ``seismic`` (the stored approximate index, built on first use).
            query_ids: ids of vector or list queries (default ``"0"``, ``"1"``, ...).
            one_at_a_time: search each query in its own call (as an application serving one query
                at a time does); latency is then measured per call.
            seismic, seismic_build: Seismic search and build parameters.

        Returns:
            :class:`SearchResult` (run, hits, latency statistics, settings record).

        Raises:
            ValueError: unknown backend, ``k`` < 1, vocabulary mismatch, or ids of the wrong number.
        """
        vectors, ids, settings = self.prepare(queries, k, backend, query_ids, encoder, one_at_a_time)
        if backend == "seismic":
            settings.seismic_build = dict(vars(self.seismic(seismic_build).params))  # built (and stored) on first use: not timed
            settings.seismic_search = dict(vars(seismic or SeismicSearchParams()))  # flat dataclasses: vars = asdict, 20× cheaper
        hits, seconds = self._search_named(vectors, k, backend, one_at_a_time, seismic, seismic_build)
        return SearchResult(ids, hits, LatencyStats.of(seconds, "one_at_a_time" if one_at_a_time else "batch"), settings, vectors,
                            np.asarray(seconds, dtype=np.float64))

    def prepare(self, queries, k: int, backend: str, query_ids=None, encoder=None, one_at_a_time: bool = False):
        """Check a search's arguments and encode text queries: ``([Q, V] vectors, Q ids, settings)``
        (the first half of :meth:`search`, shared with :class:`ShardedIndex`).

        Raises:
            ValueError: unknown backend, ``k`` < 1, ids of the wrong number, vocabulary mismatch.
            MissingExtraError: backend seismic without pyseismic-lsr (before any text is encoded).
        """
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if backend == "seismic":
            import_seismic()  # before any text is encoded
        k = check_k(k)  # before the settings record's own (pydantic) check
        settings = SearchSettings(backend=backend, k=k, one_at_a_time=one_at_a_time, index=[str(self.folder)],
                                  index_hash=[self.metadata.get("content_hash")], num_docs=self.docs.shape[0])
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
        if len(ids) != vectors.shape[0]:
            raise ValueError(f"{len(ids)} query ids for {vectors.shape[0]} queries")
        if vectors.shape[1] != self.docs.shape[1]:
            raise ValueError(f"vocabulary mismatch: queries have {vectors.shape[1]} columns, documents {self.docs.shape[1]}")
        return vectors, ids, settings

    def _search_named(self, vectors, k, backend, one_at_a_time, seismic, seismic_build):
        """Per query ``(doc_id, score)`` hits and the seconds each took, from the query vectors to
        the named hits (what :class:`LatencyStats` reports)."""
        if backend == "exact":
            def rows_of(part, timings):
                found = search_postings(part, self.postings, k, self.tie_rank, timings, maxima=self._pruning())
                return [([r for r, _ in h], [s for _, s in h]) for h in found]
        else:
            searcher = self.seismic(seismic_build)

            def rows_of(part, timings):
                began = time.perf_counter()
                found = searcher.search_arrays(searcher.prepare(part), k, seismic, self.tie_rank)
                if timings is not None:
                    timings.extend([(time.perf_counter() - began) / max(1, part.shape[0])] * part.shape[0])
                return [(rows, scores.tolist()) for rows, scores in found]

        def named(rows, scores):
            return list(zip(take_ids(self.doc_ids, rows), scores))

        hits, seconds = [], []
        if one_at_a_time:
            for i in range(vectors.shape[0]):
                began = time.perf_counter()
                hits.extend(named(*found) for found in rows_of(vectors[i : i + 1], None))
                seconds.append(time.perf_counter() - began)
            return hits, seconds
        found = rows_of(vectors, seconds)
        began = time.perf_counter()  # every query's ids in one gather (one call, not one per query)
        cuts = np.cumsum([0] + [len(rows) for rows, _ in found]).tolist()
        names = take_ids(self.doc_ids, np.concatenate([np.asarray(rows, np.int64) for rows, _ in found]) if found else [])
        hits = [list(zip(names[a:b], scores)) for a, b, (_, scores) in zip(cuts[:-1], cuts[1:], found)]
        share = (time.perf_counter() - began) / max(1, len(found))
        return hits, [spent + share for spent in seconds]

    def __len__(self) -> int:
        return self.docs.shape[0]

    def __repr__(self) -> str:
        return f"Index({str(self.folder)!r}, {self.docs.shape[0]} documents, {self.docs.nnz} entries{', format 1' if self.legacy else ''})"


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
                raise ValueError(f"shards were built by different models: {key} {first.metadata.get(key)!r} "
                                 f"({first.folder}) vs {shard.metadata.get(key)!r} ({shard.folder})")
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

    def search(self, queries, k: int = 1000, backend: str = "exact", query_ids=None, encoder=None, one_at_a_time: bool = False,
               seismic: SeismicSearchParams | None = None, seismic_build: SeismicBuildParams | None = None) -> SearchResult:
        """:meth:`Index.search` over every shard, merged (score descending, then document id)."""
        first = self.shards[0]
        vectors, ids, settings = first.prepare(queries, k, backend, query_ids, encoder, one_at_a_time)
        merged: list[list[tuple[str, float]]] = [[] for _ in ids]
        seconds = np.zeros(len(ids))
        for shard in self.shards:
            result = shard.search(vectors, k, backend, ids, None, one_at_a_time, seismic, seismic_build)
            for slot, hits in enumerate(result.hits):
                merged[slot].extend(hits)
            if len(result.seconds):
                seconds += result.seconds  # per query; shards searched one after the other here (in parallel elsewhere)
            settings.seismic_build, settings.seismic_search = result.settings.seismic_build, result.settings.seismic_search
        hits = [sorted(h, key=lambda pair: (-pair[1], pair[0]))[:k] for h in merged]
        settings.index = [str(s.folder) for s in self.shards]
        settings.index_hash = [s.metadata.get("content_hash") for s in self.shards]
        settings.num_docs = len(self)
        return SearchResult(ids, hits, LatencyStats.of(seconds, "one_at_a_time" if one_at_a_time else "batch"), settings, vectors, seconds)


def open_index(folders: str | Path | Sequence[str | Path], verify: bool = False) -> Index | ShardedIndex:
    """One folder → :class:`Index`; several → :class:`ShardedIndex` (``verify``: see :meth:`Index.open`)."""
    if isinstance(folders, (str, Path)):
        return Index.open(folders, verify=verify)
    if len(folders) == 1:
        return Index.open(folders[0], verify=verify)
    return ShardedIndex([Index.open(f, verify=verify) for f in folders])
