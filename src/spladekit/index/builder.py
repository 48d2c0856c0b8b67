"""Building an index folder from an encoder and a corpus: :class:`IndexBuilder` (streamed, resumable,
data-parallel), and ``spladekit index``'s job, :func:`build_index` with its :class:`IndexConfig`.

The corpus is read in chunks of ``chunk_size`` documents; each encoded chunk is stored in the build's
journal (:class:`spladekit.index.chunks.ChunkJournal`) before the next one starts, so a killed build
restarts where it stopped and never encodes a finished chunk twice. Under ``torchrun`` chunk ``c`` is
encoded by rank ``c mod W`` and rank 0 then writes the folder (:func:`spladekit.index.writer.write_index`,
atomically). A chunk holds the same documents whatever ``W`` is, so the folder equals a one-process
one up to float32 rounding: the same computation, bit-identical only where the BLAS makes the same
choices in every process, which none promises. Processes meet through
:func:`spladekit.distributed.init_distributed` (gloo on CPU; only barriers are used; chunks travel
through the file system next to the index folder).

Run::

    torchrun --nproc_per_node 4 -m spladekit index --model M --data DIR --out INDEX
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping, Sized
from dataclasses import asdict
from pathlib import Path

from pydantic import model_validator

from spladekit.data.numbers import check_int
from spladekit.index.chunks import ChunkIds, ChunkJournal, chunk_digest, chunk_truncated, encoder_digest, load_chunk
from spladekit.index.layout import DEFAULT_BUDGET, FORMAT, canonical, model_record
from spladekit.settings import Settings


class IndexBuilder:
    """Encodes a corpus into an index folder (module docstring): owns the build's journal, the check
    that no document id repeats, the processes' barriers and the folder's write.

    Args:
        encoder: a :class:`~spladekit.model.encoder.SpladeEncoder` (anything with ``encode_documents``,
            ``last_truncated``, ``vocab_size``, and optionally ``metadata``, ``vocabulary``, ``batch_size``).
        out: the index folder (replaced atomically when it exists).
        chunk_size: documents per chunk (the unit of memory, resumption and parallelism).
        metadata: extra ``index.json`` entries (model id, revision, configuration, ...).
        show_progress: a bar over the documents (rank 0).
        distributed: share the chunks among the processes of a ``torchrun`` job; False: this process
            builds alone (e.g. an evaluation on rank 0 during training).
        memory_budget: bytes of working memory of writing the folder from the chunks
            (:mod:`spladekit.index.writer`: independent of the corpus size but for the ids).

    Raises:
        ValueError: ``chunk_size`` not an integer ≥ 1, or a budget out of range.
        OutputPathError: ``out`` is an existing file (checked before encoding).
    """

    def __init__(
        self,
        encoder,
        out: str | Path,
        chunk_size: int = 10_000,
        metadata: dict | None = None,
        show_progress: bool = False,
        distributed: bool = True,
        memory_budget: int = DEFAULT_BUDGET,
    ):
        from spladekit.errors import OutputPathError
        from spladekit.index.writer import check_budget

        check_budget(memory_budget)
        check_int(chunk_size, "chunk_size", 1)
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise OutputPathError(f"{self.out}: is a file; an index is a folder (the file is left as it is)")
        self.encoder, self.chunk_size, self.metadata = encoder, chunk_size, dict(metadata or {})
        self.show_progress, self.distributed, self.memory_budget = show_progress, distributed, memory_budget
        self.journal = ChunkJournal(self.out)
        self.encoder_meta = asdict(encoder.metadata) if getattr(encoder, "metadata", None) is not None else {}
        self.stats = {"chunks": 0, "encoded": 0, "reused": 0}

    def build(self, corpus) -> Path | None:
        """Encode ``corpus`` into the folder.

        Args:
            corpus: a BEIR folder or ``corpus.jsonl[.gz]`` (streamed from disk), a ``{doc_id: text}``
                mapping, or an iterable of ``(doc_id, text)``; it is read again on resume, so it must
                give the same documents in the same order.

        Returns:
            The index folder on rank 0 (:attr:`stats`: chunks, encoded, reused, truncated_docs); None
            on other ranks.

        Raises:
            ValueError: a repeated document id, or an empty corpus.
            DataFormatError: a malformed corpus file.
        """
        from spladekit.distributed import DistInfo, barrier, init_distributed

        dist = init_distributed() if self.distributed else DistInfo()
        sync = barrier if self.distributed else (lambda: None)
        try:
            if dist.is_main:
                self.journal.start(self._fingerprint(corpus))
            sync()
            num_docs = self._encode(corpus, dist)
            sync()
            if not dist.is_main:
                sync()
                return None
            self._write(num_docs, dist.world_size)
            sync()
            return self.out
        finally:
            dist.close()

    def _fingerprint(self, corpus) -> dict:
        """What a journal left by an earlier build must match to be resumed: the settings and the
        model itself (:func:`~spladekit.index.chunks.encoder_digest`)."""
        return {
            "format": FORMAT,
            "chunk_size": self.chunk_size,
            "vocab_size": int(self.encoder.vocab_size),
            "encoder": self.encoder_meta,
            "model": encoder_digest(self.encoder),
            "corpus": str(corpus) if isinstance(corpus, (str, Path)) else None,
            "metadata": json.loads(json.dumps(self.metadata, default=str)),
        }

    def _encode(self, corpus, dist) -> int:
        """Encode this process's chunks not in the journal yet (chunk ``c``: rank ``c mod W``); the
        number of documents. Every process reads every id (a repeated one is refused on each)."""
        from tqdm.auto import tqdm

        show = self.show_progress and dist.is_main
        bar = tqdm(desc="documents", unit="doc", total=corpus_size(corpus) if show else None, disable=not show)
        per_batch = show and reports_batches(self.encoder)  # the bar moves as batches finish
        seen: set[str] = set()
        for number, chunk in enumerate(chunks(documents(corpus), self.chunk_size)):
            self.stats["chunks"] += 1
            ids = [doc_id for doc_id, _ in chunk]
            for doc_id in ids:
                if doc_id in seen:
                    raise ValueError(f"document id {doc_id!r} repeats in the corpus")
                seen.add(doc_id)
            if number % dist.world_size != dist.rank:
                bar.update(len(chunk))  # another process encodes it
                continue
            digest = chunk_digest(chunk)
            if self.journal.holds(number, digest):
                self.stats["reused"] += 1
                bar.update(len(chunk))
                continue
            extra = {"on_batch": bar.update} if per_batch else {}
            texts = [text for _, text in chunk]
            vectors = canonical(
                self.encoder.encode_documents(texts, batch_size=getattr(self.encoder, "batch_size", 32), **extra)
            )
            self.journal.save(number, vectors, ids, int(getattr(self.encoder, "last_truncated", 0)), digest)
            self.stats["encoded"] += 1
            if not per_batch:
                bar.update(len(chunk))
        bar.close()
        if not seen:
            raise ValueError(f"the corpus {corpus if isinstance(corpus, (str, Path)) else ''} holds no document")
        return len(seen)

    def _write(self, num_docs: int, world_size: int) -> None:
        """Write the folder from the journal's chunks (rank 0), then remove the journal."""
        from spladekit.index.writer import write_index

        paths = self.journal.paths(self.stats["chunks"])
        truncated = sum(chunk_truncated(path) for path in paths)
        meta = dict(self.encoder_meta)
        meta.update(self.metadata)
        if "model" not in meta and self.encoder_meta.get("source"):  # the query model, so search takes texts
            from spladekit.data.resolve import resolve_model

            meta.update(model_record(self.encoder_meta["source"], resolve_model(self.encoder_meta["source"])))
        meta.update(truncated_docs=truncated, world_size=world_size, chunk_size=self.chunk_size)
        vocabulary = getattr(self.encoder, "vocabulary", None)
        write_index(
            self.out,
            lambda: (load_chunk(path) for path in paths),
            ChunkIds(paths, num_docs),
            int(self.encoder.vocab_size),
            meta,
            list(vocabulary) if vocabulary is not None else None,
            self.memory_budget,
        )
        self.journal.remove()
        self.stats["truncated_docs"] = truncated

    def encodes_queries_as_recorded(self, meta: dict) -> bool:
        """Whether the build's encoder encodes queries as ``meta`` (the written ``index.json``) says
        they are encoded (same model, max length, pruning, pooling and activation), so that searching
        the new index need not load the model again."""
        if not callable(getattr(self.encoder, "encode_queries", None)) or not self.encoder_meta.get("source"):
            return False
        if self.metadata.get("model", self.encoder_meta["source"]) != self.encoder_meta["source"]:
            return False
        keys = ("query_max_length", "query_top_k", "query_pruning", "pooling", "activation")
        return all(meta.get(key) == self.encoder_meta.get(key) for key in keys)


