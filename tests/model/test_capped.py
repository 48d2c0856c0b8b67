"""A cap on each position's expansion (``position_top_k``): the plain and fused heads (max and sum
pooling) equal a dense computation by hand — each position's ``k`` largest logits, then the pooling —
and their gradients equal autograd's on that dense form.

The dense form is written here in float64, independently of the heads: ``τ_t`` = the ``k``-th largest
logit of position ``t`` (``torch.sort``), logits below it ``-inf`` (the threshold rule of
:mod:`spladekit.model.pooling`: ties at ``τ_t`` all kept), then the masked max (or sum) of
``log(1 + ReLU(·))``. Two kinds of inputs:

- grid inputs (:func:`test_fused._grid`): every logit exact in float32 and bfloat16 on every kernel,
  with exact ties, so the selection, the maxima and the vectors are exact (``torch.equal``) and the
  capped search's second pass (ties at ``τ``) runs;
- continuous inputs: no ties, the one-pass search; float32 logits then differ from float64 by at
  most ``γ_{H+1} (Σ_i |h_i W_ji| + |b_j|)`` (Higham, §3.1), asserted to be below half of every
  position's gap between its ``k``-th and ``(k+1)``-th logit (so the selection is exact), and the
  vectors within that bound plus one rounding of ``log1p`` (``|d log1p(m)| ≤ |dm|/(1+m)``).
"""

from __future__ import annotations

import pytest
import torch

import spladekit.model.capped as capped
import spladekit.model.fused as fused
from spladekit.model.fused import fused_splade_head
from spladekit.model.fused_sum import fused_sum_splade_head
from spladekit.model.pooling import plain_splade_head
from tests.model.test_fused import EPS32, _grid

K_VALUES = (1, 3, 12)


def _inputs(seed=0, B=4, L=9, H=8, V=70, grid=True, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=gen, dtype=torch.float64)
    weight = torch.randn(V, H, generator=gen, dtype=torch.float64)
    bias = torch.randn(V, generator=gen, dtype=torch.float64)
    if grid:
        hidden, weight, bias = _grid(hidden), _grid(weight), _grid(bias)
        weight[11::2], bias[11::2] = weight[10:-1:2], bias[10:-1:2]  # duplicated decoder rows: exact ties
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 5:] = 0  # right padding
    mask[2, :] = 0  # no real token
    mask[3, 2:4] = 0  # a hole
    leaf = lambda t: t.to(dtype).requires_grad_(True)  # noqa: E731
    return leaf(hidden), mask, leaf(weight), leaf(bias), torch.rand(B, V, generator=gen, dtype=torch.float64)


def dense_capped(hidden, mask, weight, bias, k, pooling="max"):
    """The dense form by hand, float64, differentiable: the threshold rule, then the pooling."""
    logits = hidden.double() @ weight.double().T + bias.double()  # [B, L, V]
    tau = torch.sort(logits.detach(), dim=-1, descending=True).values[..., k - 1 : k]
    capped_logits = logits.masked_fill(logits.detach() < tau, float("-inf"))
    real = mask.bool().unsqueeze(-1)
    if pooling == "max":
        pooled = capped_logits.masked_fill(~real, float("-inf")).max(dim=1).values  # ties: first position
        return torch.log1p(torch.relu(pooled))
    return (torch.log1p(torch.relu(capped_logits)) * real).sum(dim=1)


def heads(pooling):
    """(name, head) pairs: the plain head and the fused head of ``pooling``."""
    plain = lambda *a, **kw: plain_splade_head(*a, pooling=pooling, **kw)  # noqa: E731
    fused_head = (
        (lambda *a, **kw: fused_splade_head(*a, backend="torch", **kw)) if pooling == "max" else fused_sum_splade_head
    )
    return [("plain", plain), ("fused", fused_head)]


def _value_and_grads(fn, hidden, mask, weight, bias, grad_out, **kw):
    for t in (hidden, weight, bias):
        t.grad = None
    out = fn(hidden, mask, weight, bias, **kw)
    (out.double() * grad_out).sum().backward()
    return out.detach(), [t.grad.double().clone() for t in (hidden, weight, bias)]


