"""Rescale the MLM-head projection by a constant (the method of arXiv 2606.18811).

A backbone whose decoder weight ``W ∈ R^{V×H'}`` has a large norm gives inflated logits, inflated
SPLADE activations and unstable contrastive training. The paper multiplies the head projection by a
constant ``F`` before training (§3, eq. 3):

    z' = F · (W h) + b            (default, ``scale_bias=False``)
    z' = F · (W h + b)            (``scale_bias=True``)

``F`` is chosen in one of three ways (``mode``):

- ``"factor"``: given directly (``F < 1`` shrinks);
- ``"match_norm"``: ``F = mean_v ‖W_ref,v‖₂ / mean_v ‖W_v‖₂``, the reference being another model or
  a number (the reference's mean decoder-row norm);
- ``"target_logit"``: calibrated on sample text so that a logit statistic (e.g. the 99th percentile
  over tokens × vocabulary) equals a target value (:func:`calibrated_factor`).

In every supported family the decoder weight is tied to the input embeddings. Rescaling first
*unties* it (the decoder gets its own copy, ``config.tie_word_embeddings = False``), so the input
embedding matrix stays bit-identical and the saved checkpoint reloads untied with plain
``transformers.AutoModelForMaskedLM``. BERT and RoBERTa keep a second bias parameter
(``cls.predictions.bias`` / ``lm_head.bias``) aliased to the decoder bias; it is split off too (it
would otherwise be dropped from the checkpoint as a duplicate and re-initialised on reload) and
given the same values. The forward pass reads only the decoder's own bias.

A shift ``s`` of every logit goes with any of them, or alone (:mod:`spladekit.model.calibrate.shift`):
the decoder bias becomes ``b − s`` after the factor, so the logits are ``F·(W h) + b − s``. It is
given (``shift``) or calibrated on the SPLADE activity at initialisation (``activity``: a target
number, or a model whose activity on the same text is the target). The fourth mode, ``"joint"``,
chooses ``(F, s)`` together from two statistics of the logits on sample text, against a reference
model or given numbers: ``F`` so that the logits' ``std`` (their spread, which a shift does not move)
reaches its target, then ``s`` so that the activity at that ``F`` reaches its target.

Every rescaling is recorded in ``config.spladekit_rescale`` (saved in ``config.json``)::

    {"history": [{"factor", "mode", "scale_bias", "shift", "norms_before", "norms_after", "forced", ...}, ...],
     "total_factor": product of the weight factors, "total_bias_factor": product of the bias factors,
     "total_shift": the net shift, t_k = t_(k-1)·(F_k if step k scales the bias else 1) + s_k}

so the bias now is ``b_0 · total_bias_factor − total_shift``.

A second rescaling is refused (:class:`AlreadyRescaledError`) unless ``force=True``; it then
compounds (``total_factor`` is the product) and is appended to the history.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from spladekit.errors import SpladekitError
from spladekit.model.calibrate.stats import (
    CalibrationError,
    decoder_logits,
    logit_statistic,
    parse_statistic,
    row_norms,
    token_hidden_states,
    unwrap,
)
from spladekit.model.heads import MLMHead, find_mlm_head

MODES = ("factor", "match_norm", "target_logit", "joint")
"""The factor modes of :func:`rescale_mlm_head` (its ``mode``; None: no factor, a shift alone)."""
#: calibrated_factor scans F over [10^-GRID_DECADES, 10^GRID_DECADES] with GRID_STEPS points per decade.
GRID_DECADES, GRID_STEPS = 4, 8
RECORD_KEY = "spladekit_rescale"


class AlreadyRescaledError(SpladekitError, RuntimeError):
    """The model's head was already rescaled (see ``config.spladekit_rescale``); pass ``force=True`` to compound."""


# ---------------------------------------------------------------------------------------------- record
def rescale_record(model: nn.Module) -> dict | None:
    """The rescaling record stored in the model's config (``config.spladekit_rescale``), or None."""
    record = getattr(unwrap(model).config, RECORD_KEY, None)
    return dict(record) if record else None


