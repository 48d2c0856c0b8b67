"""PyTerrier transformers over spladekit: encode queries and documents, index, retrieve, load texts.

``pip install 'spladekit[pyterrier]'`` (PyTerrier without Java: these transformers, ``pt.Experiment``
and the significance tests need none). Importing this module imports PyTerrier (its transformer
classes are the base classes here) but neither torch nor a model: a model loads when a transformer
first encodes.

Column layout, the one of pyt_splade and pyterrier-pisa: a query's sparse vector is its
``query_toks`` column, a document's its ``toks`` column, each a ``{token: weight}`` dict of the
model tokenizer's token strings (:attr:`spladekit.model.encoder.SpladeEncoder.vocabulary`) and
float weights, active terms only, multiplied by ``scale`` (default 1: the SPLADE weights themselves;
pyterrier-pisa multiplies by its own ``toks_scale``/``scale``, 100, before quantising). So
``kit.doc_encoder() >> PisaIndex(path).toks_indexer()`` indexes spladekit vectors in PISA and
``kit.query_encoder() >> pisa_index.quantized()`` searches them, as with pyt_splade. Two things
PISA does that the vectors do not: it keeps ``⌊100·w⌋`` of a document weight and repeats a query
term ``⌊100·q⌋`` times, and it lower-cases query terms, so a token with capitals (``[CLS]``, the
words of a cased tokenizer) never matches there. A column the tokenizer does not name is
``[spladekit:ID]``; two columns of one name are refused (:func:`token_names`).

Transformers (made by :class:`SpladeKit`, or directly):

* :class:`QueryEncoder` — ``query`` → ``query_toks``;
* :class:`DocEncoder` — ``text`` (or another field) → ``toks``;
* :class:`Indexer` — documents (``docno`` + text) → a spladekit index folder
  (:meth:`spladekit.index.index.Index.build`: streamed in chunks, resumable, written atomically);
* :class:`Retriever` — queries (``query_toks`` when present, else ``query`` encoded) → results
  (``qid``, ``docno``, ``score``, ``rank``) from a spladekit index, exact or Seismic search;
* :class:`TextLoader` — results → results with each document's ``text`` from a corpus.

Example::

    import pyterrier as pt
    from spladekit.pyterrier import SpladeKit

    kit = SpladeKit("naver/splade-v3")
    kit.indexer("scifact.idx").index(corpus_iter)          # dicts with docno and text
    splade = kit.retriever("scifact.idx", k=1000)
    pt.Experiment([splade], topics, qrels, ["nDCG@10", "R@100"])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from spladekit.errors import DataFormatError, require_extra

pt = require_extra("pyterrier", "spladekit.pyterrier", "python-terrier", "pyterrier")

QUERY_TOKS = "query_toks"
"""The column of a query's sparse vector, ``{token: weight}`` (pyt_splade's and pyterrier-pisa's name)."""
DOC_TOKS = "toks"
"""The column of a document's sparse vector, ``{token: weight}`` (pyt_splade's and pyterrier-pisa's name)."""

__all__ = [
    "SpladeKit",
    "QueryEncoder",
    "DocEncoder",
    "Indexer",
    "Retriever",
    "TextLoader",
    "token_names",
    "rows_to_toks",
    "toks_to_rows",
    "QUERY_TOKS",
    "DOC_TOKS",
]


