"""Emulate a backbone whose MLM head has a large norm, in ways one constant cannot undo exactly.

The local reproduction (``configs/reproduce-local.yaml``) has no real large-norm backbone small enough
for a CPU, so it inflates the head of a small, well-behaved one. If the damage were a plain
multiplication of the decoder by ``c`` (``"uniform"``), a constant factor ``1/c`` would be its exact
inverse and any experiment with it would be circular. The other two emulations are not invertible by
one constant applied to the decoder (arXiv 2606.18811, §3, eq. 3: ``z' = F·(W h) + b``):

- ``"uniform"`` (the control): ``W ← c·W``; logits ``c·W h + b``. ``F = 1/c`` restores ``W h + b``
  exactly (up to float rounding).
- ``"row_lognormal"``: every decoder row gets its own heavy-tailed factor,
  ``W_j ← c·exp(σ·z_j)·W_j`` with ``z_j ~ N(0, 1)`` i.i.d. (:func:`row_factors`, seeded); logits
  ``z_j = c·exp(σ z_j)·W_j h + b_j``. After a constant ``F`` the row ``j`` is off by
  ``F·c·exp(σ z_j)``, which is 1 for every row only if all ``z_j`` are equal (probability 0). The
  factors are log-normal: median ``c``, mean ``c·exp(σ²/2)``.
- ``"ln_gain"``: the gain of the head transform's LayerNorm is multiplied, ``γ ← c·γ`` (its bias
  ``β`` and the decoder bias ``b`` unchanged). With ``n`` the normalised activation,
  ``h = γ⊙n + β`` becomes ``c·γ⊙n + β`` and the logits ``c·W(γ⊙n) + Wβ + b``. A constant ``F`` on
  the decoder gives ``F·c·W(γ⊙n) + F·Wβ + b``; with ``F = 1/c`` the ``Wβ`` term is ``c`` times too
  small, so the original logits come back only when ``Wβ = 0`` (e.g. a LayerNorm without bias, as
  in ModernBERT, where this emulation *is* uniform). The decoder's row norms do not change, so
  norm matching (``mode="match_norm"``) sees nothing to correct.

Every emulation is recorded in ``config.spladekit_emulation`` (saved in ``config.json``), separately
from the rescaling record of :mod:`~spladekit.model.calibrate.rescale`, so the treatment applied
afterwards is the first rescaling of the model.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from spladekit.errors import SpladekitError
from spladekit.model.calibrate.rescale import check_representable, head_norms, untie_mlm_decoder
from spladekit.model.calibrate.stats import unwrap
from spladekit.model.heads import MLMHead, find_mlm_head

EMULATIONS = ("uniform", "row_lognormal", "ln_gain")
"""The kinds of large head :func:`emulate_large_head` makes (its ``kind``)."""
EMULATION_KEY = "spladekit_emulation"


class AlreadyEmulatedError(SpladekitError, RuntimeError):
    """The model's head was already inflated by an emulation (``config.spladekit_emulation``)."""


def row_factors(vocab_size: int, factor: float, sigma: float, seed: int) -> np.ndarray:
    """The per-row factors of ``"row_lognormal"``: ``c·exp(σ·z_j)``, ``z = default_rng(seed).standard_normal(V)``.

    NumPy's PCG64 generator and its normal sampler give the same ``z`` on every platform.

    Args:
        vocab_size: ``V``, the number of decoder rows.
        factor: ``c`` > 0, the median factor.
        sigma: ``σ`` ≥ 0, the standard deviation of the log factor.
        seed: seed of ``z``.

    Returns:
        ``[V]`` float64 factors.

    Raises:
        ValueError: ``factor`` ≤ 0, ``sigma`` < 0, or either not finite.
    """
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"the emulation factor must be finite and > 0, got {factor}")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    z = np.random.default_rng(seed).standard_normal(vocab_size)
    return factor * np.exp(sigma * z)