@pytest.fixture()
def count_second_passes(monkeypatch):
    calls = []
    real = capped._at_least
    monkeypatch.setattr(capped, "_at_least", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setitem(capped.CHUNK_BUDGET_BYTES, "cpu", 30 * 4 * 16)  # ≤ 30 tokens × 16 columns: 5 chunks of V = 70
    return calls


@pytest.mark.parametrize("pooling", ["max", "sum"])
@pytest.mark.parametrize("k", K_VALUES)
def test_grid_inputs_equal_the_dense_form_exactly_with_ties(count_second_passes, pooling, k):
    h, m, w, b, g = _inputs(grid=True)
    want = dense_capped(h.detach(), m, w.detach(), b.detach(), k, pooling)
    tau = torch.sort(h.detach().double() @ w.detach().double().T + b.detach().double(), dim=-1, descending=True).values
    assert bool((tau[..., k - 1] == tau[..., k])[m.bool()].any()), "these inputs must tie at some τ (second pass)"
    for name, head in heads(pooling):
        out = head(h, m, w, b, position_top_k=k).detach()
        if pooling == "max":  # exact logits, the same float32 maxima, the same log1p on float32
            assert torch.equal(out, want.float()), name
        else:  # ≤ L terms, each log1p within 2 ulp (4u), summed in float32 (L·u more, Higham §3.1)
            assert torch.allclose(out.double(), want, rtol=(9 + 4) * EPS32 / 2, atol=0), name
        assert torch.all(out[2] == 0)  # a row without real tokens
    assert count_second_passes, "ties at τ must take the capped search's second pass"


@pytest.mark.parametrize("pooling", ["max", "sum"])
@pytest.mark.parametrize("k", K_VALUES)
def test_continuous_inputs_equal_the_dense_form_within_float32(count_second_passes, pooling, k):
    h, m, w, b, _ = _inputs(seed=3, grid=False)
    h64, w64, b64 = h.detach().double(), w.detach().double(), b.detach().double()
    logits = h64 @ w64.T + b64
    bound = (h64.shape[-1] + 1) * EPS32 / 2 * (h64.abs() @ w64.abs().T + b64.abs())  # |fl(z) − z| per logit
    ordered = torch.sort(logits, dim=-1, descending=True).values
    gap = (ordered[..., k - 1] - ordered[..., k])[m.bool()]
    assert bool((gap > 2 * bound.max()).all()), "the selection must not depend on float32 rounding"
    want = dense_capped(h64, m, w64, b64, k, pooling)
    per_text = bound.max() * (1 if pooling == "max" else m.shape[1])  # a sum adds ≤ L such errors
    tol = per_text + 2 * EPS32 * float(want.abs().max()) * (1 if pooling == "max" else m.shape[1])
    for name, head in heads(pooling):
        out = head(h, m, w, b, position_top_k=k).detach().double()
        assert float((out - want).abs().max()) <= tol, (name, float((out - want).abs().max()), tol)
        assert torch.equal(out > 0, want > 0), name
    assert not count_second_passes, "without ties the search is one pass"


@pytest.mark.parametrize("pooling", ["max", "sum"])
@pytest.mark.parametrize("k", K_VALUES)
def test_gradients_equal_autograd_on_the_dense_form(pooling, k):
    """Grid inputs (exact logits, selection and maxima): each gradient of the float32 heads within the
    float32 bound of autograd's float64 gradient of :func:`dense_capped`: the logit gradient ``G`` is
    exact up to ≤ 3 roundings, and ``dh = G W``, ``dW = Gᵀ h``, ``db = Σ G`` sum ``K`` terms (``K = V``
    or ``B·L``), so ``|error| ≤ (K + 3)·u·Σ|terms|`` (Higham §3.1), as in ``tests/model/test_fused.py``."""
    h, m, w, b, g = _inputs(seed=1, grid=True)
    h64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (h, w, b))
    logits = h64 @ w64.T + b64
    logits.retain_grad()
    out = dense_capped_from_logits(logits, m, k, pooling)
    (out * g).sum().backward()
    G = logits.grad  # [B, L, V]
    (batch, length, vocab), u = G.shape, EPS32 / 2
    bounds = [
        (vocab + 3) * u * (G.abs() @ w64.detach().abs()),
        (batch * length + 3) * u * torch.einsum("blv,blh->vh", G.abs(), h64.detach().abs()),
        (batch * length + 3) * u * G.abs().sum(dim=(0, 1)),
    ]
    exact = [h64.grad, w64.grad, b64.grad]
    assert float(G.abs().sum()) > 0
    for name, head in heads(pooling):
        _, grads = _value_and_grads(head, h, m, w, b, g, position_top_k=k)
        for what, got, want, bound in zip(("hidden", "weight", "bias"), grads, exact, bounds):
            assert bool(((got - want).abs() <= bound + 1e-300).all()), (name, what, float((got - want).abs().max()))


def dense_capped_from_logits(logits, mask, k, pooling):
    tau = torch.sort(logits.detach(), dim=-1, descending=True).values[..., k - 1 : k]
    capped_logits = logits.masked_fill(logits.detach() < tau, float("-inf"))
    real = mask.bool().unsqueeze(-1)
    if pooling == "max":
        return torch.log1p(torch.relu(capped_logits.masked_fill(~real, float("-inf")).max(dim=1).values))
    return (torch.log1p(torch.relu(capped_logits)) * real).sum(dim=1)


