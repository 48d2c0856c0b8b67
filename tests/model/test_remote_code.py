"""Code from a model folder: a custom sentence-transformers module and custom transformers classes
(written here) are refused without ``trust_remote_code`` — by a message naming the class, the file
and the flag, before the code runs — and with it load as their libraries load them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.errors import UnsupportedModelError
from spladekit.model.encoder import SpladeEncoder, load_model_folder
from tests.conftest import make_tiny_bert, make_tokenizer

TEXTS = ["protein expression in mouse cells", "cancer risk in patients with high blood levels", "vaccine", ""]

# a custom sparse module: SPLADE max pooling of log(1 + ReLU(logits)), times a factor from its config;
# importing it leaves a file behind (the witness that the folder's code ran)
HALF_POOLING = """
import os
from pathlib import Path

import torch

try:  # sentence-transformers 6
    from sentence_transformers.base.modules import Module
except ImportError:  # 5.x
    from sentence_transformers.models import Module

Path(os.environ["SPLADEKIT_CODE_RAN"]).touch()


class HalfPooling(Module):
    config_keys = ["factor"]

    def __init__(self, factor: float = 0.5):
        super().__init__()
        self.factor = factor

    def forward(self, features):
        logits = features["token_embeddings"]
        mask = features["attention_mask"].unsqueeze(-1).to(logits.dtype)
        features["sentence_embedding"] = (torch.log1p(torch.relu(logits)) * mask).amax(dim=1) * self.factor
        return features

    def get_sentence_embedding_dimension(self):
        return None

    def save(self, output_path, *args, **kwargs):
        self.save_config(output_path)
"""

# custom transformers classes (config.json auto_map): BERT's, under other names
MODELING = """
import os
from pathlib import Path

from transformers import BertConfig, BertForMaskedLM

Path(os.environ["SPLADEKIT_CODE_RAN"]).touch()


class TinyConfig(BertConfig):
    pass


class TinyForMaskedLM(BertForMaskedLM):
    config_class = TinyConfig
