"""Retrieval quality through ``ir_measures`` (MacAvaney et al., ECIR 2022), under stated conventions.

Names accepted: ``nDCG@k``, ``MRR@k`` (reciprocal rank cut at k, ``RR@k`` in ir_measures), ``R@k``,
``P@k``, ``MAP`` / ``AP``, and any native ir_measures name (e.g. ``R(rel=2)@1000``).

Conventions (every one is recorded in the output under ``"conventions"``):

- **averaging**: means are over the *judged* queries (those in the qrels). A judged query absent
  from the run, or with an empty ranking, scores 0 on every measure. Run queries without any
  judgment are excluded and counted (``num_skipped``). A judged query whose judgments are all
  non-relevant (grade ≤ 0, or below the relevance level) is kept and scores 0, as in trec_eval.
- **grades**: a grade ≤ 0 means *judged non-relevant* (gain 0 in nDCG, never relevant).
- **relevance levels**: binary measures (MRR/RR, MAP/AP, R, P, ...) count a document as relevant
  when its grade ≥ the level of :class:`EvalConventions` for that measure (default 1). nDCG always
  uses the graded gains (grade as gain, Järvelin & Kekäläinen 2002, trec_eval's ``ndcg_cut``).
  TREC DL (Craswell et al., 2020): nDCG on all grades, MAP/recall/MRR with grade ≥ 2.
- **ties**: the run is ordered by score desc, then doc id asc (:func:`spladekit.data.trec.sorted_ranking`,
  the rule of search output and run files) and the scores are replaced by strictly decreasing rank
  scores before ir_measures sees them, so its own tie-break (trec_eval: doc id desc) never applies.
- **duplicates**: a run is a ``{qid: {docid: score}}`` dict, so a document cannot count twice (nDCG
  ≤ 1); duplicate lines in a run *file* are an error unless read with ``dedupe=True``
  (:func:`spladekit.data.trec.read_run`).
- **query id = document id**: with ``remove_query_id`` a retrieved document whose id equals the
  query id is dropped before evaluation (BEIR's practice for ArguAna and Quora, where the query is
  itself a corpus document); off by default, on in the ``arguana`` and ``quora`` presets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from spladekit.data.trec import GRADE_MAX, Qrels, Run, sorted_ranking

ALIASES = {"MRR": "RR", "MAP": "AP"}
DEFAULT_MEASURES = ("nDCG@10", "MRR@10", "R@100", "R@1000")
TIE_BREAK = "score descending, then document id ascending"


@dataclass
class EvalConventions:
    """How runs are scored against qrels (see the module docstring); saved in every ``metrics.json``.

    Attributes:
        name: preset name, or ``"custom"``.
        relevance_level: default minimum grade counted relevant by binary measures (≥ 1).
        relevance_levels: per-measure overrides, keyed by the ir_measures family name
            (``"RR"``, ``"AP"``, ``"R"``, ``"P"``, ``"Success"``...); spladekit aliases
            (``"MRR"``, ``"MAP"``) are accepted. nDCG has no level: it always uses graded gains.
        remove_query_id: drop a retrieved document whose id equals the query id.
        dedupe: readers drop duplicate (query, document) lines of a run file instead of failing.
    """

    name: str = "default"
    relevance_level: int = 1
    relevance_levels: dict[str, int] = field(default_factory=dict)
    remove_query_id: bool = False
    dedupe: bool = False

    def __post_init__(self):
        self.relevance_levels = {_rel_family(k): int(v) for k, v in self.relevance_levels.items()}
        for key, level in [("default", self.relevance_level), *self.relevance_levels.items()]:
            if level < 1:
                raise ValueError(f"relevance level for {key} must be ≥ 1 (grade ≤ 0 is non-relevant), got {level}")

    def level_for(self, family: str) -> int:
        """The relevance level of a measure family (``"RR"``, ``"AP"``, ``"R"``...)."""
        return self.relevance_levels.get(ALIASES.get(family, family), self.relevance_level)

    @classmethod
    def preset(cls, name: str) -> EvalConventions:
        """A named preset: ``default``, ``beir``, ``msmarco``, ``trec-dl``, ``arguana``, ``quora``.

        - ``default`` / ``beir`` / ``msmarco``: relevant = grade ≥ 1 everywhere, no removal
          (BEIR: Thakur et al. 2021; MS MARCO dev qrels are binary);
        - ``trec-dl``: binary measures count grade ≥ 2 (TREC DL 2019/2020 track overview); nDCG graded;
        - ``arguana``, ``quora``: ``beir`` plus ``remove_query_id`` (BEIR's ``ignore_identical_ids``).

        Raises:
            ValueError: unknown name.
        """
        key = name.lower().replace("_", "-")
        if key in ("default", "beir", "msmarco"):
            return cls(name=key)
        if key in ("trec-dl", "dl19", "dl20"):
            return cls(name="trec-dl", relevance_level=2)
        if key in ("arguana", "quora"):
            return cls(name=key, remove_query_id=True)
        raise ValueError(f"unknown evaluation preset {name!r}; choose one of {', '.join(PRESETS)}")

    @classmethod
    def for_dataset(cls, dataset_name: str) -> EvalConventions:
        """The preset matching a dataset name (``arguana``, ``quora``, ``dl19``/``dl20``/``trec-dl``,
        ``msmarco``), else ``beir``."""
        name = dataset_name.lower()
        for key in ("arguana", "quora"):
            if key in name:
                return cls.preset(key)
        if any(key in name for key in ("trec-dl", "dl19", "dl20", "dl-19", "dl-20")):
            return cls.preset("trec-dl")
        if "msmarco" in name or "ms-marco" in name:
            return cls.preset("msmarco")
        return cls.preset("beir")

    @classmethod
    def for_qrels(cls, path) -> EvalConventions:
        """The preset matching a qrels file (:meth:`for_dataset`) by its file name and, in BEIR's layout
        (``DATASET/qrels/SPLIT.tsv``), its dataset folder's name: not every folder above it (a
        project folder named ``dl19-baselines`` must not make SciFact's qrels TREC DL's)."""
        from pathlib import Path

        path = Path(path)
        names = [path.name] + ([path.parent.parent.name] if path.parent.name == "qrels" else [])
        return cls.for_dataset(" ".join(names))

    @classmethod
    def from_dict(cls, data: Mapping) -> EvalConventions:
        """Rebuild from :meth:`to_dict` output (extra descriptive keys are ignored)."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def to_dict(self, measures: Sequence[str] = ()) -> dict:
        """The record saved in ``metrics.json``: fields, rules in words, measures as ir_measures runs them."""
        record = asdict(self)
        record.update(
            tie_break=TIE_BREAK,
            averaging="mean over judged queries; judged queries missing from the run count 0; "
            "run queries without judgments excluded (num_skipped)",
            grade_zero="judged non-relevant",
            ndcg_gains="graded (all grades > 0)",
        )
        if measures:
            record["measures"] = {name: repr(parse_measure(name, self)) for name in measures}
        return record


