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

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import iter_rows, lookup_tokens, merge_pairs_hook, normalise_entries, rows_to_csr, token_index
from spladekit.io import atomic_write, iter_lines


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
    index = token_index(vocabulary)
    rows, ids = [], []
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=merge_pairs_hook)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, f"invalid JSON ({exc.msg})", line=number) from exc
        for key in ("id", "vector"):
            if key not in record:
                raise DataFormatError(path, "missing", line=number, field=key)
        vector = record["vector"]
        if not isinstance(vector, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector.values()):
            raise DataFormatError(path, "expected an object {token: number}", line=number, field="vector")
        cols = lookup_tokens(vector.keys(), index, path, number)
        rows.append(normalise_entries(cols, np.asarray(list(vector.values()), dtype=np.float64)))
        ids.append(str(record["id"]))
    return rows_to_csr(rows, len(vocabulary)), ids
