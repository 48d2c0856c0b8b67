"""A shift of every logit, and the SPLADE activity at initialisation it is calibrated on.

A shift ``s`` turns every logit ``z = W h + b`` into ``z − s``: it is the decoder bias ``b − s``, so
it costs nothing at inference and every export carries it (SPARSEUP pools ``log(1 + ReLU(x − 15))``;
the Vocabulary Transfer line of work, arXiv 2607.00004, calibrates such a shift per model). The
scale ``F`` of arXiv 2606.18811 (:mod:`spladekit.model.calibrate.rescale`) sets the logits' spread;
the shift sets how many of them clear SPLADE's ``ReLU``. Two measures of that activity on sample text:

``active_terms``
    the mean number of non-zero SPLADE weights per text. A weight is non-zero exactly where its
    pooled logit ``m_j = max_t z_tj`` (over the text's real positions, and over the logits each
    position keeps under a cap) exceeds ``s``, for max and sum pooling alike (a sum of ``a(x) ≥ 0``
    is positive iff one term is); under a folded vocabulary, a term where one of its columns does.
    The ``[PAD]`` column never counts (the encoder zeroes it).
``frac_positive``
    the fraction of the (token, vocabulary entry) logits above ``s``, over the token sample of
    :func:`~spladekit.model.calibrate.stats.token_hidden_states`.

Both count values above ``s`` in a fixed set (``n × V`` pooled maxima, or ``N × V`` token logits),
so the shift that reaches a target is read off the sorted values (:func:`shift_for_count`): with
``K = round(target · n)`` (``n`` texts; ``target · N·V`` for ``frac_positive``), ``s`` is the
midpoint of the ``K``-th and ``(K+1)``-th largest value, and exactly ``K`` values exceed it. The
activity reached is ``K / n``: within ``1 / (2n)`` terms per text of the target (``1 / (2N·V)`` for
the fraction), up to values within float32 rounding of ``s`` once the model computes ``z − s``
(the tests count them). Where the ``K``-th and ``(K+1)``-th values are equal (a tie no shift can
split: a token repeated in the sample), the nearest count a shift can give is taken and the
activity it reaches is recorded beside the target. The spread (``std``) does not move with a shift, so a joint calibration
chooses ``F`` on the spread first and then ``s`` on the activity at that ``F``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from spladekit.model.calibrate.stats import CalibrationError, decoder_logits, token_hidden_states, unwrap
from spladekit.model.heads import find_mlm_head

ACTIVITY_STATISTICS = ("active_terms", "frac_positive")


def check_activity_statistic(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is in :data:`ACTIVITY_STATISTICS`."""
    if name not in ACTIVITY_STATISTICS:
        raise ValueError(f"unknown activity statistic {name!r}; choose one of {', '.join(ACTIVITY_STATISTICS)}")


def head_options(model: nn.Module) -> tuple[str, int | None, object]:
    """``(pooling, position_top_k, fold)`` of a :class:`~spladekit.model.splade.SpladeModel`
    (``("max", None, None)`` for a bare masked LM)."""
    from spladekit.model.splade import SpladeModel

    if isinstance(model, SpladeModel):
        return model.pooling, model.position_top_k, model.fold
    return "max", None, None


@torch.no_grad()
def pooled_maxima(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    factor: float = 1.0,
    scale_bias: bool = False,
    *,
    max_length: int = 128,
    batch_size: int = 16,
) -> torch.Tensor:
    """``m`` ``[n, V]`` float32: each text's pooled logits ``max_t (F·W h_t + b)`` (``F·(W h_t + b)``
    with ``scale_bias``) over its real positions and, under the model's cap, the logits each
    position keeps; folded into terms (max over a term's columns) under the model's fold; the
    ``[PAD]`` column ``-inf``. The head is the model's, with ``W`` and ``b`` scaled as a rescaling
    by ``F`` would store them.

    Args:
        model: a masked LM or a :class:`~spladekit.model.splade.SpladeModel` (its cap and fold apply).
        texts: the sample; each truncated to ``max_length`` tokens.

    Raises:
        ValueError: no text.
    """
    from spladekit.model.fused import _masked_max
    from spladekit.model.splade import SpladeModel

    pooling, cap, fold = head_options(model)
    mlm = unwrap(model)
    head = find_mlm_head(mlm)
    if not texts:
        raise ValueError("no text given to measure the SPLADE activity on")
    weight = head.weight.detach().float() * factor
    bias = None if head.bias is None else head.bias.detach().float() * (factor if scale_bias else 1.0)
    splade = SpladeModel(mlm, head_impl="plain")
    device = next(mlm.parameters()).device
    was_training = mlm.training
    mlm.eval()
    rows = []
    try:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                [str(t) for t in texts[start : start + batch_size]],
                max_length=max_length,
                truncation=True,
                padding=True,
                return_tensors="pt",
            )
            mask = batch["attention_mask"].to(device)
            hidden = splade.hidden_states(batch["input_ids"].to(device), mask).float()
            rows.append(_masked_max(hidden, mask, weight, bias, False, "torch", cap)[0].cpu())
    finally:
        mlm.train(was_training)
    maxima = torch.cat(rows)
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None and 0 <= pad < maxima.shape[1]:
        maxima[:, pad] = float("-inf")
    return maxima if fold is None else fold.apply(maxima, "max", fill=float("-inf"))