def head_norms(head: MLMHead) -> dict[str, float]:
    """Decoder norms recorded before/after rescaling: Frobenius norm, row-norm mean/median/max, bias L2 norm."""
    norms = row_norms(head.weight)
    out = {
        "frobenius": float(math.sqrt(float((norms**2).sum()))),
        "row_norm_mean": float(norms.mean()),
        "row_norm_median": float(np.median(norms)),
        "row_norm_max": float(norms.max()),
    }
    if head.bias is not None:
        out["bias_l2"] = float(torch.linalg.vector_norm(head.bias.detach().double()).item())
    return out


# ---------------------------------------------------------------------------------------------- untying
def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are one tensor or views of one storage (a tied decoder/embedding)."""
    return a is b or (a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def untie_mlm_decoder(model: nn.Module) -> list[str]:
    """Give the decoder its own weight (and bias) so that changing it leaves the input embeddings alone.

    The decoder weight becomes a new ``nn.Parameter`` holding a copy of the current values; a decoder
    bias aliased to another parameter (BERT ``cls.predictions.bias``, RoBERTa ``lm_head.bias``) is
    split the same way. ``config.tie_word_embeddings`` is set to False and the model's tying map is
    recomputed, so neither ``model.tie_weights()`` nor ``from_pretrained`` re-ties them.

    Args:
        model: a masked-LM model of a supported family (or a SpladeModel).

    Returns:
        The names of the parameters that were split off (empty when already untied).

    Raises:
        HeadNotFoundError: unsupported model.
    """
    mlm = unwrap(model)
    head = find_mlm_head(mlm)
    decoder = head.decoder
    split: list[str] = []
    embedding = mlm.get_input_embeddings().weight
    params = list(mlm.named_parameters(remove_duplicate=False))
    weight_name, bias_name = f"{head.prefix}.weight", f"{head.prefix}.bias"
    if any(name != weight_name and shares_storage(p, decoder.weight) for name, p in params) or shares_storage(
        embedding, decoder.weight
    ):
        decoder.weight = nn.Parameter(decoder.weight.detach().clone(), requires_grad=decoder.weight.requires_grad)
        split.append(weight_name)
    if decoder.bias is not None and any(name != bias_name and shares_storage(p, decoder.bias) for name, p in params):
        decoder.bias = nn.Parameter(decoder.bias.detach().clone(), requires_grad=decoder.bias.requires_grad)
        split.append(bias_name)
    config = mlm.config
    config.tie_word_embeddings = False
    if hasattr(mlm, "get_expanded_tied_weights_keys"):  # transformers ≥ 5: recompute the tying map
        mlm.all_tied_weights_keys = mlm.get_expanded_tied_weights_keys(all_submodels=True)
    return split


def _bias_aliases(mlm: nn.Module, head: MLMHead) -> list[nn.Parameter]:
    """Other bias parameters of the head that the family keeps equal to the decoder bias."""
    owner = {"bert": "cls.predictions", "roberta": "lm_head", "xlm-roberta": "lm_head", "camembert": "lm_head"}.get(
        head.family
    )
    if owner is None or head.bias is None:
        return []
    alias = getattr(mlm.get_submodule(owner), "bias", None)
    if isinstance(alias, nn.Parameter) and alias.shape == head.bias.shape:
        return [alias]
    return []


# ---------------------------------------------------------------------------------------------- factors
def reference_row_norm(reference) -> float:
    """Mean decoder-row norm ``mean_v ‖W_v‖₂`` of a reference.

    Args:
        reference: a positive number (taken as the mean row norm itself), a masked-LM model, or a
            model folder / hub id (loaded with ``AutoModelForMaskedLM``).

    Raises:
        ValueError: a non-positive number.
        ResolutionError, HeadNotFoundError: the reference model cannot be found or has no MLM head.
    """
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        if not reference > 0 or not math.isfinite(reference):
            raise ValueError(f"reference row norm must be a positive number, got {reference}")
        return float(reference)
    if isinstance(reference, (str, Path)):
        from spladekit.data.resolve import resolve_model
        from spladekit.model.encoder import load_masked_lm_and_tokenizer

        reference, _ = load_masked_lm_and_tokenizer(resolve_model(reference))  # any folder layout
    return float(row_norms(find_mlm_head(unwrap(reference)).weight).mean())


def match_norm_factor(model: nn.Module, reference) -> float:
    """``F = mean_v ‖W_ref,v‖₂ / mean_v ‖W_v‖₂`` (arXiv 2606.18811, §3: match the reference head scale).

    Args:
        reference: see :func:`reference_row_norm`.
    """
    own = float(row_norms(find_mlm_head(unwrap(model)).weight).mean())
    if own <= 0:
        raise CalibrationError("the decoder weight is all zeros; no factor can match a norm")
    return reference_row_norm(reference) / own


def calibrated_factor(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    target: float,
    statistic: str = "p99",
    *,
    scale_bias: bool = False,
    max_length: int = 128,
    max_tokens: int | None = 1024,
    batch_size: int = 16,
    seed: int = 0,
) -> float:
    """The factor ``F > 0`` for which ``statistic`` of the rescaled logits equals ``target``.

    The logits are those of every (token, vocabulary entry) pair of a token sample of ``texts``
    (see :func:`~spladekit.model.calibrate.stats.token_hidden_states`): ``F·(W h) + b``, or
    ``F·(W h + b)`` with ``scale_bias``. The head's transform precedes the decoder, so ``h`` does
    not depend on ``F`` and is computed once.

    With ``scale_bias`` every statistic is positively homogeneous (``s(F z) = F s(z)``), so
    ``F = target / s(W h + b)``. Without it, ``s(F·W h + b)`` need not be monotone in ``F`` (the
    unscaled bias dominates small factors), so ``F`` is the root of ``s(F·W h + b) = target`` nearest
    ``F = 1``: a log grid over ``[1e-4, 1e4]`` (8 points per decade) is scanned outwards from 1 and
    the first bracket with a sign change is refined by Brent's method (``scipy.optimize.brentq``).

    Args:
        statistic: ``"mean"``, ``"std"``, ``"max"`` or a percentile such as ``"p99"``.
        target: the value the statistic should take after rescaling (logit units).

    Returns:
        The factor (float > 0). The model is not changed.

    Raises:
        ValueError: unknown statistic or no text.
        CalibrationError: no positive factor reaches the target.
    """
    parse_statistic(statistic)
    mlm = unwrap(model)
    hidden = token_hidden_states(
        mlm, tokenizer, texts, max_length=max_length, batch_size=batch_size, max_tokens=max_tokens, seed=seed
    )
    return factor_for_statistic(find_mlm_head(mlm), hidden, target, statistic, scale_bias)


def factor_for_statistic(
    head: MLMHead, hidden: torch.Tensor, target: float, statistic: str = "p99", scale_bias: bool = False
) -> float:
    """The factor of :func:`calibrated_factor` for given decoder inputs ``hidden`` ``[N, H']`` (the
    token sample), by the same rule (closed form with ``scale_bias``, else the root nearest ``F = 1``).

    Raises:
        ValueError: unknown statistic.
        CalibrationError: no positive factor reaches the target.
    """
    from scipy.optimize import brentq

    parse_statistic(statistic)
    if statistic == "std" and not scale_bias and head.bias is not None:
        return _std_factor(head, hidden, target)

    def stat(factor: float) -> float:
        return logit_statistic(decoder_logits(head, hidden, factor, scale_bias), statistic)

    if scale_bias or head.bias is None:
        now = stat(1.0)
        if now == 0 or not target / now > 0:
            raise CalibrationError(
                f"cannot reach {statistic} = {target}: the current {statistic} is {now:.6g}; "
                "with the bias scaled too (or no bias), a positive factor only multiplies it"
            )
        return target / now
    # Without bias scaling s(F·Wh + b) need not be monotone in F: scan a log grid outwards from F = 1
    # and refine the first sign change found, i.e. the root nearest F = 1 (to grid resolution).
    grid = np.logspace(-GRID_DECADES, GRID_DECADES, 2 * GRID_DECADES * GRID_STEPS + 1)
    centre = GRID_DECADES * GRID_STEPS
    values: dict[int, float] = {}

    def g(i: int) -> float:
        if i not in values:
            values[i] = stat(float(grid[i])) - target
        return values[i]

    if g(centre) == 0:
        return 1.0
    for k in range(1, centre + 1):
        for a, b in ((centre + k - 1, centre + k), (centre - k, centre - k + 1)):
            if g(a) == 0:
                return float(grid[a])
            if g(b) == 0:
                return float(grid[b])
            if (g(a) < 0) != (g(b) < 0):
                return float(brentq(lambda f: stat(f) - target, grid[a], grid[b], xtol=1e-12, rtol=1e-10, maxiter=200))
    seen = [v + target for v in values.values()]
    raise CalibrationError(
        f"cannot reach {statistic} = {target} with a factor in [1e-{GRID_DECADES}, 1e{GRID_DECADES}]: "
        f"the rescaled logits' {statistic} stays within [{min(seen):.6g}, {max(seen):.6g}]"
        + (
            "; the decoder bias is not scaled, so it bounds what small factors reach: scale it too (scale_bias=True, "
            "CLI --scale-bias) or choose a target inside this range"
            if head.bias is not None
            else ""
        )
    )


def _std_factor(head: MLMHead, hidden: torch.Tensor, target: float) -> float:
    """The ``F > 0`` nearest 1 (in ``|log F|``) with ``std(F·x + b) = target``, ``x = W h``, in closed form.

    Over the ``N × V`` logits (``b`` broadcast over the tokens) the variance is a quadratic in ``F``:
    ``Var(F·x + b) = F²·Var(x) + 2F·Cov(x, b) + Var(b)``, so ``F`` is a root of
    ``Var(x)·F² + 2·Cov(x, b)·F + Var(b) − target² = 0`` (float64 moments). The same root the grid
    scan of :func:`factor_for_statistic` would refine, found without scanning.

    Raises:
        CalibrationError: no positive root (the target is below the smallest std any ``F`` gives).
    """
    x = hidden.double() @ head.weight.detach().double().T  # [N, V]
    b = head.bias.detach().double()
    dx, db = x - x.mean(), b - b.mean()
    var_x, cov, var_b = float((dx**2).mean()), float((dx * db).mean()), float((db**2).mean())
    disc = cov**2 - var_x * (var_b - target**2)
    roots = [] if var_x <= 0 or disc < 0 else [(-cov + sign * math.sqrt(disc)) / var_x for sign in (1.0, -1.0)]
    roots = [r for r in roots if r > 0]
    if not roots:
        lowest = math.sqrt(max(var_b - cov**2 / var_x, 0.0)) if var_x > 0 else math.sqrt(var_b)
        raise CalibrationError(
            f"cannot reach std = {target}: no positive factor gives a std below {lowest:.6g} (the "
            "unscaled decoder bias keeps it); scale the bias too (scale_bias=True, CLI --scale-bias) "
            "or choose a larger target"
        )
    return float(min(roots, key=lambda r: abs(math.log(r))))


# ---------------------------------------------------------------------------------------------- rescale
def check_representable(tensor: torch.Tensor, factor: float, what: str) -> None:
    """Raise ``ValueError`` when ``factor · tensor`` overflows to inf or underflows to all zeros in
    the tensor's dtype (checked before anything is changed)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return
    largest = float(tensor.detach().abs().max())
    if largest == 0.0:
        return
    info = torch.finfo(tensor.dtype)
    scaled = largest * factor  # Python float64: exact enough for the bound
    if scaled > info.max:
        raise ValueError(
            f"factor {factor:g} overflows the {what} ({tensor.dtype}: max |w| {largest:.4g} × F > {info.max:.4g})"
        )
    if scaled < info.tiny:
        raise ValueError(
            f"factor {factor:g} underflows the {what} to zero ({tensor.dtype}: max |w| {largest:.4g} × F < {info.tiny:.4g})"
        )


