"""Seismic backend: results map to rows, scores are dot products, empty slots, recall vs exact."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.index.exact import exact_search
from spladekit.index.results import recall_at_k
from spladekit.index.seismic import SeismicBuildParams, SeismicSearcher, SeismicSearchParams

pytest.importorskip("seismic", reason="pyseismic-lsr not installed")


def zipf_matrix(rows: int, cols: int, nnz: int, seed: int) -> sp.csr_matrix:
    """Rows with ``nnz`` distinct columns drawn with Zipf-like frequencies, positive weights."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, cols + 1) ** 0.8
    p /= p.sum()
    data, indices, indptr = [], [], [0]
    for _ in range(rows):
        cols_i = np.sort(rng.choice(cols, size=nnz, replace=False, p=p))
        indices.append(cols_i)
        data.append(rng.gamma(2.0, 0.5, size=nnz).astype(np.float32))
        indptr.append(indptr[-1] + nnz)
    return sp.csr_matrix((np.concatenate(data), np.concatenate(indices), np.array(indptr)), shape=(rows, cols))


def f16_score_tolerance(query: np.ndarray, exact: float) -> float:
    """How far Seismic's score of a document may be from the exact ``q · d`` (float64), for a query and
    document of non-negative weights. Seismic keeps each document value as float16, rounded to nearest:
    within 2^-11 of it relative (half a unit in the last place of an 11-bit significand), 2^-25 absolute
    below float16's normal range (2^-14); it keeps the query as float32 and sums the n products in
    float32 (n + 1 roundings of 2^-24 relative, the terms being non-negative). Hence
    ``|score − q·d| ≤ (2^-11 + (n + 1)·2^-24)·q·d + 2^-25·Σ_j q_j``."""
    n = int(np.count_nonzero(query))
    return (2.0**-11 + (n + 1) * 2.0**-24) * exact + 2.0**-25 * float(np.sum(query, dtype=np.float64))


def test_recall_at_k_by_hand():
    exact = [[(1, 3.0), (2, 2.0)], [], [(5, 1.0)]]
    approx = [[(2, 2.0), (9, 1.0)], [(4, 1.0)], [(5, 1.0)]]
    assert recall_at_k(approx, exact, k=2) == pytest.approx((0.5 + 1.0) / 2)  # query 2 skipped: no truth


def test_seismic_matches_exact_on_synthetic_vectors():
    docs = zipf_matrix(1500, 400, 40, seed=1).toarray()
    docs[7] = 0  # a document with no active term
    docs[:, 399] = 0  # a term no document has
    docs = sp.csr_matrix(docs)
    queries = zipf_matrix(40, 400, 15, seed=2).toarray()
    queries[3] = 0  # an empty query
    queries[5] = 0
    queries[5, 399] = 2.0  # a query that matches nothing
    queries = sp.csr_matrix(queries)
    searcher = SeismicSearcher(docs)
    got = searcher.search(queries, k=10)
    want = exact_search(queries, docs, k=10)
    assert len(got) == 40 and got[3] == [] and got[5] == [] and want[5] == []
    dense = docs.toarray().astype(np.float64)
    for qi, hits in enumerate(got):
        q = queries[qi].toarray().ravel().astype(np.float64)
        for row, score in hits:  # every returned score is that document's dot product, up to float16 storage
            exact = float(dense[row] @ q)
            assert abs(score - exact) <= f16_score_tolerance(q, exact), (qi, row, score, exact)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert recall_at_k(got, want, k=10) >= 0.95


def test_seismic_merges_repeated_query_terms():
    docs = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 2.0, 0]], dtype=np.float32))
    # row 0 given as column 0 twice (0.5 + 0.5): must score as 1.0 × 1.0, not 0.5
    query = sp.csr_matrix((np.array([0.5, 0.5], np.float32), np.array([0, 0]), np.array([0, 2])), shape=(1, 3))
    assert SeismicSearcher(docs).search(query, k=5) == [[(0, 1.0)]]


