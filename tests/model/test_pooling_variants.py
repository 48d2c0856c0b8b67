"""Every SPLADE pooling × activation (max/sum × relu/log1p_relu), plain and fused heads, values and
gradients, against the formula computed by hand in float64.

Inputs lie on the grid of ``tests/model/test_fused.py`` (multiples of 1/4 below 8, H ≤ 128): every logit
``h·W_j + b_j`` is then exact in a float32 accumulator whatever the summation order, so the only
rounding left is that of the activation and of the pooling/gradient sums, bounded below.
"""

from __future__ import annotations

import pytest
import torch

from spladekit.model.fused import fused_splade_head
from spladekit.model.fused_sum import fused_sum_splade_head
from spladekit.model.pooling import plain_splade_head, splade_pool
from spladekit.model.splade import get_head_fn

U = torch.finfo(torch.float32).eps / 2  # unit roundoff of float32: one operation is exact to ≤ U relative
VARIANTS = [(p, a) for p in ("max", "sum") for a in ("relu", "log1p_relu")]


def _grid(t):
    return torch.round(t * 4) / 4


def _inputs(seed=0, B=4, L=9, H=8, V=70):
    gen = torch.Generator().manual_seed(seed)
    hidden = _grid(torch.randn(B, L, H, generator=gen, dtype=torch.float64))
    weight = _grid(torch.randn(V, H, generator=gen, dtype=torch.float64))
    bias = _grid(torch.randn(V, generator=gen, dtype=torch.float64))
    bias[:5] = -100.0  # negative at every position: weight 0, no gradient
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 5:] = 0  # right padding
    mask[2, :3] = 0  # left padding
    mask[3, :] = 0  # no real token
    leaf = lambda t: t.float().requires_grad_(True)  # noqa: E731
    return leaf(hidden), mask, leaf(weight), leaf(bias), torch.rand(B, V, generator=gen)


def _act(x, activation):
    y = torch.log1p(torch.relu(x))
    return torch.log1p(y) if activation == "log1p_relu" else y


def _act_grad(x, activation):
    """a'(x) by hand: 1/(1+x), times 1/(1+log(1+x)) for log1p_relu; 0 for x ≤ 0."""
    d = torch.where(x > 0, 1 / (1 + x.clamp_min(0)), torch.zeros_like(x))
    return d / (1 + torch.log1p(x.clamp_min(0))) if activation == "log1p_relu" else d


def _hand(hidden, mask, weight, bias, grad_out, pooling, activation):
    """Exact value and gradients (float64) with float32 rounding bounds of any implementation.

    Value: max pooling applies ≤ 4 roundings to a(m) (relu/clamp exact, two log1p, their inputs), so
    ``|err| ≤ 4U·w``; sum pooling adds an L-term sum (Higham, Accuracy and Stability, §3.1:
    ``|fl(Σx) − Σx| ≤ γ_L Σ|x|``), so ``|err| ≤ (L + 4)·U·Σ_t a``. Gradients: each of the K terms of
    ``dh = G @ W`` (K = V), ``dW = Gᵀ @ h`` and ``db = Σ G`` (K = B·L) carries ≤ 8 roundings (a' in
    float32: ≤ 6; the products with grad_out and with h or W), plus K for the sum:
    ``|err| ≤ (K + 8)·U·Σ|terms|``.
    """
    h, w, b = hidden.detach().double(), weight.detach().double(), bias.detach().double()
    logits = h @ w.T + b  # exact (grid)
    real = mask.bool()[..., None]
    g = grad_out.double()
    batch, length, vocab = logits.shape
    if pooling == "sum":
        acts = _act(logits, activation).masked_fill(~real, 0)
        value, value_bound = acts.sum(1), (length + 4) * U * acts.sum(1)
        dense = (g[:, None, :] * _act_grad(logits, activation)).masked_fill(~real, 0)
    else:
        m, arg = logits.masked_fill(~real, float("-inf")).max(dim=1)
        value = _act(m.clamp_min(0), activation)
        value_bound = 4 * U * value
        scale = g * _act_grad(m, activation)
        dense = torch.zeros_like(logits).scatter_(1, arg[:, None, :], scale[:, None, :])
    n = batch * length
    grads = {
        "hidden": (dense @ w, (vocab + 8) * U * (dense.abs() @ w.abs())),
        "weight": (
            torch.einsum("blv,blh->vh", dense, h),
            (n + 8) * U * torch.einsum("blv,blh->vh", dense.abs(), h.abs()),
        ),
        "bias": (dense.sum((0, 1)), (n + 8) * U * dense.abs().sum((0, 1))),
    }
    return (value, value_bound), grads