@torch.no_grad()
def rescale_mlm_head(
    model: nn.Module,
    factor: float | None = None,
    mode: str | None = "factor",
    *,
    scale_bias: bool = False,
    reference=None,
    target: float | None = None,
    statistic: str = "p99",
    tokenizer=None,
    texts: Sequence[str] | None = None,
    force: bool = False,
    calibration: dict | None = None,
    shift: float | None = None,
    activity: float | str | None = None,
    activity_statistic: str = "active_terms",
) -> float:
    """Multiply the MLM-head projection by a constant ``F`` and shift every logit by ``s``, in place
    (arXiv 2606.18811, §3, eq. 3, and the shift of the module docstring).

    After the call the logits are ``F·(W h) + b − s`` (``scale_bias=False``, the default) or
    ``F·(W h + b) − s`` (``scale_bias=True``), where ``W h + b`` are the logits before it. The decoder is
    untied from the input embeddings first (:func:`untie_mlm_decoder`); the embeddings, the backbone
    and the head's transform are not changed.

    Args:
        model: a ``transformers`` masked-LM model of a supported family, or a SpladeModel (whose
            pooling, cap and fold the activity is measured with).
        factor: ``F`` for ``mode="factor"``; must be finite and > 0.
        mode: ``"factor"``, ``"match_norm"`` (needs ``reference``), ``"target_logit"`` (needs
            ``target``, ``tokenizer`` and ``texts``; see :func:`calibrated_factor`), ``"joint"`` (needs
            ``tokenizer``, ``texts`` and a reference model or the numbers ``target`` (the logit ``std``)
            and ``activity``), or None (``F = 1``; a shift alone).
        scale_bias: scale the decoder bias by ``F`` as well.
        reference: for ``match_norm``: a number (reference mean row norm), a model, or a model path/id;
            for ``joint``: a model path/id or ``(model, tokenizer)`` whose std and activity are the targets.
        target: for ``target_logit``: the value ``statistic`` of the logits should reach; for ``joint``:
            the ``std`` to reach.
        statistic: for ``target_logit``: the logit statistic (``mean``, ``std``, ``max`` or a percentile
            such as ``p99``); for ``joint`` it must be ``std`` or left as it is.
        tokenizer: the model's tokenizer, for the sample text of ``target_logit``, ``joint`` and ``activity``.
        texts: that sample text.
        force: rescale a model that was already rescaled; the factors compound and are recorded.
        calibration: extra keyword arguments for the calibrations (``max_length``, ``max_tokens``,
            ``batch_size``, ``seed``).
        shift: ``s``, given (finite); not with ``activity`` or ``"joint"``.
        activity: calibrate ``s`` so that ``activity_statistic`` (``"active_terms"`` per text or
            ``"frac_positive"``) at ``F`` reaches this number, or that of this model (path/id) on the
            same text (:func:`~spladekit.model.calibrate.shift.calibrated_shift`).

    Returns:
        The factor ``F`` applied in this call (the shift is in the record's last step, ``shift``).

    Raises:
        ValueError: unknown mode, missing or invalid argument for the mode, or a factor or shift that
            overflows the decoder (bias) to inf or underflows it to zero in its dtype, a shift of a
            decoder without bias; the model is then unchanged.
        AlreadyRescaledError: the model carries a rescaling record and ``force`` is False.
        CalibrationError: ``target_logit``, ``joint`` or ``activity`` cannot reach the target.
        HeadNotFoundError: unsupported model family.

    Example::

        >>> import torch
        >>> from spladekit import SpladeEncoder, rescale_mlm_head
        >>> from spladekit.model.heads import find_mlm_head
        >>> encoder = SpladeEncoder.from_pretrained("rasyosef/splade-tiny")
        >>> before = find_mlm_head(encoder.model.mlm).weight.detach().clone()
        >>> rescale_mlm_head(encoder.model, mode="factor", factor=0.5)
        0.5
        >>> torch.equal(find_mlm_head(encoder.model.mlm).weight.detach(), before * 0.5)  # halving is exact in float32
        True
    """
    mlm = unwrap(model)
    head = find_mlm_head(mlm)
    record = rescale_record(mlm)
    if record and not force:
        raise AlreadyRescaledError(
            f"the MLM head was already rescaled (total factor {record.get('total_factor')}, "
            f"{len(record.get('history', []))} step(s) in config.{RECORD_KEY}); pass force=True (command line: --force) to compound"
        )
    _check_mode_arguments(mode, factor, reference, target, statistic, tokenizer, texts, shift, activity)
    sample = dict(
        tokenizer=tokenizer,
        texts=list(texts or []),
        options=dict(calibration or {}),
        activity_statistic=activity_statistic,
    )
    factor, details = _choose_factor(model, mode, factor, reference, target, statistic, scale_bias, sample)
    shift, shift_details = _choose_shift(
        model, mode, factor, scale_bias, reference, shift, activity, activity_statistic, sample
    )
    factor = float(factor)
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"the factor must be finite and > 0, got {factor}")
    check_representable(head.weight, factor, "decoder weight")
    if scale_bias and head.bias is not None:
        check_representable(head.bias, factor, "decoder bias")
    _check_shift(head, shift, factor if scale_bias else 1.0)
    entry = {
        "factor": factor,
        "mode": mode or "shift",
        "scale_bias": bool(scale_bias),
        **details,
        "shift": shift,
        **shift_details,
    }
    _apply(mlm, factor, scale_bias, shift, entry, record, force)
    return factor


