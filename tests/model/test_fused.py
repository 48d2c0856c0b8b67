"""The fused SPLADE head equals the plain head (values and gradients), on every path.

The reference is :func:`spladekit.model.pooling.plain_splade_head` (full logits, then masked max),
an independent computation; a second reference for the backward is built by hand from the formula
(dense one-hot gradient of the max at the first maximal position).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import spladekit.model.fused as fused
from spladekit.model.fused import fused_splade_head, sparse_head_backward
from spladekit.model.pooling import plain_splade_head
from tests.conftest import make_tiny_bert, make_tokenizer

SRC = Path(__file__).resolve().parents[2] / "src"


EPS32 = torch.finfo(torch.float32).eps  # 2⁻²³: float32 rounding of one operation is ≤ EPS32 / 2 relative


def _grid(t):
    """Round to multiples of 1/4 (|x| < 8 for these standard-normal draws: 5 significant bits).

    Such numbers are exact in bfloat16 and TF32 inputs too. Products of two are multiples of 1/16
    below 64, and every partial sum of H ≤ 128 of them plus a bias stays a multiple of 1/16 below
    2¹³ (17 significant bits): exactly representable in a float32 accumulator (24 bits). So every
    logit is computed exactly whatever the summation order, blocking, FMA or thread count of the
    matmul kernel: plain, fused and Triton paths see the same logits bit for bit, and ties are exact
    ties on every machine.
    """
    assert float(t.abs().max()) < 8, "grid values must stay below 8 for the exactness argument"
    return torch.round(t * 4) / 4


def _inputs(seed=0, B=5, L=11, H=8, V=70, dtype=torch.float32, bias=True):
    """Random head inputs on the exact grid of :func:`_grid`, with right/left padding, an empty row
    and all-negative columns."""
    gen = torch.Generator().manual_seed(seed)
    hidden = _grid(torch.randn(B, L, H, generator=gen, dtype=torch.float64))
    weight = _grid(torch.randn(V, H, generator=gen, dtype=torch.float64))
    b = _grid(torch.randn(V, generator=gen, dtype=torch.float64)) if bias else None
    if b is not None:
        b[:7] = -100.0  # these columns are negative at every position: weight 0, no gradient
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 6:] = 0  # right padding
    mask[2, :4] = 0  # left padding
    mask[3, :] = 0  # no real token at all
    mask[4, 3:5] = 0  # a hole
    cast = lambda t: None if t is None else t.to(dtype).requires_grad_(True)  # noqa: E731
    return cast(hidden), mask, cast(weight), cast(b), torch.rand(B, V, generator=gen)


def _value_and_grads(fn, hidden, mask, weight, bias, grad_out, **kw):
    leaves = [t for t in (hidden, weight, bias) if t is not None]
    for t in leaves:
        t.grad = None
    out = fn(hidden, mask, weight, bias, **kw)
    (out * grad_out).sum().backward()
    return out.detach(), [t.grad.clone() for t in leaves]


def _close(a, b, rtol, atol=0.0):
    torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol)


def _hand_gradients(hidden, mask, weight, bias, grad_out):
    """Exact gradients of ``sum(grad_out * head(...))`` by the formula, with their rounding bounds.

    The formula (module docstring of :mod:`spladekit.model.fused`, "Backward"): the logit gradient
    is ``grad_out[b, j] / (1 + m[b, j])`` at the first maximal position ``t*[b, j]`` where
    ``m[b, j] > 0``, 0 elsewhere; ``dh = G @ W``, ``dW = Gᵀ @ h``, ``db = Σ G``. Computed in float64
    on grid inputs (exact logits, so exact ``m`` and ``t*``). Returns ``{name: (exact, bound)}`` for
    ``hidden``, ``weight`` and ``bias``, where ``bound`` is the float32 rounding bound of any path
    that forms the same sums in another order: each of the ``K`` terms carries ≤ 3 roundings (the
    division, the product with ``grad_out``, the product with ``h`` or ``W``) and a ``K``-term sum
    adds ≤ ``K`` more (Higham, *Accuracy and Stability*, §3.1: ``|fl(Σx) − Σx| ≤ γ_K Σ|x|``), so
    ``|error| ≤ (K + 3) · EPS32/2 · Σ|terms|``, with ``K = V`` for ``dh`` and ``K = B·L`` for ``dW``, ``db``.
    """
    h, w = hidden.detach().double(), weight.detach().double()
    logits = h @ w.T + (0.0 if bias is None else bias.detach().double())
    logits = logits.masked_fill(~mask.bool()[..., None], float("-inf"))
    maxval, argmax = logits.max(dim=1)  # first maximal position, as documented by torch.max
    scale = torch.where(maxval > 0, grad_out.double() / (1 + maxval.clamp_min(0)), torch.zeros_like(maxval))
    dense = torch.zeros_like(logits).scatter_(1, argmax[:, None, :], scale[:, None, :])  # [B, L, V]
    (batch, length, vocab), u = dense.shape, EPS32 / 2
    out = {
        "hidden": (dense @ w, (vocab + 3) * u * (dense.abs() @ w.abs())),
        "weight": (
            torch.einsum("blv,blh->vh", dense, h),
            (batch * length + 3) * u * torch.einsum("blv,blh->vh", dense.abs(), h.abs()),
        ),
    }
    if bias is not None:
        out["bias"] = (dense.sum(dim=(0, 1)), (batch * length + 3) * u * dense.abs().sum(dim=(0, 1)))
    return out


def _within(got, exact, bound, what):
    """``|got − exact| ≤ bound`` elementwise (bounds from :func:`_hand_gradients`)."""
    err = (got.double() - exact).abs()
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (
        f"{what}: |error| {err.flatten()[worst]:.3g} > bound {bound.flatten()[worst]:.3g} at flat index {worst}"
    )


def _check_gradients(grads, hand, what):
    """Each gradient of (hidden, weight[, bias]) within its rounding bound of the exact formula."""
    assert len(grads) == len(hand)
    for got, (name, (exact, bound)) in zip(grads, hand.items()):
        _within(got, exact, bound, f"{what} d{name}")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("path", ["packed", "chunked"])
def test_float32_forward_and_gradients_equal_plain(monkeypatch, bias, path):
    if path == "chunked":  # the CUDA fallback, forced on CPU, with several small vocabulary chunks
        real = fused._torch_masked_max
        monkeypatch.setattr(fused, "_packed_masked_max", lambda *a: real(*a, chunk=16))
    else:
        monkeypatch.setitem(fused.CHUNK_BUDGET_BYTES, "cpu", 11 * 8 * 4)  # 32-column chunks
    h, m, w, b, g = _inputs(bias=bias)
    ref, ref_grads = _value_and_grads(plain_splade_head, h, m, w, b, g)
    out, grads = _value_and_grads(fused_splade_head, h, m, w, b, g, backend="torch")
    assert out.dtype == torch.float32 and out.shape == (5, 70)
    # exact by construction: grid inputs give exact logits on every kernel (see _grid), so both heads
    # take the same float32 maxima through the same log1p on a [5, 70] tensor
    assert torch.equal(out, ref)
    assert torch.all(out[3] == 0) and (not bias or torch.all(out[:, :7] == 0))
    assert (ref > 0).any() and (ref == 0).any()  # both active and inactive entries are exercised
    hand = _hand_gradients(h, m, w, b, g)
    _check_gradients(ref_grads, hand, "plain")  # the reference itself obeys the formula...
    _check_gradients(grads, hand, "fused")  # ...and so does the fused head, each within its rounding bound
    if bias:
        assert torch.all(grads[1][:7] == 0) and torch.all(grads[2][:7] == 0)
    assert torch.all(grads[0][3] == 0) and torch.all(grads[0][1, 6:] == 0)  # padding gets nothing


@pytest.mark.parametrize("method", ["csr", "index_add"])
def test_backward_matches_hand_formula(method):
    """d logit[b, t*, j] = g[b, j] / (1 + m[b, j]) on active entries, scattered densely by a loop."""
    h, m, w, b, g = _inputs(seed=3, dtype=torch.float64)
    logits = (h @ w.T + b).detach().masked_fill(~m.bool()[..., None], float("-inf"))
    maxval, argmax = logits.max(dim=1)
    dense = torch.zeros_like(logits)
    for bi in range(logits.shape[0]):
        for j in range(logits.shape[2]):
            if maxval[bi, j] > 0:
                dense[bi, argmax[bi, j], j] = g[bi, j] / (1 + maxval[bi, j])
    d_h, d_w, d_b = sparse_head_backward(
        g, maxval.float(), argmax.int(), h.detach(), w.detach(), (True, True, True), chunk=7, method=method
    )
    hand = _hand_gradients(h, m, w, b, g)  # its rounding bounds: the backward accumulates in float32
    for got, want, name in (
        (d_h, torch.einsum("blv,vh->blh", dense, w.detach()), "hidden"),
        (d_w, torch.einsum("blv,blh->vh", dense, h.detach()), "weight"),
        (d_b, dense.sum(dim=(0, 1)), "bias"),
    ):
        torch.testing.assert_close(
            hand[name][0], want, rtol=1e-12, atol=1e-12
        )  # the loop and the scatter agree (float64)
        _within(got, want, hand[name][1], f"{method} d{name}")


def test_ties_first_position_and_gradient_mass():
    """Duplicate positions tie exactly: same value; gradient goes to the first; total mass equal."""
    h, m, w, b, g = _inputs(seed=5)
    with torch.no_grad():
        h[:, 7] = h[:, 5]  # positions 5, 7 and 9 hold the same state: every column ties between them.
        h[:, 9] = h[:, 5]  # The ties are exact on every kernel because grid inputs give exact logits
    m[4, :] = 1  # (see _grid); identical rows alone would not do: no BLAS promises equal rows equal bits
    ref, (ref_h, ref_w, ref_b) = _value_and_grads(plain_splade_head, h, m, w, b, g)
    out, (got_h, got_w, got_b) = _value_and_grads(fused_splade_head, h, m, w, b, g, backend="torch")
    assert torch.equal(out, ref)  # exact by construction: the same exact maxima through the same log1p
    hand = _hand_gradients(h, m, w, b, g)  # the gradient at the first maximal position
    _check_gradients([got_h, got_w, got_b], hand, "fused")
    _check_gradients([ref_h, ref_w, ref_b], hand, "plain")
    bound = hand["hidden"][1].sum(dim=1)  # a sum of per-position bounds bounds the error of the sum
    _within(got_h.sum(dim=1), ref_h.sum(dim=1).double(), 2 * bound, "mass per sequence")  # two paths: 2×
    assert torch.all(got_h[:, 7] == 0) and torch.all(got_h[:, 9] == 0)  # first position wins
    assert torch.all(ref_h[:, 7] == 0) and torch.all(ref_h[:, 9] == 0)  # as torch.max documents
    _, argmax = fused._packed_masked_max(h.detach(), m, w.detach(), b.detach(), True)
    assert not torch.isin(argmax, torch.tensor([7, 9], dtype=torch.int32)).any()


@pytest.mark.parametrize("mode", ["bf16-tensors", "autocast"])
def test_bf16_within_bf16_tolerance(mode):
    h, m, w, b, g = _inputs(seed=7, B=5, L=9, H=16, V=64)
    if mode == "bf16-tensors":
        h, w, b = (t.detach().to(torch.bfloat16).requires_grad_(True) for t in (h, w, b))
        ref, ref_grads = _value_and_grads(plain_splade_head, h, m, w, b, g)
        out, grads = _value_and_grads(fused_splade_head, h, m, w, b, g)
        assert all(t.dtype == torch.bfloat16 for t in grads)
    else:  # float32 parameters, bf16 compute, as in mixed-precision training
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref, ref_grads = _value_and_grads(plain_splade_head, h, m, w, b, g)
            out, grads = _value_and_grads(fused_splade_head, h, m, w, b, g)
        assert all(t.dtype == torch.float32 for t in grads)
    assert out.dtype == torch.float32
    # bfloat16 has an 8-bit significand, eps_bf16 = 2⁻⁷ ≈ 7.8e-3. Values: each path rounds a logit to
    # bf16 at most once (≤ eps_bf16/2 each), two paths: rtol = 2·eps_bf16 ≈ 1.6e-2 (atol for w ≈ 0)
    _close(out, ref, rtol=1.6e-2, atol=1e-2)
    assert (ref > 0).sum() > 20
    for got, want in zip(grads, ref_grads):  # gradients: also the bf16 rounding of the scaled logit
        _close(got, want, rtol=3e-2, atol=3e-2)  # gradient and of the product's output: ≈ 4·eps_bf16


def test_no_grad_path_equals_grad_path_and_keeps_no_graph():
    h, m, w, b, _ = _inputs(seed=9)
    with torch.no_grad():
        fast = fused_splade_head(h, m, w, b)
    assert not fast.requires_grad
    # exact by construction: both paths form the same logits chunks with the same kernel and take
    # their maximum (amax vs max(dim): the same maximal float), then the same log1p
    assert torch.equal(fast, fused_splade_head(h, m, w, b).detach())


def test_bad_input_raises():
    h, m, w, b, _ = _inputs()
    with pytest.raises(ValueError, match="backend"):
        fused_splade_head(h, m, w, b, backend="cuda-magic")
    with pytest.raises(ValueError, match="weight"):
        fused_splade_head(h, m, w[:, :3], b)
    with pytest.raises(ValueError, match="attention_mask"):
        fused_splade_head(h, m[:, :4], w, b)
    with pytest.raises(ValueError, match="bias"):
        fused_splade_head(h, m, w, b[:5])
    with pytest.raises(ValueError, match="backward method"):
        sparse_head_backward(
            torch.ones(5, 70),
            torch.ones(5, 70),
            torch.zeros(5, 70, dtype=torch.int32),
            h.detach(),
            w.detach(),
            (True, True, True),
            method="dense",
        )


# --------------------------------------------------------------------- the whole encoder
def _tiny_encoder(tmp_path, head_impl):
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.splade import SpladeModel

    tokenizer = make_tokenizer(tmp_path)
    return SpladeEncoder(SpladeModel(make_tiny_bert(len(tokenizer)), head_impl), tokenizer, batch_size=3, device="cpu")


@pytest.mark.slow
def test_encoder_default_is_fused_and_vectors_equal_plain(tmp_path):
    from spladekit.model.splade import SpladeModel, default_head_impl

    assert default_head_impl() == "fused"
    default = _tiny_encoder(tmp_path, None)
    assert default.model.head_impl == "fused"
    plain = _tiny_encoder(tmp_path, "plain")
    texts = ["the cat sat on the mat", "sparse retrieval", "a query", "w1 w2 w3 w4 w5 w6 w7 w8 w9 document"]
    a = default.encode(texts, max_length=16)
    c = plain.encode(texts, max_length=16)
    assert a.nnz > 0 and a.shape == c.shape == (4, default.vocab_size)
    # the two heads see the same hidden states and form the logits with different matmul shapes
    # (packed rows vs the padded batch): logit = Σ over H = 32 products, error ≤ 32·EPS32/2·Σ|terms|
    # per head; w = log1p(m) has derivative ≤ 1. Σ|terms| ≤ |h|·|W_j| is of the order of the largest
    # logit, so |Δw| ≤ 32·EPS32·max w ≈ 3.8e-6·max w; the test allows 1e-5·max w
    assert abs(a - c).max() <= 1e-5 * abs(c).max()
    # the same active terms: only a max logit within rounding (≤ 32·EPS32/2·0.41 ≈ 8e-7) of 0 could
    # flip one. On these seeded inputs the smallest |max logit| is 9.6e-5 (the [PAD] column is exactly
    # 0 on both paths: its embedding row is zero and BERT's bias starts at 0), a 100× margin
    assert (a.indptr == c.indptr).all() and (a.indices == c.indices).all()

    # training: gradients of every parameter agree (float32), the model forward as the trainer calls it
    batch = default.tokenize(texts, 16)
    grads = {}
    for impl in ("fused", "plain"):
        model = SpladeModel(_tiny_encoder(tmp_path, impl).model.mlm, impl).train()
        model.zero_grad()
        weights = model(batch["input_ids"], batch["attention_mask"])
        (weights.sum(dim=1).pow(2).mean() + weights[0] @ weights[1]).backward()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["fused"].keys() == grads["plain"].keys() and len(grads["plain"]) > 5
    # The two heads' backward sums are formed in different orders (CSR products vs dense matmuls),
    # and the difference travels through the whole network, where each parameter gradient is a sum
    # over the B·L = 64 token positions of terms that may cancel: an entry near 0 can carry the
    # rounding of terms as large as the tensor's largest entry. So the error is bounded per tensor:
    # |Δ| ≤ K·EPS32·max|grad| with K = B·L = 64 terms (plus the few roundings per term, well inside
    # 64·EPS32 ≈ 7.6e-6). Measured on AMD EPYC, every BLAS path: ≤ 3e-7·max|grad|.
    # attention.self.key.bias is zero in exact arithmetic (softmax(q·(k + b)) does not depend on the
    # shift q·b): both heads compute rounding noise, compared at the scale of the attention block.
    attention = max(float(g.abs().max()) for n, g in grads["plain"].items() if ".attention.self." in n)
    for name, want in grads["plain"].items():
        scale = attention if name.endswith("attention.self.key.bias") else float(want.abs().max())
        _close(grads["fused"][name], want, rtol=0, atol=64 * EPS32 * scale)


# --------------------------------------------------------------------- Triton kernel (interpreter)
_TRITON_SCRIPT = textwrap.dedent(
    """
    import torch
    from spladekit.model.fused import fused_splade_head, _torch_masked_max
    from spladekit.model.pooling import plain_splade_head
    from spladekit.model.triton_head import triton_masked_max
    from tests.model.test_fused import _check_gradients, _grid, _hand_gradients

    gen = torch.Generator().manual_seed(0)
    B, L, H, V = 4, 19, 20, 37  # not multiples of the 16-wide tiles: exercises the edge masks
    # grid inputs (see _grid): exact logits in the kernel's tl.dot and in torch alike, so the ties
    # below are exact and the argmax of both paths equal by construction
    h = _grid(torch.randn(B, L, H, generator=gen))
    h[:, 12] = h[:, 3]  # ties between positions 3 and 12 (different L tiles)
    w = _grid(torch.randn(V, H, generator=gen))
    b = _grid(torch.randn(V, generator=gen))
    b[:5] = -100.0
    m = torch.ones(B, L, dtype=torch.long)
    m[1, 10:] = 0; m[2, :] = 0; m[3, :5] = 0
    mx, am = triton_masked_max(h, m, w, b)
    rmx, ram = _torch_masked_max(h, m, w, b, True)
    real = torch.isfinite(rmx)
    torch.testing.assert_close(mx, rmx, rtol=1e-5, atol=1e-6)
    assert torch.equal(am[real], ram[real]), "argmax differs"
    assert (am[0] == 3).any() and not (am[0] == 12).any()  # ties: the first position wins
    mx2, none = triton_masked_max(h, m, w, None, with_argmax=False)
    torch.testing.assert_close(mx2, _torch_masked_max(h, m, w, None, False)[0], rtol=1e-5, atol=1e-6)
    assert none is None
    g = torch.rand(B, V, generator=gen)
    res = {}
    for name, fn, kw in (("plain", plain_splade_head, {}), ("triton", fused_splade_head, {"backend": "triton"})):
        hh, ww, bb = (t.clone().requires_grad_(True) for t in (h, w, b))
        out = fn(hh, m, ww, bb, **kw)
        (out * g).sum().backward()
        res[name] = (out.detach(), hh.grad, ww.grad, bb.grad)
    torch.testing.assert_close(res["triton"][0], res["plain"][0], rtol=1e-5, atol=1e-7)
    hand = _hand_gradients(h, m, w, b, g)  # exact gradients and their float32 rounding bounds
    for name in res:
        _check_gradients(res[name][1:], hand, name)
    hb, wb, bbf = h[:2, :17].bfloat16(), w.bfloat16(), b.bfloat16()
    mb = m[:2, :17]
    torch.testing.assert_close(
        fused_splade_head(hb, mb, wb, bbf, backend="triton"), plain_splade_head(hb, mb, wb, bbf), rtol=1.6e-2, atol=1e-2
    )
    print("TRITON-OK")
    """
)


@pytest.mark.slow
def test_triton_kernel_in_interpreter():
    pytest.importorskip("triton", reason="triton is not installed: the Triton kernel cannot be checked")
    path = os.pathsep.join([str(SRC), str(SRC.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(
        os.environ, TRITON_INTERPRET="1", PYTHONPATH=path
    )  # the root too: the script imports tests.model.test_fused
    proc = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "TRITON-OK" in proc.stdout, proc.stdout + proc.stderr


def test_head_switch_by_environment(monkeypatch):
    from spladekit.model.splade import default_head_impl

    monkeypatch.setenv("SPLADEKIT_HEAD", "plain")
    assert default_head_impl() == "plain"
    monkeypatch.setenv("SPLADEKIT_HEAD", "fused")
    assert default_head_impl() == "fused"
    monkeypatch.setenv("SPLADEKIT_HEAD", "dense")
    with pytest.raises(ValueError, match="dense"):
        default_head_impl()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")
@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_paths_equal_plain(backend, dtype):
    if backend == "triton":
        pytest.importorskip("triton", reason="triton is not installed")
    h, m, w, b, g = _inputs(seed=11, B=6, L=70, H=96, V=1000)
    h, w, b = (t.detach().to("cuda", dtype).requires_grad_(True) for t in (h, w, b))
    m, g = m.cuda(), g.cuda()
    ref, ref_grads = _value_and_grads(plain_splade_head, h, m, w, b, g)
    out, grads = _value_and_grads(fused_splade_head, h, m, w, b, g, backend=backend)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    _close(out, ref, **tol)
    gtol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    for got, want in zip(grads, ref_grads):
        _close(got, want, **gtol)
