"""Search an index folder with query texts or vectors, exactly or with Seismic.

Query vectors come from the model recorded in the index, with the query max length and pruning
recorded there (which came from the model's ``spladekit.json``), so the same text gives the same
vector through the Python API, the CLI and the index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import scipy.sparse as sp

from spladekit.index.exact import exact_search
from spladekit.index.seismic import SeismicBuildParams, SeismicSearcher, SeismicSearchParams, recall_at_k

BACKENDS = ("exact", "seismic")


def query_encoder(meta: dict, model: str | None = None, batch_size: int = 32, head_impl: str | None = None):
    """The :class:`SpladeEncoder` an index's queries are encoded with (model and query settings
    from ``index.json`` unless ``model`` overrides the model)."""
    from spladekit.errors import DataFormatError
    from spladekit.model.encoder import SpladeEncoder

    if model is None and not meta.get("model"):
        raise DataFormatError("index.json", "no model recorded in the index; pass the query model (--model)", field="model")
    return SpladeEncoder.from_pretrained(
        model or meta["model"],
        query_max_length=meta.get("query_max_length"),
        query_top_k=meta.get("query_top_k"),
        batch_size=batch_size,
        head_impl=head_impl,
    )


@dataclass
class SearchOutcome:
    """Results of :func:`search_vectors`.

    Attributes:
        results: per query ``(row, score)`` lists (exact-search ordering).
        recall: ``{"recall@k": value}`` of the approximate top-k against exact, when asked.
    """

    results: list[list[tuple[int, float]]]
    recall: dict = field(default_factory=dict)


def search_vectors(
    queries: sp.spmatrix,
    docs: sp.spmatrix,
    backend: str = "exact",
    k: int = 1000,
    build: SeismicBuildParams | None = None,
    params: SeismicSearchParams | None = None,
    recall_k: Sequence[int] = (),
    doc_ids: Sequence[str] | None = None,
) -> SearchOutcome:
    """Top-``k`` search with ``backend``; optionally the recall of its top-``r`` against exact top-``r``.

    ``doc_ids`` (one per document row) makes ties follow document id ascending on every backend,
    the rule of :func:`spladekit.index.exact.exact_search`.

    Raises:
        ValueError: unknown backend, vocabulary mismatch, ``k`` < 1.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "exact":
        return SearchOutcome(exact_search(queries, docs, k=k, doc_ids=doc_ids))
    searcher = SeismicSearcher(docs, build)
    results = searcher.search(queries, k=k, params=params, doc_ids=doc_ids)
    recall = {}
    # exact top-r is the prefix of exact top-max(r) (one total order) and recall_at_k cuts both
    # lists at r, so one exact search serves every r
    exact = exact_search(queries, docs, k=max(recall_k), doc_ids=doc_ids) if recall_k else []
    for r in recall_k:
        approx = results if r <= k else searcher.search(queries, k=r, params=params, doc_ids=doc_ids)
        recall[f"recall@{r}"] = recall_at_k(approx, exact, k=r)
    return SearchOutcome(results, recall)