def test_seismic_queries_in_any_sparse_form_are_searched_as_their_canonical_vector():
    """The fast path (a canonical float32 CSR query used as it is) and the normalising one give the
    same hits: unsorted columns, an explicit zero, a negative weight (dropped, as exact search's
    score > 0 rule never credits it), float64, a csr_array; a row with only a negative weight is empty."""
    docs = sp.csr_matrix(np.array([[1.0, 0, 3.0], [0, 2.0, 1.0], [4.0, 0, 0]], dtype=np.float32))
    searcher = SeismicSearcher(docs)
    canonical = sp.csr_matrix(np.array([[0.5, 0, 2.0]], dtype=np.float32))
    want = searcher.search(canonical, k=5)
    assert want == [[(0, 6.5), (1, 2.0), (2, 2.0)]]  # 0.5·1 + 2·3; 2·1; 0.5·4 (hand-computed, exact in float32)
    messy = sp.csr_matrix((np.array([2.0, 0.0, -1.0, 0.5]), np.array([2, 1, 1, 0]), np.array([0, 4])), shape=(1, 3))
    assert not messy.has_canonical_format
    assert searcher.search(messy, k=5) == want
    assert searcher.search(sp.csr_array(canonical), k=5) == want
    assert searcher.search(sp.csr_matrix(np.array([[0, -1.0, 0]], np.float32)), k=5) == [[]]


def test_seismic_parameters_are_passed():
    docs = zipf_matrix(300, 200, 30, seed=3)
    queries = zipf_matrix(10, 200, 30, seed=4)
    searcher = SeismicSearcher(docs, SeismicBuildParams(n_postings=20, summary_energy=0.1))
    full = searcher.search(queries, k=10, params=SeismicSearchParams(query_cut=30, heap_factor=1.0))
    cut = searcher.search(queries, k=10, params=SeismicSearchParams(query_cut=1, heap_factor=1.0))
    exact = exact_search(queries, docs, k=10)
    assert recall_at_k(cut, exact) < recall_at_k(full, exact)


def _list_lengths(searcher: SeismicSearcher) -> np.ndarray:
    return np.array([len(searcher.index.get_doc_ids_in_postings(j)) for j in range(searcher.index.dim)])


def test_max_fraction_caps_each_posting_list_and_keeps_near_duplicates():
    """Seismic's static pruning keeps at most ``V × n_postings`` postings (a global cut) and at most
    ``n_postings × max_fraction`` in any list. Near-duplicates (40 noisy copies of 30 documents)
    crowd the lists of their terms: with the cap at 1.5 × n_postings those lists lose copies that
    the guidelines' 6 keeps, and an exhaustive search (every term, every block: the exact top-k over
    the postings kept) finds fewer of each query's exact top-10."""
    rng = np.random.default_rng(7)
    base = zipf_matrix(30, 200, 25, seed=8)
    copies = sp.vstack([base] * 40).tocsr()
    copies.data = copies.data * rng.uniform(0.8, 1.2, copies.nnz).astype(np.float32)  # noise: no exact ties
    queries = base[:10]
    exact = exact_search(queries, copies, k=10)
    every_block = SeismicSearchParams(query_cut=10_000, heap_factor=1e-9, num_threads=1)
    n_postings, vocab = 20, 200
    recall, kept = {}, {}
    for max_fraction in (1.5, 6.0):
        searcher = SeismicSearcher(copies, SeismicBuildParams(n_postings=n_postings, max_fraction=max_fraction))
        lengths = _list_lengths(searcher)
        assert lengths.max() <= int(n_postings * max_fraction)  # the cap: 30 and 120
        assert lengths.sum() <= vocab * n_postings  # the global cut: 4,000
        kept[max_fraction] = lengths
        recall[max_fraction] = recall_at_k(searcher.search(queries, k=10, params=every_block), exact)
    assert kept[6.0].max() > int(n_postings * 1.5)  # a list longer than the 1.5 cap allows
    assert recall[6.0] > recall[1.5]


def _scifact_and_model():
    from spladekit.data.resolve import shared_roots

    for root in shared_roots():
        data, model = root / "data" / "beir" / "scifact", root / "models" / "splade-tiny"
        if data.is_dir() and model.is_dir():
            return data, model
    pytest.skip("shared SciFact + splade-tiny not found; set SPLADEKIT_SHARED")


