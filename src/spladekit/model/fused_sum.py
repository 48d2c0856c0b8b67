"""The fused SPLADE head for sum pooling (SPLADE v1) without a ``[B, L, V]`` tensor.

SPLADE v1 (Formal et al., "SPLADE", SIGIR 2021, arXiv 2107.05720, eq. 2) pools the activated MLM
logits ``x[b, t, j] = h[b, t] · W_j + b_j`` by a masked sum over positions:

    w[b, j] = Σ_t mask[b, t] · a(x[b, t, j])

with ``a(x) = log(1 + ReLU(x))`` (``"relu"``) or ``a(x) = log(1 + log(1 + ReLU(x)))``
(``"log1p_relu"``), see :mod:`spladekit.model.pooling`. Unlike the max (:mod:`spladekit.model.fused`),
a sum has no single position per entry and the activation cannot move outside it, so every
position's logits are needed forward and backward. This head never holds all of them at once:

Forward
    over vocabulary chunks ``j ∈ [lo, hi)``: the chunk's logits ``[B, L, Vc]`` (input dtype), their
    activation and masked sum over ``t`` (float32) into ``w[:, lo:hi]``; the chunk is then dropped.
    Memory O(B·V) plus one chunk of O(B·L·Vc) (:data:`CHUNK_BUDGET_BYTES`).

Backward
    nothing but the inputs is saved; each chunk's logits are recomputed. With
    ``G[b, t, j] = grad_w[b, j] · mask[b, t] · a'(x[b, t, j])``, where

        a'(x) = 1/(1 + x)                         for "relu",        x > 0
        a'(x) = 1/(1 + log(1 + x)) · 1/(1 + x)    for "log1p_relu",  x > 0   (chain rule)
        a'(x) = 0                                  for x ≤ 0 (ReLU's derivative at 0 is 0, as in torch),

    the gradients are sums over the chunk's columns and all positions:

        dh[b, t] += Σ_j G[b, t, j] · W_j          ([B·L, Vc] @ [Vc, H])
        dW_j      = Σ_{b,t} G[b, t, j] · h[b, t]  ([Vc, B·L] @ [B·L, H])
        db_j      = Σ_{b,t} G[b, t, j]

    in float32 (two dense products per chunk, the same O(B·L·V·H) as the forward's product);
    gradients are cast to the input dtypes.

Mixed precision: as :func:`spladekit.model.fused.fused_splade_head` (inputs cast to the autocast
dtype before the head, exactly as ``F.linear`` would in the plain head).

A cap on each position's expansion (``position_top_k = k``): only each position's ``k`` largest logits
enter the sum (the rule of :mod:`spladekit.model.pooling`); they are found chunk by chunk by a running
top-(k+1) and summed from the kept entries, whose backward needs no recomputation
(:mod:`spladekit.model.capped`).
"""

from __future__ import annotations

import torch

from spladekit.model.fused import head_inputs
from spladekit.model.pooling import check_position_top_k, splade_activation, splade_activation_derivative

#: Bytes of float32 ``[B, L, Vc]`` chunk tensors the head may hold at once (logits and their gradient).
CHUNK_BUDGET_BYTES = 32 * 2**20

_ACTIVATIONS = ("relu", "log1p_relu")


