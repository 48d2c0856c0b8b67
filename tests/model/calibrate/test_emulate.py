"""Large-head emulations (spladekit.model.calibrate.emulate): every inflated logit checked against an
explicit formula in float64, and whether the constant 1/c undoes each emulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spladekit.model.calibrate import (
    AlreadyEmulatedError,
    emulate_large_head,
    emulation_record,
    match_norm_factor,
    rescale_mlm_head,
    rescale_record,
    row_factors,
)
from spladekit.model.calibrate.emulate import head_layer_norm
from spladekit.model.heads import find_mlm_head
from tests.mlm_families import FAMILIES, batch, tiny_mlm, tiny_tokenizer

C, SIGMA = 16.0, 0.5
# Logits are sums of H' ≤ 32 float32 products, compared in float64 after a float32 forward pass.
# Worst-case accumulation bound (Higham §3.1): K·eps32·Σ|terms| with K = 32 and Σ|terms| ≤ ~100
# (16·|W h|): 32 · 2^-23 · 100 ≈ 3.8e-4. The effects these tests separate are O(1), far above it.
ATOL = 32 * 2.0**-23 * 100


def model_logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits.double()


def normalised(model, inputs):
    """n = (a − mean) / sqrt(var + eps), the LayerNorm input normalised without gain and bias [B, L, H']."""
    head = find_mlm_head(model)
    norm = head_layer_norm(head)
    captured = {}

    def keep_input(module, args, out) -> None:  # returns None: the output is not replaced
        captured["a"] = args[0].detach().double()

    handle = norm.register_forward_hook(keep_input)
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    a = captured["a"]
    mean, var = a.mean(-1, keepdim=True), a.var(-1, unbiased=False, keepdim=True)
    return (a - mean) / torch.sqrt(var + norm.eps)


def with_ln_bias(family: str, seed: int = 0):
    """A tiny model whose head LayerNorm has a visible (random) bias β: default init is 0."""
    model = tiny_mlm(family, seed)
    norm = head_layer_norm(find_mlm_head(model))
    if norm.bias is not None:
        with torch.no_grad():
            norm.bias.copy_(torch.randn(norm.bias.shape, generator=torch.Generator().manual_seed(seed + 7)))
    return model


def parts(model):
    head = find_mlm_head(model)
    norm = head_layer_norm(head)
    W = head.weight.detach().double().clone()
    b = None if head.bias is None else head.bias.detach().double().clone()
    gamma = norm.weight.detach().double().clone()
    beta = None if norm.bias is None else norm.bias.detach().double().clone()
    return W, b, gamma, beta


def logits_by_hand(n, W, b, gamma, beta, gain=1.0, rows=None, factor=1.0):
    """factor·rows⊙(W(gain·γ⊙n + β)) + b over [B, L, V], in float64."""
    h = gain * gamma * n + (0.0 if beta is None else beta)
    z = torch.einsum("blh,vh->blv", h, W)
    if rows is not None:
        z = z * rows
    z = factor * z
    return z + (0.0 if b is None else b)


# ---------------------------------------------------------------------------------------------- factors
def test_row_factors_are_seeded_lognormal():
    f = row_factors(20_000, C, SIGMA, seed=3)
    np.testing.assert_array_equal(f, row_factors(20_000, C, SIGMA, seed=3))  # same seed, same code path
    assert not np.array_equal(f, row_factors(20_000, C, SIGMA, seed=4))
    logs = np.log(f / C) / SIGMA  # = z, standard normal
    # sample mean of 20,000 N(0,1): std 1/sqrt(20000) = 0.007; 5 sigma = 0.035. Sample std: std ≈ 0.005.
    assert abs(logs.mean()) < 0.035 and abs(logs.std() - 1.0) < 0.035
    assert abs(np.median(f) / C - 1) < 0.05  # median of a log-normal is its scale c
    assert np.array_equal(row_factors(5, 2.0, 0.0, 1), np.full(5, 2.0))  # σ = 0: every row ×c, exactly
    for bad in ((0.0, 0.5), (-1.0, 0.5), (16.0, -0.1), (float("inf"), 0.5)):
        with pytest.raises(ValueError):
            row_factors(3, *bad, seed=0)


# ---------------------------------------------------------------------------------------------- the three emulations
@pytest.mark.parametrize("family", FAMILIES)
def test_row_lognormal_scales_each_row_by_its_factor(family):
    model = tiny_mlm(family)
    W0 = find_mlm_head(model).weight.detach().double().clone()
    E0 = model.get_input_embeddings().weight.detach().clone()
    record = emulate_large_head(model, "row_lognormal", C, sigma=SIGMA, seed=5)
    f = row_factors(W0.shape[0], C, SIGMA, seed=5)
    W1 = find_mlm_head(model).weight.detach().double()
    # row j is f_j · W_j, rounded once to float32
    torch.testing.assert_close(W1, W0 * torch.from_numpy(f)[:, None], rtol=2**-23, atol=0)
    assert torch.equal(model.get_input_embeddings().weight, E0)  # the decoder was untied first
    assert record["row_factor_median"] == pytest.approx(float(np.median(f)))
    assert (
        record["row_factor_max"] == pytest.approx(float(f.max())) and emulation_record(model)["kind"] == "row_lognormal"
    )
    assert rescale_record(model) is None  # the emulation is not a rescaling: a treatment needs no force


@pytest.mark.parametrize("family", FAMILIES)
def test_ln_gain_multiplies_the_gain_only(family):
    tokenizer = tiny_tokenizer()
    model = with_ln_bias(family)
    inputs = batch(tokenizer)
    W, b, gamma, beta = parts(model)
    n = normalised(model, inputs)
    torch.testing.assert_close(model_logits(model, inputs), logits_by_hand(n, W, b, gamma, beta), atol=ATOL, rtol=0)
    emulate_large_head(model, "ln_gain", C)
    W1, b1, gamma1, beta1 = parts(model)
    assert torch.equal(W1, W) and (b is None or torch.equal(b1, b)) and (beta is None or torch.equal(beta1, beta))
    torch.testing.assert_close(gamma1, C * gamma, rtol=0, atol=0)  # ×16 is exact in binary floating point
    # z = c·W(γ⊙n) + Wβ + b
    torch.testing.assert_close(
        model_logits(model, inputs), logits_by_hand(n, W, b, gamma, beta, gain=C), atol=ATOL, rtol=0
    )


def test_uniform_multiplies_the_decoder_weight_not_the_bias():
    model = tiny_mlm("bert")
    W, b, _, _ = parts(model)
    emulate_large_head(model, "uniform", C)
    W1, b1, _, _ = parts(model)
    torch.testing.assert_close(W1, C * W, rtol=0, atol=0)  # ×16 is exact
    assert torch.equal(b1, b)


# ---------------------------------------------------------------------------------------------- does 1/c undo it?
@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_constant_inverse_undoes_uniform_but_not_row_lognormal_or_ln_gain(family):
    tokenizer = tiny_tokenizer()
    inputs = batch(tokenizer)
    original = model_logits(with_ln_bias(family), inputs)
    W, b, gamma, beta = parts(with_ln_bias(family))
    n = normalised(with_ln_bias(family), inputs)

    uniform = with_ln_bias(family)
    emulate_large_head(uniform, "uniform", C)
    rescale_mlm_head(uniform, factor=1 / C)
    torch.testing.assert_close(model_logits(uniform, inputs), original, atol=ATOL, rtol=0)

    rows = with_ln_bias(family)
    emulate_large_head(rows, "row_lognormal", C, sigma=SIGMA, seed=0)
    rescale_mlm_head(rows, factor=1 / C)
    residual = torch.from_numpy(row_factors(W.shape[0], C, SIGMA, 0) / C)  # exp(σ z_j): what 1/c leaves
    after = model_logits(rows, inputs)
    torch.testing.assert_close(after, logits_by_hand(n, W, b, gamma, beta, rows=residual), atol=ATOL, rtol=0)
    # the leftover is exp(σ z_j) − 1 times W_j h: far above float rounding
    assert (after - original).abs().max() > 100 * ATOL  # the leftover is far above the rounding bound

    gain = with_ln_bias(family)
    emulate_large_head(gain, "ln_gain", C)
    rescale_mlm_head(gain, factor=1 / C)
    after = model_logits(gain, inputs)
    # 1/c·(c·W(γ⊙n) + Wβ) + b = W(γ⊙n) + Wβ/c + b: the Wβ term is c times too small
    torch.testing.assert_close(after, logits_by_hand(n, W, b, gamma, beta / C), atol=ATOL, rtol=0)
    shift = torch.einsum("h,vh->v", beta, W) * (1 - 1 / C)
    torch.testing.assert_close(original - after, shift.expand_as(after), atol=ATOL, rtol=0)
    assert shift.abs().max() > 100 * ATOL


def test_ln_gain_without_layernorm_bias_is_undone_by_the_constant():
    """The documented limit: with β = 0 (e.g. ModernBERT's bias-free LayerNorm) ln_gain is uniform."""
    tokenizer = tiny_tokenizer()
    inputs = batch(tokenizer)
    model = tiny_mlm("bert")
    assert not head_layer_norm(find_mlm_head(model)).bias.any()  # BERT init: β = 0
    original = model_logits(model, inputs)
    emulate_large_head(model, "ln_gain", C)
    rescale_mlm_head(model, factor=1 / C)
    torch.testing.assert_close(model_logits(model, inputs), original, atol=ATOL, rtol=0)


def test_match_norm_sees_row_inflation_but_not_the_layernorm_gain():
    reference = tiny_mlm("bert")
    ref_norm = float(torch.linalg.vector_norm(reference.cls.predictions.decoder.weight.detach().double(), dim=1).mean())
    gain = with_ln_bias("bert")
    emulate_large_head(gain, "ln_gain", C)
    assert match_norm_factor(gain, reference) == pytest.approx(1.0, rel=1e-12)  # decoder untouched
    rows = tiny_mlm("bert")
    emulate_large_head(rows, "row_lognormal", C, sigma=SIGMA, seed=0)
    W = rows.cls.predictions.decoder.weight.detach().double()
    own = float(torch.linalg.vector_norm(W, dim=1).mean())
    assert match_norm_factor(rows, reference) == pytest.approx(ref_norm / own, rel=1e-9)
    # mean_j ‖f_j W_j‖ / mean_j ‖W_j‖ lies between min f and max f, so F is not 1/c exactly
    f = row_factors(W.shape[0], C, SIGMA, 0)
    assert 1 / f.max() < match_norm_factor(rows, reference) < 1 / f.min()
    assert match_norm_factor(rows, reference) != pytest.approx(1 / C, rel=1e-3)


# ---------------------------------------------------------------------------------------------- errors, saving
def test_emulation_errors():
    model = tiny_mlm("bert")
    with pytest.raises(ValueError, match="unknown emulation"):
        emulate_large_head(model, "huge")
    with pytest.raises(ValueError, match="> 0"):
        emulate_large_head(model, "uniform", 0.0)
    with pytest.raises(ValueError, match="overflows"):
        emulate_large_head(model, "uniform", 1e45)
    assert emulation_record(model) is None  # nothing changed by the refused calls
    emulate_large_head(model, "uniform", 2.0)
    with pytest.raises(AlreadyEmulatedError, match="already inflated"):
        emulate_large_head(model, "ln_gain", 2.0)


def test_emulated_model_saves_and_reloads(tmp_path):
    from transformers import AutoModelForMaskedLM

    model = with_ln_bias("bert")
    emulate_large_head(model, "row_lognormal", C, sigma=SIGMA, seed=1)
    model.save_pretrained(tmp_path)
    again = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert torch.equal(again.cls.predictions.decoder.weight, model.cls.predictions.decoder.weight)
    assert torch.equal(again.bert.embeddings.word_embeddings.weight, model.bert.embeddings.word_embeddings.weight)
    assert emulation_record(again)["seed"] == 1
