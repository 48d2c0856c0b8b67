"""SPLADE pooling against a plain Python loop over the formula w_j = max_t log(1 + ReLU(logit_tj))."""

import math

import torch

from spladekit.model.pooling import plain_splade_head, splade_max_pool


def loop_pool(logits, mask):
    B, L, V = logits.shape
    out = torch.zeros(B, V)
    for b in range(B):
        for j in range(V):
            best = 0.0
            for t in range(L):
                if mask[b, t]:
                    best = max(best, math.log1p(max(0.0, float(logits[b, t, j]))))
            out[b, j] = best
    return out


def test_pool_matches_loop_with_padding_and_negative_columns():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    logits[:, :, 2] = -1.0  # an all-negative column → weight 0
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    logits[0, 3:, :] = 100.0  # large values on padding must be ignored
    got = splade_max_pool(logits, mask)
    assert torch.allclose(got, loop_pool(logits, mask), atol=1e-6)
    assert got[:, 2].abs().max() == 0


def test_all_padding_row_is_zero():
    logits = torch.randn(1, 4, 6)
    assert splade_max_pool(logits, torch.zeros(1, 4)).abs().max() == 0


def test_bf16_logits_activation_in_float32():
    torch.manual_seed(1)
    logits = torch.randn(2, 3, 5).to(torch.bfloat16)
    mask = torch.ones(2, 3)
    got = splade_max_pool(logits, mask)
    assert got.dtype == torch.float32
    assert torch.allclose(got, loop_pool(logits.float(), mask), atol=1e-6)


def test_plain_head_is_linear_then_pool():
    torch.manual_seed(2)
    hidden, weight, bias = torch.randn(2, 4, 8), torch.randn(10, 8), torch.randn(10)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    logits = torch.einsum("blh,vh->blv", hidden, weight) + bias
    assert torch.allclose(plain_splade_head(hidden, mask, weight, bias), loop_pool(logits, mask), atol=1e-5)