def _columns(batch: int, length: int, vocab: int) -> int:
    """Vocabulary columns per chunk: a float32 ``[B, L, Vc]`` tensor of :data:`CHUNK_BUDGET_BYTES`/2
    (two such tensors live in the backward), at least 32, a multiple of 32."""
    cols = (CHUNK_BUDGET_BYTES // 2) // max(1, batch * length * 4)
    return int(min(vocab, max(32, (cols // 32) * 32)))


def _chunk_logits(hidden, weight, bias, lo: int, hi: int) -> torch.Tensor:
    return torch.nn.functional.linear(hidden, weight[lo:hi], None if bias is None else bias[lo:hi])


class FusedSumHead(torch.autograd.Function):
    """Autograd function of the sum-pooling head; use :func:`fused_sum_splade_head`.

    ``forward(hidden, attention_mask, weight, bias, activation) → [B, V] float32``; saves only
    references to the inputs (the backward recomputes each chunk's logits).
    """

    @staticmethod
    def forward(ctx, hidden, attention_mask, weight, bias, activation):
        ctx.save_for_backward(hidden, attention_mask, weight, bias)
        ctx.activation = activation
        return _sum_forward(hidden, attention_mask, weight, bias, activation)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_w):
        hidden, attention_mask, weight, bias = ctx.saved_tensors
        need_h, _, need_w, need_b, _ = ctx.needs_input_grad
        batch, length, dim = hidden.shape
        vocab = weight.shape[0]
        mask = attention_mask.to(torch.float32).unsqueeze(-1)  # [B, L, 1]
        grad_w = grad_w.float()
        d_h = torch.zeros(batch, length, dim, dtype=torch.float32, device=hidden.device) if need_h else None
        d_w = torch.zeros(vocab, dim, dtype=torch.float32, device=hidden.device) if need_w else None
        d_b = torch.zeros(vocab, dtype=torch.float32, device=hidden.device) if (need_b and bias is not None) else None
        flat_h = hidden.reshape(batch * length, dim).float()
        step = _columns(batch, length, vocab)
        with torch.autocast(hidden.device.type, enabled=False):  # float32 products, even inside autocast
            for lo in range(0, vocab, step):
                hi = min(vocab, lo + step)
                g = splade_activation_derivative(_chunk_logits(hidden, weight, bias, lo, hi), ctx.activation)
                g.mul_(mask).mul_(grad_w[:, None, lo:hi])  # G [B, L, Vc]
                flat_g = g.reshape(batch * length, hi - lo)
                if d_h is not None:
                    d_h.add_((flat_g @ weight[lo:hi].float()).view(batch, length, dim))
                if d_w is not None:
                    d_w[lo:hi] = flat_g.T @ flat_h
                if d_b is not None:
                    d_b[lo:hi] = flat_g.sum(dim=0)
        return (
            None if d_h is None else d_h.to(hidden.dtype),
            None,
            None if d_w is None else d_w.to(weight.dtype),
            None if d_b is None else d_b.to(bias.dtype),
            None,
        )


def _sum_forward(hidden, attention_mask, weight, bias, activation) -> torch.Tensor:
    batch, length, _ = hidden.shape
    vocab = weight.shape[0]
    mask = attention_mask.to(torch.bool).unsqueeze(-1)  # [B, L, 1]
    out = torch.zeros(batch, vocab, dtype=torch.float32, device=hidden.device)
    step = _columns(batch, length, vocab)
    for lo in range(0, vocab, step):
        hi = min(vocab, lo + step)
        out[:, lo:hi] = (
            splade_activation(_chunk_logits(hidden, weight, bias, lo, hi), activation)
            .masked_fill_(~mask, 0.0)
            .sum(dim=1)
        )
    return out


def fused_sum_splade_head(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    activation: str = "relu",
    position_top_k: int | None = None,
) -> torch.Tensor:
    """SPLADE sum-pooling head ``w[b, j] = Σ_t mask[b, t] · a(h[b,t]·W_j + b_j)`` without ``[B, L, V]`` tensors.

    Same contract as :func:`spladekit.model.pooling.plain_splade_head` with ``pooling="sum"`` (see the
    module docstring for the forward/backward scheme).

    Args:
        hidden: ``[B, L, H]`` transformed hidden states.
        attention_mask: ``[B, L]``, non-zero for real tokens; padding never contributes.
        weight: decoder weight ``[V, H]``; bias: ``[V]`` or None.
        activation: ``"relu"`` or ``"log1p_relu"``.
        position_top_k: sum only each position's ``k`` largest logits (module docstring); None: all.

    Returns:
        ``[B, V]`` float32 weights ≥ 0. Memory: O(B·V) plus one chunk of :data:`CHUNK_BUDGET_BYTES`.

    Raises:
        ValueError: shapes that do not agree, an unknown activation, a ``position_top_k`` that is not
            None or ≥ 1.
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown SPLADE activation {activation!r}; choose one of {_ACTIVATIONS}")
    check_position_top_k(position_top_k)
    hidden, weight, bias, wants_grad = head_inputs(hidden, attention_mask, weight, bias)
    with torch.autocast(hidden.device.type, enabled=False):
        if position_top_k is not None and position_top_k < weight.shape[0]:
            from spladekit.model.capped import capped_sum_head

            return capped_sum_head(hidden, attention_mask, weight, bias, activation, position_top_k)
        if not wants_grad:
            return _sum_forward(hidden, attention_mask, weight, bias, activation)
        return FusedSumHead.apply(hidden, attention_mask, weight, bias, activation)
