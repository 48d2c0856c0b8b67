"""The index folder on disk: what ``spladekit index`` writes and :class:`spladekit.index.index.Index` opens
(the layout constants, the format rules, and the readers of its small files).

Below :mod:`spladekit.index.writer` and :mod:`spladekit.index.index`, which both build on it (it
imports neither).

Layout of format 2 (see :mod:`spladekit.index.index` for what each file is for)::

    INDEX/
      index.json, vocab.json (optional), tie_rank.npy
      doc_ids.offsets.npy, doc_ids.utf8.npy  the D ids: UTF-8 bytes of all ids end to end (uint8) and
                                           int64 offsets [D + 1]; memory-mapped, decoded per id
      docs.{indptr,indices,data}.npy       CSR [D, V], uncompressed, memory-mappable
      postings.{indptr,indices,data}.npy   CSR [V, D] (term-major copy)
      seismic/                             stored approximate index (optional)

A folder of another layout (``vectors.npz``, ``doc_ids.json``: an older spladekit's) is refused: rebuild it.

Everything is written into a temporary folder and swapped in by :func:`spladekit.io.atomic_folder`,
under a memory budget (:mod:`spladekit.index.writer`, which writes every folder).
Matrices are stored canonically: sorted columns, repeated columns summed, explicit zeros removed
(rule of :mod:`spladekit.index.formats`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.io import read_json

FORMAT = 2
MATRICES = ("docs", "postings")
PARTS = ("indptr", "indices", "data")
HASH_BLOCK = 1 << 24  # entries per hashing step (bounded memory for the int64 casts)
DEFAULT_BUDGET = 1 << 30
"""Working memory of an index write, bytes (1 GiB; :mod:`spladekit.index.writer`)."""


def index_dtype(nnz: int, *dims: int) -> np.dtype:
    """int32 when ``nnz`` and every dimension fit in it, else int64."""
    return np.dtype(np.int32) if max(nnz, *dims, 0) < np.iinfo(np.int32).max else np.dtype(np.int64)


def canonical(matrix: sp.spmatrix) -> sp.csr_matrix:
    """float32 CSR with sorted columns, repeated columns summed (the dot product is linear) and
    explicit zeros removed (the storage rule of :mod:`spladekit.index.formats`)."""
    matrix = sp.csr_matrix(matrix, dtype=np.float32, copy=True)
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    return matrix


def hash_arrays(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, doc_ids: Sequence[str], shape: tuple[int, int]
) -> str:
    """SHA-256 over a canonical CSR matrix and its document ids (the ``content_hash`` of ``index.json``):
    int64 ``indptr``, int64 ``indices``, float32 ``data``, the JSON list of ids, then ``str(shape)``.
    Hashed in blocks of :data:`HASH_BLOCK` entries (same digest, bounded memory)."""
    digest = hashlib.sha256()
    for array, dtype in ((indptr, np.int64), (indices, np.int64), (data, np.float32)):
        for start in range(0, len(array), HASH_BLOCK):
            digest.update(np.ascontiguousarray(array[start : start + HASH_BLOCK], dtype=dtype).tobytes())
    digest.update(json.dumps(list(doc_ids)).encode())
    digest.update(str((int(shape[0]), int(shape[1]))).encode())
    return digest.hexdigest()


DOC_ID_FILES = ("doc_ids.offsets.npy", "doc_ids.utf8.npy")


class DocIds(Sequence[str]):
    """The D document ids of an index folder, memory-mapped: opening reads nothing; id ``i`` is
    ``utf8[offsets[i]:offsets[i + 1]]`` decoded (so a search decodes only the ids it returns).

    Args:
        offsets: ``[D + 1]`` int64, non-decreasing, ``offsets[0] = 0``, ``offsets[-1] = len(utf8)``.
        utf8: ``[B]`` uint8, the UTF-8 bytes of every id end to end.
        path: the folder's ``doc_ids.utf8.npy`` (named by errors).

    Raises:
        DataFormatError: (on reading an id) its bytes are not UTF-8.
    """

    def __init__(self, offsets: np.ndarray, utf8: np.ndarray, path: Path):
        self.offsets, self.utf8, self.path = offsets, utf8, path
        # plain ndarray views of the maps for gathers: the same pages, without np.memmap's wrapping of
        # every result (most of the cost of naming a query's 10 hits: benchmarks/runs/2026-12-07-source-notes.md)
        self._offsets, self._utf8 = np.asarray(offsets).view(np.ndarray), np.asarray(utf8).view(np.ndarray)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _decode(self, start: int, stop: int) -> list[str]:
        off = np.asarray(self.offsets[start : stop + 1], dtype=np.int64)
        raw = bytes(self.utf8[off[0] : off[-1]])
        rel = off - off[0]
        try:
            return [raw[a:b].decode("utf-8") for a, b in zip(rel[:-1].tolist(), rel[1:].tolist())]
        except UnicodeDecodeError as exc:
            raise DataFormatError(self.path, f"document ids {start}..{stop - 1} are not UTF-8 ({exc})") from exc

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            rows = range(*i.indices(len(self)))
            if rows.step == 1:
                return self._decode(rows.start, rows.stop) if rows.stop > rows.start else []
            return [self[j] for j in rows]
        n = len(self)
        i = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= i < n:
            raise IndexError(f"document row {i} out of range for {n} documents")
        return self._decode(i, i + 1)[0]

    def take(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The ids of ``rows`` (any order, repeats allowed), decoded at once: one gather of their
        bytes, no per-id array slicing (what a search's hits need).

        Raises:
            IndexError: a row outside ``[0, D)``.
            DataFormatError: their bytes are not UTF-8.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return []
        if rows.min() < 0 or rows.max() >= len(self):
            raise IndexError(f"document rows outside [0, {len(self)})")
        starts = self._offsets[rows].astype(np.int64, copy=False)
        lengths = self._offsets[rows + 1].astype(np.int64, copy=False) - starts
        bounds = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        raw = self._utf8[np.repeat(starts - bounds[:-1], lengths) + np.arange(bounds[-1])].tobytes()
        cuts = bounds.tolist()
        try:
            if raw.isascii():  # one decode, then slices of the string (byte offsets are character offsets)
                text = raw.decode("ascii")
                return [text[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
            return [raw[a:b].decode("utf-8") for a, b in zip(cuts[:-1], cuts[1:])]
        except UnicodeDecodeError as exc:
            raise DataFormatError(
                self.path, f"a document id of rows {rows[:5].tolist()}... is not UTF-8 ({exc})"
            ) from exc

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), 1 << 16):  # decoded in blocks: bounded memory, no per-id slicing
            yield from self._decode(start, min(start + (1 << 16), len(self)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"DocIds({len(self)} ids, {self.path.parent})"


def take_ids(doc_ids: Sequence[str], rows: Sequence[int] | np.ndarray) -> list[str]:
    """The ids of ``rows``: :meth:`DocIds.take` for memory-mapped ids, indexing for a list."""
    if isinstance(doc_ids, DocIds):
        return doc_ids.take(rows)
    return [doc_ids[r] for r in np.asarray(rows, dtype=np.int64).tolist()]


def read_doc_ids(folder: Path, num_docs: int) -> Sequence[str]:
    """The ids of a folder: memory-mapped :class:`DocIds`, O(1) apart from checking the offsets (8
    bytes per document, read once).

    Raises:
        DataFormatError: the files are missing (an older spladekit's ``doc_ids.json``: rebuild it),
            unreadable, inconsistent, or not ``num_docs`` ids.
    """
    offsets_path, utf8_path = (folder / name for name in DOC_ID_FILES)
    if not offsets_path.exists() and (folder / "doc_ids.json").exists():
        raise DataFormatError(
            folder / "doc_ids.json", "document ids in an older spladekit's layout; rebuild the index folder"
        )
    arrays = []
    for path, dtype in ((offsets_path, np.int64), (utf8_path, np.uint8)):
        if not path.exists():
            raise DataFormatError(path, "missing: the index folder is incomplete")
        try:
            array = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as exc:
            raise DataFormatError(path, f"cannot read ({exc})") from exc
        if array.ndim != 1 or array.dtype != dtype:
            raise DataFormatError(
                path, f"expected a 1-D {np.dtype(dtype).name} array, found {array.dtype} {array.shape}"
            )
        arrays.append(array)
    offsets, utf8 = arrays
    if offsets.shape != (num_docs + 1,):
        raise DataFormatError(offsets_path, f"{offsets.shape[0] - 1} document ids for {num_docs} vectors in docs.*.npy")
    if offsets[0] != 0 or offsets[-1] != utf8.size or (num_docs and np.any(np.diff(offsets) < 0)):
        raise DataFormatError(offsets_path, f"offsets must rise from 0 to the {utf8.size} bytes of {utf8_path.name}")
    return DocIds(offsets, utf8, utf8_path)


def release_mapped_pages(*arrays: np.ndarray) -> int:
    """Drop the process's resident pages of memory-mapped arrays (``madvise(MADV_DONTNEED)`` on each
    array's ``np.memmap`` map, found through ``.base``): a read-only file map refaults from the page
    cache on the next read, so nothing changes but the resident set (a sharded build that reads a
    folder's 14 GB of entries range by range otherwise ends with all of them counted in its RSS).

    Returns:
        The number of maps released (arrays that are not file maps are skipped; none on platforms
        without ``mmap.MADV_DONTNEED``).
    """
    import mmap

    if not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    released, seen = 0, set()
    for array in arrays:
        node = array
        while node is not None and not isinstance(getattr(node, "_mmap", None), mmap.mmap):
            node = getattr(node, "base", None)
        if node is not None and id(node._mmap) not in seen:
            seen.add(id(node._mmap))
            node._mmap.madvise(mmap.MADV_DONTNEED)
            released += 1
    return released


def content_hash(matrix: sp.csr_matrix, doc_ids: Sequence[str]) -> str:
    """SHA-256 over the canonical CSR arrays and the document ids: equal iff the same vectors for the
    same ids (:func:`hash_arrays`)."""
    matrix = sp.csr_matrix(matrix)
    if not matrix.has_sorted_indices:
        matrix = matrix.copy()
        matrix.sort_indices()
    return hash_arrays(matrix.indptr, matrix.indices, matrix.data, doc_ids, matrix.shape)


def refuse_links_out(folder: Path, names: Sequence[str], remedy: str) -> None:
    """Refuse a link that leaves the index folder ``folder`` among ``folder/NAME`` for each of ``names``
    (a stored copy or shards that spladekit derives from the index, and their build folders) and
    everything below them. Reading through one would take files from another place; building through
    one would write, and clear, files there. spladekit makes these paths itself and links none of them.

    Raises:
        DataFormatError: naming the link and where it leads, then ``remedy``.
    """
    import os

    root = folder.resolve()
    for name in names:
        paths = [folder / name]
        if paths[0].is_dir() and not paths[0].is_symlink():
            for top, dirs, files in os.walk(paths[0]):  # links to folders are listed, never entered
                paths += [Path(top) / entry for entry in sorted(dirs + files)]
        for path in paths:
            real = path.resolve()  # a dangling link resolves to where it points
            if path.is_symlink() and real != root and root not in real.parents:
                raise DataFormatError(
                    path,
                    f"a link to {real}, outside the index folder {folder}: not followed; delete the link ({remedy})",
                )


def load_metadata(folder: str | Path) -> dict:
    """An index folder's ``index.json`` alone (model, lengths, pruning, ...), without reading the vectors.

    Raises:
        DataFormatError: the file is missing, not valid JSON, or not a JSON object.
    """
    path = Path(folder) / "index.json"
    if not Path(folder).exists():
        raise DataFormatError(folder, "no such folder (an index folder is written by `spladekit index` or `import`)")
    if not path.exists():
        raise DataFormatError(path, "missing: not a spladekit index folder")
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise DataFormatError(path, "expected a JSON object")
    return meta


def load_vocabulary(folder: str | Path) -> list[str] | None:
    """The index's ``vocab.json`` (V token strings), or ``None`` for folders written without one.
    Checked against ``index.json``: its ``vocab_size`` (V) and its ``vocab_hash`` (SHA-256 of the
    file, when recorded): a term's name is what an export writes.

    Raises:
        DataFormatError: the file is not a JSON list of V strings, does not match ``vocab_hash``, or
            is missing where ``index.json`` records one.
    """
    from spladekit.data.resolve import sha256_file

    path = Path(folder) / "vocab.json"
    meta_path = Path(folder) / "index.json"
    meta = read_json(meta_path) if meta_path.exists() else {}
    want = meta.get("vocab_hash") if isinstance(meta, dict) else None
    if not path.exists():
        if want:
            raise DataFormatError(
                path, "missing: index.json records a vocabulary (vocab_hash); the folder is incomplete"
            )
        return None
    if want and sha256_file(path) != want:
        raise DataFormatError(
            path,
            "does not match index.json's vocab_hash (the file was altered or damaged; "
            "rebuild the index, or restore the file)",
        )
    vocab = read_json(path)
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise DataFormatError(path, "expected a JSON list of token strings")
    size = meta.get("vocab_size") if isinstance(meta, dict) else None
    if isinstance(size, int) and len(vocab) != size:
        raise DataFormatError(path, f"{len(vocab)} tokens for the index's {size} columns (index.json vocab_size)")
    return vocab


def model_record(model: str | Path, location: str | Path) -> dict:
    """``index.json``'s ``model`` and ``model_revision`` for an index built with ``model`` (a hub id
    or a folder) resolved to ``location``: a local folder is recorded absolute, so the index finds
    its query encoder from any working directory."""
    name = str(Path(model).resolve()) if Path(model).exists() else str(model)
    return {"model": name, "model_revision": model_revision(location)}


def model_revision(location: str | Path) -> str | None:
    """A revision string for a resolved model: the hub snapshot's commit for hub-cache folders,
    else ``sha256:<hex>`` of its weights file for local folders, else None."""
    from spladekit.data.resolve import sha256_file

    path = Path(location)
    if path.parent.name == "snapshots":
        return path.name
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).exists():
            return "sha256:" + sha256_file(path / name)
    return None