PRESETS = ("default", "beir", "msmarco", "trec-dl", "arguana", "quora")


def _rel_family(name: str) -> str:
    """The ir_measures family name (``RR``, ``AP``, ``R``...) of a measure name given a relevance
    level, matched without regard to case (``mrr`` → ``RR``, ``Recall`` → ``R``).

    Raises:
        ValueError: no ir_measures measure of that name takes a relevance level (nDCG has none: it
            uses graded gains); a level silently unused would be recorded as applied.
    """
    from ir_measures import measures

    takes_rel = {key: m.NAME for key, m in measures.registry.items() if "rel" in getattr(m, "SUPPORTED_PARAMS", {})}
    by_case = {key.lower(): family for key, family in takes_rel.items()}
    family = takes_rel.get(name) or by_case.get(str(name).strip().lower())
    if family is None:
        raise ValueError(
            f"relevance level given for {name!r}, which is not a measure taking one; measures with a "
            f"relevance level: {', '.join(sorted({*takes_rel.values()}))} (nDCG uses graded gains)"
        )
    return family


def as_conventions(conventions: EvalConventions | str | None) -> EvalConventions:
    """``None`` → the defaults; a name (e.g. ``"trec_eval"``) → its preset; a record → itself.

    Raises:
        ValueError: an unknown preset name.
    """
    if conventions is None:
        return EvalConventions()
    if isinstance(conventions, str):
        return EvalConventions.preset(conventions)
    return conventions


