"""The gradients of a SPLADE head from the gradients of a sparse set of its logits, without ``[B, L, V]``.

Both sparse backward passes end here: the fused max head's (:func:`spladekit.model.fused.sparse_head_backward`,
one logit per active entry) and the capped sum head's (:mod:`spladekit.model.capped`, the kept logits).
Entry ``e`` is the logit of flat position ``p_e`` (a row of ``hidden.view(B·L, H)``) and column ``c_e``
with gradient ``g_e``; then

    dh[p_e] += g_e · W_{c_e},    dW_{c_e} += g_e · h[p_e],    db_{c_e} += g_e

as two sparse-dense products of the entries as a CSR matrix ``[B·L, V]`` (or with gathers and
``index_add_``), so the cost is O(nnz·H), not O(B·L·V·H). Accumulation in float32.
"""

from __future__ import annotations

import os
import warnings

import torch

#: Active entries processed per backward step (bounds the ``[n, H]`` gather buffers).
BACKWARD_CHUNK = 1 << 16


def grads_in_input_dtypes(
    grads: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None],
    dtypes: tuple[torch.dtype, torch.dtype, torch.dtype | None],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The float32 head gradients ``(d hidden, d weight, d bias)`` of :func:`sparse_products` cast to the
    dtypes their inputs had in the forward (``dtypes``: hidden's, weight's, bias's); None stays None."""
    return tuple(None if grad is None else grad.to(dtype) for grad, dtype in zip(grads, dtypes))


def sparse_products(
    g: torch.Tensor,
    positions: torch.Tensor,
    cols: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    need: tuple[bool, bool, bool],
    chunk: int = BACKWARD_CHUNK,
    method: str | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The gradients of a head from the gradients ``g`` of a set of its logits (distinct entries,
    module docstring).

    Args:
        g: ``[n]`` float32; positions, cols: ``[n]`` int64, distinct ``(position, col)`` pairs.
        hidden: ``[B, L, H]``; weight ``[V, H]``; need: whether the gradients of (hidden, weight, bias) are wanted; chunk: entries per gather
            step (``index_add``); method: ``"csr"`` (default) or ``"index_add"``, None reads ``SPLADEKIT_FUSED_BACKWARD``.

    Returns:
        ``(d hidden [B, L, H], d weight [V, H], d bias [V])`` float32, None where not needed.
    """
    batch, length, dim = hidden.shape
    vocab = weight.shape[0]
    need_h, need_w, need_b = need
    flat_h = hidden.reshape(batch * length, dim)
    d_hidden = d_weight = None
    method = method or os.environ.get("SPLADEKIT_FUSED_BACKWARD", "csr")
    if method == "csr":
        if need_h:  # [B·L, V] (nnz) @ [V, H]
            d_hidden = _csr(positions, cols, g, batch * length, vocab) @ weight.float()
        if need_w:  # [V, B·L] (nnz) @ [B·L, H]
            d_weight = _csr(cols, positions, g, vocab, batch * length) @ flat_h.float()
    elif method == "index_add":
        if need_h:
            d_hidden = torch.zeros(batch * length, dim, dtype=torch.float32, device=hidden.device)
        if need_w:
            d_weight = torch.zeros(vocab, dim, dtype=torch.float32, device=hidden.device)
        for lo in range(0, g.numel(), chunk):
            gi, ci, pi = g[lo : lo + chunk], cols[lo : lo + chunk], positions[lo : lo + chunk]
            if need_h:
                d_hidden.index_add_(0, pi, weight.index_select(0, ci).float() * gi[:, None])
            if need_w:
                d_weight.index_add_(0, ci, flat_h.index_select(0, pi).float() * gi[:, None])
    else:
        raise ValueError(f"unknown backward method {method!r}; choose 'csr' or 'index_add'")
    d_bias = torch.zeros(vocab, dtype=torch.float32, device=hidden.device).index_add_(0, cols, g) if need_b else None
    return (None if d_hidden is None else d_hidden.view(batch, length, dim)), d_weight, d_bias


def _csr(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, n_rows: int, n_cols: int) -> torch.Tensor:
    """A ``[n_rows, n_cols]`` sparse CSR matrix from COO triplets with distinct ``(row, col)`` pairs."""
    order = torch.argsort(rows * n_cols + cols)
    crow = torch.zeros(n_rows + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=n_rows).cumsum(0)
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, cols[order], values[order], size=(n_rows, n_cols))
