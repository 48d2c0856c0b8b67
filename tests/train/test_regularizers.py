"""The regularisers of spladekit.train.regularizers beyond FLOPS/L1 (flops_l0, idf_flops, df_flops,
anti-zero), their training-document statistics (spladekit.train.term_weights) and their config:
each against its formula by hand on a small tensor, each gradient against autograd of the by-hand
form, flops_l0 against sentence-transformers' own FlopsLoss(threshold)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spladekit.train.regularizers import (
    SparsityPenalty,
    anti_zero_regularizer,
    df_activation,
    df_flops_regularizer,
    flops_l0_regularizer,
    flops_regularizer,
    idf_flops_regularizer,
)
from spladekit.train.term_weights import DocumentFrequencyEstimate, active_term_counts, training_idf

# Tolerance of the by-hand comparisons: the by-hand forms run in float64 on the same float32 values;
# ours sums in float32. A mean over N ≤ 6 rows and a sum over V ≤ 8 squared terms of non-negative
# numbers carry a relative error ≤ (N + V + 2)·EPS32/2 ≈ 16 · 6e-8 ≈ 1e-6 (Higham §3.1; non-negative
# terms, so no cancellation); gradients (2·mean·factor/N) ≤ (N + 3)·EPS32/2: rtol 2e-6 covers both.
RTOL = 2e-6


def sample(seed: int, n: int = 5, v: int = 7, zeros: float = 0.4) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    w = rng.gamma(1.0, 1.0, size=(n, v))
    w[rng.random((n, v)) < zeros] = 0.0
    return torch.tensor(w, dtype=torch.float32)


def grad_of(fn, w: torch.Tensor) -> tuple[float, np.ndarray]:
    x = w.clone().requires_grad_(True)
    value = fn(x)
    value.backward()
    return float(value.detach()), x.grad.double().numpy()


# ----------------------------------------------------------------------------------- by-hand forms
def flops_l0_by_hand(w: torch.Tensor, tau: float) -> torch.Tensor:
    """Σ_j ((1/N) Σ_i m_i w_ij)², m_i = 1[#{j : w_ij ≠ 0} > τ], written out term by term in float64."""
    n, v = w.shape
    total = torch.zeros((), dtype=torch.float64)
    for j in range(v):
        column = torch.zeros((), dtype=torch.float64)
        for i in range(n):
            m_i = 1.0 if sum(1 for k in range(v) if float(w[i, k]) != 0.0) > tau else 0.0
            column = column + m_i * w[i, j].double()
        total = total + (column / n) ** 2
    return total


def idf_flops_by_hand(w: torch.Tensor, idf) -> torch.Tensor:
    n, v = w.shape
    return sum(((sum(w[i, j].double() for i in range(n)) / n) / float(idf[j])) ** 2 for j in range(v))


def df_flops_by_hand(w: torch.Tensor, a) -> torch.Tensor:
    n, v = w.shape
    return sum((float(a[j]) / n * sum(w[i, j].double() for i in range(n))) ** 2 for j in range(v))


def anti_zero_by_hand(w: torch.Tensor) -> torch.Tensor:
    n, v = w.shape
    return 1.0 / sum(w[i, j].double() for i in range(n) for j in range(v)) ** 2


def activation_by_hand(x: float, alpha: float, beta: float) -> float:
    if x == 0:
        return 0.0
    return 1.0 / (1.0 + (x ** (math.log(2) / math.log(alpha)) - 1.0) ** beta)


def check_against(ours, by_hand, w: torch.Tensor) -> None:
    value, grad = grad_of(ours, w)
    want_value, want_grad = grad_of(by_hand, w)
    assert value == pytest.approx(want_value, rel=RTOL)
    np.testing.assert_allclose(grad, want_grad, rtol=RTOL, atol=1e-12)


# ----------------------------------------------------------------------------------- flops_l0
def test_flops_l0_worked_example():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0], [0.5, 0.5, 0.5]])
    # τ = 1: row 1 (one active term) is left out; N stays 3: means (1.5, 0.5, 2.5)/3
    assert flops_l0_regularizer(w, 1).item() == pytest.approx((0.25 + 0.5**2 / 9 + 2.5**2 / 9), rel=RTOL)
    # τ = 2: row 0 has exactly 2 (not more): only row 2 counts
    assert flops_l0_regularizer(w, 2).item() == pytest.approx(3 * (0.5 / 3) ** 2, rel=RTOL)
    assert flops_l0_regularizer(w, 0).item() == pytest.approx(flops_regularizer(w).item(), rel=RTOL)
    assert flops_l0_regularizer(w, 3).item() == 0.0


