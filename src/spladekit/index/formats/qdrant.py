"""Qdrant sparse vectors: ``{"indices": [...], "values": [...]}`` with sorted, unique indices.

Qdrant scores a sparse query against a sparse vector by the dot product over shared indices
(Qdrant docs, "Sparse vectors"), the same ``s(q, d) = Σ_j q_j d_j`` as exact search. Point ids
must be unsigned integers or UUIDs, so a point's id is the document's row number and the
document id is kept in the payload (``{"doc_id": ...}``).

Exported file (``points.jsonl``): one ``{"id": row, "payload": {"doc_id": ...}, "vector":
{NAME: {"indices": [...], "values": [...]}}}`` a line, ready for ``client.upsert``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import iter_rows, normalise_entries, rows_to_csr
from spladekit.io import atomic_write, iter_lines

DEFAULT_VECTOR_NAME = "splade"


def to_sparse_vectors(matrix: sp.spmatrix) -> list[dict]:
    """Each row as ``{"indices": [int, ...] (strictly increasing), "values": [float, ...]}``."""
    return [{"indices": idx.tolist(), "values": [float(v) for v in val]} for idx, val in iter_rows(matrix)]


def from_sparse_vector(indices: Sequence[int], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Normalise one Qdrant sparse vector (sort, sum repeats, drop ≤ 0); see :mod:`..formats`.

    Raises:
        ValueError: ``indices`` and ``values`` differ in length, or an index is negative.
    """
    if len(indices) != len(values):
        raise ValueError(f"{len(indices)} indices for {len(values)} values")
    if any(int(i) < 0 for i in indices):
        raise ValueError("negative sparse index")
    return normalise_entries(indices, values)


def write_points(path: str | Path, matrix: sp.spmatrix, doc_ids: Sequence[str], vector_name: str = DEFAULT_VECTOR_NAME) -> int:
    """Write the points of a collection as JSONL (atomically); returns the number of points."""
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    with atomic_write(path) as out:
        for row, (doc_id, vec) in enumerate(zip(doc_ids, to_sparse_vectors(matrix))):
            out.write(json.dumps({"id": row, "payload": {"doc_id": str(doc_id)}, "vector": {vector_name: vec}}) + "\n")
    return matrix.shape[0]


def read_points(path: str | Path, vocab_size: int, vector_name: str = DEFAULT_VECTOR_NAME) -> tuple[sp.csr_matrix, list[str]]:
    """Read ``points.jsonl`` back into ``([D, V] float32, doc ids)`` (rows in file order).

    Raises:
        DataFormatError: invalid JSON, missing fields, mismatched lengths, or an index ≥ V.
    """
    rows, ids = [], []
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            vec = record["vector"][vector_name]
            idx, val = from_sparse_vector(vec["indices"], vec["values"])
            doc_id = str(record["payload"]["doc_id"])
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, f"invalid JSON ({exc.msg})", line=number) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(path, f"bad point ({exc})", line=number, field="vector") from exc
        if idx.size and idx[-1] >= vocab_size:
            raise DataFormatError(path, f"index {idx[-1]} ≥ vocabulary size {vocab_size}", line=number, field="indices")
        rows.append((idx, val))
        ids.append(doc_id)
    return rows_to_csr(rows, vocab_size), ids


def upload(client, collection: str, matrix: sp.spmatrix, doc_ids: Sequence[str], vector_name: str = DEFAULT_VECTOR_NAME, batch: int = 256) -> None:
    """Create ``collection`` (sparse vector ``vector_name``, no dense vectors) and upsert the rows.

    Args:
        client: a ``qdrant_client.QdrantClient`` (server or local mode, e.g. ``QdrantClient(":memory:")``).

    Rows without any active term are stored too (they match no query).
    """
    from qdrant_client import models

    client.create_collection(collection, vectors_config={}, sparse_vectors_config={vector_name: models.SparseVectorParams()})
    vectors = to_sparse_vectors(matrix)
    for start in range(0, len(vectors), batch):
        points = [
            models.PointStruct(id=row, payload={"doc_id": str(doc_ids[row])}, vector={vector_name: models.SparseVector(**vectors[row])})
            for row in range(start, min(start + batch, len(vectors)))
        ]
        client.upsert(collection, points=points)


def search(
    client, collection: str, queries: sp.spmatrix, k: int = 10, vector_name: str = DEFAULT_VECTOR_NAME, doc_ids: Sequence[str] | None = None
) -> list[list[tuple[int, float]]]:
    """Query ``collection`` with each row of ``queries``; ``(row, score)`` lists like ``exact_search``.

    A query with no active term returns ``[]`` without calling Qdrant. Hits with score ≤ 0 are
    dropped and ties are ordered by row (by document id with ``doc_ids``), the exact-search rule.
    Note that which of several documents tied at the k-th score Qdrant returns is its own choice.
    """
    from qdrant_client import models

    order = {d: r for r, d in enumerate(sorted(doc_ids))} if doc_ids is not None else None
    rank = (lambda row: order[doc_ids[row]]) if order is not None else (lambda row: row)

    results = []
    for vec in to_sparse_vectors(queries):
        if not vec["indices"]:
            results.append([])
            continue
        hits = client.query_points(collection, query=models.SparseVector(**vec), using=vector_name, limit=k).points
        pairs = sorted(((int(h.id), float(h.score)) for h in hits if h.score > 0), key=lambda p: (-p[1], rank(p[0])))
        results.append(pairs)
    return results
