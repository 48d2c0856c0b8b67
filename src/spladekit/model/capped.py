"""SPLADE pooling of each position's ``k`` largest logits (``position_top_k``) without ``[B, L, V]``.

The rule (:mod:`spladekit.model.pooling`, the dense reference :func:`~spladekit.model.pooling.capped_logits`):
position ``t`` keeps ``logit[t, j] = h_t · W_j + b_j`` where it is at least ``τ_t``, the ``k``-th
largest logit of the position (ties at ``τ_t`` all kept); max pooling then takes
``m[b, j] = max`` over the real positions that keep ``j``, sum pooling ``Σ a(logit)`` over them.

How ``τ_t`` and the kept entries are found, vocabulary chunk by chunk (never more than one
``[N, Vc]`` chunk of logits, ``N`` the real tokens of the batch, padding never computed):

1. **A running top-(k+1) merged per chunk.** For each chunk ``[lo, hi)`` the logits
   ``[N, Vc]`` are formed (``F.linear``, input dtype, as the plain head). The first chunk's ``k + 1``
   largest per token are taken (``torch.topk``); each later chunk is compared with the ``(k+1)``-th
   value a token holds, and only the logits above it (few, and fewer as chunks go by) are merged
   with the held ones (a ``topk`` of each such token's candidates). After the last chunk each token
   holds its ``k + 1`` largest logits over the whole vocabulary and their columns: ``τ_t`` is the ``k``-th.
2. **Ties.** When the ``(k+1)``-th equals ``τ_t`` at no token, the ``k`` entries held are exactly
   those ``≥ τ_t`` (every other logit is ``≤`` the ``(k+1)``-th ``< τ_t``), and they are the kept
   entries: one product pass in all. When some token has a tie at ``τ_t`` (exact ties: bf16 logits,
   duplicated decoder rows), a second pass recomputes each chunk's logits with the same call on the
   same slices (the same values bit for bit, as a deterministic product of the same shapes gives)
   and keeps every entry ``≥ τ_t``.

The kept entries are ``(token, column, logit)`` triplets, O(N·k); the pooling reads them only:
max pooling by a scatter-max into ``m`` ``[B, V]`` (float32) and the first position reaching it
(``t*``, the tie rule of :mod:`spladekit.model.fused`), so the fused head's backward applies as it
is (each active ``m[b, j]`` is one kept logit); sum pooling by a scatter-add of ``a(logit)``, with
its own backward through the saved triplets (:class:`CappedSumHead`).

Cost against the uncapped fused head: the same one product pass (two under ties), plus a comparison
of each ``[N, Vc]`` chunk with the held threshold (a pass over the logits, as the uncapped max) and
the merges of the few logits above it. ``benchmarks/capped_head.py`` measures both heads in one run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from spladekit.model.pooling import splade_activation, splade_activation_derivative
from spladekit.model.sparse_backward import grads_in_input_dtypes, sparse_products

#: Bytes of logits a capped chunk ``[N, Vc]`` may hold, per device type (a ``topk`` per chunk
#: amortises better over wider chunks than the uncapped max's cache-sized CPU chunks).
CHUNK_BUDGET_BYTES = {"cuda": 512 * 2**20, "cpu": 4 * 2**20}


@dataclass
class KeptEntries:
    """The logits a cap keeps: entry ``e`` is ``logit[rows[e], positions[e], cols[e]] = values[e]``.

    Attributes:
        rows, positions, cols: int64 ``[n]``; values: ``[n]`` in the input dtype.
        batch, length, vocab: ``B``, ``L``, ``V`` of the head's inputs.
    """

    rows: torch.Tensor
    positions: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    batch: int
    length: int
    vocab: int


def _chunk(tokens: int, vocab: int, element_bytes: int, device_type: str) -> int:
    budget = CHUNK_BUDGET_BYTES.get(device_type, CHUNK_BUDGET_BYTES["cuda"])
    cols = budget // max(1, tokens * element_bytes)
    return int(min(vocab, max(32, (cols // 32) * 32)))


@torch.no_grad()
def kept_entries(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    chunk: int | None = None,
) -> KeptEntries:
    """The entries each real position keeps under ``position_top_k = k`` (module docstring).

    Args:
        hidden: ``[B, L, H]``; weight ``[V, H]``; bias ``[V]`` or None, one dtype.
        attention_mask: ``[B, L]``, non-zero for real tokens (padding keeps nothing).
        k: the cap, ``1 ≤ k < V``.
        chunk: vocabulary columns per chunk (None: from :data:`CHUNK_BUDGET_BYTES`).

    Returns:
        :class:`KeptEntries`, token-major.
    """
    batch, length, _ = hidden.shape
    vocab = weight.shape[0]
    if not 1 <= k < vocab:
        raise ValueError(f"kept_entries needs 1 ≤ k < V = {vocab}, got {k}")
    where = torch.nonzero(attention_mask.to(torch.bool))  # [N, 2] (row, position)
    tokens = hidden[attention_mask.to(torch.bool)]  # [N, H]
    n = tokens.shape[0]
    empty = torch.zeros(0, dtype=torch.long, device=hidden.device)
    if n == 0:
        return KeptEntries(empty, empty, empty, tokens.new_zeros(0), batch, length, vocab)
    chunk = chunk or _chunk(n, vocab, tokens.element_size(), tokens.device.type)
    spans = [(lo, min(vocab, lo + chunk)) for lo in range(0, vocab, chunk)]

    def logits(lo: int, hi: int) -> torch.Tensor:  # the one call both passes make (bitwise the same values)
        return torch.nn.functional.linear(tokens, weight[lo:hi], None if bias is None else bias[lo:hi])

    values, cols = _running_top(logits, spans, k + 1)
    threshold = values[:, k - 1]
    if bool((values[:, k] == threshold).any()):  # ties at τ: keep every entry ≥ τ (second pass)
        token, cols, values = _at_least(logits, spans, threshold)
    else:
        token = torch.arange(n, device=hidden.device).repeat_interleave(k)
        cols, values = cols[:, :k].reshape(-1), values[:, :k].reshape(-1)
    return KeptEntries(where[token, 0], where[token, 1], cols, values, batch, length, vocab)


def _running_top(logits, spans, kk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``kk`` largest logits of each token over all ``spans`` and their columns, ``[N, kk]`` each
    (values in descending order).

    Once a token holds ``kk`` values, a later chunk can change them only by a logit above the
    ``kk``-th held (``τ_run``; an equal one changes no value), so each later chunk is compared with
    ``τ_run`` and only the logits above it (few: their expected number falls as ``kk·Vc/V_seen``) are
    merged; the chunks before that are merged whole (``topk`` of the chunk, then of the candidates).
    """
    run_v = run_i = None
    for lo, hi in spans:
        chunk = logits(lo, hi)
        if run_v is None or run_v.shape[1] < kk:  # the first chunk(s): whole
            top = chunk.topk(min(kk, hi - lo), dim=1)
            cand_v, cand_i = top.values, top.indices + lo
            if run_v is not None:
                cand_v, cand_i = torch.cat([run_v, cand_v], dim=1), torch.cat([run_i, cand_i], dim=1)
            top = cand_v.topk(min(kk, cand_v.shape[1]), dim=1)
            run_v, run_i = top.values, cand_i.gather(1, top.indices)
            continue
        token, col = torch.nonzero(chunk > run_v[:, -1:], as_tuple=True)  # row-major: grouped by token
        if token.numel():
            run_v, run_i = _merge_above(run_v, run_i, token, col, chunk[token, col], lo, kk)
    return run_v, run_i


