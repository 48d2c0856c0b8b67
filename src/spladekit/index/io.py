"""Saving and loading a whole index folder in memory: :func:`save_index`, :func:`load_index`.

The folder's layout, its format rules and the readers of its small files are in
:mod:`spladekit.index.layout` (re-exported here, their old import path); the writing is
:mod:`spladekit.index.writer`'s, the opening :class:`spladekit.index.index.Index`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.errors import OutputPathError
from spladekit.index.layout import (  # noqa: F401  (re-exported: this module's names before the split)
    FORMAT,
    MATRICES,
    PARTS,
    HASH_BLOCK,
    DEFAULT_BUDGET,
    index_dtype,
    canonical,
    hash_arrays,
    DOC_ID_FILES,
    DocIds,
    take_ids,
    read_doc_ids,
    content_hash,
    load_legacy,
    load_metadata,
    load_vocabulary,
)


def save_index(
    folder: str | Path,
    matrix: sp.csr_matrix,
    doc_ids: Sequence[str],
    metadata: dict,
    vocabulary: Sequence[str] | None = None,
    memory_budget: int = DEFAULT_BUDGET,
) -> Path:
    """Write in-memory (or memory-mapped) vectors as an index folder (format 2), atomically, within
    ``memory_budget`` bytes of working memory (:mod:`spladekit.index.writer`).

    Args:
        folder: the index folder (replaced when it exists).
        matrix: ``[D, V]`` document vectors (stored canonically).
        doc_ids: D document ids, row order.
        metadata: written to ``index.json`` (format, counts and the content hash are added).
        vocabulary: V token strings (column order), written to ``vocab.json`` when given.
        memory_budget: bytes (:data:`DEFAULT_BUDGET`).

    Raises:
        ValueError: ``matrix`` rows and ``doc_ids`` differ in number, ids repeat, or the
            vocabulary length is not V or holds a non-string.
        OutputPathError: ``folder`` is an existing file (left untouched) or cannot be created.
    """
    folder = Path(folder)
    if vocabulary is not None and len(vocabulary) != matrix.shape[1]:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens for {matrix.shape[1]} columns")
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} document ids")
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"{folder}: is a file; an index is a folder (the file is left as it is)")
    from spladekit.index.writer import matrix_blocks, write_index  # the writer builds on this module

    return write_index(folder, matrix_blocks(sp.csr_matrix(matrix), memory_budget), list(doc_ids), matrix.shape[1], metadata, vocabulary,
                       memory_budget)


def load_index(folder: str | Path) -> tuple[sp.csr_matrix, list[str], dict]:
    """Read an index folder (either format) into memory and check its content hash:
    ``(vectors [D, V], doc_ids, metadata)``. To search, open it instead (:meth:`Index.open`: mapped,
    not read).

    Raises:
        DataFormatError: a file is missing, unreadable or malformed (naming it), the number of ids
            is not the number of vectors, or the content hash does not match.
    """
    from spladekit.index.index import Index

    index = Index.open(folder, verify=True)
    docs = index.docs
    if not index.legacy:
        docs = sp.csr_matrix((np.array(docs.data), np.array(docs.indices), np.array(docs.indptr)), shape=docs.shape)
    return docs, list(index.doc_ids), index.metadata