@pytest.mark.parametrize("seed,tau", [(0, 0), (1, 2), (2, 3), (3, 4.5), (4, 5)])
def test_flops_l0_and_its_gradient_by_hand(seed, tau):
    w = sample(seed)
    check_against(lambda x: flops_l0_regularizer(x, tau), lambda x: flops_l0_by_hand(x, tau), w)


@pytest.mark.parametrize("seed,tau", [(0, None), (1, 0), (2, 2), (3, 3.5), (5, 5), (6, 10)])
def test_flops_l0_equals_sentence_transformers_flops_loss(seed, tau):
    from sentence_transformers.sparse_encoder.losses import FlopsLoss

    w = sample(seed, n=8, v=9)
    theirs_loss = FlopsLoss(model=None, threshold=tau)
    ours = (lambda x: flops_l0_regularizer(x, tau)) if tau is not None else flops_regularizer
    value, grad = grad_of(ours, w)
    want_value, want_grad = grad_of(theirs_loss.compute_loss_from_embeddings, w)
    # the same torch operations in the same order on the same float32 tensor: equal bit for bit
    assert value == want_value
    np.testing.assert_array_equal(grad, want_grad)


# ----------------------------------------------------------------------------------- idf_flops
def test_idf_flops_worked_example_and_its_meaning():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    idf = torch.tensor([2.0, 1.0, 0.5])
    # means (2, 0, 1) divided by idf (2, 1, 0.5): 1 + 0 + 4
    assert idf_flops_regularizer(w, idf).item() == pytest.approx(5.0, rel=RTOL)
    # Geng et al.'s objective: FLOPS of d where the score weighs term j by idf_j; in w = idf ⊙ d it is this one
    d = sample(9)
    idf = torch.linspace(0.5, 3.0, d.shape[1])
    assert idf_flops_regularizer(d * idf, idf).item() == pytest.approx(flops_regularizer(d).item(), rel=RTOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_idf_flops_gradient_by_hand(seed):
    w = sample(seed)
    idf = torch.tensor(np.random.default_rng(seed + 10).uniform(0.2, 5.0, w.shape[1]), dtype=torch.float32)
    check_against(lambda x: idf_flops_regularizer(x, idf), lambda x: idf_flops_by_hand(x, idf), w)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_idf_flops_refuses_an_idf_it_cannot_divide_by(bad):
    idf = torch.ones(7)
    idf[4] = bad
    with pytest.raises(ValueError, match="term 4"):
        idf_flops_regularizer(sample(0), idf)
    with pytest.raises(ValueError, match=r"shape \[V\] = \[7\]"):
        idf_flops_regularizer(sample(0), torch.ones(6))


def test_training_idf_by_hand(tiny_bert_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    docs = ["protein cells", "protein protein gene", "cancer risk"]
    idf = training_idf(tok, docs, len(tok))

    def by_hand(df, n=3):
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    ids = {t: tok.convert_tokens_to_ids(t) for t in ("protein", "gene", "cancer", "virus")}
    assert idf[ids["protein"]].item() == pytest.approx(by_hand(2), rel=1e-6)  # counted once per document
    assert idf[ids["gene"]].item() == pytest.approx(by_hand(1), rel=1e-6)
    assert idf[ids["virus"]].item() == pytest.approx(by_hand(0), rel=1e-6)
    for j in tok.all_special_ids:  # as if in every document: the smallest IDF
        assert idf[j].item() == pytest.approx(by_hand(3), rel=1e-6)
    assert bool(torch.all(idf > 0))
    with pytest.raises(ValueError, match="at least one"):
        training_idf(tok, [], len(tok))


# ----------------------------------------------------------------------------------- df_flops
@pytest.mark.parametrize("alpha,beta", [(0.1, 1.0), (0.1, 10.0), (0.3, 2.5), (0.01, 4.0)])
def test_df_activation_by_hand(alpha, beta):
    xs = sorted({0.0, 1e-4, 0.005, alpha, 0.2, 0.5, 0.9, 1.0})
    got = df_activation(torch.tensor(xs, dtype=torch.float64), alpha, beta)
    want = [activation_by_hand(x, alpha, beta) for x in xs]
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6, atol=1e-30)  # float32 result of float64 work
    assert (
        got[xs.index(alpha)].item() == pytest.approx(0.5, rel=1e-6) and got[-1].item() == 1.0 and got[0].item() == 0.0
    )
    assert bool(torch.all(got[1:] >= got[:-1]))  # increasing with the share


@pytest.mark.parametrize(
    "alpha,beta", [(0.0, 1.0), (1.0, 1.0), (1.5, 1.0), (0.1, 0.0), (0.1, -2.0), (0.1, float("inf"))]
)
def test_df_activation_refuses_its_bad_parameters(alpha, beta):
    with pytest.raises(ValueError, match="0 < alpha < 1"):
        df_activation(torch.tensor([0.5]), alpha, beta)


def test_df_flops_worked_example_and_gradient_by_hand():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    a = torch.tensor([0.5, 1.0, 0.0])
    assert df_flops_regularizer(w, a).item() == pytest.approx((0.5 * 2) ** 2, rel=RTOL)  # a_j·mean_j: 1, 0, 0
    for seed in range(3):
        x = sample(seed)
        a = torch.tensor(np.random.default_rng(seed).random(x.shape[1]), dtype=torch.float32)
        check_against(lambda t: df_flops_regularizer(t, a), lambda t: df_flops_by_hand(t, a), x)  # noqa: B023 (called in this iteration only)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        df_flops_regularizer(w, torch.tensor([0.5, 1.5, 0.0]))


def test_active_term_counts_by_hand():
    dense = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.5, 0.0, 1.0]], dtype=np.float32)
    assert active_term_counts(torch.tensor(dense)).tolist() == [1, 1, 3]
    assert active_term_counts(sp.csr_matrix(dense)).tolist() == [1, 1, 3]


