"""The fused SPLADE head: SPLADE max pooling without a ``[B, L, V]`` tensor.

SPLADE (Formal et al., "SPLADE v2", arXiv 2109.10086, eq. 2) reads the MLM logits
``logit[b, t, j] = h[b, t] · W_j + b_j`` and pools

    w[b, j] = max_{t : mask[b, t] = 1} log(1 + ReLU(logit[b, t, j]))
            = log(1 + ReLU(m[b, j])),   m[b, j] = max_{t : mask[b, t] = 1} logit[b, t, j]

(``log1p ∘ ReLU`` is non-decreasing, so the max moves inside). The plain head
(:func:`spladekit.model.pooling.plain_splade_head`) materialises all logits, their masked float32
copy and, in training, their gradient: O(B·L·V) memory. This head keeps only what the output and
its gradient need:

Forward
    the masked max ``m`` ``[B, V]`` (float32) and its position ``t*[b, j]`` ``[B, V]`` (int32),
    computed over vocabulary chunks (chunked torch, any device) or by a Triton kernel that fuses the
    matmul with the masked-max epilogue (:mod:`spladekit.model.triton_head`, CUDA).

Backward
    ``∂w/∂m = 1/(1 + m)`` where ``m > 0`` and 0 elsewhere (ReLU's derivative at 0 is 0, as in
    torch). Only the *active* entries (``m > 0``, non-zero incoming gradient) carry gradient, and
    each reaches exactly one logit, ``logit[b, t*, j]``. With ``g = grad_w[b, j] / (1 + m[b, j])``:

        dW_j        += g · h[b, t*]
        dh[b, t*]   += g · W_j
        db_j        += g

    done as two sparse-dense products with the nnz active entries as a CSR matrix ``[B·L, V]``
    (or with gathers and ``index_add_``), so the cost is O(nnz·H), not O(B·L·V·H). Accumulation is
    in float32; gradients are cast to the input dtypes.

Activation ``"log1p_relu"`` (OpenSearch v3 document models, arXiv 2504.14839):
    ``w = log(1 + log(1 + ReLU(m)))`` is also non-decreasing in each logit, so the max still moves
    inside and the forward is the same masked max, followed by the second ``log1p``. By the chain
    rule, with ``u = log(1 + m)``, ``∂w/∂m = 1/(1 + u) · 1/(1 + m)`` where ``m > 0`` (0 elsewhere):
    the backward divides the incoming gradient by ``1 + log(1 + m)`` and goes on as for ``"relu"``
    (:func:`sparse_head_backward` applies the ``1/(1 + m)``).

Sum pooling (SPLADE v1) is not a max and has no single position per entry: its fused head is
:mod:`spladekit.model.fused_sum`.

A cap on each position's expansion (``position_top_k``): the forward's ``m`` and ``t*`` come from
the logits each position keeps, found chunk by chunk by a running top-(k+1) merged per chunk
(:mod:`spladekit.model.capped`); every active ``m`` is one kept logit, so the backward is the same.

Ties: when several positions reach the maximum, the gradient goes to the first (lowest ``t``),
which is what ``torch.max(dim=...)`` documents and what the Triton kernel does.

Mixed precision: under ``torch.autocast`` the hidden states, weight and bias are cast to the
autocast dtype before the head, exactly as ``F.linear`` would in the plain head (so the cast's
gradient flows back to the float32 parameters through autograd).
"""

from __future__ import annotations

import os
import warnings

import torch

from spladekit.model.pooling import check_position_top_k, splade_activation
from spladekit.model.sparse_backward import BACKWARD_CHUNK, grads_in_input_dtypes, sparse_products

#: Bytes of logits a torch-path chunk may hold, per device type (CUDA: large tiles, CPU: cache-sized,
#: see :func:`_cpu_chunk`).
CHUNK_BUDGET_BYTES = {"cuda": 512 * 2**20, "cpu": 2**20}

_BACKENDS = ("auto", "torch", "triton")


