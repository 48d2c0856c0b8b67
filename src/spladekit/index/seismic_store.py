"""The Seismic index stored in an index folder (``INDEX/seismic/``): its configuration
(:class:`SeismicConfig`, the searcher ``seismic`` of :meth:`spladekit.index.index.Index.search`), the
rule by which asked build parameters meet the stored ones (:func:`resolve_build`), and the folder's
build, reopening and checks (:func:`open_or_build`, :func:`load`, :func:`verify_files`).

Layout::

    params.json            {"build": SeismicBuildParams, "content_hash", "empty", "memory_budget",
                            "max_entries", "shards": [[start, stop, empty], ...],
                            "shard_postings": "share", "shard_n_postings": [n, ...],
                            "shard_files": [[bytes, sha256] or null, ...]}  (checked: :func:`load`, :func:`verify_files`)
    index.index.seismic    one shard: its file beside params.json
    shard-000000/          several shards: one folder each (index.index.seismic, shard.json)
    shard-000001/ ...

A ``params.json`` without one of these entries (written by an older spladekit) is refused, naming the
file: delete the ``seismic/`` folder to rebuild it.

Resumable: shards are built in ``INDEX/.seismic.build/`` (``build.json`` names the content hash, the
parameters and the ranges); each shard folder is written atomically (:func:`spladekit.io.atomic_folder`),
so a killed build keeps every shard already stored and a build started again with the same settings
builds only the rest; the finished folder then replaces ``seismic/`` (:func:`spladekit.io.replace_folder`).
Each shard's build holds its own rows only: its CSR slice is read in place from the memory-mapped
folder, copied once into pyseismic's input, built, saved and freed before the next one starts, and
the pages of the map it read then leave the resident set (:func:`spladekit.index.layout.release_mapped_pages`).

Example::

    >>> import numpy as np, scipy.sparse as sp, tempfile
    >>> from spladekit.index.index import Index
    >>> from spladekit.index.seismic import SeismicBuildParams
    >>> docs = sp.csr_matrix(np.eye(4, dtype=np.float32))
    >>> index = Index.from_vectors(tempfile.mkdtemp() + "/i", docs, ["a", "b", "c", "d"])
    >>> config = SeismicConfig(build=SeismicBuildParams(n_postings=10))  # other build fields: the stored index's
    >>> index.search(sp.csr_matrix(docs[2]), k=1, searcher=config).hits
    [[('c', 1.0)]]
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from spladekit.errors import DataFormatError
from spladekit.index.searcher import Searcher, SearcherConfig
from spladekit.index.seismic import (
    SeismicBuildParams,
    SeismicSearcher,
    SeismicSearchParams,
    check_knn_documents,
    import_seismic,
)
from spladekit.index.seismic_rule import DEFAULT_SEISMIC_BUDGET, budget_for, max_shard_entries, rule_corpus
from spladekit.index.seismic_shards import SHARD_POSTINGS, ShardedSeismic, row_slice, shard_params, shard_ranges
from spladekit.io import read_json

log = logging.getLogger(__name__)

WORK = ".seismic.build"
SHARD = "shard-{:06d}"
RECORD_KEYS = (
    "build",
    "content_hash",
    "empty",
    "memory_budget",
    "max_entries",
    "shards",
    "shard_postings",
    "shard_n_postings",
    "shard_files",
)
"""The entries every ``params.json`` holds."""


class SeismicConfig(SearcherConfig):
    """Seismic search over the index stored in the index folder (built and stored on first use):
    :class:`~spladekit.index.seismic_shards.ShardedSeismic`.

    Attributes:
        search: the query-time parameters.
        build: build parameters asked for (None: the stored index as it is, else the defaults). Only
            the fields given replace the stored index's (:func:`resolve_build`); an index built
            otherwise is rebuilt and stored in its place.
        memory_budget: bytes of build memory of one shard (None: the stored index's shards, else
            :data:`~spladekit.index.seismic_rule.DEFAULT_SEISMIC_BUDGET`); another size rebuilds it.
    """

    name: ClassVar[str] = "seismic"
    searcher: ClassVar[type[Searcher]] = ShardedSeismic

    search: SeismicSearchParams = Field(default_factory=SeismicSearchParams)
    build: SeismicBuildParams | None = None
    memory_budget: int | None = None

    def check(self, index) -> None:
        """Refuse what cannot be searched, before any query is encoded or shard built.

        Raises:
            MissingExtraError: ``pyseismic-lsr`` is not installed.
            ValueError: ``search.n_knn`` above the ``nknn`` of the graph the stored (or asked) index holds.
            DataFormatError: the stored ``params.json`` cannot be read.
        """
        import_seismic()
        wanted = self.search.n_knn
        if wanted:
            graph = (resolve_build(index.folder, self.build) or stored_build(index.folder) or SeismicBuildParams()).nknn
            if wanted > graph:
                raise ValueError(
                    f"--n-knn {wanted} asks for more neighbours than the k-NN graph of {index.folder}'s Seismic index "
                    f"{'would hold' if self.build is not None else 'holds'} ({graph}): give --knn ≥ {wanted}, or a smaller --n-knn"
                )

    def open(self, index) -> ShardedSeismic:
        """The stored shards (:meth:`Index.seismic`, built there when missing or built otherwise),
        answering with :attr:`search`."""
        return index.seismic(resolve_build(index.folder, self.build), self.memory_budget).with_search(self.search)


def resolve_build(folder: Path, build: SeismicBuildParams | None) -> SeismicBuildParams | None:
    """The build parameters asked by ``build`` for the index folder ``folder``: the stored index's
    (else the defaults) with the fields set in ``build`` (pydantic's ``model_fields_set``) replaced;
    None when ``build`` is None (the stored index as it is).

    Raises:
        DataFormatError: the stored ``params.json`` cannot be read.
    """
    if build is None:
        return None
    base = stored_build(folder) or SeismicBuildParams()
    return base.model_copy(update={name: getattr(build, name) for name in build.model_fields_set})


def stored_build(folder: Path) -> SeismicBuildParams | None:
    """The build parameters of the Seismic index stored in the index folder ``folder`` (None: none stored).

    Raises:
        DataFormatError: ``seismic/params.json`` cannot be read, or does not hold valid parameters.
    """
    check_links(Path(folder))
    target = Path(folder) / "seismic"
    return _stored_build(read_json(target / "params.json"), target) if (target / "params.json").exists() else None


def check_links(folder: Path) -> None:
    """Refuse ``seismic/``, anything in it, or ``.seismic.build/`` that is a link out of the index
    folder ``folder`` (:func:`spladekit.index.layout.refuse_links_out`).

    Raises:
        DataFormatError: naming the link and where it leads.
    """
    from spladekit.index.layout import refuse_links_out

    refuse_links_out(folder, ("seismic", WORK), "delete the seismic/ folder to rebuild it")


def _stored_build(stored: dict | None, target: Path) -> SeismicBuildParams | None:
    """The build parameters ``params.json`` records (None when there is no record).

    Raises:
        DataFormatError: they are missing or not a valid :class:`SeismicBuildParams`.
    """
    if stored is None:
        return None
    if not isinstance(stored, dict) or stored.get("build") is None:
        raise DataFormatError(
            target / "params.json",
            "no Seismic build parameters; delete the seismic/ folder to rebuild it",
            field="build",
        )
    try:
        return SeismicBuildParams.model_validate(stored["build"])
    except ValueError as exc:
        raise DataFormatError(
            target / "params.json",
            f"not Seismic build parameters ({exc}); delete the seismic/ folder to rebuild it",
            field="build",
        ) from exc


# ----------------------------------------------------------------------------------- open or build
def open_or_build(
    folder: Path,
    docs: sp.csr_matrix,
    content_hash: str | None,
    build: SeismicBuildParams | None = None,
    memory_budget: int | None = None,
    on_shard: Callable[[int], None] | None = None,
    show_progress: bool = False,
    max_entries: int | None = None,
) -> ShardedSeismic:
    """The Seismic shards of the index folder ``folder`` (documents ``docs``, canonical CSR):
    reopened from ``folder/seismic`` when stored for ``content_hash`` with ``build`` (None: whatever
    it was built with) and, when ``memory_budget`` is given, the same shard size; else built (and
    resumed: module docstring) and stored there, replacing what was stored (its ``built`` then says so).

    Args:
        memory_budget: bytes of build memory of one shard (None: the stored index's, else
            :data:`~spladekit.index.seismic_rule.DEFAULT_SEISMIC_BUDGET`).
        on_shard: called with each shard's number once it is stored (progress; tests stop a build here).
        max_entries: entries of a shard, given directly instead of through ``memory_budget`` (shards
            smaller than the 16 MiB least budget allows: tests and benchmarks on small corpora).

    Raises:
        ImportError: ``pyseismic-lsr`` is not installed.
        ValueError: a budget outside the writer's range; a shard with too few documents for ``nknn``
            (:func:`spladekit.index.seismic.check_knn_documents`), before any shard is built.
        DataFormatError: a stored file cannot be read, is missing, or ``params.json`` lacks an entry;
            ``seismic/`` or its build folder is a link out of the index folder (:func:`check_links`).
    """
    check_links(Path(folder))
    target = Path(folder) / "seismic"
    stored = read_json(target / "params.json") if (target / "params.json").exists() else None
    params = build or _stored_build(stored, target) or SeismicBuildParams()  # None: the parameters it was built with
    if max_entries is not None:
        if memory_budget is not None:
            raise ValueError("give memory_budget or max_entries, not both")
        if isinstance(max_entries, bool) or not isinstance(max_entries, (int, np.integer)) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer ≥ 1, got {max_entries!r}")
        memory_budget = budget_for(int(max_entries), params, rule_corpus(docs))
    elif memory_budget is not None:
        max_entries = max_shard_entries(memory_budget, params, *rule_corpus(docs))
    if _reusable(stored, target, content_hash, build, max_entries, docs):
        return load(target, stored, docs.shape, docs)
    if max_entries is None:
        memory_budget, max_entries = _stored_shard_size(stored or {}, params, docs)
    ranges = shard_ranges(np.asarray(docs.indptr), max_entries)
    _check_graphs(params.nknn, np.asarray(docs.indptr), ranges)
    record = {
        "build": params.model_dump(),
        "content_hash": content_hash,
        "memory_budget": int(memory_budget),
        "max_entries": int(max_entries),
        "shard_postings": SHARD_POSTINGS,
    }
    try:
        sharded = load(
            target, build_shards(Path(folder), docs, params, ranges, record, on_shard, show_progress), docs.shape, docs
        )
    except OSError as exc:  # a read-only index folder: built in memory for this process only
        log.warning("%s: cannot store the Seismic index (%s); it is kept for this process only", target, exc)
        each = shard_params(params, docs.indptr, ranges)
        return ShardedSeismic(
            [
                (start, SeismicSearcher(row_slice(docs, start, stop), p, canonical=True))
                for (start, stop), p in zip(ranges, each)
            ],
            ranges,
            params,
            docs.shape,
            max_entries,
            memory_budget,
        )
    sharded.built = f"the Seismic index and stored it in {target}"
    return sharded


def _reusable(
    stored: dict | None,
    target: Path,
    content_hash: str | None,
    build: SeismicBuildParams | None,
    max_entries: int | None,
    docs: sp.csr_matrix,
) -> bool:
    """Whether the stored shards are what is asked: built over ``content_hash``, with ``build`` (None:
    any parameters) and, when ``max_entries`` is given, into the same ranges."""
    if stored is None or stored.get("content_hash") != content_hash:
        return False
    if build is not None and _stored_build(stored, target) != build:
        return False
    if max_entries is None or stored.get("max_entries") == max_entries:
        return True
    listed = _check_record(target, stored, docs.shape[0])[2]
    return listed == shard_ranges(np.asarray(docs.indptr), max_entries)


def _stored_shard_size(stored: dict, params: SeismicBuildParams, docs: sp.csr_matrix) -> tuple[int, int]:
    """``(memory_budget, max_entries)`` of a build given no size: the stored index's budget through
    the rule; its shard size when that budget was below the least one (shards asked by size); else
    :data:`~spladekit.index.seismic_rule.DEFAULT_SEISMIC_BUDGET`."""
    from spladekit.index.writer import check_budget

    corpus = rule_corpus(docs)
    try:
        budget = check_budget(stored.get("memory_budget"))
        return budget, max_shard_entries(budget, params, *corpus)
    except ValueError:
        if isinstance(stored.get("max_entries"), int) and stored["max_entries"] >= 1:
            return budget_for(int(stored["max_entries"]), params, corpus), int(stored["max_entries"])
        return DEFAULT_SEISMIC_BUDGET, max_shard_entries(DEFAULT_SEISMIC_BUDGET, params, *corpus)


def _check_graphs(nknn: int, indptr: np.ndarray, ranges: list[tuple[int, int]]) -> None:
    """Every shard's k-NN graph checked before the first shard is built (a refusal after hours of
    shards would waste them): :func:`~spladekit.index.seismic.check_knn_documents`.

    Raises:
        ValueError: a shard with documents has too few of them for ``nknn``.
    """
    if not nknn:
        return
    filled = np.diff(indptr) > 0
    for number, (start, stop) in enumerate(ranges):
        if filled[start:stop].any():
            several = len(ranges) > 1
            check_knn_documents(
                nknn,
                int(filled[start:stop].sum()),
                f"shard {number} (rows [{start}, {stop}))" if several else "the index",
                ", or a larger --memory-budget (fewer, larger shards)" if several else "",
            )


def build_shards(
    folder: Path,
    docs: sp.csr_matrix,
    params: SeismicBuildParams,
    ranges: list[tuple[int, int]],
    record: dict,
    on_shard: Callable[[int], None] | None = None,
    show_progress: bool = False,
) -> dict:
    """Build the shards of ``ranges`` one after the other into ``folder/.seismic.build`` (resuming:
    module docstring), then put the finished folder in place of ``folder/seismic``. Holds one
    shard's build at a time (nothing is loaded back: that is :func:`load`'s memory).

    Args:
        record: the ``params.json`` entries besides ``empty``, ``shards``, ``shard_n_postings`` and
            ``shard_files`` (each shard is built with :func:`~spladekit.index.seismic_shards.shard_params`).

    Returns:
        The ``params.json`` written.

    Raises:
        OSError: the folder cannot be written.
    """
    from spladekit.index.chunks import resume_build_folder

    work = folder / WORK
    record = dict(record, shard_postings=SHARD_POSTINGS)
    fingerprint = dict(record, shards=[list(r) for r in ranges])
    resume_build_folder(work, fingerprint, "a Seismic build with other settings")
    each = shard_params(params, docs.indptr, ranges)
    empties = _build_each(work, docs, ranges, each, on_shard, show_progress)
    shards = [[start, stop, empty] for (start, stop), empty in zip(ranges, empties)]
    final = dict(record, empty=all(empties), shards=shards, shard_n_postings=[p.n_postings for p in each])
    return _finish(folder, work, final, len(ranges))


def _build_each(
    work: Path,
    docs: sp.csr_matrix,
    ranges: list[tuple[int, int]],
    each: list[SeismicBuildParams],
    on_shard: Callable[[int], None] | None,
    show_progress: bool,
) -> list[bool]:
    """Build and store each shard not stored yet in ``work`` (``shard-NNNNNN/``, atomically); whether each is empty."""
    from tqdm.auto import tqdm

    from spladekit.index.layout import release_mapped_pages
    from spladekit.io import atomic_folder, write_json

    empties = []
    for number, (start, stop) in enumerate(
        tqdm(ranges, desc="seismic shards", unit="shard", disable=not show_progress)
    ):
        shard = work / SHARD.format(number)
        if (shard / "shard.json").exists() and read_json(shard / "shard.json").get("range") == [start, stop]:
            empties.append(bool(read_json(shard / "shard.json")["empty"]))
            continue  # stored by an earlier (killed) run
        searcher = SeismicSearcher(row_slice(docs, start, stop), each[number], canonical=True)
        with atomic_folder(shard) as tmp:
            searcher.save(tmp)
            write_json(
                tmp / "shard.json",
                {"range": [start, stop], "empty": searcher.empty, "n_postings": each[number].n_postings},
            )
        empties.append(searcher.empty)
        del searcher  # freed before the next shard is built
        release_mapped_pages(docs.data, docs.indices)  # the range's input pages leave the resident set
        if on_shard is not None:
            on_shard(number)
    return empties


def _finish(folder: Path, work: Path, final: dict, count: int) -> dict:
    """Move the built shards of ``work`` into a folder with ``params.json`` (``final`` and each file's
    record) and put it in place of ``folder/seismic``; returns the ``params.json`` written."""
    from spladekit.io import replace_folder, write_json

    done = work / "done"
    shutil.rmtree(done, ignore_errors=True)
    done.mkdir()
    if count == 1:  # one shard: its file beside params.json
        for item in (work / SHARD.format(0)).iterdir():
            if item.name != "shard.json":
                item.rename(done / item.name)
    else:
        for number in range(count):
            (work / SHARD.format(number)).rename(done / SHARD.format(number))
    final["shard_files"] = [shard_file_record(shard_folder(done, number, count)) for number in range(count)]
    write_json(done / "params.json", final)
    replace_folder(done, folder / "seismic")
    shutil.rmtree(work, ignore_errors=True)
    return final


# ----------------------------------------------------------------------------------- files
def shard_file_record(folder: Path) -> list | None:
    """``[bytes, sha256]`` of the Seismic file in ``folder`` (``params.json``'s ``shard_files``), or
    None when the shard is empty (no file)."""
    from spladekit.data.resolve import sha256_file

    path = folder / SeismicSearcher.INDEX_FILE
    return [path.stat().st_size, sha256_file(path)] if path.exists() else None


def shard_folder(target: Path, number: int, count: int) -> Path:
    """The folder of shard ``number`` of ``count`` in ``target`` (one shard: ``target`` itself)."""
    return target if count == 1 else target / SHARD.format(number)


def _check_record(
    target: Path, stored: dict, rows: int
) -> tuple[SeismicBuildParams, list[SeismicBuildParams], list[tuple[int, int]], list]:
    """``params.json`` (``stored``) checked for form: ``(build, each shard's build, ranges, shard_files)``.

    Raises:
        DataFormatError: an entry is missing (an older spladekit's folder) or malformed, or the ranges
            do not tile ``[0, rows)``; naming the file and the entry.
    """
    path = target / "params.json"
    missing = [key for key in RECORD_KEYS if key not in stored]
    if missing:
        raise DataFormatError(
            path,
            f"no {missing[0]!r} entry (written by an older spladekit); delete the seismic/ folder to rebuild it",
            field=missing[0],
        )
    params = _stored_build(stored, target)
    listed, shares, records = stored["shards"], stored["shard_n_postings"], stored["shard_files"]
    if not (isinstance(listed, list) and listed and all(isinstance(s, list) and len(s) == 3 for s in listed)):
        raise DataFormatError(
            path,
            "shards: expected a list of [start, stop, empty]; delete the seismic/ folder to rebuild it",
            field="shards",
        )
    if (
        stored["shard_postings"] != SHARD_POSTINGS
        or not isinstance(shares, list)
        or len(shares) != len(listed)
        or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= params.n_postings for n in shares)
    ):
        raise DataFormatError(
            path,
            f"shard_postings {stored['shard_postings']!r} / shard_n_postings {shares!r}: expected "
            f"{SHARD_POSTINGS!r} and {len(listed)} integers in [1, n_postings]; delete the seismic/ folder to rebuild it",
            field="shard_n_postings",
        )
    if not (
        isinstance(records, list)
        and len(records) == len(listed)
        and all(
            r is None or (isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], str))
            for r in records
        )
    ):
        raise DataFormatError(
            path,
            f"shard_files: expected {len(listed)} entries [bytes, sha256] or null; "
            "delete the seismic/ folder to rebuild it",
            field="shard_files",
        )
    ranges = [(int(a), int(b)) for a, b, _ in listed]
    if ranges[0][0] != 0 or ranges[-1][1] != rows or any(b != c for (_, b), (c, _) in zip(ranges[:-1], ranges[1:])):
        raise DataFormatError(path, f"shard ranges {ranges} do not cover the {rows} document rows", field="shards")
    return params, [params.model_copy(update={"n_postings": n}) for n in shares], ranges, records


def verify_files(target: Path, content_hash: str | None, rows: int) -> None:
    """Recompute each stored shard file's SHA-256 and compare it with ``params.json``'s
    ``shard_files``, when ``target`` holds shards of the index of ``rows`` documents whose content
    hash is ``content_hash`` (another content's are rebuilt when opened). Reads every shard file once
    (``Index.verify``).

    Raises:
        DataFormatError: a file differs (naming it), or ``params.json`` is malformed.
    """
    check_links(target.parent)
    stored = read_json(target / "params.json") if (target / "params.json").exists() else {}
    if not stored or stored.get("content_hash") != content_hash:
        return
    records = _check_record(target, stored, rows)[3]
    for number, record in enumerate(records):
        where = shard_folder(target, number, len(records))
        if record is not None and shard_file_record(where) != record:
            raise DataFormatError(
                where / SeismicSearcher.INDEX_FILE,
                "does not match params.json's shard_files (size, SHA-256): "
                "the file was altered, damaged or moved from another shard; delete the seismic/ folder to rebuild it",
            )


def _check_shard(
    path: Path, number: int, searcher: SeismicSearcher, start: int, stop: int, docs: sp.csr_matrix | None
) -> None:
    """Whether the loaded Seismic index of shard ``number`` holds rows ``[start, stop)`` (:func:`load`).
    Seismic keeps only the documents with an entry, in row order: its document ``i`` is the range's
    ``i``-th non-empty row.

    Raises:
        DataFormatError: its document count (at most the range's without ``docs``), entry count, or
            first or last document differ.
    """
    index = searcher.index
    where = f"shard {number}, rows [{start}, {stop})"
    problem = None
    if docs is None:
        if index.len > stop - start:
            problem = f"holds {index.len} documents where {where} has {stop - start} rows"
    else:
        filled = np.flatnonzero(np.diff(np.asarray(docs.indptr[start : stop + 1]))) + start
        want = (filled.size, int(docs.indptr[stop]) - int(docs.indptr[start]))
        if (index.len, index.nnz) != want:
            problem = f"holds {index.len} documents and {index.nnz} entries where {where} has {want[0]} and {want[1]}"
        for position in sorted({0, filled.size - 1}) if not problem and filled.size else ():
            row = int(filled[position])
            a, b = int(docs.indptr[row]), int(docs.indptr[row + 1])
            components, values = index.get(position)
            want_values = np.asarray(docs.data[a:b], np.float64)
            # Seismic keeps values as float16: each within half a unit in the last place (2^-11 relative,
            # 2^-25 absolute below float16's normal range)
            if list(components) != np.asarray(docs.indices[a:b]).tolist() or not np.all(
                np.abs(np.asarray(values, np.float64) - want_values) <= 2.0**-11 * np.abs(want_values) + 2.0**-25
            ):
                problem = f"its document {position} is not row {row} of the index ({where})"
                break
    if problem:
        raise DataFormatError(
            path, f"{problem}: another shard's file, or altered; delete the seismic/ folder to rebuild it"
        )


def load(target: Path, stored: dict, shape: tuple[int, int], docs: sp.csr_matrix | None = None) -> ShardedSeismic:
    """Reopen the shards stored in ``target`` (``seismic/``) as ``params.json`` (``stored``) lists them.
    Each shard is checked against what it must hold, cheaply (a shard file swapped with another
    shard's, or copied over it, answers with the other rows' documents): its file's size
    (``shard_files``), and once loaded its number of documents (the range's) and, given the index's
    documents ``docs`` (``[D, V]`` CSR), its number of entries and its first and last non-empty rows
    (components equal, values within Seismic's f16 rounding). The files' SHA-256 is compared by
    :func:`verify_files` (``Index.verify``).

    Raises:
        DataFormatError: ``params.json`` lacks an entry or is malformed (:func:`_check_record`); a listed
            shard's file is missing, unreadable or not the shard's, or holds a k-NN graph of another
            size than ``build.nknn``.
    """
    params, each, ranges, records = _check_record(target, stored, shape[0])
    shards = []
    for number, ((start, stop), (_, _, empty)) in enumerate(zip(ranges, stored["shards"])):
        where = shard_folder(target, number, len(ranges))
        path = where / SeismicSearcher.INDEX_FILE
        if records[number] is not None and path.exists() and path.stat().st_size != records[number][0]:
            raise DataFormatError(
                path,
                f"{path.stat().st_size} bytes where params.json's shard_files records {records[number][0]}: "
                "altered, or another shard's file; delete the seismic/ folder to rebuild it",
            )
        searcher = SeismicSearcher.load(where, each[number], (stop - start, shape[1]), empty=bool(empty))
        if searcher.index is not None:
            _check_shard(path, number, searcher, start, stop, docs)
            if searcher.knn_len != params.nknn:  # searches would be refused, or rebuilds skipped, on the record's word
                raise DataFormatError(
                    target / "params.json",
                    f"build.nknn {params.nknn} where shard {number}'s file holds a k-NN graph of "
                    f"{searcher.knn_len} ({path}); delete the seismic/ folder to rebuild it",
                    field="build.nknn",
                )
        shards.append((start, searcher))
    return ShardedSeismic(shards, ranges, params, shape, stored["max_entries"], stored["memory_budget"])
