"""Inference-free (document-only) SPLADE: IDF by hand, the bag-of-tokens query side, saving and
loading (spladekit, sentence-transformers), index/search/evaluate, and joint training."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder  # noqa: E402
from spladekit.model.inference_free import (  # noqa: E402
    QUERY_WEIGHTS_FILE,
    QueryTermWeights,
    encode_bag,
    idf_weights,
    make_inference_free,
)
from spladekit.model.splade import SpladeModel  # noqa: E402
from tests.mlm_families import VOCAB, tiny_mlm, tiny_tokenizer  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402

ID = {w: i for i, w in enumerate(VOCAB)}
DOCS = ["the protein", "the cell", "protein protein cancer"]


def idf(n, df):  # ln(1 + (N - df + 0.5) / (df + 0.5)), in Python floats
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def test_idf_by_hand():
    tok = tiny_tokenizer()
    w = idf_weights(tok, DOCS, len(VOCAB))
    # N = 3; df: the 2, protein 2 (counted once in the third document), cell 1, cancer 1, others 0
    for word, df in (("the", 2), ("protein", 2), ("cell", 1), ("cancer", 1), ("gene", 0)):
        assert float(w[ID[word]]) == pytest.approx(idf(3, df), rel=1e-6)  # float32 of a float64 value
    assert all(float(w[ID[s]]) == 0.0 for s in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))
    with pytest.raises(ValueError, match="at least one document"):
        idf_weights(tok, [], len(VOCAB))


def test_bag_of_tokens_by_hand_and_equal_to_the_training_module():
    tok = tiny_tokenizer()
    weights = torch.arange(len(VOCAB), dtype=torch.float32) / 10  # θ_j = j / 10
    weights[ID["cell"]] = -1.0  # relu(θ) = 0: no weight, no entry
    texts = ["the protein the", "cell cancer", "", "gene gene"]
    matrix, truncated = encode_bag(tok, texts, torch.relu(weights), max_length=16)
    assert truncated == 0
    theta = torch.relu(weights).numpy()
    expected = np.zeros((4, len(VOCAB)), dtype=np.float32)
    for row, words in ((0, ("the", "protein")), (1, ("cancer",)), (3, ("gene",))):  # each once, no [CLS]/[SEP]
        for word in words:
            expected[row, ID[word]] = theta[ID[word]]
    # exact: each entry is one float32 weight copied, no arithmetic
    np.testing.assert_array_equal(matrix.toarray(), expected)
    # the module trained jointly gives the same vectors on a padded batch (1.0 · relu(θ_j), exact)
    module = QueryTermWeights(weights)
    batch = module.tokenize(tok, texts, 16)
    assert batch["attention_mask"].sum(1).tolist() == [3, 2, 0, 2]  # padded, no special tokens
    np.testing.assert_array_equal(module(**batch).detach().numpy(), expected)
    # truncation to 2 tokens ("the" dropped from the first) and top-1 (θ grows with the id)
    cut, truncated = encode_bag(tok, ["cancer protein the", "the protein"], torch.relu(weights), 2, top_k=1)
    assert truncated == 1
    assert cut[0].indices.tolist() == [ID["cancer"]] and cut[1].indices.tolist() == [ID["protein"]]
    tied, _ = encode_bag(tok, ["the protein"], torch.ones(len(VOCAB)), 16, top_k=1)
    assert tied.indices.tolist() == [ID["the"]]  # equal weights: the lower id


@pytest.fixture()
def if_encoder():
    encoder = SpladeEncoder(
        SpladeModel(tiny_mlm("bert"), "plain"),
        tiny_tokenizer(),
        EncoderMetadata(query_max_length=16, doc_max_length=32),
        device="cpu",
    )
    return make_inference_free(encoder, DOCS)


def test_save_load_round_trip_and_bad_files(if_encoder, tmp_path):
    if_encoder.save_pretrained(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "spladekit.json").read_text())
    assert meta["query_encoder"] == "inference-free" and meta["extra"]["inference_free"]["idf_documents"] == 3
    loaded = SpladeEncoder.from_pretrained(tmp_path / "m", head_impl="plain", device="cpu")
    queries = ["the protein", "cancer cell cell"]
    # same weights file, same look-up: exact
    np.testing.assert_array_equal(
        loaded.encode_queries(queries).toarray(), if_encoder.encode_queries(queries).toarray()
    )
    q = loaded.encode_queries(queries).toarray()
    assert q[0, ID["the"]] == pytest.approx(idf(3, 2), rel=1e-6) and q[1, ID["cell"]] == pytest.approx(
        idf(3, 1), rel=1e-6
    )
    # documents: the full SPLADE model, unchanged (same weights, same code path: exact)
    np.testing.assert_array_equal(loaded.encode_documents(DOCS).toarray(), if_encoder.encode_documents(DOCS).toarray())
    (tmp_path / "m" / QUERY_WEIGHTS_FILE).unlink()
    with pytest.raises(DataFormatError, match="query_weights.safetensors is missing"):
        SpladeEncoder.from_pretrained(tmp_path / "m", device="cpu")
    from safetensors.torch import save_file

    save_file({"weight": torch.ones(3)}, str(tmp_path / "m" / QUERY_WEIGHTS_FILE))
    with pytest.raises(DataFormatError, match="shape"):
        SpladeEncoder.from_pretrained(tmp_path / "m", device="cpu")


def test_cli_inference_free_index_search_evaluate(tiny_bert_dir, tiny_beir, tmp_path):
    """`inference-free` → `index` → `search`: run scores are the dot products of the bag-of-tokens
    query vectors with the indexed document vectors; `evaluate` uses the same query side."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.data.beir import load_beir
    from spladekit.data.trec import read_run
    from spladekit.evaluate.systems import EvalConfig, run_evaluation

    runner = CliRunner()
    model = tmp_path / "if-model"
    result = runner.invoke(
        app, ["inference-free", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(model)]
    )
    assert result.exit_code == 0, result.output
    encoder = SpladeEncoder.from_pretrained(model, device="cpu")
    dataset = load_beir(tiny_beir, "test")
    # IDF over the 6 documents: "protein" occurs in d1 only (title and text, counted once)
    assert float(encoder.query_weights[encoder.tokenizer.convert_tokens_to_ids("protein")]) == pytest.approx(
        idf(6, 1), rel=1e-6
    )
    index = tmp_path / "index"
    assert (
        runner.invoke(app, ["index", "--model", str(model), "--data", str(tiny_beir), "--out", str(index)]).exit_code
        == 0
    )
    run_file = tmp_path / "run.trec"
    result = runner.invoke(app, ["search", "--index", str(index), "--data", str(tiny_beir), "--out", str(run_file)])
    assert result.exit_code == 0, result.output
    run = read_run(run_file)
    q = encoder.encode_queries(list(dataset.queries.values())).toarray().astype(np.float64)
    d = encoder.encode_documents(list(dataset.corpus.values())).toarray().astype(np.float64)
    scores = q @ d.T
    for i, qid in enumerate(dataset.queries):
        for j, docid in enumerate(dataset.corpus):
            if scores[i, j] > 0:
                # run files keep 6 decimals (5e-7); the documents were encoded in other batches than the index's, so
                # their float32 weights differ by a few ulps: a relative 1e-5 covers that at any score size
                assert run[qid][docid] == pytest.approx(scores[i, j], rel=1e-5, abs=5e-7)
    evaluated = run_evaluation(
        EvalConfig(model=str(model), data=str(tiny_beir)), tmp_path / "eval", show_progress=False
    )
    assert evaluated.metrics["avg_query_terms"] == pytest.approx(float((q > 0).sum(1).mean()))


