"""``export-model --format elasticsearch|opensearch|fastembed|anserini``: each engine's own code (or
its documented call) runs the export, and its vectors equal spladekit's.

Tolerance (derived): an export and spladekit's encoder are two float32 evaluations of the same
function (other kernels and summation orders: onnxruntime's MLAS, a traced graph, ``log(1 + x)``
instead of ``log1p``). As in ``tests/model/test_onnx_export.py``, torch's own float32 error on the texts is
measured against a float64 evaluation of the same weights, ``e32 = max |w_torch − w_f64|`` (floored
at one float32 ulp of the largest weight), and ``|w_export − w_torch| ≤ 8·e32 + 2·2⁻²⁴`` is
required: the triangle inequality allows the export 7× torch's rounding, and ``2·2⁻²⁴`` is the
rounding of ``1 + x`` inside the two ``log(1 + x)`` of ``log1p_relu`` (d log y = dy / y ≤ 2⁻²⁴).
Active terms must agree except for entries within that tolerance of 0.

Engines that need a venv of their own (pins clash: fastembed wants huggingface_hub < 2,
opensearch-py-ml and eland pandas < 3 and transformers < 5) build it once under
``benchmarks/.cache`` (``tests/engine_venvs.py``, run by ``make test``'s set-up; or by the test itself when
``SPLADEKIT_ENGINE_VENVS=1``) and reuse it afterwards; without a built venv they skip, saying so.
Those tests carry the ``engines`` marker. Anserini's test runs by default where the jar and Java are
installed (``make setup``), as the other Anserini tests do.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import UnsupportedModelError
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.engines import export_for_engine
from spladekit.model.engines import torchscript as ts
from tests.mlm_families import TEXTS, tiny_mlm, tiny_tokenizer

EPS32 = float(np.finfo(np.float32).eps)
LENGTH = 32


def make_encoder(tmp_path: Path, family: str = "bert", **meta) -> SpladeEncoder:
    """A tiny random model of ``family`` saved as a spladekit folder and loaded back (fast tokenizer)."""
    from transformers import AutoTokenizer

    tok = tiny_tokenizer()
    tok.model_max_length = 64  # as a real model's tokenizer says (opensearch-py-ml truncates at it)
    tok.save_pretrained(tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    folder = tmp_path / f"model-{family}-{'-'.join(f'{k}{v}' for k, v in meta.items())}"
    SpladeEncoder(
        tiny_mlm(family), tokenizer, EncoderMetadata(doc_max_length=LENGTH, **meta), device="cpu"
    ).save_pretrained(folder)
    return SpladeEncoder.from_pretrained(folder, device="cpu", head_impl="plain")


def float64_weights(encoder: SpladeEncoder, texts, max_length: int) -> np.ndarray:
    """The same model in float64 (reference for torch's float32 error), columns zeroed as spladekit does."""
    model = copy.deepcopy(encoder.model).double()
    batch = encoder.tokenize(texts, max_length)
    with torch.no_grad():
        weights = model(batch["input_ids"], batch["attention_mask"]).numpy()
    ref = SpladeEncoder(model, encoder.tokenizer, copy.deepcopy(encoder.metadata), device="cpu")
    zero = [encoder.tokenizer.pad_token_id] + (
        list(encoder.tokenizer.all_special_ids) if ref.metadata.zero_special_tokens else []
    )
    weights[:, zero] = 0.0
    return weights


def tolerance(encoder: SpladeEncoder, texts, max_length: int = LENGTH) -> float:
    """8 × torch's own float32 error + the two roundings of 1 + x (module docstring)."""
    torch32 = encoder.encode_dense(texts, max_length).numpy().astype(np.float64)
    reference = float64_weights(encoder, texts, max_length)
    e32 = max(float(np.abs(torch32 - reference).max()), EPS32 * float(np.abs(reference).max()))
    return 8 * e32 + 2 * 2.0**-24


def assert_vectors(got: np.ndarray, expected: np.ndarray, tol: float) -> None:
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= tol, (np.abs(got - expected).max(), tol)
    differ = (got > 0) != (expected > 0)
    assert np.all(np.abs(expected[differ]) <= tol)
    assert (expected > 0).sum() > 0  # a check that could fail: there are active terms


# ----------------------------------------------------------------- the allowlist check
class Log1pPooling(torch.nn.Module):
    def forward(self, x):
        return torch.log1p(torch.relu(x))


def test_allowlist_check_refuses_log1p_and_accepts_the_pooling():
    x = torch.randn(1, 5, 7)
    bad = ts.trace(Log1pPooling(), (x,))
    with pytest.raises(ts.UnsupportedOpError, match="aten::log1p"):
        ts.check_allowlisted(bad)
    for pooling in ("max", "sum"):
        for activation in ("relu", "log1p_relu"):
            module = ts.SpladePooling(pooling, activation, torch.ones(7))
            ops = ts.check_allowlisted(ts.trace(module, (x, torch.ones(1, 5, dtype=torch.long))))
            assert "aten::log1p" not in ops and "aten::log" in ops


def test_allowlisted_pooling_equals_the_formula():
    """The pooling in allowlisted ops against the SPLADE formula with log1p/amax/sum, float64."""
    torch.manual_seed(0)
    logits = torch.randn(3, 6, 11, dtype=torch.float64) * 3
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5])
    keep = torch.ones(11, dtype=torch.float64)
    keep[0] = 0
    for pooling in ("max", "sum"):
        for activation in ("relu", "log1p_relu"):

            def act(x):
                y = torch.log1p(torch.relu(x))
                return torch.log1p(y) if activation == "log1p_relu" else y  # noqa: B023 (called in this iteration only)

            if pooling == "max":
                expected = act(logits.masked_fill(~mask.bool().unsqueeze(-1), float("-inf")).amax(dim=1))
            else:
                expected = (act(logits) * mask.unsqueeze(-1)).sum(dim=1)
            got = ts.SpladePooling(pooling, activation, keep).double()(logits, mask)[:, 0]
            torch.testing.assert_close(got, expected * keep, rtol=0, atol=1e-12)  # float64: rounding only