def _within(got, exact, bound, what):
    err = (got.double() - exact).abs()
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (
        f"{what}: |error| {err.flatten()[worst]:.3g} > bound {bound.flatten()[worst]:.3g}"
    )


@pytest.mark.parametrize("impl", ["plain", "fused"])
@pytest.mark.parametrize("pooling,activation", VARIANTS)
def test_head_values_and_gradients_equal_the_formula(impl, pooling, activation):
    hidden, mask, weight, bias, grad_out = _inputs()
    (value, value_bound), hand = _hand(hidden, mask, weight, bias, grad_out, pooling, activation)
    out = get_head_fn(impl, pooling)(hidden, mask, weight, bias, activation=activation)
    _within(out, value, value_bound, f"{impl} {pooling}/{activation} value")
    assert bool((out[3] == 0).all())  # the row without real tokens is all zero (exact: nothing is summed or maxed)
    (out * grad_out).sum().backward()
    for tensor, (name, (exact, bound)) in zip((hidden, weight, bias), hand.items()):
        _within(tensor.grad, exact, bound, f"{impl} {pooling}/{activation} d{name}")


def test_the_log1p_relu_activation_is_the_double_log():
    x = torch.tensor([-1.0, 0.0, 0.5, 3.0])
    expected = torch.log(1 + torch.log(1 + torch.relu(x)))
    torch.testing.assert_close(
        splade_pool(x.view(1, 4, 1), torch.ones(1, 4), "sum", "log1p_relu")[0, 0], expected.sum()
    )


def test_fused_sum_head_splits_the_vocabulary_into_chunks(monkeypatch):
    import spladekit.model.fused_sum as fused_sum

    hidden, mask, weight, bias, grad_out = _inputs(seed=1, V=200)
    whole = fused_sum_splade_head(hidden, mask, weight, bias).detach()
    monkeypatch.setattr(fused_sum, "CHUNK_BUDGET_BYTES", 2 * 4 * 9 * 4 * 32)  # 32-column chunks: 7 chunks for V = 200
    assert fused_sum._columns(4, 9, 200) == 32
    (value, bound), hand = _hand(hidden, mask, weight, bias, grad_out, "sum", "relu")
    # not bit for bit: a GEMM over 32 columns may block the H-reduction otherwise than one over 200
    # (MKL_CBWR modes, other CPUs); both are within the float32 bound of the float64 formula, so of
    # each other within twice that bound
    chunked = fused_sum_splade_head(hidden, mask, weight, bias).detach()
    _within(chunked, value, bound, "chunked sum head")
    assert bool(((chunked - whole).abs().double() <= 2 * torch.as_tensor(bound, dtype=torch.float64)).all())
    (fused_sum_splade_head(hidden, mask, weight, bias) * grad_out).sum().backward()
    _within(weight.grad, *hand["weight"], "chunked dW")
    _within(hidden.grad, *hand["hidden"], "chunked dh")


def test_unknown_pooling_or_activation_is_refused():
    hidden, mask, weight, bias, _ = _inputs()
    with pytest.raises(ValueError, match="pooling 'mean'"):
        plain_splade_head(hidden, mask, weight, bias, pooling="mean")
    with pytest.raises(ValueError, match="activation 'gelu'"):
        fused_splade_head(hidden, mask, weight, bias, activation="gelu")
    with pytest.raises(ValueError, match="activation 'gelu'"):
        fused_sum_splade_head(hidden, mask, weight, bias, activation="gelu")
    with pytest.raises(ValueError, match="pooling 'cls'"):
        get_head_fn("fused", "cls")
