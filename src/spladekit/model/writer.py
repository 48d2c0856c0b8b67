"""The one writer of spladekit model folders (:func:`write_model_folder`): what
:meth:`spladekit.model.encoder.SpladeEncoder.save_pretrained`, training and ``spladekit rescale`` save.

A folder holds the masked LM and its tokenizer (``AutoModelForMaskedLM`` loads it), ``spladekit.json``
(:class:`~spladekit.model.metadata.EncoderMetadata`: what the model computes), the sentence-transformers
module files where that library computes the same vectors, the inference-free query side when there is
one, and ``config.yaml`` when the configuration that made the model is given. It is read back by
:func:`spladekit.model.folders.read_model_folder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from spladekit.model.inference_free import save_query_weights
from spladekit.model.metadata import INFERENCE_FREE, EncoderMetadata

if TYPE_CHECKING:
    import torch

    from spladekit.model.splade import SpladeModel


def write_model_folder(
    folder: str | Path,
    model: SpladeModel,
    tokenizer,
    metadata: EncoderMetadata,
    query_weights: torch.Tensor | None = None,
    *,
    config: dict | None = None,
) -> None:
    """The one writer of spladekit model folders: the masked LM, its tokenizer, ``spladekit.json`` and
    the sentence-transformers module files, into ``folder`` (the caller stages it: a temporary folder,
    then rename, e.g. :func:`spladekit.io.atomic_folder`), and ``config.yaml`` when ``config`` (the
    configuration that made the model, a training run's) is given.

    ``spladekit.json`` records what the model computes: ``metadata`` with the model's pooling,
    activation, per-position cap and folded vocabulary (``fold``: the map itself), and a rescaling
    record of the MLM head (``config.spladekit_rescale``, :mod:`spladekit.model.calibrate.rescale`)
    copied into ``extra["rescale"]``. The sentence-transformers files (:mod:`spladekit.model.st_modules`:
    ``SpladePooling`` with this model's pooling and activation; the ``Router`` layout for an
    inference-free query side) are not written where that library would compute other vectors
    (special-token columns zeroed, a per-position cap, a folded vocabulary, a pruning rule, a query side
    whose size differs from the tokenizer's vocabulary); ``extra["sentence_transformers"]`` then says why.
    """
    from transformers.utils import logging as hf_logging

    from spladekit.model.st_modules import (
        write_inference_free_sentence_transformers_files,
        write_sentence_transformers_files,
    )

    folder = Path(folder)
    meta = metadata
    meta.pooling, meta.activation, meta.position_top_k = model.pooling, model.activation, model.position_top_k
    meta.fold = None if model.fold is None else model.fold.to_record()
    record = getattr(model.mlm.config, "spladekit_rescale", None)
    if record:
        meta.extra["rescale"] = record
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' "Writing model shards" bar: noise inside a training bar
    try:
        model.mlm.save_pretrained(folder)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(folder)
    unwritable = _sentence_transformers_cannot(meta)
    if unwritable:
        meta.extra["sentence_transformers"] = f"not written: {unwritable}"
    elif query_weights is None:
        write_sentence_transformers_files(folder, meta.doc_max_length, meta.pooling, meta.activation)
    elif (
        write_inference_free_sentence_transformers_files(
            folder, tokenizer, query_weights, meta.doc_max_length, meta.pooling, meta.activation
        )
        is None
    ):
        meta.extra["sentence_transformers"] = "not written: decoder columns differ from the tokenizer's vocabulary"
    if query_weights is not None:
        save_query_weights(folder, query_weights)
        meta.query_encoder = INFERENCE_FREE
    meta.save(folder)
    if config is not None:
        from spladekit.io import write_yaml

        write_yaml(folder / "config.yaml", config)


def _sentence_transformers_cannot(meta: EncoderMetadata) -> str:
    """Why sentence-transformers' ``SpladePooling`` cannot compute this model's vectors ("" when it can)."""
    if meta.zero_special_tokens:
        return "SpladePooling cannot zero the special-token columns"
    if meta.position_top_k is not None:
        return "SpladePooling has no per-position cap (position_top_k)"
    if meta.fold is not None:
        return "SpladePooling has no folded vocabulary"
    if meta.query_pruning or meta.doc_pruning:  # SparseEncoder would give the unpruned vectors
        from spladekit.model.pruning import of_record

        rules = ", ".join(
            f"{k}={of_record(getattr(meta, k))}" for k in ("query_pruning", "doc_pruning") if getattr(meta, k)
        )
        return f"sentence-transformers cannot apply the pruning rule ({rules})"
    return ""