# ----------------------------------------------------------------- Elasticsearch
def es_call(module, encoder, text: str, arguments: list[str]):
    """One sequence as ml-cpp passes it: [1, L] int64, the tokenization's argument list."""
    batch = encoder.tokenize([text], LENGTH)
    ids, mask = batch["input_ids"].long(), batch["attention_mask"].long()
    args = {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": torch.zeros_like(ids),
        "position_ids": torch.arange(ids.shape[1]).unsqueeze(0),
    }
    with torch.no_grad():
        result = module(*[args[name] for name in arguments])
    if isinstance(result, tuple):  # ml-cpp: element 0 of a tuple
        result = result[0]
    return result


@pytest.mark.parametrize(
    "family,variant",
    [
        ("bert", ("max", "relu")),
        ("bert", ("max", "log1p_relu")),
        ("bert", ("sum", "relu")),
        ("distilbert", ("max", "relu")),
        ("electra", ("max", "relu")),
        ("roberta", ("sum", "log1p_relu")),
    ],
)
def test_elasticsearch_pt_gives_the_vector_per_sequence(tmp_path, family, variant):
    encoder = make_encoder(tmp_path, family)
    pooling, activation = variant
    out = export_for_engine("elasticsearch", encoder, tmp_path / "es", pooling=pooling, activation=activation)
    record = json.loads((out / "spladekit.json").read_text())["extra"]["elasticsearch"]
    assert ts.archive_version(out / "model.pt") <= ts.MAX_FILE_FORMAT
    loaded = torch.jit.load(str(out / "model.pt"))
    ts.check_allowlisted(loaded)  # the file itself, as ml-cpp inspects it
    encoder.model.pooling, encoder.model.activation = pooling, activation
    tol = tolerance(encoder, TEXTS)
    vocab = json.loads((out / "vocabulary.json").read_text())["vocabulary"]
    assert vocab == encoder.vocabulary
    for text in TEXTS:
        result = es_call(loaded, encoder, text, record["arguments"])
        weights = result[0][0].numpy()  # what Elasticsearch reads
        expected = encoder.encode_dense([text], LENGTH)[0].numpy()
        assert_vectors(weights, expected, tol)
        es_terms = {vocab[j].replace(".", "__"): float(weights[j]) for j in np.nonzero(weights > 0)[0]}
        assert set(es_terms) == {t.replace(".", "__") for t, _ in encoder.decode(expected)}


