"""PISA impact indexes (``pyterrier-pisa``): build from quantised vectors, safe top-k search.

PISA (Mallia et al., 2019, "PISA: Performant Indexes and Search for Academia") stores integer
impacts and, with its ``quantized`` scorer, scores ``Σ_j q_j · d_j``. Its dynamic-pruning
algorithms ``maxscore``, ``block_max_wand`` and ``block_max_maxscore`` are *safe*: they return
the exact top-k of that score. Both sides are integers:

* documents: ``d_j = ⌊w_j · scale + 1/2⌋`` (:func:`spladekit.index.formats.quantise`);
  ``pyterrier-pisa``'s ``toks`` indexer itself would truncate ``int(w · scale)``, so the
  integers are computed here and indexed with its scale 1;
* queries: PISA truncates query weights to integers, so queries are quantised the same way
  first (as for Anserini) and passed with ``toks_scale = 1``.

Terms are the decimal column ids (``"2023"``), so no stemmer, stop list or tokenizer of PISA
can touch them (the index is built with ``stemmer='none'`` and searched with ``stops='none'``).
The score of a document is then exactly the integer dot product of the quantised vectors
(float32 holds it exactly while it stays below 2²⁴), checked in ``tests/index/formats/test_engines.py``.
No Java is needed (``pyterrier`` is imported but its JVM is not started).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import scipy.sparse as sp

from spladekit.index.formats import iter_rows, quantise, rank_hits

SAFE_ALGORITHMS = ("maxscore", "block_max_wand", "block_max_maxscore")


def iter_documents(matrix: sp.spmatrix, doc_ids: Sequence[str], scale: float = 100.0) -> Iterator[dict]:
    """``{"docno": doc_id, "toks": {column id: integer impact}}`` per document (impacts > 0)."""
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    for doc_id, (idx, val) in zip(doc_ids, iter_rows(matrix)):
        yield {"docno": str(doc_id), "toks": {str(j): int(n) for j, n in zip(idx, quantise(val, scale)) if n > 0}}


def build(path: str | Path, matrix: sp.spmatrix, doc_ids: Sequence[str], scale: float = 100.0, threads: int = 1):
    """Index ``[D, V]`` vectors as quantised impacts in the new folder ``path``; returns the ``PisaIndex``."""
    import pyterrier_pisa

    index = pyterrier_pisa.PisaIndex(str(path), stemmer="none", stops="none", threads=threads)
    index.toks_indexer(scale=1.0).index(iter_documents(matrix, doc_ids, scale))
    return index


def retriever(index, k: int = 10, algorithm: str = "block_max_wand", threads: int = 1):
    """A ``PisaRetrieve`` (``quantized`` scorer, integer query weights) for :func:`search`; it opens
    the index once, so reuse it across calls.

    Raises:
        ValueError: ``algorithm`` is not one of :data:`SAFE_ALGORITHMS`.
    """
    if algorithm not in SAFE_ALGORITHMS:
        raise ValueError(f"algorithm must be a safe top-k algorithm {SAFE_ALGORITHMS}, got {algorithm!r}")
    return index.quantized(num_results=k, query_algorithm=algorithm, toks_scale=1.0, threads=threads)


def search(
    index,
    queries: sp.spmatrix,
    doc_ids: Sequence[str],
    k: int = 10,
    scale: float = 100.0,
    algorithm: str = "block_max_wand",
    threads: int = 1,
    retrieve=None,
) -> list[list[tuple[int, float]]]:
    """Search quantised ``queries`` with a safe algorithm; ``(row, score)`` lists like ``exact_search``.

    Scores are integer dot products of the quantised vectors. A query with no term left after
    quantisation returns ``[]`` without calling PISA. ``retrieve``: a :func:`retriever` to reuse
    (its ``k`` and algorithm then apply); default: a new one.

    Raises:
        ValueError: ``algorithm`` is not one of :data:`SAFE_ALGORITHMS`.
    """
    import pandas as pd

    retrieve = retrieve or retriever(index, k, algorithm, threads)
    rows = {str(d): r for r, d in enumerate(doc_ids)}
    topics = []
    for qn, (idx, val) in enumerate(iter_rows(queries)):
        toks = {str(j): float(n) for j, n in zip(idx, quantise(val, scale)) if n > 0}
        if toks:
            topics.append({"qid": str(qn), "query_toks": toks})
    results: list[list[tuple[int, float]]] = [[] for _ in range(queries.shape[0])]
    if not topics:
        return results
    frame = retrieve(pd.DataFrame(topics))
    for qid, group in frame.groupby("qid", sort=False):
        results[int(qid)] = rank_hits(((rows[d], s) for d, s in zip(group["docno"], group["score"])), k, doc_ids)
    return results
