"""Ranking losses of SPLADE training on dot-product scores ``s(q, d) = q · d``.

Batch layout used throughout: ``B`` queries ``q [B, V]`` and, for query ``i``, a group of
``G = 1 + n`` documents (its positive first, then ``n`` hard negatives); the documents of the batch
are ``d [B·G, V]`` group after group.

- InfoNCE (van den Oord et al. 2018; Karpukhin et al. 2020 for in-batch negatives):
  ``-log softmax_j(s(q_i, d_j)/τ)`` at ``j`` = the positive of ``i``, over every document of the
  batch (in-batch negatives) or over the own group only.
- MarginMSE (Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with
  Cross-Architecture Knowledge Distillation", eq. 1): ``mean ((s⁺ − s⁻) − (t⁺ − t⁻))²``.
- KL divergence (SPLADE++: Formal et al. SIGIR 2022): ``KL(softmax(t) ‖ softmax(s))`` over each
  query's group, averaged over queries.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _groups(q: torch.Tensor, d: torch.Tensor) -> int:
    if q.dim() != 2 or d.dim() != 2 or q.shape[1] != d.shape[1]:
        raise ValueError(f"expected q [B, V] and d [B·G, V], got {tuple(q.shape)} and {tuple(d.shape)}")
    if q.shape[0] == 0 or d.shape[0] % q.shape[0]:
        raise ValueError(f"{d.shape[0]} documents do not split into groups for {q.shape[0]} queries")
    return d.shape[0] // q.shape[0]


def group_scores(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Scores of each query against its own group: ``[B, G]`` (column 0: the positive)."""
    g = _groups(q, d)
    return torch.einsum("bv,bgv->bg", q.float(), d.float().view(q.shape[0], g, -1))


def info_nce(q: torch.Tensor, d: torch.Tensor, temperature: float = 1.0, in_batch: bool = True) -> torch.Tensor:
    """Contrastive InfoNCE loss, mean over queries.

    Args:
        q: ``[B, V]`` query weights.
        d: ``[B·G, V]`` document weights (see the module docstring).
        temperature: τ > 0 (scores are divided by it).
        in_batch: score against every document of the batch (True) or the own group only.

    Returns:
        Scalar tensor.
    """
    g = _groups(q, d)
    if in_batch:
        scores = q.float() @ d.float().T / temperature
        target = torch.arange(q.shape[0], device=q.device) * g
    else:
        scores = group_scores(q, d) / temperature
        target = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
    return F.cross_entropy(scores, target)


def margin_mse(q: torch.Tensor, d: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MarginMSE distillation loss (Hofstätter et al. 2020, eq. 1), mean over queries and negatives.

    Args:
        q: ``[B, V]``; d: ``[B·G, V]`` with G ≥ 2.
        teacher: ``[B, G]`` teacher scores in the same order (column 0: the positive).
    """
    s = group_scores(q, d)
    if s.shape[1] < 2 or teacher.shape != s.shape:
        raise ValueError(
            f"margin_mse needs G ≥ 2 and teacher scores of shape {tuple(s.shape)}, got {tuple(teacher.shape)}"
        )
    student_margin = s[:, :1] - s[:, 1:]
    teacher_margin = teacher[:, :1].float() - teacher[:, 1:].float()
    return (student_margin - teacher_margin).pow(2).mean()


def kl_distillation(q: torch.Tensor, d: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``KL(softmax(t/τ) ‖ softmax(s/τ))`` per query over its group, mean over queries.

    Args:
        q: ``[B, V]``; d: ``[B·G, V]``; teacher: ``[B, G]`` teacher scores.
    """
    s = group_scores(q, d)
    if teacher.shape != s.shape:
        raise ValueError(f"teacher scores must have shape {tuple(s.shape)}, got {tuple(teacher.shape)}")
    log_p_student = F.log_softmax(s / temperature, dim=1)
    log_p_teacher = F.log_softmax(teacher.float() / temperature, dim=1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)