def test_elasticsearch_real_model_and_refusals(tmp_path, splade_tiny):
    encoder = SpladeEncoder.from_pretrained(splade_tiny, device="cpu", head_impl="plain")
    out = export_for_engine("elasticsearch", encoder, tmp_path / "es")
    loaded = torch.jit.load(str(out / "model.pt"))
    config = json.loads((out / "config.json").read_text())
    assert list(config["inference_config"]["text_expansion"]["tokenization"]) == ["bert"]
    tol = tolerance(encoder, TEXTS[:3])
    for text in TEXTS[:3]:
        got = es_call(loaded, encoder, text, ["input_ids", "attention_mask", "token_type_ids", "position_ids"])[0][0]
        assert_vectors(got.numpy(), encoder.encode_dense([text], LENGTH)[0].numpy(), tol)
    with pytest.raises(UnsupportedModelError, match="ModernBERT"):
        export_for_engine("elasticsearch", make_encoder(tmp_path, "modernbert"), tmp_path / "mb")
    assert not (tmp_path / "mb").exists()


@pytest.mark.engines
@pytest.mark.xdist_group("engine-venvs")  # one worker builds/uses the venvs
def test_eland_tracer_gives_the_raw_logits_trap(tmp_path):
    """eland's own tracer (TransformerModel, text_expansion) on the same folder: [B, L, V] logits, so
    Elasticsearch's result[0][0] would be position 0's raw logits (eland#827)."""
    from tests.engine_venvs import run_in

    encoder = make_encoder(tmp_path, "bert")
    # eland loads the slow BertTokenizer (use_fast=False), which reads vocab.txt; transformers 5 writes
    # only tokenizer.json, so the folder gets the vocabulary file a hub BERT folder has
    Path(encoder.metadata.source, "vocab.txt").write_text("".join(t + "\n" for t in encoder.vocabulary))
    script = """
import sys, torch
from eland.ml.pytorch.transformers import TransformerModel
tm = TransformerModel(model_id=sys.argv[1], task_type="text_expansion")
traced = tm._traceable_model.trace()
inputs = tm._traceable_model._compatible_inputs()
print(list(traced(*inputs).shape) if not isinstance(traced(*inputs), tuple) else list(traced(*inputs)[0].shape))
"""
    shape = json.loads(run_in("eland", script, encoder.metadata.source).strip().splitlines()[-1])
    assert len(shape) == 3 and shape[0] == 1 and shape[1] > 1 and shape[2] == encoder.vocab_size


# ----------------------------------------------------------------- OpenSearch
def djl_call(module, encoder, texts):
    batch = encoder.tokenize(texts, LENGTH)
    with torch.no_grad():
        return module({"input_ids": batch["input_ids"].long(), "attention_mask": batch["attention_mask"].long()})


@pytest.mark.parametrize("activation", ["relu", "log1p_relu"])
def test_opensearch_zip_gives_the_vectors_and_decodes(tmp_path, activation):
    from tokenizers import Tokenizer

    encoder = make_encoder(tmp_path, "bert", zero_special_tokens=True, activation=activation)
    out = export_for_engine("opensearch", encoder, tmp_path / "os")
    config = json.loads((out / "ml-commons_model_config.json").read_text())
    assert config["function_name"] == "SPARSE_ENCODING" and config["model_format"] == "TORCH_SCRIPT"
    import hashlib

    assert config["model_content_hash_value"] == hashlib.sha256((out / "model.zip").read_bytes()).hexdigest()
    with zipfile.ZipFile(out / "model.zip") as archive:
        assert sorted(archive.namelist()) == ["model.pt", "tokenizer.json"]
        archive.extractall(tmp_path / "unzipped")
    ours = torch.jit.load(str(tmp_path / "unzipped" / "model.pt"))
    got = djl_call(ours, encoder, TEXTS)["output"].numpy()
    expected = encoder.encode_dense(TEXTS, LENGTH).numpy()
    assert_vectors(got, expected, tolerance(encoder, TEXTS))
    tokenizer = Tokenizer.from_file(str(tmp_path / "unzipped" / "tokenizer.json"))
    for row, want in zip(got, expected):
        ids = np.nonzero(row)[0]
        decoded = {tokenizer.id_to_token(int(j)): float(row[j]) for j in ids}
        spladekit = dict(encoder.decode(want))
        assert set(decoded) == set(spladekit)
        assert max(abs(decoded[t] - spladekit[t]) for t in decoded) <= tolerance(encoder, TEXTS)


