"""A shift of every logit (the decoder bias ``b − s``) and the joint (factor, shift) calibration.

Vectors: the shifted model's vectors, through every head and every export, equal the SPLADE formula
computed by hand with every logit minus ``s``: ``w_j = log(1 + ReLU(max_t (h_t·W_j + b_j) − s))``, in
float64 from the unshifted model's hidden states and decoder. Tolerance (derived, as in
``tests/model/engines/test_exports.py``): 8× torch's own float32 error on the texts (measured against the
same shifted model in float64), plus the one float32 rounding of the stored bias ``fl(b − s)``
(``u·max|b − s|``), plus ``2·2⁻²⁴`` for an export's ``log(1 + x)``.

Calibration: the targets are checked by hand after the rescale: the logits' std from ``W``, ``b``
and the token sample's ``h`` (float64), the active terms per text from the encoder's vectors. The
stated tolerance of :mod:`spladekit.model.calibrate.shift`: ``1/(2n)`` terms per text, plus the
pooled logits within float32 rounding of ``s`` (counted here, ``δ = (H + 2)·u·max(Σ|h W| + |b| + |s|)``).
"""

from __future__ import annotations

import copy
import json
import zipfile

import numpy as np
import pytest
import torch

from spladekit.model.calibrate import rescale_mlm_head, rescale_record
from spladekit.model.calibrate.stats import token_hidden_states
from spladekit.model.heads import find_mlm_head
from spladekit.model.splade import SpladeModel
from tests.mlm_families import TEXTS, tiny_mlm, tiny_tokenizer
from tests.model.engines.test_exports import LENGTH, assert_vectors, djl_call, es_call, make_encoder, tolerance

EPS32 = float(np.finfo(np.float32).eps)
SHIFT = 1.75


