"""Qdrant sparse vectors: ``{"indices": [...], "values": [...]}`` with sorted, unique indices.

Qdrant scores a sparse query against a sparse vector by the dot product over shared indices
(Qdrant docs, "Sparse vectors"), the same ``s(q, d) = Σ_j q_j d_j`` as exact search. Point ids
must be unsigned integers or UUIDs, so a point's id is the document's row number and the
document id is kept in the payload (``{"doc_id": ...}``).

Two engines: a Qdrant server or local mode through ``qdrant_client`` (:func:`upload`,
:func:`search`), and Qdrant Edge, the Rust engine in process (``qdrant-edge-py``;
:func:`create_edge_shard`, :func:`upload_edge`, :func:`search_edge`), which
``tests/index/formats/test_engines.py`` scores against exact search.

Exported files: ``points.jsonl``, one ``{"id": row, "payload": {"doc_id": ...}, "vector":
{NAME: {"indices": [...], "values": [...]}}}`` a line, ready for ``client.upsert``; and
``collection.json``, the body of ``PUT /collections/{name}`` (:func:`collection_config`).

IDF modifier (``spladekit export --format qdrant --idf``): the collection's sparse vector gets
``"modifier": "idf"``, and Qdrant multiplies each query weight by the IDF of its term over the
collection at query time (Qdrant docs, "Indexing" › "IDF Modifier"; ``fancy_idf`` in Qdrant's
``VectorQueryContext``)::

    idf(t) = ln((N − n(t) + 0.5) / (n(t) + 0.5) + 1)
    score(q, d) = Σ_t idf(t) · q_t · d_t

with ``N`` the number of indexed vectors and ``n(t)`` the number holding term ``t``. The points
then carry the document weights quantised (integer impacts ``⌊w·scale + ½⌋``,
:func:`spladekit.index.formats.quantise`, ``--scale``, recorded in ``export.json``), with no IDF
folded in: Qdrant adds it. An import of such an export divides by the scale again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import (
    collect_rows,
    divide_by_scale,
    from_sparse_vector,
    iter_json_records,
    normalise_entries,
    quantise,
    rank_hits,
    to_sparse_vectors,
)
from spladekit.io import atomic_write

DEFAULT_VECTOR_NAME = "splade"
COLLECTION_FILE = "collection.json"
IDF = "idf"


def collection_config(vector_name: str = DEFAULT_VECTOR_NAME, idf: bool = False) -> dict:
    """The body of Qdrant's ``PUT /collections/{name}`` for the exported points: one sparse vector
    ``vector_name``, no dense vectors, ``"modifier": "idf"`` when ``idf`` (module docstring)."""
    return {"sparse_vectors": {vector_name: {"modifier": IDF} if idf else {}}}


def write_points(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vector_name: str = DEFAULT_VECTOR_NAME,
    scale: float | None = None,
) -> int:
    """Write the points of a collection as JSONL (atomically); returns the number of points.

    Args:
        scale: None: float weights as they are; a number: integer impacts ``⌊w·scale + ½⌋``
            (:func:`~spladekit.index.formats.quantise`; impacts of 0 left out), for the IDF modifier.
    """
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    with atomic_write(path) as out:
        for record in iter_points(matrix, doc_ids, vector_name, scale):
            out.write(json.dumps(record) + "\n")
    return matrix.shape[0]


def read_points(
    path: str | Path, vocab_size: int, vector_name: str = DEFAULT_VECTOR_NAME, scale: float = 1.0
) -> tuple[sp.csr_matrix, list[str]]:
    """Read ``points.jsonl`` back into ``([D, V] float32, doc ids)`` (rows in file order), values
    divided by ``scale`` (the ``export.json`` scale of an IDF-modifier export; 1: floats as written).

    Raises:
        DataFormatError: a line that is not valid JSON, missing fields, mismatched lengths, or an index ≥ V.
    """
    return collect_rows(point_rows(path, vocab_size, vector_name, scale), vocab_size)


def point_rows(path: str | Path, vocab_size: int, vector_name: str = DEFAULT_VECTOR_NAME, scale: float = 1.0):
    """The points of ``points.jsonl`` one at a time: yields ``(doc id, (column ids int64, weights
    float32))`` in file order, entries normalised, values divided by ``scale``.

    Raises:
        DataFormatError: as :func:`read_points` (naming the file and line).
    """
    for number, record in iter_json_records(path):
        try:
            vec = record["vector"][vector_name]
            idx, val = from_sparse_vector(vec["indices"], vec["values"])
            if scale != 1:
                idx, val = normalise_entries(idx, divide_by_scale(val.astype(np.float64), scale))
            doc_id = str(record["payload"]["doc_id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(path, f"bad point ({exc})", line=number, field="vector") from exc
        if idx.size and idx[-1] >= vocab_size:
            raise DataFormatError(path, f"index {idx[-1]} ≥ vocabulary size {vocab_size}", line=number, field="indices")
        yield doc_id, (idx, val)


def upload(
    client,
    collection: str,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vector_name: str = DEFAULT_VECTOR_NAME,
    batch: int = 256,
    idf: bool = False,
) -> None:
    """Create ``collection`` (sparse vector ``vector_name``, no dense vectors; the IDF modifier when
    ``idf``) and upsert the rows as they are.

    Args:
        client: a ``qdrant_client.QdrantClient`` (server or local mode, e.g. ``QdrantClient(":memory:")``).

    Rows without any active term are stored too (they match no query).
    """
    from qdrant_client import models

    params = models.SparseVectorParams(modifier=models.Modifier.IDF) if idf else models.SparseVectorParams()
    client.create_collection(collection, vectors_config={}, sparse_vectors_config={vector_name: params})
    vectors = to_sparse_vectors(matrix)
    for start in range(0, len(vectors), batch):
        points = [
            models.PointStruct(
                id=row, payload={"doc_id": str(doc_ids[row])}, vector={vector_name: models.SparseVector(**vectors[row])}
            )
            for row in range(start, min(start + batch, len(vectors)))
        ]
        client.upsert(collection, points=points)


def search(
    client,
    collection: str,
    queries: sp.spmatrix,
    k: int = 10,
    vector_name: str = DEFAULT_VECTOR_NAME,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """Query ``collection`` with each row of ``queries``; ``(row, score)`` lists like ``exact_search``.

    A query with no active term returns ``[]`` without calling Qdrant. Hits are ordered by
    :func:`spladekit.index.formats.rank_hits` (score > 0, ties by row, by document id with ``doc_ids``).
    """
    from qdrant_client import models

    results = []
    for vec in to_sparse_vectors(queries):
        if not vec["indices"]:
            results.append([])
            continue
        hits = client.query_points(collection, query=models.SparseVector(**vec), using=vector_name, limit=k).points
        results.append(rank_hits(((h.id, h.score) for h in hits), k, doc_ids))
    return results


# ---------------------------------------------------------------- Qdrant Edge (the engine in process)
def create_edge_shard(path: str | Path, vector_name: str = DEFAULT_VECTOR_NAME, idf: bool = False):
    """A new ``qdrant_edge.EdgeShard`` in the empty folder ``path`` with one sparse vector ``vector_name``
    (with the IDF modifier when ``idf``, as :func:`collection_config` says).

    Qdrant Edge (``qdrant-edge-py``) is Qdrant's Rust storage and search engine run inside the
    Python process, with the server's sparse-vector scoring (dot product over shared indices).
    """
    import qdrant_edge as qe

    params = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) if idf else qe.EdgeSparseVectorParams()
    config = qe.EdgeConfig(sparse_vectors={vector_name: params})
    return qe.EdgeShard.create(str(path), config)


def upload_edge(shard, points: Iterable[dict], vector_name: str = DEFAULT_VECTOR_NAME, batch: int = 256) -> int:
    """Upsert point records into an EdgeShard: :func:`iter_points`, or the exported file's
    ``(record for _, record in iter_json_records("points.jsonl"))``.

    Returns:
        The number of points upserted.
    """
    import qdrant_edge as qe

    count, buffer = 0, []

    def flush():
        shard.update(qe.UpdateOperation.upsert_points(buffer))
        buffer.clear()

    for record in points:
        vec = record["vector"][vector_name]
        buffer.append(
            qe.Point(
                int(record["id"]),
                {vector_name: qe.SparseVector(list(vec["indices"]), list(vec["values"]))},
                record.get("payload"),
            )
        )
        count += 1
        if len(buffer) >= batch:
            flush()
    if buffer:
        flush()
    shard.flush()
    return count


def iter_points(
    matrix: sp.spmatrix, doc_ids: Sequence[str], vector_name: str = DEFAULT_VECTOR_NAME, scale: float | None = None
) -> Iterator[dict]:
    """The records of :func:`write_points` (row id, ``doc_id`` payload, sparse vector), in memory;
    integer impacts at ``scale`` when it is given."""
    vectors = to_sparse_vectors(matrix) if scale is None else _impact_vectors(matrix, scale)
    for row, (doc_id, vec) in enumerate(zip(doc_ids, vectors)):
        yield {"id": row, "payload": {"doc_id": str(doc_id)}, "vector": {vector_name: vec}}


def _impact_vectors(matrix: sp.spmatrix, scale: float) -> Iterator[dict]:
    """Each row as ``{"indices": [...], "values": [int, ...]}``: ``⌊w·scale + ½⌋``, impacts of 0 left out."""
    for vec in to_sparse_vectors(matrix):
        impacts = quantise(np.asarray(vec["values"], dtype=np.float32), scale)
        kept = impacts > 0
        yield {"indices": np.asarray(vec["indices"], np.int64)[kept].tolist(), "values": impacts[kept].tolist()}


def search_edge(
    shard,
    queries: sp.spmatrix,
    k: int = 10,
    vector_name: str = DEFAULT_VECTOR_NAME,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """:func:`search` on a ``qdrant_edge.EdgeShard`` (``Query.Nearest`` with a sparse vector)."""
    import qdrant_edge as qe

    results = []
    for vec in to_sparse_vectors(queries):
        if not vec["indices"]:
            results.append([])
            continue
        request = qe.QueryRequest(
            limit=k, query=qe.Query.Nearest(qe.SparseVector(vec["indices"], vec["values"]), using=vector_name)
        )
        results.append(rank_hits(((int(p.id), p.score) for p in shard.query(request)), k, doc_ids))
    return results
