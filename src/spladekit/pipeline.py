"""The main job, end to end: a model and a BEIR folder → run, metrics, efficiency, plot.

This is the only module that strings the stages together; the CLI calls it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spladekit.data.beir import BeirDataset, load_beir
from spladekit.data.trec import write_run
from spladekit.evaluate.efficiency import efficiency_stats
from spladekit.evaluate.metrics import DEFAULT_MEASURES, evaluate, evaluate_per_query
from spladekit.index.exact import exact_search, results_to_run
from spladekit.io import write_json
from spladekit.model.encoder import SpladeEncoder


@dataclass
class EvalConfig:
    """What an evaluation run did, saved as ``config.json`` next to its outputs."""

    model: str
    data: str
    split: str = "test"
    k: int = 1000
    batch_size: int = 32
    query_max_length: int | None = None
    doc_max_length: int | None = None
    measures: list[str] = field(default_factory=lambda: list(DEFAULT_MEASURES))


@dataclass
class SystemResult:
    """One system's output on one dataset: the run, its metrics and per-query values."""

    name: str
    run: dict
    metrics: dict
    per_query: dict
    seconds: float


def evaluate_splade(encoder: SpladeEncoder, dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES,
                    show_progress: bool = True, name: str = "splade") -> SystemResult:
    """Encode the corpus and the judged queries, search exactly, evaluate.

    Returns metrics with the keys of ``measures`` plus ``num_queries``, ``num_skipped``,
    ``avg_query_terms``, ``avg_doc_terms``, ``flops``, ``truncated_docs``.
    """
    start = time.perf_counter()
    doc_ids, query_ids = list(dataset.corpus), list(dataset.queries)
    docs = encoder.encode_documents([dataset.corpus[d] for d in doc_ids], show_progress=show_progress)
    truncated = encoder.last_truncated
    queries = encoder.encode_queries([dataset.queries[q] for q in query_ids], show_progress=show_progress)
    run = results_to_run(exact_search(queries, docs, k=k), query_ids, doc_ids)
    metrics = evaluate(run, dataset.qrels, measures)
    metrics.update(efficiency_stats(queries, docs))
    metrics["truncated_docs"] = truncated
    per_query = evaluate_per_query(run, dataset.qrels, measures)
    return SystemResult(name, run, metrics, per_query, time.perf_counter() - start)


def evaluate_bm25(dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES) -> SystemResult:
    """The BM25 baseline (bm25s) on the same dataset and measures."""
    from spladekit.index.bm25 import bm25_search

    start = time.perf_counter()
    doc_ids, query_ids = list(dataset.corpus), list(dataset.queries)
    results = bm25_search([dataset.queries[q] for q in query_ids], [dataset.corpus[d] for d in doc_ids], k=k)
    run = results_to_run(results, query_ids, doc_ids)
    return SystemResult("bm25", run, evaluate(run, dataset.qrels, measures), evaluate_per_query(run, dataset.qrels, measures),
                        time.perf_counter() - start)


def write_system(result: SystemResult, out: Path, config: dict | None = None) -> None:
    """Write ``run.trec``, ``metrics.json``, ``per_query.json`` (and ``config.json``) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_run(result.run, out / "run.trec", tag=result.name)
    metrics = dict(result.metrics)
    metrics["wall_time_s"] = round(result.seconds, 3)
    write_json(out / "metrics.json", metrics)
    write_json(out / "per_query.json", result.per_query)
    if config is not None:
        write_json(out / "config.json", config)


def run_evaluation(config: EvalConfig, out: str | Path, show_progress: bool = True) -> SystemResult:
    """``spladekit evaluate``: load model and data, evaluate, write everything into ``out``."""
    encoder = SpladeEncoder.from_pretrained(
        config.model, query_max_length=config.query_max_length, doc_max_length=config.doc_max_length,
        batch_size=config.batch_size,
    )
    dataset = load_beir(config.data, config.split)
    result = evaluate_splade(encoder, dataset, k=config.k, measures=config.measures, show_progress=show_progress)
    saved = asdict(config)
    saved.update(query_max_length=encoder.metadata.query_max_length, doc_max_length=encoder.metadata.doc_max_length)
    write_system(result, Path(out), saved)
    return result