@pytest.mark.slow
def test_seismic_recall_on_scifact_subset_with_real_checkpoint():
    """150 SciFact documents (judged ones first, 128 tokens) and 40 test queries, default parameters.

    The full-corpus measurement (5,183 documents, 300 queries) is in docs/serving.md.
    """
    from spladekit.data.beir import load_beir
    from spladekit.model.encoder import SpladeEncoder

    data, model = _scifact_and_model()
    ds = load_beir(data, "test")
    judged = [d for q in ds.qrels.values() for d in q]
    ids = list(dict.fromkeys(judged + list(ds.corpus)))[:150]
    encoder = SpladeEncoder.from_pretrained(str(model), head_impl="plain", batch_size=64, doc_max_length=128)
    docs = encoder.encode_documents([ds.corpus[i] for i in ids])
    queries = encoder.encode_queries(list(ds.queries.values())[:40])
    got = SeismicSearcher(docs).search(queries, k=10)
    assert recall_at_k(got, exact_search(queries, docs, k=10), k=10) >= 0.95


def test_seismic_ties_follow_exact_rule_with_doc_ids():
    docs = sp.csr_matrix(np.array([[1.0, 0], [1.0, 0], [2.0, 0], [1.0, 0]], dtype=np.float32))
    query = sp.csr_matrix(np.array([[1.0, 0]], dtype=np.float32))
    ids = ["z", "b", "m", "a"]
    # (which documents tied at the k-th score come back is Seismic's choice; their order is ours)
    got = SeismicSearcher(docs).search(query, k=4, doc_ids=ids)
    assert got == [[(2, 2.0), (3, 1.0), (1, 1.0), (0, 1.0)]]  # 2.0 first, then ties by id: a, b, z
    assert got == exact_search(query, docs, k=4, doc_ids=ids)
    assert SeismicSearcher(docs).search(query, k=4) == [[(2, 2.0), (0, 1.0), (1, 1.0), (3, 1.0)]]  # by row


def _twins(pairs: int = 6, cols: int = 40) -> sp.csr_matrix:
    """Rows 2i (A_i) and 2i + 1 (B_i): both hold term 0 (A_i weight 10 - i, B_i weight 1 + 0.1 i: every
    B below every A) and a term of their own, 1 + i, weight 10. So A_i's nearest row by dot product is
    B_i (100 + (10 - i)(1 + 0.1 i) against at most 100 between two A's), and term 0's list, capped
    at ``n_postings × max_fraction`` = ``pairs`` postings, keeps the A's only (the global cut,
    ``n_postings`` × the 1 + ``pairs`` terms held, keeps every other posting)."""
    rows, cols_, vals = [], [], []
    for i in range(pairs):
        for r, w in ((2 * i, 10.0 - i), (2 * i + 1, 1.0 + 0.1 * i)):
            rows += [r, r]
            cols_ += [0, 1 + i]
            vals += [w, 10.0]
    return sp.csr_matrix((np.array(vals, np.float32), (rows, cols_)), shape=(2 * pairs, cols))


def test_knn_graph_finds_the_neighbours_static_pruning_dropped(tmp_path):
    """A query on term 0 alone: its list holds the A's (the B's are pruned), so Seismic without the
    graph answers A's only; with a k-NN graph (nknn 1) each found A_i's neighbour B_i is scored too,
    and the top-2·pairs equals the exact dot-product top-k (numpy), kept through save and load."""
    pairs = 6
    docs = _twins(pairs)
    query = sp.csr_matrix((np.array([1.0], np.float32), ([0], [0])), shape=(1, docs.shape[1]))
    every = dict(query_cut=10_000, heap_factor=1e-9, num_threads=1)
    build = SeismicBuildParams(n_postings=pairs, max_fraction=1, min_cluster_size=1)
    plain = SeismicSearcher(docs, build)
    assert sorted(plain.index.get_doc_ids_in_postings(0)) == [
        2 * i for i in range(pairs)
    ]  # term 0's list: the B's pruned
    k = 2 * pairs
    exact = [(r, float(docs[r, 0])) for r in np.argsort(-docs[:, 0].toarray().ravel(), kind="stable")[:k]]
    without = plain.search(query, k=k, params=SeismicSearchParams(**every))[0]
    assert [r for r, _ in without] == [2 * i for i in range(pairs)]  # the A's only: pairs hits, not k
    with pytest.raises(ValueError, match="no|holds \\(0\\)"):
        plain.search(query, k=k, params=SeismicSearchParams(**every, n_knn=1))  # no graph: refused, not ignored
    graph = SeismicSearcher(docs, build.model_copy(update={"nknn": 1}))
    assert graph.knn_len == 1
    folder = tempfile.mkdtemp(dir=tmp_path)
    graph.save(folder)
    reopened = SeismicSearcher.load(folder, graph.params, docs.shape)
    assert reopened.knn_len == 1
    for searcher in (graph, reopened):
        got = searcher.search(query, k=k, params=SeismicSearchParams(**every, n_knn=1))[0]
        assert [r for r, _ in got] == [r for r, _ in exact]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in exact], rtol=2**-10)  # Seismic stores f16 values
    with pytest.raises(ValueError, match="n_knn ≤ 1"):
        graph.search(query, k=k, params=SeismicSearchParams(**every, n_knn=2))  # beyond the graph: refused


