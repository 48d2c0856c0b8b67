"""Seismic's JSONL input (``seismic.SeismicIndex.build(path)``)::

    {"id": "d1", "content": "text", "vector": {"token": 0.53, "##ing": 1.2}}

Weights are written as float32 values (no quantisation: Seismic stores float weights), so an
export → import round trip is exact. Repeated keys in ``vector`` are summed on import (rule in
:mod:`spladekit.index.formats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import scipy.sparse as sp

from spladekit.index.formats import collect_rows, token_vector_rows, write_token_vectors


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
    return write_token_vectors(
        path, matrix, doc_ids, vocabulary, contents, "content", lambda val: [float(v) for v in val]
    )


def read_seismic_jsonl(path: str | Path, vocabulary: Sequence[str]) -> tuple[sp.csr_matrix, list[str]]:
    """Read Seismic JSONL into ``([D, V] float32, doc ids)``.

    Raises:
        DataFormatError: a line that is not valid JSON, a missing field, a non-numeric weight, or an unknown token.
    """
    return collect_rows(seismic_rows(path, vocabulary), len(vocabulary))


def seismic_rows(path: str | Path, vocabulary: Sequence[str]):
    """The records of a Seismic JSONL file one at a time: yields ``(doc id, (column ids int64,
    weights float32))``, entries normalised (:func:`spladekit.index.formats.normalise_entries`).

    Raises:
        DataFormatError: as :func:`read_seismic_jsonl` (naming the file and line).
    """
    return token_vector_rows(path, vocabulary)
