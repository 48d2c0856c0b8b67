"""CIFF export and import (spladekit.index.formats.ciff).

The wire format is checked against the protobuf library's own serialisation of the same messages;
the round trip against the original folder's arrays and content hash. That BMP's own converter
reads the files (and scores them exactly) is in tests/test_engines.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.export import export_index, import_to_index
from spladekit.index.formats import ciff
from spladekit.index.index import Index


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_posting_lists_are_the_bytes_protobuf_writes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    docids = np.sort(rng.choice(2**30, size=n, replace=False))
    if seed == 0:
        docids[0] = 0  # a first docid 0: protobuf omits the zero field
    tfs = rng.integers(1, 2**31 - 1, size=n) if seed == 2 else rng.integers(1, 300, size=n)
    m = ciff.messages()
    want = m["PostingsList"](term=f"tok-é{seed}", df=n, cf=int(tfs.sum()))
    want.postings.extend([m["Posting"](docid=int(g), tf=int(t)) for g, t in zip(np.diff(docids, prepend=0), tfs)])
    assert ciff.postings_list_bytes(f"tok-é{seed}", docids, tfs) == want.SerializeToString()


def quantised_corpus(seed=3, rows=400, vocab=60):
    rng = np.random.default_rng(seed)
    m = sp.random(rows, vocab, density=0.15, random_state=rng, format="csr", dtype=np.float32)
    m.data = (rng.integers(1, 400, m.nnz) / 100).astype(np.float32)  # k / 100: exactly what scale 100 gives back
    m = m.tolil()
    m[5] = 0  # a document with no term
    m = m.tocsr()
    m.eliminate_zeros()
    return m, [f"d{i}" for i in rng.permutation(rows)], [f"t{j}" if j % 7 else f"##é{j}" for j in range(vocab)]


def test_round_trip_index_ciff_index_is_identical(tmp_path):
    m, ids, vocab = quantised_corpus()
    Index.from_vectors(tmp_path / "a", m, ids, {"model": "M"}, vocabulary=vocab)
    manifest = export_index(tmp_path / "a", "ciff", tmp_path / "exp")
    assert manifest.format == "ciff" and manifest.scale == 100.0
    import_to_index("ciff", tmp_path / "exp", vocab, tmp_path / "b")
    a, b = Index.open(tmp_path / "a"), Index.open(tmp_path / "b", verify=True)
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a.docs, part), getattr(b.docs, part))  # float32(k / 100) both ways: exact
    assert list(a.doc_ids) == list(b.doc_ids)
    assert a.metadata["content_hash"] == b.metadata["content_hash"]
    # the header's counts, read with the protobuf classes
    m_ = ciff.messages()
    with open(tmp_path / "exp" / "index.ciff", "rb") as f:
        header = m_["Header"].FromString(ciff._read_delimited(f, tmp_path, "header"))
    tf = np.rint(m.data * 100).astype(np.int64)
    assert (header.num_docs, header.num_postings_lists, header.total_terms_in_collection) == (400, len(np.unique(m.indices)), int(tf.sum()))
    assert json.loads((tmp_path / "exp" / "export.json").read_text())["count"] == 400


def test_quantisation_drops_impacts_that_round_to_zero_and_bad_files_are_named(tmp_path):
    m = sp.csr_matrix(np.array([[0.004, 0.5], [0.0, 0.0]], np.float32))
    out = tmp_path / "x.ciff"
    stats = ciff.write_ciff(out, m, m.T.tocsr(), ["a", "b"], ["u", "v"], scale=100)
    assert stats == {"num_postings_lists": 1, "num_docs": 2, "postings": 1, "max_tf": 50}
    back, ids = ciff.read_ciff(out, ["u", "v"])
    assert back.toarray().tolist() == [[0.0, 0.5], [0.0, 0.0]] and ids == ["a", "b"]
    with pytest.raises(DataFormatError, match="term 'v' is not in the vocabulary"):
        ciff.read_ciff(out, ["u", "w"])
    whole = out.read_bytes()
    out.write_bytes(whole + b"garbage")  # a complete stream with bytes after it: refused, not read in part
    with pytest.raises(DataFormatError, match="7 bytes after the last document record"):
        ciff.read_ciff(out, ["u", "v"])
    out.write_bytes(whole[:-3])
    with pytest.raises(DataFormatError, match="truncated"):
        ciff.read_ciff(out, ["u", "v"])
    with pytest.raises(ValueError, match="tokens repeat"):
        ciff.write_ciff(out, m, m.T.tocsr(), ["a", "b"], ["u", "u"])
