"""Candidate documents per query: BM25 (bm25s), a spladekit model's index (dot product), or a TREC run.

Every source returns ``{qid: [(doc_id, retriever score), ...]}`` in rank order (score descending;
ties by the source's own rule: document index for BM25, document id for an index search or a run).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from spladekit.errors import DataFormatError


def bm25_candidates(queries: dict[str, str], corpus: dict[str, str], depth: int) -> dict[str, list[tuple[str, float]]]:
    """Top-``depth`` BM25 documents (:func:`spladekit.index.bm25.bm25_search`, k1 = 0.9, b = 0.4)."""
    from spladekit.index.bm25 import bm25_search

    doc_ids = list(corpus)
    hits = bm25_search(list(queries.values()), [corpus[d] for d in doc_ids], k=depth)
    return {qid: [(doc_ids[i], s) for i, s in row] for qid, row in zip(queries, hits)}


def model_candidates(
    queries: dict[str, str],
    corpus: dict[str, str],
    depth: int,
    model: str | None = None,
    index: str | None = None,
    show_progress: bool = True,
    trust_remote_code: bool = False,
) -> dict[str, list[tuple[str, float]]]:
    """Top-``depth`` documents by the SPLADE dot product: an exact search of ``index`` (its own
    query encoder, or ``model``), or of a temporary :class:`~spladekit.index.index.Index` of
    ``corpus`` built with ``model`` (``trust_remote_code``: run the model folder's own code).

    Raises:
        DataFormatError: a document of the index that is not in the corpus (a different collection).
    """
    from spladekit.index.index import Index

    if index is not None:
        opened = Index.open(index)
        encoder = opened.query_encoder(model, trust_remote_code=trust_remote_code)
        result = opened.search(queries, k=depth, encoder=encoder)
        unknown = next((d for row in result.hits for d, _ in row if d not in corpus), None)
        if unknown is not None:
            raise DataFormatError(
                Path(index) / "index.json", f"document {unknown!r} of the index is not in the mining corpus"
            )
        return {qid: [(d, float(s)) for d, s in row] for qid, row in zip(result.query_ids, result.hits)}
    from spladekit.model.encoder import SpladeEncoder

    encoder = SpladeEncoder.from_pretrained(model, trust_remote_code=trust_remote_code)
    with tempfile.TemporaryDirectory(prefix="spladekit-mine-") as scratch:
        built = Index.build(encoder, corpus, Path(scratch) / "index", show_progress=show_progress, distributed=False)
        result = built.search(queries, k=depth, encoder=encoder)
        out = {qid: [(d, float(s)) for d, s in row] for qid, row in zip(result.query_ids, result.hits)}
        del built, result  # close the memory maps before the folder goes
    return out


def run_candidates(
    path: str | Path, queries: dict[str, str], corpus: dict[str, str], depth: int
) -> dict[str, list[tuple[str, float]]]:
    """The top-``depth`` documents of each query in a TREC run (:func:`spladekit.data.trec.read_run`;
    order: score descending, ties by document id).

    Raises:
        DataFormatError: the run lacks a query, or names a document the corpus lacks (naming the run file).
    """
    from spladekit.data.trec import read_run, sorted_ranking

    run = read_run(path)
    missing = [q for q in queries if q not in run]
    if missing:
        raise DataFormatError(
            path, f"{len(missing)} of the {len(queries)} queries have no line in the run, e.g. {missing[0]!r}"
        )
    out = {}
    for qid in queries:
        ranked = sorted_ranking(run[qid])
        unknown = next((d for d, _ in ranked if d not in corpus), None)
        if unknown is not None:
            raise DataFormatError(path, f"document {unknown!r} of query {qid!r} is not in the corpus")
        out[qid] = ranked[:depth]
    return out