def test_without_ties_the_threshold_rule_is_topk_then_max():
    """The rule's two readings agree where no position ties at its k-th logit: ``torch.topk`` per
    position scattered into ``-inf``, then the max (the issue's "top-k per position, then max")."""
    h, m, w, b, _ = _inputs(seed=3, grid=False)
    logits = h.detach().double() @ w.detach().double().T + b.detach().double()
    for k in K_VALUES:
        values, index = logits.topk(k, dim=-1)
        scattered = torch.full_like(logits, float("-inf")).scatter(-1, index, values)
        by_topk = torch.log1p(torch.relu(scattered.masked_fill(~m.bool()[..., None], float("-inf")).max(dim=1).values))
        assert torch.equal(by_topk, dense_capped(h.detach(), m, w.detach(), b.detach(), k))


def test_bf16_grid_inputs_equal_the_plain_head():
    """bf16 inputs: both heads round the same exact float32 logits to bf16 (grid inputs), then cap
    and pool them the same way, so they agree exactly; bf16 ties take the second pass."""
    h, m, w, b, _ = _inputs(seed=2, grid=True, dtype=torch.bfloat16)
    for pooling in ("max", "sum"):
        (_, plain), (_, fused_head) = heads(pooling)
        a, c = plain(h, m, w, b, position_top_k=5), fused_head(h, m, w, b, position_top_k=5)
        if pooling == "max":
            assert torch.equal(a, c)
        else:
            torch.testing.assert_close(a, c, rtol=9 * EPS32, atol=0)


def test_cap_of_v_or_more_is_no_cap_and_bad_values_are_refused():
    h, m, w, b, _ = _inputs()
    for _name, head in heads("max") + heads("sum"):
        torch.testing.assert_close(head(h, m, w, b, position_top_k=70), head(h, m, w, b), rtol=0, atol=0)
        for bad in (0, -1, 2.5, True):
            with pytest.raises(ValueError, match="position_top_k"):
                head(h, m, w, b, position_top_k=bad)


def test_triton_refuses_a_cap_by_name_and_auto_runs_the_capped_search(monkeypatch):
    h, m, w, b, _ = _inputs()
    with pytest.raises(ValueError, match="Triton kernel has no per-position cap"):
        fused_splade_head(h, m, w, b, backend="triton", position_top_k=3)
    # where "auto" would pick the kernel (a CUDA device, or the interpreter), a cap still runs the search
    monkeypatch.setattr(fused, "_kernel_device", lambda hidden: True)
    monkeypatch.setattr(fused, "_triton_ok", lambda: True)
    out = fused_splade_head(h, m, w, b, backend="auto", position_top_k=3)
    assert torch.equal(out.detach(), dense_capped(h.detach(), m, w.detach(), b.detach(), 3).float())


def test_kept_entries_never_form_b_l_v_and_hold_n_times_k(monkeypatch):
    """Memory: the search holds one ``[N, Vc]`` chunk at a time and keeps ``N·k`` entries (no ties)."""
    h, m, w, b, _ = _inputs(seed=3, grid=False, V=500)
    shapes = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(
        torch.nn.functional, "linear", lambda *a: shapes.append(tuple(real_linear(*a).shape)) or real_linear(*a)
    )
    entries = capped.kept_entries(h.detach(), m, w.detach(), b.detach(), 4, chunk=64)
    tokens = int(m.sum())
    assert all(s == (tokens, min(64, 500 - lo)) for s, lo in zip(shapes, range(0, 500, 64)))
    assert entries.values.numel() == tokens * 4


