"""Gradient caching for SPLADE training: a large in-batch pool at the memory of a mini-batch.

Gao, Zhang, Han and Callan 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" (GradCache, §3), as sentence-transformers' ``CachedSpladeLoss`` /
``CachedMultipleNegativesRankingLoss`` do it. The loss ``L(v)`` of a batch depends on the network
parameters θ only through the pooled SPLADE vectors ``v = (q, d)`` (``[B, V]`` and ``[B·G, V]``), and
the vectors of different examples are computed independently, so with mini-batches ``k``:

    ∂L/∂θ = Σ_k (∂v_k/∂θ)ᵀ · g_k,        g = ∂L/∂v   (chain rule)

One step, per process:

1. every mini-batch is encoded **without a graph** (``torch.no_grad``), after saving the CPU and
   CUDA random states (:class:`RandomState`);
2. the vectors are concatenated (and gathered over processes by the caller's ``loss_fn``), the
   ranking loss and the FLOPS/L1 regulariser are computed on the whole batch, and ``backward``
   stops at the vectors: ``g`` is cached (``[B, V]`` + ``[B·G, V]`` float32);
3. each mini-batch is encoded again, **with** a graph, from its saved random state (so dropout
   draws the same masks as in step 1), and ``torch.autograd.backward(v_k, g_k)`` adds its share to
   the parameter gradients; the graph of one mini-batch is freed before the next.

Peak memory: one mini-batch's graph plus the batch's vectors and their gradient (O(B·G·V), not
O(B·G·L·H·layers)); time: one extra forward of every mini-batch. Mixed precision: the
encoder runs under autocast in both passes and the vectors are float32; with a ``GradScaler`` the
scaled loss is back-propagated, so ``g`` and all parameter gradients carry the scale, which the
loop unscales once. Gradient accumulation (``grad_accum``) and caching combine: the per-process
share is cut at the accumulation boundaries and then every ``mini_batch_size`` examples
(:func:`mini_batch_bounds`); the loss is still that of the whole global batch. DDP: ``loss_fn``
gathers the vectors with their gradient (:func:`spladekit.train.distributed.gather_with_grad`), whose
backward hands each process the gradient of its own vectors; the replay needs no communication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(CPU RNG state, CUDA RNG state of device or None)``: what dropout on ``device`` draws from."""
    return (torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


def set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    """Restore a state from :func:`rng_state`."""
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class RandomState:
    """The random state before a mini-batch's first encoding; ``with state:`` replays it (GradCache's
    ``RandContext``). On exit the state from before the ``with`` is back, so the stream after the
    replays is the one after the first pass."""

    def __init__(self, device: torch.device):
        self.device = device
        self.saved = rng_state(device)

    def __enter__(self) -> RandomState:
        self._outside = rng_state(self.device)
        set_rng_state(self.saved, self.device)
        return self

    def __exit__(self, *exc) -> None:
        set_rng_state(self._outside, self.device)


def mini_batch_bounds(n: int, mini_batch_size: int | None, accumulation: int = 1) -> list[tuple[int, int]]:
    """Half-open ``(start, end)`` ranges of examples covering ``0..n``: ``accumulation`` equal parts,
    each cut every ``mini_batch_size`` examples (the last piece of a part may be shorter).

    Raises:
        ValueError: ``n`` not a positive multiple of ``accumulation``, or ``mini_batch_size`` < 1.
    """
    if n < 1 or accumulation < 1 or n % accumulation:
        raise ValueError(f"{n} examples do not split into {accumulation} equal accumulation steps")
    part = n // accumulation
    size = part if mini_batch_size is None else mini_batch_size
    if size < 1:
        raise ValueError(f"cached.mini_batch_size must be ≥ 1, got {mini_batch_size}")
    return [
        (lo, min(lo + size, start + part)) for start in range(0, n, part) for lo in range(start, start + part, size)
    ]


Tokens = dict[str, torch.Tensor]


def cached_step(
    encode_query: Callable[[Tokens], torch.Tensor],
    encode_doc: Callable[[Tokens], torch.Tensor],
    tokens: Sequence[tuple[Tokens, Tokens]],
    loss_fn: Callable,
    backward: Callable[[torch.Tensor], None],
    device: torch.device,
):
    """One gradient-cached forward/backward (module docstring, steps 1-3).

    Args:
        encode_query, encode_doc: ``tokens -> [n, V]`` float32 vectors (under autocast, if any).
        tokens: per mini-batch, ``(query tokens [n_k, ·], document tokens [n_k·G, ·])``.
        loss_fn: ``(q [n, V], d [n·G, V]) -> (total, *rest)``, this process's vectors in, the loss of
            the whole (gathered) batch out; raising stops the step before any parameter gradient.
        backward: ``total -> None``, e.g. ``scaler.scale(total).backward()``.
        device: where the random state is saved (CPU, and CUDA when ``device`` is CUDA).

    Returns:
        What ``loss_fn`` returned. Parameter gradients are accumulated into ``.grad``.

    Raises:
        RuntimeError: the loss does not depend on the vectors (no gradient reached them).
    """
    states, qs, ds = [], [], []
    with torch.no_grad():
        for tq, td in tokens:
            states.append(RandomState(device))
            qs.append(encode_query(tq))
            ds.append(encode_doc(td))
    q_cat = torch.cat(qs).requires_grad_(True)
    d_cat = torch.cat(ds).requires_grad_(True)
    del qs, ds
    result = loss_fn(q_cat, d_cat)
    backward(result[0])
    if q_cat.grad is None or d_cat.grad is None:
        raise RuntimeError("gradient cache: the loss did not reach the query and document vectors")
    gq, gd = q_cat.grad, d_cat.grad
    q_at = d_at = 0
    for state, (tq, td) in zip(states, tokens):
        with state:
            q, d = encode_query(tq), encode_doc(td)
        grads = [(q, gq[q_at : q_at + len(q)]), (d, gd[d_at : d_at + len(d)])]
        q_at, d_at = q_at + len(q), d_at + len(d)
        outputs = [v for v, _ in grads if v.requires_grad]  # a frozen inference-free query side has no graph
        if outputs:
            torch.autograd.backward(outputs, [g for v, g in grads if v.requires_grad])
        del q, d, grads, outputs
    return result