def _check_mode_arguments(mode, factor, reference, target, statistic, tokenizer, texts, shift, activity) -> None:
    """The arguments each mode needs and refuses (:func:`rescale_mlm_head`), before any work."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown rescaling mode {mode!r}; choose one of {', '.join(MODES)} (or None: a shift alone)")
    if mode == "factor" and factor is None:
        raise ValueError("mode='factor' needs factor=F")
    if mode != "factor" and factor is not None:
        raise ValueError(f"mode={mode!r} computes the factor itself; do not pass factor")
    if mode == "match_norm" and reference is None:
        raise ValueError("mode='match_norm' needs reference= (a model, a model path or a mean row norm)")
    if mode == "target_logit" and (target is None or tokenizer is None or not texts):
        raise ValueError("mode='target_logit' needs target=, tokenizer= and texts=")
    if shift is not None and (activity is not None or mode == "joint"):
        raise ValueError("give a shift or calibrate it (activity= or mode='joint'), not both")
    if shift is not None and not math.isfinite(shift):
        raise ValueError(f"the shift must be a finite number, got {shift}")
    if mode is None and shift is None and activity is None:
        raise ValueError("nothing to do: give a mode, a shift or an activity target")
    if mode == "joint":
        if statistic not in ("std", "p99"):
            raise ValueError(
                f"mode='joint' calibrates the factor on the logits' std, which a shift does not move; "
                f"statistic {statistic!r} does move with it"
            )
        if (target is None or activity is None) and not isinstance(reference, (str, Path, tuple, list)):
            raise ValueError(
                "mode='joint' needs a reference model (reference=) or both numbers target= (std) and activity="
            )
    if (mode == "joint" or activity is not None) and (tokenizer is None or not texts):
        raise ValueError("calibrating on sample text (mode='joint', activity=) needs tokenizer= and texts=")


def _choose_factor(model, mode, factor, reference, target, statistic, scale_bias, sample) -> tuple[float, dict]:
    """``(F, record details)`` for the mode (``F = 1`` for None)."""
    if mode in (None, "factor"):
        return (1.0 if factor is None else factor), {}
    if mode == "match_norm":
        ref_norm = reference_row_norm(reference)
        name = (
            reference
            if isinstance(reference, (int, float, str))
            else str(getattr(getattr(reference, "config", None), "_name_or_path", type(reference).__name__))
        )
        return match_norm_factor(unwrap(model), ref_norm), {"reference": name, "reference_row_norm_mean": ref_norm}
    tokenizer, texts, options = sample["tokenizer"], sample["texts"], sample["options"]
    if mode == "target_logit":
        factor = calibrated_factor(unwrap(model), tokenizer, texts, target, statistic, scale_bias=scale_bias, **options)
        return factor, {"target": float(target), "statistic": statistic, "n_texts": len(texts), **options}
    details = {"statistic": "std", "n_texts": len(texts), **options}
    if target is None:
        targets = _reference_targets(reference, sample, details)
        target = targets["std"]
        details["reference_std"] = target
    factor = calibrated_factor(unwrap(model), tokenizer, texts, target, "std", scale_bias=scale_bias, **options)
    details["target"] = float(target)
    return factor, details


def _reference_targets(reference, sample, details: dict) -> dict:
    """The reference model's std and activity on the sample (measured once per call, kept in ``sample``)."""
    from spladekit.model.calibrate.shift import reference_targets

    statistic = sample["activity_statistic"]
    key = ("reference", statistic)
    if key not in sample:
        options = {
            k: v for k, v in sample["options"].items() if k in ("max_length", "max_tokens", "batch_size", "seed")
        }
        sample[key] = reference_targets(reference, sample["texts"], "std", statistic, **options)
        details["reference"] = sample[key]["name"]
    return sample[key]