def test_document_frequency_estimate_schedule_weights_and_state():
    est = DocumentFrequencyEstimate(vocab_size=4, alpha=0.25, beta=2.0, refresh_every=10)
    docs = [f"doc {i}" for i in range(50)]
    texts = est.choose_sample(docs, size=20, seed=3)
    assert len(texts) == 20 and len(set(texts)) == 20 and texts == sorted(texts, key=docs.index)
    assert est.choose_sample(docs[:5], size=20) == docs[:5]
    assert est.due(3)  # none yet: due whatever the step (a resumed run)
    with pytest.raises(RuntimeError, match="before any"):
        est.weights()
    est.refresh(torch.tensor([0, 5, 10, 20]), 20, step=0)
    assert [est.due(s) for s in (0, 1, 9, 10, 20)] == [False, False, False, True, True]
    want = [activation_by_hand(x, 0.25, 2.0) for x in (0.0, 0.25, 0.5, 1.0)]
    np.testing.assert_allclose(est.weights().numpy(), want, rtol=1e-6)
    state = est.state_dict()
    again = DocumentFrequencyEstimate(vocab_size=4, alpha=0.25, beta=2.0, refresh_every=10)
    again.load_state_dict(state)
    assert torch.equal(again.weights(), est.weights()) and not again.due(5)
    for counts, n in (([0, 5, 21, 0], 20), ([0, -1, 0, 0], 20), ([0, 0, 0], 20), ([0, 0, 0, 0], 0)):
        with pytest.raises(ValueError):
            est.refresh(torch.tensor(counts), n, step=10)


@pytest.mark.parametrize(
    "state",
    [
        {"counts": torch.tensor([1.7, 2.2, 0.0, 0.0]), "num_docs": 3, "step": 1},  # would be cut to 1, 2
        {"counts": torch.tensor([1, 2, 0, 0]), "num_docs": 3.5, "step": 1},  # weighed by 3.5, kept as 3
        {"counts": torch.tensor([1, 2, 0, 0]), "num_docs": float("nan"), "step": 1},
        {"counts": torch.tensor([1, 2, 0, 0]), "num_docs": True, "step": 1},
        {"counts": torch.tensor([1, 2, 0, 0]), "num_docs": 3, "step": -4},
        {"counts": torch.tensor([1, 2, 0, 0]), "num_docs": 3, "step": 2.5},
        {"counts": [1, 2, 0, 0], "num_docs": 3, "step": 1},
        ["counts", "num_docs", "step"],
    ],
)
def test_a_hostile_document_frequency_state_is_refused_not_rounded(state):
    # a checkpoint's trainer.pt gives this state on resume; load_checkpoint names the file for a ValueError
    est = DocumentFrequencyEstimate(vocab_size=4, alpha=0.25, beta=2.0, refresh_every=10)
    with pytest.raises(ValueError, match="counts|num_docs|step|mapping"):
        est.load_state_dict(state)
    assert est.counts is None and est.due(1)