def test_sentence_transformers_loads_the_router_layout(tiny_bert_dir, tiny_beir, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from spladekit.cli.inference_free import build_inference_free

    encoder = build_inference_free(str(tiny_bert_dir), str(tiny_beir), tmp_path / "m")
    model = st.SparseEncoder(str(tmp_path / "m"), device="cpu")
    queries = ["protein expression protein", "cancer risk", "vaccine"]
    ours = SpladeEncoder.from_pretrained(tmp_path / "m", head_impl="plain", device="cpu")
    # queries: the same float32 weights looked up (presence 1 × weight): exact
    np.testing.assert_array_equal(
        model.encode_query(queries, convert_to_tensor=True).to_dense().numpy(), ours.encode_queries(queries).toarray()
    )
    docs = ["protein expression in mouse cells", "cancer risk"]
    st_docs = model.encode_document(docs, convert_to_tensor=True).to_dense().numpy()
    # every column but [PAD]: spladekit zeroes it, this untrained model (no suppress_pad bias) does not
    # in sentence-transformers; trained spladekit models give 0 there in both (train.head_setup.suppress_pad_column)
    keep = np.arange(st_docs.shape[1]) != ours.tokenizer.pad_token_id
    np.testing.assert_allclose(st_docs[:, keep], ours.encode_documents(docs).toarray()[:, keep], rtol=1e-5, atol=1e-6)
    assert encoder.metadata.query_encoder == "inference-free"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-if") / "model")


def test_training_with_an_inference_free_query_side(tiny, tmp_path):
    from spladekit.train import train
    from spladekit.train.step import attach_query_weights, load_model

    examples = make_examples()
    cfg = tiny_config(tiny, steps=3, **{"model__query_encoder": "inference-free"})
    result = train(cfg, tmp_path / "out", examples=examples, show_progress=False)
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["lambda_q"] == 0.0 and r["loss_reg_q"] == 0.0 for r in records)  # no query regulariser
    assert all(r["loss"] == pytest.approx(r["loss_rank"] + r["loss_reg_d"], rel=1e-5) for r in records)
    model, tokenizer, _ = load_model(cfg)
    attach_query_weights(model, tokenizer, examples, cfg)
    initial = model.query_weights.saved_weights()
    # IDF of the 12 positives + 36 negatives (distinct ids): check one word by hand
    texts = [t for e in examples for _, t in e.positives + e.negatives]
    df = sum("w7" in t.split() for t in texts)
    assert float(initial[tokenizer.convert_tokens_to_ids("w7")]) == pytest.approx(idf(len(texts), df), rel=1e-6)
    encoder = SpladeEncoder.from_pretrained(result.model_dir, head_impl="plain", device="cpu")
    assert encoder.metadata.query_encoder == "inference-free"
    assert not torch.equal(encoder.query_weights, initial)  # trained jointly
    assert bool((encoder.query_weights >= 0).all())  # relu(θ) saved
    st = pytest.importorskip("sentence_transformers")
    st_model = st.SparseEncoder(str(result.model_dir), device="cpu")
    queries = ["w1 w2 w3", "w7"]
    np.testing.assert_array_equal(
        st_model.encode_query(queries, convert_to_tensor=True).to_dense().numpy(),
        encoder.encode_queries(queries).toarray(),
    )


def test_frozen_query_weights_stay_idf(tiny, tmp_path):
    from spladekit.train import train
    from spladekit.train.step import attach_query_weights, load_model

    examples = make_examples()
    cfg = tiny_config(tiny, steps=2, **{"model__query_encoder": "inference-free", "model__train_query_weights": False})
    result = train(cfg, tmp_path / "out", examples=examples, show_progress=False)
    model, tokenizer, _ = load_model(cfg)
    attach_query_weights(model, tokenizer, examples, cfg)
    saved = SpladeEncoder.from_pretrained(result.model_dir, device="cpu").query_weights
    torch.testing.assert_close(saved, model.query_weights.saved_weights(), rtol=0, atol=0)  # untouched: exact
