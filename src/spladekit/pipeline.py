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
from spladekit.evaluate.metrics import DEFAULT_MEASURES, EvalConventions, evaluate
from spladekit.index.exact import exact_search, results_to_run
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


def conventions_for(dataset: BeirDataset, conventions: EvalConventions | str | None) -> EvalConventions:
    """The given conventions (object or preset name), or the preset matching the dataset's name."""
    if isinstance(conventions, EvalConventions):
        return conventions
    if conventions:
        return EvalConventions.preset(conventions)
    return EvalConventions.for_dataset(dataset.name or str(dataset.path))


@dataclass
class SystemResult:
    """One system's output on one dataset: the run, its metrics and per-query values."""

    name: str
    run: dict
    metrics: dict
    per_query: dict
    seconds: float
    doc_vectors: object = field(default=None, repr=False)  # the [N, V] CSR documents of a SPLADE system (reusable)


def evaluate_splade(encoder: SpladeEncoder, dataset: BeirDataset, k: int = 1000, measures=DEFAULT_MEASURES,
                    show_progress: bool = True, name: str = "splade",
                    conventions: EvalConventions | str | None = None, doc_vectors=None) -> SystemResult:
    """Encode the corpus and the judged queries, search exactly, evaluate.

    ``doc_vectors`` (the ``[N, V]`` CSR of the corpus in ``dataset.corpus`` order, e.g. another
    result's :attr:`SystemResult.doc_vectors`) skips document encoding: an inference-free query side
    on the same document encoder is evaluated on the very same index. Its ``seconds`` then exclude
    document encoding (``truncated_docs`` is None).

    Returns metrics with the keys of ``measures`` plus ``num_queries``, ``num_skipped``,
    ``avg_query_terms``, ``avg_doc_terms``, ``flops``, ``truncated_docs``, ``truncated_queries``,
    the counts of :func:`spladekit.evaluate.metrics.evaluate` and ``conventions`` (by default the
    preset matching the dataset name, see :meth:`EvalConventions.for_dataset`).
    """
    start = time.perf_counter()
    doc_ids, query_ids = list(dataset.corpus), list(dataset.queries)
    if doc_vectors is None:
        docs = encoder.encode_documents([dataset.corpus[d] for d in doc_ids], show_progress=show_progress)
        truncated = encoder.last_truncated
    else:
        docs, truncated = doc_vectors, None
    queries = encoder.encode_queries([dataset.queries[q] for q in query_ids], show_progress=show_progress)
    truncated_queries = encoder.last_truncated
    run = results_to_run(exact_search(queries, docs, k=k, doc_ids=doc_ids), query_ids, doc_ids)
    per_query: dict = {}
    metrics = evaluate(run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query)
    metrics.update(efficiency_stats(queries, docs))
    metrics["truncated_docs"] = truncated
    metrics["truncated_queries"] = truncated_queries
    return SystemResult(name, run, metrics, per_query, time.perf_counter() - start, doc_vectors=docs)


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
    if config is not None:
        write_json(out / "config.json", config)


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
                             conventions=conventions or config.conventions)
    saved = asdict(config)
    saved.update(query_max_length=encoder.metadata.query_max_length, doc_max_length=encoder.metadata.doc_max_length,
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
    import os
    import shutil

    from spladekit.data.beir import load_corpus
    from spladekit.model.inference_free import make_inference_free
    from spladekit.train.export import write_inference_free_sentence_transformers_files

    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    if documents is None:
        if data is None:
            raise ValueError("give the corpus: a BEIR folder (data) or the documents")
        documents = list(load_corpus(data).values())
    encoder = make_inference_free(SpladeEncoder.from_pretrained(model, device="cpu"), documents)
    tmp = out.with_name(f".tmp-{out.name}")
    if tmp.exists():
        shutil.rmtree(tmp)
    if write_inference_free_sentence_transformers_files(tmp, encoder.tokenizer, encoder.query_weights,
                                                        encoder.metadata.doc_max_length) is None:
        encoder.metadata.extra["sentence_transformers"] = "not written: decoder columns differ from the tokenizer's vocabulary"
    encoder.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)
    return encoder