def parse_measure(name: str, conventions: EvalConventions | str | None = None):
    """Parse a spladekit measure name into an ir_measures measure, with the relevance level applied.

    A level written in the name (``R(rel=2)@1000``) wins over the conventions.

    Raises:
        ValueError: the name is not understood; a cutoff that is not an integer ≥ 1.
    """
    import ir_measures

    conventions = as_conventions(conventions)
    base, at, cutoff = name.partition("@")
    if at and not (cutoff.isascii() and cutoff.isdigit() and int(cutoff) >= 1):  # pytrec_eval aborts the process on @0
        raise ValueError(f"measure {name!r}: the cutoff after '@' must be an integer ≥ 1, got {cutoff!r}")
    native = ALIASES.get(base, base) + (f"@{cutoff}" if cutoff else "")
    try:
        measure = ir_measures.parse_measure(native)
    except Exception as exc:
        raise ValueError(f"unknown measure {name!r} (as ir_measures: {native!r}): {exc}") from exc
    level = conventions.level_for(measure.NAME)
    if "rel" in type(measure).SUPPORTED_PARAMS and "rel" not in measure.params and level != 1:
        measure = measure(rel=level)
    return measure


def prepare_run(run: Run, conventions: EvalConventions | str | None = None) -> tuple[Run, int]:
    """Apply the conventions to a run: drop query-id documents (if asked), rank-score every list.

    Returns:
        ``(run with scores n, n-1, ..., 1 in spladekit's order, number of documents removed)``.
    """
    conventions = as_conventions(conventions)
    ranked: Run = {}
    removed = 0
    for qid, docs in run.items():
        if conventions.remove_query_id and qid in docs:
            docs = {d: s for d, s in docs.items() if d != qid}
            removed += 1
        ordered = sorted_ranking(docs)
        ranked[qid] = {docid: float(len(ordered) - i) for i, (docid, _) in enumerate(ordered)}
    return ranked, removed


def evaluate_per_query(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str] = DEFAULT_MEASURES,
    conventions: EvalConventions | str | None = None,
) -> dict[str, dict[str, float]]:
    """Per-query values ``{measure name: {qid: value}}`` for every judged query (0 when unretrieved).

    Args:
        run: ``{qid: {docid: score}}``.
        qrels: ``{qid: {docid: grade}}``.
        measures: spladekit or ir_measures names.
        conventions: an :class:`EvalConventions`, a preset name, or None (``default``).
    """
    conventions = as_conventions(conventions)
    return _per_query(prepare_run(run, conventions)[0], qrels, measures, conventions)


def _per_query(
    ranked: Run, qrels: Qrels, measures: Sequence[str], conventions: EvalConventions
) -> dict[str, dict[str, float]]:
    """:func:`evaluate_per_query` on a run already passed through :func:`prepare_run`.

    Raises:
        ValueError: an unknown measure or cutoff; a grade above :data:`~spladekit.data.trec.GRADE_MAX`.

    Warns:
        UserWarning: a measure's relevance level is above every grade of ``qrels`` (it scores 0 everywhere).
    """
    import ir_measures

    parsed = {name: parse_measure(name, conventions) for name in measures}
    top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
    if top > GRADE_MAX:
        raise ValueError(
            f"qrels grade {top} is above {GRADE_MAX}: trec_eval allocates memory for every grade "
            "value up to the largest (see spladekit.data.trec.GRADE_MAX)"
        )
    above = [
        f"{name} (relevant: grade ≥ {m.params['rel']})"
        for name, m in parsed.items()
        if m.params.get("rel", 1) > max(top, 1)
    ]
    if above:
        import warnings

        warnings.warn(
            f"no judgment reaches the relevance level of {', '.join(above)}: the qrels' highest grade is {top}, "
            f"so these score 0 for every query (conventions {conventions.name!r}; choose --preset or --rel)",
            stacklevel=3,
        )
    by_native: dict[str, list[str]] = {}
    for name, measure in parsed.items():
        by_native.setdefault(repr(measure), []).append(name)
    values = {name: {qid: 0.0 for qid in qrels} for name in measures}
    judged_run = {qid: docs for qid, docs in ranked.items() if qid in qrels and docs}
    if judged_run:
        unique = {repr(m): m for m in parsed.values()}
        for metric in ir_measures.iter_calc(list(unique.values()), qrels, judged_run):
            for name in by_native[repr(metric.measure)]:
                values[name][metric.query_id] = float(metric.value)
    return values


