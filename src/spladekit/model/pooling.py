"""SPLADE pooling, the plain (reference) way: every pooling and activation spladekit computes.

A SPLADE vector reads the MLM logits ``logit_{t,j}`` ``[B, L, V]`` through an activation ``a`` and
pools over the non-padding positions ``t`` (``mask_t = 1``):

    max pooling (SPLADE v2, Formal et al., arXiv 2109.10086, eq. 2):  w_j = max_t a(logit_{t,j})
    sum pooling (SPLADE v1, Formal et al., arXiv 2107.05720, eq. 2):  w_j = Σ_t   a(logit_{t,j})

with one of two activations, named as sentence-transformers' ``SpladePooling`` names them
(``activation_function``):

    "relu":        a(x) = log(1 + ReLU(x))                    (SPLADE's log-saturation)
    "log1p_relu":  a(x) = log(1 + log(1 + ReLU(x)))           (OpenSearch v3 document models,
                                                               Geng et al., arXiv 2504.14839)

Both activations are non-decreasing, so ``max_t a(x_t) = a(max_t x_t)``: max pooling takes the
masked max of the logits first and applies the activation to the ``[B, V]`` result. Sum pooling
cannot: the activation is applied to each position's logits, then the masked sum is taken. All in
float32 whatever the model's dtype. Padding positions (mask 0) never contribute; a row whose mask
is all zero gives an all-zero vector.

Special-token policy: every non-padding position takes part, including ``[CLS]``/``[SEP]``
(``<s>``/``</s>``), exactly as naver/splade and sentence-transformers' ``SpladePooling`` do, so
checkpoints trained there give the same vectors here. Vocabulary columns are not masked.

A cap on each position's expansion (``position_top_k = k``, the head option ``head.position_top_k``;
SPARSEUP's model card pools each token's 12 largest entries): before pooling, each position ``t``
keeps only its ``k`` largest logits (bias included),

    keep_{t,j} = [logit_{t,j} ≥ τ_t],   τ_t = the k-th largest of logit_{t,1..V} (counted with multiplicity)

and every other logit counts as ``-inf`` (activation 0, no gradient). Ties at ``τ_t`` are all kept,
so a position keeps at least ``k`` entries and the rule does not depend on how a top-k routine
breaks ties. ``k ≥ V`` keeps everything. The selection is invariant to a shift of every logit, so a
shift (a decoder-bias change, :mod:`spladekit.model.calibrate.rescale`) and a cap compose. Gradients
flow to the kept logits only (``τ_t`` enters through a comparison).
"""

from __future__ import annotations

import torch

#: SPLADE poolings over positions and activations of the logits (sentence-transformers' names).
POOLINGS = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")


def check_pooling(pooling: str, activation: str) -> None:
    """Raise ``ValueError`` unless ``pooling`` is in :data:`POOLINGS` and ``activation`` in :data:`ACTIVATIONS`."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown SPLADE pooling {pooling!r}; choose one of {POOLINGS}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown SPLADE activation {activation!r}; choose one of {ACTIVATIONS}")


def check_position_top_k(k) -> None:
    """Raise ``ValueError`` unless ``k`` (``position_top_k``) is None or an integer ≥ 1."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"position_top_k must be None (no cap) or an integer ≥ 1, got {k!r}")


