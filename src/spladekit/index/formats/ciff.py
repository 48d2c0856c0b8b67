"""CIFF, the Common Index File Format (Lin et al., "Supporting Interoperability Between Open-Source
Search Engines with the Common Index File Format", SIGIR 2020; schema ``CommonIndexFileFormat.proto``
of github.com/osirrc/ciff): the postings interchange file that PISA (``ciff2pisa``), BMP
(``bmp.ciff2bmp``), Anserini and Terrier read.

A CIFF file is a stream of length-delimited protobuf messages (each preceded by its byte length as
a varint): one ``Header``, then ``num_postings_lists`` ``PostingsList`` (``term``, ``df``, ``cf``
and the postings ``(docid, tf)`` with *d-gap* docids: the first absolute, each next one the
difference to the previous), then ``num_docs`` ``DocRecord`` (``docid``, ``collection_docid``,
``doclength``) in docid order.

spladekit writes (:func:`write_ciff`):

* ``term`` = the vocabulary token of the column (``vocab.json``); lists in Python string order of
  the tokens; a term with no posting after quantisation is left out;
* ``docid`` = the document row, ``collection_docid`` = the document id;
* ``tf`` = the integer impact ``⌊w · scale + 1/2⌋`` (:func:`spladekit.index.formats.quantise`),
  postings whose impact rounds to 0 are left out; ``cf`` = Σ tf of the list, ``df`` = its length;
* ``doclength`` = Σ tf of the document (what an impact index has for a length);
  ``total_terms_in_collection`` = Σ tf, ``average_doclength`` = that over ``num_docs``.

The messages are the protobuf library's (classes made from the schema at import; no generated code
to keep); the posting lists, the bulk of a file, are encoded with numpy in protobuf's wire format
(fields in number order, zero values omitted: the bytes ``SerializeToString`` gives, which
``tests/index/formats/test_ciff.py`` checks), since one protobuf object per posting would cost more than the
rest of the export (``benchmarks/runs/2026-12-07-source-notes.md``).
:func:`read_ciff` parses with the protobuf library.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError, require_extra
from spladekit.index.formats import check_scale, divide_by_scale, quantise, token_index

VERSION = 1
PROTO_PACKAGE = "io.osirrc.ciff"


def require_protobuf() -> None:
    """Raise :class:`~spladekit.errors.MissingExtraError` (an ``ImportError`` with the install line)
    when ``protobuf``, which reads and writes CIFF, is not installed."""
    require_extra("google.protobuf", "CIFF export and import", "protobuf", "ciff")


@functools.cache
def messages() -> dict:
    """The CIFF message classes ``{"Header", "Posting", "PostingsList", "DocRecord"}`` (protobuf),
    from the CIFF schema (field names, numbers and types as in ``CommonIndexFileFormat.proto``)."""
    require_protobuf()
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    schema = {
        "Header": [
            ("version", F.TYPE_INT32),
            ("num_postings_lists", F.TYPE_INT32),
            ("num_docs", F.TYPE_INT32),
            ("total_postings_lists", F.TYPE_INT32),
            ("total_docs", F.TYPE_INT32),
            ("total_terms_in_collection", F.TYPE_INT64),
            ("average_doclength", F.TYPE_DOUBLE),
            ("description", F.TYPE_STRING),
        ],
        "Posting": [("docid", F.TYPE_INT32), ("tf", F.TYPE_INT32)],
        "PostingsList": [
            ("term", F.TYPE_STRING),
            ("df", F.TYPE_INT64),
            ("cf", F.TYPE_INT64),
            ("postings", F.TYPE_MESSAGE),
        ],
        "DocRecord": [("docid", F.TYPE_INT32), ("collection_docid", F.TYPE_STRING), ("doclength", F.TYPE_INT32)],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="spladekit_ciff.proto", package=PROTO_PACKAGE, syntax="proto3")
    for name, fields in schema.items():
        message = proto.message_type.add(name=name)
        for number, (field, kind) in enumerate(fields, 1):
            entry = message.field.add(name=field, number=number, type=kind, label=F.LABEL_OPTIONAL)
            if kind == F.TYPE_MESSAGE:
                entry.label, entry.type_name = F.LABEL_REPEATED, f".{PROTO_PACKAGE}.Posting"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PROTO_PACKAGE}.{name}")) for name in schema
    }


# ----------------------------------------------------------------------------------- wire format
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint_columns(values: np.ndarray, width: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Per value (``[n]`` non-negative, < 2^35) its varint bytes ``[n, width]`` and their count ``[n]``."""
    v = values.astype(np.uint64)
    shifts = 7 * np.arange(width, dtype=np.uint64)
    groups = ((v[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    count = 1 + (v[:, None] >= (np.uint64(1) << shifts[1:])).sum(axis=1)
    groups[np.arange(width) < (count[:, None] - 1)] |= 0x80  # continuation bit on all but the last byte
    return groups, count


def postings_list_bytes(term: str, docids: np.ndarray, tfs: np.ndarray) -> bytes:
    """The serialised ``PostingsList`` of ascending ``docids`` with impacts ``tfs`` (≥ 1): protobuf's
    wire format, fields in number order, zero-valued fields omitted (as ``SerializeToString``)."""
    gaps = np.diff(np.asarray(docids, dtype=np.int64), prepend=0)
    gap_bytes, gap_count = _varint_columns(gaps)
    tf_bytes, tf_count = _varint_columns(np.asarray(tfs, dtype=np.int64))
    has_gap = gaps != 0
    n = gaps.size
    # one posting = 0x22, its length, [0x08 gap varint] (if gap ≠ 0), 0x10 tf varint: at most 14 bytes
    table = np.zeros((n, 14), np.uint8)
    keep = np.zeros((n, 14), bool)
    table[:, 0], table[:, 2], table[:, 8] = 0x22, 0x08, 0x10
    table[:, 1] = has_gap * (1 + gap_count) + 1 + tf_count
    table[:, 3:8], table[:, 9:14] = gap_bytes, tf_bytes
    keep[:, :2] = True
    keep[:, 2] = has_gap
    keep[:, 3:8] = has_gap[:, None] & (np.arange(5) < gap_count[:, None])
    keep[:, 8] = True
    keep[:, 9:14] = np.arange(5) < tf_count[:, None]
    encoded = term.encode("utf-8")
    head = b"\x0a" + _varint(len(encoded)) + encoded
    if n:
        head += b"\x10" + _varint(n) + b"\x18" + _varint(int(np.asarray(tfs, dtype=np.int64).sum()))
    return head + table[keep].tobytes()


def _write_delimited(file: BinaryIO, payload: bytes) -> None:
    file.write(_varint(len(payload)))
    file.write(payload)


# ----------------------------------------------------------------------------------- write / read
BLOCK = 1 << 22  # entries per step of the counting pass


def write_ciff(
    path: str | Path,
    docs: sp.csr_matrix,
    postings: sp.csr_matrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str],
    scale: float = 100.0,
    description: str = "spladekit",
) -> dict:
    """Write impacts as a CIFF file (module docstring) from both layouts of an index: ``docs``
    ``[D, V]`` (document lengths and counts, read in blocks) and ``postings`` ``[V, D]`` (the lists,
    one at a time): an index folder's memory-mapped arrays are read in place.

    Returns:
        ``{"num_postings_lists", "num_docs", "postings", "max_tf"}``.

    Raises:
        ValueError: vocabulary of the wrong length or with a repeated token, ids of the wrong
            number, shapes that differ, a bad ``scale``, or an impact beyond CIFF's int32.
        MissingExtraError: protobuf is not installed (checked first).
    """
    require_protobuf()
    scale = check_scale(scale)
    num_docs, num_terms = docs.shape
    if postings.shape != (num_terms, num_docs):
        raise ValueError(f"postings {postings.shape} are not the transpose of documents {docs.shape}")
    if len(vocabulary) != num_terms:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens for {num_terms} columns")
    if len(set(vocabulary)) != num_terms:
        raise ValueError("vocabulary tokens repeat: CIFF names a posting list by its term")
    if len(doc_ids) != num_docs:
        raise ValueError(f"{len(doc_ids)} document ids for {num_docs} documents")
    lengths = np.zeros(num_docs, np.int64)
    df = np.zeros(num_terms, np.int64)
    d_ptr = np.asarray(docs.indptr, dtype=np.int64)
    max_tf = 0
    step = max(1, BLOCK // (int(d_ptr[-1]) // max(1, num_docs) + 1))  # rows per step: ≈ BLOCK entries
    for start in range(0, num_docs, step):
        stop = min(num_docs, start + step)
        a, b = d_ptr[start], d_ptr[stop]
        tfs = quantise(docs.data[a:b], scale)
        rows = np.repeat(np.arange(start, stop), np.diff(d_ptr[start : stop + 1]))
        lengths[start:stop] = np.bincount(rows - start, weights=tfs, minlength=stop - start).astype(np.int64)
        df += np.bincount(np.asarray(docs.indices[a:b])[tfs > 0], minlength=num_terms)
        max_tf = max(max_tf, int(tfs.max()) if tfs.size else 0)
    if max_tf >= 2**31:
        raise ValueError(f"impact {max_tf} at scale {scale:g} does not fit CIFF's int32 tf")
    m = messages()
    total = int(lengths.sum())
    lists = int((df > 0).sum())
    header = m["Header"](
        version=VERSION,
        num_postings_lists=lists,
        num_docs=num_docs,
        total_postings_lists=lists,
        total_docs=num_docs,
        total_terms_in_collection=total,
        average_doclength=total / num_docs if num_docs else 0.0,
        description=description,
    )
    p_ptr = np.asarray(postings.indptr, dtype=np.int64)
    with open(path, "wb") as file:
        _write_delimited(file, header.SerializeToString())
        for j in sorted(np.flatnonzero(df).tolist(), key=lambda j: vocabulary[j]):
            a, b = p_ptr[j], p_ptr[j + 1]
            tfs = quantise(postings.data[a:b], scale)
            keep = tfs > 0
            _write_delimited(
                file, postings_list_bytes(vocabulary[j], np.asarray(postings.indices[a:b])[keep], tfs[keep])
            )
        record = m["DocRecord"]
        for row, (doc_id, length) in enumerate(zip(doc_ids, lengths.tolist())):
            _write_delimited(file, record(docid=row, collection_docid=doc_id, doclength=length).SerializeToString())
    return {"num_postings_lists": lists, "num_docs": num_docs, "postings": int(df.sum()), "max_tf": max_tf}


def _read_delimited(file: BinaryIO, path: Path, what: str) -> bytes:
    size, shift = 0, 0
    while True:
        byte = file.read(1)
        if not byte:
            raise DataFormatError(path, f"ends before its {what}: truncated CIFF file")
        size |= (byte[0] & 0x7F) << shift
        shift += 7
        if not byte[0] & 0x80:
            break
        if shift >= 64:  # a protobuf varint has at most 10 bytes
            raise DataFormatError(path, f"the length of its {what} is not a varint: damaged CIFF file")
    try:
        left = os.fstat(file.fileno()).st_size - file.tell()
    except (AttributeError, OSError, ValueError):  # not a real file: read() below checks the length
        left = size
    if size > left:
        raise DataFormatError(
            path,
            f"its {what} declares {size} bytes, more than the {left} left in the file: damaged or truncated CIFF file",
        )
    payload = file.read(size)
    if len(payload) != size:
        raise DataFormatError(path, f"ends inside its {what}: truncated CIFF file")
    return payload


def _read_lists(file: BinaryIO, path: Path, columns: dict) -> Iterator:
    """The header's document count (first item), then each posting list as ``(column, docids int64 [n] ascending, tfs int64 [n])``,
    checked (a term in the vocabulary and given once, docids rising inside ``[0, num_docs)``); then,
    once the lists are read, :func:`_read_records` reads the document records."""
    m = messages()
    header = m["Header"].FromString(_read_delimited(file, path, "header"))
    for name in ("num_docs", "num_postings_lists"):
        if getattr(header, name) < 0:
            raise DataFormatError(path, f"header: {name} {getattr(header, name)} is negative", field=name)
    num_docs, seen = header.num_docs, set()
    yield num_docs  # the first item: the document count
    for number in range(header.num_postings_lists):
        plist = m["PostingsList"].FromString(_read_delimited(file, path, f"posting list {number}"))
        if plist.term not in columns or plist.term in seen:
            problem = "is given twice" if plist.term in seen else "is not in the vocabulary"
            raise DataFormatError(path, f"posting list {number}: term {plist.term!r} {problem}")
        seen.add(plist.term)
        n = len(plist.postings)
        docids = np.cumsum(np.fromiter((p.docid for p in plist.postings), np.int64, count=n))
        if n and (docids[0] < 0 or docids[-1] >= num_docs or np.any(np.diff(docids) <= 0)):
            raise DataFormatError(
                path, f"posting list {number} ({plist.term!r}): docids must rise inside [0, {num_docs})"
            )
        tfs = np.fromiter((p.tf for p in plist.postings), np.int64, count=n)
        if plist.df != n:  # cf (Σ tf) is not checked: writers differ on it for impacts, and it is not read
            raise DataFormatError(path, f"posting list {number} ({plist.term!r}): df {plist.df} but {n} postings")
        if n and tfs.min() < 0:
            bad = int(np.argmax(tfs < 0))
            raise DataFormatError(
                path,
                f"posting list {number} ({plist.term!r}): tf {int(tfs[bad])} at docid {int(docids[bad])}: "
                "an impact is ≥ 0",
            )
        column = columns[plist.term]
        del plist  # the parsed message is freed before the caller works on the arrays
        yield column, docids, tfs


def _read_records(file: BinaryIO, path: Path, num_docs: int) -> Iterator[str]:
    """The ``collection_docid`` of each document record, in docid order, then the check that
    nothing follows the last one."""
    record = messages()["DocRecord"]
    for number in range(num_docs):
        rec = record.FromString(_read_delimited(file, path, f"document record {number}"))
        if rec.docid != number:
            raise DataFormatError(
                path, f"document record {number} has docid {rec.docid}: records must come in docid order"
            )
        doc_id = rec.collection_docid
        if not doc_id or any(c.isspace() for c in doc_id):  # the rule of spladekit.data.beir's ids
            raise DataFormatError(
                path,
                f"document record {number}: collection_docid {doc_id!r} is "
                f"{'empty' if not doc_id else 'holding white space, which a TREC run file cannot hold'}",
                field="collection_docid",
            )
        yield doc_id
    extra = len(file.read(1 << 16))
    if extra:  # a CIFF stream ends with its last document record: anything after it is damage
        raise DataFormatError(
            path,
            f"{extra}{'+' if extra == 1 << 16 else ''} bytes after the last document record "
            f"({num_docs} announced by the header): not one CIFF stream",
        )


def read_ciff(path: str | Path, vocabulary: Sequence[str], scale: float = 100.0) -> tuple[sp.csr_matrix, list[str]]:
    """Read a CIFF file: ``([D, V] float32 weights tf / scale, D collection doc ids)``, whole, in
    memory (the lists come term by term; ``spladekit import --format ciff`` therefore holds this CSR,
    while the row-major formats are streamed: :func:`spladekit.index.export.import_to_index`).

    Raises:
        DataFormatError: a truncated or malformed message, bytes after the last document record, a
            negative count in the header, a term outside ``vocabulary`` or given twice, a ``df``
            other than the list's length, a negative ``tf``, a docid outside ``[0, num_docs)``,
            document records out of docid order, or a ``collection_docid`` empty or with white
            space (naming the file and the list or record).
        ValueError: a bad ``scale``.
    """
    require_protobuf()
    from google.protobuf.message import DecodeError

    scale = check_scale(scale)
    path = Path(path)
    columns = token_index(vocabulary)
    rows, cols, tfs = [], [], []
    with open(path, "rb") as file:
        try:
            lists = _read_lists(file, path, columns)
            num_docs = next(lists)
            for column, docids, impacts in lists:
                rows.append(docids)
                cols.append(np.full(docids.size, column, np.int64))
                tfs.append(impacts)
            ids = list(_read_records(file, path, num_docs))
        except DecodeError as exc:
            raise DataFormatError(path, f"not a CIFF protobuf stream ({exc})") from exc
    values = np.concatenate(tfs) if tfs else np.zeros(0, np.int64)
    matrix = sp.csr_matrix(
        (
            _weights(values, scale, path),
            (np.concatenate(rows) if rows else values, np.concatenate(cols) if cols else values),
        ),
        shape=(num_docs, len(vocabulary)),
    )
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    return matrix, ids


# ----------------------------------------------------------------------------------- bounded import
RUN_ENTRY_BYTES = 40
"""Bytes per posting of the run buffer: row, column and impact (int32 each) as gathered, the int64
sort key, its int64 argsort, and the sorted int32 copies written out."""
BLOCK_ENTRY_BYTES = 48
"""Bytes per entry of a merged document block: the entries read from the runs (3 × int32), the
int64 sort key and argsort, the CSR's int32 columns and float32 weights (the writer's piece rule)."""


def transposed_blocks(
    path: str | Path, vocabulary: Sequence[str], spill: str | Path, scale: float = 100.0, memory_budget: int = 1 << 30
) -> tuple[Sequence[str], int, Callable[[], Iterator[sp.csr_matrix]]]:
    """A CIFF file (term-major) as document-major CSR blocks, by an external transpose within
    ``memory_budget`` bytes: the lists are read once, their postings gathered into a buffer of
    ``memory_budget // RUN_ENTRY_BYTES`` entries; a full buffer is sorted by (row, column) and
    written to ``spill`` as a **sorted run** (three int32 ``.npy`` files); ``blocks()`` then merges
    the runs row range by row range (each run holds ascending rows, so a range is one contiguous
    slice of every run, found by binary search of its memory-mapped rows and read with plain reads),
    each block of at most ``memory_budget // 8 // BLOCK_ENTRY_BYTES`` entries (the share of the
    caller's blocks of :func:`spladekit.index.export.streamed_import`). The classic sort-based
    inversion (Witten, Moffat & Bell, "Managing Gigabytes", 2nd ed., §5.2), here from terms to documents.

    The blocks equal :func:`read_ciff`'s matrix, row range by row range: the same weights
    (``float32(tf / scale)``, tf 0 left out), columns ascending in each row.

    Held besides the budget: the ids (``D × (L + 16)`` bytes for ids of ``L`` UTF-8 bytes), the
    ``[D]`` int64 row counts, and the parsed protobuf message of one posting list (≈ 50 bytes a
    posting of the longest list). Disk: 12 bytes per posting in ``spill`` (the caller removes it).

    Returns:
        ``(the D ids, D, blocks)``.

    Raises:
        DataFormatError: as :func:`read_ciff` (while reading, before ``blocks`` is returned).
        ValueError: a bad ``scale``.
    """
    require_protobuf()
    from google.protobuf.message import DecodeError

    from spladekit.index.layout import DocIds

    scale = check_scale(scale)
    path, spill = Path(path), Path(spill)
    columns = token_index(vocabulary)
    runs = _SortedRuns(spill, max(1, int(memory_budget) // RUN_ENTRY_BYTES), len(vocabulary))

    with open(path, "rb") as file:
        try:
            lists = _read_lists(file, path, columns)
            num_docs = next(lists)
            counts = np.zeros(num_docs, np.int64)
            for column, docids, impacts in lists:
                if impacts.size and (impacts.min() < -(2**31) or impacts.max() >= 2**31):
                    raise DataFormatError(path, f"column {column}: an impact does not fit CIFF's int32 tf")
                keep = impacts != 0  # tf 0: no entry (read_ciff's eliminate_zeros)
                docids, impacts = docids[keep], impacts[keep]
                counts += np.bincount(docids, minlength=num_docs)
                runs.add(docids, column, impacts)
            runs.flush()
            runs.release()
            utf8, lengths = bytearray(), np.zeros(num_docs + 1, np.int64)
            for row, doc_id in enumerate(_read_records(file, path, num_docs)):
                encoded = doc_id.encode("utf-8")
                utf8 += encoded
                lengths[row + 1] = len(encoded)
        except DecodeError as exc:
            raise DataFormatError(path, f"not a CIFF protobuf stream ({exc})") from exc
    ids = DocIds(np.cumsum(lengths), np.frombuffer(utf8, dtype=np.uint8), path)
    indptr = np.zeros(num_docs + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    limit = max(1, int(memory_budget) // 8 // BLOCK_ENTRY_BYTES)

    def blocks() -> Iterator[sp.csr_matrix]:
        return _merged_blocks(runs.runs, indptr, limit, len(vocabulary), scale, path)

    return ids, num_docs, blocks


class _SortedRuns:
    """The sorted runs of an external transpose (:func:`transposed_blocks`): postings gathered into a
    buffer of ``capacity`` entries; a full buffer is sorted by (row, column) and written to ``spill``
    as three int32 ``.npy`` files (rows, columns, impacts).

    Attributes:
        runs: ``[(file stem, entries)]`` of the runs written, in order.
    """

    def __init__(self, spill: Path, capacity: int, vocab_size: int):
        self.spill, self.capacity, self.vocab_size = spill, capacity, vocab_size
        self.buffer = np.empty((3, capacity), np.int32)  # rows, columns, impacts
        self.held = 0
        self.runs: list[tuple[Path, int]] = []

    def add(self, docids: np.ndarray, column: int, impacts: np.ndarray) -> None:
        """One term's postings (a list longer than the room left spans runs)."""
        start = 0
        while start < docids.size:
            take = min(docids.size - start, self.capacity - self.held)
            self.buffer[0, self.held : self.held + take] = docids[start : start + take]
            self.buffer[1, self.held : self.held + take] = column
            self.buffer[2, self.held : self.held + take] = impacts[start : start + take]
            self.held += take
            start += take
            if self.held == self.capacity:
                self.flush()

    def flush(self) -> None:
        """Write the buffer's postings as a run, sorted by (row, column) (unique keys)."""
        if not self.held:
            return
        rows, cols, tfs = self.buffer[:, : self.held]
        order = np.argsort(rows.astype(np.int64) * self.vocab_size + cols)
        run = self.spill / f"run-{len(self.runs):06d}"
        for name, values in (("rows", rows), ("cols", cols), ("tfs", tfs)):
            np.save(f"{run}.{name}.npy", values[order])
        self.runs.append((run, self.held))
        self.held = 0

    def release(self) -> None:
        """Free the buffer (every posting is in the runs)."""
        self.buffer = None


def _merged_blocks(
    runs: list[tuple[Path, int]], indptr: np.ndarray, limit: int, vocab_size: int, scale: float, path: Path
) -> Iterator[sp.csr_matrix]:
    """The runs merged into document-major CSR blocks of at most ``limit`` entries (a longer row is a
    block of its own), row range by row range: each run holds ascending rows, so a range is one
    contiguous slice of every run, found by binary search of its memory-mapped rows."""
    num_docs = len(indptr) - 1
    cursors = [0] * len(runs)
    mapped = [np.load(f"{run}.rows.npy", mmap_mode="r") for run, _ in runs]  # only searched: a few pages each
    start = 0
    while start < num_docs:
        end = int(np.searchsorted(indptr, indptr[start] + limit, side="right")) - 1
        end = min(num_docs, max(end, start + 1))
        parts = []
        for r, (run, _) in enumerate(runs):
            stop = int(np.searchsorted(mapped[r], end, side="left"))
            if stop > cursors[r]:
                parts.append([_read_slice(f"{run}.{name}.npy", cursors[r], stop) for name in ("rows", "cols", "tfs")])
                cursors[r] = stop
        if parts:
            rows, cols, tfs = (np.concatenate([p[i] for p in parts]) for i in range(3))
            order = np.argsort((rows.astype(np.int64) - start) * vocab_size + cols)
            rows, cols, tfs = rows[order], cols[order], tfs[order]
        else:
            rows = cols = tfs = np.zeros(0, np.int32)
        block_ptr = np.zeros(end - start + 1, np.int64)
        np.cumsum(np.bincount(rows - start, minlength=end - start), out=block_ptr[1:])
        block = sp.csr_matrix((_weights(tfs, scale, path), cols, block_ptr), shape=(end - start, vocab_size))
        block.has_sorted_indices = True
        yield block
        start = end


def _weights(tfs: np.ndarray, scale: float, path: Path) -> np.ndarray:
    """float32 ``tf / scale`` of integer impacts (:func:`~spladekit.index.formats.divide_by_scale`).

    Raises:
        DataFormatError: the largest ``tf / scale`` is beyond float32's range, naming the file.
    """
    try:
        return divide_by_scale(tfs.astype(np.int64), scale).astype(np.float32)
    except ValueError as exc:
        raise DataFormatError(path, str(exc), field="tf") from exc


def _read_slice(path: str, first: int, stop: int) -> np.ndarray:
    """Values ``[first, stop)`` of a 1-D ``.npy`` file by a plain read (no memory map held)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(f)
        f.seek(first * dtype.itemsize, os.SEEK_CUR)
        return np.fromfile(f, dtype=dtype, count=stop - first)
