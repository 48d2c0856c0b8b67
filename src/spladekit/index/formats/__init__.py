"""Exports and imports of sparse vectors to serving engines, and the rules they share.

Formats (one module each): :mod:`.anserini` (``JsonVectorCollection`` documents and pre-encoded
queries, integer impacts), :mod:`.seismic_jsonl` (Seismic's JSONL input), :mod:`.qdrant` (sparse
vectors), :mod:`.milvus` (``SPARSE_FLOAT_VECTOR`` rows), :mod:`.pgvector` (PostgreSQL
``sparsevec``), :mod:`.pisa` (PISA impact index), :mod:`.elastic` (Elasticsearch/OpenSearch bulk
NDJSON for ``rank_features`` / ``sparse_vector`` fields).

Shared rules (stated once here, tested in ``tests/index/formats/test_exports_imports.py``):

* **Repeated or unsorted indices.** Any input vector given as ``(index, value)`` pairs, token
  lists or JSON objects is normalised before use: entries are sorted by column id and entries
  naming the same column are **summed** (``s(q, d) = Σ_j q_j d_j`` is linear, so a vector with
  a repeated term scores the same as the merged one; this is also what Anserini's pre-encoded
  format means: a token repeated ``n`` times has weight ``n``). Zero and negative weights are
  dropped after merging (SPLADE weights are ``log(1 + ReLU(·)) ≥ 0``; an exported 0 carries no
  score). JSON term vectors with a key given twice are merged the same way, not "last key wins"
  (a key repeated anywhere else in a record, an id or a field, is an error). A weight
  that is not finite (NaN, ±Infinity) is an error naming the file and line, never dropped.
* **Export manifests.** Importing an export folder checks its ``export.json``: the vocabulary size must
  be the model's and the number of vectors read must be its ``count`` (a copy cut at a line boundary
  parses cleanly otherwise; :func:`spladekit.index.export.check_manifest`).
* **Engine results** (:func:`rank_hits`): hits with score ≤ 0 are dropped and the rest ordered
  by score descending, then by row (by document id when ``doc_ids`` are given), the rule of
  :func:`spladekit.index.exact.exact_search`. Which of several documents tied at the k-th score
  an engine returns is its own choice.
* **Quantisation** (integer impacts, :func:`quantise`): ``q_j = ⌊w_j · scale + 1/2⌋`` (round half
  up, computed in float64); terms with ``q_j = 0`` are dropped. Hence every term with
  ``w_j ≥ 1/scale`` is kept (``q_j ≥ 1``), only terms with ``w_j < 1/(2·scale)`` are dropped, and
  dequantised weights ``q_j / scale`` differ from ``w_j`` by at most ``1/(2·scale)``. The scale is
  recorded in the export's ``export.json`` and read back by the importers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.data.numbers import FLOAT32_MAX
from spladekit.errors import DataFormatError

MANIFEST = "export.json"


def weights_array(values: Iterable[float]) -> np.ndarray:
    """``values`` as a float64 array.

    Raises:
        ValueError: a value beyond float64's range (a JSON integer of 400 digits: Python's
            ``OverflowError``, which the readers would not catch, turned into the error they name).
    """
    try:
        return np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
    except OverflowError as exc:
        raise ValueError(f"a weight is beyond float64's range ({exc})") from None


def divide_by_scale(values: np.ndarray, scale: float) -> np.ndarray:
    """``values / scale`` (float64): integer impacts, or engine weights, back to weights (``values``
    itself when ``scale`` is 1).

    Raises:
        ValueError: the largest finite value divided by ``scale`` is beyond float32's range (it
            would be stored as inf), naming the value and the scale (a raw value past it, or not
            finite, is left to :func:`normalise_entries`, which names it alone).
    """
    if scale == 1 or not values.size:
        return values
    top = float(values.max())
    if math.isfinite(top) and top / scale > FLOAT32_MAX:
        raise ValueError(f"the weight {top:g} divided by the scale {scale:g} is beyond float32's range (check --scale)")
    with np.errstate(over="ignore"):  # only a value that is not finite can overflow here
        return values / scale


def normalise_entries(indices: Iterable[int], values: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``(index, value)`` pairs by index, sum repeated indices, drop weights ≤ 0.

    Returns:
        ``(indices int64 [n], values float32 [n])`` with strictly increasing indices.

    Raises:
        ValueError: a value is not finite (NaN would otherwise fail ``> 0`` and vanish unseen), or
            a summed weight exceeds float32's largest value (it would be stored as inf); the readers
            turn this into a DataFormatError naming the file and line.
    """
    idx = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices, dtype=np.int64)
    val = weights_array(values)
    if val.size and not np.isfinite(val).all():
        bad = val[~np.isfinite(val)][0]
        raise ValueError(f"a weight is not finite ({bad})")
    if idx.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    unique, inverse = np.unique(idx, return_inverse=True)
    summed = np.zeros(unique.size, dtype=np.float64)
    np.add.at(summed, inverse, val)
    keep = summed > 0
    too_large = summed > FLOAT32_MAX  # would become inf in float32 (and score inf)
    if too_large.any():
        raise ValueError(f"a weight is beyond float32's range ({summed[too_large][0]:g} > {FLOAT32_MAX:g})")
    return unique[keep], summed[keep].astype(np.float32)


