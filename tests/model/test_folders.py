"""Model folders of other libraries load as their authors wrote them, or are refused.

sentence-transformers itself builds and saves every folder here (tiny random BERT and ModernBERT
MLMs made in code, and the real splade-tiny) and encodes the expected vectors; spladekit reads the
folder (:mod:`spladekit.model.folders`) and must give the same vectors with both heads, or refuse
the folder before loading any weights, naming the file, the module and the field.

Tolerance (:func:`_bound`): both libraries sort a batch by length and pad it to its longest text
(one batch here), so the backbone sees the same tensors and runs the same torch code: the hidden
states after the MLM head's transform are the same. The libraries then differ only in how the
decoder's dot products are formed (the full ``[B, L, V]`` linear layer in sentence-transformers;
a matmul with the bias added after the max, or vocabulary chunks, in spladekit). Each logit
``Σ_k h_k W_jk + b_j`` is a sum of H + 1 terms: in float32 any order is within
``γ_{H+1} Σ|terms|`` of the exact value (Higham, Accuracy and Stability, §3.1, ``γ_n = nU/(1−nU)``),
so two orders differ by ≤ ``2γ_{H+1} S_tj`` with ``S_tj = Σ_k |h_tk W_jk| + |b_j|``. Both
activations are 1-Lipschitz, so max pooling moves by ≤ ``max_t`` of it and sum pooling by ≤ ``Σ_t``
of it; the activations' own roundings (≤ 4 per side) and the L-term sum add ``(2L + 8)·U`` relative.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import UnsupportedModelError
from spladekit.model.encoder import SpladeEncoder
from spladekit.model.folders import read_model_folder
from tests.mlm_families import TEXTS, tiny_mlm, tiny_tokenizer

# the module paths of sentence-transformers >= 5.4 (earlier versions kept them in sparse_encoder.models;
# the `test` extra asks for >= 6.0); the folders spladekit reads are recognised by class name, whichever
# version wrote them
pytest.importorskip(
    "sentence_transformers.sparse_encoder.modules", reason="needs sentence-transformers >= 6.0 (the `test` extra)"
)
from sentence_transformers import SparseEncoder  # noqa: E402
from sentence_transformers.sparse_encoder.modules import (  # noqa: E402
    Router,
    SparseStaticEmbedding,
    SpladePooling,
    Transformer,
)

U = float(np.finfo(np.float32).eps) / 2
VARIANTS = [(p, a) for p in ("max", "sum") for a in ("relu", "log1p_relu")]
#: padded batches: texts of 2 to 10 tokens, an empty one among them
QUERIES = ["protein cell", "increased risk of heart drug dose in patients", "", "the gene"]


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


def _base(family: str, folder: Path) -> Path:
    tiny_mlm(family).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {family: _base(family, root / family) for family in ("bert", "modernbert")}


def _st_folder(base: Path, out: Path, pooling="max", activation="relu", **model_kwargs) -> Path:
    modules = [Transformer(str(base), transformer_task="fill-mask"), SpladePooling(pooling, activation)]
    SparseEncoder(modules=modules, device="cpu", **model_kwargs).save(str(out))
    return out


def _bound(encoder: SpladeEncoder, texts, max_length: int) -> tuple[np.ndarray, float]:
    """``(atol [len(texts), V], rtol)`` of the module docstring for ``texts`` encoded by ``encoder``."""
    batch = encoder.tokenize(texts, max_length)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        h = encoder.model.hidden_states(batch["input_ids"], batch["attention_mask"]).double()
    head = encoder.model.head
    s = h.abs() @ head.weight.detach().double().abs().T
    if head.bias is not None:
        s = s + head.bias.detach().double().abs()
    spread = (2 * _gamma(h.shape[-1] + 1) * s).masked_fill(~mask[..., None], 0.0)  # [B, L, V]
    length = h.shape[1]
    if encoder.metadata.pooling == "sum":
        return spread.sum(1).numpy(), (2 * length + 8) * U
    return spread.max(1).values.numpy(), 8 * U


def _check_close(ours: np.ndarray, theirs: np.ndarray, encoder: SpladeEncoder, texts, max_length: int, what: str):
    atol, rtol = _bound(encoder, texts, max_length)
    # [PAD] is 0 in every spladekit vector (SpladeEncoder.encode_dense); sentence-transformers keeps
    # whatever this random head gives it (a trained model gives 0 there in both)
    theirs = theirs.copy()
    theirs[:, encoder.tokenizer.pad_token_id] = 0.0
    err = np.abs(ours - theirs)
    limit = atol + rtol * np.abs(theirs)
    assert (err <= limit).all(), f"{what}: max excess {float((err - limit).max()):.3g}"
    assert np.abs(theirs).max() > 0.1  # the vectors compared are not empty


def _st_vectors(folder: Path, queries, documents):
    model = SparseEncoder(str(folder), device="cpu")
    q = model.encode_query(queries, convert_to_tensor=True).to_dense().numpy()
    d = model.encode_document(documents, convert_to_tensor=True).to_dense().numpy()
    return q, d


def _compare(folder: Path, head_impl: str, queries=QUERIES, documents=TEXTS) -> SpladeEncoder:
    st_q, st_d = _st_vectors(folder, queries, documents)
    encoder = SpladeEncoder.from_pretrained(folder, head_impl=head_impl, device="cpu")
    meta = encoder.metadata
    if meta.query_encoder == "splade":
        _check_close(
            encoder.encode_queries(queries).toarray(), st_q, encoder, queries, meta.query_max_length, "queries"
        )
    else:  # the same float32 weights looked up (presence 1 × weight): exact
        np.testing.assert_array_equal(encoder.encode_queries(queries).toarray(), st_q)
    _check_close(
        encoder.encode_documents(documents).toarray(), st_d, encoder, documents, meta.doc_max_length, "documents"
    )
    return encoder


# ------------------------------------------------------------------------- sentence-transformers folders
@pytest.mark.parametrize("head_impl", ["plain", "fused"])
@pytest.mark.parametrize("pooling,activation", VARIANTS)
@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_sparse_encoder_folders_give_their_vectors(bases, tmp_path, family, pooling, activation, head_impl):
    folder = _st_folder(bases[family], tmp_path / "st", pooling, activation)
    encoder = _compare(folder, head_impl)
    assert (encoder.metadata.pooling, encoder.metadata.activation) == (pooling, activation)
    assert (encoder.model.pooling, encoder.model.activation) == (pooling, activation)
    # sentence-transformers caps the unbounded tokenizer at the model's 64 positions, for both sides
    assert encoder.metadata.query_max_length == encoder.metadata.doc_max_length == 64


@pytest.mark.parametrize("head_impl", ["plain", "fused"])
def test_splade_tiny_as_a_sparse_encoder(splade_tiny, tmp_path, head_impl):
    folder = _st_folder(splade_tiny, tmp_path / "st", "max", "relu", max_active_dims=20)
    texts = ["what causes heart disease in older patients", "vaccine", "the mitochondria is the powerhouse of the cell"]
    encoder = _compare(folder, head_impl, queries=texts[:2], documents=texts)
    # max_active_dims: saved in config_sentence_transformers.json from sentence-transformers 6.2 on (earlier
    # versions save no top-k, and read none back); spladekit reads the folder as sentence-transformers does
    import sentence_transformers
    from packaging.version import Version

    saved = 20 if Version(sentence_transformers.__version__) >= Version("6.2") else None
    assert SparseEncoder(str(folder), device="cpu").max_active_dims == saved
    assert encoder.metadata.query_top_k == encoder.metadata.doc_top_k == saved
    assert encoder.metadata.doc_max_length == 512  # tokenizer_config.json model_max_length, capped at 512 positions


def test_router_with_a_static_query_side(bases, tmp_path):
    tokenizer = tiny_tokenizer()
    weight = torch.rand(len(tokenizer.get_vocab()), generator=torch.Generator().manual_seed(0))
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer, weight=weight)],
        document_modules=[
            Transformer(str(bases["bert"]), transformer_task="fill-mask"),
            SpladePooling("sum", "log1p_relu"),
        ],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(tmp_path / "router"))
    for head_impl in ("plain", "fused"):
        encoder = _compare(
            tmp_path / "router", head_impl, queries=QUERIES + ["emoji 🙂 cell"]
        )  # [UNK] weighted as stored
        assert encoder.metadata.query_encoder == "inference-free"
        assert encoder.metadata.pooling == "sum" and encoder.metadata.activation == "log1p_relu"
    assert torch.equal(encoder.query_weights, weight)  # weights and all


# ------------------------------------------------------------------------------- OpenSearch doc-only
def test_opensearch_doc_only_folder(bases, tmp_path):
    """Assembled as the doc-v1/v2 model cards describe: masked LM + tokenizer + idf.json; queries are
    the bag of their tokens times idf (tokens absent from idf.json weigh 0, special tokens 0);
    documents ``log(1 + ReLU(max_t logits·mask))`` with the special-token columns set to 0."""
    folder = tmp_path / "doc-only"
    shutil.copytree(bases["bert"], folder)
    idf = {"protein": 2.5, "cell": 1.25, "gene": 0.75, "the": 0.125, "[CLS]": 9.0, "[SEP]": 9.0, "[UNK]": 9.0}
    (folder / "idf.json").write_text(json.dumps(idf))
    encoder = SpladeEncoder.from_pretrained(folder, head_impl="fused", device="cpu")
    assert read_model_folder(folder).layout == "opensearch-doc-only"
    assert encoder.metadata.query_encoder == "inference-free" and encoder.metadata.zero_special_tokens
    vocab = encoder.tokenizer.get_vocab()
    # by hand: three tokens, each once, with its idf.json weight; the special tokens count 0
    query = encoder.encode_queries(["protein cell gene", "gene gene 🙂"]).toarray()
    expected = np.zeros_like(query)
    expected[0, [vocab["protein"], vocab["cell"], vocab["gene"]]] = [2.5, 1.25, 0.75]
    expected[1, vocab["gene"]] = 0.75  # repeated once; 🙂 is [UNK], a special token: 0
    np.testing.assert_array_equal(query, expected)  # float32 look-ups of the same numbers (exact in binary)

    # documents: the model card's formula, computed here with transformers' own logits
    from transformers import AutoModelForMaskedLM

    mlm = AutoModelForMaskedLM.from_pretrained(folder).eval()
    features = encoder.tokenizer(TEXTS, padding=True, truncation=True, return_tensors="pt", return_token_type_ids=False)
    with torch.no_grad():
        values = torch.max(mlm(**features)[0] * features["attention_mask"].unsqueeze(-1), dim=1).values
    card = torch.log(1 + torch.relu(values))
    card[:, list(encoder.tokenizer.all_special_ids)] = 0
    ours = encoder.encode_documents(TEXTS).toarray()
    assert (ours[:, encoder.tokenizer.all_special_ids] == 0).all()
    _check_close(ours, card.numpy(), encoder, TEXTS, encoder.metadata.doc_max_length, "doc-only documents")

    # the ONNX export computes the same documents (special-token columns zeroed inside the graph) and
    # keeps the idf.json query side
    pytest.importorskip("onnxruntime")
    from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx

    exported = OnnxSpladeEncoder(export_onnx(encoder, tmp_path / "onnx"))
    assert exported.metadata.zero_special_tokens
    onnx_docs = exported.encode_documents(TEXTS).toarray()
    assert (onnx_docs[:, encoder.tokenizer.all_special_ids] == 0).all()
    _check_close(onnx_docs, card.numpy(), encoder, TEXTS, encoder.metadata.doc_max_length, "doc-only documents, ONNX")
    np.testing.assert_array_equal(exported.encode_queries(["protein cell gene", "gene gene 🙂"]).toarray(), expected)


# ------------------------------------------------------------------------------------------- refusals
def _refused(folder: Path, file: str, field: str, *words: str):
    """The folder is refused before any weights load (they are deleted first), naming file, field, words."""
    for weights in folder.rglob("model.safetensors"):
        weights.unlink()
    with pytest.raises(UnsupportedModelError) as info:
        SpladeEncoder.from_pretrained(folder, device="cpu")
    error = info.value
    assert error.path.name == file and error.field == field, str(error)
    for word in words:
        assert word in str(error), str(error)
    return error


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_sparse_auto_encoder_is_refused(bases, tmp_path):
    from sentence_transformers.sparse_encoder.modules import SparseAutoEncoder

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # before 6.x
        from sentence_transformers.models import Pooling

    transformer = Transformer(str(bases["bert"]))
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), "mean"), SparseAutoEncoder(32, 64, k=4)]
    SparseEncoder(modules=modules, device="cpu").save(str(tmp_path / "csr"))
    _refused(tmp_path / "csr", "modules.json", "type", "SparseAutoEncoder", "Pooling", "mean")


def test_mean_pooling_feature_extraction_and_unknown_modules_are_refused(bases, tmp_path):
    base = _st_folder(bases["bert"], tmp_path / "base")
    for name, change, file, field, words in [
        (
            "mean",
            lambda m: m[1].update(type="sentence_transformers.sentence_transformer.modules.pooling.Pooling"),
            "modules.json",
            "type",
            ("'1' (Pooling)", "mean/CLS"),
        ),
        ("unknown", lambda m: m[1].update(type="my_lab.pooling.CleverPooling"), "modules.json", "type", ("my_lab",)),
    ]:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        _edit(folder / "modules.json", change)
        _refused(folder, file, field, *words)
    folder = tmp_path / "features"
    shutil.copytree(base, folder)
    _edit(folder / "sentence_bert_config.json", lambda c: c.update(transformer_task="feature-extraction"))
    _refused(folder, "sentence_bert_config.json", "transformer_task", "'0'", "fill-mask")
    folder = tmp_path / "cls"
    shutil.copytree(base, folder)
    _edit(folder / "1_SpladePooling" / "config.json", lambda c: c.update(pooling_strategy="cls"))
    _refused(folder, "config.json", "pooling_strategy", "'1'", "'cls'")


def test_router_with_two_encoders_is_refused(bases, tmp_path):
    router = Router.for_query_document(
        query_modules=[Transformer(str(bases["bert"]), transformer_task="fill-mask"), SpladePooling()],
        document_modules=[Transformer(str(bases["modernbert"]), transformer_task="fill-mask"), SpladePooling()],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(tmp_path / "two"))
    _refused(tmp_path / "two", "router_config.json", "structure.query", "query_0_Transformer", "document_0_Transformer")


def test_prompts_are_refused(bases, tmp_path):
    folder = _st_folder(bases["bert"], tmp_path / "prompted", prompts={"query": "query: ", "document": ""})
    _refused(folder, "config_sentence_transformers.json", "prompts.query", "'query: '")


def test_spladekit_json_disagreeing_with_splade_pooling_is_refused(bases, tmp_path):
    folder = _st_folder(bases["bert"], tmp_path / "st", "sum")
    (folder / "spladekit.json").write_text(json.dumps({"pooling": "max"}))
    _refused(folder, "spladekit.json", "pooling", "'sum'")


# ----------------------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("pooling,activation", [("sum", "relu"), ("max", "log1p_relu")])
def test_training_keeps_pooling_and_sentence_transformers_reads_the_result(tmp_path, pooling, activation):
    from spladekit.train import train
    from tests.train_helpers import make_examples, make_tiny_model, tiny_config

    start = _st_folder(make_tiny_model(tmp_path / "hf"), tmp_path / "start", pooling, activation)
    result = train(tiny_config(start, steps=2), tmp_path / "out", examples=make_examples(), show_progress=False)
    saved = json.loads((result.model_dir / "spladekit.json").read_text())
    assert (saved["pooling"], saved["activation"]) == (pooling, activation)
    pooling_config = json.loads((result.model_dir / "1_SpladePooling" / "config.json").read_text())
    assert (pooling_config["pooling_strategy"], pooling_config["activation_function"]) == (pooling, activation)
    texts = ["w1 w2 w3", "w4 w5 w6 w7 w8 w9 w10", "w11"]
    _compare(result.model_dir, "plain", queries=texts, documents=texts)


def test_inference_free_and_rescaled_saves_load_in_sentence_transformers(bases, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.cli.inference_free import build_inference_free

    start = _st_folder(bases["bert"], tmp_path / "start", "sum", "log1p_relu")
    build_inference_free(str(start), None, tmp_path / "if", documents=TEXTS)
    encoder = _compare(tmp_path / "if", "fused")
    assert encoder.metadata.query_encoder == "inference-free" and encoder.metadata.pooling == "sum"
    result = CliRunner().invoke(app, ["rescale", str(start), "--out", str(tmp_path / "rescaled"), "--factor", "0.5"])
    assert result.exit_code == 0, result.output
    rescaled = _compare(tmp_path / "rescaled", "plain")
    assert (rescaled.metadata.pooling, rescaled.metadata.activation) == ("sum", "log1p_relu")


# ------------------------------------------------------------------------------------ CLI on these folders
def test_diagnose_and_rescale_accept_router_and_doc_only_folders(bases, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    tokenizer = tiny_tokenizer()
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer, weight=torch.ones(len(tokenizer.get_vocab())))],
        document_modules=[Transformer(str(bases["modernbert"]), transformer_task="fill-mask"), SpladePooling()],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(tmp_path / "router"))
    doc_only = tmp_path / "doc-only"
    shutil.copytree(bases["bert"], doc_only)
    (doc_only / "idf.json").write_text(json.dumps({"protein": 1.5}))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    runner = CliRunner()
    for name, source in (("router", tmp_path / "router"), ("doc-only", doc_only)):
        result = runner.invoke(
            app, ["diagnose", str(source), "--out", str(tmp_path / f"diag-{name}"), "--texts", str(texts)]
        )
        assert result.exit_code == 0, result.output
        diagnosis = json.loads((tmp_path / f"diag-{name}" / "diagnosis.json").read_text())
        before = SpladeEncoder.from_pretrained(source, device="cpu")
        norms = before.model.head.weight.detach().norm(dim=1)
        # the head measured is the document model's masked LM (float64 norms of float32 rows)
        assert diagnosis["head"]["row_norm"]["mean"] == pytest.approx(float(norms.double().mean()), rel=1e-6)
        assert diagnosis["head"]["family"] == ("modernbert" if name == "router" else "bert")
        out = tmp_path / f"rescaled-{name}"
        result = runner.invoke(app, ["rescale", str(source), "--out", str(out), "--factor", "0.5"])
        assert result.exit_code == 0, result.output
        after = SpladeEncoder.from_pretrained(out, device="cpu")
        # the decoder scaled by exactly 0.5 (a power of two: exact in float32)
        assert torch.equal(after.model.head.weight, before.model.head.weight * 0.5)
        assert after.metadata.query_encoder == "inference-free"
        assert torch.equal(after.query_weights, before.query_weights)


def test_training_config_sets_pooling_and_activation_of_a_plain_masked_lm(tmp_path):
    from spladekit.train.step import load_model
    from tests.train_helpers import make_tiny_model, tiny_config

    start = make_tiny_model(tmp_path / "hf")
    model, _, _ = load_model(tiny_config(start))
    assert (model.pooling, model.activation) == ("max", "relu")  # a plain masked LM: SPLADE v2
    model, _, _ = load_model(tiny_config(start, model__pooling="sum", model__activation="log1p_relu"))
    assert (model.pooling, model.activation) == ("sum", "log1p_relu")


def test_damaged_sentence_transformers_files_name_the_file(bases, tmp_path):
    from spladekit.errors import DataFormatError

    folder = _st_folder(bases["bert"], tmp_path / "st")
    (folder / "modules.json").write_text('[{"idx": 0, "type": ')
    with pytest.raises(DataFormatError, match="modules.json, line 1"):
        SpladeEncoder.from_pretrained(folder, device="cpu")
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "../elsewhere",
                    "type": "sentence_transformers.base.modules.transformer.Transformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "1_SpladePooling",
                    "type": "sentence_transformers.sparse_encoder.modules.SpladePooling",
                },
            ]
        )
    )
    with pytest.raises(DataFormatError, match="leaves the model folder") as info:
        SpladeEncoder.from_pretrained(folder, device="cpu")
    assert info.value.field == "path"


def test_fine_tuning_an_inference_free_router_continues_its_query_side(tmp_path):
    from transformers import AutoTokenizer

    from spladekit.train import train
    from tests.train_helpers import make_examples, make_tiny_model, tiny_config

    hf = make_tiny_model(tmp_path / "hf")
    tokenizer = AutoTokenizer.from_pretrained(hf)
    weight = torch.rand(len(tokenizer.get_vocab()), generator=torch.Generator().manual_seed(3)) + 0.5
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer, weight=weight)],
        document_modules=[Transformer(str(hf), transformer_task="fill-mask"), SpladePooling("max", "log1p_relu")],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(tmp_path / "router"))
    config = tiny_config(
        tmp_path / "router", steps=2, model__query_encoder="inference-free", model__train_query_weights=False
    )
    result = train(config, tmp_path / "out", examples=make_examples(), show_progress=False)
    encoder = SpladeEncoder.from_pretrained(result.model_dir, device="cpu")
    # frozen: the saved side is relu(θ) of the start table, θ > 0: the same float32 numbers
    assert torch.equal(encoder.query_weights, weight)
    assert (
        encoder.metadata.extra["inference_free"]["init"]
        == "the start model's query weights (sentence-transformers-router)"
    )
    assert encoder.metadata.activation == "log1p_relu"
    _compare(result.model_dir, "plain", queries=["w1 w2 w3", "w4"], documents=["w1 w2 w3 w5", "w6 w7"])


@pytest.mark.parametrize(
    "file,change,field,word",
    [
        ("sentence_bert_config.json", lambda c: c.update(do_lower_case=True), "do_lower_case", "lowercases"),
        (
            "config_sentence_transformers.json",
            lambda c: c.update(similarity_fn_name="cosine"),
            "similarity_fn_name",
            "'cosine'",
        ),
        (
            "config_sentence_transformers.json",
            lambda c: c.update(model_type="SentenceTransformer"),
            "model_type",
            "SparseEncoder",
        ),
        (
            "modules.json",
            lambda m: m.append(
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.base.modules.normalize.Normalize",
                }
            ),
            "type",
            "'2' (Normalize)",
        ),
    ],
)
def test_other_settings_that_change_vectors_are_refused(bases, tmp_path, file, change, field, word):
    folder = _st_folder(bases["bert"], tmp_path / "st")
    _edit(folder / file, change)
    _refused(folder, file, field, word)


def test_router_route_mappings_are_refused(bases, tmp_path):
    tokenizer = tiny_tokenizer()
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer)],
        document_modules=[Transformer(str(bases["bert"]), transformer_task="fill-mask"), SpladePooling()],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(tmp_path / "router"))
    _edit(
        tmp_path / "router" / "router_config.json",
        lambda c: c["parameters"].update(route_mappings={"('query', 'text')": "document"}),
    )
    _refused(tmp_path / "router", "router_config.json", "parameters.route_mappings", "'query' and a 'document'")


def test_index_and_search_commands_use_the_folders_pooling(tiny_bert_dir, tiny_beir, tmp_path):
    """`index` → `search` with a sentence-transformers sum/log1p_relu folder: the run's scores are the
    dot products of sentence-transformers' own query and document vectors, and the index records the pooling."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.data.beir import load_beir
    from spladekit.data.trec import read_run

    folder = _st_folder(tiny_bert_dir, tmp_path / "st", "sum", "log1p_relu")
    runner = CliRunner()
    result = runner.invoke(
        app, ["index", "--model", str(folder), "--data", str(tiny_beir), "--out", str(tmp_path / "index")]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        ["search", "--index", str(tmp_path / "index"), "--data", str(tiny_beir), "--out", str(tmp_path / "run.trec")],
    )
    assert result.exit_code == 0, result.output
    dataset = load_beir(tiny_beir, "test")
    st_q, st_d = _st_vectors(folder, list(dataset.queries.values()), list(dataset.corpus.values()))
    pad = SpladeEncoder.from_pretrained(folder, device="cpu").tokenizer.pad_token_id
    st_q[:, pad] = st_d[:, pad] = 0.0  # spladekit's [PAD] column is 0 (see _check_close)
    scores = st_q.astype(np.float64) @ st_d.astype(np.float64).T
    run = read_run(tmp_path / "run.trec")
    checked = 0
    for i, qid in enumerate(dataset.queries):
        for j, docid in enumerate(dataset.corpus):
            if docid in run.get(qid, {}):
                # run files keep 6 decimals (5e-7); the vectors agree to the float32 accumulation bound
                # (~1e-5 relative at these sizes, see the module docstring), far below 1e-4
                assert run[qid][docid] == pytest.approx(scores[i, j], rel=1e-4, abs=5e-7)
                checked += 1
    assert checked > 0
    stored = json.loads((tmp_path / "index" / "index.json").read_text())  # the encoder's settings, recorded
    assert (stored["pooling"], stored["activation"]) == ("sum", "log1p_relu")


