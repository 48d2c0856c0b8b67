"""Systems evaluated on one dataset: ``spladekit evaluate``'s job (:func:`run_evaluation`, a model and
a BEIR folder → run, metrics, config, with its :class:`EvalConfig`), the BM25 baseline
(:func:`evaluate_bm25`), fused runs (:func:`evaluate_fused`), query-encoding latency, and the files
each system's evaluation writes (:func:`write_system`). One system's retrieval itself:
:mod:`spladekit.evaluate.retrieval`.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import Field

from spladekit.data.beir import BeirDataset, load_beir
from spladekit.data.trec import RUN_TAG, write_run
from spladekit.evaluate.metrics import DEFAULT_MEASURES, EvalConventions, evaluate
from spladekit.evaluate.retrieval import SystemResult, conventions_for, evaluate_splade
from spladekit.index.exact import results_to_run
from spladekit.index.index import searcher_config
from spladekit.io import ensure_folder, write_json
from spladekit.model.encoder import SpladeEncoder
from spladekit.settings import Settings


class EvalConfig(Settings):
    """What an evaluation run did, saved as ``config.json`` next to its outputs (a settings record:
    :class:`spladekit.settings.Settings`)."""

    model: str
    data: str
    split: str = "test"
    k: int = 1000
    batch_size: int = 32
    query_max_length: int | None = None
    doc_max_length: int | None = None
    measures: list[str] = Field(default_factory=lambda: list(DEFAULT_MEASURES))
    conventions: str | None = None  # evaluation preset; None: chosen from the dataset name
    backend: str = "exact"  # retrieval backend of the index (exact or seismic)
    index: str | None = None  # keep the index folder here (None: a temporary folder, removed)
    trust_remote_code: bool = False  # run the model folder's own code (spladekit.model.remote_code)


def query_latency(encoders: dict[str, SpladeEncoder], queries: list[str], warmup: int = 5) -> dict[str, float]:
    """Median query-encoding latency (milliseconds per query, batch of one, tokenisation included)
    of each encoder, measured side by side: for each query every encoder runs in turn, so load on a
    shared machine falls on all of them alike. The first ``warmup`` queries are not counted.

    Raises:
        ValueError: no more queries than ``warmup``.
    """
    import statistics

    if len(queries) <= warmup:
        raise ValueError(f"need more than {warmup} queries to time, got {len(queries)}")
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for i, text in enumerate(queries):
        for name, encoder in encoders.items():
            began = time.perf_counter()
            encoder.encode_queries([text])
            if i >= warmup:
                times[name].append((time.perf_counter() - began) * 1000.0)
    return {name: statistics.median(values) for name, values in times.items()}


def evaluate_fused(
    results: list[SystemResult],
    dataset: BeirDataset,
    name: str,
    config=None,
    measures=DEFAULT_MEASURES,
    conventions: EvalConventions | str | None = None,
) -> SystemResult:
    """Fuse the runs of ``results`` (:func:`spladekit.index.fusion.fuse`, ``config`` a
    :class:`~spladekit.index.fusion.FusionConfig`) and evaluate the fused run under the same
    measures and conventions as the systems it fuses. ``metrics["fusion"]`` records the settings."""
    from spladekit.index.fusion import FusionConfig, fuse

    start = time.perf_counter()
    config = config or FusionConfig()
    run = fuse([r.run for r in results], config)
    per_query: dict = {}
    metrics = evaluate(run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query)
    metrics["fusion"] = dict(config.model_dump(), runs=[r.name for r in results])
    return SystemResult(name, run, metrics, per_query, time.perf_counter() - start)


def evaluate_bm25(
    dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES, conventions: EvalConventions | str | None = None
) -> SystemResult:
    """The BM25 baseline (bm25s) on the same dataset, measures and conventions."""
    from spladekit.index.bm25 import bm25_search

    start = time.perf_counter()
    doc_ids, query_ids = list(dataset.corpus), list(dataset.queries)
    results = bm25_search([dataset.queries[q] for q in query_ids], [dataset.corpus[d] for d in doc_ids], k=k)
    run = results_to_run(results, query_ids, doc_ids)
    per_query: dict = {}
    metrics = evaluate(run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query)
    return SystemResult("bm25", run, metrics, per_query, time.perf_counter() - start)


def write_system(result: SystemResult, out: Path, config: dict | None = None) -> None:
    """Write ``run.trec``, ``metrics.json``, ``per_query.json`` (and ``config.json``) into ``out``."""
    ensure_folder(out)
    tag = "_".join(result.name.split()) or RUN_TAG  # a TREC tag is one column: "m (before)" -> "m_(before)"
    write_run(result.run, out / "run.trec", tag=tag)
    metrics = dict(result.metrics)
    metrics["wall_time_s"] = round(result.seconds, 3)
    write_json(out / "metrics.json", metrics)
    write_json(out / "per_query.json", result.per_query)
    if config is not None or result.settings is not None:
        saved = dict(config or {})
        if result.settings is not None:
            saved["search"] = result.settings  # the settings record of the retrieval
        write_json(out / "config.json", saved)


def run_evaluation(
    config: EvalConfig, out: str | Path, show_progress: bool = True, conventions: EvalConventions | None = None
) -> SystemResult:
    """``spladekit evaluate``: load model and data, evaluate, write everything into ``out``.

    ``conventions`` (when given) overrides ``config.conventions``; what was used is saved in
    ``metrics.json`` under ``"conventions"``.

    Raises:
        ValueError: ``k`` or ``batch_size`` < 1 (checked before any work).
        OutputPathError: ``out`` is an existing file.
    """
    for name in ("k", "batch_size"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be ≥ 1, got {getattr(config, name)}")
    if Path(out).exists() and not Path(out).is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    encoder = SpladeEncoder.from_pretrained(
        config.model,
        query_max_length=config.query_max_length,
        doc_max_length=config.doc_max_length,
        batch_size=config.batch_size,
        trust_remote_code=config.trust_remote_code,
    )
    dataset = load_beir(config.data, config.split)
    result = evaluate_splade(
        encoder,
        dataset,
        k=config.k,
        measures=config.measures,
        show_progress=show_progress,
        conventions=conventions or config.conventions,
        searcher=searcher_config(config.backend),
        index=config.index,
        name=RUN_TAG,
    )  # the run's tag, as `spladekit search` writes it
    saved = config.model_dump()
    saved.update(
        query_max_length=encoder.metadata.query_max_length,
        doc_max_length=encoder.metadata.doc_max_length,
        pooling=encoder.metadata.pooling,
        activation=encoder.metadata.activation,
        conventions=result.metrics["conventions"],
    )  # what was used, not just what was asked
    write_system(result, Path(out), saved)
    return result