def shift_for_count(values: torch.Tensor, count: int) -> tuple[float, int]:
    """``(s, c)``: a shift above which exactly ``c`` of the finite ``values`` lie, ``c`` the count
    nearest ``count`` that a shift can give (module docstring). ``s`` is the midpoint of the ``c``-th
    and ``(c+1)``-th largest value; one above the largest for ``c = 0``, one below the smallest when
    every value counts. ``c = count`` unless the ``count``-th and ``(count+1)``-th largest are equal
    (a tie: no shift separates them), when the nearest boundary between distinct values is taken
    (the lower count on a draw).

    Raises:
        CalibrationError: no finite value.
    """
    flat = values.reshape(-1).double()
    ordered = torch.sort(flat[torch.isfinite(flat)], descending=True).values
    n = ordered.numel()
    if n == 0:
        raise CalibrationError("no finite logit to place a shift among")
    count = min(max(int(count), 0), n)
    # counts a shift can give: 0, n, and every c with ordered[c-1] > ordered[c]
    cuts = torch.nonzero(ordered[:-1] > ordered[1:]).flatten() + 1
    cuts = torch.cat([torch.tensor([0, n], dtype=cuts.dtype), cuts])
    distance = (cuts - count).abs() * 2 + (cuts > count).long()  # nearest first, the lower one on a draw
    chosen = int(cuts[int(torch.argmin(distance))])
    if chosen == 0:
        return float(ordered[0]) + 1.0, 0
    if chosen == n:
        return float(ordered[-1]) - 1.0, n
    return (float(ordered[chosen - 1]) + float(ordered[chosen])) / 2.0, chosen


def activity(values: torch.Tensor, statistic: str, shift: float = 0.0) -> float:
    """The activity of :func:`pooled_maxima` (``active_terms``: values above ``shift`` per row) or of
    token logits (``frac_positive``: the fraction above ``shift``)."""
    check_activity_statistic(statistic)
    above = (values.double() > shift).double()
    return float(above.sum(dim=1).mean()) if statistic == "active_terms" else float(above.mean())


def activity_values(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    statistic: str,
    factor: float = 1.0,
    scale_bias: bool = False,
    *,
    max_length: int = 128,
    max_tokens: int | None = 1024,
    batch_size: int = 16,
    seed: int = 0,
) -> torch.Tensor:
    """The values an activity counts, at factor ``F``: :func:`pooled_maxima` ``[n, V]`` for
    ``active_terms``, the token sample's logits ``[N, V]`` for ``frac_positive``."""
    check_activity_statistic(statistic)
    if statistic == "active_terms":
        return pooled_maxima(model, tokenizer, texts, factor, scale_bias, max_length=max_length, batch_size=batch_size)
    hidden = token_hidden_states(
        unwrap(model), tokenizer, texts, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens, seed=seed
    )
    return decoder_logits(find_mlm_head(unwrap(model)), hidden, factor, scale_bias)


def calibrated_shift(values: torch.Tensor, target: float, statistic: str) -> tuple[float, float]:
    """``(s, reached)``: the shift that brings the activity of ``values`` (:func:`activity_values`) to
    ``target`` (module docstring), and the activity it reaches.

    Raises:
        ValueError: a target that is not finite or outside ``[0, V]`` terms per text / ``[0, 1]``.
        CalibrationError: no finite value (:func:`shift_for_count`).
    """
    check_activity_statistic(statistic)
    rows, cols = values.shape
    if statistic == "active_terms":
        limit, count = cols, (round(target * rows) if math.isfinite(target) else -1)
    else:
        limit, count = 1.0, (round(target * rows * cols) if math.isfinite(target) else -1)
    if not (math.isfinite(target) and 0 <= target <= limit):
        raise ValueError(f"activity target {target} for {statistic} must be within [0, {limit}]")
    shift, _ = shift_for_count(values, count)
    return shift, activity(values, statistic, shift)


def reference_targets(
    reference,
    texts: Sequence[str],
    statistic: str,
    activity_statistic: str,
    *,
    max_length: int = 128,
    max_tokens: int | None = 1024,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, float]:
    """A reference model's logit ``statistic`` and activity on ``texts`` (its own tokenizer, pooling,
    cap and fold): the targets of a calibration against it.

    Args:
        reference: a model folder or hub id, or a ``(model, tokenizer)`` pair.

    Returns:
        ``{"name", statistic: value, activity_statistic: value}``.

    Raises:
        ResolutionError, HeadNotFoundError: the reference cannot be loaded.
    """
    from spladekit.model.calibrate.stats import logit_statistic

    if isinstance(reference, (tuple, list)):
        model, tokenizer = reference
        name = str(getattr(getattr(unwrap(model), "config", None), "_name_or_path", "") or type(model).__name__)
    else:
        (model, tokenizer), name = _load_reference(reference), str(reference)
    hidden = token_hidden_states(
        unwrap(model), tokenizer, texts, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens, seed=seed
    )
    spread = logit_statistic(decoder_logits(find_mlm_head(unwrap(model)), hidden), statistic)
    values = activity_values(
        model,
        tokenizer,
        texts,
        activity_statistic,
        max_length=max_length,
        max_tokens=max_tokens,
        batch_size=batch_size,
        seed=seed,
    )
    return {"name": name, statistic: spread, activity_statistic: activity(values, activity_statistic)}


def _load_reference(location):
    """``(SpladeModel, tokenizer)`` of a reference model folder or hub id, with its folder's head options."""
    from spladekit.model.encoder import SpladeEncoder

    encoder = SpladeEncoder.from_pretrained(str(location), head_impl="plain", device="cpu")
    return encoder.model, encoder.tokenizer
