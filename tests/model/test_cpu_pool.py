"""The CPU fused head's work split (threads over work units) equals the plain head at every setting.

Reference: :func:`spladekit.model.pooling.plain_splade_head` (full logits, then masked max). The
inputs here are ordinary float32 normals (not the exact grid of tests/model/test_fused.py), so the two heads'
logits differ by rounding; the bound is derived below (:func:`_bound`).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import spladekit.model.fused as fused
from spladekit.model.cpu_pool import run_units
from spladekit.model.pooling import plain_splade_head

EPS32 = torch.finfo(torch.float32).eps
SRC = Path(__file__).resolve().parents[2] / "src"


def _inputs(B, L, H, V, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=gen)
    weight = torch.randn(V, H, generator=gen) / H**0.5
    bias = torch.randn(V, generator=gen)
    mask = torch.ones(B, L, dtype=torch.long)
    if B > 1:
        mask[1, L // 2 :] = 0  # right padding
    if B > 2:
        mask[2, :] = 0  # a row without any real token
    if B > 3:
        mask[3, 1:3] = 0  # a hole
    return hidden, mask, weight, bias


def _bound(hidden, mask, weight, bias):
    """Float32 bound on |fused − plain| per ``[b, j]``.

    Each head forms ``logit = Σ_k h_k W_jk + b_j`` (H products, H additions) in float32, in its own
    order: |fl − exact| ≤ γ_{H+1} (Σ_k |h_k W_jk| + |b_j|) ≤ (H + 1)·u·S with u = EPS32/2 (Higham,
    *Accuracy and Stability*, §3.1). The max over positions of values each within δ of the exact ones
    is within δ of the exact max, and log1p∘ReLU is 1-Lipschitz, so two heads differ by at most
    2·(H + 1)·u·max_t S[b, t, j]. Computed in float64.
    """
    h, w = hidden.double().abs(), weight.double().abs()
    s = h @ w.T + bias.double().abs()  # [B, L, V]
    s = s.masked_fill(~mask.bool()[..., None], 0.0).amax(dim=1)
    return 2 * (hidden.shape[-1] + 1) * (EPS32 / 2) * s


SETTINGS = [(1, None), (2, None), (2, 32), (3, 7), (2, 10_000)]  # (threads, vocabulary columns per product)


@pytest.mark.parametrize(
    "shape",
    [(5, 23, 16, 1001), (1, 9, 24, 37), (4, 64, 32, 2049), (3, 1, 8, 33)],
    ids=["odd-vocab", "batch-1", "longer", "length-1"],
)
@pytest.mark.parametrize("threads,chunk", SETTINGS)
def test_cpu_split_equals_plain_within_float32_bound(shape, threads, chunk):
    hidden, mask, weight, bias = _inputs(*shape)
    with torch.no_grad():
        ref = plain_splade_head(hidden, mask, weight, bias)
        maxval, argmax = fused._packed_masked_max(hidden, mask, weight, bias, True, chunk=chunk, threads=threads)
        maxval_only, none = fused._packed_masked_max(hidden, mask, weight, bias, False, chunk=chunk, threads=threads)
    assert none is None
    got = torch.log1p(maxval.clamp_min(0.0))
    err = (got.double() - ref.double()).abs()
    assert bool((err <= _bound(hidden, mask, weight, bias)).all()), float(err.max())
    # the argmax and the amax path form the same products in separate calls: equal on most BLAS paths,
    # but MKL's conditional-numerical-reproducibility modes (MKL_CBWR) may round them differently (output
    # alignment), so the derived bound, not equality
    assert bool(((maxval - maxval_only).abs().nan_to_num(0.0).double() <= _bound(hidden, mask, weight, bias)).all())
    empty = ~mask.bool().any(dim=1)
    assert torch.all(torch.isneginf(maxval[empty])) and torch.all(got[empty] == 0)
    # the argmax is a real position holding the maximum (recomputed here in float64 from that position)
    real = ~empty
    assert bool(mask[real].gather(1, argmax[real].long()).bool().all())
    at = (
        torch.einsum(
            "bvh,vh->bv",
            hidden[real].double().gather(1, argmax[real].long()[..., None].expand(-1, -1, shape[2])),
            weight.double(),
        )
        + bias.double()
    )
    assert bool(((at - maxval[real].double()).abs() <= _bound(hidden, mask, weight, bias)[real]).all())


@pytest.mark.parametrize("threads", [2, 3])
def test_thread_count_keeps_values_within_the_bound(threads):
    """Worker threads vs one thread: every unit is the same sequence of single-threaded products (same
    chunk boundaries), equal bit for bit on plain MKL/OpenBLAS, but not promised under MKL_CBWR, so the
    derived bound; where the argmax differs, both positions hold the maximum within that bound."""
    hidden, mask, weight, bias = _inputs(6, 40, 32, 3001, seed=4)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one, one_arg = fused._packed_masked_max(hidden, mask, weight, bias, True, threads=1)
    finally:
        torch.set_num_threads(before)
    many, many_arg = fused._packed_masked_max(hidden, mask, weight, bias, True, threads=threads)
    bound = _bound(hidden, mask, weight, bias)
    assert bool(((one - many).abs().nan_to_num(0.0).double() <= bound).all())
    real = mask.bool().any(dim=1)
    h64, w64 = hidden[real].double(), weight.double()
    at = [
        torch.einsum("bvh,vh->bv", h64.gather(1, a[real].long()[..., None].expand(-1, -1, h64.shape[2])), w64)
        for a in (one_arg, many_arg)
    ]
    assert bool(((at[0] - at[1]).abs() <= bound[real]).all())
    assert torch.get_num_threads() == before  # the caller's own setting is untouched


@pytest.mark.parametrize("threads", [1, 2])
def test_worker_threads_under_inference_mode(threads):
    """Grad and inference mode are thread-local in torch: under ``torch.inference_mode()`` the caller's
    output rows are inference tensors, which the workers may write only in inference mode too (this
    raised "Inplace update to inference tensor outside InferenceMode" at 2 threads). The values are
    those computed without inference mode at 1 thread, within the derived float32 bound."""
    hidden, mask, weight, bias = _inputs(5, 24, 16, 1001, seed=7)
    reference, _ = fused._packed_masked_max(hidden, mask, weight, bias, False, threads=1)
    with torch.inference_mode():
        got, _ = fused._packed_masked_max(hidden, mask, weight, bias, False, threads=threads)
    bound = _bound(hidden, mask, weight, bias)
    assert bool(((reference - got).abs().nan_to_num(0.0).double() <= bound).all())
    assert bool((torch.isinf(reference) == torch.isinf(got)).all())  # the row without real tokens stays -inf


def test_fused_head_gradients_through_workers(monkeypatch):
    """The autograd path (argmax saved for the backward) at 1 and 2 threads, on the exact grid inputs of
    tests/model/test_fused.py: every logit is exact on every kernel (see its _grid), so values equal the plain
    head's bit for bit and gradients obey the hand formula within its float32 bounds."""
    from tests.model.test_fused import _check_gradients, _hand_gradients
    from tests.model.test_fused import _inputs as grid_inputs

    hidden, mask, weight, bias, grad_out = grid_inputs(seed=2, B=5, L=17, H=16, V=515)
    want = plain_splade_head(hidden.detach(), mask, weight.detach(), bias.detach())
    hand = _hand_gradients(hidden, mask, weight, bias, grad_out)
    for threads in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        h, w, b = (t.detach().clone().requires_grad_(True) for t in (hidden, weight, bias))
        out = fused.fused_splade_head(h, mask, w, b, backend="torch")
        (out * grad_out).sum().backward()
        assert torch.equal(out.detach(), want)  # exact logits: same maxima, same log1p
        _check_gradients([h.grad, w.grad, b.grad], hand, f"{threads} threads")


