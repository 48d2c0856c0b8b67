"""Sparsity regularisers of SPLADE and their warm-up schedule.

``w`` is ``[N, V]``: the N vectors of one side (queries or documents) of a batch.

FLOPS regulariser (Paria et al., ICLR 2020, "Minimizing FLOPs to Learn Efficient Sparse
Representations", eq. 4; used by SPLADE, Formal et al. SIGIR 2021, eq. 5):

    FLOPS(w) = Σ_j ( (1/N) Σ_i w_ij )²

L1 regulariser (the average L1 norm of a vector):

    L1(w) = (1/N) Σ_i Σ_j |w_ij|

FLOPS with an ℓ0 mask (Shen, Geng & Yang, arXiv 2504.14839; sentence-transformers'
``FlopsLoss(threshold)``): rows with at most τ active terms are left out of the sum (N still counts them)::

    FLOPS_ℓ0(w) = Σ_j ( (1/N) Σ_i m_i w_ij )²,      m_i = 1[ |{j : w_ij ≠ 0}| > τ ]   (no gradient through m)

IDF-aware FLOPS (Geng, Ru & Yang, arXiv 2411.04403): their inference-free score is
``s(q, d) = Σ_j idf_j q_j d_j`` (binary query tokens ``q`` times the IDF) with plain FLOPS on the
document vectors ``d`` (their training code, zhichao-aws/opensearch-sparse-model-tuning-sample:
``flops_value`` of ``d_rep``; the query side ``relu(idf)`` of its tokens): the IDF enters through the
score, so the ranking gradient of a low-IDF term is small beside its FLOPS price. For the vector a plain
dot product scores, ``w = idf ⊙ d``, that same objective reads::

    FLOPS_idf(w) = Σ_j ( (1/N) Σ_i w_ij / idf_j )²        (idf_j > 0)

so a common term (low IDF) costs more than a rare one for the same weight; a term in (nearly) every
training document, ``idf ≈ 0.5/N``, costs about ``(2N)²`` times its FLOPS price: by that objective it
carries no score. With an inference-free query side whose weights are the IDF, plain FLOPS on the
documents already is their objective (the training config refuses ``idf_flops`` there).

DF-FLOPS (Porco et al., arXiv 2505.15070): each term's FLOPS share is scaled by a generalised-logistic
function ``a`` of its document frequency share ``x_j = DF_j / |C|`` among the documents, estimated from
the model's own document vectors and re-estimated during training
(:class:`spladekit.train.term_weights.DocumentFrequencyEstimate`)::

    DF-FLOPS(w) = Σ_j ( (a_j / N) Σ_i w_ij )²,      a_j = a(x_j; α, β) = 1 / (1 + (x_j^(log_α 2) − 1)^β)

with ``0 < α < 1`` the share at which ``a = 1/2`` and ``β > 0`` the steepness (``a(0) = 0``, ``a(1) = 1``).
The weight multiplies the batch mean inside the square, as the paper's equation is rendered from its
source (``Σ_{t∈V} ( w_t/N Σ_i r_{i,t} )²``); a rendering with ``w_t`` outside the square would weigh
the terms by ``a_j`` instead of ``a_j²``.

Anti-zero term (naver/splade, ``splade/hf/trainers.py``, added to the loss with weight 1 for each side)::

    AZ(w) = 1 / ( Σ_i Σ_j w_ij )²

It grows as a side's vectors empty; when all are zero it is infinite (the trainer's non-finite loss check stops).

Quadratic warm-up of the weight (Paria et al. 2020 §5; SPLADE's training code):

    λ_t = λ · min(1, t/T)²        (T = 0: λ from the first step)
"""

from __future__ import annotations

import math

import torch


def _check(weights: torch.Tensor) -> None:
    if weights.dim() != 2:
        raise ValueError(f"expected weights of shape [N, V], got {tuple(weights.shape)}")
    if weights.shape[0] == 0:
        raise ValueError("regulariser of an empty batch (N = 0)")


