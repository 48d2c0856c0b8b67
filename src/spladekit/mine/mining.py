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
        return model_candidates(queries, corpus, depth, config.model, config.index, show_progress, config.trust_remote_code)
    return run_candidates(config.run, queries, corpus, depth)


def stats_line(stats: dict) -> str:
    """One line: candidates, what each filter removed, negatives kept, queries short of negatives."""
    removed = ", ".join(f"{k} {stats['removed'][k]:,}" for k in STAT_KEYS[1:-1] if stats["removed"][k])
    return (f"mined {stats['queries']:,} queries: {stats['removed']['candidates']:,} candidates; removed: "
            f"{removed or 'none'}; kept {stats['removed']['kept']:,} negatives; {stats['rows']:,} dataset rows; "
            f"{stats['short_queries']:,} queries with fewer than {stats['num_negatives']} negatives (no dataset row)")


def mine(config: MineConfig, out: str | Path, show_progress: bool = True) -> MineResult:
    """Mine hard negatives (see the module docstring and :class:`~spladekit.mine.config.MineConfig`).

    Raises:
        DataFormatError, ResolutionError: a bad or missing input (naming file and line).
        ValueError: a margin filter without a teacher while a positive is not among its query's
            candidates (its retriever score is then unknown).
    """
    from spladekit.io import staged_files, write_json, write_yaml
    from spladekit.mine.inputs import read_mining_input
    from spladekit.mine.write import write_dataset, write_naver

    out = Path(out)
    data = read_mining_input(config)
    teacher = bool(config.teachers)
    if teacher:  # checked before the candidates are mined and anything is written
        from spladekit.mine.teacher import check_teacher_files

        for name in config.teachers:
            check_teacher_files(name, config.trust_remote_code)
    settings = FilterSettings(num_negatives=config.num_negatives, range_min=config.range_min, range_max=config.range_max,
                              max_score=config.max_score, min_score=config.min_score, absolute_margin=config.absolute_margin,
                              relative_margin=config.relative_margin, sampling=config.sampling)
    max_positives = max(len(p) for p in data.positives.values())
    range_max = config.range_max or default_range_max(settings, max_positives, teacher)
    depth = config.depth or default_depth(range_max, max_positives)
    ranked = _candidates(config, data.queries, data.corpus, depth, show_progress)

    qids = list(data.queries)
    same_text = {qid: {d for d, _ in ranked[qid] if data.corpus[d] == data.queries[qid]} for qid in qids}
    pool = {qid: [(d, s) for d, s in ranked[qid] if d not in data.positives[qid] and d not in same_text[qid]] for qid in qids}
    if teacher:
        from spladekit.mine.teacher import score_pairs

        groups = [[(data.queries[q], data.corpus[d]) for d in data.positives[q]] + [(data.queries[q], data.corpus[d]) for d, _ in pool[q]]
                  for q in qids]
        scored = score_pairs(groups, config.teachers, out / "work", config.activation, config.teacher_batch_size,
                             config.chunk_queries, config.teacher_max_length, config.device, show_progress,
                             config.trust_remote_code)
        positive_scores, candidate_scores = {}, {}
        for q, scores in zip(qids, scored):
            n_pos = len(data.positives[q])
            positive_scores[q] = dict(zip(data.positives[q], scores[:n_pos]))
            candidate_scores[q] = dict(zip((d for d, _ in pool[q]), scores[n_pos:]))
        ranked = {q: [(d, candidate_scores[q].get(d, 0.0)) for d, _ in ranked[q]] for q in qids}  # excluded ones: never kept
    else:
        positive_scores = {q: {d: s for d, s in ranked[q] if d in data.positives[q]} for q in qids}
        if config.absolute_margin is not None or config.relative_margin is not None:
            for q in qids:
                lacking = [d for d in data.positives[q] if d not in positive_scores[q]]
                if lacking:
                    raise ValueError(f"query {q!r}: positive {lacking[0]!r} is not among its top-{depth} candidates, so its "
                                     "retriever score (the margins' reference) is unknown; give a teacher or a larger depth")

    rng = random.Random(config.seed)
    totals = dict.fromkeys(STAT_KEYS, 0)
    rows, negatives, naver_scores, short = [], {}, {}, 0
    for q in qids:
        selection = select_negatives(ranked[q], list(positive_scores[q].values()), settings, range_max,
                                     excluded=set(data.positives[q]), same_as_query=same_text[q], rng=rng)
        totals["candidates"] += len(ranked[q])
        for key, value in selection.removed.items():
            totals[key] += value
        totals["kept"] += len(selection.negatives)
        negatives[q] = [d for d, _ in selection.negatives]
        if teacher:
            naver_scores[q] = {**positive_scores[q], **dict(selection.negatives)}
        if not selection.complete:
            short += 1
            continue
        for p in data.positives[q]:
            rows.append({"query_id": q, "query": data.queries[q], "positive_id": p, "positive": data.corpus[p],
                         "negatives": [(d, data.corpus[d]) for d in negatives[q]],
                         "scores": [positive_scores[q].get(p, 0.0)] + [s for _, s in selection.negatives]})
    stats = {"queries": len(qids), "num_negatives": config.num_negatives, "range_max": range_max, "depth": depth,
             "teachers": list(config.teachers), "removed": totals, "rows": len(rows), "short_queries": short}
    if not rows:
        raise ValueError(f"no query kept {config.num_negatives} negatives, nothing to write ({stats_line(stats)}); "
                         "loosen the filters (range_max, margins, max_score) or lower num_negatives")
    with staged_files(out) as tmp:
        write_dataset(tmp / "dataset", rows, config.num_negatives, teacher, show_progress)
        write_naver(tmp / "naver", data.queries, data.positives, negatives, data.corpus, naver_scores if teacher else None)
        write_json(tmp / "stats.json", stats)
        write_yaml(tmp / "mine.yaml", config.model_dump(mode="json"))
    shutil.rmtree(out / "work", ignore_errors=True)
    return MineResult(out, stats, stats_line(stats))