class SpladeKit:
    """A spladekit model for PyTerrier pipelines: makes the transformers of this module, sharing one
    encoder (loaded on first use).

    Args:
        model: a model folder or hub id (:meth:`SpladeEncoder.from_pretrained`), or a loaded
            :class:`~spladekit.model.encoder.SpladeEncoder` (or ONNX encoder).
        batch_size: texts per forward pass.
        device: torch device (default: CUDA when available).
        trust_remote_code: run the custom code of a model folder (see
            :func:`spladekit.model.folders.read_model_folder`).
        **options: further :meth:`SpladeEncoder.from_pretrained` arguments (``query_max_length``,
            ``doc_max_length``, ``query_top_k``, ``doc_top_k``, ``head_impl``, ...).
    """

    def __init__(self, model, *, batch_size: int = 32, device=None, trust_remote_code: bool = False, **options):
        self._model = model
        self._options = dict(options, batch_size=batch_size, device=device)
        if trust_remote_code:
            self._options["trust_remote_code"] = True
        self._encoder = None if isinstance(model, (str, Path)) else model

    @property
    def encoder(self):
        """The encoder (loaded on first use)."""
        if self._encoder is None:
            from spladekit.model.encoder import SpladeEncoder

            self._encoder = SpladeEncoder.from_pretrained(self._model, **self._options)
        return self._encoder

    def query_encoder(self, scale: float = 1.0, verbose: bool = False) -> QueryEncoder:
        """``query`` → ``query_toks`` (see :class:`QueryEncoder`)."""
        return QueryEncoder(self, scale=scale, verbose=verbose)

    def doc_encoder(self, text_field: str = "text", scale: float = 1.0, verbose: bool = False) -> DocEncoder:
        """``text_field`` → ``toks`` (see :class:`DocEncoder`)."""
        return DocEncoder(self, text_field=text_field, scale=scale, verbose=verbose)

    def indexer(
        self, path: str | Path, text_field: str = "text", chunk_size: int = 10_000, verbose: bool = False
    ) -> Indexer:
        """Documents → the spladekit index folder ``path`` (see :class:`Indexer`)."""
        return Indexer(self, path, text_field=text_field, chunk_size=chunk_size, verbose=verbose)

    def retriever(self, index, k: int = 1000, searcher=None) -> Retriever:
        """Queries → results from ``index`` (a folder or an open :class:`~spladekit.index.index.Index`)
        by ``searcher`` (a :class:`~spladekit.index.searcher.SearcherConfig`; None: exact), queries
        encoded with this model (see :class:`Retriever`)."""
        return Retriever(index, self, k=k, searcher=searcher)

    @staticmethod
    def text_loader(corpus, field: str = "text") -> TextLoader:
        """Results → results with ``field`` from ``corpus`` (see :class:`TextLoader`)."""
        return TextLoader(corpus, field=field)

    def __repr__(self) -> str:
        return (
            f"SpladeKit({str(self._model) if isinstance(self._model, (str, Path)) else type(self._model).__name__!r})"
        )


def _encoder_of(model):
    """The encoder of a :class:`SpladeKit`, a model name (loaded), or an encoder itself."""
    if isinstance(model, SpladeKit):
        return model.encoder
    if isinstance(model, (str, Path)):
        return SpladeKit(model).encoder
    return model


def _check_scale(scale) -> float:
    import math

    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def token_names(encoder) -> list[str]:
    """The token string of each column of ``encoder``'s vectors (its ``vocabulary``).

    Raises:
        ValueError: two columns share a name (their weights would merge in a ``{token: weight}`` dict).
    """
    names = list(encoder.vocabulary)
    if len(set(names)) != len(names):
        seen: set[str] = set()
        twice = next(n for n in names if n in seen or seen.add(n))
        raise ValueError(
            f"the vocabulary names two columns {twice!r}: a {{token: weight}} column cannot tell them apart"
        )
    return names


def rows_to_toks(matrix, names: list[str], scale: float = 1.0) -> list[dict[str, float]]:
    """``[N, V]`` CSR rows → N ``{token: weight · scale}`` dicts (stored entries in column order)."""
    matrix = matrix.tocsr()
    out = []
    for row in range(matrix.shape[0]):
        start, end = matrix.indptr[row], matrix.indptr[row + 1]
        values = matrix.data[start:end].astype("float64") * scale
        out.append({names[j]: float(w) for j, w in zip(matrix.indices[start:end].tolist(), values.tolist())})
    return out


