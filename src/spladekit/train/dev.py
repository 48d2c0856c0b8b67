"""Retrieval quality during training: the dev set, its evaluation, and best-checkpoint selection.

Every ``eval_every`` steps the current model encodes the dev corpus and queries and is scored by
:func:`spladekit.evaluate.retrieval.evaluate_splade`, the code behind ``spladekit evaluate`` (same encoder
class, same exact index and search, same ``ir_measures`` evaluation), so a dev nDCG@10 logged
during training is the number ``spladekit evaluate`` would give for that checkpoint on that set.

The dev set is either

- a BEIR folder and split given in ``dev.data`` / ``dev.split`` (never ``test``: refused), or
- the training queries held out by ``data.validation_fraction``, searched against the training
  corpus (for ``format: beir`` the dataset's whole corpus; for the other layouts every positive and
  negative text of the training data, de-duplicated by text) with their training positives as qrels.

Best checkpoint: the model with the highest ``dev.metric`` (ties keep the earlier step), saved as
``model/`` with ``best.json`` (metric, value, step); the final model goes to ``last/``. With
``dev.patience = P`` training stops after P dev evaluations in a row without improvement.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from spladekit.data.beir import BeirDataset
from spladekit.errors import DataFormatError

DEV_SPLIT = "dev"


def _doc_id(text: str) -> str:
    """A stable id for a document given only by its text (``t`` + 16 hex digits of its SHA-1)."""
    return "t" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def held_out_dev_set(
    held_out: Sequence, training: Sequence, corpus: dict[str, str] | None = None, name: str = "held-out"
) -> BeirDataset:
    """A dev set from held-out training examples.

    Args:
        held_out: the held-out :class:`~spladekit.train.data.TrainingExample` s (queries + positives).
        training: the training examples (their documents join the corpus when ``corpus`` is None).
        corpus: ``{doc_id: text}`` of the training collection (BEIR), or None to build it from the
            texts of ``held_out`` and ``training`` (ids from the text, so a text is one document).

    Returns:
        A :class:`BeirDataset` whose qrels give grade 1 to each held-out positive. Queries with the
        same text are one query (their positives merged).

    Raises:
        ValueError: no held-out example.
    """
    if not len(held_out):
        raise ValueError("no held-out training query for the dev set (set data.validation_fraction > 0 or dev.data)")
    by_text = corpus is None
    docs: dict[str, str] = {} if by_text else corpus
    if by_text:
        for example in list(training) + list(held_out):
            for _, text in list(example.positives) + list(example.negatives):
                docs.setdefault(_doc_id(text), text)
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    qid_of_text: dict[str, str] = {}
    for example in held_out:
        qid = qid_of_text.setdefault(example.query, str(example.qid))
        queries[qid] = example.query
        for doc_id, text in example.positives:
            key = _doc_id(text) if by_text else doc_id
            if key not in docs:
                raise DataFormatError(
                    name, f"relevant document {doc_id!r} of query {example.qid!r} is not in the corpus"
                )
            qrels.setdefault(qid, {})[key] = 1
    return BeirDataset(path=Path(name), corpus=docs, queries=queries, qrels=qrels, split="held-out", name=name)


def load_dev_set(dev, data, held_out: Sequence, training: Sequence) -> BeirDataset:
    """The dev set a :class:`~spladekit.train.config.DevConfig` describes (see the module docstring).

    Args:
        dev: the ``dev`` section; data: the ``data`` section of the training config.
        held_out, training: the examples :func:`~spladekit.train.data.split_validation` gave.

    Raises:
        ValueError: ``dev.split`` is the test split, or no dev data at all.
        DataFormatError, ResolutionError: from :func:`spladekit.data.beir.load_beir`.
    """
    from spladekit.data.beir import load_beir

    if dev.data is not None:
        check_not_test(dev.split)
        dataset = load_beir(dev.data, dev.split)
    else:
        corpus = load_beir(data.path, data.split).corpus if data.format == "beir" else None
        dataset = held_out_dev_set(held_out, training, corpus, name=f"{Path(str(data.path)).name}-held-out")
    if dev.max_queries is not None and len(dataset.queries) > dev.max_queries:
        keep = list(dataset.queries)[: dev.max_queries]
        dataset.queries = {q: dataset.queries[q] for q in keep}
        dataset.qrels = {q: dataset.qrels[q] for q in keep if q in dataset.qrels}
    if dev.max_docs is not None and len(dataset.corpus) > dev.max_docs:
        dataset.corpus = sub_corpus(dataset, dev.max_docs)
    return dataset


def sub_corpus(dataset: BeirDataset, max_docs: int) -> dict[str, str]:
    """Every document judged for a dev query, then the other documents in corpus order, up to
    ``max_docs`` in all (or all judged ones, if more): a smaller, deterministic search space that
    makes dev evaluation affordable on a CPU. Its numbers are higher than full-corpus ones (fewer
    distractors) and serve to *compare checkpoints*, not to report."""
    judged = {d for q in dataset.queries for d in dataset.qrels.get(q, {}) if d in dataset.corpus}
    room = max(0, max_docs - len(judged))
    others = [d for d in dataset.corpus if d not in judged][:room]
    kept = judged | set(others)
    return {d: t for d, t in dataset.corpus.items() if d in kept}


def check_not_test(split: str) -> None:
    """Refuse a dev set drawn from a test split (selection on test data inflates the test score).

    Raises:
        ValueError: ``split`` names a test split (``test``, ``test-*``, ``*_test``...).
    """
    words = split.lower().replace("-", "_").replace(".", "_").split("_")
    if "test" in words:
        raise ValueError(
            f"dev.split={split!r}: a dev set never comes from the test split; use a dev split or "
            "held-out training queries (data.validation_fraction, no dev.data)"
        )


@torch.no_grad()
def evaluate_dev(
    model, tokenizer, config, dataset: BeirDataset, step: int, device: torch.device, show_progress: bool = False
) -> dict:
    """nDCG@10, MRR@10 (``dev.measures``), active terms and FLOPS of the current model on the dev set.

    The model is put in eval mode for the evaluation and back in its previous mode afterwards; the
    RNG state is not touched (no dropout runs), so training continues exactly as without it.
    ``show_progress``: the bar of the corpus encoding.

    Returns:
        ``{"step", "split": "dev", <measure>: value..., "avg_query_terms", "avg_doc_terms",
        "flops", "dev_queries", "dev_docs", "dev_seconds"}``.
    """
    from spladekit.evaluate.retrieval import evaluate_splade
    from spladekit.model.encoder import EncoderMetadata, SpladeEncoder

    dev = config.dev
    was_training = model.training
    started = time.perf_counter()
    try:
        meta = EncoderMetadata(
            query_max_length=config.model.query_max_length,
            doc_max_length=config.model.doc_max_length,
            pooling=model.pooling,
            activation=model.activation,
        )
        query_weights = None
        if getattr(model, "query_weights", None) is not None:  # inference-free: score the query side being trained
            from spladekit.model.metadata import INFERENCE_FREE

            query_weights, meta.query_encoder = model.query_weights.saved_weights(), INFERENCE_FREE
        encoder = SpladeEncoder(
            model, tokenizer, meta, batch_size=dev.batch_size, device=device, query_weights=query_weights
        )
        result = evaluate_splade(
            encoder, dataset, k=dev.k, measures=dev.measures, show_progress=show_progress, name="dev"
        )
    finally:
        model.train(was_training)
    metrics = result.metrics
    record = {"step": step, "split": DEV_SPLIT}
    record.update({m: float(metrics[m]) for m in dev.measures})
    record.update(
        avg_query_terms=float(metrics["avg_query_terms"]),
        avg_doc_terms=float(metrics["avg_doc_terms"]),
        flops=float(metrics["flops"]),
        dev_queries=len(dataset.queries),
        dev_docs=len(dataset.corpus),
        dev_seconds=time.perf_counter() - started,
    )
    return record


class BestTracker:
    """The best dev record so far by ``metric`` (higher is better, ties keep the earlier step) and the
    count of evaluations since it improved (for early stopping with ``patience``)."""

    def __init__(self, metric: str, patience: int | None = None, records: Sequence[dict] = ()):
        self.metric, self.patience = metric, patience
        self.best: dict | None = None
        self.since = 0
        for record in records:  # a resumed run: its kept history
            if record.get("split") == DEV_SPLIT:
                self.update(record)

    def update(self, record: dict) -> bool:
        """Take a new dev record; True when it is the new best."""
        value = record[self.metric]
        best = None if self.best is None else self.best[self.metric]
        if best is None or (
            math.isfinite(value) and (not math.isfinite(best) or value > best)
        ):  # a NaN best never sticks
            self.best, self.since = record, 0
            return True
        self.since += 1
        return False

    @property
    def should_stop(self) -> bool:
        """True after ``patience`` evaluations in a row without improvement."""
        return self.patience is not None and self.since >= self.patience

    def summary(self) -> dict | None:
        """``{"metric", "value", "step"}`` of the best record, or None."""
        if self.best is None:
            return None
        return {"metric": self.metric, "value": self.best[self.metric], "step": self.best["step"]}
