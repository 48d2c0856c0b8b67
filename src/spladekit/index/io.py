"""The index folder: what ``spladekit encode`` / ``spladekit index`` write and ``search`` reads.

Layout::

    INDEX/
      vectors.npz      scipy.sparse CSR [D, V] float32 (scipy.sparse.save_npz)
      doc_ids.json     list of D document ids, row order
      index.json       model id and revision, max lengths, pruning, vocabulary size, content hash, ...
      vocab.json       list of V token strings, column order (optional: folders written before it
                       existed load with ``vocabulary = None``)

Everything is written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError, OutputPathError
from spladekit.io import default_mode, ensure_folder, read_json, write_json


def content_hash(matrix: sp.csr_matrix, doc_ids: Sequence[str]) -> str:
    """SHA-256 over the CSR arrays and the document ids: equal iff the same vectors for the same ids."""
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    digest = hashlib.sha256()
    for array in (matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64), matrix.data.astype(np.float32)):
        digest.update(array.tobytes())
    digest.update(json.dumps(list(doc_ids)).encode())
    digest.update(str(matrix.shape).encode())
    return digest.hexdigest()


def save_index(
    folder: str | Path,
    matrix: sp.csr_matrix,
    doc_ids: Sequence[str],
    metadata: dict,
    vocabulary: Sequence[str] | None = None,
) -> Path:
    """Write an index folder atomically (temporary sibling folder, then rename).

    Args:
        folder: the index folder (replaced when it exists).
        matrix: ``[D, V]`` document vectors.
        doc_ids: D document ids, row order.
        metadata: written to ``index.json`` (counts and the content hash are added).
            The matrix is stored canonically: sorted columns, repeated columns summed, explicit
            zeros removed (rule of :mod:`spladekit.index.formats`).
        vocabulary: V token strings (column order), written to ``vocab.json`` when given.

    Raises:
        ValueError: ``matrix`` rows and ``doc_ids`` differ in number, ids repeat, or the
            vocabulary length is not V or holds a non-string.
        OutputPathError: ``folder`` is an existing file (left untouched) or cannot be created.
    """
    if vocabulary is not None and len(vocabulary) != matrix.shape[1]:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens for {matrix.shape[1]} columns")
    if vocabulary is not None and not all(isinstance(t, str) for t in vocabulary):
        bad = next(j for j, t in enumerate(vocabulary) if not isinstance(t, str))
        raise ValueError(f"vocabulary entry {bad} is {vocabulary[bad]!r}, not a token string (vocab.json could not be read back)")
    folder = Path(folder)
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} document ids")
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError("document ids repeat")
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{folder}: is a file; an index is a folder (the file is left as it is)")
    ensure_folder(folder.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    os.chmod(tmp, default_mode(directory=True))
    try:
        matrix = sp.csr_matrix(matrix, dtype=np.float32, copy=True)
        matrix.sum_duplicates()  # repeated columns of a row are summed (the dot product is linear)
        matrix.eliminate_zeros()
        sp.save_npz(tmp / "vectors.npz", matrix)
        write_json(tmp / "doc_ids.json", list(doc_ids))
        if vocabulary is not None:
            write_json(tmp / "vocab.json", list(vocabulary))
        meta = dict(metadata)
        meta.update(num_docs=int(matrix.shape[0]), vocab_size=int(matrix.shape[1]), nnz=int(matrix.nnz))
        meta["content_hash"] = content_hash(matrix, doc_ids)
        write_json(tmp / "index.json", meta)
        if folder.exists():
            backup = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(backup, ignore_errors=True)
            os.replace(folder, backup)
            os.replace(tmp, folder)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_index(folder: str | Path) -> tuple[sp.csr_matrix, list[str], dict]:
    """Read an index folder: ``(vectors [D, V], doc_ids, metadata)``.

    Raises:
        DataFormatError: a file is missing, unreadable or malformed (naming it), the number of ids
            is not the number of vectors, or the content hash does not match.
    """
    folder = Path(folder)
    for name in ("vectors.npz", "doc_ids.json", "index.json"):
        if not (folder / name).exists():
            raise DataFormatError(folder / name, "missing: not a spladekit index folder")
    try:
        matrix = sp.load_npz(folder / "vectors.npz").tocsr()
    except Exception as exc:  # BadZipFile, a missing array, a malformed CSR (ValueError), ...
        raise DataFormatError(folder / "vectors.npz", f"cannot read the sparse vectors ({type(exc).__name__}: {exc})") from exc
    doc_ids = read_json(folder / "doc_ids.json")
    if not isinstance(doc_ids, list) or not all(isinstance(d, str) for d in doc_ids):
        raise DataFormatError(folder / "doc_ids.json", "expected a JSON list of document id strings")
    if len(doc_ids) != matrix.shape[0]:
        raise DataFormatError(folder / "doc_ids.json", f"{len(doc_ids)} document ids for {matrix.shape[0]} vectors in vectors.npz")
    meta = load_metadata(folder)
    if meta.get("content_hash") and meta["content_hash"] != content_hash(matrix, doc_ids):
        raise DataFormatError(folder / "index.json", "content hash does not match vectors.npz/doc_ids.json", field="content_hash")
    return matrix, doc_ids, meta


def load_metadata(folder: str | Path) -> dict:
    """An index folder's ``index.json`` alone (model, lengths, pruning, ...), without reading the vectors.

    Raises:
        DataFormatError: the file is missing, not valid JSON, or not a JSON object.
    """
    path = Path(folder) / "index.json"
    if not path.exists():
        raise DataFormatError(path, "missing: not a spladekit index folder")
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise DataFormatError(path, "expected a JSON object")
    return meta


def load_vocabulary(folder: str | Path) -> list[str] | None:
    """The index's ``vocab.json`` (V token strings), or ``None`` for folders written without one.

    Raises:
        DataFormatError: the file is not a JSON list of strings.
    """
    path = Path(folder) / "vocab.json"
    if not path.exists():
        return None
    vocab = read_json(path)
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise DataFormatError(path, "expected a JSON list of token strings")
    return vocab
