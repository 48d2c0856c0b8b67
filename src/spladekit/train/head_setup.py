"""The MLM head's set-up before training: rescaling it (:func:`apply_rescale`) and keeping the ``[PAD]``
column at 0 (:func:`suppress_pad_column`). Moved out of :mod:`spladekit.train.loop`, which uses them.
"""

from __future__ import annotations

import torch


def apply_rescale(mlm, rescale, tokenizer=None, texts=None) -> dict | None:
    """Rescale the MLM head at initialisation (:meth:`RescaleSpec.apply
    <spladekit.model.calibrate.spec.RescaleSpec.apply>`, arXiv 2606.18811, §3).

    Returns:
        ``{"mode": ..., "factor": F}`` or None when ``rescale.mode`` is None.

    Raises:
        ValueError, AlreadyRescaledError, CalibrationError: from ``rescale_mlm_head``.
    """
    factor = rescale.apply(mlm, tokenizer, texts)
    return None if factor is None else {"mode": rescale.mode, "factor": factor}


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