def by_hand(model, tokenizer, texts, shift: float, pooling: str = "max") -> np.ndarray:
    """The SPLADE vectors of ``model`` (before the shift) with every logit minus ``shift``, float64."""
    model = copy.deepcopy(model).double()
    batch = tokenizer(list(texts), max_length=LENGTH, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model.hidden_states(batch["input_ids"], batch["attention_mask"])
        head = model.head
        z = hidden @ head.weight.T + head.bias - shift  # [B, L, V]
        real = batch["attention_mask"].bool().unsqueeze(-1)
        if pooling == "max":
            weights = torch.log1p(torch.relu(z.masked_fill(~real, float("-inf")).amax(dim=1)))
        else:
            weights = (torch.log1p(torch.relu(z)) * real).sum(dim=1)
    weights[:, tokenizer.pad_token_id] = 0.0
    return weights.numpy()


def shifted(encoder):
    """``encoder`` with its head shifted by :data:`SHIFT` (a shift alone), and the derived tolerance."""
    bias = find_mlm_head(encoder.model.mlm).bias.detach().clone()
    rescale_mlm_head(encoder.model, mode=None, shift=SHIFT)
    return encoder, tolerance(encoder, TEXTS) + EPS32 / 2 * float((bias.double() - SHIFT).abs().max())


@pytest.mark.parametrize("pooling", ["max", "sum"])
def test_a_shift_is_the_bias_change_in_the_plain_and_fused_heads(tmp_path, pooling):
    encoder = make_encoder(tmp_path, "bert", pooling=pooling)
    original = copy.deepcopy(encoder.model)
    bias = find_mlm_head(encoder.model.mlm).bias.detach().clone()
    encoder, tol = shifted(encoder)
    head = find_mlm_head(encoder.model.mlm)
    assert torch.equal(head.bias.detach(), bias - SHIFT)  # the one float32 subtraction, bit for bit
    record = rescale_record(encoder.model)
    assert record["total_shift"] == SHIFT and record["history"][-1]["mode"] == "shift"
    assert torch.equal(head.weight.detach(), find_mlm_head(original.mlm).weight.detach())  # F = 1: W unchanged
    want = by_hand(original, encoder.tokenizer, TEXTS, SHIFT, pooling)
    for impl in ("plain", "fused"):
        encoder.model.head_impl = impl
        assert_vectors(encoder.encode_dense(TEXTS, LENGTH).numpy(), want, tol)
    assert (want > 0).any() and (by_hand(original, encoder.tokenizer, TEXTS, 0.0, pooling) > want).any()


def test_a_shift_is_carried_by_every_export(tmp_path):
    import onnxruntime as ort

    from spladekit.model.engines import export_for_engine
    from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx

    encoder = make_encoder(tmp_path, "bert")
    original = copy.deepcopy(encoder.model)
    encoder, tol = shifted(encoder)
    tol += 2 * 2.0**-24
    want = by_hand(original, encoder.tokenizer, TEXTS, SHIFT)
    export_onnx(encoder, tmp_path / "onnx", vocab_tile=24)
    assert_vectors(OnnxSpladeEncoder(tmp_path / "onnx").encode_dense(TEXTS, LENGTH).numpy(), want, tol)

    out = export_for_engine("opensearch", encoder, tmp_path / "os")
    with zipfile.ZipFile(out / "model.zip") as archive:
        archive.extract("model.pt", tmp_path / "os-pt")
    assert_vectors(
        djl_call(torch.jit.load(str(tmp_path / "os-pt" / "model.pt")), encoder, TEXTS)["output"].numpy(), want, tol
    )

    out = export_for_engine("elasticsearch", encoder, tmp_path / "es")
    loaded, record = torch.jit.load(str(out / "model.pt")), json.loads((out / "spladekit.json").read_text())["extra"]
    for text, row in zip(TEXTS, want):
        assert_vectors(es_call(loaded, encoder, text, record["elasticsearch"]["arguments"])[0][0].numpy(), row, tol)

    out = export_for_engine("fastembed", encoder, tmp_path / "fe")  # fastembed's documented pooling of its output
    batch = encoder.tokenize(TEXTS, LENGTH)
    feeds = {"input_ids": batch["input_ids"].numpy(), "attention_mask": batch["attention_mask"].numpy()}
    y = ort.InferenceSession(str(out / "model.onnx")).run(None, feeds)[0]
    pooled = (np.log1p(np.maximum(y, 0)) * feeds["attention_mask"][..., None]).max(axis=1)
    assert_vectors(pooled, want, tol)

    out = export_for_engine("anserini", encoder, tmp_path / "ans")
    session = ort.InferenceSession(str(out / "splade-pp-ed-optimized.onnx"))
    for text, row in zip(TEXTS, want):
        ids = encoder.tokenize([text], LENGTH)["input_ids"].numpy()
        idx, values = session.run(
            None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids)}
        )
        got = np.zeros_like(row)
        got[idx] = values
        assert_vectors(got, row, tol)


# ---------------------------------------------------------------------------------------------- calibration
def _by_hand_std(model, tokenizer, texts) -> float:
    head = find_mlm_head(model)
    hidden = token_hidden_states(model, tokenizer, texts, max_tokens=None).double()
    return float((hidden @ head.weight.detach().double().T + head.bias.detach().double()).std(unbiased=False))


def _active_terms_and_allowance(splade: SpladeModel, tokenizer, texts, shift: float) -> tuple[float, float]:
    """Active terms per text of the encoder's vectors, and the allowance of the module docstring:
    ``1/(2n)`` plus the pooled logits (float64, by hand) within float32 rounding ``δ`` of zero."""
    from spladekit.model.encoder import EncoderMetadata, SpladeEncoder

    encoder = SpladeEncoder(splade, tokenizer, EncoderMetadata(query_max_length=128), device="cpu")
    active = float(np.diff(encoder.encode(texts, 128).indptr).mean())
    model = copy.deepcopy(splade).double()
    batch = tokenizer(list(texts), max_length=128, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model.hidden_states(batch["input_ids"], batch["attention_mask"])
        head = model.head
        z = (
            (h @ head.weight.T + head.bias)
            .masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
            .amax(dim=1)
        )
        size = (h.abs().amax(dim=(0, 1)) @ head.weight.abs().T).max() + head.bias.abs().max() + abs(shift)
    delta = (h.shape[-1] + 2) * EPS32 / 2 * float(size)
    near = int((z.abs() <= delta).sum())
    return active, 1 / (2 * len(texts)) + near / len(texts)


def distinct_texts(n: int = 24, seed: int = 0) -> list[str]:
    """``n`` different texts of the tiny vocabulary's words (no repeated text: no tied pooled logits)."""
    import random

    from tests.mlm_families import WORDS

    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, rng.randint(3, 9))) for _ in range(n)]


