"""The records of a search: its settings (:class:`SearchSettings`, saved next to every run), its
latency (:class:`LatencyStats`) and its result (:class:`SearchResult`, what
:meth:`spladekit.index.index.Index.search` returns); :func:`recall_at_k` of one run against another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field

from spladekit.index.exact import TIE_RULE


# ----------------------------------------------------------------------------------- search
class SearchSettings(BaseModel):
    """The settings record of a retrieval run (saved next to every run as ``*.config.json``/``config.json``).

    Attributes:
        backend: the searcher's name (:data:`spladekit.index.index.SEARCHERS`): ``exact`` (dot product
            over all documents), ``seismic`` (approximate) or ``two_step`` (a pruned copy, its
            candidates rescored exactly).
        k: results per query.
        one_at_a_time: each query searched in its own call (latency per call) instead of in batches.
        seismic_build: parameters the Seismic index was built with (seismic only).
        seismic_search: Seismic's search parameters (seismic only).
        two_step: the pruned copy's rule, the first step's query rule, the candidates and the copy's
            ``postings_hash`` (two_step only). A searcher's own entries
            (:meth:`spladekit.index.searcher.Searcher.record`) are fields of this record.
        tie_rule: :data:`TIE_RULE`.
        index, index_hash, num_docs: the index searched (filled by :meth:`Index.search`).
        model, query_max_length, query_top_k, query_pruning: how queries were encoded (text queries;
            ``query_pruning`` the record of a :class:`spladekit.model.pruning.PruningRule`).
    """

    model_config = ConfigDict(extra="forbid")

    backend: str = "exact"
    k: int = Field(1000, ge=1)
    one_at_a_time: bool = False
    seismic_build: dict | None = None
    seismic_search: dict | None = None
    two_step: dict | None = None
    tie_rule: str = TIE_RULE
    index: list[str] = Field(default_factory=list)
    index_hash: list[str | None] = Field(default_factory=list)
    num_docs: int | None = None
    model: str | None = None
    query_max_length: int | None = None
    query_top_k: int | None = None
    query_pruning: dict | None = None

    def record(self) -> dict:
        """The settings as a JSON-ready dict."""
        return self.model_dump()


@dataclass
class LatencyStats:
    """Retrieval time per query, milliseconds: from the query vectors to the ranked ``(doc_id,
    score)`` lists the caller receives (posting-list scoring or the Seismic call, top-k, tie rule,
    decoding the document ids). Left out: encoding text queries, checking the arguments and making
    the settings record (before the clock starts), building the Seismic index on
    its first use, and assembling :class:`SearchResult` (one object per call).

    In batch mode, exact search times each long-list query on its own and gives each query of a
    short-list block (:func:`spladekit.index.exact.search_postings`) the block's time divided by
    its size; the Seismic backend's batch call (query preparation included) is timed as a whole and
    divided likewise; the ids of all queries' hits are decoded in one gather, whose time is shared
    equally. With ``one_at_a_time`` every query is a call of its own, timed alone from its vector to
    its named hits.
    """

    mode: str
    num_queries: int
    total_s: float
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float], mode: str) -> LatencyStats:
        ms = np.asarray(seconds, dtype=np.float64) * 1000.0
        if ms.size == 0:
            return cls(mode, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p50, p95, p99 = (
            (ms[0],) * 3 if ms.size == 1 else np.percentile(ms, [50, 95, 99])
        )  # one call: skip the quantile machinery
        return cls(
            mode,
            int(ms.size),
            float(ms.sum() / 1000.0),
            float(ms.mean()),
            float(p50),
            float(p95),
            float(p99),
            float(ms.max()),
        )


@dataclass
class SearchResult:
    """What :meth:`Index.search` returns.

    Attributes:
        query_ids: Q query ids, input order.
        hits: per query ``(doc_id, score)`` in rank order (the tie rule of the module).
        latency: :class:`LatencyStats`.
        settings: :class:`SearchSettings` of the search.
        queries: the ``[Q, V]`` query vectors searched.
        seconds: ``[Q]`` retrieval seconds of each query (what :attr:`latency` summarises).
        built: what opening the searcher built and stored, a phrase per folder
            (:attr:`spladekit.index.searcher.Searcher.built`); empty when nothing was built.
    """

    query_ids: list[str]
    hits: list[list[tuple[str, float]]]
    latency: LatencyStats
    settings: SearchSettings
    queries: sp.csr_matrix | None = field(default=None, repr=False)
    seconds: np.ndarray | None = field(default=None, repr=False)
    built: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict[str, dict[str, float]]:
        """The run ``{qid: {doc_id: score}}``."""
        return {qid: dict(hits) for qid, hits in zip(self.query_ids, self.hits)}


def recall_at_k(approx: Sequence[Sequence[tuple]], exact: Sequence[Sequence[tuple]], k: int = 10) -> float:
    """Mean over queries of ``|approx top-k ∩ exact top-k| / |exact top-k|`` (queries whose exact list
    is empty are skipped; 1.0 when all are). Entries are ``(doc, score)`` with any hashable doc.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(approx) != len(exact):
        raise ValueError(f"{len(approx)} approximate result lists for {len(exact)} exact ones")
    values = []
    for a, e in zip(approx, exact):
        truth = {doc for doc, _ in e[:k]}
        if truth:
            values.append(len(truth & {doc for doc, _ in a[:k]}) / len(truth))
    return float(np.mean(values)) if values else 1.0