@pytest.mark.engines
@pytest.mark.xdist_group("engine-venvs")  # one worker builds/uses the venvs
def test_opensearch_py_ml_traces_the_same_folder_equal(tmp_path):
    """opensearch-py-ml's own SparseEncodingModel on the model folder (offline, no licence file): its
    TorchScript and ours, called with DJL's dict, give equal {"output"} (special tokens zeroed in both:
    NeuralSparseModel always zeroes them, so the model says zero_special_tokens)."""
    from tests.engine_venvs import run_in

    encoder = make_encoder(tmp_path, "bert", zero_special_tokens=True)
    out = export_for_engine("opensearch", encoder, tmp_path / "os")
    script = """
import sys
from opensearch_py_ml.ml_models.sparse_encoding_model import SparseEncodingModel
m = SparseEncodingModel(model_id=sys.argv[1], folder_path=sys.argv[2], overwrite=True)
print(m.save_as_pt(sentences=["today is sunny"], model_id=sys.argv[1], add_apache_license=False))
"""
    zip_path = (
        run_in("opensearch-py-ml", script, encoder.metadata.source, str(tmp_path / "osml")).strip().splitlines()[-1]
    )
    with zipfile.ZipFile(zip_path) as archive:
        pt = next(n for n in archive.namelist() if n.endswith(".pt"))
        archive.extract(pt, tmp_path / "theirs")
    with zipfile.ZipFile(out / "model.zip") as archive:
        archive.extract("model.pt", tmp_path / "ours")
    theirs = torch.jit.load(str(tmp_path / "theirs" / pt))
    ours = torch.jit.load(str(tmp_path / "ours" / "model.pt"))
    a, b = djl_call(theirs, encoder, TEXTS), djl_call(ours, encoder, TEXTS)
    assert set(a) == set(b) == {"output"}
    assert_vectors(b["output"].numpy(), a["output"].numpy(), tolerance(encoder, TEXTS))


def test_opensearch_doc_only_query_side(tmp_path):
    from spladekit.model.inference_free import make_inference_free

    encoder = make_encoder(tmp_path, "bert")
    make_inference_free(encoder, TEXTS)
    out = export_for_engine("opensearch", encoder, tmp_path / "os")
    assert json.loads((out / "query_tokenizer_config.json").read_text())["function_name"] == "SPARSE_TOKENIZE"
    with zipfile.ZipFile(out / "query_tokenizer.zip") as archive:
        idf = json.loads(archive.read("idf.json"))
    weights = encoder.query_weights.numpy()
    assert len(idf) == encoder.vocab_size
    assert all(idf[t] == float(weights[j]) for j, t in enumerate(encoder.vocabulary))  # same float, copied


# ----------------------------------------------------------------- fastembed
FASTEMBED = """
import json, sys
from fastembed import SparseTextEmbedding
model = SparseTextEmbedding("prithivida/Splade_PP_en_v1", specific_model_path=sys.argv[1], cache_dir=sys.argv[2])
texts = json.loads(sys.argv[3])
print(json.dumps([[e.indices.tolist(), e.values.tolist()] for e in model.embed(texts, batch_size=4)]))
"""


