"""The Seismic shard-size rule (spladekit.index.seismic_rule) and how the sharded build applies it:
the bytes an entry by hand, documents with a term counted, the least budget for a shard size, the
stored budget kept when only build parameters change, the same shards reused, the k-NN refusal
naming the budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.index.index import Index
from spladekit.index.seismic import SeismicBuildParams
from spladekit.index.seismic_rule import budget_for, build_bytes_per_entry, max_shard_entries, rule_corpus

LEAST = 16 << 20  # the writer's least budget (spladekit.index.writer.MIN_BUDGET)


def rows_of(rows: int, cols: int, nnz: int, seed: int = 3) -> sp.csr_matrix:
    """``rows`` documents of ``nnz`` distinct columns each, weights in (0, 1]."""
    rng = np.random.default_rng(seed)
    indices = np.concatenate([np.sort(rng.choice(cols, size=nnz, replace=False)) for _ in range(rows)])
    data = rng.uniform(0.01, 1.0, size=rows * nnz).astype(np.float32)
    return sp.csr_matrix((data, indices, np.arange(rows + 1) * nnz), shape=(rows, cols))


def test_bytes_an_entry_by_hand_and_empty_rows_not_counted():
    dense = rows_of(200, 50, 5)
    padded = sp.vstack([dense, sp.csr_matrix((10_000, 50), dtype=np.float32)]).tocsr()
    assert rule_corpus(padded) == rule_corpus(dense) == (1000, 200, 50)  # integers: exact
    params = SeismicBuildParams(n_postings=2, nknn=5)
    # 48 + 52 × min(1, 50 × 2 / 1000) + 16 × 5 × 200 / 1000 = 48 + 5.2 + 16 = 69.2 (a few float roundings)
    assert build_bytes_per_entry(params, *rule_corpus(padded)) == pytest.approx(69.2, rel=1e-12)
    assert build_bytes_per_entry(SeismicBuildParams(n_postings=10**6), 1000, 200, 50) == 100  # all kept: 48 + 52
    assert build_bytes_per_entry(SeismicBuildParams()) == 100  # an unknown corpus counts every entry kept
    assert max_shard_entries(LEAST, params, *rule_corpus(padded)) == int(LEAST // 69.2)


@pytest.mark.parametrize(
    "params, corpus",
    [
        (SeismicBuildParams(), (0, 0, 0)),
        (SeismicBuildParams(n_postings=2, nknn=2), (1000, 30, 7)),
        (SeismicBuildParams(max_fraction=24, nknn=30), (1_738_794_294, 8_800_000, 30522)),
    ],
)
def test_budget_for_is_the_least_budget_giving_the_shard_size(params, corpus):
    per_entry = build_bytes_per_entry(params, *corpus)
    for entries in (1, 30, 217_349_652):
        budget = budget_for(entries, params, corpus)
        assert budget // per_entry >= entries and (budget - 1) // per_entry < entries, (entries, budget, per_entry)


@pytest.fixture
def big(tmp_path):
    """20,000 documents × 20 entries over 3,000 terms: 400k entries, several shards at the least budget."""
    docs = rows_of(20_000, 3000, 20)
    return Index.from_vectors(tmp_path / "idx", docs, [f"d{i}" for i in range(docs.shape[0])])


def test_new_build_parameters_keep_the_stored_budget(big):
    from spladekit.index.seismic_store import open_or_build

    h = big.metadata["content_hash"]
    first = open_or_build(big.folder, big.docs, h, SeismicBuildParams(n_postings=40), memory_budget=LEAST)
    assert (
        len(first)
        == -(-big.docs.nnz // max_shard_entries(LEAST, SeismicBuildParams(n_postings=40), *rule_corpus(big.docs)))
        >= 2
    )
    again = open_or_build(big.folder, big.docs, h, SeismicBuildParams(n_postings=60))  # no budget asked: the stored one
    stored = json.loads((big.folder / "seismic" / "params.json").read_text())
    assert stored["build"]["n_postings"] == 60 and stored["memory_budget"] == LEAST
    assert stored["max_entries"] == max_shard_entries(LEAST, SeismicBuildParams(n_postings=60), *rule_corpus(big.docs))
    assert len(again) == -(-big.docs.nnz // stored["max_entries"]) >= 2


def test_a_budget_giving_the_same_shards_reuses_them(big):
    from spladekit.index.seismic_store import open_or_build

    h = big.metadata["content_hash"]
    first = open_or_build(big.folder, big.docs, h, SeismicBuildParams(n_postings=40), memory_budget=LEAST)
    built: list[int] = []
    again = open_or_build(
        big.folder, big.docs, h, None, memory_budget=LEAST + 4096, on_shard=built.append
    )  # 64 entries more a shard
    assert built == [] and again.ranges == first.ranges
    wider = open_or_build(big.folder, big.docs, h, None, memory_budget=4 * LEAST, on_shard=built.append)
    assert built and len(wider) < len(first)


def test_knn_refusal_names_the_budget_and_both_sizes_are_refused(tmp_path):
    from spladekit.index.seismic_store import open_or_build

    docs = rows_of(
        1500, 3000, 200
    )  # 300k entries; nknn 1000: 48 + 5.2 + 80 = 133.2 B an entry, 3 shards of 500 documents
    index = Index.from_vectors(tmp_path / "idx", docs, [f"d{i}" for i in range(docs.shape[0])])
    h = index.metadata["content_hash"]
    with pytest.raises(ValueError, match=r"has 500; .*a larger --memory-budget"):
        open_or_build(index.folder, index.docs, h, SeismicBuildParams(n_postings=10, nknn=1000), memory_budget=LEAST)
    with pytest.raises(ValueError, match="not both"):
        open_or_build(index.folder, index.docs, h, None, memory_budget=LEAST, max_entries=1000)
    assert not (index.folder / "seismic").exists()