# ----------------------------------------------------------------------------------- the corpus
def corpus_size(corpus) -> int | None:
    """Number of documents, for the progress bar: ``len`` of a sized corpus, the record count of a
    corpus file (one pass over its bytes); None for other iterables."""
    if isinstance(corpus, (str, Path)):
        from spladekit.data.beir import count_corpus

        return count_corpus(corpus)
    return len(corpus) if isinstance(corpus, Sized) else None


def documents(corpus) -> Iterator[tuple[str, str]]:
    """``(doc_id, text)`` of a corpus file or folder (streamed), a mapping or an iterable of pairs (ids as strings)."""
    if isinstance(corpus, (str, Path)):
        from spladekit.data.beir import iter_corpus

        yield from iter_corpus(corpus)
    elif isinstance(corpus, Mapping):
        yield from corpus.items()
    else:
        for doc_id, text in corpus:
            yield str(doc_id), text


def reports_batches(encoder) -> bool:
    """Whether ``encoder.encode`` takes ``on_batch`` (a :class:`SpladeEncoder` does; stand-ins need not)."""
    try:
        return "on_batch" in inspect.signature(encoder.encode).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def chunks(items: Iterator, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ----------------------------------------------------------------------------------- spladekit index
class IndexConfig(Settings):
    """What ``spladekit index`` was asked to do (saved in ``index.json`` under ``config``; a settings
    record: :class:`spladekit.settings.Settings`).

    Attributes:
        model: model folder or hub id.
        data: BEIR folder or dataset name.
        out: index folder.
        batch_size: documents per forward pass.
        doc_max_length: None: the model's saved value (``spladekit.json``) or 256.
        doc_top_k: keep the k largest weights per document (None: the model's saved value).
        head_impl: SPLADE head, ``"plain"`` / ``"fused"`` / None (default).
        doc_pruning: a pruning rule for every document vector, ``KIND=VALUE`` (``top_k=64``,
            ``mass=0.9``, ``max_ratio=0.1``, ``threshold=0.05``; :mod:`spladekit.model.pruning`),
            applied after ``doc_top_k``; None: the model's saved rule. ``index.json`` records the rule
            applied (``doc_pruning``, as its record).
        chunk_size: documents per chunk (unit of memory, resumption and parallelism).
        trust_remote_code: run the model folder's own code (:mod:`spladekit.model.remote_code`).

    Raises:
        ValueError (pydantic's ``ValidationError``): at construction, a value the encoder would refuse
            (before a model loads or the temporary ``.OUT.build`` folder is made; a length holds the 2
            special tokens), naming the option (``--doc-max-length``, ``--doc-top-k``, ...) and the
            bound; an unknown field.
    """

    model: str
    data: str
    out: str
    batch_size: int = 32
    doc_max_length: int | None = None
    doc_top_k: int | None = None
    head_impl: str | None = None
    doc_pruning: str | None = None
    chunk_size: int = 10_000
    trust_remote_code: bool = False

    @model_validator(mode="before")
    @classmethod
    def _options(cls, values):
        """The options' own checks, on the values as given (before pydantic converts any), each message
        naming the command-line option."""
        if not isinstance(values, dict):
            return values
        for name, least, note in (
            ("doc_max_length", 2, " (special tokens included)"),
            ("doc_top_k", 1, " (or left out: every weight kept)"),
            ("batch_size", 1, ""),
            ("chunk_size", 1, ""),
        ):
            if values.get(name) is not None:
                check_int(values[name], "--" + name.replace("_", "-"), least, note=note)
        if values.get("doc_pruning") is not None:
            from spladekit.model.pruning import PruningRule

            try:
                PruningRule.parse(values["doc_pruning"])
            except ValueError as exc:
                raise ValueError(f"--doc-pruning: {exc}") from None
        return values


def build_index(config: IndexConfig, show_progress: bool = False, memory_budget: int | None = None) -> Path | None:
    """Encode ``config.data``'s corpus with ``config.model`` into the index folder ``config.out``.

    Runs as one process, or as every rank of a ``torchrun`` job (module docstring); a killed run
    started again with the same configuration resumes (finished chunks are not encoded again).
    ``index.json`` records the model id and revision, the max lengths and pruning the model's
    metadata gave (``spladekit.json``), the number of truncated documents, and ``config``;
    ``vocab.json`` the model's vocabulary. ``memory_budget``: bytes of working memory of the folder's
    write (:mod:`spladekit.index.writer`; None: its default); not recorded, since the folder is the
    same byte for byte at any budget (a resumed build may use another).

    Returns:
        The index folder on rank 0; None on other ranks.

    Raises:
        ResolutionError: the model or data cannot be found.
        DataFormatError: malformed corpus.
        ValueError: a budget out of range (or a bad max length / top-k, see :class:`SpladeEncoder`).
        OutputPathError: ``out`` is an existing file (checked before encoding).
    """
    from spladekit.data.beir import find_file
    from spladekit.data.resolve import resolve_dataset, resolve_model
    from spladekit.distributed import init_distributed
    from spladekit.errors import OutputPathError
    from spladekit.model.encoder import SpladeEncoder

    if memory_budget is not None:
        from spladekit.index.writer import check_budget

        check_budget(memory_budget)  # before the model loads
    if Path(config.out).exists() and not Path(config.out).is_dir():
        raise OutputPathError(f"{config.out}: is a file; an index is a folder (the file is left as it is)")
    dist = init_distributed()
    try:
        folder = resolve_dataset(config.data)
        corpus = find_file(folder, "corpus")
        location = resolve_model(config.model)
        encoder = SpladeEncoder.from_pretrained(
            location,
            doc_max_length=config.doc_max_length,
            doc_top_k=config.doc_top_k,
            doc_pruning=config.doc_pruning,
            batch_size=config.batch_size,
            head_impl=config.head_impl,
            trust_remote_code=config.trust_remote_code,
            device=dist.device(),
        )  # one GPU per rank under torchrun; else SpladeEncoder's default
        metadata = dict(model_record(config.model, location), data=str(folder), config=config.model_dump())
        budget = {} if memory_budget is None else {"memory_budget": memory_budget}
        return IndexBuilder(encoder, config.out, config.chunk_size, metadata, show_progress, **budget).build(corpus)
    finally:
        dist.close()
