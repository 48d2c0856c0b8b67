"""Hybrid retrieval: fuse runs (e.g. a SPLADE run and a BM25 run) into one run.

A run is ``{qid: {docid: score}}``. Within each input run, a query's documents are ranked by the
project's single ordering (:func:`spladekit.data.trec.sorted_ranking`: score descending, then
document id ascending), so ranks are well defined even with tied scores. The fused run holds the
union of the input runs' queries; per query, the union of their documents, cut to the ``depth``
best fused scores (ties again by document id).

Methods (``FusionConfig.method``):

``rrf``
    Reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms
    Condorcet and individual Rank Learning Methods", SIGIR 2009)::

        RRF(d) = Σ_i w_i / (k + rank_i(d)),   k = 60 (the paper's constant), rank_i starting at 1

    a document absent from run ``i`` gets nothing from it. Weights default to 1 (the paper's
    unweighted form); scores of the input runs are used only through their ranks.

``score``
    Normalised score fusion, the weighted CombSUM of Fox & Shaw ("Combination of Multiple
    Searches", TREC-2, 1994) on per-query normalised scores (Lee, "Analyses of Multiple Evidence
    Combination", SIGIR 1997, for min-max)::

        S(d) = Σ_i w_i · norm_i(s_i(d))

    ``norm = "min-max"``: ``(s - min_q) / (max_q - min_q)`` over the query's documents in run ``i``
    (all equal scores: every document 1.0); ``norm = "z-score"``: ``(s - mean_q) / std_q`` with the
    population standard deviation (all equal: every document 0.0). A document absent from run
    ``i`` gets nothing (0) from it. Weights default to 1 each (equal weights); only their ratio
    matters for the ranking.

The formulas are the ones ``ranx.fuse`` documents for ``method="rrf"`` (k = 60) and
``method="wsum"`` with ``norm="min-max"`` / ``"zmuv"``; the degenerate cases above are defined
here (not checked against ranx). ranx itself is not used: it brings numba and pandas and a JIT
compile on first use for a few lines of arithmetic; the tests check every value by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spladekit.data.trec import sorted_ranking

Run = dict[str, dict[str, float]]

#: RRF's constant k (Cormack et al. 2009, §3: "k = 60 was fixed during a pilot investigation").
RRF_K = 60


class FusionConfig(BaseModel):
    """How runs are fused (saved as ``<out>.config.json`` next to a fused run).

    Attributes:
        method: ``rrf`` or ``score`` (see the module docstring).
        rrf_k: RRF's constant k (> 0; default 60).
        norm: score normalisation of ``method="score"``: ``min-max`` or ``z-score``.
        weights: one weight per input run (None: 1 each); finite, ≥ 0, not all 0.
        depth: documents kept per query in the fused run (≥ 1).

    Raises:
        pydantic.ValidationError: a bad option (a ``ValueError``; its errors name the field).
    """

    model_config = ConfigDict(extra="forbid")

    method: Literal["rrf", "score"] = "rrf"
    rrf_k: float = Field(RRF_K, gt=0.0, allow_inf_nan=False)
    norm: Literal["min-max", "z-score"] = "min-max"
    weights: list[float] | None = None
    depth: int = Field(1000, ge=1)

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: list[float] | None) -> list[float] | None:
        if weights is not None:
            check_weights(weights)
        return weights


def check_weights(weights: Sequence[float]) -> None:
    """Raise ``ValueError`` unless every fusion weight is finite and ≥ 0 and at least one is > 0
    (all 0 would give every document the fused score 0: a ranking by document id alone)."""
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(f"fusion weights must be finite and ≥ 0, got {list(weights)}")
    if not any(w > 0 for w in weights):
        raise ValueError(f"fusion weights are all 0 ({list(weights)}): every fused score would be 0; give one > 0")


def _weights(runs: Sequence[Run], weights: Sequence[float] | None) -> list[float]:
    """The weight of each run (1 each when None), after checking there are runs to fuse.

    Raises:
        ValueError: fewer than two runs (fusing one run only renames its scores), a weight count
            different from the run count, or bad weights (see :func:`check_weights`).
    """
    if len(runs) < 2:
        raise ValueError(f"fusion needs at least two runs, got {len(runs)}")
    if weights is None:
        return [1.0] * len(runs)
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} fusion weights for {len(runs)} runs (give one per run)")
    check_weights(weights)
    return [float(w) for w in weights]


def ranks(ranking: dict[str, float]) -> dict[str, int]:
    """1-based rank of each document of one query's ranking (score desc, then doc id asc)."""
    return {docid: rank for rank, (docid, _) in enumerate(sorted_ranking(ranking), start=1)}


