"""Folded vocabularies (:mod:`spladekit.model.folding`) on a real byte-level BPE tokenizer trained here
on SciFact's text (the ``tokenizers`` library) and a tiny random ModernBERT built on it.

The by-hand reference never calls spladekit's folding code: each column's token is decoded by the
tokenizer's own ByteLevel decoder (``convert_tokens_to_string``), one leading space dropped where
text remains, lower-cased; tokens that do not decode to whole characters (``�``) and special tokens
stay alone. The folded vectors must equal the unfolded ones merged over those groups: the max of
the members (exact: a max of float32 values is one of them), or their sum for sum pooling (a float32
sum of ``G`` terms: within ``(G − 1)·u`` relative, Higham §3.1).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import DataFormatError, UnsupportedModelError
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.folding import fold_vocabulary
from spladekit.model.splade import SpladeModel
from tests.bpe_helpers import byte_level_tokenizer, scifact_texts, tiny_modernbert

EPS32 = float(np.finfo(np.float32).eps)
QUERIES = ["The protein of the Cell", "cell PROTEIN expression in mice", "Gene expression of the cancer cells"]


@pytest.fixture(scope="module")
def corpus(shared) -> list[str]:
    return scifact_texts(shared, 400)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return byte_level_tokenizer(corpus)


def by_hand_groups(tokenizer) -> list[list[int]]:
    """The columns of each folded term, by the tokenizer's own decoder (module docstring)."""
    special = set(tokenizer.all_special_ids)
    keys: dict[str, list[int]] = defaultdict(list)
    for j in range(len(tokenizer)):
        token = tokenizer.convert_ids_to_tokens(j)
        text = tokenizer.convert_tokens_to_string([token])
        if j in special or "\ufffd" in text:
            keys[f"alone:{j}"].append(j)
            continue
        if text.startswith(" ") and len(text) > 1:
            text = text[1:]
        keys[text.lower()].append(j)
    return sorted(keys.values())


def encoder_for(tokenizer, fold: bool, pooling: str = "max", head_impl: str = "plain") -> SpladeEncoder:
    model = SpladeModel(
        tiny_modernbert(tokenizer),
        head_impl,
        pooling=pooling,
        fold=fold_vocabulary(tokenizer, len(tokenizer)) if fold else None,
    )
    return SpladeEncoder(model, tokenizer, EncoderMetadata(), device="cpu")  # a saved copy is named by its folder


def test_the_fold_groups_case_and_word_start_variants_as_by_hand(tokenizer):
    fold = fold_vocabulary(tokenizer, len(tokenizer))
    members: dict[int, list[int]] = defaultdict(list)
    for column, term in enumerate(fold.columns):
        members[term].append(column)
    assert sorted(members.values()) == by_hand_groups(tokenizer)
    assert fold.size < len(tokenizer)
    the = fold.columns[tokenizer.convert_tokens_to_ids("Ġthe")]
    assert fold.terms[the] == "the"
    assert {tokenizer.convert_ids_to_tokens(j) for j in members[the]} == {"Ġthe", "ĠThe"}  # this vocabulary's two
    assert max(len(m) for m in members.values()) == 4  # e.g. A, a, Ġa, ĠA
    for special in tokenizer.all_special_ids:
        assert len(members[fold.columns[special]]) == 1


@pytest.mark.parametrize("head_impl", ["plain", "fused"])
@pytest.mark.parametrize("pooling", ["max", "sum"])
def test_folded_vectors_equal_a_by_hand_merge(tokenizer, pooling, head_impl):
    plain = encoder_for(tokenizer, fold=False, pooling=pooling, head_impl=head_impl)
    folded = encoder_for(tokenizer, fold=True, pooling=pooling, head_impl=head_impl)
    dense = plain.encode_dense(QUERIES, 64).double()
    got = folded.encode_dense(QUERIES, 64).double()
    groups = by_hand_groups(tokenizer)
    assert got.shape == (len(QUERIES), len(groups))
    for group in groups:
        term = folded.model.fold.columns[group[0]]
        members = dense[:, group]
        if pooling == "max":
            assert torch.equal(got[:, term], members.max(dim=1).values)
        else:
            want = members.sum(dim=1)
            assert bool(((got[:, term] - want).abs() <= (len(group) - 1) * EPS32 / 2 * want + 1e-300).all())
    assert (dense > 0).sum() > (got > 0).sum() > 0  # folding merged some active columns


