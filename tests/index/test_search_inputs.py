"""Unusual input for exact search and the index build's corpus count (found by a bad-input probe):
``count_records`` equals the records ``read_jsonl`` yields, a damaged corpus gives a
``DataFormatError`` naming the file, a corpus that can be read only once still builds, ``k`` must be
an integer ≥ 1, and a non-finite weight is refused instead of silently dropping a document."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

import spladekit.index.exact as exact
from spladekit.errors import DataFormatError
from spladekit.index.exact import exact_search
from spladekit.index.index import Index
from spladekit.index.searcher import ExactConfig
from spladekit.io import count_records, read_jsonl
from tests.index_helpers import DOCS, make_model


def corpus_bytes() -> bytes:
    return "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)).encode()


def bad_deflate_gz(tmp_path):
    """A .gz whose header is valid and whose first deflate block is not (gzip raises zlib.error,
    neither OSError nor EOFError)."""
    data = bytearray(gzip.compress(corpus_bytes()))
    data[10:20] = b"\xff" * 10  # the first bytes after the 10-byte gzip header
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from spladekit.model.encoder import SpladeEncoder

    return SpladeEncoder.from_pretrained(
        str(make_model(tmp_path_factory.mktemp("inputs") / "model")), head_impl="plain"
    )


def test_count_of_a_corrupt_deflate_stream_is_none(tmp_path):
    assert count_records(bad_deflate_gz(tmp_path)) is None


@pytest.mark.parametrize("show_progress", [True, False])
def test_build_on_a_corrupt_gz_corpus_names_the_file(encoder, tmp_path, show_progress):
    with pytest.raises(DataFormatError, match="corpus.jsonl.gz"):
        Index.build(
            encoder,
            bad_deflate_gz(tmp_path),
            tmp_path / "out",
            chunk_size=2,
            show_progress=show_progress,
            distributed=False,
        )


@pytest.mark.parametrize(
    "line",
    ["\ufeff", "\u00a0", "\u0085", "\u2028", "\u3000", "\x1c\x1d\x1e\x1f"],
    ids=["bom-only-first-line", "nbsp", "nel", "line-separator", "ideographic-space", "x1c-x1f"],
)
def test_count_equals_records_read_for_lines_that_read_as_blank(tmp_path, line):
    # read_jsonl skips a line that str.strip() empties (Unicode whitespace; a first line holding only the BOM)
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(line.encode("utf-8") + b"\n" + corpus_bytes())
    assert count_records(path) == sum(1 for _ in read_jsonl(path)) == len(DOCS)


def test_build_with_progress_reads_a_corpus_given_as_a_pipe(encoder, tmp_path):
    # /dev/fd/N of a pipe (process substitution `<(zcat corpus.jsonl.gz)`) can be read once: not counted
    read_end, write_end = os.pipe()
    os.write(write_end, corpus_bytes())  # a few short lines: fits the pipe buffer
    os.close(write_end)
    try:
        index = Index.build(
            encoder, f"/dev/fd/{read_end}", tmp_path / "out", chunk_size=4, show_progress=True, distributed=False
        )
    finally:
        os.close(read_end)
    assert len(index) == len(DOCS)


@pytest.fixture
def small():
    docs = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 1], [2, 1, 0]], np.float32))
    queries = sp.csr_matrix(np.array([[1, 1, 1]], np.float32))  # every document scores > 0
    return queries, docs


@pytest.mark.parametrize("k", [True, 2.0, 2.5, None, "3"], ids=["bool", "float-integral", "float", "none", "str"])
def test_k_must_be_an_integer(small, k):
    queries, docs = small
    with pytest.raises(ValueError, match="k must be an integer"):
        exact_search(queries, docs, k)


def test_numpy_integer_k_is_accepted(small, tmp_path):
    queries, docs = small
    # scores by hand: q = (1, 1, 1) · rows → 3, 4, 3; ties by row
    assert exact_search(queries, docs, np.int64(2)) == [[(1, 4.0), (0, 3.0)]]
    index = Index.from_vectors(tmp_path / "ix", docs, ["a", "b", "c"])
    assert index.search(queries, k=np.int64(2)).run == {"0": {"b": 4.0, "a": 3.0}}


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(small, tmp_path, value):
    queries, docs = small
    bad_docs = docs.copy()
    bad_docs.data[3] = value  # row 1's first entry
    with pytest.raises(ValueError, match="document row 1 .*not finite"):
        exact_search(queries, bad_docs, 10)
    with pytest.raises(ValueError, match="document row 1 .*not finite"):
        Index.from_vectors(tmp_path / "ix", bad_docs, ["a", "b", "c"])
    assert not (tmp_path / "ix").exists()
    bad_queries = sp.vstack([queries, queries]).tocsr()
    bad_queries.data[4] = value
    with pytest.raises(ValueError, match="query row 1 .*not finite"):
        exact_search(bad_queries, docs, 10)


@pytest.mark.parametrize("doc_block", [7, 1 << 17], ids=["blocks-of-7-documents", "one-block"])
@pytest.mark.parametrize("seed", [0, 1])
def test_product_and_term_at_a_time_kernels_agree(monkeypatch, seed, doc_block):
    # A query is scored by scipy's sparse product (short posting lists) or term at a time (long
    # lists; its score row filled DOC_BLOCK documents at a time: 7 gives 43 blocks here, a list's
    # segments cut anywhere): the same float32 products summed in the same order. Each is checked against
    # a float64 brute force within rtol 1e-5 (≥ 10× the float32 bound (terms + 1)·eps32 ≈ 2.4e-6 of
    # these ≤ 19-term sums), and the two rankings must be the same (random float weights: no two
    # scores of a query closer than twice their rounding bound, checked below).
    rng = np.random.default_rng(seed)
    docs = sp.random(300, 60, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    queries = sp.random(20, 60, density=0.25, random_state=seed + 10, format="csr", dtype=np.float32)
    queries.data = rng.uniform(0.1, 3.0, queries.nnz).astype(np.float32)
    monkeypatch.setattr(exact, "DOC_BLOCK", doc_block)
    monkeypatch.setattr(exact, "TAAT_FROM", 10**12)
    product = exact_search(queries, docs, k=50)
    monkeypatch.setattr(exact, "TAAT_FROM", 0)
    term_at_a_time = exact_search(queries, docs, k=50, prune=False)
    monkeypatch.setattr(exact, "PRUNE_FROM", 0)  # 300 documents, k = 50: pruned only when told
    assert (
        exact_search(queries, docs, k=50) == term_at_a_time
    )  # pruned (MaxScore): the same sums by construction (tests/index/test_maxscore.py)
    dense = queries.toarray().astype(np.float64) @ docs.toarray().astype(np.float64).T
    eps32 = float(np.finfo(np.float32).eps)
    for q, row, a, b in zip(queries, dense, product, term_at_a_time):
        want = sorted((i for i in range(len(row)) if row[i] > 0), key=lambda i: (-row[i], i))[:51]
        # no near-ties: consecutive scores differ by more than twice the float32 error bound, so the order is determined
        assert np.min(np.diff(-row[want])) > 2 * (q.nnz + 1) * eps32 * row[want[0]]
        assert [i for i, _ in a] == [i for i, _ in b] == want[:50]
        np.testing.assert_allclose([s for _, s in a], row[want[:50]], rtol=1e-5)
        np.testing.assert_allclose([s for _, s in b], row[want[:50]], rtol=1e-5)


def test_term_at_a_time_blocks_do_not_change_a_bit(monkeypatch):
    # Blocking the score row only changes when a document's terms are added, not their order (each
    # document's sum takes its query terms in the query row's order in every block size), so the
    # scores are the same float32 values bit for bit: equality by construction. Block sizes from
    # 1 document (every posting its own segment) to more than the corpus (one block).
    rng = np.random.default_rng(5)
    docs = sp.random(500, 40, density=0.4, random_state=5, format="csr", dtype=np.float32)
    docs.data = rng.uniform(0.01, 5.0, docs.nnz).astype(np.float32)
    queries = sp.random(12, 40, density=0.5, random_state=6, format="csr", dtype=np.float32)
    monkeypatch.setattr(exact, "TAAT_FROM", 0)
    found = {}
    for block in (1, 3, 64, 499, 500, 1 << 17):
        monkeypatch.setattr(exact, "DOC_BLOCK", block)
        found[block] = exact_search(queries, docs, k=500, prune=False)  # DOC_BLOCK is the unpruned kernel's
    assert all(r == found[1 << 17] for r in found.values())
    assert sum(len(r) for r in found[1]) > 5000  # most documents score: every block holds postings
    # postings with 64-bit row numbers (a folder of more than 2^31 - 1 entries) and memory-mapped,
    # read-only arrays take the same kernel: the same values again
    postings = docs.T.tocsr()
    wide = sp.csr_matrix(
        (postings.data, postings.indices.astype(np.int64), postings.indptr.astype(np.int64)), shape=postings.shape
    )
    for array in (wide.data, wide.indices, wide.indptr):
        array.flags.writeable = False
    monkeypatch.setattr(exact, "DOC_BLOCK", 64)
    assert exact.search_postings(queries, wide, k=500) == found[1 << 17]


@pytest.mark.parametrize("prune", [True, False], ids=["pruned", "every-posting"])
@pytest.mark.parametrize("bad", ["row-past-the-end", "negative-row", "unsorted-row-past-the-end", "unsorted-in-range"])
def test_damaged_posting_lists_are_refused_naming_the_term(tmp_path, monkeypatch, bad, prune):
    # Term at a time adds each list segment with a loop that checks no bounds: a damaged stored list
    # (a row outside [0, D), or rows out of order) must raise naming its term, never write outside
    # the score row or drop postings in silence (the review of 6 Dec found both). Checked through an
    # Index folder whose postings.indices.npy is overwritten, at blocks of 2 documents (several segments).
    docs = sp.csr_matrix(np.array([[1, 0], [0, 1], [2, 0], [0, 0], [3, 1], [0, 0]], dtype=np.float32))
    index = Index.from_vectors(tmp_path / "ix", docs, [f"d{i}" for i in range(6)])
    path = tmp_path / "ix" / "postings.indices.npy"
    rows = np.load(path)
    assert rows[:3].tolist() == [0, 2, 4]  # term 0's list: documents 0, 2, 4
    rows[:3] = {
        "row-past-the-end": [0, 2, 7],
        "negative-row": [-1, 2, 4],
        "unsorted-row-past-the-end": [7, 0, 2],
        "unsorted-in-range": [4, 0, 2],
    }[bad]
    np.save(path, rows)
    monkeypatch.setattr(exact, "TAAT_FROM", 0)
    monkeypatch.setattr(exact, "DOC_BLOCK", 2)
    opened = Index.open(tmp_path / "ix")
    with pytest.raises(ValueError, match="posting list of term 0 holds .*damaged"):
        opened.search(sp.csr_matrix(np.array([[1.0, 1.0]], np.float32)), k=6, searcher=ExactConfig(prune=prune))
    del index