def test_too_few_documents_for_the_knn_graph_are_refused_before_the_build():
    """pyseismic-lsr 0.5.4 crashed the process (segmentation fault) searching a 2-document index with
    nknn 1 and panicked at nknn 9 of 10 documents: a graph of nknn neighbours needs nknn + 2
    documents with a term (MIN_KNN_DOCUMENTS), refused before pyseismic builds anything."""
    from spladekit.index.seismic import MAX_NKNN, MIN_KNN_DOCUMENTS

    docs = _twins(5)  # 10 documents
    with pytest.raises(ValueError, match=r"needs at least 11 documents with a term, and the index has 10"):
        SeismicSearcher(docs, SeismicBuildParams(n_postings=5, nknn=10 - MIN_KNN_DOCUMENTS + 1))
    assert (
        SeismicSearcher(docs, SeismicBuildParams(n_postings=5, nknn=10 - MIN_KNN_DOCUMENTS)).knn_len == 8
    )  # the bound itself is taken
    with pytest.raises(ValueError, match=r"nknn must be an integer in \[0, 1024\]"):
        SeismicBuildParams(nknn=MAX_NKNN + 1)  # would allocate nknn ids a document before failing


def test_a_pyseismic_panic_becomes_an_engine_failure_naming_the_option(monkeypatch):
    """pyo3's PanicException derives from BaseException (no `except Exception` catches it): the CLI
    and the server would print a Rust traceback or die. It is raised as EngineFailure instead."""
    from spladekit.errors import EngineFailure, SpladekitError

    docs = _twins(6)
    searcher = SeismicSearcher(docs, SeismicBuildParams(n_postings=6, nknn=2))
    panic = type("PanicException", (BaseException,), {})  # pyo3's class is not importable; matched by name

    class Panicking:
        knn_len = searcher.index.knn_len

        def search(self, *args, **kwargs):
            raise panic("Index out of bounds.")

        batch_search = search

    monkeypatch.setattr(searcher, "index", Panicking())
    with pytest.raises(
        EngineFailure, match="pyseismic failed with n_knn 2 .*smaller nknn.*Index out of bounds"
    ) as raised:
        searcher.search(docs[:1], k=3, params=SeismicSearchParams(n_knn=2))
    assert isinstance(raised.value, SpladekitError)


def test_a_real_knn_graph_with_too_few_neighbours_never_lets_a_panic_through():
    """60 documents of 40 random terms among 3,000 share few terms: pyseismic-lsr 0.5.4's graph search
    finds fewer than 20 neighbours for some of them, and searching with n_knn 20 panicked ("Index
    out of bounds") on every try. Whatever pyseismic does, the caller gets hits or EngineFailure,
    never a BaseException that `except Exception` misses."""
    from spladekit.errors import EngineFailure

    rng = np.random.default_rng(2)
    rows = np.repeat(np.arange(60), 40)
    cols = np.concatenate([rng.choice(3000, 40, replace=False) for _ in range(60)])
    docs = sp.csr_matrix((rng.gamma(1.0, 1.0, 60 * 40).astype(np.float32), (rows, cols)), shape=(60, 3000))
    searcher = SeismicSearcher(docs, SeismicBuildParams(nknn=20))
    try:
        hits = searcher.search(docs, k=10, params=SeismicSearchParams(n_knn=20))
    except EngineFailure as exc:
        assert "n_knn 20" in str(exc)
    else:
        assert len(hits) == 60 and all(
            h and h[0][0] == i for i, h in enumerate(hits)
        )  # each document finds itself first
