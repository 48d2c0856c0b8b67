"""Seismic's JSONL input (``seismic.SeismicIndex.build(path)``)::

    {"id": "d1", "content": "text", "vector": {"token": 0.53, "##ing": 1.2}}

Weights are written as float32 values (no quantisation: Seismic stores float weights), so an
export → import round trip is exact. Repeated keys in ``vector`` are summed on import (rule in
:mod:`spladekit.index.formats`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import scipy.sparse as sp

from spladekit.index.formats import iter_rows, read_token_vectors, rows_to_csr
from spladekit.io import atomic_write


def write_seismic_jsonl(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str],
    contents: Sequence[str] | None = None,
) -> int:
    """Write ``[D, V]`` vectors as Seismic JSONL (atomically); returns the number of lines.

    Raises:
        ValueError: lengths disagree.
    """
    if matrix.shape[0] != len(doc_ids) or matrix.shape[1] != len(vocabulary):
        raise ValueError(f"matrix {matrix.shape} vs {len(doc_ids)} ids and {len(vocabulary)} tokens")
    with atomic_write(path) as out:
        for i, (idx, val) in enumerate(iter_rows(matrix)):
            vector = {vocabulary[j]: float(v) for j, v in zip(idx, val)}
            record = {"id": str(doc_ids[i]), "content": contents[i] if contents is not None else "", "vector": vector}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return matrix.shape[0]


def read_seismic_jsonl(path: str | Path, vocabulary: Sequence[str]) -> tuple[sp.csr_matrix, list[str]]:
    """Read Seismic JSONL into ``([D, V] float32, doc ids)``.

    Raises:
        DataFormatError: invalid JSON, a missing field, a non-numeric weight, or an unknown token.
    """
    rows, ids = [], []
    for record, row in read_token_vectors(path, vocabulary):
        rows.append(row)
        ids.append(str(record["id"]))
    return rows_to_csr(rows, len(vocabulary)), ids
