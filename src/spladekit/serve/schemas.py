"""Requests and responses of ``spladekit serve`` as pydantic models (the OpenAPI page shows them).

A request model depends on the index it is checked against (vocabulary size ``V``, the backends
the server has, its limits), so :func:`request_model` builds one per server. Every rule below is
a refusal with a message naming the field (``vector.0.indices``, ``query.3``, ``k``), never a
silent correction:

- exactly one of ``query`` (a text or a list of texts) and ``vector`` (one sparse vector or a list);
  1 to ``max_queries`` queries;
- a text: a JSON string with a character other than whitespace and Unicode control or format
  characters (``"\\u200b"`` or ``"\\u0000"`` alone tokenise to nothing, and the query vector of the
  special tokens alone would be answered with hits that mean nothing), at most ``max_query_chars`` characters
  (the tokenizer then truncates it to the model's query max length, as in :meth:`Index.search`);
- a vector: ``indices`` integers in ``[0, V)``, none repeated (a repeated column would be summed by
  the exact kernel and not by Seismic, see :mod:`spladekit.index.seismic`); ``values`` as many,
  finite, ``0 ≤ w ≤`` :data:`MAX_WEIGHT` (SPLADE weights log(1 + ReLU(x)) are ≥ 0; the bound keeps
  float32 query weights and scores finite: a JSON number like 1e39 is finite as float64 but ``inf``
  as float32);
- ``k`` an integer in ``[1, max_k]``; ``backend`` one the server has; ``seismic`` parameters only
  with ``backend: "seismic"``, ``two_step`` ones (``candidates`` in ``[1,`` :data:`MAX_CANDIDATES` ``]``)
  only with ``backend: "two_step"``; ``top_terms`` only with ``fields: "terms"``;
- numbers are JSON numbers of the right kind (``"10"``, ``10.0`` or ``true`` for ``k`` are refused:
  strict types), and unknown fields are refused (``extra="forbid"``).
"""

from __future__ import annotations

import math
import unicodedata
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

MAX_WEIGHT = 1e6
"""Largest query weight accepted (float32 holds 3.4e38; 1e6 × an impact × V terms stays far below)."""

FIELDS = ("ids", "scores", "terms")

MAX_CANDIDATES = 100_000
"""Most candidates a two-step request may ask to rescore (each costs a look-up per query term)."""