"""


def _masked_lm(folder: Path) -> Path:
    tokenizer = make_tokenizer(folder)
    model = make_tiny_bert(len(tokenizer), seed=3)
    with torch.no_grad():
        model.cls.predictions.decoder.bias.normal_(0.5, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture()
def witness(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "code-ran"
    monkeypatch.setenv("SPLADEKIT_CODE_RAN", str(path))
    return path


@pytest.fixture()
def custom_module_folder(tmp_path) -> Path:
    """A sentence-transformers folder: MLMTransformer (the masked LM at the root), then HalfPooling."""
    folder = _masked_lm(tmp_path / "half-pooling-model")
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.sparse_encoder.models.MLMTransformer",
                },
                {"idx": 1, "name": "1", "path": "1_HalfPooling", "type": "half_pooling.HalfPooling"},
            ]
        )
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"model_type": "SparseEncoder", "similarity_fn_name": "dot"})
    )
    (folder / "1_HalfPooling").mkdir()
    (folder / "1_HalfPooling" / "config.json").write_text(json.dumps({"factor": 0.5}))
    (folder / "half_pooling.py").write_text(HALF_POOLING)
    return folder


def test_custom_module_is_refused_naming_class_file_and_flag_before_it_runs(custom_module_folder, witness):
    with pytest.raises(UnsupportedModelError) as caught:
        SpladeEncoder.from_pretrained(custom_module_folder)
    message = str(caught.value)
    assert "'HalfPooling'" in message and f"half_pooling.py in {custom_module_folder}" in message
    assert "--trust-remote-code" in message and "trust_remote_code=True" in message and "modules.json" in message
    with pytest.raises(UnsupportedModelError, match="HalfPooling"):
        load_model_folder(str(custom_module_folder))
    assert not witness.exists()  # refused before anything was imported


def test_custom_module_loads_as_sentence_transformers_loads_it(custom_module_folder, witness, tiny_bert_dir):
    """Trusted, the vectors are sentence-transformers' own (``SparseEncoder(..., trust_remote_code=True)``,
    the judge), and by hand half the plain SPLADE vectors of the folder's masked LM (float32 logits of
    one forward pass computed in two orders: relative error a few 2^-24, 1e-5 allowed)."""
    from sentence_transformers import SparseEncoder

    encoder = SpladeEncoder.from_pretrained(custom_module_folder, trust_remote_code=True, device="cpu")
    assert witness.exists()
    ours_docs, ours_queries = encoder.encode_documents(TEXTS).toarray(), encoder.encode_queries(TEXTS).toarray()
    judge = SparseEncoder(str(custom_module_folder), trust_remote_code=True, device="cpu")
    assert np.array_equal(ours_docs, judge.encode_document(TEXTS, convert_to_tensor=True).to_dense().numpy())
    assert np.array_equal(ours_queries, judge.encode_query(TEXTS, convert_to_tensor=True).to_dense().numpy())
    plain_folder = custom_module_folder.parent / "plain"
    plain_folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        if (custom_module_folder / name).exists():
            (plain_folder / name).write_bytes((custom_module_folder / name).read_bytes())
    plain = SpladeEncoder.from_pretrained(plain_folder, head_impl="plain", doc_max_length=64, device="cpu")
    by_hand = 0.5 * plain.encode_documents(TEXTS).toarray()
    by_hand[:, plain.tokenizer.pad_token_id] = ours_docs[
        :, plain.tokenizer.pad_token_id
    ]  # spladekit zeroes [PAD]; the module does not
    np.testing.assert_allclose(ours_docs, by_hand, rtol=1e-5, atol=1e-7)
    assert (
        encoder.metadata.extra["custom_code"] == ["half_pooling.HalfPooling"]
        and encoder.vocab_size == ours_docs.shape[1]
    )
    with pytest.raises(UnsupportedModelError, match="no masked LM of it to train, calibrate or export"):
        load_model_folder(str(custom_module_folder), trust_remote_code=True)


def test_cli_index_and_search_need_the_flag(custom_module_folder, witness, tiny_beir, tmp_path):
    runner = CliRunner()
    base = ["index", "--model", str(custom_module_folder), "--data", str(tiny_beir), "--out", str(tmp_path / "idx")]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 2 and "'HalfPooling'" in refused.output and "half_pooling.py" in refused.output
    assert "--trust-remote-code" in refused.output and not witness.exists() and not (tmp_path / "idx").exists()
    built = runner.invoke(app, base + ["--trust-remote-code"])
    assert built.exit_code == 0, built.output
    search = ["search", "--index", str(tmp_path / "idx"), "--data", str(tiny_beir), "--out", str(tmp_path / "run.trec")]
    assert runner.invoke(app, search).exit_code == 2  # the index's model: its code, not trusted in this command
    searched = runner.invoke(app, search + ["--trust-remote-code"])
    assert searched.exit_code == 0, searched.output
    from spladekit.data.trec import read_run
    from spladekit.index.index import Index

    index = Index.open(tmp_path / "idx")
    encoder = SpladeEncoder.from_pretrained(custom_module_folder, trust_remote_code=True, device="cpu")
    rows = {doc_id: row for row, doc_id in enumerate(index.doc_ids)}
    from spladekit.data.beir import load_beir

    dataset = load_beir(tiny_beir)
    vectors = encoder.encode_documents(list(dataset.corpus.values())).toarray()
    assert np.array_equal(index.docs.toarray()[[rows[d] for d in dataset.corpus]], vectors)
    run = read_run(tmp_path / "run.trec")
    query = encoder.encode_queries([dataset.queries["q1"]]).toarray()[0]
    best = max(dataset.corpus, key=lambda d: (float(vectors[list(dataset.corpus).index(d)] @ query), d))
    assert max(run["q1"], key=run["q1"].get) == best


@pytest.fixture()
def auto_map_folder(tmp_path) -> Path:
    """A masked LM whose config names its own classes (``auto_map``), in ``modeling_tiny.py``."""
    folder = _masked_lm(tmp_path / "auto-map-model")
    config = json.loads((folder / "config.json").read_text())
    config.update(
        architectures=["TinyForMaskedLM"],
        auto_map={"AutoConfig": "modeling_tiny.TinyConfig", "AutoModelForMaskedLM": "modeling_tiny.TinyForMaskedLM"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_tiny.py").write_text(MODELING)
    return folder


def test_auto_map_classes_refused_then_passed_on_to_transformers(auto_map_folder, witness, tmp_path):
    """Refused naming the class, file and flag; trusted, transformers builds its classes, which are
    BERT's: the vectors equal those of the same weights as a plain BERT folder (same computation)."""
    with pytest.raises(UnsupportedModelError) as caught:
        SpladeEncoder.from_pretrained(auto_map_folder)
    message = str(caught.value)
    assert (
        "'TinyConfig'" in message
        and f"modeling_tiny.py in {auto_map_folder}" in message
        and "--trust-remote-code" in message
    )
    assert "config.json" in message and not witness.exists()
    encoder = SpladeEncoder.from_pretrained(auto_map_folder, trust_remote_code=True, device="cpu", doc_max_length=128)
    assert witness.exists() and type(encoder.model.mlm).__name__ == "TinyForMaskedLM"
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in auto_map_folder.iterdir():
        if path.is_file() and path.name != "modeling_tiny.py":
            (plain / path.name).write_bytes(path.read_bytes())
    config = json.loads((plain / "config.json").read_text())
    config.update(architectures=["BertForMaskedLM"])
    del config["auto_map"]
    (plain / "config.json").write_text(json.dumps(config))
    reference = SpladeEncoder.from_pretrained(plain, device="cpu", doc_max_length=128)
    assert np.array_equal(encoder.encode_documents(TEXTS).toarray(), reference.encode_documents(TEXTS).toarray())


def test_every_model_command_takes_the_flag():
    """Each command that loads a model has --trust-remote-code (passed on to the one loader)."""
    import typer

    commands = typer.main.get_command(app).commands
    for name in (
        "evaluate",
        "demo",
        "index",
        "search",
        "export",
        "import",
        "diagnose",
        "rescale",
        "train",
        "reproduce",
        "export-model",
        "inference-free",
        "serve",
        "mine",
    ):
        options = {opt for param in commands[name].params for opt in param.opts}
        assert "--trust-remote-code" in options, name


def test_a_type_naming_a_path_outside_the_folder_is_refused_without_naming_a_file_there(custom_module_folder, witness):
    """A hostile ``type`` (``../../evil.Pwn``: a dotted name whose file would be ``/evil.py``) is refused
    like any custom class, naming no file outside the folder, and nothing runs."""
    modules = json.loads((custom_module_folder / "modules.json").read_text())
    modules[1]["type"] = "../../evil.Pwn"
    (custom_module_folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsupportedModelError, match="not in the folder") as caught:
        SpladeEncoder.from_pretrained(custom_module_folder)
    assert "--trust-remote-code" in str(caught.value) and not witness.exists()
