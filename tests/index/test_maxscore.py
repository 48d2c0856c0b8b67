"""Exact search pruned by MaxScore over blocks (spladekit.index.maxscore) against every posting added.

The pruned kernel scores the documents it keeps from their rows, adding the same float32 products in
the same (ascending term) order as the term-at-a-time kernel, so its scores are the same float32
values and its top k the same list: compared with ``==``. (Both loops multiply then add, each
rounded: scipy's compiled loop and numpy's vector ops on x86-64 builds, which do not fuse the two.)
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import spladekit.index.exact as exact
import spladekit.index.maxscore as maxscore
from spladekit.index.exact import exact_search, search_postings, tie_ranks
from spladekit.index.index import Index, ShardedIndex
from spladekit.index.maxscore import BlockMaxima, pruned_top_k, rescore
from spladekit.index.searcher import ExactConfig


def corpus(seed: int, num_docs: int = 700, vocab: int = 50, copies: int = 3, integer: bool = True):
    """Skewed documents (a few frequent terms, many rare ones) with exact copies (ties across blocks),
    and queries of 3-12 terms; integer impacts (many equal scores) or float ones."""
    rng = np.random.default_rng(seed)
    base = num_docs // copies
    p = 1.0 / np.arange(1, vocab + 1) ** 0.9
    rows = []
    for _ in range(base):
        terms = np.unique(rng.choice(vocab, size=rng.integers(1, 15), p=p / p.sum()))
        values = (
            rng.integers(1, 40, terms.size).astype(np.float32)
            if integer
            else rng.gamma(1.5, 1.0, terms.size).astype(np.float32)
        )
        rows.append((terms, values))
    order = rng.permutation(
        np.repeat(np.arange(base), copies)
    )  # each document `copies` times, scattered over the blocks
    indptr = np.concatenate([[0], np.cumsum([rows[i][0].size for i in order])])
    docs = sp.csr_matrix(
        (np.concatenate([rows[i][1] for i in order]), np.concatenate([rows[i][0] for i in order]), indptr),
        shape=(order.size, vocab),
    )
    queries = []
    for _ in range(25):
        terms = np.unique(rng.choice(vocab, size=rng.integers(3, 13)))
        weights = (
            rng.integers(1, 9, terms.size).astype(np.float32)
            if integer
            else rng.uniform(0.05, 3, terms.size).astype(np.float32)
        )
        queries.append(sp.csr_matrix((weights, terms, [0, terms.size]), shape=(1, vocab)))
    ids = [f"d{i:05d}" for i in rng.permutation(order.size)]  # id order ≠ row order: the tie rule is the ids'
    return docs, sp.vstack(queries).tocsr(), ids


@pytest.fixture(autouse=True)
def every_query_term_at_a_time(monkeypatch):
    monkeypatch.setattr(exact, "TAAT_FROM", 0)  # small corpora: every query takes the long-list path,
    monkeypatch.setattr(exact, "PRUNE_FROM", 0)  # and is pruned whatever k


@pytest.mark.parametrize("integer", [True, False], ids=["integer-impacts", "float-impacts"])
@pytest.mark.parametrize("block", [23, 128, 1 << 17], ids=["blocks-of-23", "blocks-of-128", "one-block"])
@pytest.mark.parametrize("cost", [0, 4000, 10**9], ids=["stop-early", "default-cost", "never-stop"])
def test_pruned_equals_every_posting_added(monkeypatch, integer, block, cost):
    monkeypatch.setattr(maxscore, "CANDIDATE_COST", cost)
    for seed in range(2):
        docs, queries, ids = corpus(seed, integer=integer)
        postings = docs.T.tocsr()
        rank = tie_ranks(ids)
        maxima = BlockMaxima(postings, block)
        for k in (1, 3, 10, 37, 5000):
            plain = search_postings(queries, postings, k, rank)
            pruned = search_postings(queries, postings, k, rank, maxima=maxima)
            assert pruned == plain, (seed, k)  # rows and float32 scores: the same sums (module docstring)
            assert k > 37 or any(len(hits) == k for hits in plain)  # the cut falls inside the matches


def test_pruned_top_k_follows_a_float64_brute_force_with_ties_by_id():
    # independent of both kernels: float64 scores of integer impacts and weights are exact (and so are
    # the float32 ones: sums below 2^24), ties broken by document id
    docs, queries, ids = corpus(11, num_docs=900, copies=4)
    postings = docs.T.tocsr()
    rank = tie_ranks(ids)
    dense = queries.toarray().astype(np.float64) @ docs.toarray().astype(np.float64).T
    maxima = BlockMaxima(postings, 50)
    for q, row in zip(queries, dense):
        for k in (1, 4, 10, 100):
            want = sorted((i for i in range(row.size) if row[i] > 0), key=lambda i: (-row[i], ids[i]))[:k]
            got = pruned_top_k(np.empty(docs.shape[0], np.float32), maxima, q.indices, q.data, k, rank)
            assert [r for r, _ in got] == want
            assert [s for _, s in got] == row[want].tolist()
    assert any(len(set(row[row > 0])) < np.count_nonzero(row) for row in dense)  # ties were there to break


def test_pruning_skips_postings(monkeypatch):
    # the point of it: at k = 1 on a skewed corpus, far fewer postings are added than the query's lists
    # hold (blocks of 200 documents hold ≈ 1,300 postings: a rescoring priced at 10 postings lets blocks stop)
    monkeypatch.setattr(maxscore, "CANDIDATE_COST", 10)
    docs, queries, ids = corpus(3, num_docs=3000, copies=1)
    postings = docs.T.tocsr()
    added = []
    real = maxscore.add_segment
    monkeypatch.setattr(
        maxscore, "add_segment", lambda scores, rows, *rest: (added.append(rows.size), real(scores, rows, *rest))
    )
    maxima = BlockMaxima(postings, 200)
    total = sum(int(np.diff(postings.indptr)[q.indices].sum()) for q in queries)
    assert search_postings(queries, postings, 1, maxima=maxima) == search_postings(queries, postings, 1)
    assert 0 < sum(added) < 0.7 * total, (sum(added), total)


@pytest.mark.parametrize("where", ["query", "document"])
def test_a_negative_weight_is_scored_unpruned(where):
    # the bounds need weights ≥ 0: a query with a negative weight, or a term with a negative impact, is left to the plain kernel
    docs, queries, ids = corpus(5)
    docs = docs.copy()
    query = queries[0].copy()
    if where == "query":
        query.data[0] = -2.0
    else:
        docs.data[docs.indices == query.indices[0]] *= -1
    postings = docs.T.tocsr()
    maxima = BlockMaxima(postings, 64)
    assert pruned_top_k(np.empty(docs.shape[0], np.float32), maxima, query.indices, query.data, 5) is None
    assert search_postings(query, postings, 5, maxima=maxima) == search_postings(query, postings, 5)


def test_unsorted_or_repeated_query_terms_are_summed_in_term_order():
    # a query row with its terms out of order and one term twice: taken in canonical form by every kernel
    docs, queries, ids = corpus(6, integer=False)
    postings = docs.T.tocsr()
    messy = sp.csr_matrix(
        (np.array([0.5, 1.25, 0.25, 2.0], np.float32), np.array([9, 2, 9, 0]), [0, 4]), shape=(1, docs.shape[1])
    )
    clean = sp.csr_matrix(
        (np.array([2.0, 1.25, 0.75], np.float32), np.array([0, 2, 9]), [0, 3]), shape=(1, docs.shape[1])
    )
    want = search_postings(clean, postings, 20)
    assert search_postings(messy, postings, 20) == want
    assert search_postings(messy, postings, 20, maxima=BlockMaxima(postings, 64)) == want
    assert exact_search(messy, docs, 20) == exact_search(messy, docs, 20, prune=False) == want
    # a document row holding a term twice: summed, as a query's (its posting list stays strictly ascending)
    twice = sp.csr_matrix((np.array([1.0, 2.0, 4.0], np.float32), np.array([3, 3, 5]), [0, 3]), shape=(1, 8))
    assert twice.has_canonical_format is False
    query = sp.csr_matrix((np.array([1.0, 1.0], np.float32), np.array([3, 5]), [0, 2]), shape=(1, 8))
    assert exact_search(query, twice, 1) == exact_search(query, twice, 1, prune=False) == [[(0, 7.0)]]


def test_rescore_adds_in_term_order():
    # by hand: documents 0 and 1; term 4 holds both, term 7 only document 0; float32 arithmetic in term order
    docs = sp.csr_matrix((np.array([0.1, 0.3, 0.7, 2.0], np.float32), np.array([1, 4, 7, 4]), [0, 3, 4]), shape=(2, 8))
    want0 = np.float32(np.float32(0.3) * np.float32(1.5)) + np.float32(np.float32(0.7) * np.float32(0.9))
    got = rescore(docs.T.tocsr(), np.array([0, 1]), np.array([4, 7]), np.array([1.5, 0.9], np.float32))
    assert got.tolist() == [float(want0), float(np.float32(2.0) * np.float32(1.5))]


def test_damaged_lists_are_refused_naming_the_term():
    docs = sp.csr_matrix(np.array([[1, 0], [0, 1], [2, 0], [0, 0]], dtype=np.float32))
    postings = docs.T.tocsr()
    postings.indices = postings.indices.copy()
    postings.indices[:2] = [2, 0]  # term 0's list out of order
    with pytest.raises(ValueError, match="posting list of term 0 holds document rows out of order"):
        BlockMaxima(postings, 2).of(0)
    postings.indices[:2] = [0, 4]  # in order, past the end
    with pytest.raises(ValueError, match="posting list of term 0 holds document row 4 outside \\[0, 4\\)"):
        BlockMaxima(postings, 2).of(0)


def test_index_search_prunes_with_the_same_hits(tmp_path):
    docs, queries, ids = corpus(8, num_docs=1200)
    index = Index.from_vectors(tmp_path / "ix", docs, ids)
    reopened = Index.open(tmp_path / "ix")
    pruned = reopened.search(queries, k=10)
    assert reopened.search(queries, k=10, searcher=ExactConfig(prune=False)).hits == pruned.hits
    half = docs.shape[0] // 2
    shards = ShardedIndex(
        [
            Index.from_vectors(tmp_path / "a", docs[:half], ids[:half]),
            Index.from_vectors(tmp_path / "b", docs[half:], ids[half:]),
        ]
    )
    assert shards.search(queries, k=10).hits == pruned.hits
    del index


def test_underflow_overflow_and_float64_postings_keep_the_unpruned_answer(monkeypatch):
    # the review of 6 Dec: (1) products below float32's normal range round by half a subnormal
    # whatever their size (0.51 × the smallest subnormal → the whole subnormal): 11 such products
    # outscore a document with one product of 10 subnormals, which relative bounds alone would prune
    # away; (2) sums that overflow to inf tie, and the tie rule must pick among them; (3) float64
    # postings are scored unpruned (the kernel reads float32 impacts as stored)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    dense = np.zeros((3, 12), np.float32)
    dense[0, 1:] = tiny  # 11 products 0.51 u → 11 u
    dense[1, [0, 1, 2]] = tiny  # 1 u + 2 × 0.51 u → 3 u
    dense[2, 0] = 10 * tiny  # 10 u
    query = sp.csr_matrix(np.array([[1.0] + [0.51] * 11], np.float32))
    docs = sp.csr_matrix(dense)
    for cost in (0, 1, 4000):
        monkeypatch.setattr(maxscore, "CANDIDATE_COST", cost)
        assert exact_search(query, docs, 1) == exact_search(query, docs, 1, prune=False) == [[(0, 11 * tiny)]]
    huge = sp.csr_matrix(np.array([[0, 3e18, 3e18], [1, 1, 1], [1e20, 0, 0]], np.float32))
    big_query = sp.csr_matrix(np.array([[1e20, 1e20, 1e20]], np.float32))
    with np.errstate(over="ignore"):
        want = exact_search(big_query, huge, 1, prune=False)
        assert want == [[(0, float("inf"))]]  # rows 0 and 2 both overflow; row 0 first by the tie rule
        assert exact_search(big_query, huge, 1) == want
    postings = docs.T.tocsr().astype(np.float64)
    assert search_postings(query, postings, 2, maxima=BlockMaxima(postings)) == search_postings(query, postings, 2)