def _visible(text: str) -> bool:
    """Whether ``text`` has a character that is neither whitespace nor of Unicode category Cc
    (control: NUL, ...) or Cf (format: zero-width space U+200B, BOM, ...)."""
    return any(not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf") for c in text)


def _listify(value):
    """One item or a list of items → a list (``null`` stays ``None``)."""
    return value if value is None or isinstance(value, list) else [value]


def request_model(
    vocab_size: int,
    backends: tuple[str, ...],
    max_k: int = 1000,
    max_query_chars: int = 2000,
    max_queries: int = 64,
    max_top_terms: int = 1000,
    unavailable: dict[str, str] | None = None,
    max_knn: int = 0,
) -> type[BaseModel]:
    """The ``POST /search`` body model for an index with ``vocab_size`` columns and these limits;
    ``unavailable``: why a backend not in ``backends`` is not served (told to a request asking for it);
    ``max_knn``: the neighbours per document of the Seismic index's k-NN graph (the largest ``n_knn``).

    Returns:
        a pydantic model class ``SearchRequest``; its validated instances have ``query`` (list of
        texts) or ``vector`` (list of ``SparseVector``) set, never both.
    """

    return _search_request_model(
        _sparse_vector_model(vocab_size),
        _seismic_model(vocab_size, max_knn),
        _two_step_model(),
        backends,
        max_k,
        max_query_chars,
        max_queries,
        max_top_terms,
        unavailable or {},
    )


def _sparse_vector_model(vocab_size: int) -> type[BaseModel]:
    """``SparseVector``: a query vector over ``vocab_size`` columns (the module's rules)."""

    class SparseVector(BaseModel):
        """A sparse query vector: weight ``values[i]`` at vocabulary column ``indices[i]``."""

        model_config = ConfigDict(extra="forbid")

        indices: list[StrictInt] = Field(
            max_length=vocab_size, description=f"vocabulary columns in [0, {vocab_size}), none repeated"
        )
        values: list[StrictFloat] = Field(max_length=vocab_size, description=f"weights, finite, 0 ≤ w ≤ {MAX_WEIGHT:g}")

        @field_validator("indices")
        @classmethod
        def _columns(cls, indices: list[int]) -> list[int]:
            seen: set[int] = set()
            for i, column in enumerate(indices):
                if not 0 <= column < vocab_size:
                    raise ValueError(f"entry {i} is {column}, outside the vocabulary [0, {vocab_size})")
                if column in seen:
                    raise ValueError(f"entry {i}: column {column} is repeated (give each column once)")
                seen.add(column)
            return indices

        @field_validator("values")
        @classmethod
        def _weights(cls, values: list[float]) -> list[float]:
            for i, weight in enumerate(values):
                if not math.isfinite(weight):
                    raise ValueError(f"entry {i} is {weight}, not a finite number")
                if weight < 0 or weight > MAX_WEIGHT:
                    raise ValueError(f"entry {i} is {weight}; weights must be in [0, {MAX_WEIGHT:g}]")
            return values

        @model_validator(mode="after")
        def _lengths(self):
            if len(self.indices) != len(self.values):
                raise ValueError(f"indices and values differ in length ({len(self.indices)} vs {len(self.values)})")
            return self

    return SparseVector


def _seismic_model(vocab_size: int, max_knn: int) -> type[BaseModel]:
    """``SeismicParams``: a request's Seismic search parameters (``n_knn`` at most ``max_knn``)."""

    class SeismicParams(BaseModel):
        """Seismic's search parameters (:class:`spladekit.index.seismic.SeismicSearchParams`)."""

        model_config = ConfigDict(extra="forbid")

        query_cut: StrictInt = Field(20, ge=1, le=vocab_size, description="the query's heaviest terms traversed")
        heap_factor: StrictFloat = Field(
            0.8,
            gt=0,
            allow_inf_nan=False,
            description="a block is scored when its summary score ≥ heap_factor × the heap's minimum",
        )
        n_knn: StrictInt = Field(
            0,
            ge=0,
            json_schema_extra={"maximum": max_knn},
            description=f"neighbours of each found document also scored (≤ {max_knn}: "
            + ("the index's k-NN graph)" if max_knn else "this index has no k-NN graph)"),
        )

        @field_validator("n_knn")
        @classmethod
        def _graph(cls, n_knn: int) -> int:
            if n_knn > max_knn:
                raise ValueError(
                    f"{n_knn} neighbours asked for; the index's k-NN graph holds {max_knn} per document"
                    if max_knn
                    else "this index has no k-NN graph (built with nknn 0): n_knn must be 0"
                )
            return n_knn

    return SeismicParams


def _two_step_model() -> type[BaseModel]:
    """``TwoStepParams``: a request's two-step search parameters (the stored copy's rule is the server's)."""

    class TwoStepParams(BaseModel):
        """Two-step search's parameters (:class:`spladekit.index.two_step.TwoStepConfig`)."""

        model_config = ConfigDict(extra="forbid")

        candidates: StrictInt | None = Field(
            None,
            ge=1,
            le=MAX_CANDIDATES,
            description="documents of the pruned copy's first step "
            "rescored with the full vectors (at least k are; default: spladekit's)",
        )

    return TwoStepParams


def _text_rule(max_query_chars: int):
    """The rule of one query text, at most ``max_query_chars`` characters with something visible (pydantic names
    the failing one ``query.N``)."""

    def _text(text: str) -> str:
        if not _visible(text):
            raise ValueError(
                "empty text (nothing but whitespace, control or format characters: the tokenizer would give no token of it)"
            )
        if len(text) > max_query_chars:
            raise ValueError(f"the text has {len(text)} characters; at most {max_query_chars}")
        return text

    return _text


def _search_request_model(
    SparseVector: type[BaseModel],
    SeismicParams: type[BaseModel],
    TwoStepParams: type[BaseModel],
    backends: tuple[str, ...],
    max_k: int,
    max_query_chars: int,
    max_queries: int,
    max_top_terms: int,
    unavailable: dict[str, str],
) -> type[BaseModel]:
    """``SearchRequest``: the ``POST /search`` body (the module's rules)."""
    _text = _text_rule(max_query_chars)

    class SearchRequest(BaseModel):
        """``POST /search``: one query or a list, as texts (encoded by the server) or sparse vectors."""

        model_config = ConfigDict(extra="forbid")

        query: list[Annotated[StrictStr, AfterValidator(_text)]] | None = Field(
            None, min_length=1, max_length=max_queries, description=f"a text or a list of 1-{max_queries} texts"
        )
        vector: list[SparseVector] | None = Field(
            None, min_length=1, max_length=max_queries, description=f"a sparse vector or a list of 1-{max_queries}"
        )
        k: StrictInt = Field(10, ge=1, le=max_k, description="results per query")
        backend: Literal["exact", "seismic", "two_step"] = Field(
            "exact", description=f"available here: {', '.join(backends)}"
        )
        seismic: SeismicParams | None = Field(None, description="Seismic search parameters (backend seismic only)")
        two_step: TwoStepParams | None = Field(None, description="two-step search parameters (backend two_step only)")
        fields: Literal["ids", "scores", "terms"] = Field(
            "scores", description="ids: document ids; scores: ids and scores; terms: also the query's top terms"
        )
        top_terms: StrictInt | None = Field(
            None, ge=1, le=max_top_terms, description="query terms listed with fields 'terms' (default 10)"
        )

        @field_validator("query", "vector", mode="before")
        @classmethod
        def _one_or_list(cls, value):
            return _listify(value)

        @field_validator("backend")
        @classmethod
        def _available(cls, backend: str) -> str:
            if backend not in backends:
                why = unavailable.get(backend, "Seismic needs a Seismic index stored in the index folder")
                raise ValueError(
                    f"backend {backend!r} is not available on this server (available: {', '.join(backends)}; {why})"
                )
            return backend

        @model_validator(mode="after")
        def _consistent(self):
            if (self.query is None) == (self.vector is None):
                raise ValueError("give exactly one of 'query' (texts) and 'vector' (sparse vectors)")
            if self.seismic is not None and self.backend != "seismic":
                raise ValueError("'seismic' parameters apply to backend 'seismic' only")
            if self.two_step is not None and self.backend != "two_step":
                raise ValueError("'two_step' parameters apply to backend 'two_step' only")
            if self.top_terms is not None and self.fields != "terms":
                raise ValueError("'top_terms' applies to fields 'terms' only")
            return self

        @property
        def size(self) -> int:
            """Number of queries."""
            return len(self.query if self.query is not None else self.vector)

    return SearchRequest


class Hit(BaseModel):
    id: str
    score: float


class Term(BaseModel):
    term: str
    weight: float


class QueryResult(BaseModel):
    """One query's hits (rank order: score descending, then document id); ``terms`` with fields 'terms'."""

    hits: list[Hit] | list[str]
    terms: list[Term] | None = None


class SearchResponse(BaseModel):
    results: list[QueryResult] = Field(description="one per query, in request order")
    k: int
    backend: str
    batch_queries: int = Field(description="queries of the micro-batch that served this request")
    took_ms: float = Field(description="from arrival to answer, in this worker")


class Problem(BaseModel):
    field: str
    message: str


class ErrorResponse(BaseModel):
    error: str = Field(description="one line: what was refused and why")
    problems: list[Problem] = Field(default_factory=list, description="each field at fault (validation errors)")