def test_diagnosis_measures_splade_activity_with_the_models_pooling(bases):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from spladekit.model.calibrate.diagnose import splade_stats
    from spladekit.model.encoder import EncoderMetadata
    from spladekit.model.splade import SpladeModel

    mlm = AutoModelForMaskedLM.from_pretrained(bases["bert"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(bases["bert"])
    queries, documents = QUERIES[:2], TEXTS[:3]
    summed = splade_stats(SpladeModel(mlm, "plain", pooling="sum"), tokenizer, queries, documents, 32, 8)
    encoder = SpladeEncoder(
        SpladeModel(mlm, "plain", pooling="sum"),
        tokenizer,
        EncoderMetadata(query_max_length=32, doc_max_length=32),
        batch_size=8,
        device="cpu",
    )
    expected = float((encoder.encode_queries(queries) @ encoder.encode_documents(documents).T).toarray().mean())
    assert summed.score_mean == pytest.approx(expected, rel=1e-12)  # the same code on the same batches
    maxed = splade_stats(mlm, tokenizer, queries, documents, 32, 8)  # a bare masked LM: max pooling
    assert maxed.score_mean < 0.5 * summed.score_mean  # sum pooling adds up every position's weight


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_truncated_weights_name_the_file(tiny_bert_dir, tiny_beir, tmp_path, weights):
    """A weights file cut short (an interrupted download or copy) is refused naming that file, from
    the library and from the command line (exit 2, one line), not with safetensors'/torch's traceback."""
    import subprocess
    import sys

    from spladekit.errors import DataFormatError

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    if weights == "pytorch_model.bin":  # the same weights, pickled by torch as older checkpoints are
        from safetensors.torch import load_file

        torch.save(load_file(folder / "model.safetensors"), folder / weights)
        (folder / "model.safetensors").unlink()
    path = folder / weights
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataFormatError, match="damaged or truncated") as info:
        SpladeEncoder.from_pretrained(folder, device="cpu")
    assert info.value.path == path
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "index",
            "--model",
            str(folder),
            "--data",
            str(tiny_beir),
            "--out",
            str(tmp_path / "index"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "index").exists()


def test_repeated_keys_in_idf_json_are_refused(bases, tmp_path):
    """``json`` keeps the last of repeated keys; an idf.json saying two weights for one token is refused
    naming the file and the token (written by hand: json.dumps cannot repeat a key)."""
    from spladekit.errors import DataFormatError

    folder = tmp_path / "doc-only"
    shutil.copytree(bases["bert"], folder)
    (folder / "idf.json").write_text('{"protein": 2.5, "cell": 1.25, "protein": 0.5}')
    with pytest.raises(DataFormatError, match="more than once") as info:
        SpladeEncoder.from_pretrained(folder, device="cpu")
    assert (info.value.path, info.value.field) == (folder / "idf.json", "protein")


# ------------------------------------------------------------- damaged, contradictory or incomplete folders
def _raises(folder: Path, error, file: str, field: str | None, *words: str):
    """Loading ``folder`` raises ``error`` naming ``file`` (its name), ``field`` and ``words``."""
    with pytest.raises(error) as info:
        SpladeEncoder.from_pretrained(folder, device="cpu")
    message = str(info.value)
    if hasattr(info.value, "path"):
        assert info.value.path.name == file and info.value.field == field, message
    else:
        assert file in message, message
    for word in words:
        assert word in message, message
    return info.value


def test_a_folder_without_tokenizer_files_is_refused(splade_tiny, tmp_path):
    """transformers builds a 5-token BertTokenizer from config.json alone (every word [UNK]): refused."""
    from spladekit.errors import ResolutionError

    folder = tmp_path / "no-tokenizer"
    shutil.copytree(splade_tiny, folder)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    error = _raises(folder, ResolutionError, str(folder), None, "no tokenizer files", "tokenizer.json", "vocab.txt")
    assert not hasattr(error, "path")


def test_a_tokenizer_that_does_not_fit_the_head_is_refused(bases, tmp_path):
    from transformers import AutoTokenizer

    from spladekit.errors import DataFormatError
    from spladekit.model.encoder import VOCAB_PADDING, check_vocabulary_sizes

    # the rule of check_vocabulary_sizes, at its edges (ModernBERT pads 50280 tokens to 50368 rows)
    for tokens, rows in ((30522, 30522), (50280, 50368), (30522 - VOCAB_PADDING + 1, 30522), (60, 64), (32, 64)):
        check_vocabulary_sizes(tokens, rows, tmp_path)
    for tokens, rows in ((30523, 30522), (30522 - VOCAB_PADDING, 30522), (5, 30522), (31, 64)):
        with pytest.raises(DataFormatError, match=f"{tokens} tokens but the MLM head {rows} rows"):
            check_vocabulary_sizes(tokens, rows, tmp_path)
    # a real folder whose tokenizer has 2 ids more than the head has rows
    folder = tmp_path / "more-tokens"
    shutil.copytree(bases["bert"], folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = len(tokenizer)
    tokenizer.add_tokens(["newword1", "newword2"])
    tokenizer.save_pretrained(folder)
    _raises(folder, DataFormatError, folder.name, None, f"{rows + 2} tokens but the MLM head {rows} rows")


def _spladekit_folder(base: Path, out: Path, **fields) -> Path:
    shutil.copytree(base, out)
    (out / "spladekit.json").write_text(json.dumps(fields))
    return out


def test_contradictory_or_wrongly_typed_settings_are_refused(bases, tmp_path):
    from spladekit.errors import DataFormatError

    folder = _st_folder(bases["bert"], tmp_path / "lengths")
    _edit(folder / "sentence_bert_config.json", lambda c: c.update(max_seq_length=32))
    (folder / "spladekit.json").write_text(json.dumps({"doc_max_length": 48}))
    _refused(folder, "spladekit.json", "doc_max_length", "doc_max_length 48", "sentence_bert_config.json", "32")

    for name, fields, field, words in [
        ("string-bool", {"zero_special_tokens": "false"}, "zero_special_tokens", ("JSON boolean", "'false'")),
        ("string-int", {"doc_max_length": "256"}, "doc_max_length", ("integer >= 2",)),
        ("extra-not-object", {"extra": "abc"}, "extra", ("JSON object",)),
        ("unknown-key", {"extras": "abc"}, "extras", ("unknown key 'extras'",)),
    ]:
        _raises(
            _spladekit_folder(bases["bert"], tmp_path / name, **fields),
            DataFormatError,
            "spladekit.json",
            field,
            *words,
        )

    folder = _st_folder(bases["bert"], tmp_path / "pooling-key")
    (folder / "1_SpladePooling" / "config.json").write_text(json.dumps({"pooling": "sum"}))
    _raises(folder, DataFormatError, "config.json", "pooling", "unknown key 'pooling'", "pooling_strategy")

    folder = _st_folder(bases["bert"], tmp_path / "missing-module")
    _edit(folder / "modules.json", lambda m: m[1].update(path="1_Missing"))
    _raises(folder, DataFormatError, "modules.json", "path", "'1_Missing' does not exist")

    folder = _spladekit_folder(bases["bert"], tmp_path / "two-query-sides")
    (folder / "idf.json").write_text(json.dumps({"protein": 1.0}))
    _raises(folder, UnsupportedModelError, "idf.json", None, "spladekit.json")


def _router_folder(bases, out: Path) -> Path:
    tokenizer = tiny_tokenizer()
    router = Router.for_query_document(
        query_modules=[SparseStaticEmbedding(tokenizer=tokenizer, weight=torch.ones(len(tokenizer.get_vocab())))],
        document_modules=[Transformer(str(bases["bert"]), transformer_task="fill-mask"), SpladePooling()],
    )
    SparseEncoder(modules=[router], device="cpu").save(str(out))
    return out


def test_damaged_fields_name_the_file_and_field(bases, tmp_path):
    from spladekit.errors import DataFormatError

    for name, change, field in [
        ("modality-list", lambda c: c.update(modality_config=[1]), "modality_config"),
        ("modality-text", lambda c: c.update(modality_config={"text": "x"}), "modality_config.text"),
        (
            "processor-list",
            lambda c: (c.pop("max_seq_length", None), c.update(processor_kwargs=[1])),
            "processor_kwargs",
        ),
    ]:
        folder = _st_folder(bases["bert"], tmp_path / name)
        _edit(folder / "sentence_bert_config.json", change)
        _raises(folder, DataFormatError, "sentence_bert_config.json", field)

    folder = _router_folder(bases, tmp_path / "router-parameters")
    _edit(folder / "router_config.json", lambda c: c.update(parameters=[1]))
    _raises(folder, DataFormatError, "router_config.json", "parameters")

    folder = tmp_path / "overflow"
    shutil.copytree(bases["bert"], folder)
    (folder / "idf.json").write_text('{"mouse": 1e300}')  # finite in float64, inf in float32
    _raises(folder, DataFormatError, "idf.json", "mouse", "float32")

    folder = _router_folder(bases, tmp_path / "truncated-query")
    (weights,) = [p for p in folder.rglob("model.safetensors") if "SparseStatic" in str(p)]
    weights.write_bytes(weights.read_bytes()[:20])
    assert _raises(folder, DataFormatError, "model.safetensors", None, "damaged or truncated").path == weights

    folder = _st_folder(bases["bert"], tmp_path / "tokenizer-length")
    _edit(folder / "sentence_bert_config.json", lambda c: c.pop("max_seq_length", None))
    _edit(folder / "tokenizer_config.json", lambda c: c.update(model_max_length="8"))
    _raises(folder, DataFormatError, "tokenizer_config.json", "model_max_length", "'8'")

    for name, change in [
        ("vocab-size", lambda c: c.update(vocab_size=c["vocab_size"] + 8)),
        ("layers", lambda c: c.update(num_hidden_layers="2")),
    ]:
        folder = tmp_path / name
        shutil.copytree(bases["bert"], folder)
        _edit(folder / "config.json", change)
        _raises(folder, DataFormatError, "config.json", None, "transformers cannot load the masked LM")


def test_a_static_query_side_path_outside_the_module_names_its_config(bases, tmp_path):
    from spladekit.errors import DataFormatError

    folder = _router_folder(bases, tmp_path / "router")
    (module,) = [p for p in folder.iterdir() if p.name.startswith("query_0_")]
    _edit(module / "config.json", lambda c: c.update(path="missing_idf.json"))
    _raises(folder, DataFormatError, "config.json", "path", "'missing_idf.json' does not exist")
    _edit(module / "config.json", lambda c: c.update(path="../../idf.json"))
    _raises(folder, DataFormatError, "config.json", "path", "leaves the model folder")


def test_a_max_length_above_the_positions_is_lowered_with_a_warning(bases, tmp_path):
    folder = _st_folder(bases["bert"], tmp_path / "long")
    _edit(folder / "sentence_bert_config.json", lambda c: c.update(max_seq_length=100000))
    with pytest.warns(UserWarning, match="max_length 100000 exceeds the model's 64 positions"):
        encoder = SpladeEncoder.from_pretrained(folder, device="cpu")
    assert encoder.metadata.query_max_length == encoder.metadata.doc_max_length == 64  # tiny_config's positions
    folder = _spladekit_folder(bases["bert"], tmp_path / "long-spladekit", doc_max_length=100000)
    with pytest.warns(UserWarning, match="max_length 100000"):
        encoder = SpladeEncoder.from_pretrained(folder, device="cpu")
    assert (encoder.metadata.query_max_length, encoder.metadata.doc_max_length) == (64, 64)