@pytest.mark.engines
@pytest.mark.xdist_group("engine-venvs")
@pytest.mark.parametrize(
    "family,meta",
    [
        ("bert", {}),
        ("bert", {"activation": "log1p_relu"}),
        ("bert", {"zero_special_tokens": True}),
        ("roberta", {}),
        ("distilbert", {"activation": "log1p_relu"}),
        ("splade-tiny", {}),
    ],
)
def test_fastembed_loads_the_export_and_equals_spladekit(tmp_path, family, meta, request):
    from tests.engine_venvs import run_in

    if family == "splade-tiny":
        encoder = SpladeEncoder.from_pretrained(
            request.getfixturevalue("splade_tiny"), device="cpu", head_impl="plain", doc_max_length=LENGTH
        )
    else:
        encoder = make_encoder(tmp_path, family, **meta)
    out = export_for_engine("fastembed", encoder, tmp_path / "fe")
    rows = json.loads(run_in("fastembed", FASTEMBED, str(out), str(tmp_path / "cache"), json.dumps(TEXTS)))
    got = np.zeros((len(TEXTS), encoder.vocab_size), dtype=np.float32)
    for i, (idx, val) in enumerate(rows):
        got[i, idx] = val
    assert_vectors(got, encoder.encode_dense(TEXTS, LENGTH).numpy(), tolerance(encoder, TEXTS))


def test_fastembed_refuses_sum_pooling_and_doc_only(tmp_path):
    encoder = make_encoder(tmp_path, "bert", pooling="sum")
    with pytest.raises(UnsupportedModelError, match="sum pooling"):
        export_for_engine("fastembed", encoder, tmp_path / "fe")
    assert not (tmp_path / "fe").exists()
    from spladekit.model.inference_free import make_inference_free

    doc_only = make_encoder(tmp_path, "bert")
    make_inference_free(doc_only, TEXTS)
    for engine in ("fastembed", "elasticsearch", "anserini"):
        with pytest.raises(UnsupportedModelError, match="inference-free"):
            export_for_engine(engine, doc_only, tmp_path / engine)
        assert not (tmp_path / engine).exists()


# ----------------------------------------------------------------- Anserini
ANSERINI = """
import json, sys
import jnius_config
jnius_config.add_options("-Duser.home=" + sys.argv[2])
# onnxruntime-java unpacks its native library (15 MB) into java.io.tmpdir and an in-process JVM
# never deletes it: kept under the test's folder, not left in /tmp
jnius_config.add_options("-Djava.io.tmpdir=" + sys.argv[2])
jnius_config.set_classpath(sys.argv[1])
from jnius import autoclass
encoder = autoclass("io.anserini.encoder.sparse.SpladePlusPlusEnsembleDistilEncoder")()
out = []
for query in json.loads(sys.argv[3]):
    weights = encoder.getTokenWeightMap(query)
    encoded = encoder.encode(query)
    out.append([{k: float(weights.get(k)) for k in weights.keySet().toArray()}, encoded])
print(json.dumps(out))
"""


