"""Encoding edge cases (empty, whitespace, emoji, control characters, truncation, batch of one, vectors
with zero or one active term), the [PAD] policy, and efficiency/evaluation on empty input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spladekit.evaluate.efficiency import efficiency_stats
from spladekit.evaluate.metrics import evaluate
from spladekit.index.exact import exact_search, results_to_run
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.splade import SpladeModel
from tests.conftest import make_tiny_bert, make_tokenizer

EDGE = [
    "",
    "   \t\n  ",
    "😀🎉🚀",
    "\x00\x07\x1b\u200b",
    "protein",
    "cells " * 200,
    "gene expression in mouse brain",
    "the effect of drug dose on blood levels in human patients",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("edge-tok")
    tokenizer = make_tokenizer(folder)
    model = make_tiny_bert(len(tokenizer), seed=3)
    with torch.no_grad():
        model.cls.predictions.decoder.bias.normal_(0.5, 0.5)
        model.cls.predictions.decoder.bias[tokenizer.pad_token_id] = 5.0  # a model that *would* weight [PAD]
    return SpladeEncoder(
        SpladeModel(model, "plain"),
        tokenizer,
        EncoderMetadata(query_max_length=8, doc_max_length=16),
        batch_size=3,
        device="cpu",
    )


# rtol = 1e-5, atol = 1e-6 on vectors of different batch compositions: float32 rounding of other
# matmul shapes only; derivation beside test_vectors_equal_formula_on_model_logits (tests/model/test_encoder.py)
def test_edge_texts_encode_and_do_not_affect_each_other(tiny):
    together = tiny.encode_documents(EDGE)
    assert together.shape == (len(EDGE), tiny.vocab_size) and np.isfinite(together.data).all()
    for i, text in enumerate(EDGE):
        alone = tiny.encode_documents([text], batch_size=1)  # a batch of one
        np.testing.assert_allclose(together[i].toarray(), alone.toarray(), rtol=1e-5, atol=1e-6)
    # empty, whitespace-only and control-only texts all tokenize to [CLS] [SEP]: the same vector
    cls_sep = [tiny.tokenizer.cls_token_id, tiny.tokenizer.sep_token_id]
    for text in EDGE[:2] + EDGE[3:4]:
        assert tiny.tokenizer(text)["input_ids"] == cls_sep
    np.testing.assert_allclose(together[0].toarray(), together[1].toarray(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(together[0].toarray(), together[3].toarray(), rtol=1e-5, atol=1e-5)
    # emoji-only text is [CLS] [UNK] [SEP], like the literal "[UNK]"
    assert tiny.tokenizer(EDGE[2])["input_ids"] == [cls_sep[0], tiny.tokenizer.unk_token_id, cls_sep[1]]
    np.testing.assert_allclose(together[2].toarray(), tiny.encode_documents(["[UNK]"]).toarray(), rtol=1e-5, atol=1e-6)
    assert tiny.encode_documents([]).shape == (0, tiny.vocab_size)
    assert tiny.encode_queries([42]).shape == (1, tiny.vocab_size)  # non-string: str(42)


def test_pad_column_is_always_zero_even_when_the_model_weights_it(tiny):
    pad = tiny.tokenizer.pad_token_id
    batch = tiny.tokenizer(EDGE, max_length=16, truncation=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        raw = tiny.model(batch["input_ids"], batch["attention_mask"])
    assert (raw[:, pad] > 1.0).all()  # the head itself gives [PAD] weight (bias +5)...
    encoded = tiny.encode_documents(EDGE)
    assert encoded[:, pad].nnz == 0  # ...the encoder output never does
    np.testing.assert_allclose(
        np.delete(encoded.toarray(), pad, axis=1), np.delete(raw.numpy(), pad, axis=1), rtol=1e-5, atol=1e-6
    )  # every other column unchanged


def test_truncation_is_counted(tiny):
    lengths = [len(tiny.tokenizer(t)["input_ids"]) for t in EDGE]  # special tokens included
    tiny.encode_documents(EDGE)
    assert tiny.last_truncated == sum(n > 16 for n in lengths) >= 1
    tiny.encode_queries(EDGE)
    assert tiny.last_truncated == sum(n > 8 for n in lengths) > sum(n > 16 for n in lengths)
    tiny.encode_queries(["protein"])
    assert tiny.last_truncated == 0


def test_truncation_boundary_and_slow_tokenizer_path(tiny):
    """A text of exactly ``max_length`` tokens is not truncated, one token more is; the count read
    from the fast tokenizer's encodings equals the count of a second, untruncated tokenization."""
    words = ["protein"] * 40
    sized = {len(tiny.tokenizer(" ".join(words[:n]))["input_ids"]): " ".join(words[:n]) for n in range(1, 40)}
    exact, longer = sized[16], sized[17]  # "protein" is one token: n words give n + 2 ids
    tiny.encode_documents([exact])
    assert tiny.last_truncated == 0
    tiny.encode_documents([exact, longer, "x"])
    assert tiny.last_truncated == 1
    batch = tiny.tokenize(EDGE, 16)
    assert (
        tiny._count_truncated(EDGE, 16, batch)
        == tiny._count_truncated(EDGE, 16)
        == sum(len(tiny.tokenizer(t)["input_ids"]) > 16 for t in EDGE)
    )