def toks_to_rows(toks: Iterable[Mapping[str, float]], names: list[str], column: str = QUERY_TOKS):
    """``{token: weight}`` dicts → ``[N, V]`` float32 CSR (columns named by ``names``).

    Raises:
        ValueError: a value is not a dict, a token is not in ``names``, or a weight is not a number
            finite in float32 (the type the rows are stored in).
    """
    import math

    import numpy as np
    import scipy.sparse as sp

    from spladekit.data.numbers import FLOAT32_MAX

    ids = {name: j for j, name in enumerate(names)}
    toks = list(toks)
    rows, cols, vals = [], [], []
    for row, entry in enumerate(toks):
        if not isinstance(entry, Mapping):
            raise ValueError(f"row {row}: {column} must be a {{token: weight}} dict, got {type(entry).__name__}")
        for token, weight in entry.items():
            if token not in ids:
                raise ValueError(f"row {row}: {column} token {token!r} is not in the model's vocabulary")
            if isinstance(weight, bool) or not isinstance(weight, (int, float, np.floating, np.integer)):
                raise ValueError(f"row {row}: {column} weight of {token!r} must be a finite number, got {weight!r}")
            try:  # a 400-digit integer raises OverflowError
                value = float(weight)
            except OverflowError:
                value = math.inf
            if not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):  # 1e39: inf in float32
                raise ValueError(
                    f"row {row}: {column} weight of {token!r} must be a finite number in float32 range, got {weight!r}"
                )
            rows.append(row)
            cols.append(ids[token])
            vals.append(value)
    matrix = sp.csr_matrix(
        (np.asarray(vals, np.float32), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
        shape=(len(toks), len(names)),
    )
    matrix.sum_duplicates()
    return matrix


class QueryEncoder(pt.Transformer):
    """Adds ``query_toks`` (``{token: weight}``) to each query row, encoded from ``query`` with the
    model's query settings (:meth:`SpladeEncoder.encode_queries`).

    Args:
        model: a :class:`SpladeKit`, a model name, or an encoder.
        scale: factor applied to every weight (> 0).
    """

    def __init__(self, model, scale: float = 1.0, verbose: bool = False):
        self.model, self.scale, self.verbose = model, _check_scale(scale), verbose

    def transform(self, inp):
        """``inp`` (a query frame with ``query``) with a ``query_toks`` column added, one dict a row."""
        pt.validate.query_frame(inp, ["query"])
        encoder = _encoder_of(self.model)
        vectors = encoder.encode_queries(inp["query"].tolist(), **({"show_progress": True} if self.verbose else {}))
        return inp.assign(**{QUERY_TOKS: rows_to_toks(vectors, token_names(encoder), self.scale)})


class DocEncoder(pt.Transformer):
    """Adds ``toks`` (``{token: weight}``) to each document row, encoded from ``text_field`` with the
    model's document settings (:meth:`SpladeEncoder.encode_documents`).

    Args:
        model: a :class:`SpladeKit`, a model name, or an encoder.
        text_field: the column holding each document's text.
        scale: factor applied to every weight (> 0).
    """

    def __init__(self, model, text_field: str = "text", scale: float = 1.0, verbose: bool = False):
        self.model, self.text_field, self.scale, self.verbose = model, text_field, _check_scale(scale), verbose

    def transform(self, inp):
        """``inp`` (a frame with ``text_field``) with a ``toks`` column added, one dict a row."""
        pt.validate.columns(inp, includes=[self.text_field])
        encoder = _encoder_of(self.model)
        vectors = encoder.encode_documents(
            inp[self.text_field].tolist(), **({"show_progress": True} if self.verbose else {})
        )
        return inp.assign(**{DOC_TOKS: rows_to_toks(vectors, token_names(encoder), self.scale)})


class Indexer(pt.Indexer):
    """Encode documents into a spladekit index folder (:meth:`spladekit.index.index.Index.build`:
    chunks of ``chunk_size`` documents, each saved as it is encoded, so a killed build given the same
    documents again resumes; the folder is replaced atomically when it exists).

    :meth:`index` takes dicts with ``docno`` and ``text_field`` (``pt.get_dataset(...).get_corpus_iter()``,
    a DataFrame's records) and returns the open :class:`~spladekit.index.index.Index`.
    """

    def __init__(
        self, model, path: str | Path, text_field: str = "text", chunk_size: int = 10_000, verbose: bool = False
    ):
        self.model, self.path, self.text_field = model, Path(path), text_field
        self.chunk_size, self.verbose = chunk_size, verbose

    def index_inputs(self):
        """The fields :meth:`index` reads from each document: ``docno`` and ``text_field``."""
        return [["docno", self.text_field]]

    def index(self, iter_dict):
        """Encode the documents of ``iter_dict`` into the index folder and return it open (class docstring).

        Raises:
            DataFormatError: a document without ``docno`` or ``text_field`` (naming its position).
        """
        from spladekit.index.index import Index

        field = self.text_field

        def documents():
            for number, record in enumerate(iter_dict):
                if "docno" not in record or field not in record:
                    raise DataFormatError(
                        self.path,
                        f"document {number + 1} has no {'docno' if 'docno' not in record else field!r} "
                        f"(it has {sorted(record)})",
                        field="docno" if "docno" not in record else field,
                    )
                yield str(record["docno"]), record[field]

        return Index.build(
            _encoder_of(self.model),
            documents(),
            self.path,
            chunk_size=self.chunk_size,
            show_progress=self.verbose,
            distributed=False,
        )


class Retriever(pt.Transformer):
    """Search a spladekit index: each query row becomes up to ``k`` result rows (``docno``, ``score``,
    ``rank`` from 0, the query's columns kept), in spladekit's rank order (score descending, then
    document id; documents scoring 0 are not returned).

    Query vectors: the ``query_toks`` column when the frame has one (any encoder's output with the
    index's vocabulary, e.g. :class:`QueryEncoder` upstream), else ``query`` encoded by ``model``
    (default: the model recorded in the index).

    Args:
        index: an index folder or an open :class:`~spladekit.index.index.Index`.
        model: a :class:`SpladeKit`, a model name, an encoder, or None (the index's model).
        k: results per query (≥ 1).
        searcher: the search method and its parameters (:meth:`Index.search`): ``ExactConfig()``
            (None: the default), ``SeismicConfig(search=SeismicSearchParams(...), build=...)``
            (:mod:`spladekit.index.searcher`, :mod:`spladekit.index.seismic_store`).

    Raises (when transforming):
        MissingExtraError, ValueError: the searcher's refusal (:meth:`Index.check`), before any
            query is encoded.
    """

    def __init__(self, index, model=None, k: int = 1000, searcher=None):
        from spladekit.index.searcher import ExactConfig

        self.index, self.model, self.k = index, model, k
        self.searcher = ExactConfig() if searcher is None else searcher
        self._open = None
        self._names: list[str] | None = None

    def _index(self):
        from spladekit.index.index import Index

        if self._open is None:
            self._open = self.index if isinstance(self.index, Index) else Index.open(self.index)
        return self._open

    def _queries(self, inp, index):
        """The ``[Q, V]`` query vectors of ``inp`` (from ``query_toks``, else encoded from ``query``)."""
        if QUERY_TOKS in inp.columns:
            from spladekit.index.layout import load_vocabulary

            if self._names is None:
                self._names = load_vocabulary(index.folder)
            if self._names is None:
                raise DataFormatError(
                    index.folder / "vocab.json", "the index has no vocabulary: query_toks cannot be mapped to columns"
                )
            return toks_to_rows(inp[QUERY_TOKS].tolist(), self._names)
        pt.validate.query_frame(inp, ["query"])
        encoder = index.query_encoder() if self.model is None else _encoder_of(self.model)
        return encoder.encode_queries(inp["query"].tolist())

    def transform(self, inp):
        """``inp`` (a query frame) searched: its result frame (class docstring)."""
        import pandas as pd

        pt.validate.query_frame(inp)
        index = self._index()
        index.check(self.searcher)  # before any query is encoded
        vectors = self._queries(inp, index)
        ids = [str(i) for i in range(len(inp))]
        result = index.search(vectors, k=self.k, searcher=self.searcher, query_ids=ids)
        position, docnos, scores, ranks = [], [], [], []
        for row, hits in enumerate(result.hits):
            for rank, (doc_id, score) in enumerate(hits):
                position.append(row)
                docnos.append(doc_id)
                scores.append(float(score))
                ranks.append(rank)
        kept = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns])
        out = kept.iloc[position].reset_index(drop=True)
        return out.assign(docno=pd.Series(docnos, dtype=object), score=scores, rank=ranks)