def capped_logits(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """Each position's ``k`` largest logits, ``-inf`` elsewhere (module docstring, the threshold rule).

    Args:
        logits: ``[..., V]``, any float dtype (kept).
        k: ``position_top_k``; None or ``k ≥ V`` returns ``logits`` unchanged.

    Returns:
        A tensor of ``logits``' shape and dtype; differentiable where kept.
    """
    check_position_top_k(k)
    if k is None or k >= logits.shape[-1]:
        return logits
    threshold = logits.detach().topk(k, dim=-1).values[..., k - 1 :]  # τ_t, [..., 1]
    return logits.masked_fill(logits.detach() < threshold, float("-inf"))


def splade_activation(x: torch.Tensor, activation: str = "relu") -> torch.Tensor:
    """``a(x)`` of the module docstring in float32: ``log(1 + ReLU(x))`` (``"relu"``, Formal et al.
    2021, eq. 1) or ``log(1 + log(1 + ReLU(x)))`` (``"log1p_relu"``)."""
    out = torch.log1p(torch.relu(x.float()))
    if activation == "log1p_relu":
        return torch.log1p(out)
    if activation != "relu":
        raise ValueError(f"unknown SPLADE activation {activation!r}; choose one of {ACTIVATIONS}")
    return out


def splade_activation_derivative(x: torch.Tensor, activation: str = "relu") -> torch.Tensor:
    """``a'(x)`` of :func:`splade_activation` in float32, elementwise, for the sum heads' backward passes:

    a'(x) = 1/(1 + x)                         for "relu",        x > 0
    a'(x) = 1/(1 + log(1 + x)) · 1/(1 + x)    for "log1p_relu",  x > 0   (chain rule)
    a'(x) = 0                                  for x ≤ 0 (ReLU's derivative at 0 is 0, as in torch).
    """
    x = torch.relu(x.float())
    d = 1.0 / (1.0 + x)
    if activation == "log1p_relu":
        d = d / (1.0 + torch.log1p(x))
    return torch.where(x > 0, d, torch.zeros_like(d))


def splade_pool(
    logits: torch.Tensor,
    attention_mask: torch.Tensor,
    pooling: str = "max",
    activation: str = "relu",
    position_top_k: int | None = None,
) -> torch.Tensor:
    """SPLADE pooling of MLM logits (module docstring), the reference for every head.

    Args:
        logits: ``[B, L, V]`` vocabulary logits, any float dtype.
        attention_mask: ``[B, L]``, 1 for real tokens, 0 for padding.
        pooling: ``"max"`` or ``"sum"``; activation: ``"relu"`` or ``"log1p_relu"``.
        position_top_k: pool only each position's ``k`` largest logits (:func:`capped_logits`); None: all.

    Returns:
        ``[B, V]`` float32 weights, ≥ 0.

    Raises:
        ValueError: unknown pooling or activation, a ``position_top_k`` that is not None or ≥ 1.
    """
    check_pooling(pooling, activation)
    logits = capped_logits(logits, position_top_k)
    mask = attention_mask.to(torch.bool).unsqueeze(-1)
    if pooling == "sum":
        return splade_activation(logits, activation).masked_fill(~mask, 0.0).sum(dim=1)
    masked = logits.float().masked_fill(~mask, float("-inf"))
    pooled = masked.max(dim=1).values
    return splade_activation(pooled.clamp_min(0.0), activation)


def splade_max_pool(logits: torch.Tensor, attention_mask: torch.Tensor, activation: str = "relu") -> torch.Tensor:
    """SPLADE max pooling of MLM logits: :func:`splade_pool` with ``pooling="max"``.

    Args:
        logits: ``[B, L, V]`` vocabulary logits, any float dtype.
        attention_mask: ``[B, L]``, 1 for real tokens, 0 for padding.

    Returns:
        ``[B, V]`` float32 weights, ≥ 0.
    """
    return splade_pool(logits, attention_mask, "max", activation)


def plain_splade_head(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    pooling: str = "max",
    activation: str = "relu",
    position_top_k: int | None = None,
) -> torch.Tensor:
    """The unfused head: full logits ``[B, L, V] = hidden @ weight.T``, then SPLADE pooling.

    Max pooling: the bias is added after the max: ``max_t (x_tj + b_j) = (max_t x_tj) + b_j``
    exactly, also in floating point (rounding is monotonic), so adding it to ``[B, V]`` instead of
    ``[B, L, V]`` gives the same weights and saves a pass over the logits (≈ 30 % of the head's time
    on a 2-core CPU at splade-tiny's size, 64 × 48 tokens). Padding is masked in place on the logits
    (they are not needed for the backward pass of the matrix product).

    Sum pooling: the activation is not linear, so the bias is added to every position's logits,
    then ``Σ_t mask_t · a(logit_tj)`` (:func:`splade_pool`).

    A cap (``position_top_k``) ranks each position's logits bias included, so the capped head forms
    ``hidden @ weight.T + bias`` in full, keeps each position's ``k`` largest (:func:`capped_logits`)
    and pools them (:func:`splade_pool`): the dense reference of the capped fused heads.

    Args:
        hidden: ``[B, L, H]`` transformed hidden states (after the MLM head's transform).
        attention_mask: ``[B, L]``.
        weight: decoder weight ``[V, H]``.
        bias: decoder bias ``[V]`` or None.
        pooling: ``"max"`` or ``"sum"``; activation: ``"relu"`` or ``"log1p_relu"`` (module docstring).
        position_top_k: each position's ``k`` largest logits only (module docstring); None: all.

    Returns:
        ``[B, V]`` float32 SPLADE weights. Memory: O(B·L·V) for the logits and their gradient.

    Raises:
        ValueError: unknown pooling or activation, a ``position_top_k`` that is not None or ≥ 1.
    """
    check_pooling(pooling, activation)
    check_position_top_k(position_top_k)
    if position_top_k is not None and position_top_k < weight.shape[0]:
        logits = torch.nn.functional.linear(hidden, weight, bias)
        return splade_pool(logits, attention_mask, pooling, activation, position_top_k)
    if pooling == "sum":
        return splade_pool(torch.nn.functional.linear(hidden, weight, bias), attention_mask, "sum", activation)
    logits = torch.matmul(hidden, weight.T).float()
    mask = attention_mask.to(torch.bool)
    if not bool(mask.all()):
        logits = logits.masked_fill_(~mask.unsqueeze(-1), float("-inf"))
    pooled = logits.max(dim=1).values
    if bias is not None:
        pooled = pooled + bias.float()
    return splade_activation(pooled.clamp_min(0.0), activation)