def _choose_shift(model, mode, factor, scale_bias, reference, shift, activity, statistic, sample) -> tuple[float, dict]:
    """``(s, record details)``: the given shift, the calibrated one, or 0."""
    from spladekit.model.calibrate.shift import activity_values, calibrated_shift, check_activity_statistic

    if shift is not None:
        return float(shift), {"shift_mode": "given"}
    if activity is None and mode != "joint":
        return 0.0, {}
    check_activity_statistic(statistic)
    details: dict = {"shift_mode": "activity", "activity_statistic": statistic}
    if isinstance(activity, (int, float)) and not isinstance(activity, bool):
        goal = float(activity)
    else:  # a model (joint: the reference) whose activity on the sample is the target
        source = reference if activity is None else activity
        goal = _reference_targets(source, sample, details)[statistic]
        details["activity_reference"] = sample[("reference", statistic)]["name"]
    options = {k: v for k, v in sample["options"].items() if k in ("max_length", "max_tokens", "batch_size", "seed")}
    values = activity_values(model, sample["tokenizer"], sample["texts"], statistic, factor, scale_bias, **options)
    value, reached = calibrated_shift(values, goal, statistic)
    details.update(activity_target=goal, activity_reached=reached, n_texts=len(sample["texts"]))
    return value, details