def test_joint_calibration_reaches_both_targets():
    tokenizer = tiny_tokenizer()
    texts = distinct_texts()
    mlm = tiny_mlm("roberta")
    splade = SpladeModel(mlm, "plain")
    factor = rescale_mlm_head(
        splade,
        mode="joint",
        target=2.5,
        activity=7.0,
        tokenizer=tokenizer,
        texts=texts,
        calibration={"max_tokens": None},
    )
    step = rescale_record(mlm)["history"][-1]
    assert (
        step["mode"] == "joint"
        and step["factor"] == factor
        and step["shift"] == pytest.approx(rescale_record(mlm)["total_shift"])
    )
    assert _by_hand_std(mlm, tokenizer, texts) == pytest.approx(2.5, rel=1e-5)  # brentq's 1e-10, then float32 logits
    active, allowance = _active_terms_and_allowance(splade, tokenizer, texts, step["shift"])
    assert abs(active - 7.0) <= allowance, (active, allowance)
    assert step["activity_reached"] == pytest.approx(active, abs=allowance)


def test_joint_calibration_against_a_reference_model_and_a_shift_on_the_fraction():
    tokenizer = tiny_tokenizer()
    texts = distinct_texts(seed=1)
    reference = SpladeModel(tiny_mlm("bert", seed=4), "plain")
    ref_std = _by_hand_std(reference.mlm, tokenizer, texts)
    ref_active, _ = _active_terms_and_allowance(reference, tokenizer, texts, 0.0)
    splade = SpladeModel(tiny_mlm("bert", seed=9), "plain")
    rescale_mlm_head(
        splade,
        mode="joint",
        reference=(reference, tokenizer),
        tokenizer=tokenizer,
        texts=texts,
        calibration={"max_tokens": None},
    )
    step = rescale_record(splade)["history"][-1]
    assert step["target"] == pytest.approx(ref_std, rel=1e-5) and step["activity_target"] == pytest.approx(ref_active)
    assert _by_hand_std(splade.mlm, tokenizer, texts) == pytest.approx(ref_std, rel=1e-5)
    active, allowance = _active_terms_and_allowance(splade, tokenizer, texts, step["shift"])
    assert abs(active - ref_active) <= allowance

    other = tiny_mlm("bert", seed=11)  # the fraction of token logits above zero, on the whole sample
    rescale_mlm_head(
        other,
        mode="factor",
        factor=0.5,
        activity=0.1,
        activity_statistic="frac_positive",
        tokenizer=tokenizer,
        texts=texts,
        calibration={"max_tokens": None},
    )
    head = find_mlm_head(other)
    hidden = token_hidden_states(other, tokenizer, texts, max_tokens=None).double()
    z = hidden @ head.weight.detach().double().T + head.bias.detach().double()
    reached = rescale_record(other)["history"][-1]["activity_reached"]
    assert float((z > 0).double().mean()) == pytest.approx(reached, abs=1 / z.numel())
    assert abs(reached - 0.1) <= 1 / (2 * z.numel()) + float((z.abs() < 1e-5).double().mean())


def test_a_tie_at_the_boundary_takes_the_nearest_count_and_records_it():
    from spladekit.model.calibrate.shift import calibrated_shift, shift_for_count

    values = torch.tensor([[5.0, 3.0, 3.0, 1.0], [2.0, 3.0, 0.5, -1.0]])  # 3.0 three times
    assert shift_for_count(values, 2) == (4.0, 1)  # 1 or 4 values can be active, not 2 or 3: 1 is nearer
    assert shift_for_count(values, 3) == (2.5, 4)
    assert shift_for_count(values, 0)[1] == 0 and shift_for_count(values, 8) == (-2.0, 8)
    shift, reached = calibrated_shift(values, 2.0, "active_terms")  # 4 of 8 values: 2 per row
    assert (shift, reached) == (2.5, 2.0)