def evaluate(
    run: Run,
    qrels: Qrels,
    measures: Iterable[str] = DEFAULT_MEASURES,
    conventions: EvalConventions | str | None = None,
    per_query: dict | None = None,
) -> dict:
    """Mean of each measure over judged queries, with counts and the conventions used.

    Args:
        run: ``{qid: {docid: score}}``.
        qrels: ``{qid: {docid: grade}}``.
        measures: names such as ``"nDCG@10"``, ``"MRR@10"``, ``"R@1000"``.
        conventions: an :class:`EvalConventions`, a preset name, or None (``default``).
        per_query: if given, filled with the per-query values (``{measure: {qid: value}}``).

    Returns:
        ``{name: mean value}`` plus ``num_queries`` (judged queries averaged over), ``num_skipped``
        (run queries without judgments, excluded), ``num_unretrieved`` (judged queries with no
        result, counted 0), ``num_without_relevant`` (judged queries without any grade > 0),
        ``removed_query_id_docs`` and ``conventions`` (:meth:`EvalConventions.to_dict`).

    Raises:
        ValueError: unknown measure, empty qrels, or a grade above :data:`spladekit.data.trec.GRADE_MAX`
            (trec_eval allocates memory per grade value, and a grade past int32 breaks its gains).

    Example::

        >>> from spladekit import evaluate
        >>> run = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 0.5}}
        >>> qrels = {"q1": {"d2": 1}, "q2": {"d3": 2}}
        >>> metrics = evaluate(run, qrels, ["nDCG@10", "MRR@10"])
        >>> round(metrics["nDCG@10"], 4), metrics["MRR@10"], metrics["num_queries"]  # (1/log2(3) + 1) / 2
        (0.8155, 0.75, 2)
    """
    measures = list(measures)
    conventions = as_conventions(conventions)
    if not qrels:
        raise ValueError("qrels are empty: nothing to evaluate")
    ranked, removed = prepare_run(run, conventions)
    values = _per_query(ranked, qrels, measures, conventions)
    if per_query is not None:
        per_query.update(values)
    result: dict = {name: sum(v.values()) / len(qrels) for name, v in values.items()}
    result["num_queries"] = len(qrels)
    result["num_skipped"] = sum(1 for qid in run if qid not in qrels)
    if run and result["num_skipped"] == len(run):
        import warnings

        warnings.warn(
            f"none of the run's {len(run)} query ids is in the qrels (e.g. run {next(iter(run))!r}, qrels "
            f"{next(iter(qrels))!r}): every measure is 0; do the ids differ in form (e.g. '001' vs '1')?",
            stacklevel=2,
        )
    elif any(ranked.get(qid) for qid in qrels):
        judged = {doc for docs in qrels.values() for doc in docs}
        shared = [qid for qid in qrels if ranked.get(qid)]
        if not any(doc in judged for qid in shared for doc in ranked[qid]):
            import warnings

            example = next(iter(ranked[shared[0]]))
            warnings.warn(
                f"none of the documents the run retrieves for its {len(shared)} judged queries is judged in the qrels "
                f"(e.g. run {example!r}, qrels {next(iter(qrels[shared[0]]))!r}): every measure is 0; do the document ids "
                "differ in form (a prefix, leading zeros)?",
                stacklevel=2,
            )
    result["num_unretrieved"] = sum(1 for qid in qrels if not ranked.get(qid))
    result["num_without_relevant"] = sum(1 for docs in qrels.values() if not any(g > 0 for g in docs.values()))
    result["removed_query_id_docs"] = removed
    result["conventions"] = conventions.to_dict(measures)
    return result
