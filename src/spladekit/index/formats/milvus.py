"""Milvus ``SPARSE_FLOAT_VECTOR`` collections: rows file, upload and search.

Collection schema (:func:`create_collection`): ``id`` INT64 primary key (the document's row
number), ``doc_id`` VARCHAR, and the sparse field (default ``splade``) of type
``SPARSE_FLOAT_VECTOR`` with a ``SPARSE_INVERTED_INDEX`` and metric ``IP`` (inner product, the
dot product ``Σ_j q_j d_j``; Milvus docs, "Sparse Vector"). Nothing is pruned: the index is
built with ``drop_ratio_build = 0`` and searched with ``drop_ratio_search = 0`` (a ratio > 0
drops that fraction of the smallest query/document values, so scores would no longer be the
dot product). Milvus stores and sums float32 values.

Exported file (``rows.jsonl``): one ``{"id": row, "doc_id": ..., "splade": {"indices": [...],
"values": [...]}}`` a line, the JSON row form of Milvus's bulk import, and what
:func:`upload_rows` inserts. Checked against the real C++ engine (``milvus-lite`` 2.5.1, the
same engine as the server) in ``tests/index/formats/test_engines.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import collect_rows, from_sparse_vector, iter_json_records, rank_hits, to_sparse_vectors
from spladekit.io import atomic_write

DEFAULT_FIELD = "splade"
SEARCH_PARAMS = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0}}
MAX_VARCHAR = 65535  # Milvus's VARCHAR max_length limit


def iter_rows_records(matrix: sp.spmatrix, doc_ids: Sequence[str], field: str = DEFAULT_FIELD) -> Iterator[dict]:
    """The records of ``rows.jsonl``: ``{"id": row, "doc_id", field: {"indices", "values"}}``."""
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    for row, (doc_id, vec) in enumerate(zip(doc_ids, to_sparse_vectors(matrix))):
        yield {"id": row, "doc_id": str(doc_id), field: vec}


def write_rows(path: str | Path, matrix: sp.spmatrix, doc_ids: Sequence[str], field: str = DEFAULT_FIELD) -> int:
    """Write ``rows.jsonl`` (atomically); returns the number of rows."""
    with atomic_write(path) as out:
        for record in iter_rows_records(matrix, doc_ids, field):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return matrix.shape[0]


def read_rows(path: str | Path, vocab_size: int, field: str = DEFAULT_FIELD) -> tuple[sp.csr_matrix, list[str]]:
    """Read ``rows.jsonl`` back into ``([D, V] float32, doc ids)`` (file order).

    Raises:
        DataFormatError: a line that is not valid JSON, a missing field, mismatched lengths, or an index ≥ V.
    """
    return collect_rows(field_rows(path, vocab_size, field), vocab_size)


def field_rows(path: str | Path, vocab_size: int, field: str = DEFAULT_FIELD):
    """The rows of ``rows.jsonl`` one at a time: yields ``(doc id, (column ids int64, weights
    float32))`` in file order, entries normalised.

    Raises:
        DataFormatError: as :func:`read_rows` (naming the file and line).
    """
    for number, record in iter_json_records(path):
        try:
            idx, val = from_sparse_vector(record[field]["indices"], record[field]["values"])
            doc_id = str(record["doc_id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(path, f"bad row ({exc})", line=number, field=field) from exc
        if idx.size and idx[-1] >= vocab_size:
            raise DataFormatError(path, f"index {idx[-1]} ≥ vocabulary size {vocab_size}", line=number, field=field)
        yield doc_id, (idx, val)


def create_collection(client, collection: str, field: str = DEFAULT_FIELD, doc_id_max_length: int = 512) -> None:
    """Create ``collection`` (schema in the module docstring) with ``client`` (a ``pymilvus.MilvusClient``)."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=doc_id_max_length)
    schema.add_field(field, DataType.SPARSE_FLOAT_VECTOR)
    index = client.prepare_index_params()
    index.add_index(
        field_name=field, index_type="SPARSE_INVERTED_INDEX", metric_type="IP", params={"drop_ratio_build": 0.0}
    )
    client.create_collection(collection, schema=schema, index_params=index)


def upload_rows(client, collection: str, records: Iterable[dict], field: str = DEFAULT_FIELD, batch: int = 1000) -> int:
    """Create ``collection`` and insert ``rows.jsonl`` records (:func:`iter_rows_records`, or
    ``(r for _, r in iter_json_records("rows.jsonl"))``); loads the collection for search.

    Returns:
        The number of rows inserted.

    Raises:
        ValueError: a document id longer than Milvus's VARCHAR limit (65,535 bytes), naming it.
    """
    records = list(records)
    longest = max((len(r["doc_id"].encode("utf-8")) for r in records), default=1)
    if longest > MAX_VARCHAR:
        bad = next(r["doc_id"] for r in records if len(r["doc_id"].encode("utf-8")) > MAX_VARCHAR)
        raise ValueError(f"document id {bad[:40]!r}… is {longest} bytes, over Milvus's VARCHAR limit {MAX_VARCHAR}")
    create_collection(client, collection, field, doc_id_max_length=max(1, longest))
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        client.insert(
            collection,
            [
                {"id": r["id"], "doc_id": r["doc_id"], field: dict(zip(r[field]["indices"], r[field]["values"]))}
                for r in chunk
            ],
        )
    client.load_collection(collection)
    return len(records)


def upload(
    client, collection: str, matrix: sp.spmatrix, doc_ids: Sequence[str], field: str = DEFAULT_FIELD, batch: int = 1000
) -> int:
    """Create ``collection`` and insert the ``[D, V]`` rows (row number as ``id``); see :func:`upload_rows`."""
    return upload_rows(client, collection, iter_rows_records(matrix, doc_ids, field), field, batch)


def search(
    client,
    collection: str,
    queries: sp.spmatrix,
    k: int = 10,
    field: str = DEFAULT_FIELD,
    doc_ids: Sequence[str] | None = None,
) -> list[list[tuple[int, float]]]:
    """Search with each row of ``queries`` (``IP``, ``drop_ratio_search = 0``); ``(row, score)``
    lists ordered like ``exact_search`` (:func:`spladekit.index.formats.rank_hits`).

    A query with no active term returns ``[]`` without calling Milvus.
    """
    vectors = to_sparse_vectors(queries)
    results: list[list[tuple[int, float]]] = [[] for _ in vectors]
    todo = [i for i, v in enumerate(vectors) if v["indices"]]
    for start in range(0, len(todo), 64):
        part = todo[start : start + 64]
        data = [dict(zip(vectors[i]["indices"], vectors[i]["values"])) for i in part]
        hits = client.search(collection, data=data, anns_field=field, limit=k, search_params=SEARCH_PARAMS)
        for i, found in zip(part, hits):
            results[i] = rank_hits(((h["id"], h["distance"]) for h in found), k, doc_ids)
    return results
