"""The SPLADE model: backbone → MLM-head transform → SPLADE head (plain or fused) → ``[B, V]``.

``SpladeModel`` is a ``torch.nn.Module`` used both for encoding (under ``torch.no_grad``) and for
training. It wraps a ``transformers`` masked-LM model without copying it, so saving the wrapped
model saves everything.
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import torch
from torch import nn

from spladekit.model.heads import MLMHead, find_mlm_head
from spladekit.model.pooling import check_pooling, plain_splade_head

#: ``head(hidden [B, L, H], attention_mask [B, L], weight [V, H], bias [V] | None, *, activation) → [B, V]``
HeadFn = Callable[..., torch.Tensor]


def get_head_fn(name: str, pooling: str = "max") -> HeadFn:
    """Return the SPLADE head implementation called ``name`` for ``pooling``.

    ``"plain"``: full ``[B, L, V]`` logits then SPLADE pooling (:func:`plain_splade_head`, both poolings).
    ``"fused"``: the memory-lean heads, :mod:`spladekit.model.fused` (max pooling) and
    :mod:`spladekit.model.fused_sum` (sum pooling).

    Every returned function takes ``(hidden, attention_mask, weight, bias, *, activation)``.

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

    Forward:
        ``input_ids`` ``[B, L]`` (int64), ``attention_mask`` ``[B, L]`` (0/1) →
        ``[B, V]`` float32 SPLADE weights, e.g. ``w_j = max_t log(1 + ReLU(logit_tj))`` over non-padding t
        (max pooling, ``"relu"``).

    Attributes:
        query_weights: None, or the inference-free query side being trained
            (:class:`spladekit.model.inference_free.QueryTermWeights`; a submodule, so the optimiser,
            checkpoints and the distributed broadcast include it). ``forward`` never uses it.
        pooling, activation: as given (part of the model's description, saved in ``spladekit.json``).
    """

    def __init__(self, mlm: nn.Module, head_impl: str | None = None, pooling: str = "max", activation: str = "relu"):
        super().__init__()
        check_pooling(pooling, activation)
        self.mlm = mlm
        self.query_weights = None
        self.pooling = pooling
        self.activation = activation
        self.head_impl = head_impl or default_head_impl()
        get_head_fn(self.head_impl, pooling)  # validate early

    @property
    def head(self) -> MLMHead:
        """The wrapped model's MLM head (found again each time, so it follows rescaling/untying)."""
        return find_mlm_head(self.mlm)

    @property
    def vocab_size(self) -> int:
        """V, the number of vocabulary columns."""
        return int(self.head.weight.shape[0])

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Transformed hidden states ``[B, L, H']``: backbone then the MLM head's transform."""
        head = self.head
        out = head.backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return head.transform(out.last_hidden_state)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.head
        hidden = head.transform(
            head.backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
        )
        return get_head_fn(self.head_impl, self.pooling)(hidden, attention_mask, head.weight, head.bias,
                                                         activation=self.activation)
