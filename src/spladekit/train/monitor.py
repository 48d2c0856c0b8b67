"""Stability monitoring of SPLADE training: per-step statistics and collapse alarms.

Statistics (all on the global batch, detached):
- ``active_q`` / ``active_d``: mean number of non-zero weights per query / document vector;
- ``zero_q`` / ``zero_d``: share of all-zero vectors;
- ``batch_flops``: Σ_j p_q(j)·p_d(j) with p the share of vectors in which term j is active
  (Paria et al. 2020, §3: expected multiply-adds of a query-document product);
- ``pos_score`` / ``neg_score`` / ``margin``: mean dot product with the positive, with the negatives
  (hard negatives when the batch has them, otherwise the other in-batch documents), and their difference;
- ``head_norm``: Frobenius norm of the MLM decoder weight ``[V, H']``; ``head_bias_norm``;
- ``logit_mean`` / ``logit_p99`` / ``logit_max``: MLM logits of a few documents (non-padding tokens).

Alarms:
- dense collapse: after the regulariser warm-up, mean active terms above ``dense_fraction·V``;
- zero collapse: every query or every document vector of the batch is all-zero;
- non-finite loss: raised by the loop as :class:`TrainingDivergedError`.
"""

from __future__ import annotations

import torch

from spladekit.errors import SpladekitError
from spladekit.train.losses import group_scores


class TrainingDivergedError(SpladekitError, RuntimeError):
    """The loss or the gradient became NaN/inf; training stopped and the last good checkpoint was kept."""


class CollapseError(SpladekitError, RuntimeError):
    """A collapse alarm fired and ``monitor.stop_on_collapse`` is set."""


@torch.no_grad()
def batch_statistics(q: torch.Tensor, d: torch.Tensor, group: int) -> dict[str, float]:
    """Sparsity and score statistics of a batch.

    Args:
        q: ``[B, V]`` query weights; d: ``[B·G, V]`` document weights (group layout of
            :mod:`spladekit.train.losses`); group: G.
    """
    q, d = q.detach().float(), d.detach().float()
    active_q, active_d = q > 0, d > 0
    p_q, p_d = active_q.float().mean(0), active_d.float().mean(0)
    grouped = group_scores(q, d)  # [B, G], column 0: the positive
    pos = grouped[:, 0]
    b = q.shape[0]
    if group > 1:
        neg = grouped[:, 1:].mean()
    elif b > 1:  # G = 1: the other in-batch documents, the off-diagonal of q·dᵀ [B, B]
        scores = q @ d.T
        neg = (scores.sum() - scores.diagonal().sum()) / (b * (b - 1))
    else:
        neg = torch.tensor(float("nan"))
    return {
        "active_q": float(active_q.sum(1).float().mean()),
        "active_d": float(active_d.sum(1).float().mean()),
        "zero_q": float((~active_q.any(1)).float().mean()),
        "zero_d": float((~active_d.any(1)).float().mean()),
        "batch_flops": float((p_q * p_d).sum()),
        "pos_score": float(pos.mean()),
        "neg_score": float(neg),
        "margin": float(pos.mean() - neg),
    }


@torch.no_grad()
def logit_statistics(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, float]:
    """Mean, 99th percentile and max of the MLM logits ``[n, L, V]`` over non-padding tokens.

    Runs in eval mode (no dropout) under a forked RNG, so training randomness is untouched.
    """
    was_training = model.training
    devices = [input_ids.device] if input_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        model.eval()
        try:
            logits = model.head.decoder(model.hidden_states(input_ids, attention_mask)).float()
        finally:
            model.train(was_training)
    values = logits[attention_mask.bool()].flatten()
    k = max(1, int(round(0.99 * values.numel())))
    return {
        "logit_mean": float(values.mean()),
        "logit_p99": float(values.kthvalue(k).values),
        "logit_max": float(values.max()),
    }


def head_statistics(model) -> dict[str, float]:
    """Frobenius norm of the MLM decoder weight and the L2 norm of its bias."""
    head = model.head
    out = {"head_norm": float(head.weight.detach().float().norm())}
    if head.bias is not None:
        out["head_bias_norm"] = float(head.bias.detach().float().norm())
    return out