def flops_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser ``Σ_j (mean_i w_ij)²`` (Paria et al. 2020, eq. 4).

    Args:
        weights: ``[N, V]`` float SPLADE weights of one side (queries or documents) of the batch.

    Returns:
        A scalar tensor (differentiable).

    Raises:
        ValueError: ``weights`` is not 2-D or has no rows.
    """
    _check(weights)
    return weights.float().mean(dim=0).pow(2).sum()


def l1_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """L1 regulariser ``mean_i Σ_j |w_ij|``.

    Args:
        weights: ``[N, V]`` float tensor.

    Returns:
        A scalar tensor (differentiable).

    Raises:
        ValueError: ``weights`` is not 2-D or has no rows.
    """
    _check(weights)
    return weights.float().abs().sum(dim=1).mean()


def flops_l0_regularizer(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    """FLOPS over the rows with more than ``threshold`` active terms (module docstring; the same
    operations as sentence-transformers' ``FlopsLoss(threshold).compute_loss_from_embeddings``).

    Args:
        weights: ``[N, V]`` float SPLADE weights of one side of the batch.
        threshold: τ ≥ 0; a row with ``‖w_i‖₀ ≤ τ`` active terms adds nothing (it still counts in N).

    Returns:
        A scalar tensor (differentiable; the mask is not).

    Raises:
        ValueError: ``weights`` is not 2-D or has no rows; ``threshold`` < 0 or not finite.
    """
    _check(weights)
    if not math.isfinite(threshold) or threshold < 0:
        raise ValueError(f"the l0 threshold must be a finite number >= 0, got {threshold!r}")
    weights = weights.float()
    mask = ((weights != 0).sum(dim=1) > threshold).float()
    return torch.sum(torch.mean(weights * mask.unsqueeze(1), dim=0) ** 2)


def idf_flops_regularizer(weights: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
    """IDF-aware FLOPS ``Σ_j (mean_i w_ij / idf_j)²`` (module docstring).

    Args:
        weights: ``[N, V]`` float tensor.
        idf: ``[V]`` IDF of each term, every entry > 0 and finite
            (:func:`spladekit.train.term_weights.training_idf`); no gradient flows into it.

    Raises:
        ValueError: bad shapes, or an IDF entry ≤ 0 or not finite (naming the term id).
    """
    _check(weights)
    idf = _term_vector(idf, weights, "idf")
    bad = torch.nonzero(~torch.isfinite(idf) | (idf <= 0))
    if bad.numel():
        j = int(bad[0])
        raise ValueError(
            f"IDF-aware FLOPS divides by the IDF: term {j} has idf {float(idf[j])!r} (every idf must be > 0)"
        )
    return (weights.float().mean(dim=0) / idf).pow(2).sum()


def df_flops_regularizer(weights: torch.Tensor, term_weights: torch.Tensor) -> torch.Tensor:
    """DF-FLOPS ``Σ_j (a_j · mean_i w_ij)²`` (module docstring).

    Args:
        weights: ``[N, V]`` float tensor.
        term_weights: ``[V]`` the ``a_j`` of :func:`df_activation` (in [0, 1]); no gradient flows into it.

    Raises:
        ValueError: bad shapes, or a term weight outside [0, 1] or not finite.
    """
    _check(weights)
    a = _term_vector(term_weights, weights, "term_weights")
    if not bool(torch.all(torch.isfinite(a) & (a >= 0) & (a <= 1))):
        raise ValueError("DF-FLOPS term weights must lie in [0, 1] (df_activation of a document-frequency share)")
    return (a * weights.float().mean(dim=0)).pow(2).sum()


def df_activation(share: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """``a(x) = 1 / (1 + (x^(log_α 2) − 1)^β)`` of DF-FLOPS (Porco et al., arXiv 2505.15070), elementwise.

    Computed in float64: with ``p = ln 2 / ln α < 0``, ``x^p − 1 ≥ 0`` on (0, 1]; ``a(0) = 0`` (the
    limit), ``a(α) = 1/2``, ``a(1) = 1``, increasing in between.

    Args:
        share: document-frequency shares ``DF_j / |C|`` in [0, 1].
        alpha: 0 < α < 1.  beta: β > 0.

    Returns:
        float32 tensor of ``share``'s shape, values in [0, 1].

    Raises:
        ValueError: α or β out of range, or a share outside [0, 1].
    """
    if not (0 < alpha < 1) or not (beta > 0) or not math.isfinite(beta):
        raise ValueError(f"DF-FLOPS needs 0 < alpha < 1 and a finite beta > 0, got alpha={alpha!r}, beta={beta!r}")
    x = torch.as_tensor(share, dtype=torch.float64)
    if not bool(torch.all((x >= 0) & (x <= 1))):
        raise ValueError("document-frequency shares must lie in [0, 1]")
    p = math.log(2.0) / math.log(alpha)
    positive = x > 0
    base = torch.where(positive, x, torch.ones_like(x)).pow(p) - 1.0  # x = 0: set apart (x^p = inf)
    a = torch.where(positive, 1.0 / (1.0 + base.clamp(min=0.0).pow(beta)), torch.zeros_like(x))
    return a.float()


def anti_zero_regularizer(weights: torch.Tensor) -> torch.Tensor:
    """naver/splade's anti-zero term ``1 / (Σ_i Σ_j w_ij)²`` of one side (module docstring).

    Returns:
        A scalar tensor (differentiable); ``inf`` when every weight is 0.

    Raises:
        ValueError: ``weights`` is not 2-D or has no rows.
    """
    _check(weights)
    return 1.0 / weights.float().sum().pow(2)


def _term_vector(values: torch.Tensor, weights: torch.Tensor, name: str) -> torch.Tensor:
    values = torch.as_tensor(values).detach()
    if values.shape != (weights.shape[1],):
        raise ValueError(f"{name} must have shape [V] = [{weights.shape[1]}], got {tuple(values.shape)}")
    return values.to(device=weights.device, dtype=torch.float32)


REGULARIZERS = {"flops": flops_regularizer, "l1": l1_regularizer}


class QuadraticWarmup:
    """``λ_t = λ·min(1, t/T)²`` with ``t`` the optimiser step (1-based: the first update uses t = 1).

    Args:
        value: λ, the final weight (≥ 0).
        warmup_steps: T (0: no warm-up).
    """

    def __init__(self, value: float, warmup_steps: int = 0):
        if value < 0 or warmup_steps < 0:
            raise ValueError(f"λ and warm-up steps must be ≥ 0, got {value}, {warmup_steps}")
        self.value = float(value)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: int) -> float:
        if self.warmup_steps == 0:
            return self.value
        return self.value * min(1.0, step / self.warmup_steps) ** 2


class SparsityPenalty:
    """The regulariser a training config selects, one call per side of the batch.

    ``penalty(w)`` is the ``regularizer.kind`` regulariser of ``w`` (``[N, V]``, one side); the
    trainer weighs it by λ_q or λ_d (with the warm-up). ``penalty.anti_zero(w)`` is
    ``regularizer.anti_zero`` × :func:`anti_zero_regularizer` (a zero tensor when that weight is 0).

    Args:
        config: :class:`spladekit.train.config.RegularizerConfig`.
        idf: ``[V]`` for ``idf_flops`` (:func:`spladekit.train.term_weights.training_idf`).
        df: for ``df_flops``, the :class:`spladekit.train.term_weights.DocumentFrequencyEstimate`
            read at each call (its latest estimate).

    Raises:
        ValueError: ``idf_flops`` without ``idf`` or ``df_flops`` without ``df``.

    Example::

        penalty = SparsityPenalty(config.regularizer, df=estimate)
        loss = rank + lam_q * penalty(q) + lam_d * penalty(d) + penalty.anti_zero(q) + penalty.anti_zero(d)
    """

    def __init__(self, config, idf: torch.Tensor | None = None, df=None):
        if config.kind == "idf_flops" and idf is None:
            raise ValueError("regularizer.kind idf_flops needs the IDF of the training documents (training_idf)")
        if config.kind == "df_flops" and df is None:
            raise ValueError("regularizer.kind df_flops needs a DocumentFrequencyEstimate")
        self.config, self.idf, self.df = config, idf, df
        self._idf_on: dict = {}

    def __call__(self, weights: torch.Tensor) -> torch.Tensor:
        kind = self.config.kind
        if kind == "flops_l0":
            return flops_l0_regularizer(weights, self.config.threshold)
        if kind == "idf_flops":
            key = weights.device
            if key not in self._idf_on:  # one copy per device, not one per step
                self._idf_on[key] = _term_vector(self.idf, weights, "idf")
            return idf_flops_regularizer(weights, self._idf_on[key])
        if kind == "df_flops":
            return df_flops_regularizer(weights, self.df.weights())
        return REGULARIZERS[kind](weights)

    def anti_zero(self, weights: torch.Tensor) -> torch.Tensor:
        if not self.config.anti_zero:
            return torch.zeros((), device=weights.device)
        return self.config.anti_zero * anti_zero_regularizer(weights)
