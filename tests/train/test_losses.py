"""Losses and regularisers against values computed independently (numpy, by hand)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spladekit import flops_regularizer, l1_regularizer
from spladekit.train.losses import group_scores, info_nce, kl_distillation, margin_mse
from spladekit.train.regularizers import QuadraticWarmup


def test_flops_by_hand():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    # column means 2, 0, 1 -> 4 + 0 + 1
    assert flops_regularizer(w).item() == pytest.approx(5.0)


def test_flops_gradient_is_2_mean_over_n():
    rng = np.random.default_rng(0)
    w_np = rng.random((5, 7))
    w = torch.tensor(w_np, requires_grad=True)
    flops_regularizer(w).backward()
    expected = np.broadcast_to(2 * w_np.mean(0) / 5, w_np.shape)
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-6)


def test_flops_of_a_global_batch_is_not_the_mean_of_parts():
    # the reason the trainer gathers the whole batch: FLOPS does not decompose over shards
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    halves = (flops_regularizer(w[:1]) + flops_regularizer(w[1:])) / 2
    assert flops_regularizer(w).item() == pytest.approx(0.5)
    assert halves.item() == pytest.approx(1.0)


def test_l1_by_hand():
    w = torch.tensor([[1.0, -2.0, 0.0], [0.5, 0.0, 0.5]])
    assert l1_regularizer(w).item() == pytest.approx((3.0 + 1.0) / 2)


@pytest.mark.parametrize("fn", [flops_regularizer, l1_regularizer])
def test_regularizers_reject_bad_shapes(fn):
    with pytest.raises(ValueError, match="N, V"):
        fn(torch.zeros(3))
    with pytest.raises(ValueError, match="empty"):
        fn(torch.zeros(0, 4))


def test_quadratic_warmup():
    warm = QuadraticWarmup(2.0, 4)
    assert [warm(t) for t in (0, 1, 2, 4, 10)] == pytest.approx([0.0, 2.0 / 16, 0.5, 2.0, 2.0])
    assert QuadraticWarmup(3.0, 0)(1) == 3.0
    with pytest.raises(ValueError):
        QuadraticWarmup(-1.0, 3)


def _np_log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def _random(b=3, g=2, v=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((b, v)), rng.random((b * g, v))


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_info_nce_in_batch_matches_numpy(temperature):
    q, d = _random()
    scores = q @ d.T / temperature
    expected = -np.mean([_np_log_softmax(scores)[i, 2 * i] for i in range(3)])
    got = info_nce(torch.tensor(q), torch.tensor(d), temperature, in_batch=True)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_info_nce_own_group_only():
    q, d = _random()
    grouped = np.stack([q[i] @ d[2 * i : 2 * i + 2].T for i in range(3)])
    expected = -np.mean(_np_log_softmax(grouped)[:, 0])
    got = info_nce(torch.tensor(q), torch.tensor(d), in_batch=False)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(group_scores(torch.tensor(q), torch.tensor(d)).numpy(), grouped, rtol=1e-6)


def test_margin_mse_by_hand():
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    d = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
    # student scores: [2, 1], [2, 6] -> margins 1, -4 ; teacher margins 3, -1 -> errors -2, -3
    teacher = torch.tensor([[5.0, 2.0], [0.0, 1.0]])
    assert margin_mse(q, d, teacher).item() == pytest.approx((4 + 9) / 2)


def test_kl_matches_numpy():
    q, d = _random(g=3)
    teacher = np.random.default_rng(1).random((3, 3)) * 4
    s = np.stack([q[i] @ d[3 * i : 3 * i + 3].T for i in range(3)])
    lp_s, lp_t = _np_log_softmax(s), _np_log_softmax(teacher)
    expected = np.mean(np.sum(np.exp(lp_t) * (lp_t - lp_s), axis=1))
    got = kl_distillation(torch.tensor(q), torch.tensor(d), torch.tensor(teacher))
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_losses_reject_inconsistent_groups():
    q, d = torch.ones(3, 4), torch.ones(4, 4)
    with pytest.raises(ValueError, match="groups"):
        info_nce(q, d)
    with pytest.raises(ValueError, match="teacher"):
        margin_mse(q, torch.ones(6, 4), torch.ones(3, 3))


def test_batch_statistics_by_hand():
    from spladekit.train.monitor import batch_statistics

    q = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    d = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # active terms q: 2, 1; d: 2, 1, 1, 0. p_q = (1/2, 1/2, 1/2), p_d = (1/4, 2/4, 1/4) -> FLOPS 0.5.
    # positives: q0·d0 = 1, q1·d2 = 1; hard negatives: q0·d1 = 1, q1·d3 = 0.
    stats = batch_statistics(q, d, group=2)
    expected = {
        "active_q": 1.5,
        "active_d": 1.0,
        "zero_q": 0.0,
        "zero_d": 0.25,
        "batch_flops": 0.5,
        "pos_score": 1.0,
        "neg_score": 0.5,
        "margin": 0.5,
    }
    assert stats == pytest.approx(expected)
    # G = 1: the negatives are the other in-batch documents: q0·d2 = 0, q1·d0 = 1
    stats = batch_statistics(q, d[[0, 2]], group=1)
    assert (stats["pos_score"], stats["neg_score"], stats["margin"]) == pytest.approx((1.0, 0.5, 0.5))
