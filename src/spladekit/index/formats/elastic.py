"""Elasticsearch / OpenSearch bulk NDJSON for ``rank_features`` or ``sparse_vector`` fields.

Field names may not contain dots in either engine (a dot is an object path; ``rank_features``
rejects dotted feature names), and WordPiece/BPE vocabularies contain tokens such as ``.`` or
``a.m.``. Two documented key schemes keep every term distinct and reversible:

* ``keys="token"`` (default): the token with ``%`` written ``%25`` and ``.`` written ``%2E``
  (percent-encoding of just those two characters; :func:`escape_key` / :func:`unescape_key`).
  Query terms must be escaped the same way (the query builders here do it).
* ``keys="id"``: the decimal vocabulary id (``"2023"``), which needs no escaping.

Exact dot product (``s(q, d) = Σ_j q_j d_j``): a ``bool`` query whose ``should`` clauses are one
``rank_feature`` query per query term with the **linear** function and ``boost = q_j``; the
linear function scores the stored feature value ``d_j`` and ``should`` clauses add up (Elastic
docs, "Rank feature query": linear function). For ``sparse_vector`` fields (Elasticsearch
≥ 8.15) the ``sparse_vector`` query with ``query_vector`` scores the same sum, but only with
token pruning off: indices created by Elasticsearch ≥ 8.19 / 9.1 prune by default (Elastic docs,
"Sparse vector field type", Token pruning: ``tokens_freq_ratio_threshold`` 5,
``tokens_weight_threshold`` 0.4), so :func:`mapping` sets ``index_options.prune: false`` and
:func:`query_body` ``prune: false``.

**Precision.** Both field types index each weight as a Lucene ``FeatureField``, whose term
frequency keeps the top 16 bits of the float32 (``Float.floatToIntBits(w) >>> 15``: sign,
exponent and 8 mantissa bits, i.e. 9 significant bits), by **truncation**
(``FeatureField.encodeFeatureValue``, Lucene 9.9.1). So the engine's score is the dot product
with every ``d_j`` replaced by :func:`stored_value` ``(d_j) ≤ d_j``, relative error
``< 2⁻⁸`` per term (0.1 is stored as 0.0998535). This scoring rule is checked against Lucene
9.9.1 itself (the ``FeatureField`` and ``BooleanQuery`` classes of Anserini's jar) in
``tests/index/formats/test_engines.py``; the HTTP layer of Elasticsearch/OpenSearch (mapping, bulk, query
parsing) is not, since neither server can be installed here. See ``docs/serving.md``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import collect_rows, iter_json_records, iter_rows, normalise_entries, token_index
from spladekit.io import atomic_write

FIELD_TYPES = ("rank_features", "sparse_vector")
KEY_MODES = ("token", "id")


def escape_key(token: str) -> str:
    """``%`` → ``%25`` then ``.`` → ``%2E``: a dot-free field key that :func:`unescape_key` inverts."""
    return token.replace("%", "%25").replace(".", "%2E")


def unescape_key(key: str) -> str:
    """Invert :func:`escape_key` (``%2E`` → ``.``, ``%25`` → ``%``, left to right)."""
    out, i = [], 0
    while i < len(key):
        if key.startswith("%2E", i):
            out.append(".")
            i += 3
        elif key.startswith("%25", i):
            out.append("%")
            i += 3
        else:
            out.append(key[i])
            i += 1
    return "".join(out)


def check_keys(keys: str) -> str:
    """``keys`` if it is a key mode (:data:`KEY_MODES`), else ValueError."""
    if keys not in KEY_MODES:
        raise ValueError(f"keys must be one of {KEY_MODES}, got {keys!r}")
    return keys


def _keys(vocabulary: Sequence[str] | None, keys: str):
    check_keys(keys)
    if keys == "id":
        return lambda j: str(int(j))
    if vocabulary is None:
        raise ValueError("keys='token' needs the vocabulary")
    return lambda j: escape_key(vocabulary[j])


def mapping(field: str = "splade", field_type: str = "rank_features") -> dict:
    """Index mapping body for ``PUT /INDEX``: ``doc_id`` keyword plus the sparse field.

    Raises:
        ValueError: unknown ``field_type``.
    """
    if field_type not in FIELD_TYPES:
        raise ValueError(f"field_type must be one of {FIELD_TYPES}, got {field_type!r}")
    spec: dict = {"type": field_type}
    if field_type == "sparse_vector":
        spec["index_options"] = {"prune": False}  # ES ≥ 8.19 / 9.1 prune tokens by default
    return {"mappings": {"properties": {"doc_id": {"type": "keyword"}, field: spec}}}


def stored_value(values) -> np.ndarray:
    """The weights Lucene's ``FeatureField`` stores for ``values`` (float32, 9 significant bits).

    ``encodeFeatureValue(w) = floatToIntBits(w) >>> 15`` and ``decodeFeatureValue(tf) =
    intBitsToFloat(tf << 15)``: the low 15 mantissa bits of the float32 are cleared (truncation
    toward 0), so ``0 ≤ w − stored(w) < 2⁻⁸ · w`` for positive ``w``.
    """
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    return ((bits >> np.uint32(15)) << np.uint32(15)).view(np.float32)


def vector_object(idx: np.ndarray, val: np.ndarray, vocabulary: Sequence[str] | None, keys: str = "token") -> dict:
    """One normalised row as ``{key: weight}`` (float weights, keys escaped per ``keys``)."""
    key = _keys(vocabulary, keys)
    return {key(j): float(v) for j, v in zip(idx, val)}


def write_bulk(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str] | None,
    index_name: str = "splade",
    field: str = "splade",
    keys: str = "token",
) -> int:
    """Write a ``_bulk`` NDJSON file (an ``index`` action line, then the source line, per document).

    Documents with no active term are written with an empty object (the engine indexes no
    feature for them). Returns the number of documents.

    Raises:
        ValueError: lengths disagree or an unknown key mode.
    """
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    with atomic_write(path) as out:
        for doc_id, (idx, val) in zip(doc_ids, iter_rows(matrix)):
            out.write(json.dumps({"index": {"_index": index_name, "_id": str(doc_id)}}, ensure_ascii=False) + "\n")
            source = {"doc_id": str(doc_id), field: vector_object(idx, val, vocabulary, keys)}
            out.write(json.dumps(source, ensure_ascii=False) + "\n")
    return matrix.shape[0]


def read_bulk(
    path: str | Path, vocabulary: Sequence[str], field: str = "splade", keys: str = "token"
) -> tuple[sp.csr_matrix, list[str]]:
    """Read a bulk NDJSON file written by :func:`write_bulk` back into ``([D, V], doc ids)``.

    Raises:
        DataFormatError: a line that is not valid JSON, a source line without ``field``, or an unknown key.
    """
    return collect_rows(bulk_rows(path, vocabulary, field, keys), len(vocabulary))


def bulk_rows(path: str | Path, vocabulary: Sequence[str], field: str = "splade", keys: str = "token"):
    """The documents of a bulk NDJSON file one at a time (an action line, then its source line):
    yields ``(doc id, (column ids int64, weights float32))``, entries normalised.

    Raises:
        DataFormatError: as :func:`read_bulk` (naming the file and line).
    """
    index = token_index(vocabulary)
    action = None
    for number, record in iter_json_records(path, summed=(field,)):
        if action is None:
            if "index" not in record:
                raise DataFormatError(path, "expected an 'index' action line", line=number)
            action, action_line = record["index"], number
            continue
        if field not in record or not isinstance(record[field], dict):
            raise DataFormatError(path, "missing sparse field", line=number, field=field)
        cols = []
        for key in record[field]:
            if keys == "id":
                if not key.isdigit() or int(key) >= len(vocabulary):
                    raise DataFormatError(path, f"key {key!r} is not a vocabulary id", line=number, field=field)
                cols.append(int(key))
            else:
                token = unescape_key(key)
                if token not in index:
                    raise DataFormatError(path, f"token {token!r} is not in the vocabulary", line=number, field=field)
                cols.append(index[token])
        weights = list(record[field].values())
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
            raise DataFormatError(path, "expected an object {key: number}", line=number, field=field)
        try:
            row = normalise_entries(cols, weights)
        except ValueError as exc:
            raise DataFormatError(path, str(exc), line=number, field=field) from exc
        doc_id = str(record.get("doc_id", action.get("_id")))
        action = None
        yield doc_id, row
    if action is not None:  # the file ends after an action line: its document was cut off
        raise DataFormatError(
            path, "the last action line has no document line after it (the file ends early)", line=action_line
        )


def query_body(
    query: sp.spmatrix,
    vocabulary: Sequence[str] | None,
    field: str = "splade",
    field_type: str = "rank_features",
    keys: str = "token",
    k: int = 1000,
) -> dict:
    """Search body scoring the exact dot product of a 1-row query with each document's ``field``.

    ``rank_features``: ``bool.should`` of ``rank_feature`` queries with ``linear`` and
    ``boost = q_j`` (score = ``Σ_j q_j · stored_value(d_j)``). ``sparse_vector``: the
    ``sparse_vector`` query with ``query_vector = {key: q_j}`` and ``prune: false``. A query with no active term gives a body that matches no
    document (``match_none``), so it returns an empty list, as exact search does.

    Raises:
        ValueError: the query is not one row, unknown ``field_type`` or key mode.
    """
    if query.shape[0] != 1:
        raise ValueError(f"expected one query row, got {query.shape[0]}")
    if field_type not in FIELD_TYPES:
        raise ValueError(f"field_type must be one of {FIELD_TYPES}, got {field_type!r}")
    idx, val = next(iter(iter_rows(query)))
    if idx.size == 0:
        return {"size": k, "query": {"match_none": {}}}
    terms = vector_object(idx, val, vocabulary, keys)
    if field_type == "sparse_vector":
        return {"size": k, "query": {"sparse_vector": {"field": field, "query_vector": terms, "prune": False}}}
    should = [
        {"rank_feature": {"field": f"{field}.{key}", "linear": {}, "boost": weight}} for key, weight in terms.items()
    ]
    return {"size": k, "query": {"bool": {"should": should}}}