def _merge_above(run_v, run_i, token, col, value, lo: int, kk: int):
    """Merge the logits ``value`` (at ``(token, lo + col)``, grouped by token) into the held top-``kk``
    of their tokens: each token's candidates padded to one width with ``-inf``, then a ``topk``."""
    rows, counts = torch.unique_consecutive(token, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(token.numel(), device=token.device) - torch.repeat_interleave(starts, counts)
    which = torch.repeat_interleave(torch.arange(rows.numel(), device=token.device), counts)
    width = int(counts.max())
    pad_v = torch.full((rows.numel(), width), float("-inf"), dtype=run_v.dtype, device=run_v.device)
    pad_i = torch.zeros((rows.numel(), width), dtype=run_i.dtype, device=run_i.device)
    pad_v[which, slot], pad_i[which, slot] = value, col + lo
    cand_v, cand_i = torch.cat([run_v[rows], pad_v], dim=1), torch.cat([run_i[rows], pad_i], dim=1)
    top = cand_v.topk(kk, dim=1)
    run_v, run_i = run_v.clone(), run_i.clone()
    run_v[rows], run_i[rows] = top.values, cand_i.gather(1, top.indices)
    return run_v, run_i


def _at_least(logits, spans, threshold: torch.Tensor):
    """Every ``(token, column, logit)`` with ``logit ≥ threshold[token]``, over all ``spans``."""
    parts = []
    for lo, hi in spans:
        chunk = logits(lo, hi)
        token, col = torch.nonzero(chunk >= threshold[:, None], as_tuple=True)
        parts.append((token, col + lo, chunk[token, col]))
    return tuple(torch.cat(p) for p in zip(*parts))


def entries_max(entries: KeptEntries) -> tuple[torch.Tensor, torch.Tensor]:
    """Max pooling of the kept entries: ``m`` ``[B, V]`` float32 (``-inf`` where nothing is kept) and
    ``t*`` ``[B, V]`` int32, the first position reaching ``m`` (0 where nothing is kept)."""
    batch, vocab, device = entries.batch, entries.vocab, entries.values.device
    key = entries.rows * vocab + entries.cols
    x = entries.values.float()
    maxval = torch.full((batch * vocab,), float("-inf"), dtype=torch.float32, device=device)
    maxval.scatter_reduce_(0, key, x, "amax")
    hit = x == maxval[key]
    argmax = torch.full((batch * vocab,), entries.length, dtype=torch.long, device=device)
    argmax.scatter_reduce_(0, key[hit], entries.positions[hit], "amin")
    argmax[argmax == entries.length] = 0
    return maxval.view(batch, vocab), argmax.view(batch, vocab).to(torch.int32)


def _entries_sum(entries: KeptEntries, activation: str) -> torch.Tensor:
    """``[B, V]`` float32: ``Σ a(logit)`` of the kept entries of each ``(b, j)``."""
    key = entries.rows * entries.vocab + entries.cols
    out = torch.zeros(entries.batch * entries.vocab, dtype=torch.float32, device=entries.values.device)
    out.index_add_(0, key, splade_activation(entries.values, activation))
    return out.view(entries.batch, entries.vocab)


class CappedSumHead(torch.autograd.Function):
    """Sum pooling of the kept entries, ``w[b, j] = Σ_{kept (b, t, j)} a(logit)``; use :func:`capped_sum_head`.

    Backward, with ``g_e = grad_w[b, j] · a'(logit_e)`` per kept entry ``e = (b, t, j)``:
    ``dh[b, t] += g_e · W_j``, ``dW_j += g_e · h[b, t]``, ``db_j += g_e``, as two sparse-dense products
    (:func:`spladekit.model.sparse_backward.sparse_products`), O(N·k·H); float32, cast to the input dtypes.
    """

    @staticmethod
    def forward(ctx, hidden, attention_mask, weight, bias, activation, k):
        entries = kept_entries(hidden, attention_mask, weight, bias, k)
        ctx.save_for_backward(hidden, weight, entries.rows, entries.positions, entries.cols, entries.values)
        ctx.activation, ctx.has_bias = activation, bias is not None
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        return _entries_sum(entries, activation)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_w):
        hidden, weight, rows, positions, cols, values = ctx.saved_tensors
        need_h, _, need_w, need_b, _, _ = ctx.needs_input_grad
        g = grad_w.float()[rows, cols] * splade_activation_derivative(values, ctx.activation)
        nz = g != 0  # only entries that carry gradient enter the products
        g, rows, positions, cols = g[nz], rows[nz], positions[nz], cols[nz]
        with torch.autocast(hidden.device.type, enabled=False):
            grads = sparse_products(
                g, rows * hidden.shape[1] + positions, cols, hidden, weight, (need_h, need_w, need_b and ctx.has_bias)
            )
        d_h, d_w, d_b = grads_in_input_dtypes(grads, ctx.dtypes)
        return d_h, None, d_w, d_b, None, None


def capped_sum_head(hidden, attention_mask, weight, bias, activation: str, k: int) -> torch.Tensor:
    """``[B, V]`` float32 sum pooling of each position's ``k`` largest logits (inputs already cast by
    :func:`spladekit.model.fused.head_inputs`; ``1 ≤ k < V``)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias)):
        return CappedSumHead.apply(hidden, attention_mask, weight, bias, activation, k)
    return _entries_sum(kept_entries(hidden, attention_mask, weight, bias, k), activation)