def to_sparse_vectors(matrix: sp.spmatrix) -> list[dict]:
    """Each row as ``{"indices": [int, ...] (strictly increasing), "values": [float, ...]}``."""
    return [{"indices": idx.tolist(), "values": [float(v) for v in val]} for idx, val in iter_rows(matrix)]


def from_sparse_vector(indices: Sequence[int], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Normalise one ``{"indices", "values"}`` vector (sort, sum repeats, drop ≤ 0).

    Raises:
        ValueError: ``indices`` and ``values`` differ in length, an index is not a whole number
            (1016.5 would otherwise be read as 1016), or is negative, or a value is not a number
            (a string, a boolean, null).
    """
    if len(indices) != len(values):
        raise ValueError(f"{len(indices)} indices for {len(values)} values")
    bad = next((i for i in indices if isinstance(i, bool) or not isinstance(i, (int, np.integer))), None)
    if bad is not None:
        raise ValueError(f"sparse index {bad!r} is not an integer")
    if any(int(i) < 0 for i in indices):
        raise ValueError("negative sparse index")
    numeric = values.dtype.kind in "iuf" if isinstance(values, np.ndarray) else set(map(type, values)) <= {int, float}
    if not numeric:  # numpy would read "1.5" as 1.5, true as 1.0 and null as nan; the token formats refuse them too
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))]
        if bad:  # else numpy scalars: numbers
            raise ValueError(f"sparse value {bad[0]!r} is not a number")
    return normalise_entries(indices, values)


def rank_hits(
    hits: Iterable[tuple[int, float]], k: int, doc_ids: Sequence[str] | None = None
) -> list[tuple[int, float]]:
    """An engine's ``(row, score)`` hits in the exact-search order (module rule), at most ``k``."""
    if doc_ids is None:
        rank = lambda row: row  # noqa: E731
    else:
        order = {d: r for r, d in enumerate(sorted(doc_ids))}
        rank = lambda row: order[doc_ids[row]]  # noqa: E731
    return sorted(((int(r), float(s)) for r, s in hits if s > 0), key=lambda p: (-p[1], rank(p[0])))[:k]


def rows_to_csr(rows: Sequence[tuple[np.ndarray, np.ndarray]], vocab_size: int) -> sp.csr_matrix:
    """Stack normalised ``(indices, values)`` rows into a ``[len(rows), vocab_size]`` float32 CSR."""
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    for i, (idx, _) in enumerate(rows):
        indptr[i + 1] = indptr[i] + len(idx)
    indices = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64)
    data = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, np.float32)
    return sp.csr_matrix((data.astype(np.float32), indices, indptr), shape=(len(rows), vocab_size))


def collect_rows(
    rows: Iterable[tuple[str, tuple[np.ndarray, np.ndarray]]], vocab_size: int
) -> tuple[sp.csr_matrix, list[str]]:
    """Read a format's rows ``(doc id, (column ids, weights))`` (the ``*_rows`` generators of the
    format modules) whole: ``([N, vocab_size] float32 CSR, N ids)`` by :func:`rows_to_csr`.

    Raises:
        whatever the generator raises (:class:`~spladekit.errors.DataFormatError` naming the file and line).
    """
    ids, vectors = [], []
    for doc_id, row in rows:
        ids.append(doc_id)
        vectors.append(row)
    return rows_to_csr(vectors, vocab_size), ids


def iter_rows(matrix: sp.spmatrix) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """Yield each row of ``matrix`` as normalised ``(indices, values)`` (duplicates summed, sorted)."""
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    matrix.sum_duplicates()
    matrix.sort_indices()
    for i in range(matrix.shape[0]):
        lo, hi = matrix.indptr[i], matrix.indptr[i + 1]
        idx, val = matrix.indices[lo:hi].astype(np.int64), matrix.data[lo:hi]
        keep = val > 0
        yield idx[keep], val[keep]


