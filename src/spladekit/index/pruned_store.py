"""The pruned copy of an index's postings, stored in the index folder (``INDEX/pruned/``): what the
first step of two-step search reads (:mod:`spladekit.index.two_step`).

Every document vector of the index (``docs.*.npy``) pruned by one rule
(:class:`spladekit.model.pruning.PruningRule`), kept term-major like the index's own postings::

    pruned.json            {"rule": {"kind", "value"}, "content_hash": the index's, "num_docs",
                            "vocab_size", "nnz", "postings_hash"}  (checked: :func:`load`)
    postings.indptr.npy    CSR [V, D] of the pruned documents: one posting list per term (document
    postings.indices.npy   rows ascending), impacts as the index stores them (a kept weight is never
    postings.data.npy      changed)

Resumable: the copy is built in ``INDEX/.pruned.build/`` (``build.json`` names the rule, the content
hash and the row ranges); the documents are pruned range by range, each range's rows stored in a file
of their own written atomically (:func:`spladekit.io.atomic_write`), so a build killed at any moment
(SIGKILL included) keeps every range already stored and one started again with the same settings
prunes only the rest. The postings are then written from those files by the index writer
(:func:`spladekit.index.writer.write_arrays`: sorted runs and their merge, within the memory budget)
into a folder that replaces ``pruned/`` whole (:func:`spladekit.io.replace_folder`): a reader finds the
old copy or the new one, never a part.

Example::

    >>> import numpy as np, scipy.sparse as sp, tempfile
    >>> from spladekit.index.index import Index
    >>> docs = sp.csr_matrix(np.array([[3, 1, 0], [0, 2, 5]], dtype=np.float32))
    >>> index = Index.from_vectors(tempfile.mkdtemp() + "/i", docs, ["a", "b"])
    >>> index.pruned("top_k=1").postings.toarray()
    array([[3., 0.],
           [0., 0.],
           [0., 5.]], dtype=float32)
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.layout import DEFAULT_BUDGET, PARTS
from spladekit.io import read_json

log = logging.getLogger(__name__)

FOLDER = "pruned"
WORK = ".pruned.build"
RECORD = "pruned.json"
RECORD_KEYS = ("rule", "content_hash", "num_docs", "vocab_size", "nnz", "postings_hash")
RANGE = "range-{:06d}.npz"
ENTRY_BYTES = 64
"""Working bytes per entry of a range being pruned (the rule's sort keys, order and copies):
a range holds at most ``memory_budget / ENTRY_BYTES`` entries."""
REMEDY = "delete the pruned/ folder to rebuild it"


@dataclass
class PrunedCopy:
    """The pruned copy of an index, open (arrays memory-mapped).

    Attributes:
        rule: the record of the rule the documents were pruned by (``{"kind", "value"}``).
        postings: ``[V, D]`` CSR of the pruned documents (read-only).
        record: ``pruned.json``.
        built: what opening it built and stored, as a phrase for the user; None when reopened.
    """

    rule: dict
    postings: sp.csr_matrix
    record: dict
    built: str | None = None


# ----------------------------------------------------------------------------------- open or build
def open_or_build(
    folder: Path,
    docs: sp.csr_matrix,
    full: sp.csr_matrix,
    content_hash: str | None,
    rule=None,
    memory_budget: int = DEFAULT_BUDGET,
    on_range: Callable[[int], None] | None = None,
    default=None,
    max_entries: int | None = None,
) -> PrunedCopy:
    """The pruned copy of the index folder ``folder`` (documents ``docs`` ``[D, V]`` and postings
    ``full`` ``[V, D]``, canonical CSR): reopened
    from ``folder/pruned`` when it holds ``rule`` (None: whatever rule it holds); else built with
    ``rule`` (None: ``default``), resuming a killed build (module docstring), and stored there in place
    of another rule's copy.

    Args:
        memory_budget: bytes of working memory of the build (:func:`spladekit.index.writer.check_budget`).
        on_range: called with each range's number once it is stored (progress; tests stop a build here).
        default: the rule built when ``rule`` is None and no copy is stored.
        max_entries: entries of a range, given directly instead of through ``memory_budget`` (ranges
            smaller than the least budget makes: tests of a killed build on small corpora).

    Raises:
        DataFormatError: a stored copy that is not the pruning of this index (:func:`load`), or a link
            out of the index folder (:func:`check_links`), naming the file.
        ValueError: an invalid rule, or none given and none stored; a budget out of range.
    """
    from spladekit.index.writer import check_budget
    from spladekit.model.pruning import record_of

    budget = check_budget(memory_budget)
    asked = record_of(rule)
    check_links(Path(folder))
    target = Path(folder) / FOLDER
    if (target / RECORD).exists():
        stored = load(target, full, content_hash)
        if asked is None or stored.rule == asked:
            return stored
    asked = asked or record_of(default)
    if asked is None:
        raise ValueError(f"{folder}: holds no pruned copy; give the pruning rule to build it with")
    try:
        build(Path(folder), docs, content_hash, asked, budget, on_range, max_entries)
    except OSError as exc:  # a read-only index folder: pruned in memory for this process only
        log.warning("%s: cannot store the pruned copy (%s); it is kept for this process only", target, exc)
        return in_memory(docs, asked)
    copy = load(target, full, content_hash)
    copy.built = f"the pruned copy ({asked['kind']}={asked['value']}) and stored it in {target}"
    return copy


def in_memory(docs: sp.csr_matrix, rule: dict) -> PrunedCopy:
    """The pruned copy of ``docs`` built in memory (no file): ``[V, D]`` postings of ``prune(docs, rule)``."""
    from spladekit.model.pruning import prune

    postings = sp.csr_matrix(prune(docs, rule).T)
    postings.sort_indices()
    return PrunedCopy(rule, postings, {"rule": rule, "nnz": int(postings.nnz)})


def ranges(indptr: np.ndarray, max_entries: int) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[start, stop)`` of at most ``max_entries`` entries each by the row
    pointers ``indptr`` (a longer single row is a range of its own); one empty range for no rows."""
    rows = indptr.size - 1
    cuts, start = [], 0
    while start < rows:
        stop = int(np.searchsorted(indptr, int(indptr[start]) + max_entries, side="right")) - 1
        stop = min(rows, max(stop, start + 1))
        cuts.append((start, stop))
        start = stop
    return cuts or [(0, 0)]


def build(
    folder: Path,
    docs: sp.csr_matrix,
    content_hash: str | None,
    rule: dict,
    memory_budget: int = DEFAULT_BUDGET,
    on_range: Callable[[int], None] | None = None,
    max_entries: int | None = None,
) -> dict:
    """Prune ``docs`` range by range into ``folder/.pruned.build`` (resuming: module docstring), write
    the postings and ``pruned.json`` and put them in place of ``folder/pruned``; returns the record.
    A range holds at most ``max_entries`` entries (None: ``memory_budget /`` :data:`ENTRY_BYTES`).

    Raises:
        OSError: the folder cannot be written.
    """
    from spladekit.index.chunks import resume_build_folder

    work = folder / WORK
    cuts = ranges(np.asarray(docs.indptr), int(max_entries) if max_entries else max(1, memory_budget // ENTRY_BYTES))
    fingerprint = {
        "rule": rule,
        "content_hash": content_hash,
        "shape": list(docs.shape),
        "ranges": [list(c) for c in cuts],
    }
    resume_build_folder(work, fingerprint, "a build of another pruned copy")
    _prune_each(work, docs, rule, cuts, on_range)
    return _finish(folder, work, docs.shape, content_hash, rule, len(cuts), memory_budget)


def _prune_each(
    work: Path, docs: sp.csr_matrix, rule: dict, cuts: list[tuple[int, int]], on_range: Callable[[int], None] | None
) -> None:
    """Prune and store each range not stored yet in ``work`` (``range-NNNNNN.npz``, atomically)."""
    from spladekit.index.layout import release_mapped_pages
    from spladekit.io import atomic_write
    from spladekit.model.pruning import prune

    for number, (start, stop) in enumerate(cuts):
        path = work / RANGE.format(number)
        if path.exists() and _stored_range(path) == [start, stop]:
            continue  # stored by an earlier (killed) run
        a, b = int(docs.indptr[start]), int(docs.indptr[stop])
        rows = sp.csr_matrix(
            (
                np.array(docs.data[a:b]),
                np.array(docs.indices[a:b]),
                np.asarray(docs.indptr[start : stop + 1], np.int64) - a,
            ),
            shape=(stop - start, docs.shape[1]),
        )
        kept = prune(rows, rule)
        with atomic_write(path, "wb", encoding=None) as handle:
            np.savez(handle, data=kept.data, indices=kept.indices, indptr=kept.indptr, range=np.array([start, stop]))
        del rows, kept
        release_mapped_pages(docs.data, docs.indices)  # the range's pages leave the resident set
        if on_range is not None:
            on_range(number)


def _stored_range(path: Path) -> list[int] | None:
    """The ``[start, stop]`` a stored range file holds, None when it cannot be read (pruned again)."""
    try:
        with np.load(path) as f:
            return [int(n) for n in f["range"]]
    except (OSError, ValueError, KeyError):
        return None


def _range_blocks(work: Path, count: int, vocab_size: int):
    """The stored ranges as canonical ``[rows, V]`` CSR blocks, in row order (a factory: called twice)."""

    def blocks():
        for number in range(count):
            with np.load(work / RANGE.format(number)) as f:
                start, stop = (int(n) for n in f["range"])
                yield sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=(stop - start, vocab_size))

    return blocks


def _finish(
    folder: Path,
    work: Path,
    shape: tuple[int, int],
    content_hash: str | None,
    rule: dict,
    count: int,
    memory_budget: int,
) -> dict:
    """Write the postings of the stored ranges and ``pruned.json`` into ``work/done``, put it in place
    of ``folder/pruned`` and remove the work folder; returns the record."""
    from spladekit.index.writer import HASH_BYTES, hash_files, write_arrays
    from spladekit.io import replace_folder, write_json

    done = work / "done"
    shutil.rmtree(done, ignore_errors=True)  # a write killed part way
    done.mkdir()
    num_docs, vocab_size = int(shape[0]), int(shape[1])
    nnz = write_arrays(
        done, _range_blocks(work, count, vocab_size), num_docs, vocab_size, memory_budget, documents=False
    )
    postings_hash = hash_files(done, "postings", (), (vocab_size, num_docs), max(1, memory_budget // 4 // HASH_BYTES))
    record = {
        "rule": rule,
        "content_hash": content_hash,
        "num_docs": num_docs,
        "vocab_size": vocab_size,
        "nnz": int(nnz),
        "postings_hash": postings_hash,
    }
    write_json(done / RECORD, record)
    replace_folder(done, folder / FOLDER)
    shutil.rmtree(work, ignore_errors=True)
    return record


# ----------------------------------------------------------------------------------- read and check
def stored_rule(folder: Path) -> dict | None:
    """The rule record of the copy stored in the index folder ``folder`` (None: none stored).

    Raises:
        DataFormatError: ``pruned.json`` cannot be read or holds no valid rule; a link out of the
            index folder (:func:`check_links`).
    """
    check_links(Path(folder))
    path = Path(folder) / FOLDER / RECORD
    return _check_record(read_json(path), path)["rule"] if path.exists() else None


def check_links(folder: Path) -> None:
    """Refuse ``pruned/``, anything in it, or ``.pruned.build/`` that is a link out of the index folder
    ``folder`` (:func:`spladekit.index.layout.refuse_links_out`).

    Raises:
        DataFormatError: naming the link and where it leads.
    """
    from spladekit.index.layout import refuse_links_out

    refuse_links_out(folder, (FOLDER, WORK), REMEDY)


def _check_record(stored, path: Path) -> dict:
    """``pruned.json`` checked for form (its entries, a valid rule).

    Raises:
        DataFormatError: naming the file and the entry at fault.
    """
    from spladekit.model.pruning import record_problem

    if not isinstance(stored, dict):
        raise DataFormatError(path, f"expected a JSON object; {REMEDY}")
    missing = [key for key in RECORD_KEYS if key not in stored]
    if missing:
        raise DataFormatError(path, f"no {missing[0]!r} entry; {REMEDY}", field=missing[0])
    problem = record_problem(stored["rule"]) if stored["rule"] is not None else "a pruning rule"
    if problem:
        raise DataFormatError(path, f"must be {problem}; {REMEDY}", field="rule")
    for key in ("num_docs", "vocab_size", "nnz"):
        if isinstance(stored[key], bool) or not isinstance(stored[key], int) or stored[key] < 0:
            raise DataFormatError(path, f"must be an integer ≥ 0, got {stored[key]!r}; {REMEDY}", field=key)
    return stored


def load(target: Path, full: sp.csr_matrix, content_hash: str | None) -> PrunedCopy:
    """Reopen the copy stored in ``target`` (``INDEX/pruned``) of the index whose ``[V, D]`` postings
    are ``full`` and whose content hash is ``content_hash``, checked cheaply against them: ``pruned.json``'s form,
    content hash, shape and count; the arrays' shapes and types; and the posting lists of the first,
    the last and the longest non-empty term, each a part of the index's list of that term with the
    same impacts (a copy of another index, or altered, is refused). The SHA-256 of the arrays is
    compared by :func:`verify` (``Index.verify``).

    Raises:
        DataFormatError: naming the file at fault and what is wrong (``pruned.json``, an array, or a
            link out of the index folder: :func:`check_links`).
    """
    from spladekit.model.pruning import record_of

    check_links(target.parent)
    path = target / RECORD
    record = _check_record(read_json(path), path)
    if record["content_hash"] != content_hash:
        raise DataFormatError(
            path,
            f"made from another index (content_hash {record['content_hash']!r}, this index's {content_hash!r}): "
            f"not this index's pruned copy; {REMEDY}",
            field="content_hash",
        )
    if [record["vocab_size"], record["num_docs"]] != [int(n) for n in full.shape]:
        raise DataFormatError(
            path,
            f"describes {record['num_docs']} documents and {record['vocab_size']} terms where the index "
            f"holds {full.shape[1]} and {full.shape[0]}; {REMEDY}",
            field="num_docs",
        )
    postings = _read_postings(target, record, full.nnz)
    _check_lists(target, postings, full)
    return PrunedCopy(record_of(record["rule"]), postings, record)


def _read_postings(target: Path, record: dict, full_nnz: int) -> sp.csr_matrix:
    """The ``[V, D]`` CSR of ``postings.*.npy``, memory-mapped, checked against ``pruned.json``.

    Raises:
        DataFormatError: an array missing, unreadable (a pickled object included), of the wrong shape or type.
    """
    arrays = {}
    for part in PARTS:
        path = target / f"postings.{part}.npy"
        if not path.exists():
            raise DataFormatError(path, f"missing: the pruned copy is incomplete; {REMEDY}")
        try:
            arrays[part] = np.load(path, mmap_mode="r")  # allow_pickle=False: an object array is refused
        except (ValueError, OSError) as exc:
            raise DataFormatError(path, f"cannot read ({exc}); {REMEDY}") from exc
    indptr, indices, data = (arrays[part] for part in PARTS)
    vocab_size, num_docs, nnz = record["vocab_size"], record["num_docs"], record["nnz"]
    if indptr.shape != (vocab_size + 1,) or indptr.dtype not in (np.int32, np.int64) or indptr.dtype != indices.dtype:
        raise DataFormatError(
            target / "postings.indptr.npy",
            f"expected {vocab_size + 1} int32 or int64 offsets, the type of postings.indices.npy; {REMEDY}",
        )
    if indices.shape != (nnz,) or data.shape != (nnz,) or data.dtype != np.float32 or nnz > full_nnz:
        raise DataFormatError(
            target / "postings.data.npy",
            f"expected {nnz} float32 impacts and as many rows (pruned.json's nnz, "
            f"at most the index's {full_nnz}); {REMEDY}",
        )
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz or (vocab_size and np.any(np.diff(indptr) < 0)):
        raise DataFormatError(target / "postings.indptr.npy", f"offsets must rise from 0 to nnz {nnz}; {REMEDY}")
    postings = sp.csr_matrix((data, indices, indptr), shape=(vocab_size, num_docs), copy=False)
    postings.has_sorted_indices = True
    return postings


def _check_lists(target: Path, postings: sp.csr_matrix, full: sp.csr_matrix) -> None:
    """The first, last and longest non-empty posting lists of the copy, each a part of the index's
    list of its term (``full``: the index's ``[V, D]`` postings; rows found there, impacts equal).

    Raises:
        DataFormatError: naming ``postings.indices.npy`` and the term.
    """
    lengths = np.diff(np.asarray(postings.indptr))
    filled = np.flatnonzero(lengths)
    if not filled.size:
        return
    for term in sorted({int(filled[0]), int(filled[-1]), int(np.argmax(lengths))}):
        a, b = int(postings.indptr[term]), int(postings.indptr[term + 1])
        rows, impacts = np.asarray(postings.indices[a:b]), np.asarray(postings.data[a:b])
        c, d = int(full.indptr[term]), int(full.indptr[term + 1])
        whole = np.asarray(full.indices[c:d])
        ok = whole.size >= rows.size and bool(np.all(rows[1:] > rows[:-1]))
        if ok:
            at = np.minimum(np.searchsorted(whole, rows), whole.size - 1)
            ok = bool(np.all(whole[at] == rows)) and bool(np.all(np.asarray(full.data[c:d])[at] == impacts))
        if not ok:
            raise DataFormatError(
                target / "postings.indices.npy",
                f"the posting list of term {term} is not part of the index's "
                f"(rows or impacts differ): another index's copy, or altered; {REMEDY}",
            )


def verify(target: Path, content_hash: str | None, full: sp.csr_matrix) -> None:
    """Recompute the SHA-256 of the stored copy's arrays and compare it with ``pruned.json``'s
    ``postings_hash`` (after :func:`load`'s checks), when ``target`` holds a copy. Reads every array once.

    Raises:
        DataFormatError: the hash differs (naming ``pruned.json``), or :func:`load`'s refusals.
    """
    from spladekit.index.layout import hash_arrays

    if not (target / RECORD).exists():
        return
    copy = load(target, full, content_hash)
    p = copy.postings
    if hash_arrays(p.indptr, p.indices, p.data, (), p.shape) != copy.record["postings_hash"]:
        raise DataFormatError(
            target / RECORD,
            f"postings_hash does not match postings.*.npy (altered or damaged); {REMEDY}",
            field="postings_hash",
        )