def test_a_folded_model_saves_its_map_and_searches_exports_and_decodes_in_terms(tokenizer, corpus, tmp_path):
    from spladekit.index import Index
    from spladekit.index.export import export_index, model_vocabulary

    encoder = encoder_for(tokenizer, fold=True)
    terms = encoder.model.fold.terms
    encoder.save_pretrained(tmp_path / "model")
    meta = json.loads((tmp_path / "model" / "spladekit.json").read_text())
    assert meta["fold"]["terms"] == terms and len(meta["fold"]["columns"]) == len(tokenizer)
    assert not (tmp_path / "model" / "modules.json").exists()
    loaded = SpladeEncoder.from_pretrained(tmp_path / "model", device="cpu", head_impl="fused")
    assert loaded.vocab_size == len(terms) and loaded.vocabulary == terms
    assert model_vocabulary(tmp_path / "model") == terms
    torch.testing.assert_close(
        loaded.encode_dense(QUERIES, 64), encoder.encode_dense(QUERIES, 64), rtol=1e-5, atol=1e-6
    )
    decoded = dict(loaded.decode(loaded.encode([QUERIES[0]], 64)))
    assert "the" in decoded and "protein" in decoded and not any(t.startswith("Ġ") for t in decoded)

    docs = {f"d{i}": text for i, text in enumerate(corpus[:40])}
    index = Index.build(loaded, docs, tmp_path / "index")
    assert json.loads((tmp_path / "index" / "vocab.json").read_text()) == terms
    result = index.search(QUERIES, k=5, encoder=loaded)
    q, d = loaded.encode_queries(QUERIES), loaded.encode_documents(list(docs.values()))
    scores = (q @ d.T).toarray()
    for i, qid in enumerate(result.run):
        best = max(result.run[qid], key=result.run[qid].get)
        assert result.run[qid][best] == pytest.approx(scores[i].max(), rel=1e-5)
    export_index(tmp_path / "index", "seismic", tmp_path / "seismic")
    records = {
        r["id"]: r["vector"] for r in map(json.loads, (tmp_path / "seismic" / "docs.jsonl").read_text().splitlines())
    }
    row = d[0].toarray()[0]
    assert set(records["d0"]) == {terms[j] for j in np.nonzero(row)[0]}  # the vectors export names the folded terms


def test_exports_of_a_folded_model(tokenizer, tmp_path):
    import onnxruntime as ort

    from spladekit.model.engines import export_for_engine
    from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx

    encoder = encoder_for(tokenizer, fold=True)
    want = encoder.encode_dense(QUERIES, 64).numpy()
    tol = (
        8 * EPS32 * float(np.abs(want).max()) + 2 * 2.0**-24
    )  # two float32 evaluations of a 1-layer model (see test_onnx)
    export_onnx(encoder, tmp_path / "onnx", vocab_tile=128)
    onnx_encoder = OnnxSpladeEncoder(tmp_path / "onnx")
    assert onnx_encoder.vocabulary == encoder.vocabulary and onnx_encoder.vocab_size == encoder.vocab_size
    assert np.abs(onnx_encoder.encode_dense(QUERIES, 64).numpy() - want).max() <= tol
    out = export_for_engine("fastembed", encoder, tmp_path / "fe")  # y folded per position, fastembed's pooling after
    batch = encoder.tokenize(QUERIES, 64)
    feeds = {"input_ids": batch["input_ids"].numpy(), "attention_mask": batch["attention_mask"].numpy()}
    y = ort.InferenceSession(str(out / "model.onnx")).run(None, feeds)[0]
    assert y.shape[-1] == encoder.vocab_size
    pooled = (np.log1p(np.maximum(y, 0)) * feeds["attention_mask"][..., None]).max(axis=1)
    assert np.abs(pooled - want).max() <= tol
    for engine in ("opensearch", "anserini", "elasticsearch"):
        with pytest.raises(UnsupportedModelError, match="folded vocabulary"):
            export_for_engine(engine, encoder, tmp_path / engine)
        assert not (tmp_path / engine).exists()