@pytest.mark.slow
def test_under_the_triton_interpreter_auto_runs_the_capped_search():
    """``TRITON_INTERPRET=1`` (Triton on the CPU): ``auto`` would run the kernel on CPU tensors; with a
    cap it runs the capped search instead and equals the plain head; ``triton`` refuses by name."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    pytest.importorskip("triton")
    script = textwrap.dedent("""
        import torch
        from spladekit.model.fused import _kernel_device, fused_splade_head
        from spladekit.model.pooling import plain_splade_head
        from tests.model.test_capped import _inputs
        h, m, w, b, _ = _inputs()
        assert _kernel_device(h), "the interpreter must be what auto would pick"
        assert torch.equal(fused_splade_head(h, m, w, b, backend="auto", position_top_k=3),
                           plain_splade_head(h, m, w, b, position_top_k=3))
        assert torch.equal(fused_splade_head(h, m, w, b, backend="auto"), plain_splade_head(h, m, w, b))
        try:
            fused_splade_head(h, m, w, b, backend="triton", position_top_k=3)
        except ValueError as exc:
            assert "Triton kernel has no per-position cap" in str(exc)
        else:
            raise AssertionError("triton with a cap was not refused")
        print("CAPPED-TRITON-OK")
    """)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=f"{root / 'src'}:{root}")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "CAPPED-TRITON-OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_exports_with_a_cap_give_the_capped_vectors_or_refuse(tmp_path):
    """ONNX (pooling inside), OpenSearch, fastembed and Anserini carry the cap; Elasticsearch refuses it
    by name. Tolerance: ``tests/model/engines/test_exports.py``'s (8× torch's float32 error + the roundings of
    ``log(1 + x)``), once every position's gap between its k-th and (k+1)-th logit is far above float32
    rounding (so both evaluations keep the same entries)."""
    import copy
    import json
    import zipfile

    import numpy as np
    import onnxruntime as ort

    from spladekit.errors import UnsupportedModelError
    from spladekit.model.engines import export_for_engine
    from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx
    from tests.mlm_families import TEXTS
    from tests.model.engines.test_exports import LENGTH, assert_vectors, djl_call, make_encoder, tolerance

    encoder = make_encoder(tmp_path, "bert", position_top_k=5)
    assert encoder.model.position_top_k == 5 and encoder.metadata.position_top_k == 5
    batch = encoder.tokenize(TEXTS, LENGTH)
    with torch.no_grad():
        model = copy.deepcopy(encoder.model).double()
        z = model.hidden_states(batch["input_ids"], batch["attention_mask"]) @ model.head.weight.T + model.head.bias
    ordered = torch.sort(z, dim=-1, descending=True).values
    assert float((ordered[..., 4] - ordered[..., 5])[batch["attention_mask"].bool()].min()) > 1e-4
    want = encoder.encode_dense(TEXTS, LENGTH).numpy()
    tol = tolerance(encoder, TEXTS) + 2 * 2.0**-24
    assert (want > 0).sum(axis=1).max() < (make_encoder(tmp_path, "bert").encode_dense(TEXTS, LENGTH).numpy() > 0).sum(
        axis=1
    ).max()

    export_onnx(encoder, tmp_path / "onnx", vocab_tile=24)
    onnx_encoder = OnnxSpladeEncoder(tmp_path / "onnx")
    assert onnx_encoder.metadata.position_top_k == 5 and onnx_encoder.record["position_top_k"] == 5
    assert_vectors(onnx_encoder.encode_dense(TEXTS, LENGTH).numpy(), want, tol)
    out = export_for_engine("opensearch", encoder, tmp_path / "os")
    with zipfile.ZipFile(out / "model.zip") as archive:
        archive.extract("model.pt", tmp_path / "os-pt")
    assert_vectors(
        djl_call(torch.jit.load(str(tmp_path / "os-pt" / "model.pt")), encoder, TEXTS)["output"].numpy(), want, tol
    )
    out = export_for_engine("fastembed", encoder, tmp_path / "fe")
    feeds = {"input_ids": batch["input_ids"].numpy(), "attention_mask": batch["attention_mask"].numpy()}
    y = ort.InferenceSession(str(out / "model.onnx")).run(None, feeds)[0]
    assert_vectors((np.log1p(np.maximum(y, 0)) * feeds["attention_mask"][..., None]).max(axis=1), want, tol)
    out = export_for_engine("anserini", encoder, tmp_path / "ans")
    assert json.loads((out / "spladekit.json").read_text())["extra"]["anserini"]["position_top_k"] == 5
    session = ort.InferenceSession(str(out / "splade-pp-ed-optimized.onnx"))
    for text, row in zip(TEXTS, want):
        ids = encoder.tokenize([text], LENGTH)["input_ids"].numpy()
        idx, values = session.run(
            None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids)}
        )
        got = np.zeros_like(row)
        got[idx] = values
        assert_vectors(got, row, tol)
    with pytest.raises(UnsupportedModelError, match="position_top_k=5"):
        export_for_engine("elasticsearch", encoder, tmp_path / "es")
    assert not (tmp_path / "es").exists()


@pytest.mark.parametrize("value", [0, -3, "12", True, 2.5])
def test_a_bad_saved_position_top_k_is_refused_naming_the_field(tmp_path, value):
    import json

    from spladekit.errors import DataFormatError
    from spladekit.model.encoder import SpladeEncoder
    from tests.model.engines.test_exports import make_encoder

    encoder = make_encoder(tmp_path, "bert", position_top_k=5)
    encoder.save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "spladekit.json"
    meta = json.loads(path.read_text())
    meta["position_top_k"] = value
    path.write_text(json.dumps(meta))
    with pytest.raises(DataFormatError) as caught:
        SpladeEncoder.from_pretrained(tmp_path / "m", device="cpu")
    assert "spladekit.json" in str(caught.value) and caught.value.field == "position_top_k"
