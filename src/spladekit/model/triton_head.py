"""Triton kernel of the fused SPLADE head's forward: matmul fused with the masked-max epilogue.

For one sequence ``b`` and a tile of ``BLOCK_V`` vocabulary columns, the kernel walks the sequence
in tiles of ``BLOCK_L`` positions, computes the logits tile ``h[b, tile] @ W[cols]ᵀ + bias[cols]``
in float32 registers (``tl.dot`` over ``BLOCK_H`` slices of the hidden size), sets padding positions
to ``-inf`` and folds the tile into a running max and argmax. Only ``m`` ``[B, V]`` (float32) and
``t*`` ``[B, V]`` (int32) reach memory; the ``[B, L, V]`` logits never do. Positions before the
row's first real token and after its last are not computed at all (the loop runs over
``[first, last]`` of each row), so padding costs nothing.

Formula: SPLADE v2 max pooling (Formal et al., arXiv 2109.10086, eq. 2), see
:mod:`spladekit.model.fused`. Ties: the first position wins (``tl.argmax`` breaks ties to the left
within a tile, and a later tile replaces the running max only when strictly greater), as in
``torch.max(dim=...)``.

Precision: float32 inputs use IEEE float32 products (no TF32), as torch's default matmul does;
bf16/fp16 inputs are multiplied in their dtype with float32 accumulation. Unlike the plain head,
logits are not rounded to bf16 before the max (the result is the more exact one; differences are
within bf16 rounding). Under the interpreter, bf16 tiles are widened to float32 before the product
(its bf16 emulation multiplies wrongly); on the GPU they are not.

No per-position cap (``position_top_k``): the kernel folds each tile into a running max, and a cap
needs each position's k-th largest logit over the whole vocabulary before any column is pooled. A
capped fused head runs :mod:`spladekit.model.capped` instead (``backend="auto"`` chooses it on every
device; ``backend="triton"`` with a cap is refused by :func:`spladekit.model.fused.fused_splade_head`).

Importing this module raises ``ImportError`` when triton is missing. With ``TRITON_INTERPRET=1`` set
before triton is first imported, the kernel runs in Triton's CPU interpreter on CPU tensors (slow;
used by the tests on machines without a GPU).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _splade_max_kernel(
    h_ptr,
    mask_ptr,
    span_ptr,
    w_ptr,
    b_ptr,
    max_ptr,
    arg_ptr,
    H,
    V,
    stride_hb,
    stride_hl,
    stride_hh,
    stride_mb,
    stride_ml,
    stride_wv,
    stride_wh,
    HAS_BIAS: tl.constexpr,
    WITH_ARGMAX: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0)  # batch row: fastest axis, so neighbouring programs share the W tile
    pid_v = tl.program_id(1)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    v_ok = offs_v < V
    first = tl.load(span_ptr + 2 * row)
    last = tl.load(span_ptr + 2 * row + 1)
    best = tl.full([BLOCK_V], float("-inf"), tl.float32)
    best_at = tl.zeros([BLOCK_V], dtype=tl.int32)
    if HAS_BIAS:
        bias = tl.load(b_ptr + offs_v, mask=v_ok, other=0.0).to(tl.float32)
    for l0 in range(first, last, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_ok = offs_l < last
        acc = tl.zeros([BLOCK_L, BLOCK_V], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            offs_h = h0 + tl.arange(0, BLOCK_H)
            h_ok = offs_h < H
            a = tl.load(
                h_ptr + row * stride_hb + offs_l[:, None] * stride_hl + offs_h[None, :] * stride_hh,
                mask=l_ok[:, None] & h_ok[None, :],
                other=0.0,
            )
            w = tl.load(
                w_ptr + offs_v[None, :] * stride_wv + offs_h[:, None] * stride_wh,
                mask=h_ok[:, None] & v_ok[None, :],
                other=0.0,
            )
            if UPCAST:  # Triton's interpreter multiplies bf16 wrongly: widen first (interpreter only)
                acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
            elif IEEE:
                acc = tl.dot(a, w, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, w, acc)
        if HAS_BIAS:
            acc = acc + bias[None, :]
        real = tl.load(mask_ptr + row * stride_mb + offs_l * stride_ml, mask=l_ok, other=0)
        keep = (real != 0) & l_ok
        acc = tl.where(keep[:, None], acc, float("-inf"))
        tile_max = tl.max(acc, axis=0)
        better = tile_max > best
        if WITH_ARGMAX:
            tile_at = tl.argmax(acc, axis=0, tie_break_left=True).to(tl.int32) + l0
            best_at = tl.where(better, tile_at, best_at)
        best = tl.where(better, tile_max, best)
    tl.store(max_ptr + row * V + offs_v, best, mask=v_ok)
    if WITH_ARGMAX:
        tl.store(arg_ptr + row * V + offs_v, best_at, mask=v_ok)


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` before import)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def row_spans(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, 2]`` int32: first real position and one past the last, per row (``[0, 0]`` if none)."""
    real = attention_mask.to(torch.bool)
    length = real.shape[1]
    pos = torch.arange(length, device=real.device)
    last = torch.where(real, pos + 1, torch.zeros_like(pos)).amax(dim=1)
    first = torch.where(real, pos, torch.full_like(pos, length)).amin(dim=1)
    first = torch.minimum(first, last)
    return torch.stack([first, last], dim=1).to(torch.int32).contiguous()


def _blocks(length: int, dim: int, interpret: bool) -> dict:
    if interpret:  # the interpreter is slow: smallest legal tiles
        return dict(BLOCK_L=16, BLOCK_V=16, BLOCK_H=16, num_warps=1)
    block_l = 16 if length <= 16 else 32 if length <= 32 else 64
    return dict(BLOCK_L=block_l, BLOCK_V=128, BLOCK_H=64 if dim >= 64 else 32, num_warps=8, num_stages=3)


def triton_masked_max(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    with_argmax: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Masked max (and argmax) of the logits over positions, by the Triton kernel.

    Args:
        hidden: ``[B, L, H]``; weight ``[V, H]``; bias ``[V]`` or None (one float dtype).
        attention_mask: ``[B, L]``, non-zero for real tokens.
        with_argmax: also compute ``t*``.

    Returns:
        ``m`` ``[B, V]`` float32 (``-inf`` for a row without real tokens), ``t*`` ``[B, V]`` int32
        (first position of the max) or None.
    """
    batch, length, dim = hidden.shape
    vocab = weight.shape[0]
    mask = attention_mask.to(torch.int8).contiguous()
    spans = row_spans(attention_mask)
    maxval = torch.empty((batch, vocab), dtype=torch.float32, device=hidden.device)
    argmax = torch.empty((batch, vocab), dtype=torch.int32, device=hidden.device) if with_argmax else maxval
    if batch == 0 or vocab == 0:
        return maxval, (argmax if with_argmax else None)
    interpret = interpreting()
    blocks = _blocks(length, dim, interpret)
    grid = (batch, triton.cdiv(vocab, blocks["BLOCK_V"]))
    _splade_max_kernel[grid](
        hidden,
        mask,
        spans,
        weight,
        bias if bias is not None else weight,
        maxval,
        argmax,
        dim,
        vocab,
        hidden.stride(0),
        hidden.stride(1),
        hidden.stride(2),
        mask.stride(0),
        mask.stride(1),
        weight.stride(0),
        weight.stride(1),
        HAS_BIAS=bias is not None,
        WITH_ARGMAX=with_argmax,
        IEEE=hidden.dtype == torch.float32,
        UPCAST=interpret and hidden.dtype == torch.bfloat16,
        **blocks,
    )
    return maxval, (argmax if with_argmax else None)
