"""Seismic's JSONL input (``seismic.SeismicIndex.build(path)``)::

    {"id": "d1", "content": "text", "vector": {"token": 0.53, "##ing": 1.2}}

Weights are written as float32 values (no quantisation: Seismic stores float weights), so an
export → import round trip is exact. Repeated keys in ``vector`` are summed on import (rule in
:mod:`spladekit.index.formats`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import scipy.sparse as sp

from spladekit.index.formats import read_token_vectors, rows_to_csr, write_token_vectors


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
    return write_token_vectors(path, matrix, doc_ids, vocabulary, contents, "content", lambda val: [float(v) for v in val])


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