# ----------------------------------------------------------------------------------- anti-zero
def test_anti_zero_by_hand_and_gradient():
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert anti_zero_regularizer(w).item() == pytest.approx(1 / 36, rel=RTOL)
    for seed in range(3):
        check_against(anti_zero_regularizer, anti_zero_by_hand, sample(seed))
    assert math.isinf(anti_zero_regularizer(torch.zeros(2, 3)).item())  # a collapsed side: the loop's non-finite check


# ----------------------------------------------------------------------------------- config and dispatch
def test_penalty_dispatches_each_kind_to_its_function():
    from spladekit.train.config import RegularizerConfig

    w = sample(4)
    idf = torch.linspace(0.5, 2.0, w.shape[1])
    est = DocumentFrequencyEstimate(vocab_size=w.shape[1], alpha=0.2, beta=3.0, refresh_every=5)
    est.refresh(active_term_counts(w), w.shape[0], step=0)
    cases = {
        "flops": ({}, flops_regularizer(w)),
        "flops_l0": ({"threshold": 3}, flops_l0_regularizer(w, 3)),
        "idf_flops": ({}, idf_flops_regularizer(w, idf)),
        "df_flops": ({"df": {"alpha": 0.2, "beta": 3.0}}, df_flops_regularizer(w, est.weights())),
    }
    for kind, (extra, want) in cases.items():
        penalty = SparsityPenalty(RegularizerConfig(kind=kind, anti_zero=0.5, **extra), idf=idf, df=est)
        assert torch.equal(penalty(w), want), kind
        assert penalty.anti_zero(w).item() == pytest.approx(0.5 * anti_zero_regularizer(w).item(), rel=RTOL)
    assert SparsityPenalty(RegularizerConfig()).anti_zero(w).item() == 0.0
    with pytest.raises(ValueError, match="idf_flops needs"):
        SparsityPenalty(RegularizerConfig(kind="idf_flops"))
    with pytest.raises(ValueError, match="df_flops needs"):
        SparsityPenalty(RegularizerConfig(kind="df_flops", df={"alpha": 0.2, "beta": 3.0}))


@pytest.mark.parametrize(
    "overrides,field",
    [
        (["regularizer.kind=flops_l0"], "regularizer"),
        (["regularizer.threshold=3"], "regularizer"),
        (["regularizer.kind=df_flops"], "regularizer"),
        (["regularizer.kind=df_flops", "regularizer.df.alpha=0.1"], "regularizer.df.beta"),
        (["regularizer.kind=df_flops", "regularizer.df.alpha=1", "regularizer.df.beta=2"], "regularizer.df.alpha"),
        (["regularizer.kind=flops", "regularizer.df.alpha=0.1", "regularizer.df.beta=2"], "regularizer"),
        (["regularizer.kind=flops_l1"], "regularizer.kind"),
        (["regularizer.anti_zero=-1"], "regularizer.anti_zero"),
    ],
)
def test_config_refuses_settings_the_kind_does_not_read_or_needs(overrides, field):
    from spladekit.errors import DataFormatError
    from spladekit.train.config import load_config

    with pytest.raises(DataFormatError) as info:
        load_config(None, overrides)
    assert f"field '{field}'" in str(info.value)


def test_config_with_a_new_regulariser_is_saved_and_read_back(tmp_path):
    from spladekit.io import write_yaml
    from spladekit.train.config import load_config

    config = load_config(
        None,
        [
            "regularizer.kind=df_flops",
            "regularizer.df.alpha=0.1",
            "regularizer.df.beta=4",
            "regularizer.df.refresh_every=50",
            "regularizer.anti_zero=1",
        ],
    )
    write_yaml(tmp_path / "config.yaml", config.model_dump(mode="json"))
    again = load_config(tmp_path / "config.yaml")
    assert again == config and again.regularizer.df.refresh_every == 50 and again.regularizer.anti_zero == 1.0