def test_row_groups_by_hand():
    """Consecutive rows up to the token limit; a row over it alone; the order kept (worked by hand:
    5 + 10 = 15 ≤ 20, + 300 > 20; 300 alone; 3 + 3 + 14 = 20 ≤ 20; 7 starts a new group)."""
    counts = [5, 10, 0, 300, 3, 3, 14, 7]
    rows = [r for r, n in enumerate(counts) if n]  # row 2 has no real token: not in any group
    assert fused._row_groups(rows, counts, limit=20) == [[0, 1], [3], [4, 5, 6], [7]]
    assert fused._row_groups(rows, counts, limit=1) == [[r] for r in rows]  # row by row
    assert fused._row_groups([], counts) == []


@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_rows_equal_row_by_row_within_the_bound(monkeypatch, threads):
    """Many short rows of different lengths (queries), with rows without tokens between them: the
    grouped products (several rows' tokens in one product) against each row alone (GROUP_TOKENS = 1)
    and against the plain head, within the derived float32 bound (other product shapes round
    differently); the argmax of the grouped path is a real position of its own row holding the max."""
    B, L, H, V = 14, 12, 16, 1001
    hidden, _, weight, bias = _inputs(B, L, H, V, seed=9)
    lengths = torch.randint(1, L + 1, (B,), generator=torch.Generator().manual_seed(3))
    lengths[[4, 9]] = 0  # rows without real tokens inside groups
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    assert (
        len(fused._row_groups([r for r in range(B) if lengths[r]], lengths.tolist(), fused.GROUP_TOKENS)) < B - 2
    )  # grouped
    bound = _bound(hidden, mask, weight, bias)
    with torch.no_grad():
        plain = plain_splade_head(hidden, mask, weight, bias)
        grouped, grouped_arg = fused._packed_masked_max(hidden, mask, weight, bias, True, threads=threads)
        grouped_only, _ = fused._packed_masked_max(hidden, mask, weight, bias, False, threads=threads)
        monkeypatch.setattr(fused, "GROUP_TOKENS", 1)
        alone, _ = fused._packed_masked_max(hidden, mask, weight, bias, False, threads=threads)
    for got in (grouped, grouped_only):
        assert bool(((got - alone).abs().nan_to_num(0.0).double() <= bound).all())
        assert bool(((torch.log1p(got.clamp_min(0.0)) - plain).abs().double() <= bound).all())
    empty = lengths == 0
    assert torch.all(torch.isneginf(grouped[empty])) and torch.all(torch.isneginf(grouped_only[empty]))
    real = ~empty
    assert bool(mask[real].gather(1, grouped_arg[real].long()).bool().all())  # a real token of its own row
    at = (
        torch.einsum(
            "bvh,vh->bv",
            hidden[real].double().gather(1, grouped_arg[real].long()[..., None].expand(-1, -1, H)),
            weight.double(),
        )
        + bias.double()
    )
    assert bool(((at - grouped[real].double()).abs() <= bound[real]).all())


