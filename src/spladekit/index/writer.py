"""Writing an index under a memory budget: both layouts of a folder, block by block, at any N.

Every way into an index folder (:meth:`Index.build`, :meth:`Index.from_vectors`,
:func:`save_index`, the importers of :mod:`spladekit.index.export` (row-major
files parsed once into a :class:`RowSpill` on disk, then read back block by block; CIFF read whole
into a CSR first), and :func:`spladekit.index.merge.merge_shards`) goes through :func:`write_index`, which writes the folder of
one layout (the same files, the same bytes as an in-memory build) while holding at
most ``memory_budget`` bytes of working memory for the vectors, whatever the number of documents:

1. **Counting pass** over the row blocks: shapes, finiteness (:func:`check_finite`, naming the
   row), nnz; nothing is written, so a bad weight fails before any work.
2. **Document pass**: the row-major CSR (``docs.*.npy``) is appended to its files block after block
   (plain sequential writes: the file pages are the kernel's page cache, not this process's memory);
   every posting ``(term, row, impact)`` goes into a run buffer. A full buffer is sorted by term
   (stable, so rows stay ascending inside each term) and written to disk as a **sorted run**: a
   term-major CSR over the rows it holds. Runs cover consecutive row ranges.
3. **Merge**: the posting list of term ``j`` is the concatenation, in run order, of every run's list
   of ``j`` (runs hold ascending, disjoint row ranges, so this k-way merge needs no comparison). The
   term range of each output step is chosen so that its postings fit the budget; a single list
   longer than that is copied run by run in pieces. The output (``postings.*.npy``) is written
   sequentially; the runs (as large as the postings) are deleted before the folder is renamed.
4. **Hashes** (``content_hash``, ``postings_hash``: :func:`spladekit.index.layout.hash_arrays`) are
   computed by reading the files back in budget-sized pieces.

The run idea is the classic external sort of inverted-file construction (Witten, Moffat & Bell,
"Managing Gigabytes", 2nd ed., 1999, §5.2 "sort-based inversion"; Heinz & Zobel, "Efficient
single-pass index construction for text databases", JASIST 54(8), 2003).

Memory: the budget covers the vector work (run buffer ≈ 26 bytes per posting held, merge ≈ 40 bytes
per posting of a step, document pieces, hashing pieces); it does not cover the caller's blocks, and
the document ids, which are kept in memory once: ``N × (L + 16)`` bytes for ``N`` ids of at most
``L`` UTF-8 bytes (sorted for the tie ranks and the repeated-id check), e.g. 0.2 GB for MS MARCO's
8.8M ids of ≤ 7 bytes. Disk: the folder plus the runs (the size of ``postings.*``) at the peak, and
for an import its :class:`RowSpill` (8 bytes per entry and per row with int32 columns).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import OutputPathError, RepeatedIdError
from spladekit.index.exact import TIE_RULE, check_finite
from spladekit.index.layout import DEFAULT_BUDGET, DOC_ID_FILES, FORMAT, PARTS, canonical, index_dtype
from spladekit.io import atomic_folder, write_json

MIN_BUDGET = 1 << 24
"""The smallest accepted budget (16 MiB): below it the fixed ``[V]`` counters dominate."""

RUN_BYTES = 26  # per posting in the run buffer: key (≤ 4) + row (≤ 8) + impact 4 + argsort 8 + one gathered copy
MAX_BUDGET = 1 << 50  # 1 PiB: far above any machine; keeps every size derived from it inside int64
MERGE_BYTES = 40  # per posting of a merge step: output row + impact, input row + impact, int64 destinations
PIECE_BYTES = 48  # per entry of a document piece: int64 rows and keys, casts, the caller-side canonical copy
HASH_BYTES = 16  # per entry of a hashing piece: the read values and their int64 cast


SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "pib": 1 << 50,
}
"""Units of :func:`parse_size`: SI (powers of 1000) and IEC (powers of 1024), case-insensitive."""


def parse_size(text: str, name: str = "--memory-budget") -> int:
    """Bytes of a size written ``512MiB``, ``2GiB``, ``1.5GB`` or ``67108864`` (units:
    :data:`SIZE_UNITS`), checked by :func:`check_budget`.

    Raises:
        ValueError: naming ``name``: not a number with a known unit, or outside the budget's range.
    """
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in SIZE_UNITS:
        raise ValueError(
            f"{name}: {text!r} is not a size (a number with B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB, e.g. 512MiB)"
        )
    value = int(float(match.group(1)) * SIZE_UNITS[match.group(2).lower()])
    try:
        return check_budget(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {text!r} = {value} bytes; {exc}") from None


def check_budget(memory_budget) -> int:
    """``memory_budget`` as an int of bytes.

    Raises:
        ValueError: not an integer in [:data:`MIN_BUDGET`, :data:`MAX_BUDGET`].
    """
    if (
        isinstance(memory_budget, bool)
        or not isinstance(memory_budget, (int, np.integer))
        or not MIN_BUDGET <= memory_budget <= MAX_BUDGET
    ):
        raise ValueError(
            f"memory_budget must be an integer number of bytes in [{MIN_BUDGET} (16 MiB), {MAX_BUDGET} (1 PiB)], "
            f"got {memory_budget!r}"
        )
    return int(memory_budget)


# ----------------------------------------------------------------------------------- .npy files
class NpyWriter:
    """A 1-D ``.npy`` file of known length written front to back (the header numpy's own
    ``np.save`` writes, then the values as they come).

    Raises:
        ValueError: (on :meth:`close`) fewer or more values were written than announced.
    """

    def __init__(self, path: Path, dtype, length: int):
        self.path, self.dtype, self.length, self.written = path, np.dtype(dtype), int(length), 0
        self.file = open(path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.length,)}
        np.lib.format.write_array_header_1_0(self.file, header)

    def write(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self.file.write(memoryview(values).cast("B"))
        self.written += values.size

    def close(self) -> None:
        self.file.close()
        if self.written != self.length:
            raise ValueError(f"{self.path}: {self.written} values written for {self.length} announced")


def iter_npy(path: Path, count: int) -> Iterator[np.ndarray]:
    """The values of a 1-D ``.npy`` file, ``count`` at a time (plain reads, no memory map)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        left = int(np.prod(shape))
        while left > 0:
            values = np.fromfile(f, dtype=dtype, count=min(count, left))
            left -= values.size
            yield values


