"""``mine``: queries with positives → candidates → teacher scores → false-negative filters → training files.

Stages: :mod:`spladekit.mine.inputs` (queries, positives, corpus), :mod:`spladekit.mine.candidates`
(BM25, a spladekit index, a TREC run), :mod:`spladekit.mine.teacher` (cross-encoders, resumable),
:mod:`spladekit.mine.filters` (sentence-transformers' ``mine_hard_negatives`` rules),
:mod:`spladekit.mine.write` (the files the trainer reads). ``OUT`` receives ``dataset/``, ``naver/``,
``stats.json`` (what each filter removed) and ``mine.yaml`` (the settings), each renamed into place
when complete; ``OUT/work/`` holds the teacher chunks until the run succeeds.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from spladekit.mine.config import MineConfig
from spladekit.mine.filters import STAT_KEYS, FilterSettings, default_depth, default_range_max, select_negatives

MARKERS = ("mine.yaml", "stats.json", "work")  # what a mining run writes (spladekit.io.check_output_folder)


@dataclass
class MineResult:
    """What :func:`mine` returns: the output folder, the statistics, and the line that says them."""

    out: Path
    stats: dict
    line: str


def _candidates(config: MineConfig, queries, corpus, depth: int, show_progress: bool):
    from spladekit.mine.candidates import bm25_candidates, model_candidates, run_candidates

    if config.candidates == "bm25":
        return bm25_candidates(queries, corpus, depth)
    if config.candidates == "model":
        return model_candidates(
            queries, corpus, depth, config.model, config.index, show_progress, config.trust_remote_code
        )
    return run_candidates(config.run, queries, corpus, depth)


def stats_line(stats: dict) -> str:
    """One line: candidates, what each filter removed, negatives kept, queries short of negatives."""
    removed = ", ".join(f"{k} {stats['removed'][k]:,}" for k in STAT_KEYS[1:-1] if stats["removed"][k])
    return (
        f"mined {stats['queries']:,} queries: {stats['removed']['candidates']:,} candidates; removed: "
        f"{removed or 'none'}; kept {stats['removed']['kept']:,} negatives; {stats['rows']:,} dataset rows; "
        f"{stats['short_queries']:,} queries with fewer than {stats['num_negatives']} negatives (no dataset row)"
    )


def mine(config: MineConfig, out: str | Path, show_progress: bool = True) -> MineResult:
    r"""Mine hard negatives (see the module docstring and :class:`~spladekit.mine.config.MineConfig`).

    Raises:
        DataFormatError, ResolutionError: a bad or missing input (naming file and line).
        ValueError: a margin filter without a teacher while a positive is not among its query's
            candidates (its retriever score is then unknown).

    Example::

        >>> import pathlib, tempfile
        >>> from spladekit.mine import MineConfig, mine
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "pairs.tsv").write_text("what do proteins do\tproteins do the work of cells\n"
        ...                                       "where is the moon\tthe moon orbits the earth\n")
        >>> _ = (folder / "corpus.tsv").write_text("d1\tproteins fold into shapes\nd2\tthe moon has no air\n"
        ...                                        "d3\tcells divide\nd4\tthe earth orbits the sun\n")
        >>> config = MineConfig(data=str(folder / "pairs.tsv"), format="tsv", corpus=str(folder / "corpus.tsv"),
        ...                     num_negatives=1)
        >>> result = mine(config, folder / "mined", show_progress=False)
        >>> result.stats["queries"], result.stats["rows"]
        (2, 2)
    """
    from spladekit.mine.inputs import read_mining_input

    out = Path(out)
    data = read_mining_input(config)
    teacher = bool(config.teachers)
    if teacher:  # checked before the candidates are mined and anything is written
        from spladekit.mine.teacher import check_teacher_files

        for name in config.teachers:
            check_teacher_files(name, config.trust_remote_code)
    settings = FilterSettings(
        num_negatives=config.num_negatives,
        range_min=config.range_min,
        range_max=config.range_max,
        max_score=config.max_score,
        min_score=config.min_score,
        absolute_margin=config.absolute_margin,
        relative_margin=config.relative_margin,
        sampling=config.sampling,
    )
    max_positives = max(len(p) for p in data.positives.values())
    range_max = config.range_max or default_range_max(settings, max_positives, teacher)
    depth = config.depth or default_depth(range_max, max_positives)
    ranked = _candidates(config, data.queries, data.corpus, depth, show_progress)
    same_text = {qid: {d for d, _ in ranked[qid] if data.corpus[d] == data.queries[qid]} for qid in data.queries}
    if teacher:
        ranked, positive_scores = _teacher_scores(config, data, ranked, same_text, out / "work", show_progress)
    else:
        positive_scores = _retriever_scores(config, data, ranked, depth)
    chosen = _choose(data, ranked, positive_scores, same_text, settings, range_max, random.Random(config.seed), teacher)
    stats = {
        "queries": len(data.queries),
        "num_negatives": config.num_negatives,
        "range_max": range_max,
        "depth": depth,
        "teachers": list(config.teachers),
        "removed": chosen.totals,
        "rows": len(chosen.rows),
        "short_queries": chosen.short,
    }
    if not chosen.rows:
        raise ValueError(
            f"no query kept {config.num_negatives} negatives, nothing to write ({stats_line(stats)}); "
            "loosen the filters (range_max, margins, max_score) or lower num_negatives"
        )
    _write(out, config, data, chosen, stats, teacher, show_progress)
    return MineResult(out, stats, stats_line(stats))


def _teacher_scores(config: MineConfig, data, ranked: dict, same_text: dict, work: Path, show_progress: bool):
    """The teachers' scores of each query's positives and of its candidates that may be kept (not a
    positive, not the query's own text), in resumable chunks under ``work``.

    Returns:
        ``(ranked, positive_scores)``: each query's candidates in retriever order with the teacher's
        score (0.0 for the excluded ones, which are never kept), and ``{qid: {positive: score}}``.
    """
    from spladekit.mine.teacher import score_pairs

    qids = list(data.queries)
    pool = {q: [d for d, _ in ranked[q] if d not in data.positives[q] and d not in same_text[q]] for q in qids}
    groups = [[(data.queries[q], data.corpus[d]) for d in data.positives[q] + pool[q]] for q in qids]
    scored = score_pairs(
        groups,
        config.teachers,
        work,
        config.activation,
        config.teacher_batch_size,
        config.chunk_queries,
        config.teacher_max_length,
        config.device,
        show_progress,
        config.trust_remote_code,
    )
    positive_scores, rescored = {}, {}
    for q, scores in zip(qids, scored):
        n_pos = len(data.positives[q])
        positive_scores[q] = dict(zip(data.positives[q], scores[:n_pos]))
        candidate_scores = dict(zip(pool[q], scores[n_pos:]))
        rescored[q] = [(d, candidate_scores.get(d, 0.0)) for d, _ in ranked[q]]
    return rescored, positive_scores


def _retriever_scores(config: MineConfig, data, ranked: dict, depth: int) -> dict:
    """``{qid: {positive: retriever score}}`` of the positives among each query's candidates.

    Raises:
        ValueError: a margin filter while a positive is not among its query's top-``depth`` candidates
            (its score, the margins' reference, is unknown).
    """
    positive_scores = {q: {d: s for d, s in ranked[q] if d in data.positives[q]} for q in data.queries}
    if config.absolute_margin is not None or config.relative_margin is not None:
        for q in data.queries:
            lacking = [d for d in data.positives[q] if d not in positive_scores[q]]
            if lacking:
                raise ValueError(
                    f"query {q!r}: positive {lacking[0]!r} is not among its top-{depth} candidates, so its "
                    "retriever score (the margins' reference) is unknown; give a teacher or a larger depth"
                )
    return positive_scores


@dataclass
class _Chosen:
    """The negatives chosen for every query: dataset rows, negatives and naver scores by query, what each
    rule removed in total, and the number of queries short of negatives (no dataset row)."""

    rows: list[dict]
    negatives: dict[str, list[str]]
    naver_scores: dict[str, dict]
    totals: dict[str, int]
    short: int


def _choose(
    data,
    ranked: dict,
    positive_scores: dict,
    same_text: dict,
    settings: FilterSettings,
    range_max: int,
    rng: random.Random,
    teacher: bool,
) -> _Chosen:
    """Each query's negatives (:func:`~spladekit.mine.filters.select_negatives`, queries in input
    order, one ``rng`` for all), one dataset row per positive of a query that kept ``num_negatives``."""
    chosen = _Chosen([], {}, {}, dict.fromkeys(STAT_KEYS, 0), 0)
    for q in data.queries:
        selection = select_negatives(
            ranked[q],
            list(positive_scores[q].values()),
            settings,
            range_max,
            excluded=set(data.positives[q]),
            same_as_query=same_text[q],
            rng=rng,
        )
        chosen.totals["candidates"] += len(ranked[q])
        for key, value in selection.removed.items():
            chosen.totals[key] += value
        chosen.totals["kept"] += len(selection.negatives)
        chosen.negatives[q] = [d for d, _ in selection.negatives]
        if teacher:
            chosen.naver_scores[q] = {**positive_scores[q], **dict(selection.negatives)}
        if not selection.complete:
            chosen.short += 1
            continue
        for p in data.positives[q]:
            chosen.rows.append(
                {
                    "query_id": q,
                    "query": data.queries[q],
                    "positive_id": p,
                    "positive": data.corpus[p],
                    "negatives": [(d, data.corpus[d]) for d in chosen.negatives[q]],
                    "scores": [positive_scores[q].get(p, 0.0)] + [s for _, s in selection.negatives],
                }
            )
    return chosen


def _write(
    out: Path, config: MineConfig, data, chosen: _Chosen, stats: dict, teacher: bool, show_progress: bool
) -> None:
    """``dataset/``, ``naver/``, ``stats.json`` and ``mine.yaml`` into ``out`` together (staged, then
    renamed); ``out/work/`` (the teacher chunks) removed once they are in place."""
    from spladekit.io import staged_files, write_json, write_yaml
    from spladekit.mine.write import write_dataset, write_naver

    with staged_files(out) as tmp:
        write_dataset(tmp / "dataset", chosen.rows, config.num_negatives, teacher, show_progress)
        write_naver(
            tmp / "naver",
            data.queries,
            data.positives,
            chosen.negatives,
            data.corpus,
            chosen.naver_scores if teacher else None,
        )
        write_json(tmp / "stats.json", stats)
        write_yaml(tmp / "mine.yaml", config.model_dump(mode="json"))
    shutil.rmtree(out / "work", ignore_errors=True)
