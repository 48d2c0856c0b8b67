"""Exact search against brute-force dense scoring; efficiency against the FLOPS formula by hand."""

import numpy as np
import pytest
import scipy.sparse as sp

import spladekit.index.exact as exact_module
from spladekit.evaluate.efficiency import avg_active_terms, efficiency_stats, flops
from spladekit.index.exact import exact_search, results_to_run


def brute_force(q, d, k):
    scores = q.toarray() @ d.toarray().T
    out = []
    for row in scores:
        order = sorted([i for i in range(len(row)) if row[i] > 0], key=lambda i: (-row[i], i))[:k]
        out.append([(i, float(row[i])) for i in order])
    return out


@pytest.mark.parametrize("query_dtype", [np.float32, np.float64])
def test_exact_search_equals_brute_force(query_dtype):
    q = sp.random(7, 50, density=0.2, random_state=1, format="csr", dtype=np.float32).astype(query_dtype)
    d = sp.random(40, 50, density=0.1, random_state=2, format="csr", dtype=np.float32)
    got = exact_search(q, d, k=5)
    want = brute_force(q, d, 5)
    # same order on every BLAS: on these seeded vectors consecutive top-6 scores differ by ≥ 3.7e-4
    # relative, while float32 dot products of ≤ 50 terms differ by ≤ 50·EPS32 ≈ 6e-6 between kernels
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], rtol=1e-5)


def test_ties_broken_by_doc_index_and_empty_query():
    d = sp.csr_matrix(np.array([[1, 0], [1, 0], [2, 0], [0, 1]], dtype=np.float32))
    q = sp.csr_matrix(np.array([[1, 0], [0, 0]], dtype=np.float32))
    results = exact_search(q, d, k=3)
    assert results[0] == [(2, 2.0), (0, 1.0), (1, 1.0)]
    assert results[1] == []
    run = results_to_run(results, ["a", "b"], ["x", "y", "z", "w"])
    assert run == {"a": {"z": 2.0, "x": 1.0, "y": 1.0}, "b": {}}


@pytest.mark.parametrize("taat_from", [0, 10**12], ids=["term-at-a-time", "sparse-product"])
def test_results_do_not_depend_on_the_batch(monkeypatch, taat_from):
    # a query searched after others, alone, or in another order must get the same results (scores
    # compared exactly: one kernel, forced here, sums the same float32 terms in the same order,
    # and each query has its own score row)
    monkeypatch.setattr(exact_module, "TAAT_FROM", taat_from)
    q = sp.random(6, 30, density=0.3, random_state=3, format="csr", dtype=np.float32)
    d = sp.random(25, 30, density=0.2, random_state=4, format="csr", dtype=np.float32)
    together = exact_search(q, d, k=25)
    alone = [exact_search(q[i], d, k=25)[0] for i in range(q.shape[0])]
    reversed_order = exact_search(q[::-1], d, k=25)[::-1]
    assert together == alone == reversed_order
    # a duplicated (non-canonical) query entry counts twice, as in the product q · d
    dup = sp.csr_matrix((np.array([1.0, 2.0], np.float32), np.array([0, 0]), np.array([0, 2])), shape=(1, 2))
    docs = sp.csr_matrix(np.array([[1.5, 0.0], [0.0, 1.0]], np.float32))
    assert exact_search(dup, docs, k=2) == [[(0, 4.5)]]


def test_vocabulary_mismatch_raises():
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        exact_search(sp.csr_matrix((1, 3)), sp.csr_matrix((1, 4)))


def test_flops_by_hand():
    # term activity: queries p_q = [1, 0.5, 0], docs p_d = [0.5, 1, 0.5] → FLOPS = 0.5 + 0.5 + 0 = 1.0
    q = sp.csr_matrix(np.array([[1, 1, 0], [2, 0, 0]], dtype=np.float32))
    d = sp.csr_matrix(np.array([[1, 1, 0], [0, 3, 1]], dtype=np.float32))
    assert flops(q, d) == pytest.approx(1.0)
    assert avg_active_terms(q) == pytest.approx(1.5)
    stats = efficiency_stats(q, d)
    assert stats == {"avg_query_terms": 1.5, "avg_doc_terms": 2.0, "flops": pytest.approx(1.0)}


def test_efficiency_on_empty_sets_is_an_error():
    with pytest.raises(ValueError, match="empty query set"):
        flops(sp.csr_matrix((0, 3)), sp.csr_matrix(np.ones((1, 3))))
    with pytest.raises(ValueError, match="empty document set"):
        efficiency_stats(sp.csr_matrix(np.ones((1, 3))), sp.csr_matrix((0, 3)))


@pytest.mark.parametrize("kind", ["distinct", "few-values", "mostly-zero", "half-zero"])
def test_a_long_row_cut_at_a_sampled_threshold_gives_the_same_top_k(monkeypatch, kind):
    # the sampled threshold only decides which scores are ranked: the top k, ties with the k-th
    # included, is the one of ranking every positive score (computed here with the cut turned off),
    # itself checked against a sort of the whole row by (score descending, tie rank)
    rng = np.random.default_rng(3)
    n = 300_000
    scores = {
        "distinct": rng.random(n),
        "few-values": rng.integers(0, 30, n),
        "mostly-zero": np.where(rng.random(n) < 0.002, rng.random(n), 0),
        "half-zero": np.where(rng.random(n) < 0.5, rng.random(n), 0),
    }[kind]
    scores = scores.astype(np.float32)
    tie = rng.permutation(n)
    for k in (1, 10, 1000, 5000):
        cut = exact_module.top_k_row(scores, k, tie)
        monkeypatch.setattr(exact_module, "SAMPLE_FROM", n + 1)
        every = exact_module.top_k_row(scores, k, tie)
        monkeypatch.undo()
        assert cut == every, (kind, k)
        positive = np.flatnonzero(scores > 0)
        want = positive[np.lexsort((tie[positive], -scores[positive]))][:k]
        assert [row for row, _ in cut] == want.tolist()
    assert (
        exact_module._sampled_cut(scores, 10) is not None or kind == "mostly-zero"
    )  # the cut was taken (a sample holds positives)
