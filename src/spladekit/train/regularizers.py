"""Sparsity regularisers of SPLADE and their warm-up schedule.

FLOPS regulariser (Paria et al., ICLR 2020, "Minimizing FLOPs to Learn Efficient Sparse
Representations", eq. 4; used by SPLADE, Formal et al. SIGIR 2021, eq. 5):

    FLOPS(w) = Σ_j ( (1/N) Σ_i w_ij )²

L1 regulariser (the average L1 norm of a vector):

    L1(w) = (1/N) Σ_i Σ_j |w_ij|

Quadratic warm-up of the weight (Paria et al. 2020 §5; SPLADE's training code):

    λ_t = λ · min(1, t/T)²        (T = 0: λ from the first step)
"""

from __future__ import annotations

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