def test_shift_arguments_are_checked_before_anything_changes():
    from spladekit.model.calibrate import RescaleSpec

    mlm = tiny_mlm("bert")
    before = find_mlm_head(mlm).bias.detach().clone()
    for kwargs, words in (
        ({"mode": None}, "nothing to do"),
        ({"mode": None, "shift": 1.0, "activity": 3.0}, "not both"),
        ({"mode": None, "shift": float("nan")}, "finite"),
        ({"mode": "joint", "target": 2.0}, "reference"),
        ({"mode": None, "activity": 3.0}, "tokenizer"),
    ):
        with pytest.raises(ValueError, match=words):
            rescale_mlm_head(mlm, **kwargs)
    assert torch.equal(find_mlm_head(mlm).bias.detach(), before) and rescale_record(mlm) is None
    no_bias = tiny_mlm("modernbert", decoder_bias=False)
    with pytest.raises(ValueError, match="no bias"):
        rescale_mlm_head(no_bias, mode=None, shift=1.0)
    with pytest.raises(ValueError, match="std"):
        RescaleSpec(mode="joint", reference="m", statistic="p99")
    with pytest.raises(ValueError, match="not both"):
        RescaleSpec(shift=1.0, activity=3.0)
    assert RescaleSpec(shift=2.0).kwargs() == {"mode": None, "scale_bias": False, "force": False, "shift": 2.0}


def test_shifts_compound_with_scaled_biases_in_the_record():
    mlm = tiny_mlm("bert")
    b0 = find_mlm_head(mlm).bias.detach().double().clone()
    rescale_mlm_head(mlm, mode=None, shift=1.0)
    rescale_mlm_head(mlm, factor=0.5, scale_bias=True, shift=0.25, force=True)
    record = rescale_record(mlm)
    assert record["total_shift"] == 1.0 * 0.5 + 0.25 and record["total_bias_factor"] == 0.5
    # the record describes the bias: b = b0·total_bias_factor − total_shift (×0.5 and the shifts exact here)
    expected = (b0.float() - 1.0) * 0.5 - 0.25
    assert torch.equal(find_mlm_head(mlm).bias.detach(), expected)
    assert torch.allclose(find_mlm_head(mlm).bias.detach().double(), b0 * 0.5 - record["total_shift"], atol=1e-6)


def test_cli_rescale_shift_joint_and_head_options(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.model.encoder import SpladeEncoder
    from tests.model.calibrate.test_rescale import _save_tiny

    runner = CliRunner()
    model_dir = _save_tiny(tmp_path / "model")
    ref_dir = _save_tiny(tmp_path / "ref", seed=3)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS * 2) + "\n")
    out = tmp_path / "shifted"
    result = runner.invoke(
        app, ["rescale", str(model_dir), "--out", str(out), "--shift", "1.5", "--position-top-k", "4"]
    )
    assert result.exit_code == 0, result.output
    assert "shift s = 1.5" in result.output and "position_top_k = 4" in result.output
    meta = json.loads((out / "spladekit.json").read_text())
    assert meta["position_top_k"] == 4 and meta["extra"]["rescale"]["total_shift"] == 1.5
    assert json.loads((out / "config.json").read_text())["spladekit_rescale"]["history"][0]["shift"] == 1.5
    assert not (out / "modules.json").exists() and "position_top_k" in meta["extra"]["sentence_transformers"]
    assert SpladeEncoder.from_pretrained(out, device="cpu").model.position_top_k == 4
    card = (out / "README.md").read_text()
    assert "shift" in card and "1.5" in card

    joint = runner.invoke(
        app,
        [
            "rescale",
            str(model_dir),
            "--out",
            str(tmp_path / "joint"),
            "--joint",
            "--reference",
            str(ref_dir),
            "--texts",
            str(texts),
        ],
    )
    assert joint.exit_code == 0, joint.output
    step = json.loads((tmp_path / "joint" / "config.json").read_text())["spladekit_rescale"]["history"][0]
    assert step["mode"] == "joint" and step["shift_mode"] == "activity" and step["reference"] == str(ref_dir)
    for bad in (
        ["--joint"],
        ["--shift", "1", "--target-activity", "3"],
        ["--joint", "--factor", "2"],
        ["--target-activity", "3"],
    ):
        result = runner.invoke(app, ["rescale", str(model_dir), "--out", str(tmp_path / "bad"), *bad])
        assert result.exit_code == 2, (bad, result.output)
    assert not (tmp_path / "bad").exists()