def test_training_with_a_folded_vocabulary(tokenizer, tmp_path):
    from spladekit.train import train
    from tests.train_helpers import make_examples, tiny_config

    tiny_modernbert(tokenizer).save_pretrained(tmp_path / "start")
    tokenizer.save_pretrained(tmp_path / "start")
    cfg = tiny_config(tmp_path / "start", steps=1, head={"fold_vocabulary": True})
    result = train(cfg, tmp_path / "out", examples=make_examples(), show_progress=False)
    assert np.isfinite(result.last_metrics["loss"])
    loaded = SpladeEncoder.from_pretrained(result.model_dir, device="cpu")
    assert loaded.model.fold is not None and loaded.vocabulary == fold_vocabulary(tokenizer, len(tokenizer)).terms


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda f: f["columns"].__setitem__(3, len(f["terms"])), "fold.columns"),  # out of range
        (lambda f: f["columns"].__setitem__(3, -1), "fold.columns"),
        (lambda f: f["columns"].__setitem__(3, True), "fold.columns"),  # a boolean is not an id
        (lambda f: f["columns"].pop(), "fold.columns"),  # one column fewer than the head's
        (lambda f: f["terms"].__setitem__(1, f["terms"][0]), "fold.terms"),  # two terms named alike
        (lambda f: f["terms"].append("never-used"), "fold.terms"),  # a term no column folds into
        (lambda f: f.__setitem__("rule", "lowercase-everything"), "fold.rule"),
        (lambda f: f.__setitem__("extra", 1), "fold"),
    ],
)
def test_a_malformed_saved_fold_is_refused_naming_the_field(tokenizer, tmp_path, edit, field):
    encoder_for(tokenizer, fold=True).save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "spladekit.json"
    meta = json.loads(path.read_text())
    edit(meta["fold"])
    path.write_text(json.dumps(meta))
    with pytest.raises(DataFormatError) as caught:
        SpladeEncoder.from_pretrained(tmp_path / "model", device="cpu")
    assert "spladekit.json" in str(caught.value) and field in str(caught.value)


def _two_unrelated_terms(fold: dict) -> tuple[int, int]:
    """Two columns that each fold alone into a plain word's term, of different words."""
    sizes = np.bincount(fold["columns"])
    alone = [j for j, t in enumerate(fold["columns"]) if sizes[t] == 1 and fold["terms"][t].isalpha()]
    return alone[0], alone[1]


@pytest.mark.parametrize("attack", ["merge two words", "one term takes most columns"])
def test_a_saved_fold_that_is_not_the_tokenizers_is_refused(tokenizer, tmp_path, attack):
    # well formed, every check of the map alone passed: two unrelated words summed into one term (a
    # silent wrong vector), or most columns in one term (groups() is [V', G]: quadratic memory)
    encoder_for(tokenizer, fold=True).save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "spladekit.json"
    meta = json.loads(path.read_text())
    fold = meta["fold"]
    if attack == "merge two words":
        a, b = _two_unrelated_terms(fold)
        gone = fold["columns"][b]
        fold["columns"][b] = fold["columns"][a]
        fold["terms"].pop(gone)
        fold["columns"] = [t - (t > gone) for t in fold["columns"]]
        first = b
    else:
        first = len(fold["columns"]) // 10
        fold["columns"] = list(range(first)) + [first] * (len(fold["columns"]) - first)
        fold["terms"] = [f"t{i}" for i in range(first + 1)]
        first = 0  # term names differ from the first column on
    path.write_text(json.dumps(meta))
    with pytest.raises(DataFormatError, match="fold.columns") as caught:
        SpladeEncoder.from_pretrained(tmp_path / "model", device="cpu")
    assert "spladekit.json" in str(caught.value) and f"column {first} " in str(caught.value)


def test_fold_refusals(tokenizer):
    from spladekit.model.folding import VocabularyFold
    from tests.mlm_families import tiny_tokenizer

    with pytest.raises(ValueError, match="byte-level BPE"):
        fold_vocabulary(tiny_tokenizer(), 64)  # WordPiece
    with pytest.raises(ValueError, match="fold maps"):
        SpladeModel(
            tiny_modernbert(tokenizer), "plain", fold=VocabularyFold(columns=[0] * (len(tokenizer) - 1), terms=["x"])
        )


def test_an_inference_free_folded_folder_is_refused(tokenizer, tmp_path):
    from spladekit.model.inference_free import make_inference_free

    encoder = encoder_for(tokenizer, fold=False)
    make_inference_free(encoder, QUERIES)
    encoder.save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "spladekit.json"
    meta = json.loads(path.read_text())
    meta["fold"] = fold_vocabulary(tokenizer, len(tokenizer)).to_record()
    path.write_text(json.dumps(meta))
    with pytest.raises(UnsupportedModelError, match="sentence-transformers"):  # its Router files cannot fold either
        SpladeEncoder.from_pretrained(tmp_path / "model", device="cpu")
    (tmp_path / "model" / "modules.json").unlink()  # a spladekit folder only
    with pytest.raises(UnsupportedModelError, match="inference-free"):
        SpladeEncoder.from_pretrained(tmp_path / "model", device="cpu")
    assert Path(path).exists()


def test_no_inference_free_query_side_on_a_folded_model(tokenizer, tmp_path):
    from spladekit.model.inference_free import make_inference_free
    from spladekit.train.config import TrainConfig

    with pytest.raises(ValueError, match="folded vocabulary"):
        make_inference_free(encoder_for(tokenizer, fold=True), QUERIES)
    with pytest.raises(ValueError, match="fold_vocabulary"):
        TrainConfig.model_validate({"head": {"fold_vocabulary": True}, "model": {"query_encoder": "inference-free"}})