@pytest.mark.engines
@pytest.mark.parametrize("variant", [("max", "relu"), ("sum", "log1p_relu")])
def test_anserini_onnx_encoder_runs_the_export(tmp_path, variant):
    """Anserini 0.25.0's own SpladePlusPlusEnsembleDistilEncoder (ONNX, Java) on the export, found in
    its cache folder under ~/.cache/anserini/encoders (user.home and java.io.tmpdir pointed at a
    temporary folder, which then holds onnxruntime-java's unpacked library)."""
    import shutil

    from tests import engine_helpers as eh

    reason = eh.missing_anserini() or eh.missing_module("jnius", "pyjnius")
    if reason:
        pytest.skip(reason)
    from spladekit.model.engines.anserini import ONNX_FILE, VOCAB_FILE, quantized

    encoder = make_encoder(tmp_path, "bert", pooling=variant[0], activation=variant[1])
    out = export_for_engine("anserini", encoder, tmp_path / "ans")
    cache = tmp_path / "home" / ".cache" / "anserini" / "encoders"
    cache.mkdir(parents=True)
    for name in (ONNX_FILE, VOCAB_FILE):
        shutil.copy(out / name, cache / name)
    proc = subprocess.run(
        [sys.executable, "-c", ANSERINI, str(eh.anserini_jar()), str(tmp_path / "home"), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    tol = tolerance(encoder, TEXTS)
    for text, (weights, encoded) in zip(TEXTS, results):
        expected = encoder.encode_dense([text], LENGTH)[0].numpy()
        vocab = encoder.vocabulary
        want = {vocab[j]: float(expected[j]) for j in np.nonzero(expected > 0)[0] if j not in (0, 101, 102)}
        assert set(weights) == set(want)
        assert max(abs(weights[t] - want[t]) for t in want) <= tol
        counts = {}
        for token in encoded.split():
            counts[token] = counts.get(token, 0) + 1
        assert counts == {t: quantized(w) for t, w in weights.items() if quantized(w) > 0}


def test_anserini_refusals(tmp_path):
    encoder = make_encoder(tmp_path, "bert")
    encoder.tokenizer.backend_tokenizer.normalizer = None  # a cased tokenizer now
    encoder.tokenizer.do_lower_case = False
    with pytest.raises(UnsupportedModelError, match="cased"):
        export_for_engine("anserini", encoder, tmp_path / "a")


# ----------------------------------------------------------------- CLI
def test_cli_export_model_engine_formats(tmp_path):
    """The command itself (the writers' outputs are checked above): the real entry point once, then in process."""
    from huggingface_hub import ModelCard
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.index.formats.elastic import mapping

    encoder = make_encoder(tmp_path, "bert")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "export-model",
            "--model",
            encoder.metadata.source,
            "--format",
            "fastembed",
            "--out",
            str(tmp_path / "cli-fastembed"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "cli-fastembed" / "model.onnx").is_file() and "HOW_TO_LOAD.md" in proc.stdout
    for engine, field_type in (("elasticsearch", "sparse_vector"), ("opensearch", "rank_features")):
        out = tmp_path / f"cli-{engine}"
        result = CliRunner().invoke(
            app, ["export-model", "--model", encoder.metadata.source, "--format", engine, "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert json.dumps(mapping("splade", field_type), indent=2) in (out / "HOW_TO_LOAD.md").read_text()
        # the model card beside the export (issue 33): parsed by huggingface_hub, tagged with the engine, and its
        # usage points at HOW_TO_LOAD.md (spladekit does not load an engine's folder)
        card = ModelCard.load(out / "README.md")
        assert {"sparse-encoder", "splade", "spladekit", engine} <= set(card.data.tags)
        assert "(HOW_TO_LOAD.md)" in card.text and "SpladeEncoder.from_pretrained" not in card.text
        (out / "README.md").write_text("my own card")  # a second export keeps a card the user wrote
        again = CliRunner().invoke(
            app, ["export-model", "--model", encoder.metadata.source, "--format", engine, "--out", str(out)]
        )
        assert again.exit_code == 0, again.output
        assert (out / "README.md").read_text() == "my own card"
    for args, words in (
        (["--format", "elasticsearch", "--quantize", "int8"], "--format onnx only"),
        (["--format", "fastembed", "--opset", "3"], "--format onnx only"),
        (["--format", "nope"], "elasticsearch, opensearch, fastembed, anserini"),
    ):
        refused = CliRunner().invoke(
            app, ["export-model", "--model", encoder.metadata.source, *args, "--out", str(tmp_path / "q")]
        )
        assert refused.exit_code == 2 and words in refused.output and not (tmp_path / "q").exists(), refused.output


# ----------------------------------------------------------------- libtorch 2.7.1 signatures
def _declarations(path: Path) -> str:
    """``RegistrationDeclarations.h`` from a file or from inside a torch wheel."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.read("torch/include/ATen/RegistrationDeclarations.h").decode()
    return path.read_text()


def test_schema_check_flags_a_signature_the_runtime_lacks(tmp_path):
    """Against this torch's own declarations nothing is missing; with one op's line removed it is named."""
    own = Path(torch.__file__).parent / "include" / "ATen" / "RegistrationDeclarations.h"
    if not own.is_file():
        pytest.skip(f"{own} not in this torch build")
    out = export_for_engine("elasticsearch", make_encoder(tmp_path, "bert"), tmp_path / "es")
    module = torch.jit.load(str(out / "model.pt"))
    text = own.read_text()
    assert set(ts.schema_mismatches(module, text)) <= {"jit builtins"}
    cut = "\n".join(line for line in text.splitlines() if '"schema": "aten::scaled_dot_product_attention(' not in line)
    assert "aten::scaled_dot_product_attention" in ts.schema_mismatches(module, cut)


def _libtorch_declarations() -> Path | None:
    """torch 2.7.1's RegistrationDeclarations.h: ``$SPLADEKIT_LIBTORCH_DECLARATIONS`` (the header or a
    torch-2.7.1 wheel), else the one scripts/setup-engines.sh extracted beside the Anserini jar."""
    import os

    given = os.environ.get("SPLADEKIT_LIBTORCH_DECLARATIONS")
    if given:
        return Path(given)
    cache = Path(os.environ.get("SPLADEKIT_ENGINES", Path(sys.prefix) / "share" / "spladekit-engines"))
    header = cache / "libtorch-2.7.1" / "RegistrationDeclarations.h"
    return header if header.is_file() else None


@pytest.mark.skipif(
    _libtorch_declarations() is None,
    reason="torch 2.7.1's RegistrationDeclarations.h not found: `make test` (scripts/setup-engines.sh) "
    "extracts it, or SPLADEKIT_LIBTORCH_DECLARATIONS=torch-2.7.1-*.whl or the header",
)
@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
def test_torchscript_signatures_exist_in_libtorch_2_7_1(tmp_path, family):
    """Every ATen call in the Elasticsearch and OpenSearch .pt files has its signature in torch 2.7.1's
    declarations (what ES 9.2+ and DJL 0.36 run); the rest are TorchScript built-ins."""
    declarations = _declarations(_libtorch_declarations())
    encoder = make_encoder(tmp_path, family)
    es = export_for_engine("elasticsearch", encoder, tmp_path / "es", pooling="sum", activation="log1p_relu")
    osd = export_for_engine("opensearch", encoder, tmp_path / "os")
    with zipfile.ZipFile(osd / "model.zip") as archive:
        archive.extract("model.pt", tmp_path / "os-pt")
    for path in (es / "model.pt", tmp_path / "os-pt" / "model.pt"):
        missing = ts.schema_mismatches(torch.jit.load(str(path)), declarations)
        builtins = set(missing.pop("jit builtins", "").split(", ")) - {""}
        assert missing == {} and builtins <= {"aten::Int", "aten::__getitem__"}, (path, missing, builtins)


def bpe_roberta_encoder() -> SpladeEncoder:
    """A tiny RoBERTa with a byte-level BPE tokenizer trained in code (Elasticsearch's ``roberta``
    tokenization: 2 arguments, vocabulary.json with merges)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    from tests.mlm_families import WORDS

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        TEXTS + [" ".join(WORDS)],
        vocab_size=300,
        min_frequency=1,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    )
    tokenizer = RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=62,
    )
    mlm = tiny_mlm("roberta", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    return SpladeEncoder(mlm, tokenizer, EncoderMetadata(doc_max_length=LENGTH, source="bpe-roberta"), device="cpu")


def test_elasticsearch_roberta_bpe_has_two_arguments(tmp_path):
    encoder = bpe_roberta_encoder()
    out = export_for_engine("elasticsearch", encoder, tmp_path / "es")
    record = json.loads((out / "spladekit.json").read_text())["extra"]["elasticsearch"]
    assert record["arguments"] == ["input_ids", "attention_mask"] and record["tokenization"] == "roberta"
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    merges = json.loads(encoder.tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    assert vocabulary["merges"] == [m if isinstance(m, str) else " ".join(m) for m in merges] and vocabulary["merges"]
    loaded = torch.jit.load(str(out / "model.pt"))
    ts.check_allowlisted(loaded)
    tol = tolerance(encoder, TEXTS)
    for text in TEXTS:
        got = es_call(loaded, encoder, text, record["arguments"])[0][0].numpy()
        assert_vectors(got, encoder.encode_dense([text], LENGTH)[0].numpy(), tol)
    with pytest.raises(UnsupportedModelError, match="not WordPiece"):  # Anserini's tokenizer is WordPiece
        export_for_engine("anserini", encoder, tmp_path / "ans")