def _constant_encoder(folder, active: list[int]):
    """A model whose logits are the decoder bias at every position: bias +1 on ``active``, −3 elsewhere."""
    tokenizer = make_tokenizer(folder)
    model = make_tiny_bert(len(tokenizer), seed=1)
    with torch.no_grad():
        decoder = model.cls.predictions.decoder
        decoder.weight.zero_()
        decoder.bias.fill_(-3.0)
        decoder.bias[active] = 1.0
    return SpladeEncoder(SpladeModel(model, "plain"), tokenizer, batch_size=2, device="cpu")


@pytest.mark.parametrize("active", [[], [7]])
def test_vectors_with_zero_or_one_active_term(tmp_path, active):
    enc = _constant_encoder(tmp_path, active)
    texts = ["protein", "", "cancer risk in mice"]
    docs = enc.encode_documents(texts)
    queries = enc.encode_queries(["protein", "x"])
    assert docs.nnz == len(active) * len(texts) and queries.nnz == len(active) * 2
    if active:
        np.testing.assert_allclose(docs[:, active[0]].toarray().ravel(), math.log(2.0), rtol=1e-6)  # log(1 + 1)
        assert enc.decode(docs[0]) == [(enc.vocabulary[active[0]], pytest.approx(math.log(2.0)))]
    else:
        assert enc.decode(docs[0]) == []
    stats = efficiency_stats(queries, docs)
    assert stats == {
        "avg_query_terms": float(len(active)),
        "avg_doc_terms": float(len(active)),
        "flops": float(len(active)),
    }  # p_q = p_d = 1 on the one active term
    results = exact_search(queries, docs, k=10)
    run = results_to_run(results, ["q1", "q2"], ["d1", "d2", "d3"])
    if active:  # every document ties: ordered by index, then the run by doc id
        assert [i for i, _ in results[0]] == [0, 1, 2]
    else:
        assert results == [[], []]
    m = evaluate(run, {"q1": {"d2": 1}, "q2": {"d3": 1}}, ["nDCG@10", "MRR@10"])
    assert m["MRR@10"] == pytest.approx((1 / 2 + 1 / 3) / 2 if active else 0.0)
    assert all(math.isfinite(m[k]) for k in ("nDCG@10", "MRR@10"))


def test_efficiency_on_empty_input_is_a_clear_error():
    empty = sp.csr_matrix((0, 10), dtype=np.float32)
    one = sp.csr_matrix(np.eye(1, 10, dtype=np.float32))
    with pytest.raises(ValueError, match="empty document set"):
        efficiency_stats(one, empty)
    with pytest.raises(ValueError, match="empty query set"):
        efficiency_stats(empty, one)


def test_real_checkpoint_edge_cases(splade_tiny):
    enc = SpladeEncoder.from_pretrained(splade_tiny, head_impl="plain", query_max_length=16, batch_size=4)
    texts = ["", " \t ", "😀🎉", "\x01\x02", "protein folding " * 20, "vitamin d"]
    together = enc.encode_queries(texts)
    for i, text in enumerate(texts):
        np.testing.assert_allclose(together[i].toarray(), enc.encode_queries([text]).toarray(), rtol=1e-4, atol=1e-5)
    assert enc.last_truncated == 0  # the last call encoded "vitamin d" alone
    enc.encode_queries(texts)
    assert enc.last_truncated == 1  # "protein folding " * 20 is longer than 16 tokens
    pad = enc.tokenizer.pad_token_id
    assert together[:, pad].nnz == 0
    np.testing.assert_allclose(together[0].toarray(), together[1].toarray(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(together[0].toarray(), together[3].toarray(), rtol=1e-5, atol=1e-5)
    assert together[0].nnz > 0  # [CLS] [SEP] alone still activate a few terms in a trained model
    unk = enc.tokenizer.unk_token_id
    assert together[2, unk] > 0  # documented: emoji-only text weights the [UNK] column
    assert together[5, enc.tokenizer.convert_tokens_to_ids("vitamin")] > 0


@pytest.mark.parametrize("bad", [None, b"bytes"])
def test_none_or_bytes_is_refused_not_encoded_as_its_repr(tiny, bad):
    """str(None) would be encoded as the text "None" (a vector of the wrong text)."""
    with pytest.raises(TypeError, match=r"texts\[1\] is .*not a string"):
        tiny.encode_documents(["fine", bad])
