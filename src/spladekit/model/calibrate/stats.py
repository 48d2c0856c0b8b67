"""Measurements shared by diagnosis and rescaling: decoder norms, hidden states, logit statistics.

Notation (Rescaling MLM-Head for Neural Sparse Retrieval, arXiv 2606.18811, §3): the MLM head maps a
transformed hidden state ``h ∈ R^{H'}`` to logits ``z = W h + b`` with decoder weight ``W ∈ R^{V×H'}``
and bias ``b ∈ R^V``. The *row norm* of vocabulary entry ``v`` is ``‖W_v‖₂``; the Frobenius norm is
``‖W‖_F = sqrt(Σ_v ‖W_v‖₂²)``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from spladekit.errors import SpladekitError
from spladekit.model.heads import MLMHead


class CalibrationError(SpladekitError, ValueError):
    """No factor (or shift) reaches the requested target (e.g. the bias alone already exceeds it).
    Raised by :mod:`spladekit.model.calibrate.rescale` and :mod:`spladekit.model.calibrate.shift`."""


#: Logit statistics understood by :func:`logit_statistic` (plus any ``pNN`` / ``pNN.N`` percentile).
NAMED_STATISTICS = ("mean", "std", "max")


def unwrap(model: nn.Module) -> nn.Module:
    """The ``transformers`` masked-LM model inside a :class:`~spladekit.model.splade.SpladeModel` (or ``model``)."""
    return getattr(model, "mlm", model)


def row_norms(weight: torch.Tensor) -> np.ndarray:
    """``‖W_v‖₂`` for every row ``v`` of a decoder weight ``[V, H']``, as float64 ``[V]``."""
    return torch.linalg.vector_norm(weight.detach().double().cpu(), dim=1).numpy()


def summarize(values: np.ndarray) -> dict[str, float]:
    """mean, std, min, median, p99, max of a 1-D array (numpy's default linear-interpolation quantiles)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        return {}
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "min": float(values.min()),
        "median": float(np.median(values)),
        "p99": float(np.quantile(values, 0.99)),
        "max": float(values.max()),
    }


def quantile(x: torch.Tensor, q: float) -> float:
    """Quantile ``q ∈ [0, 1]`` of all elements of ``x``, numpy's default ("linear") definition.

    With ``n`` elements sorted as ``x₍₀₎ ≤ … ≤ x₍ₙ₋₁₎`` and ``pos = q (n - 1)``, the result is
    ``x₍⌊pos⌋₎ + (pos - ⌊pos⌋)(x₍⌊pos⌋+1₎ - x₍⌊pos⌋₎)``. Uses ``torch.kthvalue``, so it has no size
    limit (``torch.quantile`` refuses more than 16M elements).

    Raises:
        ValueError: ``q`` outside [0, 1] or ``x`` empty.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    flat = x.reshape(-1)
    n = flat.numel()
    if n == 0:
        raise ValueError("quantile of an empty tensor")
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    frac = pos - lo
    low = flat.kthvalue(lo + 1).values.double().item()
    if frac == 0.0 or lo + 1 >= n:
        return low
    high = flat.kthvalue(lo + 2).values.double().item()
    return low + frac * (high - low)


def parse_statistic(name: str) -> tuple[str, float | None]:
    """Validate a statistic name: ``"mean"``, ``"std"``, ``"max"`` or a percentile ``"p99"``/``"p99.9"``.

    Returns:
        ``(kind, q)`` with ``q ∈ [0, 1]`` for percentiles, else None.

    Raises:
        ValueError: unknown name.
    """
    if name in NAMED_STATISTICS:
        return name, None
    match = re.fullmatch(r"p(\d{1,2}(?:\.\d+)?|100)", name)
    if match:
        return "percentile", float(match.group(1)) / 100.0
    raise ValueError(
        f"unknown logit statistic {name!r}; use one of {', '.join(NAMED_STATISTICS)} or a percentile such as p99"
    )


def logit_statistic(logits: torch.Tensor, statistic: str) -> float:
    """One statistic over all elements of a logits tensor (see :func:`parse_statistic`); std is the population std."""
    kind, q = parse_statistic(statistic)
    flat = logits.reshape(-1)
    if kind == "mean":
        return flat.double().mean().item()
    if kind == "std":
        return flat.double().std(unbiased=False).item()
    if kind == "max":
        return flat.max().double().item()
    return quantile(flat, q)


@torch.no_grad()
def token_hidden_states(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    max_length: int = 128,
    batch_size: int = 16,
    max_tokens: int | None = 1024,
    seed: int = 0,
) -> torch.Tensor:
    """Transformed hidden states ``h`` (input of the decoder) of the non-padding tokens of ``texts``.

    Args:
        model: a masked-LM model of a supported family, or a SpladeModel.
        texts: the sample text; each is truncated to ``max_length`` tokens (special tokens included).
        max_tokens: keep a uniformly random subset (seeded by ``seed``) of at most this many tokens,
            so that the ``[N, V]`` logits built from them stay small; None keeps all.

    Returns:
        float32 ``[N, H']`` on the model's device, rows in text order.

    Raises:
        ValueError: no text given.
    """
    from spladekit.model.splade import SpladeModel

    texts = [str(t) for t in texts]
    if not texts:
        raise ValueError("no text given to measure logits on")
    splade = SpladeModel(unwrap(model), head_impl="plain")
    device = next(splade.parameters()).device
    was_training = splade.mlm.training
    splade.mlm.eval()
    rows = []
    try:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
                max_length=max_length,
                truncation=True,
                padding=True,
                return_tensors="pt",
            )
            mask = batch["attention_mask"].to(device)
            hidden = splade.hidden_states(batch["input_ids"].to(device), mask)
            rows.append(hidden[mask.bool()].float())
    finally:
        splade.mlm.train(was_training)
    hidden = torch.cat(rows)
    if max_tokens is not None and hidden.shape[0] > max_tokens:
        keep = sorted(random.Random(seed).sample(range(hidden.shape[0]), max_tokens))
        hidden = hidden[torch.tensor(keep, device=hidden.device)]
    return hidden


def decoder_logits(head: MLMHead, hidden: torch.Tensor, factor: float = 1.0, scale_bias: bool = False) -> torch.Tensor:
    """Logits ``[N, V]`` = ``F·(W h) + b`` (or ``F·(W h + b)`` when ``scale_bias``), float32, from ``hidden [N, H']``.

    ``F = 1`` gives the model's current logits. Rescaling formula: arXiv 2606.18811, §3.
    """
    weight = head.weight.detach().float()
    logits = hidden.float() @ weight.T
    if factor != 1.0:
        logits.mul_(factor)
    if head.bias is not None:
        bias = head.bias.detach().float()
        logits.add_(bias * factor if scale_bias else bias)
    return logits