def _check_shift(head: MLMHead, shift: float, bias_factor: float) -> None:
    """Raise ``ValueError`` for a shift the decoder bias cannot carry (no bias, or ``b·F − s`` not finite)."""
    if shift == 0.0:
        return
    if head.bias is None:
        raise ValueError("the decoder has no bias, so it cannot carry a shift (ModernBERT: config decoder_bias false)")
    largest = float(head.bias.detach().abs().max()) * bias_factor + abs(shift)
    if largest > torch.finfo(head.bias.dtype).max:
        raise ValueError(f"shift {shift:g} overflows the decoder bias ({head.bias.dtype})")


def _apply(mlm, factor: float, scale_bias: bool, shift: float, entry: dict, record: dict | None, force: bool) -> None:
    """Untie, scale, shift and record (the model is changed here only, after every check passed)."""
    head = find_mlm_head(mlm)
    before = head_norms(head)
    aliases = _bias_aliases(mlm, head)
    split = untie_mlm_decoder(mlm)
    head = find_mlm_head(mlm)
    head.decoder.weight.mul_(factor)
    if scale_bias and head.bias is not None:
        head.bias.mul_(factor)
    if shift:
        head.bias.sub_(shift)
    for alias in aliases:
        if alias is not head.bias:
            alias.copy_(head.bias)
    entry.update(norms_before=before, norms_after=head_norms(head), untied=split, forced=bool(record) and force)
    history = list((record or {}).get("history", [])) + [entry]
    total = math.prod(step["factor"] for step in history)
    total_bias = math.prod(step["factor"] for step in history if step["scale_bias"])
    net_shift = 0.0
    for step in history:
        net_shift = net_shift * (step["factor"] if step["scale_bias"] else 1.0) + float(step.get("shift", 0.0))
    setattr(
        mlm.config,
        RECORD_KEY,
        {"history": history, "total_factor": total, "total_bias_factor": total_bias, "total_shift": net_shift},
    )