def head_layer_norm(head: MLMHead) -> nn.LayerNorm:
    """The LayerNorm of the head transform (the last one in it: BERT ``transform.LayerNorm``,
    RoBERTa ``lm_head.layer_norm``, DistilBERT ``vocab_layer_norm``, ModernBERT ``head.norm``).

    Raises:
        ValueError: the transform has no LayerNorm with a gain.
    """
    norms = [m for m in head.transform.modules() if isinstance(m, nn.LayerNorm) and m.weight is not None]
    if not norms:
        raise ValueError(f"the {head.family} head transform has no LayerNorm with a gain to inflate")
    return norms[-1]


def emulation_record(model: nn.Module) -> dict | None:
    """The emulation record in the model's config (``config.spladekit_emulation``), or None."""
    record = getattr(unwrap(model).config, EMULATION_KEY, None)
    return dict(record) if record else None


@torch.no_grad()
def emulate_large_head(model: nn.Module, kind: str, factor: float = 16.0, *, sigma: float = 0.5, seed: int = 0) -> dict:
    """Inflate the MLM head of ``model`` in place, as described in the module docstring.

    Args:
        model: a ``transformers`` masked-LM model of a supported family (or a SpladeModel).
        kind: ``"uniform"``, ``"row_lognormal"`` or ``"ln_gain"``.
        factor: ``c`` > 0 (for ``row_lognormal`` the median row factor).
        sigma: ``σ`` of ``row_lognormal`` (ignored otherwise).
        seed: seed of ``row_lognormal``'s ``z`` (ignored otherwise).

    Returns:
        The record stored in ``config.spladekit_emulation``: ``kind``, ``factor``, ``sigma``/``seed``
        (row_lognormal), decoder norms before/after, for row_lognormal the min/median/mean/max of the
        row factors, for ln_gain the LayerNorm gain's mean before/after and ``‖β‖₂``.

    Raises:
        ValueError: unknown kind, invalid factor/sigma, a factor that overflows the weight's dtype,
            or (ln_gain) no LayerNorm in the head transform; the model is then unchanged.
        AlreadyEmulatedError: the model was already inflated by an emulation.
        HeadNotFoundError: unsupported model family.
    """
    if kind not in EMULATIONS:
        raise ValueError(f"unknown emulation {kind!r}; choose one of {', '.join(EMULATIONS)}")
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"the emulation factor must be finite and > 0, got {factor}")
    mlm = unwrap(model)
    if emulation_record(mlm):
        raise AlreadyEmulatedError(
            f"the MLM head was already inflated ({emulation_record(mlm)['kind']}); start from the original model"
        )
    head = find_mlm_head(mlm)
    record: dict = {"kind": kind, "factor": float(factor), "norms_before": head_norms(head)}
    if kind == "ln_gain":
        norm = head_layer_norm(head)
        check_representable(norm.weight, factor, "LayerNorm gain")
        record["ln_gain_mean_before"] = float(norm.weight.double().mean())
        norm.weight.mul_(factor)
        record["ln_gain_mean_after"] = float(norm.weight.double().mean())
        record["ln_bias_l2"] = float(norm.bias.double().norm()) if norm.bias is not None else 0.0
    else:
        if kind == "uniform":
            scale = torch.tensor(float(factor), dtype=torch.float64)
        else:
            factors = row_factors(head.weight.shape[0], factor, sigma, seed)
            scale = torch.from_numpy(factors)
            record.update(
                sigma=float(sigma),
                seed=int(seed),
                row_factor_min=float(factors.min()),
                row_factor_median=float(np.median(factors)),
                row_factor_mean=float(factors.mean()),
                row_factor_max=float(factors.max()),
            )
        check_representable(head.weight, float(scale.max()), "decoder weight")
        record["untied"] = untie_mlm_decoder(mlm)
        head = find_mlm_head(mlm)
        weight = head.decoder.weight
        # [V, H'] × [V, 1] (or a scalar): each row j multiplied by its factor, rounded once to the weight's dtype
        weight.copy_((weight.double() * (scale[:, None] if scale.ndim else scale)).to(weight.dtype))
    record["norms_after"] = head_norms(head)
    setattr(mlm.config, EMULATION_KEY, record)
    return record