def write_token_vectors(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str],
    contents: Sequence[str] | None,
    text_key: str,
    weights,
) -> int:
    """Write ``[D, V]`` rows as JSONL ``{"id", text_key, "vector": {token: weight}}`` (atomically).

    The writer half of :func:`read_token_vectors` (Anserini, Seismic). ``weights`` maps a row's
    normalised values to the numbers written (e.g. :func:`quantise`); entries mapped to 0 are dropped.

    Returns:
        The number of lines written (D).

    Raises:
        ValueError: ``matrix`` shape disagrees with ``doc_ids`` / ``vocabulary``.
    """
    import json

    from spladekit.io import atomic_write

    if matrix.shape[0] != len(doc_ids) or matrix.shape[1] != len(vocabulary):
        raise ValueError(f"matrix {matrix.shape} vs {len(doc_ids)} ids and {len(vocabulary)} tokens")
    with atomic_write(path) as out:
        for i, (idx, val) in enumerate(iter_rows(matrix)):
            vector = {vocabulary[j]: v for j, v in zip(idx, weights(val)) if v > 0}
            record = {"id": str(doc_ids[i]), text_key: contents[i] if contents is not None else "", "vector": vector}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return matrix.shape[0]


def check_scale(scale) -> float:
    """Return ``scale`` as a float.

    Raises:
        ValueError: ``scale`` is not a finite number > 0 (inf would write garbage impacts, 0 or
            NaN divide the imported weights into inf/NaN).
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"quantisation scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def quantise(values: np.ndarray, scale: float) -> np.ndarray:
    """Integer impacts ``⌊w · scale + 1/2⌋`` (int64, computed in float64); see the module docstring.

    Raises:
        ValueError: ``scale`` is not finite and > 0 (:func:`check_scale`).
    """
    check_scale(scale)
    return np.floor(np.asarray(values, dtype=np.float64) * float(scale) + 0.5).astype(np.int64)


def token_index(vocabulary: Sequence[str]) -> dict[str, int]:
    """``{token: column id}``; the first id wins when a token string repeats in the vocabulary."""
    index: dict[str, int] = {}
    for i, token in enumerate(vocabulary):
        index.setdefault(token, i)
    return index


def lookup_tokens(tokens: Iterable[str], index: dict[str, int], path: str | Path, line: int | None) -> list[int]:
    """Map token strings to column ids.

    Raises:
        DataFormatError: a token is not in the vocabulary (naming the file, line and token).
    """
    ids = []
    for token in tokens:
        if token not in index:
            raise DataFormatError(path, f"token {token!r} is not in the model's vocabulary", line=line, field="vector")
        ids.append(index[token])
    return ids


@dataclass
class ExportManifest:
    """``export.json``: what an export folder holds, written next to the exported files.

    Attributes:
        format: a name of :data:`spladekit.index.export.FORMATS` (``anserini``,
            ``anserini-queries``, ``seismic``, ``qdrant``, ``milvus``, ``pgvector``, ``elastic``).
        files: exported file names, relative to the folder.
        scale: quantisation scale (None: float weights are written as they are).
        model: model id the vectors came from; ``model_revision`` its revision.
        vocab_size: V.
        options: format-specific settings (key mode, field type, ...).
    """

    format: str
    files: list[str]
    scale: float | None = None
    model: str | None = None
    model_revision: str | None = None
    vocab_size: int | None = None
    count: int = 0
    options: dict = field(default_factory=dict)

    def save(self, folder: str | Path) -> None:
        """Write ``folder/export.json`` atomically."""
        from spladekit.io import write_json

        write_json(Path(folder) / MANIFEST, asdict(self))

    @classmethod
    def load(cls, folder: str | Path) -> ExportManifest:
        """Read ``folder/export.json``.

        Raises:
            DataFormatError: missing, not valid JSON, or not an object of manifest fields.
        """
        from spladekit.io import read_json

        path = Path(folder) / MANIFEST
        if not path.exists():
            raise DataFormatError(path, "missing: not a spladekit export folder")
        data = read_json(path)
        if not isinstance(data, dict):
            raise DataFormatError(path, "expected a JSON object")
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except TypeError as exc:
            raise DataFormatError(path, str(exc)) from exc


class JsonObject(dict):
    """A JSON object read with :func:`merge_pairs_hook`; ``repeated``: its keys given more than once."""

    __slots__ = ("repeated",)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def merge_pairs_hook(pairs: list[tuple[str, object]]) -> JsonObject:
    """``json.loads`` ``object_pairs_hook``: numbers of a repeated key are summed (the module rule for
    term vectors); a repeated key holding anything else keeps the value that is not a number (which
    the readers' type checks refuse). Every repeated key is listed in ``repeated``: where the object
    is not a term vector, :func:`iter_json_records` refuses it (an id given twice is not summed)."""
    out, repeated = JsonObject(), []
    for key, value in pairs:
        if key in out:
            repeated.append(key)
            if _is_number(value) and _is_number(out[key]):
                out[key] = out[key] + value
            elif _is_number(value):
                continue  # keep the earlier value, which is not a number
            else:
                out[key] = value
        else:
            out[key] = value
    out.repeated = tuple(repeated)
    return out


def _repeated_key(record: JsonObject, summed: Sequence[str], prefix: str = "") -> str | None:
    """The dotted name of the first repeated key of ``record`` or of an object inside it (arrays
    are not searched), leaving out the term vectors under the top-level keys ``summed``."""
    if getattr(record, "repeated", ()):
        return prefix + record.repeated[0]
    for key, value in record.items():
        if isinstance(value, dict) and not (prefix == "" and key in summed):
            found = _repeated_key(value, (), f"{prefix}{key}.")
            if found:
                return found
    return None


def iter_json_records(path: str | Path, summed: Sequence[str] = ()):
    """Yield ``(line number, JSON object)`` of a JSONL/NDJSON file, skipping blank lines.

    ``summed``: the top-level keys holding term vectors ``{term: weight}``, whose repeated keys are
    summed (:func:`merge_pairs_hook`, the module rule); a key repeated anywhere else is an error. The
    lines are read by :func:`spladekit.io.read_jsonl`, the one reader of JSON Lines, with that hook.

    Raises:
        DataFormatError: a line that is not valid JSON or not a JSON object, or a repeated key
            outside the term vectors, naming the file, line (and field).
    """
    from spladekit.io import read_jsonl

    for number, record in read_jsonl(path, object_pairs_hook=merge_pairs_hook):
        if not isinstance(record, dict):
            raise DataFormatError(path, f"expected a JSON object, got {type(record).__name__}", line=number)
        repeated = _repeated_key(record, summed)
        if repeated:
            raise DataFormatError(
                path,
                "given more than once (repeated keys are summed in term vectors only)",
                line=number,
                field=repeated,
            )
        yield number, record


def read_token_vectors(path: str | Path, vocabulary: Sequence[str], scale: float = 1.0):
    """Read JSONL records ``{"id": ..., "vector": {token: weight}}`` (Anserini, Seismic).

    Yields:
        ``(record, (column ids, weights / scale))`` per record, entries normalised
        (:func:`normalise_entries`).

    Raises:
        DataFormatError: a line that is not valid JSON, a missing ``id``/``vector``, an ``id`` that is neither a
            non-empty string nor an integer, a non-numeric weight, or a token outside the vocabulary
            (naming the file and line).
    """
    index = token_index(vocabulary)
    for number, record in iter_json_records(path, summed=("vector",)):
        for key in ("id", "vector"):
            if key not in record:
                raise DataFormatError(path, "missing", line=number, field=key)
        doc_id = record["id"]
        if (
            isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip()
        ):  # null → "None", true → "True"
            raise DataFormatError(
                path, f"expected a non-empty string or an integer, got {doc_id!r}", line=number, field="id"
            )
        vector = record["vector"]
        if not isinstance(vector, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector.values()
        ):
            raise DataFormatError(path, "expected an object {token: number}", line=number, field="vector")
        cols = lookup_tokens(vector.keys(), index, path, number)
        try:
            row = normalise_entries(cols, divide_by_scale(weights_array(vector.values()), scale))
        except ValueError as exc:
            raise DataFormatError(path, str(exc), line=number, field="vector") from exc
        yield record, row


def token_vector_rows(path: str | Path, vocabulary: Sequence[str], scale: float = 1.0):
    """:func:`read_token_vectors` as rows: yields ``(str(record["id"]), (column ids, weights / scale))``
    per record, one at a time (the streamed import of :mod:`spladekit.index.export`).

    Raises:
        DataFormatError: as :func:`read_token_vectors`.
    """
    for record, row in read_token_vectors(path, vocabulary, scale):
        yield str(record["id"]), row
