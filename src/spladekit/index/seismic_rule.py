"""How many entries one Seismic shard may hold: pyseismic's build memory per entry of its input, by
a rule fitted to measured builds (``benchmarks/RESULTS.md``, "Seismic by shards"), and the budget a
shard's build is given (:mod:`spladekit.index.seismic_shards` cuts the rows into ranges by it).

The rule is the writer's (:mod:`spladekit.index.writer`): bytes per entry held × entries ≤ the budget,
with the bytes per entry depending on the corpus and the build parameters
(:func:`build_bytes_per_entry`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spladekit.index.seismic import SeismicBuildParams
from spladekit.index.writer import check_budget

SEISMIC_ENTRY_BYTES = 48
"""Bytes of pyseismic build memory per entry of its input (spladekit's copy of it, int64
components and float32 values, its forward index and its unpruned lists), fitted with a margin to
measured builds (``benchmarks/runs/2026-12-07-index-constants.md``)."""

SEISMIC_POSTING_BYTES = 52
"""Bytes per posting kept (blocks, summaries): with :data:`SEISMIC_ENTRY_BYTES`, 100 B an entry when
every entry is kept."""

SEISMIC_NEIGHBOUR_BYTES = 16
"""Bytes per neighbour of the k-NN graph (``nknn`` per document)."""

DEFAULT_SEISMIC_BUDGET = 11 << 30
"""Build memory of one shard when none is given: 11 GiB, so that a build fits a 24 GB machine with
the fewest shards (each adds its own query time, more than fewer larger ones;
``benchmarks/RESULTS.md``, "Seismic by shards")."""


def build_bytes_per_entry(params: SeismicBuildParams, entries: int = 0, rows: int = 0, vocab_size: int = 0) -> float:
    """Build memory of one shard per entry of its input, for a corpus of ``entries`` stored entries in
    ``rows`` documents over ``vocab_size`` terms (its shards keep their share of the postings, so the
    fraction kept is the corpus's): ``E + P × min(1, V × n_postings / entries) + N × nknn × rows /
    entries`` bytes (:data:`SEISMIC_ENTRY_BYTES`, :data:`SEISMIC_POSTING_BYTES`,
    :data:`SEISMIC_NEIGHBOUR_BYTES`; Seismic keeps about ``V × n_postings`` postings). An unknown
    corpus (``entries`` 0) counts every entry kept. Not covered: the library's fixed cost once loaded,
    the ``[V]`` component names and the caller's query sets."""
    if entries <= 0:
        return float(SEISMIC_ENTRY_BYTES + SEISMIC_POSTING_BYTES)
    kept = min(1.0, vocab_size * params.n_postings / entries)
    return SEISMIC_ENTRY_BYTES + SEISMIC_POSTING_BYTES * kept + SEISMIC_NEIGHBOUR_BYTES * params.nknn * rows / entries


def max_shard_entries(
    memory_budget: int, params: SeismicBuildParams | None = None, entries: int = 0, rows: int = 0, vocab_size: int = 0
) -> int:
    """Entries of one shard's build input under ``memory_budget`` bytes: ``budget // bytes an entry``
    (:func:`build_bytes_per_entry` of the corpus and ``params``; None: the defaults).

    Raises:
        ValueError: a budget outside the writer's range (:func:`spladekit.index.writer.check_budget`).
    """
    per_entry = build_bytes_per_entry(params or SeismicBuildParams(), entries, rows, vocab_size)
    return max(1, int(check_budget(memory_budget) // per_entry))


def rule_corpus(docs: sp.csr_matrix) -> tuple[int, int, int]:
    """The corpus figures :func:`build_bytes_per_entry` takes: stored entries, documents with a term
    (Seismic keeps no other: an empty row has no neighbours), vocabulary size."""
    indptr = np.asarray(docs.indptr)
    return int(docs.nnz), int(np.count_nonzero(np.diff(indptr))), int(docs.shape[1])


def budget_for(max_entries: int, params: SeismicBuildParams, corpus: tuple[int, int, int]) -> int:
    """The least budget (bytes) whose :func:`max_shard_entries` is ``max_entries`` or more: recorded for
    shards asked by size (``params.json``'s ``memory_budget``)."""
    per_entry = build_bytes_per_entry(params, *corpus)
    budget = int(np.ceil(max_entries * per_entry))
    return budget if budget // per_entry >= max_entries else budget + 1
