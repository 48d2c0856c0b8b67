"""Diagnose an MLM head before SPLADE training (arXiv 2606.18811, §3-4).

A head whose decoder has a large norm inflates the logits ``z = W h + b``; SPLADE's
``log(1 + ReLU(z))`` then activates most of the vocabulary for every text at initialisation, and
contrastive training collapses. :func:`diagnose_mlm_head` measures:

- decoder weight: Frobenius norm ``‖W‖_F`` and row-norm statistics of ``‖W_v‖₂`` (mean, median,
  p99, max), bias statistics, the transform's dense norm and LayerNorm gains (and ModernBERT /
  Ettin's backbone ``final_norm`` gain);
- on real text: logit mean/std/p99/max and fraction of positive logits over (token, vocabulary)
  pairs, SPLADE active terms per text at initialisation, and the mean query·document score;
- a verdict against stated healthy ranges around a reference head: the one given (a model
  diagnosed on the same text, or a mean row norm), else splade-tiny's, built in
  (:data:`BUILTIN_REFERENCE`);
- a suggested factor and shift ``(F, s)``, always (:func:`suggest_head`): ``F`` so that the logits'
  std equals the reference's, then ``s`` so that the active terms per text do
  (:mod:`spladekit.model.calibrate.shift`), on the sample text; without text, ``F`` matches the mean
  decoder row norm (``match_norm``) and no ``s`` is suggested.

The healthy ranges (:data:`HEALTHY_RANGES`: a ratio to the reference for the row norm, the logit std
and the active terms per text; :data:`ACTIVE_FRACTION_HIGH` of the vocabulary) are spladekit's rules
of thumb, not values from the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from spladekit.model.calibrate.rescale import rescale_record, shares_storage
from spladekit.model.calibrate.stats import (
    decoder_logits,
    logit_statistic,
    row_norms,
    summarize,
    token_hidden_states,
    unwrap,
)
from spladekit.model.heads import MLMHead, find_mlm_head

#: mean row norm above this multiple of the reference's: inflated head, expect collapse.
SCALE_RATIO_HIGH = 2.0
#: mean row norm below this multiple of the reference's: shrunken head, expect few active terms.
SCALE_RATIO_LOW = 0.5
#: the healthy range of each ratio to the reference (this model / reference): the mean decoder row
#: norm, the logits' std, the SPLADE active terms per text at initialisation.
HEALTHY_RANGES = {"row norm": (SCALE_RATIO_LOW, SCALE_RATIO_HIGH), "logit std": (0.5, 2.0), "active terms": (0.25, 4.0)}
#: mean fraction of the vocabulary active per text at initialisation above which SPLADE is inflated.
ACTIVE_FRACTION_HIGH = 0.5
#: how many logits are kept for the histogram.
LOGIT_SAMPLE = 100_000
#: The reference used without ``--reference``: splade-tiny (``rasyosef/splade-tiny``, the project's
#: ``shared/models/splade-tiny``, a trained SPLADE model with a BERT head) as :func:`diagnose_mlm_head`
#: measures it on BEIR SciFact (``spladekit diagnose splade-tiny --data scifact``: 64 queries and 64
#: documents sampled with seed 0, 128 tokens per text, 1,024 tokens for the logit statistics), rounded
#: to 6 significant digits. ``tests/model/calibrate/test_rescale.py`` measures them again from those files (the
#: derivation, kept). Text statistics depend on the text: on other text the comparison is approximate
#: (``--reference`` measures a reference on the same text).
BUILTIN_REFERENCE = {
    "name": "splade-tiny (built in)",
    "row_norm_mean": 0.681910,
    "logits": {
        "n_texts": 128,
        "n_tokens": 1024,
        "mean": -7.61255,
        "std": 2.88886,
        "p99": -2.28594,
        "max": 12.2391,
        "frac_positive": 1.03601e-4,
    },
    "splade": {"n_texts": 128, "active_terms": {"mean": 117.234}, "active_fraction": 0.00384098},
    "sample": "BEIR SciFact, 64 queries + 64 documents (seed 0), 128 tokens per text",
}


@dataclass
class HeadStats:
    """Weights of the MLM head (no text needed).

    Attributes:
        family: the model family (``bert``, ``modernbert``, ...; :func:`~spladekit.model.heads.find_mlm_head`).
        vocab_size: V, the decoder's rows.
        hidden_size: H', the decoder's input width.
        tied: the decoder weight shares storage with the input embeddings.
        frobenius: ``‖W‖_F``.
        row_norm: statistics of ``‖W_v‖₂`` over the V rows (mean, std, min, median, p99, max).
        bias: statistics of the decoder bias ``b`` (None without bias).
        transform: ``dense_frobenius`` of the transform's dense layer, ``norm_gain`` / ``norm_bias``
            statistics of its LayerNorm.
        final_norm: gain statistics of the backbone's ``final_norm`` (ModernBERT / Ettin), else None.
        rescale: the model's rescaling record (``config.spladekit_rescale``), if any.
    """

    family: str
    vocab_size: int
    hidden_size: int
    tied: bool
    frobenius: float
    row_norm: dict
    bias: dict | None
    transform: dict
    final_norm: dict | None = None
    rescale: dict | None = None


@dataclass
class LogitStats:
    """Logits ``z = W h + b`` of every (token, vocabulary entry) pair of a token sample.

    Attributes:
        n_texts: texts measured; n_tokens: non-padding tokens kept (at most ``max_tokens``).
        mean, std (population), p99, max: statistics of the ``n_tokens × V`` logits.
        frac_positive: fraction of them > 0 (those SPLADE's ReLU lets through).
    """

    n_texts: int
    n_tokens: int
    mean: float
    std: float
    p99: float
    max: float
    frac_positive: float


@dataclass
class SpladeStats:
    """SPLADE vectors at initialisation (``w_j = max_t log(1 + ReLU(z_tj))``, Formal et al. 2021).

    Attributes:
        n_texts: texts encoded.
        active_terms: statistics of the number of non-zero weights per text (mean, median, max...).
        active_fraction: mean active terms divided by V.
        score_mean: mean dot product ``q·d`` over all (query, document) pairs, or over all pairs of
            distinct texts when no query/document split is given (see ``score_pairs``).
        score_pairs: ``"query-document"`` or ``"text-text"``.
    """

    n_texts: int
    active_terms: dict
    active_fraction: float
    score_mean: float
    score_pairs: str


@dataclass
class Diagnosis:
    """What :func:`diagnose_mlm_head` found. ``to_dict()`` is JSON-ready; ``table()`` is for people.

    Attributes:
        model: a name for the model (path or id).
        head: :class:`HeadStats`; logits: :class:`LogitStats`; splade: :class:`SpladeStats` (None
            without text).
        reference: ``{"name", "row_norm_mean", "logits", "splade"}`` of the reference (the built-in
            one, :data:`BUILTIN_REFERENCE`, when none is given).
        scale_ratio: this model's mean row norm / the reference's.
        suggested_factor, suggested_shift: the ``(F, s)`` of :func:`suggest_head` (``s`` None without text).
        suggestion: how they were chosen (``method``, ``targets``, ``reached``), and ``healthy``
            (every measured ratio within :data:`HEALTHY_RANGES`).
        verdict: one or more sentences.
        row_norms: ``[V]`` float64 row norms (not serialised). logit_sample: up to
            :data:`LOGIT_SAMPLE` logits for histograms (not serialised).
    """

    model: str
    head: HeadStats
    logits: LogitStats | None = None
    splade: SpladeStats | None = None
    reference: dict | None = None
    scale_ratio: float | None = None
    suggested_factor: float | None = None
    suggested_shift: float | None = None
    suggestion: dict | None = None
    verdict: str = ""
    row_norms: np.ndarray | None = field(default=None, repr=False, compare=False)
    logit_sample: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """Everything but the arrays, as plain JSON types."""
        out = {}
        for key in (
            "model",
            "head",
            "logits",
            "splade",
            "reference",
            "scale_ratio",
            "suggested_factor",
            "suggested_shift",
            "suggestion",
            "verdict",
        ):
            value = getattr(self, key)
            out[key] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
        return out

    def table(self) -> str:
        """A readable two- or three-column table of the main numbers, then the verdict."""
        ref = self.reference or {}
        rows: list[tuple[str, object, object]] = [
            ("family", self.head.family, ""),
            ("vocabulary V × width H'", f"{self.head.vocab_size} × {self.head.hidden_size}", ""),
            ("decoder tied to embeddings", self.head.tied, ""),
            ("decoder ‖W‖_F", self.head.frobenius, ""),
        ]
        rows.append(("mean decoder row norm ‖W_v‖₂", self.head.row_norm["mean"], ref.get("row_norm_mean") or ""))
        for key in ("median", "p99", "max"):
            rows.append((f"row norm {key}", self.head.row_norm[key], ""))
        if self.head.bias:
            rows += [(f"bias {key}", self.head.bias[key], "") for key in ("mean", "std", "min", "max")]
        gain = self.head.transform.get("norm_gain")
        if gain:
            rows.append(("transform LayerNorm gain mean", gain["mean"], ""))
        if self.head.final_norm:
            rows.append(("backbone final_norm gain mean", self.head.final_norm["mean"], ""))
        if self.head.rescale:
            rows.append(("already rescaled, total factor", self.head.rescale.get("total_factor"), ""))
        if self.logits:
            ref_logits = ref.get("logits") or {}
            for key in ("mean", "std", "p99", "max", "frac_positive"):
                rows.append((f"logit {key}", getattr(self.logits, key), ref_logits.get(key, "")))
            rows.append(("tokens measured", self.logits.n_tokens, ref_logits.get("n_tokens", "")))
        if self.splade:
            ref_splade = ref.get("splade") or {}
            ref_terms = (ref_splade.get("active_terms") or {}).get("mean", "")
            rows += [
                ("SPLADE active terms / text", self.splade.active_terms["mean"], ref_terms),
                ("SPLADE active fraction of V", self.splade.active_fraction, ref_splade.get("active_fraction", "")),
                (f"mean score ({self.splade.score_pairs})", self.splade.score_mean, ref_splade.get("score_mean", "")),
            ]
        if self.scale_ratio is not None:
            rows.append(("head scale ratio (this / reference)", self.scale_ratio, ""))
        if self.suggested_factor is not None:
            rows.append(("suggested factor F", self.suggested_factor, ""))
        rows.append(
            (
                "suggested shift s",
                self.suggested_shift if self.suggested_shift is not None else "needs sample text (--texts or --data)",
                "",
            )
        )

        def fmt(value) -> str:
            if isinstance(value, float):
                return f"{value:.4g}"
            return str(value)

        header = ("quantity", self.model or "model", ref.get("name", "reference") if ref else "")
        body = [(name, fmt(a), fmt(b)) for name, a, b in rows]
        widths = [max(len(r[i]) for r in [header, *body]) for i in range(3)]
        lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *body]]
        lines.insert(1, "  ".join("-" * w for w in widths if w).rstrip())
        return "\n".join(lines) + "\n\nverdict: " + self.verdict + "\n"


# ---------------------------------------------------------------------------------------------- weights
def _tensor_summary(tensor: torch.Tensor | None) -> dict | None:
    if tensor is None:
        return None
    return summarize(tensor.detach().double().cpu().numpy())


def _transform_stats(transform: nn.Module) -> dict:
    dense = next((m for m in transform.modules() if isinstance(m, nn.Linear)), None)
    norm = next((m for m in transform.modules() if isinstance(m, nn.LayerNorm)), None)
    out: dict = {}
    if dense is not None:
        out["dense_frobenius"] = float(torch.linalg.matrix_norm(dense.weight.detach().double()).item())
    if norm is not None:
        out["norm_gain"] = _tensor_summary(norm.weight)
        out["norm_bias"] = _tensor_summary(norm.bias)
    return out


def head_stats(model: nn.Module) -> tuple[HeadStats, np.ndarray]:
    """Weight statistics of the MLM head (:class:`HeadStats`) and the ``[V]`` row norms.

    Raises:
        HeadNotFoundError: unsupported model.
    """
    mlm = unwrap(model)
    head = find_mlm_head(mlm)
    norms = row_norms(head.weight)
    embedding = mlm.get_input_embeddings().weight
    tied = shares_storage(head.weight, embedding)
    final_norm = getattr(head.backbone, "final_norm", None)
    stats = HeadStats(
        family=head.family,
        vocab_size=int(head.weight.shape[0]),
        hidden_size=int(head.weight.shape[1]),
        tied=bool(tied),
        frobenius=float(np.sqrt((norms**2).sum())),
        row_norm=summarize(norms),
        bias=_tensor_summary(head.bias),
        transform=_transform_stats(head.transform),
        final_norm=_tensor_summary(getattr(final_norm, "weight", None)),
        rescale=rescale_record(mlm),
    )
    return stats, norms


# ---------------------------------------------------------------------------------------------- text
def logit_stats(head: MLMHead, hidden: torch.Tensor, n_texts: int, seed: int = 0) -> tuple[LogitStats, np.ndarray]:
    """:class:`LogitStats` of ``z = W h + b`` for ``hidden [N, H']``, and a random sample of the logits."""
    logits = decoder_logits(head, hidden).reshape(-1)
    stats = LogitStats(
        n_texts=n_texts,
        n_tokens=int(hidden.shape[0]),
        mean=logit_statistic(logits, "mean"),
        std=logit_statistic(logits, "std"),
        p99=logit_statistic(logits, "p99"),
        max=logit_statistic(logits, "max"),
        frac_positive=float((logits > 0).double().mean().item()),
    )
    generator = torch.Generator().manual_seed(seed)
    if logits.numel() > LOGIT_SAMPLE:
        pick = torch.randint(logits.numel(), (LOGIT_SAMPLE,), generator=generator).to(logits.device)
        sample = logits[pick]
    else:
        sample = logits
    return stats, sample.cpu().numpy()


def splade_stats(
    model: nn.Module,
    tokenizer,
    queries: Sequence[str],
    documents: Sequence[str],
    max_length: int,
    batch_size: int,
    show_progress: bool = False,
) -> SpladeStats:
    """:class:`SpladeStats` of the model at its current weights, with the plain SPLADE head and the
    pooling, activation, cap and fold of ``model`` when it is a :class:`~spladekit.model.splade.SpladeModel`
    (else max/relu, no cap, no fold); ``show_progress``: a bar per side.

    ``queries`` and ``documents``: when both are non-empty, ``score_mean`` averages ``q·d`` over all
    pairs; when ``documents`` is empty, it averages ``x_i·x_j`` over pairs ``i ≠ j`` of ``queries``.
    """
    from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
    from spladekit.model.splade import SpladeModel

    mlm = unwrap(model)
    was_training = mlm.training
    device = next(mlm.parameters()).device
    meta = EncoderMetadata(query_max_length=max_length, doc_max_length=max_length)
    try:
        described = model if isinstance(model, SpladeModel) else SpladeModel(mlm, head_impl="plain")  # (a DistilBERT
        # masked LM has an attribute "activation" of its own: only a SpladeModel's is read)
        splade = SpladeModel(
            mlm,
            head_impl="plain",
            pooling=described.pooling,
            activation=described.activation,
            position_top_k=getattr(described, "position_top_k", None),
            fold=getattr(described, "fold", None),
        )
        encoder = SpladeEncoder(splade, tokenizer, meta, batch_size=batch_size, device=device)
        q = encoder.encode_queries(list(queries), show_progress=show_progress)
        d = encoder.encode_documents(list(documents), show_progress=show_progress) if documents else None
    finally:
        mlm.train(was_training)
    vectors = q if d is None else sp.vstack([q, d], format="csr")
    active = np.diff(vectors.indptr)
    if d is not None:
        score = float((q @ d.T).toarray().mean())
        pairs = "query-document"
    else:
        gram = (q @ q.T).toarray().astype(np.float64)
        n = gram.shape[0]
        score = float((gram.sum() - np.trace(gram)) / (n * (n - 1))) if n > 1 else float("nan")
        pairs = "text-text"
    return SpladeStats(
        n_texts=int(vectors.shape[0]),
        active_terms=summarize(active),
        active_fraction=float(active.mean() / vectors.shape[1]),
        score_mean=score,
        score_pairs=pairs,
    )


# ---------------------------------------------------------------------------------------------- verdict
def _ratios(head: HeadStats, logits: LogitStats | None, splade: SpladeStats | None, ref: dict) -> dict[str, float]:
    """This model / the reference, for each quantity of :data:`HEALTHY_RANGES` both have."""
    out = {"row norm": head.row_norm["mean"] / ref["row_norm_mean"]}
    ref_std = (ref.get("logits") or {}).get("std")
    if logits is not None and ref_std:
        out["logit std"] = logits.std / ref_std
    ref_active = ((ref.get("splade") or {}).get("active_terms") or {}).get("mean")
    if splade is not None and ref_active:
        out["active terms"] = splade.active_terms["mean"] / ref_active
    return out


def verdict(head: HeadStats, logits: LogitStats | None, splade: SpladeStats | None, ref: dict, suggestion: dict) -> str:
    """The verdict sentences: each ratio to the reference against its healthy range
    (:data:`HEALTHY_RANGES`), the active fraction against :data:`ACTIVE_FRACTION_HIGH`, the
    suggested ``(F, s)`` and whether it is needed."""
    checks: list[str] = []
    name = ref.get("name", "the reference")
    for quantity, ratio in _ratios(head, logits, splade, ref).items():
        low, high = HEALTHY_RANGES[quantity]
        if ratio > high:
            what = {
                "row norm": "expect inflated logits and SPLADE collapse",
                "logit std": "inflated logits",
                "active terms": "inflated SPLADE activations",
            }[quantity]
        elif ratio < low:
            what = {
                "row norm": "expect weak logits and few active terms",
                "logit std": "weak logits",
                "active terms": "few active terms",
            }[quantity]
        else:
            what = "healthy"
        label = "head scale" if quantity == "row norm" else quantity
        checks.append(f"{label} {ratio:.3g}× (healthy {low:g}–{high:g}×): {what}")
    parts = [f"against the reference ({name}): " + ", ".join(checks)]
    if splade is not None:
        parts.append(
            f"{splade.active_terms['mean']:.1f} active terms per text at initialisation "
            f"({100 * splade.active_fraction:.2f}% of V"
            + (
                f", above {100 * ACTIVE_FRACTION_HIGH:.0f}%: inflated)"
                if splade.active_fraction > ACTIVE_FRACTION_HIGH
                else ")"
            )
        )
    if head.rescale:
        parts.append(f"the head was already rescaled (total factor {head.rescale.get('total_factor'):.4g})")
    command = f"--factor {suggestion['factor']:.4g}" + (
        f" --shift {suggestion['shift']:.4g}" if suggestion.get("shift") is not None else ""
    )
    need = "within every healthy range: no rescaling needed" if suggestion["healthy"] else "rescale before training"
    parts.append(
        f"suggested F = {suggestion['factor']:.4g}"
        + (f", s = {suggestion['shift']:.4g}" if suggestion.get("shift") is not None else "")
        + f" ({suggestion['method']}; spladekit rescale {command}); {need}"
    )
    return "; ".join(parts) + "."


def suggest_head(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    hidden: torch.Tensor | None,
    head: HeadStats,
    ref: dict,
    healthy: bool,
    max_length: int = 128,
    batch_size: int = 16,
) -> dict:
    """The suggested ``(F, s)`` against the reference ``ref`` (module docstring).

    With text and a reference std: ``F`` brings the std of ``F·(W h) + b`` over ``hidden`` (the
    token sample) to the reference's (:func:`~spladekit.model.calibrate.rescale.calibrated_factor`'s
    root finding), else ``F`` matches the mean decoder row norm. With text and a reference active
    terms per text: ``s`` brings the active terms at that ``F`` to the reference's.

    Returns:
        ``{"factor", "shift", "method", "targets", "reached", "healthy"}``.
    """
    from spladekit.model.calibrate.rescale import CalibrationError, factor_for_statistic
    from spladekit.model.calibrate.shift import calibrated_shift, pooled_maxima

    ref_std = (ref.get("logits") or {}).get("std")
    ref_active = ((ref.get("splade") or {}).get("active_terms") or {}).get("mean")
    out = {
        "factor": ref["row_norm_mean"] / head.row_norm["mean"],
        "shift": None,
        "method": "match the mean decoder row norm",
        "targets": {"row_norm_mean": ref["row_norm_mean"]},
        "reached": {},
        "healthy": healthy,
    }
    if hidden is None or not ref_std:
        return out
    try:
        out["factor"] = factor_for_statistic(find_mlm_head(unwrap(model)), hidden, ref_std, "std")
        out.update(method="match the logits' std", targets={"std": ref_std})
    except CalibrationError:
        pass  # a std the bias bounds: keep the norm match
    if ref_active:
        values = pooled_maxima(model, tokenizer, texts, out["factor"], max_length=max_length, batch_size=batch_size)
        # a vocabulary smaller than the reference's activity: all of it ([PAD] never counts)
        goal = min(ref_active, float(torch.isfinite(values).sum(dim=1).double().mean()))
        out["shift"], out["reached"]["active_terms"] = calibrated_shift(values, goal, "active_terms")
        out["targets"]["active_terms"] = goal
        out["method"] += " and the active terms per text"
    return out


# ---------------------------------------------------------------------------------------------- entry
def _reference_record(reference) -> dict:
    """The reference as ``Diagnosis.reference`` holds it: a :class:`Diagnosis`, a mean row norm, or
    None (the built-in one)."""
    if reference is None:
        return dict(BUILTIN_REFERENCE)
    if isinstance(reference, Diagnosis):
        return {
            "name": reference.model,
            "row_norm_mean": reference.head.row_norm["mean"],
            "logits": asdict(reference.logits) if reference.logits else None,
            "splade": asdict(reference.splade) if reference.splade else None,
        }
    ref_norm = float(reference)
    if not ref_norm > 0:
        raise ValueError(f"reference row norm must be > 0, got {reference}")
    return {"name": f"row norm {ref_norm:g}", "row_norm_mean": ref_norm, "logits": None, "splade": None}


@torch.no_grad()
def diagnose_mlm_head(
    model: nn.Module,
    tokenizer=None,
    texts: Sequence[str] | None = None,
    *,
    queries: Sequence[str] | None = None,
    documents: Sequence[str] | None = None,
    reference: Diagnosis | float | None = None,
    name: str = "",
    max_length: int = 128,
    max_tokens: int | None = 1024,
    batch_size: int = 16,
    seed: int = 0,
    progress=None,
) -> Diagnosis:
    """Measure an MLM head's weights and, given text, its logits and SPLADE vectors at initialisation;
    judge them against a reference and suggest a factor and a shift.

    Args:
        model: a ``transformers`` masked-LM model of a supported family (or a SpladeModel).
        tokenizer: the model's tokenizer (needed with text).
        texts: sample text (scores over pairs of distinct texts). Alternatively ``queries`` and
            ``documents`` (scores over query-document pairs); all of them are used for the logits.
        reference: a :class:`Diagnosis` of a reference model (ideally on the same text), a number
            taken as the reference mean row norm ``mean_v ‖W_v‖₂``, or None: :data:`BUILTIN_REFERENCE`.
        name: label of the model in the report.
        max_length: tokens per text (truncation).
        max_tokens: tokens sampled for the logit statistics (see
            :func:`~spladekit.model.calibrate.stats.token_hidden_states`).
        progress: called with one line per phase as it starts (None: silent); the encoding of the
            texts then also shows a bar.

    Returns:
        A :class:`Diagnosis`. The model's weights are not changed.

    Raises:
        HeadNotFoundError: unsupported model.
        ValueError: text given without a tokenizer, or a non-positive reference number.

    Example::

        >>> from spladekit import SpladeEncoder, diagnose_mlm_head
        >>> encoder = SpladeEncoder.from_pretrained("rasyosef/splade-tiny")
        >>> diagnosis = diagnose_mlm_head(encoder.model, encoder.tokenizer, queries=["what do proteins do"],
        ...                               documents=["proteins do most of the work in cells"])
        >>> diagnosis.head.vocab_size, diagnosis.head.hidden_size
        (30522, 128)
        >>> round(diagnosis.scale_ratio, 2)  # its mean decoder-row norm ÷ the built-in reference's (splade-tiny)
        1.0
    """
    say = progress or (lambda line: None)
    mlm = unwrap(model)
    head = find_mlm_head(mlm)
    ref = _reference_record(reference)
    say("MLM head: decoder and transform weights")
    stats, norms = head_stats(mlm)
    diagnosis = Diagnosis(
        model=name or str(getattr(mlm.config, "_name_or_path", "") or type(mlm).__name__),
        head=stats,
        row_norms=norms,
        reference=ref,
    )
    if texts is not None and (queries is not None or documents is not None):
        raise ValueError("give either texts or queries/documents, not both")
    pool_q = list(texts if texts is not None else (queries or []))
    pool_d = [] if texts is not None else list(documents or [])
    hidden = None
    if pool_q or pool_d:
        if tokenizer is None:
            raise ValueError("measuring logits on text needs the model's tokenizer")
        if not pool_q:
            pool_q, pool_d = pool_d, []
        say(f"logits on {len(pool_q) + len(pool_d)} texts (at most {max_tokens or 'all'} tokens sampled)")
        hidden = token_hidden_states(
            mlm,
            tokenizer,
            pool_q + pool_d,
            max_length=max_length,
            batch_size=batch_size,
            max_tokens=max_tokens,
            seed=seed,
        )
        diagnosis.logits, diagnosis.logit_sample = logit_stats(head, hidden, len(pool_q) + len(pool_d), seed)
        say(f"SPLADE vectors at initialisation: encoding {len(pool_q) + len(pool_d)} texts")
        diagnosis.splade = splade_stats(
            model,
            tokenizer,
            pool_q,
            pool_d,
            max_length,
            batch_size,  # a SpladeModel's pooling
            show_progress=progress is not None,
        )
    diagnosis.scale_ratio = stats.row_norm["mean"] / ref["row_norm_mean"]
    ratios = _ratios(stats, diagnosis.logits, diagnosis.splade, ref)
    healthy = all(HEALTHY_RANGES[q][0] <= r <= HEALTHY_RANGES[q][1] for q, r in ratios.items())
    say(f"suggesting a factor and a shift against {ref['name']}")
    suggestion = suggest_head(model, tokenizer, pool_q + pool_d, hidden, stats, ref, healthy, max_length, batch_size)
    diagnosis.suggested_factor, diagnosis.suggested_shift, diagnosis.suggestion = (
        suggestion["factor"],
        suggestion["shift"],
        suggestion,
    )
    diagnosis.verdict = verdict(stats, diagnosis.logits, diagnosis.splade, ref, suggestion)
    return diagnosis
