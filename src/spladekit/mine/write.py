"""Write mined examples as spladekit's trainer reads them (``data.format: hf`` or ``naver``).

``OUT/dataset/``: a Hugging Face dataset (``Dataset.save_to_disk``) with sentence-transformers'
n-tuple columns ``query, positive, negative_1 … negative_N`` and, with a teacher, ``scores``
(``[s(q, d⁺), s(q, d⁻_1), …]``), one row per (query, positive) as ``mine_hard_negatives`` writes;
ids in ``query_id, positive_id, negative_1_id …`` (ignored as texts by :mod:`spladekit.train.hf`).
A query with fewer than N negatives left has no row (as sentence-transformers' n-tuple output).

``OUT/naver/``: the naver/splade layout: ``triplets/raw.tsv`` (query, positive, negative text, one
line per positive × negative), ``qrel/qrel.json``, ``train_queries/raw.tsv``,
``full_collection/raw.tsv`` (the documents used) and, with a teacher, ``scores.pkl.gz``
(``{qid: {doc_id: score}}`` for the positives and the chosen negatives; every query, also those with
fewer than N negatives). Tabs and line breaks inside texts become spaces there (TSV cannot hold them).
"""

from __future__ import annotations

import gzip
import json
import pickle
import re
from pathlib import Path

_TSV_BREAKS = re.compile(r"[\t\r\n]+")


def _tsv(text: str) -> str:
    return _TSV_BREAKS.sub(" ", text)


def write_dataset(
    folder: Path, rows: list[dict], num_negatives: int, with_scores: bool, show_progress: bool = True
) -> None:
    """``rows``: ``{query_id, query, positive_id, positive, negatives: [(id, text)], scores}``; written to ``folder``."""
    import datasets

    columns: dict[str, list] = {"query": [], "positive": []}
    for k in range(1, num_negatives + 1):
        columns[f"negative_{k}"] = []
    if with_scores:
        columns["scores"] = []
    columns["query_id"], columns["positive_id"] = [], []
    for k in range(1, num_negatives + 1):
        columns[f"negative_{k}_id"] = []
    for row in rows:
        columns["query"].append(row["query"])
        columns["positive"].append(row["positive"])
        columns["query_id"].append(row["query_id"])
        columns["positive_id"].append(row["positive_id"])
        for k, (doc_id, text) in enumerate(row["negatives"], 1):
            columns[f"negative_{k}"].append(text)
            columns[f"negative_{k}_id"].append(doc_id)
        if with_scores:
            columns["scores"].append(row["scores"])
    features = {name: datasets.Value("string") for name in columns if name != "scores"}
    if with_scores:
        features["scores"] = datasets.Sequence(datasets.Value("float64"))
    dataset = datasets.Dataset.from_dict(columns, features=datasets.Features({n: features[n] for n in columns}))
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = not show_progress and not are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        dataset.save_to_disk(str(folder))
    finally:
        if quiet:
            enable_progress_bars()


def write_naver(
    folder: Path,
    queries: dict[str, str],
    positives: dict[str, list[str]],
    negatives: dict[str, list[str]],
    corpus: dict[str, str],
    scores: dict[str, dict[str, float]] | None,
) -> None:
    """The naver/splade layout of the module docstring, into ``folder`` (a fresh folder)."""
    for sub in ("triplets", "qrel", "train_queries", "full_collection"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    used: dict[str, None] = {}
    with open(folder / "triplets" / "raw.tsv", "w", encoding="utf-8") as triples:
        for qid, pos in positives.items():
            for p in pos:
                used[p] = None
                for n in negatives.get(qid, []):
                    triples.write(f"{_tsv(queries[qid])}\t{_tsv(corpus[p])}\t{_tsv(corpus[n])}\n")
            for n in negatives.get(qid, []):
                used[n] = None
    (folder / "qrel" / "qrel.json").write_text(
        json.dumps({q: {d: 1 for d in pos} for q, pos in positives.items()}), encoding="utf-8"
    )
    (folder / "train_queries" / "raw.tsv").write_text(
        "".join(f"{q}\t{_tsv(queries[q])}\n" for q in positives), encoding="utf-8"
    )
    (folder / "full_collection" / "raw.tsv").write_text(
        "".join(f"{d}\t{_tsv(corpus[d])}\n" for d in used), encoding="utf-8"
    )
    if scores is not None:
        with gzip.open(folder / "scores.pkl.gz", "wb") as handle:
            pickle.dump(scores, handle, protocol=pickle.HIGHEST_PROTOCOL)
