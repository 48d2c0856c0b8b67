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
from spladekit.io import atomic_folder, ensure_folder, write_json
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
    index_folder: Path | None = None  # the index folder searched, when it outlives the call (reusable)


def evaluate_splade(encoder: SpladeEncoder, dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES,
                    show_progress: bool = True, name: str = "splade",
                    conventions: EvalConventions | str | None = None, backend: str = "exact",
                    index: str | Path | Index | None = None, seismic: SeismicSearchParams | None = None,
                    seismic_build: SeismicBuildParams | None = None, chunk_size: int = 10_000,
                    index_metadata: dict | None = None) -> SystemResult:
    """Evaluate an encoder on a dataset through an :class:`~spladekit.index.index.Index`: the corpus is
    indexed (in the folder ``index``, or a temporary one removed afterwards; an open ``Index`` is
    searched as it is), the judged queries are searched with ``backend``, the run is evaluated.

    The index is built by this process alone (also under ``torchrun``: evaluation during training
    runs on one rank).

    An open ``Index`` built by another encoder (e.g. the documents of the full model, searched with an
    inference-free query side, :mod:`spladekit.model.inference_free`) is searched as it is: its
    documents are not re-encoded. ``index_folder`` of the result names the folder when it outlives
    the call (a folder given, or an open ``Index``). ``index_metadata`` goes into a built index's
    ``index.json`` (e.g. ``model``: what ``spladekit search|serve`` load to encode its queries).

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
            searched = Index.build(encoder, dataset.corpus, folder, chunk_size=chunk_size, metadata=index_metadata,
                                   show_progress=show_progress, distributed=False)
        result = searched.search(dataset.queries, k=k, backend=backend, encoder=encoder, seismic=seismic, seismic_build=seismic_build)
        truncated_queries = encoder.last_truncated
        per_query: dict = {}
        metrics = evaluate(result.run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query)
        metrics.update(efficiency_stats(result.queries, searched.docs))
        metrics["truncated_docs"] = searched.metadata.get("truncated_docs")
        kept = None if index is None else searched.folder
        del searched  # the memory maps close before the temporary folder goes
    metrics["truncated_queries"] = truncated_queries
    metrics["ms_per_query"] = round(result.latency.mean_ms, 4)
    return SystemResult(name, result.run, metrics, per_query, time.perf_counter() - start, result.settings.record(),
                        index_folder=kept)


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


def evaluate_fused(results: list[SystemResult], dataset: BeirDataset, name: str, config=None,
                   measures=DEFAULT_MEASURES, conventions: EvalConventions | str | None = None) -> SystemResult:
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
                 pooling=encoder.metadata.pooling, activation=encoder.metadata.activation,
                 conventions=result.metrics["conventions"])  # what was used, not just what was asked
    write_system(result, Path(out), saved)
    return result


def build_inference_free(model: str, data: str | None, out: str | Path, documents: list[str] | None = None):
    """``spladekit inference-free``: ``model``'s document encoder with an inference-free query side
    whose weights are the IDF of the corpus of ``data`` (or of ``documents``), saved into ``out``
    atomically with the sentence-transformers ``Router`` files (where expressible, see
    :func:`spladekit.train.export.write_inference_free_sentence_transformers_files`).

    Returns:
        The :class:`SpladeEncoder` (its ``query_weights`` set).

    Raises:
        ValueError: neither ``data`` nor ``documents``, or an empty corpus.
        OutputPathError: ``out`` is an existing file.
    """
    from spladekit.data.beir import load_corpus
    from spladekit.model.inference_free import make_inference_free

    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    if documents is None:
        if data is None:
            raise ValueError("give the corpus: a BEIR folder (data) or the documents")
        documents = list(load_corpus(data).values())
    encoder = make_inference_free(SpladeEncoder.from_pretrained(model, device="cpu"), documents)
    with atomic_folder(out) as tmp:
        encoder.save_pretrained(tmp)  # with the sentence-transformers Router files where expressible
        from spladekit.publish.card import write_model_card

        write_model_card(tmp, previous=out, reference=str(out.resolve()))  # README.md (the one OUT has is kept)
    return encoder