def normalize(ranking: dict[str, float], norm: str = "min-max") -> dict[str, float]:
    """Normalise one query's scores: ``min-max`` to [0, 1] or ``z-score`` (population std).

    Degenerate lists (one document, or all scores equal): min-max gives 1.0, z-score 0.0 to each.

    Raises:
        ValueError: unknown ``norm``.
    """
    if not ranking:
        return {}
    values = list(ranking.values())
    if norm == "min-max":
        low, high = min(values), max(values)
        if high == low:
            return {d: 1.0 for d in ranking}
        return {d: (s - low) / (high - low) for d, s in ranking.items()}
    if norm == "z-score":
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if std == 0.0:
            return {d: 0.0 for d in ranking}
        return {d: (s - mean) / std for d, s in ranking.items()}
    raise ValueError(f"unknown score normalisation {norm!r}; choose 'min-max' or 'z-score'")


def _cut(scores: dict[str, float], depth: int, qid: str) -> dict[str, float]:
    """The top ``depth`` of one query's fused scores.

    Raises:
        ValueError: a fused score is not finite (weights so large that their sum overflows).
    """
    if not all(map(math.isfinite, scores.values())):
        raise ValueError(
            f"query {qid!r}: a fused score overflowed to {max(scores.values())} (weights too large); give smaller weights"
        )
    return dict(sorted_ranking(scores)[:depth])


def reciprocal_rank_fusion(
    runs: Sequence[Run], k: float = RRF_K, weights: Sequence[float] | None = None, depth: int = 1000
) -> Run:
    """RRF of ``runs``: ``Σ_i w_i / (k + rank_i(d))`` (Cormack et al. 2009); top ``depth`` per query.

    Raises:
        ValueError: fewer than two runs, ``k`` ≤ 0 or not finite, bad weights (see :func:`_weights`),
            or a fused score that overflows.
    """
    if not (math.isfinite(k) and k > 0):  # k = inf makes every score 0: a run ranked by document id
        raise ValueError(f"RRF k must be finite and > 0, got {k}")
    w = _weights(runs, weights)
    fused: Run = {}
    for qid in _query_ids(runs):
        scores: dict[str, float] = {}
        for run, weight in zip(runs, w):
            for docid, rank in ranks(run.get(qid, {})).items():
                scores[docid] = scores.get(docid, 0.0) + weight / (k + rank)
        fused[qid] = _cut(scores, depth, qid)
    return fused


def score_fusion(
    runs: Sequence[Run], norm: str = "min-max", weights: Sequence[float] | None = None, depth: int = 1000
) -> Run:
    """Weighted CombSUM of per-query normalised scores (Fox & Shaw 1994); top ``depth`` per query.

    Raises:
        ValueError: fewer than two runs, unknown ``norm``, bad weights (see :func:`_weights`), or a fused
            score that overflows.
    """
    w = _weights(runs, weights)
    fused: Run = {}
    for qid in _query_ids(runs):
        scores: dict[str, float] = {}
        for run, weight in zip(runs, w):
            for docid, value in normalize(run.get(qid, {}), norm).items():
                scores[docid] = scores.get(docid, 0.0) + weight * value
        fused[qid] = _cut(scores, depth, qid)
    return fused


def _query_ids(runs: Sequence[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(run))
    return list(seen)


def fuse(runs: Sequence[Run], config: FusionConfig | None = None, **options) -> Run:
    """Fuse ``runs`` as ``config`` (or keyword options of :class:`FusionConfig`) says.

    Raises:
        ValueError: see :func:`reciprocal_rank_fusion` and :func:`score_fusion`; pydantic's
            ``ValidationError`` (a ``ValueError``) for a bad option.

    Example::

        >>> from spladekit import fuse
        >>> sparse, bm25 = {"q1": {"a": 3.0, "b": 1.0}}, {"q1": {"b": 9.0, "c": 2.0}}
        >>> fused = fuse([sparse, bm25], method="rrf", rrf_k=60)  # 1/(60 + rank) summed over the runs
        >>> {doc: round(score, 5) for doc, score in fused["q1"].items()}
        {'b': 0.03252, 'a': 0.01639, 'c': 0.01613}
    """
    config = config or FusionConfig(**options)
    if config.method == "rrf":
        return reciprocal_rank_fusion(runs, config.rrf_k, config.weights, config.depth)
    return score_fusion(runs, config.norm, config.weights, config.depth)