def check_alarms(
    stats: dict[str, float], vocab_size: int, step: int, warmup_steps: int, dense_fraction: float
) -> list[str]:
    """Collapse alarms for one step's statistics (see the module docstring); empty when healthy."""
    alarms = []
    if step > warmup_steps:
        limit = dense_fraction * vocab_size
        for side, key in (("query", "active_q"), ("document", "active_d")):
            if stats.get(key, 0.0) > limit:
                alarms.append(
                    f"dense collapse at step {step}: {stats[key]:.0f} active terms per {side} > "
                    f"{dense_fraction:g}·V = {limit:.0f} after the regulariser warm-up; raise λ or lower the learning rate"
                )
    for side, key in (("query", "zero_q"), ("document", "zero_d")):
        if stats.get(key, 0.0) >= 1.0:
            alarms.append(
                f"zero collapse at step {step}: every {side} vector of the batch is all-zero; "
                f"lower λ, lengthen the warm-up, or check the MLM-head scale (rescaling)"
            )
    return alarms


#: Warn when the student's and the teacher's score spreads differ by more than this factor (either way).
SCALE_FACTOR = 4.0


def score_scale_check(
    q: torch.Tensor, d: torch.Tensor, teacher: torch.Tensor, factor: float = SCALE_FACTOR
) -> tuple[dict, str | None]:
    """Compare the spread of the student's scores with the teacher's, for MarginMSE / KL distillation.

    MarginMSE regresses student margins ``s(q,d⁺) − s(q,d⁻)`` onto teacher margins, and KL matches
    softmaxes of the raw scores, so both assume the two score scales agree; a teacher on another scale
    (probabilities in [0, 1] against SPLADE dot products of 10–30, huggingface/sentence-transformers#3540: student
    20/12, teacher 0.9/0.1) trains toward margins ~10× too small. The spread of a query's scores is
    ``max_g s − min_g s`` over its group (positive + negatives); the check compares the batch means:

        ratio = mean_i spread(student_i) / mean_i spread(teacher_i)

    and warns when ``ratio > factor`` or ``ratio < 1/factor`` (default 4: that issue's numbers give
    8 / 0.8 = 10 and warn; teacher logits ±ln 9 against the same student give 8 / 4.39 = 1.8 and do
    not). It only warns: which scale is right (rescale the teacher, use its logits, or change the
    temperature) is the user's choice, and the loss stays exactly what was configured.

    Args:
        q: ``[B, V]``; d: ``[B·G, V]`` (each query's positive then negatives); teacher: ``[B, G]``.

    Returns:
        ``(stats, message)``: ``student_score_spread``, ``teacher_score_spread``, ``score_scale_ratio``
        (None when the student spread is 0 or the teacher's is 0), and the warning text or None.
    """
    student = group_scores(q.float(), d.float())
    teacher = teacher.float()
    s_spread = float((student.max(1).values - student.min(1).values).mean())
    t_spread = float((teacher.max(1).values - teacher.min(1).values).mean())
    stats = {"student_score_spread": s_spread, "teacher_score_spread": t_spread, "score_scale_ratio": None}
    detail = (
        f"student scores {float(student.min()):.4g}…{float(student.max()):.4g} (mean spread per query "
        f"{s_spread:.4g}), teacher scores {float(teacher.min()):.4g}…{float(teacher.max()):.4g} "
        f"(mean spread {t_spread:.4g})"
    )
    if t_spread == 0.0:
        return stats, f"teacher scores are constant within every query at the first step: {detail}; nothing to distil"
    if s_spread == 0.0:
        return stats, None  # all student scores equal (e.g. empty vectors): no scale to compare yet
    ratio = s_spread / t_spread
    stats["score_scale_ratio"] = ratio
    if ratio > factor or ratio < 1.0 / factor:
        return stats, (
            f"teacher scores are on another scale than the student's (ratio {ratio:.3g}, outside "
            f"[1/{factor:g}, {factor:g}]): {detail}; MarginMSE/KL would train toward the teacher's "
            "margins: rescale the teacher scores (e.g. use its logits) or set loss.temperature"
        )
    return stats, None