def _chunk_size(batch: int, length: int, vocab: int, element_bytes: int, device_type: str) -> int:
    """Vocabulary columns per chunk so that a ``[B, L, Vc]`` logits chunk fits the budget."""
    budget = CHUNK_BUDGET_BYTES.get(device_type, CHUNK_BUDGET_BYTES["cuda"])
    cols = budget // max(1, batch * length * element_bytes)
    cols = max(32, (cols // 32) * 32)
    return int(min(vocab, cols))


def _token_span(attention_mask: torch.Tensor) -> tuple[int, int]:
    """First and one-past-last column that holds a real token in any row (for trimming padding)."""
    any_real = attention_mask.to(torch.bool).any(dim=0)
    if not bool(any_real.any()):
        return 0, 0
    idx = torch.nonzero(any_real).flatten()
    return int(idx[0]), int(idx[-1]) + 1


def _torch_masked_max(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    with_argmax: bool,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Masked max of the logits over positions, computed over vocabulary chunks (pure torch).

    Args:
        hidden: ``[B, L, H]``; weight ``[V, H]``; bias ``[V]`` or None, all of one dtype.
        attention_mask: ``[B, L]`` (non-zero = real token).
        with_argmax: also return the position of each max.
        chunk: vocabulary columns per chunk (None: from :data:`CHUNK_BUDGET_BYTES`).

    Returns:
        ``m`` ``[B, V]`` float32 (``-inf`` for a row without real tokens) and, when asked,
        ``t*`` ``[B, V]`` int32 (first position of the max; 0 for a row without real tokens).
        Logits are rounded to the input dtype before the max, as in the plain head.
    """
    batch, _, _ = hidden.shape
    vocab = weight.shape[0]
    start, end = _token_span(attention_mask)
    maxval = torch.full((batch, vocab), float("-inf"), dtype=torch.float32, device=hidden.device)
    argmax = torch.zeros((batch, vocab), dtype=torch.int32, device=hidden.device) if with_argmax else None
    if end == start:
        return maxval, argmax
    h = hidden[:, start:end]
    pad = ~attention_mask[:, start:end].to(torch.bool).unsqueeze(-1)  # [B, L', 1]
    has_pad = bool(pad.any())
    length = end - start
    chunk = chunk or _chunk_size(batch, length, vocab, h.element_size(), h.device.type)
    for lo in range(0, vocab, chunk):
        hi = min(vocab, lo + chunk)
        logits = torch.nn.functional.linear(h, weight[lo:hi], None if bias is None else bias[lo:hi])
        if has_pad:
            logits.masked_fill_(pad, float("-inf"))
        if with_argmax:
            values, index = logits.max(dim=1)
            argmax[:, lo:hi] = index.to(torch.int32) + start
        else:
            values = logits.amax(dim=1)
        maxval[:, lo:hi] = values
    return maxval, argmax


def _cpu_chunk(tokens: int, vocab: int, element_bytes: int) -> int:
    """Vocabulary columns per CPU product ``[n, H] @ [H, Vc]`` (``n`` real tokens of one row or group of rows).

    The ``[n, Vc]`` logits of one product are read again at once by the max; keeping them within
    :data:`CHUNK_BUDGET_BYTES` (1 MiB, half of a 2 MiB per-core L2 cache) keeps that read in cache.
    Short inputs (a query) get the whole vocabulary in one product (the plain head's single product,
    without its masked copy), which ran faster than chunks of it. At least 32 columns, a multiple of
    32. The speeds behind the rule: ``benchmarks/runs/2026-12-07-source-notes.md``.
    """
    cols = CHUNK_BUDGET_BYTES["cpu"] // max(1, tokens * element_bytes)
    cols = max(32, (cols // 32) * 32)
    return int(min(vocab, cols))


GROUP_TOKENS = 256
"""Real tokens at most per CPU product when rows are short (see :func:`_row_groups`)."""


def _row_groups(rows: list[int], counts: list[int], limit: int = GROUP_TOKENS) -> list[list[int]]:
    """Consecutive ``rows`` in groups of at most ``limit`` real tokens (a longer row alone).

    A group's tokens, contiguous in the packed ``[N, H]`` matrix, share one product per vocabulary
    chunk, so short rows (queries) do not each read the whole ``[V, H]`` decoder weight
    (``benchmarks/query_encoding.py``'s "row by row" case sets :data:`GROUP_TOKENS` to 1; its figures:
    ``benchmarks/runs/2026-12-02-serve.md``, run 6). Past ~256 tokens a product is already large
    enough, so longer rows stay alone (``benchmarks/runs/2026-12-07-source-notes.md``). The grouping depends on the rows' token counts only (never on the thread count), so each row's products are the same
    whatever ``threads``.
    """
    groups: list[list[int]] = []
    tokens = 0
    for row in rows:
        n = counts[row]
        if groups and tokens + n <= limit:
            groups[-1].append(row)
            tokens += n
        else:
            groups.append([row])
            tokens = n
    return groups


@torch.no_grad()  # grad mode is per thread: workers start with it on; the backward is FusedSpladeHead's own
def _group_span_max(tokens, positions, bounds, weight, bias, lo, hi, chunk, maxval_rows, argmax_rows) -> None:
    """Masked max of a group of rows over the vocabulary columns ``[lo, hi)``, into their output rows.

    ``tokens`` ``[N, H]`` are the group's real tokens only (its rows one after the other, no mask
    needed), ``positions`` ``[N]`` their positions in the padded rows (for the argmax) and
    ``bounds`` the ``len(rows) + 1`` offsets of each row's tokens in ``tokens``. One product of
    ``chunk`` columns for the whole group, ``[N, H] @ [H, chunk]``, then each row's max over its
    own ``[n_b, chunk]`` slice, written straight into its ``[V]`` output row (views, so threads
    working on other groups or spans never share an element).
    """
    direct = maxval_rows[0].dtype == tokens.dtype
    spans = list(zip(bounds[:-1], bounds[1:]))
    for c0 in range(lo, hi, chunk):
        c1 = min(hi, c0 + chunk)
        logits = torch.nn.functional.linear(tokens, weight[c0:c1], None if bias is None else bias[c0:c1])
        for r, (a, b) in enumerate(spans):
            part = logits[a:b]
            if argmax_rows is not None:
                values, index = part.max(dim=0)  # first maximal position, as torch.max documents
                maxval_rows[r][c0:c1] = values
                argmax_rows[r][c0:c1] = positions[a:b][index]
            elif direct:
                torch.amax(part, dim=0, out=maxval_rows[r][c0:c1])
            else:
                maxval_rows[r][c0:c1] = part.amax(dim=0)


def _packed_masked_max(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    with_argmax: bool,
    chunk: int | None = None,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU path: the masked max computed on real tokens only, in work units shared by threads.

    The rows' real tokens are packed into ``[N, H]`` (padding costs nothing); consecutive short rows
    form groups of at most :data:`GROUP_TOKENS` tokens (:func:`_row_groups`) whose tokens are
    multiplied together with cache-sized vocabulary chunks (:func:`_cpu_chunk` of the group's
    tokens), each row then taking the max over its own tokens. The work is cut into units (a group,
    or a span of a group's vocabulary when there are fewer groups than ``4 × threads``) that
    ``threads`` worker threads take one at a time from a shared queue, each unit computed with
    single-threaded torch products (:mod:`spladekit.model.cpu_pool`). So there is one parallel
    region per call, not one per product: a worker that the operating system deschedules (a busy
    machine) delays only the unit it holds while the others take the remaining units, instead of
    stalling every product of an intra-op parallel region. ``threads`` None:
    ``torch.get_num_threads()`` of the caller; 1 runs inline.

    Same returns and tie rule (first position) as :func:`_torch_masked_max`: ``m`` ``[B, V]``
    float32 (``-inf`` for a row without real tokens) and, when asked, ``t*`` ``[B, V]`` int32.
    Whatever ``threads``, each unit is the same sequence of products (groups and chunk boundaries do
    not depend on it). A row's values may differ in the last bits with the other rows of its batch
    (its group's product has another shape: float32 rounding of another kernel, within the bound of
    ``tests/model/test_cpu_pool.py``).
    """
    from spladekit.model.cpu_pool import run_units

    batch, vocab = hidden.shape[0], weight.shape[0]
    real = attention_mask.to(torch.bool)
    maxval = torch.full((batch, vocab), float("-inf"), dtype=torch.float32, device=hidden.device)
    argmax = torch.zeros((batch, vocab), dtype=torch.int32, device=hidden.device) if with_argmax else None
    counts = real.sum(dim=1).tolist() if batch else []
    rows = [row for row in range(batch) if counts[row]]
    if not rows:
        return maxval, argmax
    threads = max(1, int(threads or torch.get_num_threads()))
    where = torch.nonzero(real)  # [N, 2] (row, position), row-major: the order of hidden[real]
    packed = hidden[real]  # [N, H] real tokens of every row, concatenated
    positions = where[:, 1].to(torch.int32)
    offsets = [0]
    for n in counts:
        offsets.append(offsets[-1] + n)
    groups = _row_groups(rows, counts, GROUP_TOKENS)  # read at call time (benchmarks set it to 1: row by row)
    spans = max(1, -(-4 * threads // len(groups))) if threads > 1 else 1
    units = []
    for group in groups:
        cols = chunk or _cpu_chunk(sum(counts[row] for row in group), vocab, hidden.element_size())
        step = -(-vocab // spans)
        step = -(-step // cols) * cols  # whole chunks per span
        for lo in range(0, vocab, step):
            units.append((group, lo, min(vocab, lo + step), cols))

    def work(unit):
        group, lo, hi, cols = unit
        a, b = offsets[group[0]], offsets[group[-1] + 1]  # the group's rows are consecutive among the real ones
        bounds = [offsets[row] - a for row in group] + [b - a]
        _group_span_max(
            packed[a:b],
            positions[a:b],
            bounds,
            weight,
            bias,
            lo,
            hi,
            cols,
            [maxval[row] for row in group],
            None if argmax is None else [argmax[row] for row in group],
        )

    run_units(work, units, threads)
    return maxval, argmax


def _masked_max(
    hidden, attention_mask, weight, bias, with_argmax: bool, backend: str, position_top_k: int | None = None
):
    """Dispatch the forward to the capped search, the Triton kernel or the chunked-torch path (see
    :func:`fused_splade_head`)."""
    if position_top_k is not None and position_top_k < weight.shape[0]:
        from spladekit.model.capped import entries_max, kept_entries

        if backend == "triton":
            raise ValueError(
                f"position_top_k={position_top_k}: the Triton kernel has no per-position cap (it "
                "keeps a running max, not a running top-k); use backend='auto' or 'torch', which run the "
                "capped search chunk by chunk (spladekit.model.capped) on any device"
            )
        maxval, argmax = entries_max(kept_entries(hidden, attention_mask, weight, bias, position_top_k))
        return maxval, (argmax if with_argmax else None)
    if backend == "triton":
        from spladekit.model.triton_head import triton_masked_max

        return triton_masked_max(hidden, attention_mask, weight, bias, with_argmax=with_argmax)
    if backend == "auto" and _kernel_device(hidden) and _triton_ok():
        from spladekit.model.triton_check import kernel_verified

        # first use on this device (and dtype): the kernel against the torch path; False: it warned once
        if kernel_verified(hidden, attention_mask, weight, bias, with_argmax, _torch_masked_max, sparse_head_backward):
            from spladekit.model.triton_head import triton_masked_max

            try:
                return triton_masked_max(hidden, attention_mask, weight, bias, with_argmax=with_argmax)
            except Exception as error:  # a GPU or dtype the kernel cannot compile for: say so, use torch
                global _TRITON_FAILED
                _TRITON_FAILED = True
                warnings.warn(
                    f"fused SPLADE head: Triton kernel failed ({error!r}); using the chunked-torch path",
                    RuntimeWarning,
                    stacklevel=2,
                )
    if hidden.device.type == "cpu":
        return _packed_masked_max(hidden, attention_mask, weight, bias, with_argmax)
    return _torch_masked_max(hidden, attention_mask, weight, bias, with_argmax)


_TRITON_FAILED = False


def _kernel_device(hidden: torch.Tensor) -> bool:
    """Whether ``"auto"`` runs the Triton kernel on ``hidden``'s device: CUDA, or the CPU under
    ``TRITON_INTERPRET=1`` (Triton's interpreter: the tests' stand-in for a GPU; triton is only
    imported when the variable is set)."""
    if hidden.is_cuda:
        return True
    if hidden.device.type != "cpu" or os.environ.get("TRITON_INTERPRET", "0") in ("", "0") or not _triton_ok():
        return False
    from spladekit.model.triton_head import interpreting

    return interpreting()


def _triton_ok() -> bool:
    """Whether the Triton kernel can be used for CUDA tensors (importable, not disabled, not failed)."""
    if _TRITON_FAILED or os.environ.get("SPLADEKIT_NO_TRITON", "") not in ("", "0"):
        return False
    try:
        import spladekit.model.triton_head  # noqa: F401
    except ImportError:
        return False
    return True


def sparse_head_backward(
    grad_w: torch.Tensor,
    maxval: torch.Tensor,
    argmax: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    need: tuple[bool, bool, bool],
    chunk: int = BACKWARD_CHUNK,
    method: str | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Gradients of the fused head through its active entries only (module docstring, "Backward").

    Args:
        grad_w: ``[B, V]`` gradient of the loss w.r.t. the SPLADE weights.
        maxval: ``[B, V]`` float32 masked max of the logits; argmax ``[B, V]`` its position.
        hidden: ``[B, L, H]``; weight ``[V, H]``.
        need: whether the gradients of (hidden, weight, bias) are wanted.
        chunk: active entries per gather step (``index_add`` method).
        method: ``"csr"`` (default; the active entries as a sparse CSR matrix ``G`` ``[B·L, V]``,
            ``dh = G @ W`` and ``dW = Gᵀ @ h`` by sparse-dense products) or ``"index_add"``
            (gather rows, scale, ``index_add_``); None reads ``SPLADEKIT_FUSED_BACKWARD``.

    Returns:
        ``(d hidden [B, L, H], d weight [V, H], d bias [V] float32)`` (None where not needed), float32.
        Cost O(nnz·H) with nnz = number of active entries with a non-zero gradient.
    """
    length = hidden.shape[1]
    scale = grad_w.float() / (1.0 + maxval.clamp_min(0.0))
    scale = torch.where(maxval > 0, scale, torch.zeros_like(scale))
    rows, cols = torch.nonzero(scale, as_tuple=True)
    g = scale[rows, cols]
    positions = rows * length + argmax[rows, cols].long()  # row of hidden.view(B*L, H)
    return sparse_products(g, positions, cols, hidden, weight, need, chunk, method)


class FusedSpladeHead(torch.autograd.Function):
    """Autograd function of the fused head; use :func:`fused_splade_head`.

    ``forward(hidden, attention_mask, weight, bias, backend, activation, position_top_k) → [B, V] float32``.
    Saves ``hidden``, ``weight`` (references, no copies), ``m`` and ``t*`` (``[B, V]`` each) for the
    backward; with a cap, ``m`` and ``t*`` are those of the kept logits (:mod:`spladekit.model.capped`),
    so the backward is the same.
    """

    @staticmethod
    def forward(ctx, hidden, attention_mask, weight, bias, backend, activation="relu", position_top_k=None):
        maxval, argmax = _masked_max(hidden, attention_mask, weight, bias, True, backend, position_top_k)
        ctx.save_for_backward(hidden, weight, maxval, argmax)
        ctx.has_bias = bias is not None
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.activation = activation
        return splade_activation(maxval, activation)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_w):
        hidden, weight, maxval, argmax = ctx.saved_tensors
        need_h, _, need_w, need_b = ctx.needs_input_grad[:4]
        if ctx.activation == "log1p_relu":  # ∂w/∂m = 1/(1 + log(1 + m)) · 1/(1 + m): the first factor here
            grad_w = grad_w.float() / (1.0 + torch.log1p(maxval.clamp_min(0.0)))
        with torch.autocast(hidden.device.type, enabled=False):  # float32 products, even inside autocast
            grads = sparse_head_backward(
                grad_w, maxval, argmax, hidden, weight, (need_h, need_w, need_b and ctx.has_bias)
            )
        d_h, d_w, d_b = grads_in_input_dtypes(grads, ctx.dtypes)
        return d_h, None, d_w, d_b, None, None, None


def head_inputs(hidden: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """Check the shapes of a fused head's inputs and cast them to one dtype: the autocast dtype under
    ``torch.autocast`` (as ``F.linear`` in the plain head would), else the promoted input dtype.

    Returns:
        ``(hidden, weight, bias, wants_grad)``; ``wants_grad``: autograd is on and an input needs a gradient.

    Raises:
        ValueError: shapes that do not agree.
    """
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"hidden must be [B, L, H] and attention_mask [B, L]; got {tuple(hidden.shape)} and {tuple(attention_mask.shape)}"
        )
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"weight must be [V, H={hidden.shape[2]}]; got {tuple(weight.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must be [V={weight.shape[0]}]; got {tuple(bias.shape)}")
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
    else:
        dtype = torch.promote_types(hidden.dtype, weight.dtype)
    hidden, weight = hidden.to(dtype), weight.to(dtype)
    bias = None if bias is None else bias.to(dtype)
    wants_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return hidden, weight, bias, wants_grad


def fused_splade_head(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    backend: str = "auto",
    activation: str = "relu",
    position_top_k: int | None = None,
) -> torch.Tensor:
    """SPLADE head ``w[b, j] = a(max_t h[b,t]·W_j + b_j)`` without ``[B, L, V]`` tensors.

    Same contract as :func:`spladekit.model.pooling.plain_splade_head` (SPLADE v2, Formal et al.
    2021, eq. 2; see the module docstring for the forward/backward scheme and the tie rule).

    Args:
        hidden: ``[B, L, H]`` transformed hidden states.
        attention_mask: ``[B, L]``, non-zero for real tokens; padding never contributes and a row
            without real tokens gives zeros.
        weight: decoder weight ``[V, H]``.
        bias: decoder bias ``[V]`` or None.
        backend: ``"auto"`` (Triton kernel for CUDA tensors, and CPU tensors under
            ``TRITON_INTERPRET=1``, when triton imports and ``SPLADEKIT_NO_TRITON`` is unset, after
            its first-use check on the device, :mod:`spladekit.model.triton_check`; chunked torch
            otherwise), ``"torch"`` or ``"triton"`` (the kernel, unchecked;
            CUDA tensors, or CPU tensors when ``TRITON_INTERPRET=1`` was set before triton's
            import: Triton's interpreter, slow, for tests).
        activation: ``"relu"`` (``a(m) = log(1 + ReLU(m))``) or ``"log1p_relu"``
            (``a(m) = log(1 + log(1 + ReLU(m)))``), see the module docstring.
        position_top_k: pool only each position's ``k`` largest logits (the rule of
            :mod:`spladekit.model.pooling`; found chunk by chunk by a running top-(k+1),
            :mod:`spladekit.model.capped`, on every device: the Triton kernel has no cap, so
            ``"auto"`` runs the capped search in torch and ``"triton"`` refuses it); None: all.

    Returns:
        ``[B, V]`` float32 weights ≥ 0. Memory: O(B·V) plus one logits chunk (forward) and
        O(nnz·H) (backward); with a cap also O(N·k) kept entries (``N`` real tokens).

    Raises:
        ValueError: shapes that do not agree, an unknown backend or activation, a ``position_top_k``
            that is not None or ≥ 1, or one with ``backend="triton"``.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"unknown fused-head backend {backend!r}; choose one of {_BACKENDS}")
    if activation not in ("relu", "log1p_relu"):
        raise ValueError(f"unknown SPLADE activation {activation!r}; choose 'relu' or 'log1p_relu'")
    check_position_top_k(position_top_k)
    hidden, weight, bias, wants_grad = head_inputs(hidden, attention_mask, weight, bias)
    with torch.autocast(hidden.device.type, enabled=False):
        if not wants_grad:
            maxval, _ = _masked_max(hidden, attention_mask, weight, bias, False, backend, position_top_k)
            return splade_activation(maxval, activation)
        return FusedSpladeHead.apply(hidden, attention_mask, weight, bias, backend, activation, position_top_k)