class TextLoader(pt.Transformer):
    """Adds ``field`` (the document text) to each row from its ``docno``: a BEIR folder or
    ``corpus.jsonl[.gz]`` (``title + " " + text``, :func:`spladekit.data.beir.read_corpus`) or a
    ``{docno: text}`` mapping, read once.

    Raises (when transforming):
        KeyError: a ``docno`` that the corpus does not hold (naming it).
    """

    def __init__(self, corpus, field: str = "text"):
        self.corpus, self.field = corpus, field
        self._texts = None

    def _lookup(self) -> Mapping[str, str]:
        if self._texts is None:
            if isinstance(self.corpus, Mapping):
                self._texts = self.corpus
            else:
                from spladekit.data.beir import read_corpus

                self._texts = read_corpus(self.corpus)
        return self._texts

    def transform(self, inp):
        """``inp`` (a frame with ``docno``) with the ``field`` column of each document's text added."""
        pt.validate.columns(inp, includes=["docno"])
        texts = self._lookup()
        missing = next((d for d in inp["docno"] if str(d) not in texts), None)
        if missing is not None:
            raise KeyError(
                f"docno {missing!r} is not in the corpus {self.corpus if not isinstance(self.corpus, Mapping) else '(mapping)'}"
            )
        return inp.assign(**{self.field: [texts[str(d)] for d in inp["docno"]]})
