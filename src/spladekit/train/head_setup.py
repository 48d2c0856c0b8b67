"""The MLM head's set-up before training: rescaling and shifting it (:func:`apply_rescale`), its options
(:func:`head_options`: a per-position cap, a folded vocabulary) and keeping the ``[PAD]`` column at 0
(:func:`suppress_pad_column`); :mod:`spladekit.train.step` uses them.
"""

from __future__ import annotations

import torch

from spladekit.model.metadata import INFERENCE_FREE


def apply_rescale(model, rescale, tokenizer=None, texts=None) -> dict | None:
    """Rescale (and shift) the MLM head at initialisation (:meth:`RescaleSpec.apply
    <spladekit.model.calibrate.spec.RescaleSpec.apply>`, arXiv 2606.18811, §3).

    Args:
        model: the masked LM, or the :class:`~spladekit.model.splade.SpladeModel` around it (an
            activity target is then measured with its pooling, cap and fold).

    Returns:
        ``{"mode": ..., "factor": F, "shift": s}`` or None when the spec changes nothing.

    Raises:
        ValueError, AlreadyRescaledError, CalibrationError: from ``rescale_mlm_head``.
    """
    from spladekit.model.calibrate.rescale import rescale_record

    factor = rescale.apply(model, tokenizer, texts)
    if factor is None:
        return None
    step = rescale_record(model)["history"][-1]
    return {"mode": step["mode"], "factor": factor, "shift": step.get("shift", 0.0)}


def head_options(config, folder, tokenizer, vocab_size: int) -> dict:
    """``{"position_top_k", "fold"}`` of the :class:`~spladekit.model.splade.SpladeModel` to train:
    the ``head:`` options of the config (:class:`~spladekit.model.calibrate.spec.HeadSpec`) over the
    start model's (``folder``, a :class:`~spladekit.model.folders.ModelFolder`).

    Raises:
        ValueError: ``fold_vocabulary`` with a tokenizer that is not byte-level BPE; a fold with an
            inference-free query side (its weights are per vocabulary entry, not per term).
        DataFormatError: the start model's saved fold is malformed.
    """
    options = config.head.resolve(folder.metadata(), tokenizer, vocab_size, folder.root)
    if options["fold"] is not None and config.model.query_encoder == INFERENCE_FREE:
        raise ValueError(
            "model.query_encoder inference-free with a folded vocabulary (head.fold_vocabulary, or the "
            "start model's): the query weights are per vocabulary entry, the vectors per folded term"
        )
    return options


PAD_BIAS = -1.0e4


def suppress_pad_column(mlm, tokenizer) -> bool:
    """Set the MLM decoder bias of the ``[PAD]`` token to ``PAD_BIAS`` (-1e4), in place.

    spladekit's encoder always outputs 0 in the ``[PAD]`` column (docs/conventions.md, "What the vectors are").
    With this bias the ``[PAD]`` logit is hugely negative, so ReLU gives 0 there in every library
    (spladekit, plain ``AutoModelForMaskedLM`` + max pooling, sentence-transformers), training scores
    equal the encoder's, and the exported model gives the same vectors everywhere. ``[PAD]`` is never
    an MLM prediction target, so nothing else changes.

    Returns:
        False (nothing done) when the tokenizer has no pad token or the decoder has no bias.
    """
    from spladekit.model.heads import find_mlm_head

    head = find_mlm_head(mlm)
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None or head.bias is None or not 0 <= pad_id < head.bias.shape[0]:
        return False
    with torch.no_grad():
        head.bias[pad_id] = min(float(head.bias[pad_id]), PAD_BIAS)
    return True
