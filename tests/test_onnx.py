"""ONNX export with the SPLADE pooling inside the graph: onnxruntime vectors vs spladekit's torch ones.

Tolerance (derived, not guessed): the ONNX graph and the torch model are two float32 evaluations
of the same function whose matrix products sum in different orders (onnxruntime's MLAS kernels vs
torch's BLAS), so each carries its own float32 rounding error. We measure torch's float32 error
against a float64 evaluation of the same weights and texts, ``e32 = max |w_torch - w_f64|``
(floored at one float32 ulp of the largest weight), and require ``|w_onnx - w_torch| ≤ 8·e32``:
by the triangle inequality ``|onnx - torch| ≤ |onnx - f64| + |torch - f64|``, so this allows the
ONNX evaluation up to 7× torch's own rounding error, room for a different blocking of the sums.
"""

import copy
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlm_families import TEXTS, tiny_mlm, tiny_tokenizer
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.splade import SpladeModel

pytest.importorskip("onnx", reason="onnx not installed (pip install 'spladekit[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install 'spladekit[onnx]')")

from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)


def float64_weights(encoder: SpladeEncoder, texts, max_length: int) -> np.ndarray:
    """The SPLADE formula in float64 on a float64 copy of the model (reference for the float32 error)."""
    model = copy.deepcopy(encoder.model).double().cpu()
    batch = encoder.tokenize(texts, max_length)
    with torch.no_grad():
        hidden = model.hidden_states(batch["input_ids"], batch["attention_mask"])
        head = model.head
        logits = F.linear(hidden, head.weight, head.bias)
        logits = logits.masked_fill(~batch["attention_mask"].bool().unsqueeze(-1), float("-inf"))
        weights = torch.log1p(torch.relu(logits.max(dim=1).values))
    weights[:, encoder.tokenizer.pad_token_id] = 0.0
    return weights.numpy()


def tolerance(encoder: SpladeEncoder, texts, max_length: int) -> float:
    """8 × torch's own float32 error on these texts (module docstring)."""
    torch32 = encoder.encode_dense(texts, max_length).numpy().astype(np.float64)
    reference = float64_weights(encoder, texts, max_length)
    e32 = max(float(np.abs(torch32 - reference).max()), EPS32 * float(np.abs(reference).max()))
    return 8 * e32


def check_equal(encoder: SpladeEncoder, onnx_encoder: OnnxSpladeEncoder, texts, max_length: int) -> None:
    tol = tolerance(encoder, texts, max_length)
    expected = encoder.encode_dense(texts, max_length).numpy()
    got = onnx_encoder.encode_dense(texts, max_length).numpy()
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= tol, (np.abs(got - expected).max(), tol)
    # the sparse vectors the user sees: same active terms except entries within tol of 0
    torch_active, onnx_active = expected > 0, got > 0
    differ = torch_active != onnx_active
    assert np.all(np.maximum(expected, got)[differ] <= tol)


def batch_of_one_check(encoder, reference: SpladeEncoder, texts, max_length: int) -> None:
    """Each text alone (no padding) vs inside the padded batch, through ``encoder``: different shapes
    are different computations (other GEMM blockings), so the same derived tolerance applies (the
    float32 error measured on the torch ``reference``)."""
    together = encoder.encode_dense(texts, max_length).numpy()
    tol = tolerance(reference, texts, max_length)
    for i, text in enumerate(texts):
        alone = encoder.encode_dense([text], max_length).numpy()[0]
        assert np.abs(alone - together[i]).max() <= tol


@pytest.fixture(scope="module", params=["bert", "distilbert", "roberta", "modernbert"])
def tiny_pair(request, tmp_path_factory):
    encoder = SpladeEncoder(SpladeModel(tiny_mlm(request.param), "plain"), tiny_tokenizer(),
                            EncoderMetadata(query_max_length=16, doc_max_length=32), device="cpu")
    folder = export_onnx(encoder, tmp_path_factory.mktemp(f"onnx-{request.param}") / "export")
    return encoder, OnnxSpladeEncoder(folder, batch_size=4)


def test_tiny_families_match_torch_on_padded_batches(tiny_pair):
    encoder, onnx_encoder = tiny_pair
    lengths = [len(encoder.tokenizer(t)["input_ids"]) for t in TEXTS]
    assert len(set(lengths)) > 1  # the batch has padding
    check_equal(encoder, onnx_encoder, TEXTS, 32)
    check_equal(encoder, onnx_encoder, TEXTS[2:5], 32)  # another batch size and padded length (dynamic axes)
    check_equal(encoder, onnx_encoder, TEXTS[:2], 4)  # truncation


def test_tiny_batch_of_one_equals_batched(tiny_pair):
    encoder, onnx_encoder = tiny_pair
    batch_of_one_check(onnx_encoder, encoder, TEXTS, 32)
    batch_of_one_check(encoder, encoder, TEXTS, 32)
    # sparse output through SpladeEncoder.encode (length ordering, CSR): same machinery, same rows
    a = onnx_encoder.encode_documents(TEXTS).toarray()
    b = encoder.encode_documents(TEXTS).toarray()
    assert np.abs(a - b).max() <= tolerance(encoder, TEXTS, 32)


def test_export_folder_layout(tiny_pair, tmp_path):
    encoder, _ = tiny_pair
    folder = export_onnx(encoder, tmp_path / "x")
    meta = json.loads((folder / "spladekit.json").read_text())
    assert meta["query_max_length"] == 16 and meta["doc_max_length"] == 32
    assert meta["extra"]["onnx"]["inputs"] == ["input_ids", "attention_mask"]
    assert meta["extra"]["onnx"]["vocab_size"] == encoder.vocab_size
    assert (folder / "model.onnx").exists() and (folder / "tokenizer_config.json").exists()
    assert not (tmp_path / ".tmp-x").exists()
    import onnx

    graph = onnx.load(str(folder / "model.onnx")).graph
    ops = {node.op_type for node in graph.node}
    assert {"ReduceMax", "Log"} <= ops and ops & {"Relu", "Max", "Clip"}  # max pooling, log1p and ReLU are inside the graph
    assert [o.name for o in graph.output] == ["weights"]


@pytest.mark.slow
def test_splade_tiny_matches_torch(splade_tiny, tmp_path):
    encoder = SpladeEncoder.from_pretrained(splade_tiny, head_impl="plain", device="cpu")
    folder = export_onnx(encoder, tmp_path / "splade-tiny-onnx")
    onnx_encoder = OnnxSpladeEncoder(folder)
    texts = ["what causes cancer in mice?", "protein", "the effect of a high dose of aspirin on blood pressure in "
             "elderly patients with heart disease", ""]
    check_equal(encoder, onnx_encoder, texts, 64)
    batch_of_one_check(onnx_encoder, encoder, texts, 64)
    assert onnx_encoder.metadata.query_max_length == encoder.metadata.query_max_length


def test_export_model_cli(tiny_bert_dir, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    out = tmp_path / "onnx"
    result = CliRunner().invoke(app, ["export-model", "--model", str(tiny_bert_dir), "--format", "onnx", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "onnxruntime check: max |onnx - torch|" in result.output
    encoder = SpladeEncoder.from_pretrained(tiny_bert_dir, head_impl="plain", device="cpu")
    check_equal(encoder, OnnxSpladeEncoder(out), ["protein expression in cells", "cancer"], 64)
    bad = CliRunner().invoke(app, ["export-model", "--model", str(tiny_bert_dir), "--format", "tflite", "--out", str(out)])
    assert bad.exit_code == 2 and "format" in bad.output
