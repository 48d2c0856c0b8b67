"""One system's evaluation on a dataset: encode the corpus into an index, search the judged queries,
evaluate the run (:func:`evaluate_splade`, the code behind ``spladekit evaluate``).

It strings model → index → run → metrics for one encoder; training's dev evaluation
(:mod:`spladekit.train.dev`) and ``spladekit evaluate``'s job (:mod:`spladekit.evaluate.systems`) both
call it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from spladekit.data.beir import BeirDataset
from spladekit.evaluate.efficiency import efficiency_stats
from spladekit.evaluate.metrics import DEFAULT_MEASURES, EvalConventions, evaluate
from spladekit.index.index import Index
from spladekit.index.searcher import SearcherConfig
from spladekit.model.encoder import SpladeEncoder


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


def evaluate_splade(
    encoder: SpladeEncoder,
    dataset: BeirDataset,
    k: int = 1000,
    measures=DEFAULT_MEASURES,
    show_progress: bool = True,
    name: str = "splade",
    conventions: EvalConventions | str | None = None,
    searcher: SearcherConfig | None = None,
    index: str | Path | Index | None = None,
    chunk_size: int = 10_000,
    index_metadata: dict | None = None,
) -> SystemResult:
    """Evaluate an encoder on a dataset through an :class:`~spladekit.index.index.Index`: the corpus is
    indexed (in the folder ``index``, or a temporary one removed afterwards; an open ``Index`` is
    searched as it is), the judged queries are searched with ``searcher`` (None: exact search), the run is evaluated.

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
            searched = Index.build(
                encoder,
                dataset.corpus,
                folder,
                chunk_size=chunk_size,
                metadata=index_metadata,
                show_progress=show_progress,
                distributed=False,
            )
        result = searched.search(dataset.queries, k=k, searcher=searcher, encoder=encoder)
        truncated_queries = encoder.last_truncated
        per_query: dict = {}
        metrics = evaluate(
            result.run, dataset.qrels, measures, conventions_for(dataset, conventions), per_query=per_query
        )
        metrics.update(efficiency_stats(result.queries, searched.docs))
        metrics["truncated_docs"] = searched.metadata.get("truncated_docs")
        kept = None if index is None else searched.folder
        del searched  # the memory maps close before the temporary folder goes
    metrics["truncated_queries"] = truncated_queries
    metrics["ms_per_query"] = round(result.latency.mean_ms, 4)
    return SystemResult(
        name, result.run, metrics, per_query, time.perf_counter() - start, result.settings.record(), index_folder=kept
    )
