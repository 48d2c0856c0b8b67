"""`OnnxSpladeEncoder.from_pretrained(export_folder)` opens the export (it used to inherit
SpladeEncoder's, which looked for torch weights: "no file named model.safetensors"), and refuses
what only a torch model takes, or a folder that is no export, naming the right constructor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spladekit.errors import DataFormatError, ResolutionError
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.splade import SpladeModel
from tests.mlm_families import TEXTS, tiny_mlm, tiny_tokenizer

pytest.importorskip("onnx", reason="onnx not installed (pip install 'spladekit[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install 'spladekit[onnx]')")

from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    encoder = SpladeEncoder(
        SpladeModel(tiny_mlm("bert"), "plain"),
        tiny_tokenizer(),
        EncoderMetadata(query_max_length=16, doc_max_length=32),
        device="cpu",
    )
    root = tmp_path_factory.mktemp("onnx-from-pretrained")
    encoder.save_pretrained(root / "torch")
    return root / "torch", export_onnx(encoder, root / "export")


def test_from_pretrained_opens_the_export_as_the_constructor_does(exported):
    _, folder = exported
    opened = OnnxSpladeEncoder.from_pretrained(folder)
    assert type(opened) is OnnxSpladeEncoder
    direct = OnnxSpladeEncoder(folder)
    # the same graph, session options and texts: the same onnxruntime computation, bit for bit
    np.testing.assert_array_equal(opened.encode_documents(TEXTS).toarray(), direct.encode_documents(TEXTS).toarray())
    assert (opened.metadata.query_max_length, opened.metadata.doc_max_length) == (16, 32)  # from its spladekit.json
    shorter = OnnxSpladeEncoder.from_pretrained(folder, doc_max_length=8, query_top_k=3, batch_size=2)
    assert shorter.metadata.doc_max_length == 8 and shorter.metadata.query_top_k == 3 and shorter.batch_size == 2
    assert max(np.diff(shorter.encode_queries(TEXTS).indptr)) <= 3
    np.testing.assert_array_equal(
        shorter.encode_documents(TEXTS).toarray(), direct.encode(TEXTS, max_length=8).toarray()
    )


def test_from_pretrained_refuses_torch_only_arguments_and_torch_folders(exported, tmp_path):
    torch_folder, folder = exported
    with pytest.raises(ValueError, match="dtype=torch.bfloat16 is for torch models.*SpladeEncoder.from_pretrained"):
        OnnxSpladeEncoder.from_pretrained(folder, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head_impl='fused' is for torch models"):
        OnnxSpladeEncoder.from_pretrained(folder, head_impl="fused")
    with pytest.raises(ValueError, match="providers="):
        OnnxSpladeEncoder.from_pretrained(folder, device="cuda")
    with pytest.raises(
        DataFormatError, match=r"spladekit\.json: field 'extra\.onnx'.*load it with SpladeEncoder\.from_pretrained"
    ):
        OnnxSpladeEncoder.from_pretrained(torch_folder)
    with pytest.raises(ResolutionError, match="no such folder"):
        OnnxSpladeEncoder.from_pretrained(tmp_path / "missing")
    assert (
        SpladeEncoder.from_pretrained(torch_folder).vocab_size == OnnxSpladeEncoder.from_pretrained(folder).vocab_size
    )
