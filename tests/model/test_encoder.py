"""SpladeEncoder on a tiny random BERT and on the real splade-tiny checkpoint."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spladekit.model.encoder import EncoderMetadata, SpladeEncoder, weights_to_csr

TEXTS = ["protein expression in cells", "cancer", "the effect of drug dose on blood levels in human patients", "x"]


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return SpladeEncoder.from_pretrained(tiny_bert_dir, batch_size=2, head_impl="plain")


def reference_vector(encoder, text, max_length):
    """The formula on the model's own logits (AutoModelForMaskedLM forward), one text, no padding;
    the [PAD] vocabulary column is 0 by the encoder's documented policy."""
    batch = encoder.tokenizer([text], truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        logits = encoder.model.mlm(**batch).logits[0]
    vector = torch.log1p(torch.relu(logits)).max(dim=0).values
    vector[encoder.tokenizer.pad_token_id] = 0.0
    return vector.numpy()


# Tolerance of every vector comparison below (batched vs alone vs padded vs the model's own logits):
# the paths differ only in float32 rounding of other matmul shapes. A logit of the tiny BERT (H = 32)
# is a 32-term dot product of LayerNorm'd states (|h| ≲ 1) with weights of std 0.02 plus the bias:
# Σ|terms| ≲ 32·0.02·1 ≈ 0.6, so a reordering moves it by ≤ 32·EPS32/2·0.6 ≈ 1.1e-6 (Higham §3.1),
# and w = log1p(m) moves by no more (derivative ≤ 1): atol = 1e-6 plus rtol = 1e-5 for the error
# carried in from the layer below, which scales with the weight (≈ 10 roundings of EPS32).
def test_vectors_equal_formula_on_model_logits(encoder):
    matrix = encoder.encode_documents(TEXTS)
    assert matrix.shape == (len(TEXTS), len(encoder.tokenizer))
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(
            matrix[i].toarray().ravel(), reference_vector(encoder, text, 256), rtol=1e-5, atol=1e-6
        )


def test_alone_batched_and_padded_give_same_vector(encoder):
    together = encoder.encode_documents(TEXTS, batch_size=4).toarray()
    alone = np.vstack([encoder.encode_documents([t], batch_size=1).toarray() for t in TEXTS])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)
    # extra padding: pad to a fixed length longer than any text
    batch = encoder.tokenizer(TEXTS, padding="max_length", max_length=40, return_tensors="pt")
    with torch.no_grad():
        padded = encoder.model(batch["input_ids"], batch["attention_mask"]).numpy()
    padded[:, encoder.tokenizer.pad_token_id] = 0.0  # the encoder zeroes the [PAD] column
    np.testing.assert_allclose(padded, together, rtol=1e-5, atol=1e-6)


def test_query_and_document_max_lengths_differ(tiny_bert_dir):
    enc = SpladeEncoder.from_pretrained(tiny_bert_dir, query_max_length=4, doc_max_length=256, head_impl="plain")
    long_text = TEXTS[2]
    q = enc.encode_queries([long_text]).toarray().ravel()
    d = enc.encode_documents([long_text]).toarray().ravel()
    np.testing.assert_allclose(q, reference_vector(enc, long_text, 4), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d, reference_vector(enc, long_text, 256), rtol=1e-5, atol=1e-6)
    assert enc.last_truncated == 0
    enc.encode_queries([long_text, "x"])
    assert enc.last_truncated == 1


def test_weights_to_csr_equals_scipy_from_dense():
    """The CSR built from torch.nonzero equals scipy's own conversion of the dense array (a second
    tool), empty rows and a row with every column active included; exact: same float32 values copied."""
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((6, 37)).astype(np.float32)
    dense[1] = -1.0  # no active term
    dense[4] = np.abs(dense[4]) + 0.1  # all active
    got = weights_to_csr(torch.from_numpy(dense))
    expected = sp.csr_matrix(np.where(dense > 0, dense, 0))
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_array_equal(got.data, expected.data)
    assert weights_to_csr(torch.zeros(0, 5)).shape == (0, 5)


def test_top_k_pruning_keeps_largest():
    w = torch.tensor([[0.0, 3.0, 1.0, 2.0, 2.0], [0.5, 0.0, 0.0, 0.0, 0.0]])
    m = weights_to_csr(w, top_k=2).toarray()
    np.testing.assert_array_equal(m, [[0, 3, 0, 2, 0], [0.5, 0, 0, 0, 0]])  # tie at 2.0: lower id kept


def test_decode_orders_by_weight(encoder):
    row = encoder.encode_queries(["protein cancer"])
    pairs = encoder.decode(row, top_k=3)
    weights = [w for _, w in pairs]
    assert weights == sorted(weights, reverse=True) and len(pairs) == min(3, row.nnz)
    dense = row.toarray().ravel()
    top = int(np.argmax(dense))
    assert pairs[0] == (encoder.tokenizer.convert_ids_to_tokens(top), pytest.approx(float(dense[top])))


def test_metadata_round_trip(tmp_path, encoder):
    encoder.metadata = EncoderMetadata(query_max_length=12, doc_max_length=34)
    encoder.save_pretrained(tmp_path / "m")
    again = SpladeEncoder.from_pretrained(tmp_path / "m")
    assert (again.metadata.query_max_length, again.metadata.doc_max_length) == (12, 34)
    encoder.metadata = EncoderMetadata()


def test_saving_shows_no_bar_of_its_own_and_keeps_transformers_bars_on(tmp_path, encoder, capsys):
    """A checkpoint saved inside a training loop: transformers' "Writing model shards" bar would be
    drawn inside the training bar; it is off while saving, and transformers' bars are on again after."""
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    encoder.save_pretrained(tmp_path / "m")
    assert "Writing model shards" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()


def test_real_checkpoint_vectors(splade_tiny):
    enc = SpladeEncoder.from_pretrained(splade_tiny, head_impl="plain")
    texts = ["what causes cancer in mice", "Vitamin D deficiency increases the risk of fractures."]
    matrix = enc.encode_documents(texts)
    for i, text in enumerate(texts):
        np.testing.assert_allclose(matrix[i].toarray().ravel(), reference_vector(enc, text, 256), rtol=1e-5, atol=1e-5)
    # a trained SPLADE model puts the text's own terms among the heaviest ones
    top_terms = [t for t, _ in enc.decode(matrix[0], top_k=20)]
    assert "cancer" in top_terms and "mice" in top_terms
    assert sp.isspmatrix_csr(matrix) and matrix.dtype == np.float32
