"""Retrieval quality through ``ir_measures`` (MacAvaney et al., ECIR 2022).

Names accepted: ``nDCG@k``, ``MRR@k`` (reciprocal rank cut at k, ``RR@k`` in ir_measures), ``R@k``,
``P@k``, ``MAP`` / ``AP``, and any native ir_measures name (e.g. ``R(rel=2)@1000``).

Conventions:
- averages are over *judged* queries (those in the qrels); a judged query absent from the run
  scores 0; run queries without judgments are skipped and counted;
- the run is ordered by score desc, then doc id asc (:func:`spladekit.data.trec.sorted_ranking`)
  before it reaches ir_measures, whose own tie-break (trec_eval: doc id desc) then never applies.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from spladekit.data.trec import Qrels, Run, sorted_ranking

ALIASES = {"MRR": "RR", "MAP": "AP"}
DEFAULT_MEASURES = ("nDCG@10", "MRR@10", "R@100", "R@1000")


def parse_measure(name: str):
    """Parse a spladekit measure name into an ir_measures measure object.

    Raises:
        ValueError: the name is not understood.
    """
    import ir_measures

    base, _, cutoff = name.partition("@")
    native = ALIASES.get(base, base) + (f"@{cutoff}" if cutoff else "")
    try:
        return ir_measures.parse_measure(native)
    except Exception as exc:
        raise ValueError(f"unknown measure {name!r} (as ir_measures: {native!r}): {exc}") from exc


def _rank_scores(run: Run) -> Run:
    """Replace scores by strictly decreasing rank scores in spladekit's ordering."""
    ranked: Run = {}
    for qid, docs in run.items():
        ordered = sorted_ranking(docs)
        ranked[qid] = {docid: float(len(ordered) - i) for i, (docid, _) in enumerate(ordered)}
    return ranked


def evaluate_per_query(run: Run, qrels: Qrels, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, dict[str, float]]:
    """Per-query values ``{measure name: {qid: value}}`` for every judged query (0 when unretrieved)."""
    import ir_measures

    parsed = {name: parse_measure(name) for name in measures}
    by_native = {repr(m): name for name, m in parsed.items()}
    values = {name: {qid: 0.0 for qid in qrels} for name in measures}
    judged_run = {qid: docs for qid, docs in _rank_scores(run).items() if qid in qrels and docs}
    if judged_run:
        for metric in ir_measures.iter_calc(list(parsed.values()), qrels, judged_run):
            values[by_native[repr(metric.measure)]][metric.query_id] = float(metric.value)
    return values


def evaluate(run: Run, qrels: Qrels, measures: Iterable[str] = DEFAULT_MEASURES) -> dict[str, float]:
    """Mean of each measure over judged queries, plus ``num_queries`` and ``num_skipped``.

    Args:
        run: ``{qid: {docid: score}}``.
        qrels: ``{qid: {docid: grade}}``.
        measures: names such as ``"nDCG@10"``, ``"MRR@10"``, ``"R@1000"``.

    Returns:
        ``{name: mean value}``, ``num_queries`` (judged queries averaged over) and ``num_skipped``
        (run queries without judgments).

    Raises:
        ValueError: unknown measure or empty qrels.
    """
    measures = list(measures)
    if not qrels:
        raise ValueError("qrels are empty: nothing to evaluate")
    per_query = evaluate_per_query(run, qrels, measures)
    result = {name: sum(v.values()) / len(qrels) for name, v in per_query.items()}
    result["num_queries"] = len(qrels)
    result["num_skipped"] = sum(1 for qid in run if qid not in qrels)
    return result
