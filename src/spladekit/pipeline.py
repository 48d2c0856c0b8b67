"""The main job, end to end: a model and a BEIR folder → run, metrics, efficiency, plot.

This is the only module that strings the stages together; the CLI calls it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spladekit.data.beir import BeirDataset, load_beir
from spladekit.data.trec import write_run
from spladekit.evaluate.efficiency import efficiency_stats
from spladekit.evaluate.metrics import DEFAULT_MEASURES, EvalConventions, evaluate
from spladekit.index.exact import results_to_run
from spladekit.index.index import Index
from spladekit.index.seismic import SeismicBuildParams, SeismicSearchParams
from spladekit.io import ensure_folder, write_json
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
    conventions: str | None = None  # evaluation preset; None: chosen from the dataset name
    backend: str = "exact"  # retrieval backend of the index (exact or seismic)
    index: str | None = None  # keep the index folder here (None: a temporary folder, removed)


def conventions_for(dataset: BeirDataset, conventions: EvalConventions | str | None) -> EvalConventions:
    """The given conventions (object or preset name), or the preset matching the dataset's name."""
    if isinstance(conventions, EvalConventions):
        return conventions
    if conventions:
        return EvalConventions.preset(conventions)
    return EvalConventions.for_dataset(dataset.name or str(dataset.path))


@dataclass
class SystemResult:
    """One system's output on one dataset: the run, its metrics and per-query values, and the
    settings record of the retrieval (:class:`spladekit.index.index.SearchSettings`), when there was one."""

    name: str
    run: dict
    metrics: dict
    per_query: dict
    seconds: float
    settings: dict | None = None


def evaluate_splade(encoder: SpladeEncoder, dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES,
                    show_progress: bool = True, name: str = "splade",
                    conventions: EvalConventions | str | None = None, backend: str = "exact",
                    index: str | Path | Index | None = None, seismic: SeismicSearchParams | None = None,
                    seismic_build: SeismicBuildParams | None = None, chunk_size: int = 10_000) -> SystemResult:
    """Evaluate an encoder on a dataset through an :class:`~spladekit.index.index.Index`: the corpus is
    indexed (in the folder ``index``, or a temporary one removed afterwards; an open ``Index`` is
    searched as it is), the judged queries are searched with ``backend``, the run is evaluated.

    The index is built by this process alone (also under ``torchrun``: evaluation during training
    runs on one rank).

    Returns metrics with the keys of ``measures`` plus ``num_queries``, ``num_skipped``,
    ``avg_query_terms``, ``avg_doc_terms``, ``flops``, ``truncated_docs``, ``truncated_queries``,
    ``ms_per_query`` (retrieval only), the counts of :func:`spladekit.evaluate.metrics.evaluate` and
    ``conventions`` (by default the preset matching the dataset name, see
    :meth:`EvalConventions.for_dataset`); ``settings`` holds the retrieval's settings record.
    """
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spladekit-eval-") as scratch:
        if isinstance(index, Index):
            searched = index
        else:
            folder = Path(index) if index is not None else Path(scratch) / "index"
            searched = Index.build(encoder, dataset.corpus, folder, chunk_size=chunk_size, show_progress=show_progress, distributed=False)
        result = searched.search(dataset.queries, k=k, backend=backend, encoder=encoder, seismic=seismic, seismic_build=seismic_build)
        truncated_queries = encoder.last_truncated
        per_query: dict = {}
        metrics = evaluate(result.run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query)
        metrics.update(efficiency_stats(result.queries, searched.docs))
        metrics["truncated_docs"] = searched.metadata.get("truncated_docs")
        del searched  # the memory maps close before the temporary folder goes
    metrics["truncated_queries"] = truncated_queries
    metrics["ms_per_query"] = round(result.latency.mean_ms, 4)
    return SystemResult(name, result.run, metrics, per_query, time.perf_counter() - start, result.settings.record())


def evaluate_bm25(dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES,
                  conventions: EvalConventions | str | None = None) -> SystemResult:
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
    tag = "_".join(result.name.split()) or "spladekit"  # a TREC tag is one column: "m (before)" -> "m_(before)"
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


def run_evaluation(config: EvalConfig, out: str | Path, show_progress: bool = True,
                   conventions: EvalConventions | None = None) -> SystemResult:
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
        config.model, query_max_length=config.query_max_length, doc_max_length=config.doc_max_length,
        batch_size=config.batch_size,
    )
    dataset = load_beir(config.data, config.split)
    result = evaluate_splade(encoder, dataset, k=config.k, measures=config.measures, show_progress=show_progress,
                             conventions=conventions or config.conventions, backend=config.backend, index=config.index)
    saved = asdict(config)
    saved.update(query_max_length=encoder.metadata.query_max_length, doc_max_length=encoder.metadata.doc_max_length,
                 conventions=result.metrics["conventions"])  # what was used, not just what was asked
    write_system(result, Path(out), saved)
    return result