def test_errors_in_a_worker_reach_the_caller():
    seen = []

    def work(unit):
        seen.append(unit)
        if unit == 3:
            raise KeyError("unit 3")

    with pytest.raises(KeyError, match="unit 3"):
        run_units(work, range(50), threads=2)
    assert 3 in seen


def test_workers_leave_torch_thread_default_alone():
    """A thread started after the workers gets torch's usual intra-op thread count, not the workers' 1."""
    script = textwrap.dedent(
        """
        import threading, torch
        import spladekit.model.fused as fused
        torch.set_num_threads(2)
        h, m, w = torch.randn(4, 8, 8), torch.ones(4, 8, dtype=torch.long), torch.randn(300, 8)
        fused._packed_masked_max(h, m, w, None, False, chunk=32, threads=3)
        seen = []
        t = threading.Thread(target=lambda: seen.append(torch.get_num_threads())); t.start(); t.join()
        print("COUNTS", torch.get_num_threads(), seen[0])
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert "COUNTS 2 2" in proc.stdout, proc.stdout + proc.stderr


def _tiny_splade(seed=0):
    from spladekit.model.splade import SpladeModel
    from tests.conftest import make_tiny_bert

    return SpladeModel(make_tiny_bert(301, seed), head_impl="fused")


def _batch(B, L, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 301, (B, L), generator=gen)
    lengths = torch.randint(1, L + 1, (B,), generator=gen)
    lengths[0] = L // 2  # no row is full length in the first slice: its trailing columns are dropped
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()  # right padding
    return ids * mask, mask


def test_slices_at_two_threads_equal_each_slice_alone(monkeypatch):
    """CPU inference at 2 threads runs the whole forward on slices of SLICE_ROWS rows in the workers.
    Each slice's rows equal the same slice (trimmed to its last real column) run at one thread on the
    calling thread: the same operations on the same shapes, single-threaded both times, so equal bit
    for bit (torch.equal is exact by construction here)."""
    import spladekit.model.splade as splade

    model = _tiny_splade()
    ids, mask = _batch(11, 40)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        calls = []
        real_slices = splade.SpladeModel._forward_slices
        monkeypatch.setattr(
            splade.SpladeModel, "_forward_slices", lambda self, *a: calls.append(1) or real_slices(self, *a)
        )
        with torch.no_grad():
            got = model(ids, mask)
        assert calls  # the sliced path ran
        torch.set_num_threads(1)
        rows = max(1, min(splade.SLICE_ROWS, -(-11 // 4)))
        with torch.no_grad():
            for lo in range(0, 11, rows):
                m = mask[lo : lo + rows]
                length = int(m.sum(dim=1).max())
                want = model._forward(ids[lo : lo + rows, :length], m[:, :length])
                assert torch.equal(got[lo : lo + rows], want), lo
    finally:
        torch.set_num_threads(before)


def test_sliced_batch_equals_whole_batch_within_float32_rounding():
    """Against the whole padded batch at one thread (other product shapes, hence other float32
    rounding in the backbone): weights agree to 1e-4 relative to the largest (the backbone's two
    layers of 32-wide float32 dot products move each value by a few ulps; 1e-4 is far above that
    and far below any real difference, e.g. a padding column that leaked into attention)."""
    model = _tiny_splade(seed=3)
    ids, mask = _batch(9, 33, seed=1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.no_grad():
            whole = model(ids, mask)
        torch.set_num_threads(2)
        with torch.no_grad():
            sliced = model(ids, mask)
    finally:
        torch.set_num_threads(before)
    assert float((whole - sliced).abs().max()) <= 1e-4 * float(whole.abs().max())


def test_training_and_short_inputs_do_not_slice(monkeypatch):
    """With autograd on (training), and for inputs of at most SHORT_TOKENS positions (a query), the
    forward is the ordinary one; a short input runs at one torch thread and the caller's count is back after."""
    import spladekit.model.splade as splade

    model = _tiny_splade()
    monkeypatch.setattr(splade.SpladeModel, "_forward_slices", lambda *a: pytest.fail("sliced"))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ids, mask = _batch(6, 20)
        out = model(ids, mask)  # grad enabled: training path
        assert out.requires_grad
        seen = []
        real = splade.SpladeModel._forward
        monkeypatch.setattr(
            splade.SpladeModel, "_forward", lambda self, *a: seen.append(torch.get_num_threads()) or real(self, *a)
        )
        with torch.no_grad():
            model(*_batch(1, splade.SHORT_TOKENS))
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
