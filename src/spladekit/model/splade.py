"""The SPLADE model: backbone → MLM-head transform → SPLADE head (plain or fused) → ``[B, V]``.

``SpladeModel`` is a ``torch.nn.Module`` used both for encoding (under ``torch.no_grad``) and for
training. It wraps a ``transformers`` masked-LM model without copying it, so saving the wrapped
model saves everything.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
from torch import nn

from spladekit.model.heads import MLMHead, find_mlm_head
from spladekit.model.pooling import check_pooling, check_position_top_k, plain_splade_head

#: ``head(hidden [B, L, H], attention_mask [B, L], weight [V, H], bias [V] | None, *, activation) → [B, V]``
HeadFn = Callable[..., torch.Tensor]

#: Rows per slice of :meth:`SpladeModel._forward_slices` (CPU inference at more than one thread).
SLICE_ROWS = 4
#: CPU inference inputs of at most this many positions (batch × length: a query or two) run on the
#: calling thread at one torch thread. Their products are too small to gain from a second thread, and
#: waking one (torch's OpenMP team, default wait policy) costs more than they do
#: (``benchmarks/runs/2026-12-02-encode-cpu.md``, ``SHORT_TOKENS``).
SHORT_TOKENS = 64


def get_head_fn(name: str, pooling: str = "max") -> HeadFn:
    """Return the SPLADE head implementation called ``name`` for ``pooling``.

    ``"plain"``: full ``[B, L, V]`` logits then SPLADE pooling (:func:`plain_splade_head`, both poolings).
    ``"fused"``: the memory-lean heads, :mod:`spladekit.model.fused` (max pooling) and
    :mod:`spladekit.model.fused_sum` (sum pooling).

    Every returned function takes ``(hidden, attention_mask, weight, bias, *, activation, position_top_k)``.

    Raises:
        ValueError: unknown name or pooling.
    """
    check_pooling(pooling, "relu")
    if name == "plain":
        return functools.partial(plain_splade_head, pooling=pooling)
    if name == "fused":
        if pooling == "sum":
            from spladekit.model.fused_sum import fused_sum_splade_head

            return fused_sum_splade_head
        from spladekit.model.fused import fused_splade_head

        return fused_splade_head
    raise ValueError(f"unknown SPLADE head implementation {name!r}; choose 'plain' or 'fused'")


def default_head_impl() -> str:
    """The head used when none is asked for: ``"fused"`` when available, else ``"plain"``.

    The environment variable ``SPLADEKIT_HEAD=plain`` (or ``fused``) overrides the choice.
    """
    forced = os.environ.get("SPLADEKIT_HEAD", "").strip().lower()
    if forced:
        get_head_fn(forced)  # ValueError for an unknown name
        return forced
    try:
        get_head_fn("fused")
    except ImportError:
        return "plain"
    return "fused"


class SpladeModel(nn.Module):
    """A masked-LM model read as a SPLADE encoder.

    Args:
        mlm: a ``transformers`` ``*ForMaskedLM`` model of a supported family.
        head_impl: ``"plain"`` or ``"fused"`` (see :func:`get_head_fn`); ``None`` picks the default.
        pooling: ``"max"`` (SPLADE v2) or ``"sum"`` (SPLADE v1) over positions.
        activation: ``"relu"`` (``log(1 + ReLU(x))``) or ``"log1p_relu"`` (``log(1 + log(1 + ReLU(x)))``),
            see :mod:`spladekit.model.pooling`.
        position_top_k: pool only each position's ``k`` largest logits (:mod:`spladekit.model.pooling`,
            both heads); None: all.
        fold: a :class:`~spladekit.model.folding.VocabularyFold` applied after pooling (its ``V'`` terms
            become the vector's columns); None: the ``V`` vocabulary columns.

    Forward:
        ``input_ids`` ``[B, L]`` (int64), ``attention_mask`` ``[B, L]`` (0/1) →
        ``[B, V]`` float32 SPLADE weights (``[B, V']`` with a fold), e.g.
        ``w_j = max_t log(1 + ReLU(logit_tj))`` over non-padding t (max pooling, ``"relu"``).

    Attributes:
        query_weights: None, or the inference-free query side being trained
            (:class:`spladekit.model.inference_free.QueryTermWeights`; a submodule, so the optimiser,
            checkpoints and the distributed broadcast include it). ``forward`` never uses it.
        pooling, activation, position_top_k, fold: as given (part of the model's description, saved in
            ``spladekit.json``).

    Raises:
        ValueError: an unknown pooling, activation or head, a ``position_top_k`` that is not None or
            ≥ 1, a fold whose map does not cover the head's ``V`` columns.
    """

    def __init__(
        self,
        mlm: nn.Module,
        head_impl: str | None = None,
        pooling: str = "max",
        activation: str = "relu",
        position_top_k: int | None = None,
        fold=None,
    ):
        super().__init__()
        check_pooling(pooling, activation)
        self.mlm = mlm
        self.query_weights = None
        self.pooling = pooling
        self.activation = activation
        self.head_impl = head_impl or default_head_impl()
        get_head_fn(self.head_impl, pooling)  # validate early
        self.configure_head(position_top_k, fold)

    def configure_head(self, position_top_k: int | None, fold) -> None:
        """Set the head options ``position_top_k`` and ``fold`` (see the class docstring).

        Raises:
            ValueError: a ``position_top_k`` that is not None or ≥ 1, a fold whose map does not cover
                the head's ``V`` columns.
        """
        check_position_top_k(position_top_k)
        if fold is not None and len(fold.columns) != self.vocab_size:
            raise ValueError(
                f"the vocabulary fold maps {len(fold.columns)} columns but the MLM head has {self.vocab_size}"
            )
        self.position_top_k = position_top_k
        self.fold = fold

    @property
    def head(self) -> MLMHead:
        """The wrapped model's MLM head (found again each time, so it follows rescaling/untying)."""
        return find_mlm_head(self.mlm)

    @property
    def vocab_size(self) -> int:
        """V, the number of vocabulary columns (rows of the MLM head's decoder)."""
        return int(self.head.weight.shape[0])

    @property
    def output_size(self) -> int:
        """Columns of the vectors :meth:`forward` returns: ``V'`` terms with a fold, else ``V``."""
        return self.fold.size if self.fold is not None else self.vocab_size

    def output_column(self, column: int) -> int:
        """The output column of vocabulary column ``column`` (its term under a fold)."""
        return int(self.fold.columns[column]) if self.fold is not None else int(column)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Transformed hidden states ``[B, L, H']``: backbone then the MLM head's transform."""
        head = self.head
        out = head.backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return head.transform(out.last_hidden_state)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """SPLADE vectors of a batch: ``input_ids`` and ``attention_mask`` ``[B, L]`` → ``[B, V]`` float
        (the pooling, activation, cap and fold of this model; padding positions masked out).

        On the CPU at more than one torch thread, outside training and autograd, the fused head runs
        short inputs at one thread and longer batches in slices over worker threads
        (:meth:`_forward_slices`); the values are those of the single-threaded forward.
        """
        threads = torch.get_num_threads()
        # not with the masked LM in training mode: its dropout in worker threads would draw in a
        # thread-dependent order (and trimmed shapes), so a gradient cache's no-grad pass
        # (spladekit.train.cached) could not be replayed with the same masks
        if (
            self.head_impl == "fused"
            and threads > 1
            and input_ids.shape[0]
            and input_ids.device.type == "cpu"
            and not self.mlm.training
            and not torch.is_grad_enabled()
            and not torch.jit.is_tracing()
            and not torch.compiler.is_compiling()
        ):
            if input_ids.numel() > SHORT_TOKENS:
                return self._forward_slices(input_ids, attention_mask, threads)
            torch.set_num_threads(1)  # a query: see SHORT_TOKENS
            try:
                return self._forward(input_ids, attention_mask)
            finally:
                torch.set_num_threads(threads)
        return self._forward(input_ids, attention_mask)

    def _forward_slices(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, threads: int) -> torch.Tensor:
        """Inference on the CPU with ``threads`` > 1: data parallelism over slices of the batch.

        The batch is cut into slices of :data:`SLICE_ROWS` rows (at least ``2 × threads`` slices when
        the batch allows, so that a worker the operating system deschedules on a busy machine leaves
        its remaining slices to the others), and single-threaded worker threads
        (:func:`spladekit.model.cpu_pool.run_units`) each run the whole forward (backbone, transform,
        fused head) on one slice at a time: one wait per batch instead of one barrier per operation
        of torch's intra-op parallelism (faster at 2 threads than the intra-op body plus a head split
        over threads: ``benchmarks/runs/2026-12-02-encode-cpu.md``). Each slice drops the trailing columns where all of its
        rows are padding (their keys are masked out of attention; real tokens keep their positions),
        so short texts are not computed at the batch's longest length.

        Same values as :meth:`_forward` on each slice alone at one thread (the same operations on the
        same shapes); against the whole batch at once, equal up to float32 rounding of the backbone's
        products (other matrix shapes). Returns ``[B, V]`` float32.
        """
        from spladekit.model.cpu_pool import run_units

        batch = input_ids.shape[0]
        rows = max(1, min(SLICE_ROWS, -(-batch // (2 * threads))))
        slices = [(lo, min(batch, lo + rows)) for lo in range(0, batch, rows)]
        out: list[torch.Tensor | None] = [None] * len(slices)

        def work(index: int) -> None:
            lo, hi = slices[index]
            mask = attention_mask[lo:hi]
            used = torch.nonzero(mask.any(dim=0))
            length = int(used[-1]) + 1 if len(used) else 1
            out[index] = self._forward(input_ids[lo:hi, :length], mask[:, :length])

        run_units(work, range(len(slices)), threads)
        return torch.cat(out, dim=0)

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.head
        hidden = head.transform(
            head.backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
        )
        weights = get_head_fn(self.head_impl, self.pooling)(
            hidden,
            attention_mask,
            head.weight,
            head.bias,
            activation=self.activation,
            position_top_k=self.position_top_k,
        )
        return weights if self.fold is None else self.fold.apply(weights, self.pooling)