def hash_files(folder: Path, name: str, doc_ids: Iterable[str], shape: tuple[int, int], count: int) -> str:
    """:func:`spladekit.index.layout.hash_arrays` of the matrix ``name`` stored in ``folder`` (the same
    digest: int64 ``indptr``, int64 ``indices``, float32 ``data``, the JSON list of ids as
    ``json.dumps`` writes it, ``str(shape)``), reading ``count`` values at a time."""
    digest = hashlib.sha256()
    for part, dtype in zip(PARTS, (np.int64, np.int64, np.float32)):
        for values in iter_npy(folder / f"{name}.{part}.npy", count):
            digest.update(np.ascontiguousarray(values, dtype=dtype).tobytes())
    digest.update(b"[")
    for i, doc_id in enumerate(doc_ids):  # json.dumps(list) joins the items with ", "
        digest.update(((", " if i else "") + json.dumps(doc_id)).encode())
    digest.update(b"]")
    digest.update(str((int(shape[0]), int(shape[1]))).encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------------- ids
def write_ids(folder: Path, doc_ids: Collection[str], block: int = 1 << 16) -> None:
    """Write ``doc_ids.offsets.npy``, ``doc_ids.utf8.npy`` (:class:`spladekit.index.layout.DocIds`) and
    ``tie_rank.npy`` (rank of each row in id order, :func:`spladekit.index.exact.tie_ranks`), from
    ids that are iterated three times and never held as Python strings all at once.

    The id order is that of Python strings: UTF-8 byte order is code point order, so ids are sorted
    as fixed-width byte strings (``N × L`` bytes). An id ending in NUL (which fixed-width byte
    strings cannot tell from padding) falls back to sorting the strings themselves.

    Raises:
        ValueError: an id is not a string; :class:`~spladekit.errors.RepeatedIdError` (a ValueError): an
            id repeats (naming it and the positions of both).
    """
    num_docs, total, longest, trailing_nul = len(doc_ids), 0, 1, False
    for i, doc_id in enumerate(doc_ids):
        if not isinstance(doc_id, str):
            raise ValueError(f"document id {i} is {doc_id!r}, not a string")
        size = len(doc_id.encode("utf-8"))
        total, longest = total + size, max(longest, size)
        trailing_nul |= doc_id.endswith("\x00")
    offsets, utf8 = (
        NpyWriter(folder / DOC_ID_FILES[0], np.int64, num_docs + 1),
        NpyWriter(folder / DOC_ID_FILES[1], np.uint8, total),
    )
    offsets.write(np.zeros(1))
    keys = np.empty(num_docs, dtype=f"S{longest}")
    position = 0
    for start, ids in _batches(doc_ids, block):
        encoded = [d.encode("utf-8") for d in ids]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets.write(position + np.cumsum(lengths))
        position += int(lengths.sum())
        utf8.write(np.frombuffer(b"".join(encoded), dtype=np.uint8))
        keys[start : start + len(encoded)] = encoded
    offsets.close()
    utf8.close()
    if trailing_nul:
        keys = np.asarray(list(doc_ids), dtype=object)
    order = np.argsort(keys, kind="stable")
    for start in range(0, max(0, num_docs - 1), block):  # a repeated id sits next to its twin in id order
        window = keys[order[start : start + block + 1]]
        same = np.flatnonzero(window[1:] == window[:-1])
        if same.size:
            twin = window[same[0]]
            first, second = sorted(int(i) for i in order[start + same[0] : start + same[0] + 2])
            raise RepeatedIdError(twin.decode("utf-8") if isinstance(twin, bytes) else twin, first, second)
    del keys
    itype = index_dtype(num_docs)
    ranks = np.empty(num_docs, dtype=itype)
    ranks[order] = np.arange(num_docs, dtype=itype)
    np.save(folder / "tie_rank.npy", ranks)


def _batches(items: Iterable, size: int) -> Iterator[tuple[int, list]]:
    batch, start = [], 0
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield start, batch
            start, batch = start + size, []
    if batch:
        yield start, batch


# ----------------------------------------------------------------------------------- arrays
class _Runs:
    """The run buffer of postings ``(term, row, impact)`` and the sorted runs written from it
    (one pair of files, runs end to end; ``counts[r]`` = run ``r``'s ``[V]`` list lengths)."""

    def __init__(self, folder: Path, vocab_size: int, itype: np.dtype, capacity: int):
        folder.mkdir()
        self.folder, self.vocab_size, self.itype = folder, vocab_size, itype
        self.key_type = np.uint16 if vocab_size <= 1 << 16 else np.int32  # uint16: numpy's stable sort is a radix sort
        self.terms = np.empty(capacity, self.key_type)
        self.rows = np.empty(capacity, itype)
        self.impacts = np.empty(capacity, np.float32)
        self.fill = 0
        self.counts: list[np.ndarray] = []
        self.starts = [0]  # first posting of each run in the files
        self.files = open(folder / "rows.bin", "wb"), open(folder / "impacts.bin", "wb")

    def add(self, terms: np.ndarray, rows: np.ndarray, impacts: np.ndarray) -> None:
        done = 0
        while done < terms.size:
            take = min(terms.size - done, self.terms.size - self.fill)
            end = self.fill + take
            self.terms[self.fill : end], self.rows[self.fill : end] = (
                terms[done : done + take],
                rows[done : done + take],
            )
            self.impacts[self.fill : end] = impacts[done : done + take]
            self.fill, done = end, done + take
            if self.fill == self.terms.size:
                self.flush()

    def flush(self) -> None:
        if not self.fill:
            return
        terms = self.terms[: self.fill]
        order = np.argsort(terms, kind="stable")  # stable: rows stay ascending inside each term
        self.counts.append(np.bincount(terms, minlength=self.vocab_size).astype(np.int64))
        for file, values in zip(self.files, (self.rows, self.impacts)):
            file.write(memoryview(values[: self.fill][order]).cast("B"))
        self.starts.append(self.starts[-1] + self.fill)
        self.fill = 0

    def close(self) -> None:
        self.flush()
        for file in self.files:
            file.close()
        self.terms = self.rows = self.impacts = None  # the buffer's memory is the merge's now

    def merge(self, rows_out: NpyWriter, impacts_out: NpyWriter, step: int) -> np.ndarray:
        """Write every posting list (rows, impacts) in term order; returns the ``[V + 1]`` indptr.
        Each step covers the terms whose postings fit ``step`` entries (at least one term)."""
        counts = np.stack(self.counts) if self.counts else np.zeros((0, self.vocab_size), np.int64)
        indptr = np.zeros(self.vocab_size + 1, np.int64)
        np.cumsum(counts.sum(axis=0), out=indptr[1:])
        run_ptr = np.zeros((len(self.counts), self.vocab_size + 1), np.int64)
        np.cumsum(counts, axis=1, out=run_ptr[:, 1:])
        sources = [open(self.folder / "rows.bin", "rb"), open(self.folder / "impacts.bin", "rb")]
        types = (self.itype, np.dtype(np.float32))
        outputs = (rows_out, impacts_out)

        def read(r: int, first: int, count: int) -> list[np.ndarray]:
            values = []
            for file, dtype in zip(sources, types):
                file.seek((self.starts[r] + first) * dtype.itemsize)
                values.append(np.fromfile(file, dtype=dtype, count=count))
            return values

        try:
            j0 = 0
            while j0 < self.vocab_size:
                j1 = max(j0 + 1, int(np.searchsorted(indptr, indptr[j0] + step, side="right")) - 1)
                j1 = min(j1, self.vocab_size)
                size = int(indptr[j1] - indptr[j0])
                if size > step:  # one list longer than a step: run by run, in pieces (run order = row order)
                    for r in range(len(self.counts)):
                        for first in range(int(run_ptr[r, j0]), int(run_ptr[r, j1]), step):
                            for out, values in zip(outputs, read(r, first, min(step, int(run_ptr[r, j1]) - first))):
                                out.write(values)
                else:
                    buffers = [np.empty(size, dtype) for dtype in types]
                    placed = indptr[j0:j1] - indptr[j0]  # next free slot of each term in this step's output
                    for r in range(len(self.counts)):
                        lengths = counts[r, j0:j1]
                        n = int(lengths.sum())
                        if not n:
                            continue
                        within = np.cumsum(lengths) - lengths  # where each term starts in the run's slice
                        dest = np.repeat(placed - within, lengths) + np.arange(n)
                        for buffer, values in zip(buffers, read(r, int(run_ptr[r, j0]), n)):
                            buffer[dest] = values
                        placed = placed + lengths
                        del dest
                    for out, buffer in zip(outputs, buffers):
                        out.write(buffer)
                    del buffers
                j0 = j1
        finally:
            for file in sources:
                file.close()
        return indptr


def _pieces(block: sp.csr_matrix, max_entries: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(indptr, indices, data)`` views of consecutive row ranges of ``block`` holding at most
    ``max_entries`` entries each (a longer single row is one piece)."""
    indptr = np.asarray(block.indptr, dtype=np.int64)
    start, rows = 0, block.shape[0]
    while start < rows:
        end = int(np.searchsorted(indptr, indptr[start] + max_entries, side="right")) - 1
        end = min(rows, max(end, start + 1))
        a, b = indptr[start], indptr[end]
        yield indptr[start : end + 1] - a, block.indices[a:b], block.data[a:b]
        start = end


def write_arrays(
    folder: Path,
    blocks: Callable[[], Iterator[sp.csr_matrix]],
    num_docs: int,
    vocab_size: int,
    memory_budget: int = DEFAULT_BUDGET,
    documents: bool = True,
) -> int:
    """Write the document CSR (``docs.*.npy``) and its term-major copy (``postings.*.npy``) from
    canonical row blocks (in row order), in the three passes of the module docstring.

    Args:
        blocks: called twice; each call yields the same ``[rows, V]`` canonical CSR blocks.
        memory_budget: bytes of working memory (:func:`check_budget`).
        documents: False writes the term-major copy alone (no ``docs.*.npy``).

    Returns:
        nnz.

    Raises:
        ValueError: the blocks do not hold ``num_docs`` rows of width ``vocab_size``, or a weight is
            not finite (NaN, ±inf; naming the document row), found in the first pass, before any
            array is written.
    """
    budget = check_budget(memory_budget)
    rows, nnz = 0, 0
    for block in blocks():
        if block.shape[1] != vocab_size:
            raise ValueError(f"a block has {block.shape[1]} columns, expected {vocab_size}")
        check_finite(block, "document", first_row=rows)  # before any array is written
        rows += block.shape[0]
        nnz += block.nnz
    if rows != num_docs:
        raise ValueError(f"blocks hold {rows} rows for {num_docs} documents")
    itype = index_dtype(nnz, num_docs, vocab_size)
    piece = max(1, budget // 8 // PIECE_BYTES)
    runs = _Runs(folder / ".runs", vocab_size, itype, capacity=max(1, min(nnz, budget // 2 // RUN_BYTES)))
    try:
        files = (
            [
                NpyWriter(folder / f"docs.{part}.npy", dtype, n)
                for part, dtype, n in zip(PARTS, (itype, itype, np.float32), (num_docs + 1, nnz, nnz))
            ]
            if documents
            else []
        )
        if documents:
            files[0].write(np.zeros(1))
        row0, pos0 = 0, 0
        for block in blocks():
            for indptr, indices, data in _pieces(block, piece):
                n, m = indptr.size - 1, indices.size
                if documents:
                    d_ptr, d_idx, d_val = files
                    d_ptr.write(pos0 + indptr[1:])  # int64 sums: pos0 may pass 2^31 before the cast
                    d_idx.write(indices)
                    d_val.write(data)
                runs.add(indices, np.repeat(np.arange(row0, row0 + n, dtype=np.int64), np.diff(indptr)), data)
                row0, pos0 = row0 + n, pos0 + m
        for file in files:
            file.close()
        runs.close()
        p_idx, p_val = (
            NpyWriter(folder / "postings.indices.npy", itype, nnz),
            NpyWriter(folder / "postings.data.npy", np.float32, nnz),
        )
        indptr = runs.merge(p_idx, p_val, step=max(1, budget * 3 // 4 // MERGE_BYTES))
        p_idx.close()
        p_val.close()
        np.save(folder / "postings.indptr.npy", indptr.astype(itype))
    finally:
        shutil.rmtree(runs.folder, ignore_errors=True)
    return nnz


def write_index(
    out: str | Path,
    blocks: Callable[[], Iterator[sp.csr_matrix]],
    doc_ids: Collection[str],
    vocab_size: int,
    metadata: dict,
    vocabulary: Sequence[str] | None = None,
    memory_budget: int = DEFAULT_BUDGET,
) -> Path:
    """Write a format-2 index folder atomically from canonical row blocks, within ``memory_budget``
    bytes of working memory (module docstring).

    Args:
        out: the index folder (replaced atomically when it exists).
        blocks: called twice; yields the ``[rows, V]`` canonical CSR blocks in row order.
        doc_ids: the D ids in row order (iterated a few times; a list, :class:`DocIds`, or any sized
            iterable).
        metadata: ``index.json`` entries (format, counts, tie rule and hashes are added).
        vocabulary: V token strings (``vocab.json``), or None.

    Raises:
        ValueError: ids repeat (naming one), an id is not a string, the vocabulary is not V
            strings, the blocks do not match, or the budget is too small.
        OutputPathError: ``out`` is an existing file (left untouched) or cannot be created.
    """
    budget = check_budget(memory_budget)
    if vocabulary is not None and len(vocabulary) != vocab_size:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens for {vocab_size} columns")
    if vocabulary is not None and not all(isinstance(t, str) for t in vocabulary):
        bad = next(j for j, t in enumerate(vocabulary) if not isinstance(t, str))
        raise ValueError(
            f"vocabulary entry {bad} is {vocabulary[bad]!r}, not a token string (vocab.json could not be read back)"
        )
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputPathError(f"{out}: is a file; an index is a folder (the file is left as it is)")
    num_docs = len(doc_ids)
    with atomic_folder(out) as tmp:
        write_ids(tmp, doc_ids)  # first: a repeated id fails before the arrays are written
        nnz = write_arrays(tmp, blocks, num_docs, vocab_size, budget)
        if vocabulary is not None:
            write_json(tmp / "vocab.json", list(vocabulary))
        meta = dict(metadata)
        meta.pop("format", None)
        meta.pop("vocab_hash", None)  # a source index's: set again below for this folder's vocab.json
        meta.update(format=FORMAT, num_docs=num_docs, vocab_size=int(vocab_size), nnz=int(nnz), tie_rule=TIE_RULE)
        if vocabulary is not None:
            from spladekit.data.resolve import sha256_file

            meta["vocab_hash"] = sha256_file(tmp / "vocab.json")  # checked by load_vocabulary
        count = max(1, budget // 4 // HASH_BYTES)
        meta["content_hash"] = hash_files(tmp, "docs", doc_ids, (num_docs, vocab_size), count)
        meta["postings_hash"] = hash_files(tmp, "postings", (), (vocab_size, num_docs), count)
        write_json(tmp / "index.json", meta)
    return out


def save_index(
    folder: str | Path,
    matrix: sp.csr_matrix,
    doc_ids: Sequence[str],
    metadata: dict,
    vocabulary: Sequence[str] | None = None,
    memory_budget: int = DEFAULT_BUDGET,
) -> Path:
    """Write in-memory (or memory-mapped) vectors as an index folder, atomically, within
    ``memory_budget`` bytes of working memory (:func:`write_index` of the matrix's blocks).

    Args:
        folder: the index folder (replaced when it exists).
        matrix: ``[D, V]`` document vectors (stored canonically).
        doc_ids: D document ids, row order.
        metadata: written to ``index.json`` (format, counts and the content hash are added).
        vocabulary: V token strings (column order), written to ``vocab.json`` when given.
        memory_budget: bytes (:data:`~spladekit.index.layout.DEFAULT_BUDGET`).

    Raises:
        ValueError: ``matrix`` rows and ``doc_ids`` differ in number, ids repeat, or the
            vocabulary length is not V or holds a non-string.
        OutputPathError: ``folder`` is an existing file (left untouched) or cannot be created.
    """
    if vocabulary is not None and len(vocabulary) != matrix.shape[1]:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens for {matrix.shape[1]} columns")
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} document ids")
    return write_index(
        folder,
        matrix_blocks(sp.csr_matrix(matrix), memory_budget),
        list(doc_ids),
        matrix.shape[1],
        metadata,
        vocabulary,
        memory_budget,
    )


# ----------------------------------------------------------------------------------- sources
def _block_end(indptr, start: int, rows: int, limit: int) -> int:
    """The row after the last of a block starting at ``start`` that holds at most ``limit`` entries
    by the row pointers ``indptr`` (at least one row: a longer row is a block of its own), ≤ ``rows``."""
    end = int(np.searchsorted(indptr, int(indptr[start]) + limit, side="right")) - 1
    return min(rows, max(end, start + 1))


def matrix_blocks(
    matrix: sp.csr_matrix, memory_budget: int = DEFAULT_BUDGET, assume_canonical: bool = False
) -> Callable[[], Iterator[sp.csr_matrix]]:
    """Blocks of consecutive rows of a CSR matrix (in memory or memory-mapped), each holding at most
    ``memory_budget / 8 / 48`` entries, made canonical (:func:`spladekit.index.layout.canonical`) unless
    ``assume_canonical`` (then the rows are copied as they are: an index folder's are canonical).
    Only one block is in memory at a time; a memory-mapped matrix is read in place."""
    budget = check_budget(memory_budget)
    limit = max(1, budget // 8 // PIECE_BYTES)
    indptr = matrix.indptr

    def blocks():
        if matrix.shape[0] == 0:
            yield sp.csr_matrix((0, matrix.shape[1]), dtype=np.float32)
        start = 0
        while start < matrix.shape[0]:
            end = _block_end(indptr, start, matrix.shape[0], limit)
            a, b = int(indptr[start]), int(indptr[end])
            part = sp.csr_matrix(
                (
                    np.array(matrix.data[a:b]),
                    np.array(matrix.indices[a:b]),
                    np.asarray(indptr[start : end + 1], dtype=np.int64) - a,
                ),
                shape=(end - start, matrix.shape[1]),
            )
            yield part if assume_canonical else canonical(part)
            start = end

    return blocks


class RowSpill:
    """Rows read one at a time (a file being imported: :func:`spladekit.index.export.import_to_index`)
    written to a folder as a row-major CSR on disk, so that the writer's two passes over the blocks
    read these binary files instead of parsing the input again: ``lengths.bin`` (int64 per row),
    ``columns.bin`` (int32, or int64 for ``V`` ≥ 2^31) and ``weights.bin`` (float32), 8 bytes per
    row and 8 per entry (int32 columns). Writes go through 1 MiB buffers.

    Args:
        folder: an existing empty folder (the caller's to remove).
        vocab_size: V (the columns' type).
    """

    BUFFER = 1 << 20

    def __init__(self, folder: Path, vocab_size: int):
        self.folder, self.vocab_size, self.rows, self.entries = Path(folder), int(vocab_size), 0, 0
        self.col_type = np.dtype(np.int32 if vocab_size <= np.iinfo(np.int32).max else np.int64)
        self.files = [
            open(self.folder / name, "wb", buffering=self.BUFFER)
            for name in ("lengths.bin", "columns.bin", "weights.bin")
        ]

    def add(self, columns: np.ndarray, weights: np.ndarray) -> None:
        """Append one row: ``[n]`` column ids in ``[0, V)``, ``[n]`` weights (stored as float32)."""
        columns, weights = np.asarray(columns, self.col_type), np.asarray(weights, np.float32)
        self.files[0].write(np.int64(columns.size).tobytes())
        self.files[1].write(memoryview(np.ascontiguousarray(columns)).cast("B"))
        self.files[2].write(memoryview(np.ascontiguousarray(weights)).cast("B"))
        self.rows, self.entries = self.rows + 1, self.entries + columns.size

    def close(self) -> None:
        for file in self.files:
            file.close()

    def blocks(self, memory_budget: int = DEFAULT_BUDGET) -> Callable[[], Iterator[sp.csr_matrix]]:
        """Blocks of consecutive rows of the spilled CSR (after :meth:`close`), each holding at most
        ``memory_budget / 8 / 48`` entries (as :func:`matrix_blocks`; a longer single row is a block
        of its own), made canonical; read with plain sequential reads (no memory map), so only one
        block and ``memory_budget / 8 / 48`` row lengths are in this process's memory at a time.

        Raises:
            ValueError: (from the blocks) the files are shorter than the rows written (changed on disk).
        """
        limit = max(1, check_budget(memory_budget) // 8 // PIECE_BYTES)
        names = [self.folder / name for name in ("lengths.bin", "columns.bin", "weights.bin")]

        def blocks():
            with (
                open(names[0], "rb") as lengths_file,
                open(names[1], "rb") as columns_file,
                open(names[2], "rb") as weights_file,
            ):
                left = self.rows
                while left > 0:
                    lengths = np.fromfile(lengths_file, np.int64, count=min(limit, left))
                    if lengths.size == 0:
                        raise ValueError(f"{names[0]}: {left} rows missing: the spilled rows changed on disk")
                    left -= lengths.size
                    ptr = np.zeros(lengths.size + 1, np.int64)
                    np.cumsum(lengths, out=ptr[1:])
                    start = 0
                    while start < lengths.size:
                        end = _block_end(ptr, start, lengths.size, limit)
                        count = int(ptr[end] - ptr[start])
                        columns = np.fromfile(columns_file, self.col_type, count=count)
                        weights = np.fromfile(weights_file, np.float32, count=count)
                        if columns.size != count or weights.size != count:
                            raise ValueError(f"{self.folder}: entries missing: the spilled rows changed on disk")
                        part = sp.csr_matrix(
                            (weights, columns, ptr[start : end + 1] - ptr[start]), shape=(end - start, self.vocab_size)
                        )
                        yield canonical(part)
                        start = end

        return blocks
