"""Anserini impact formats: ``JsonVectorCollection`` documents and pre-encoded queries.

Documents (one JSON object a line, Anserini's ``JsonVectorCollection``)::

    {"id": "d1", "contents": "text", "vector": {"token": 31, "##ing": 5}}

Queries (Anserini's pre-encoded query TSV; ``-impact -pretokenized`` search)::

    qid<TAB>tok tok tok ...        each token repeated by its integer weight

Weights are integers ``⌊w · scale + 1/2⌋`` (:func:`spladekit.index.formats.quantise`); Anserini
indexes them as term frequencies and scores ``Σ_j q_j · d_j`` with its impact similarity
(Mackenzie et al., 2021, "Wacky Weights in Learned Sparse Representations"). Pre-encoded query
files write tokens in ascending vocabulary id, each token's repeats together, which is the order
of the published SPLADE-v3 files, so an imported file re-exports byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.data.tsv import iter_tsv
from spladekit.index.formats import (
    iter_rows,
    lookup_tokens,
    normalise_entries,
    quantise,
    read_token_vectors,
    rows_to_csr,
    token_index,
    write_token_vectors,
)
from spladekit.io import atomic_write


def write_json_vector_collection(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str],
    scale: float = 100.0,
    contents: Sequence[str] | None = None,
) -> int:
    """Write ``[D, V]`` vectors as an Anserini ``JsonVectorCollection`` JSONL file (atomically).

    Args:
        path: output ``.jsonl`` file.
        matrix: ``[D, V]`` float weights.
        doc_ids: D ids.
        vocabulary: V token strings (keys of ``vector``).
        scale: quantisation scale (integer impact = ``⌊w · scale + 1/2⌋``; zeros dropped).
        contents: optional D texts for ``contents`` (default ``""``).

    Returns:
        The number of documents written.

    Raises:
        ValueError: lengths disagree.
    """
    return write_token_vectors(
        path, matrix, doc_ids, vocabulary, contents, "contents", lambda val: [int(n) for n in quantise(val, scale)]
    )


def read_json_vector_collection(
    path: str | Path, vocabulary: Sequence[str], scale: float = 100.0
) -> tuple[sp.csr_matrix, list[str], list[str]]:
    """Read a ``JsonVectorCollection`` file back into ``[D, V]`` weights ``impact / scale``.

    Repeated keys in a ``vector`` object are summed (module rule in :mod:`spladekit.index.formats`).

    Returns:
        ``(matrix [D, V] float32, doc ids, contents)``.

    Raises:
        DataFormatError: invalid JSON, a missing field, a non-numeric weight, or a token outside
            the vocabulary (naming the file and line).
    """
    rows, ids, texts = [], [], []
    for record, row in read_token_vectors(path, vocabulary, scale):
        rows.append(row)
        ids.append(str(record["id"]))
        texts.append(str(record.get("contents", "")))
    return rows_to_csr(rows, len(vocabulary)), ids, texts


def write_preencoded_queries(
    path: str | Path, matrix: sp.spmatrix, query_ids: Sequence[str], vocabulary: Sequence[str], scale: float = 100.0
) -> int:
    """Write ``[Q, V]`` query vectors in Anserini's pre-encoded format (atomically).

    Each line is ``qid<TAB>`` then the tokens in ascending vocabulary id, each repeated
    ``⌊w · scale + 1/2⌋`` times, separated by single spaces. A query whose every weight rounds to
    0 is written as ``qid<TAB>`` (an empty query; it matches nothing).

    Raises:
        ValueError: lengths disagree, or a token contains white space (it could not be read back).
    """
    if matrix.shape[0] != len(query_ids) or matrix.shape[1] != len(vocabulary):
        raise ValueError(f"matrix {matrix.shape} vs {len(query_ids)} ids and {len(vocabulary)} tokens")
    with atomic_write(path) as out:
        for qid, (idx, val) in zip(query_ids, iter_rows(matrix)):
            words = []
            for j, n in zip(idx, quantise(val, scale)):
                token = vocabulary[j]
                if any(c.isspace() for c in token) or not token:
                    raise ValueError(f"token {token!r} (id {j}) cannot be written in a space-separated query")
                words.extend([token] * int(n))
            out.write(f"{qid}\t{' '.join(words)}\n")
    return matrix.shape[0]


def read_preencoded_queries(
    path: str | Path, vocabulary: Sequence[str], scale: float = 100.0
) -> tuple[sp.csr_matrix, list[str]]:
    """Read an Anserini pre-encoded query file: weight of a token = its count / ``scale``.

    Tokens may come in any order; repeats anywhere on the line add up.

    Returns:
        ``(matrix [Q, V] float32, query ids)``.

    Raises:
        DataFormatError: a line without a tab, an empty or repeated query id
            (:func:`spladekit.data.tsv.iter_tsv`), or a token outside the vocabulary (naming the
            file and line).
    """
    index = token_index(vocabulary)
    rows, ids = [], []
    for number, qid, text in iter_tsv(path):
        cols = lookup_tokens(text.split(), index, path, number)
        rows.append(normalise_entries(cols, np.full(len(cols), 1.0 / scale)))
        ids.append(qid)
    return rows_to_csr(rows, len(vocabulary)), ids
