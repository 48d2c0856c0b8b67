"""Seismic by shards: one Seismic index per consecutive range of document rows, each range sized so
that its build stays within a memory budget, built one after the other, stored in the index folder,
searched together and merged by the tie rule of :mod:`spladekit.index.exact`.

``n_postings`` is the whole index's (Seismic's setting for a collection: 3,000-6,000 for MS MARCO's
8.8M passages in its guidelines): each shard keeps its share, ``⌈n_postings × shard entries / all
entries⌉`` (:func:`shard_params`). Seismic's static pruning keeps the ``V × n_postings`` largest
values of its input (a global threshold), so a shard holding a fraction ``f`` of the entries and
keeping ``f × V × n_postings`` of them cuts at about the same value as one index over every row would:
the shards together keep about the postings one index keeps, and their blocks and summaries with
them, when the shards hold alike documents (rows in no particular order). Rows grouped by topic keep
fewer: each shard's budget counts only the terms it holds, and each list's cap (``n_postings ×
max_fraction``) shrinks with the share while a topic's documents do not. (Keeping ``n_postings`` in
every shard would keep S times as many, and cost S times the build and query work of the lists:
``benchmarks/RESULTS.md``, "Seismic by shards".)

pyseismic's builder holds its whole input and every posting in memory, so one index over 8.8M
passages cannot be built on a 24 GB machine; a built index is small. Here the rows ``[0, D)`` are cut into ranges of at most ``max_entries`` stored entries
(:func:`shard_ranges`; ``max_entries = memory_budget // bytes an entry`` (:mod:`spladekit.index.seismic_rule`),
the writer's rule of :mod:`spladekit.index.writer`: bytes per entry held × entries ≤ the budget), and each range is built
alone (its CSR slice is read in place from the memory-mapped folder, copied once into pyseismic's
input, built, saved and freed before the next one starts; the pages of the map it read then leave
the resident set, :func:`spladekit.index.layout.release_mapped_pages`).

Layout (``INDEX/seismic/``)::

    params.json            {"build": SeismicBuildParams, "content_hash", "empty", "memory_budget",
                            "max_entries", "shards": [[start, stop, empty], ...],
                            "shard_postings": "share", "shard_n_postings": [n, ...],
                            "shard_files": [[bytes, sha256] or null, ...]}  (checked: :func:`load`, :func:`verify_files`)
    index.index.seismic    one shard: the file of today's single index (the layout is unchanged)
    shard-000000/          several shards: one folder each (index.index.seismic, shard.json)
    shard-000001/ ...

A folder written before shards (no ``"shards"`` in ``params.json``) reads as one shard ``[0, D)``;
one written before the share (no ``"shard_postings"``) kept ``n_postings`` in every shard: it opens
as built, and is rebuilt when build parameters are asked for.

Resumable: shards are built in ``INDEX/.seismic.build/`` (``build.json`` names the content hash,
the parameters and the ranges); each shard folder is written atomically
(:func:`spladekit.io.atomic_folder`), so a killed build keeps every shard already stored and a
build started again with the same settings builds only the rest; the finished folder then replaces
``seismic/`` (:func:`spladekit.io.replace_folder`).

Search: every shard is searched with the whole query set, one shard after the other in the calling
thread (pyseismic's ``search`` and ``batch_search`` hold the GIL, so threads of shards would not
overlap and a pool's hand-offs only add time: ``benchmarks/RESULTS.md``; a batch is parallel inside
each shard, ``num_threads``), shard rows are shifted to global rows, and each query's hits are merged by score
descending, then ``tie_rank`` (document id) ascending, cut to ``k``. A shard returns its own top-k,
so the merge is the top-k of the union. With one shard no merge is done: the answers are those of
:class:`~spladekit.index.seismic.SeismicSearcher` itself. Each shard is approximate on its own
(each keeps its share of the postings, above; each shard's heap holds its own top-k, a lower k-th
score than the whole index's, so more shards score more blocks: higher recall, more query time);
measurements of the trade are in ``benchmarks/RESULTS.md``. A k-NN graph (``nknn``) is built by
each shard over its own rows: a document's neighbours are those of its range, and ``n_knn``
refines each shard's own hits before the merge.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.index.seismic import SeismicBuildParams, SeismicQueries, SeismicSearcher, SeismicSearchParams, check_knn_documents
from spladekit.index.seismic_rule import DEFAULT_SEISMIC_BUDGET, budget_for, max_shard_entries, rule_corpus

log = logging.getLogger(__name__)

SHARD_POSTINGS = "share"
"""``params.json``'s name of the rule by which each shard's ``n_postings`` is set (:func:`shard_params`)."""

WORK = ".seismic.build"
SHARD = "shard-{:06d}"


def shard_ranges(indptr: np.ndarray, max_entries: int) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[(start, stop), ...]`` covering ``[0, D)`` (``indptr``: ``[D + 1]``
    CSR row pointers), each of at most ``max_entries`` entries, of about equal size: the ``n =
    ⌈entries / max_entries⌉`` ranges the limit needs, each ending at the first row boundary at or past
    ``⌈entries / n⌉`` entries (empty rows after it included), or, where that row would pass
    ``max_entries``, at the last boundary within it (so the last range is not a remnant: every range
    costs its own query time). A row longer than ``max_entries`` is a range of its own. An index with
    no row (D = 0) has one empty range ``(0, 0)``.

    Raises:
        ValueError: ``max_entries`` < 1.
    """
    if max_entries < 1:
        raise ValueError(f"max_entries must be ≥ 1, got {max_entries}")
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = len(indptr) - 1
    total = int(indptr[-1] - indptr[0]) if rows else 0
    target = -(-total // max(1, -(-total // max_entries)))  # ⌈entries / n⌉
    ranges, start = [], 0
    while start < rows:
        end = min(rows, int(np.searchsorted(indptr, indptr[start] + target, side="left")))
        end = max(start + 1, int(np.searchsorted(indptr, indptr[end], side="right")) - 1)  # through the empty rows after it
        if indptr[end] - indptr[start] > max_entries:
            end = max(start + 1, int(np.searchsorted(indptr, indptr[start] + max_entries, side="right")) - 1)
        ranges.append((start, end))
        start = end
    return ranges or [(0, 0)]


def shard_params(params: SeismicBuildParams, indptr: np.ndarray, ranges: Sequence[tuple[int, int]]) -> list[SeismicBuildParams]:
    """Each range's build parameters: ``params`` with ``n_postings`` cut to the range's share of the
    entries, ``max(1, ⌈n_postings × entries(range) / entries(all)⌉)`` (module docstring); one range,
    or no entry at all, keeps ``params`` itself."""
    indptr = np.asarray(indptr, dtype=np.int64)
    total = int(indptr[-1] - indptr[0]) if len(indptr) > 1 else 0
    if len(ranges) <= 1 or total == 0:
        return [params] * len(ranges)
    return [replace(params, n_postings=max(1, -(-params.n_postings * int(indptr[stop] - indptr[start]) // total))) for start, stop in ranges]


def row_slice(docs: sp.csr_matrix, start: int, stop: int) -> sp.csr_matrix:
    """Rows ``[start, stop)`` of a canonical CSR as a CSR over views of its arrays (a memory-mapped
    folder's pages are read, nothing is copied but the ``[stop - start + 1]`` row pointers)."""
    a, b = int(docs.indptr[start]), int(docs.indptr[stop])
    indptr = np.asarray(docs.indptr[start : stop + 1]) - a
    part = sp.csr_matrix((docs.data[a:b], docs.indices[a:b], indptr), shape=(stop - start, docs.shape[1]), copy=False)
    part.has_sorted_indices = True
    return part


class ShardedSeismic:
    """Seismic indexes over consecutive row ranges of one ``[D, V]`` matrix, searched as one (the
    interface of :class:`SeismicSearcher`: ``params``, ``empty``, :meth:`prepare`,
    :meth:`search_arrays`, :meth:`search`, :meth:`component_names`).

    Attributes:
        shards: ``(start, SeismicSearcher)`` per range, in row order.
        ranges: ``[(start, stop)]`` row range of each shard.
    """

    def __init__(self, shards: Sequence[tuple[int, SeismicSearcher]], ranges: Sequence[tuple[int, int]], params: SeismicBuildParams,
                 shape: tuple[int, int], max_entries: int | None = None, shard_postings: str | None = SHARD_POSTINGS):
        self.shards, self.ranges, self.params = list(shards), [tuple(r) for r in ranges], params
        self.num_docs, self.vocab_size = shape
        self.max_entries = max_entries
        self.shard_postings = shard_postings
        self.empty = all(s.empty for _, s in self.shards)

    def __len__(self) -> int:
        return len(self.shards)

    def built_with(self, build: SeismicBuildParams) -> bool:
        """Whether these shards are what ``build`` would build now: the same parameters and, with
        several shards, each shard's share (:func:`shard_params`; a folder stored before it was not)."""
        return self.params == build and (len(self.shards) <= 1 or self.shard_postings == SHARD_POSTINGS)

    @property
    def index(self):
        """pyseismic's ``SeismicIndex`` of a one-shard index (what benchmarks call directly).

        Raises:
            ValueError: the index has several shards (search them through :meth:`search_arrays`).
        """
        if len(self.shards) != 1:
            raise ValueError(f"{len(self.shards)} Seismic shards: there is no single pyseismic index")
        return self.shards[0][1].index

    def component_names(self) -> np.ndarray:
        """``[V]`` Seismic's name of each column (the same in every shard)."""
        return self.shards[0][1].component_names()

    @property
    def knn_len(self) -> int:
        """Neighbours per document of the shards' k-NN graphs (the fewest of a shard with documents; 0: none)."""
        held = [searcher.knn_len for _, searcher in self.shards if not searcher.empty]
        return min(held) if held else 0

    def prepare(self, queries: sp.spmatrix) -> SeismicQueries:
        """The queries in pyseismic's input form, once for every shard.

        Raises:
            ValueError: vocabulary mismatch.
        """
        return self.shards[0][1].prepare(queries)

    #: per query ``(row, score)`` pairs of the merged top-``k``: SeismicSearcher's own method, which
    #: needs only ``num_docs``, :meth:`prepare` and :meth:`search_arrays`
    search = SeismicSearcher.search

    def search_arrays(self, queries: SeismicQueries, k: int, params: SeismicSearchParams | None = None,
                      tie_rank: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` of prepared queries over every shard: per query ``(global rows [n] int64, scores
        [n] float32)``, score descending then ``tie_rank`` ascending (row ascending without it).
        Shards are searched one after the other (module docstring: pyseismic holds the GIL).

        Raises:
            ValueError: ``k`` < 1.
        """
        tie_rank = None if tie_rank is None else np.asarray(tie_rank)
        if len(self.shards) == 1:  # one shard: the searcher's own answer, no merge
            return self.shards[0][1].search_arrays(queries, k, params, tie_rank)

        per_shard = []
        for (start, searcher), (_, stop) in zip(self.shards, self.ranges):
            part = searcher.search_arrays(queries, k, params, None if tie_rank is None else tie_rank[start:stop])
            per_shard.append([(rows + start, scores) for rows, scores in part])
        return [merge_hits([found[q] for found in per_shard], k, tie_rank) for q in range(queries.count)]


def merge_hits(lists: Sequence[tuple[np.ndarray, np.ndarray]], k: int, tie_rank: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One query's hits of several shards ``[(global rows, scores)]`` merged: the top ``k`` by score
    descending, then ``tie_rank[row]`` ascending (row ascending when None): the tie rule of
    :mod:`spladekit.index.exact`."""
    lists = [pair for pair in lists if len(pair[0])]
    if not lists:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if len(lists) == 1:
        return lists[0]
    rows = np.concatenate([r for r, _ in lists])
    scores = np.concatenate([s for _, s in lists])
    order = np.lexsort((rows if tie_rank is None else tie_rank[rows], -scores))[:k]
    return rows[order], scores[order]


# ----------------------------------------------------------------------------------- build / open
def _stored_ranges(stored: dict, rows: int) -> list[tuple[int, int]]:
    """The ``[(start, stop)]`` shard ranges ``params.json`` lists (a folder written before shards: one)."""
    return [(int(s[0]), int(s[1])) for s in stored.get("shards") or [[0, rows]]]


def open_or_build(folder: Path, docs: sp.csr_matrix, content_hash: str | None, build: SeismicBuildParams | None = None,
                  memory_budget: int | None = None, on_shard: Callable[[int], None] | None = None,
                  show_progress: bool = False, max_entries: int | None = None) -> ShardedSeismic:
    """The Seismic shards of the index folder ``folder`` (documents ``docs``, canonical CSR):
    reopened from ``folder/seismic`` when stored for ``content_hash`` with ``build`` (None: whatever
    it was built with) and, when ``memory_budget`` is given, the same shard size; else built (and
    resumed: module docstring) and stored there, replacing what was stored.

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
        DataFormatError: a stored file cannot be read or is missing.
    """
    from spladekit.io import read_json

    from spladekit.index.writer import check_budget

    folder = Path(folder)
    target = folder / "seismic"
    stored = read_json(target / "params.json") if (target / "params.json").exists() else None
    params = build or _stored_build(stored, target) or SeismicBuildParams()  # None: the parameters it was built with
    indptr = np.asarray(docs.indptr)
    if max_entries is not None:
        if memory_budget is not None:
            raise ValueError("give memory_budget or max_entries, not both")
        if isinstance(max_entries, bool) or not isinstance(max_entries, (int, np.integer)) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer ≥ 1, got {max_entries!r}")
        memory_budget = budget_for(int(max_entries), params, rule_corpus(docs))
    elif memory_budget is not None:
        max_entries = max_shard_entries(memory_budget, params, *rule_corpus(docs))
    if (stored is not None and stored.get("content_hash") == content_hash
            and (build is None or (stored.get("build") == asdict(build) and _same_rule(stored)))
            and (max_entries is None or stored.get("max_entries") == max_entries
                 or _stored_ranges(stored, docs.shape[0]) == shard_ranges(indptr, max_entries))):  # the same shards: kept
        return load(target, stored, docs.shape, docs)
    if max_entries is None:  # the stored index's budget through today's rule; its shard size when that was below a budget; else the default
        stored = stored or {}
        try:
            memory_budget = check_budget(stored.get("memory_budget"))
            max_entries = max_shard_entries(memory_budget, params, *rule_corpus(docs))
        except ValueError:
            if isinstance(stored.get("max_entries"), int) and stored["max_entries"] >= 1:
                max_entries = int(stored["max_entries"])
                memory_budget = budget_for(max_entries, params, rule_corpus(docs))
            else:
                memory_budget = DEFAULT_SEISMIC_BUDGET
                max_entries = max_shard_entries(memory_budget, params, *rule_corpus(docs))
    ranges = shard_ranges(indptr, max_entries)
    if params.nknn:  # every shard's graph checked before the first is built (a refusal after hours of shards would waste them)
        filled = np.diff(indptr) > 0
        for number, (start, stop) in enumerate(ranges):
            if filled[start:stop].any():
                check_knn_documents(params.nknn, int(filled[start:stop].sum()),
                                    f"shard {number} (rows [{start}, {stop}))" if len(ranges) > 1 else "the index",
                                    ", or a larger --memory-budget (fewer, larger shards)" if len(ranges) > 1 else "")
    record = {"build": asdict(params), "content_hash": content_hash, "memory_budget": int(memory_budget), "max_entries": int(max_entries),
              "shard_postings": SHARD_POSTINGS}
    try:
        return load(folder / "seismic", build_shards(folder, docs, params, ranges, record, on_shard, show_progress), docs.shape, docs)
    except OSError as exc:  # a read-only index folder: built in memory for this process only
        log.warning("%s: cannot store the Seismic index (%s); it is kept for this process only", target, exc)
    each = shard_params(params, docs.indptr, ranges)
    return ShardedSeismic([(start, SeismicSearcher(row_slice(docs, start, stop), p, canonical=True)) for (start, stop), p in zip(ranges, each)],
                          ranges, params, docs.shape, max_entries)


def stored_build(folder: Path) -> SeismicBuildParams | None:
    """The build parameters of the Seismic index stored in the index folder ``folder`` (None: none stored).

    Raises:
        DataFormatError: ``seismic/params.json`` cannot be read, or does not hold valid parameters.
    """
    from spladekit.io import read_json

    target = Path(folder) / "seismic"
    return _stored_build(read_json(target / "params.json"), target) if (target / "params.json").exists() else None


def _stored_build(stored: dict | None, target: Path) -> SeismicBuildParams | None:
    """The build parameters ``params.json`` records (None when there is none).

    Raises:
        DataFormatError: they are not a valid :class:`SeismicBuildParams`.
    """
    if not stored or stored.get("build") is None:
        return None
    from spladekit.errors import DataFormatError

    try:
        return SeismicBuildParams(**stored["build"])
    except (TypeError, ValueError) as exc:
        raise DataFormatError(target / "params.json", f"not Seismic build parameters ({exc}); delete the seismic/ folder to rebuild it", field="build") from exc


def _same_rule(stored: dict) -> bool:
    """A stored folder's shards were built by today's :func:`shard_params` (one shard: any rule)."""
    return len(stored.get("shards") or [()]) <= 1 or stored.get("shard_postings") == SHARD_POSTINGS


def build_shards(folder: Path, docs: sp.csr_matrix, params: SeismicBuildParams, ranges: list[tuple[int, int]], record: dict,
                 on_shard: Callable[[int], None] | None = None, show_progress: bool = False) -> dict:
    """Build the shards of ``ranges`` one after the other into ``folder/.seismic.build`` (resuming:
    module docstring), then put the finished folder in place of ``folder/seismic``. Holds one
    shard's build at a time (nothing is loaded back: that is :func:`load`'s memory).

    Args:
        record: the ``params.json`` entries besides ``empty``, ``shards`` and ``shard_n_postings``
            (``shard_postings`` set here: each shard is built with :func:`shard_params`).

    Returns:
        The ``params.json`` written.

    Raises:
        OSError: the folder cannot be written.
    """
    from tqdm.auto import tqdm

    from spladekit.index.layout import release_mapped_pages
    from spladekit.io import atomic_folder, read_json, replace_folder, write_json

    work = folder / WORK
    record = dict(record, shard_postings=SHARD_POSTINGS)
    each = shard_params(params, docs.indptr, ranges)
    fingerprint = dict(record, shards=[list(r) for r in ranges])
    if (work / "build.json").exists() and read_json(work / "build.json") != fingerprint:
        log.warning("%s: left by a Seismic build with other settings; starting over", work)
        shutil.rmtree(work)
    work.mkdir(exist_ok=True)
    if not (work / "build.json").exists():
        write_json(work / "build.json", fingerprint)
    empties = []
    for number, (start, stop) in enumerate(tqdm(ranges, desc="seismic shards", unit="shard", disable=not show_progress)):
        shard = work / SHARD.format(number)
        if (shard / "shard.json").exists() and read_json(shard / "shard.json").get("range") == [start, stop]:
            empties.append(bool(read_json(shard / "shard.json")["empty"]))
            continue  # stored by an earlier (killed) run
        searcher = SeismicSearcher(row_slice(docs, start, stop), each[number], canonical=True)
        with atomic_folder(shard) as tmp:
            searcher.save(tmp)
            write_json(tmp / "shard.json", {"range": [start, stop], "empty": searcher.empty, "n_postings": each[number].n_postings})
        empties.append(searcher.empty)
        del searcher  # freed before the next shard is built
        release_mapped_pages(docs.data, docs.indices)  # the range's input pages leave the resident set
        if on_shard is not None:
            on_shard(number)
    shards = [[start, stop, empty] for (start, stop), empty in zip(ranges, empties)]
    final = dict(record, empty=all(empties), shards=shards, shard_n_postings=[p.n_postings for p in each])
    done = work / "done"
    shutil.rmtree(done, ignore_errors=True)
    done.mkdir()
    if len(ranges) == 1:  # one shard: today's layout (the index file beside params.json)
        for item in (work / SHARD.format(0)).iterdir():
            if item.name != "shard.json":
                item.rename(done / item.name)
    else:
        for number in range(len(ranges)):
            (work / SHARD.format(number)).rename(done / SHARD.format(number))
    final["shard_files"] = [shard_file_record(done if len(ranges) == 1 else done / SHARD.format(number))
                            for number in range(len(ranges))]
    write_json(done / "params.json", final)
    replace_folder(done, folder / "seismic")
    shutil.rmtree(work, ignore_errors=True)
    return final


def shard_file_record(folder: Path) -> list | None:
    """``[bytes, sha256]`` of the Seismic file in ``folder`` (``params.json``'s ``shard_files``), or
    None when the shard is empty (no file)."""
    from spladekit.data.resolve import sha256_file

    path = folder / SeismicSearcher.INDEX_FILE
    return [path.stat().st_size, sha256_file(path)] if path.exists() else None


def shard_folder(target: Path, number: int, count: int) -> Path:
    """The folder of shard ``number`` of ``count`` in ``target`` (one shard: ``target`` itself)."""
    return target if count == 1 else target / SHARD.format(number)


def verify_files(target: Path, content_hash: str | None) -> None:
    """Recompute each stored shard file's SHA-256 and compare it with ``params.json``'s
    ``shard_files``, when ``target`` holds shards of the index whose content hash is ``content_hash``
    (another content's are rebuilt when opened; folders stored before 6 Dec 2026 record no
    ``shard_files``: nothing to compare). Reads every shard file once (``Index.verify``).

    Raises:
        DataFormatError: a file differs (naming it), or ``shard_files`` is malformed.
    """
    from spladekit.errors import DataFormatError
    from spladekit.io import read_json

    stored = read_json(target / "params.json") if (target / "params.json").exists() else {}
    if not stored or stored.get("content_hash") != content_hash:
        return
    records = _file_records(target, stored, len(stored.get("shards") or [()]))
    for number, record in enumerate(records or []):
        if record is None:
            continue
        where = shard_folder(target, number, len(records))
        if shard_file_record(where) != record:
            raise DataFormatError(where / SeismicSearcher.INDEX_FILE, "does not match params.json's shard_files (size, SHA-256): "
                                  "the file was altered, damaged or moved from another shard; delete the seismic/ folder to rebuild it")


def _file_records(target: Path, stored: dict, count: int) -> list | None:
    """``params.json``'s ``shard_files`` checked for form (None when not recorded).

    Raises:
        DataFormatError: not ``count`` entries of ``[bytes, sha256]`` or null.
    """
    from spladekit.errors import DataFormatError

    records = stored.get("shard_files")
    if records is None:
        return None
    if not (isinstance(records, list) and len(records) == count and all(
            r is None or (isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and isinstance(r[1], str)) for r in records)):
        raise DataFormatError(target / "params.json", f"shard_files: expected {count} entries [bytes, sha256] or null; "
                              "delete the seismic/ folder to rebuild it", field="shard_files")
    return records


def _check_shard(path: Path, number: int, searcher: SeismicSearcher, start: int, stop: int, docs: sp.csr_matrix | None) -> None:
    """Whether the loaded Seismic index of shard ``number`` holds rows ``[start, stop)`` (:func:`load`).
    Seismic keeps only the documents with an entry, in row order: its document ``i`` is the range's
    ``i``-th non-empty row.

    Raises:
        DataFormatError: its document count (at most the range's without ``docs``), entry count, or
            first or last document differ.
    """
    from spladekit.errors import DataFormatError

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
            if (list(components) != np.asarray(docs.indices[a:b]).tolist()
                    or not np.all(np.abs(np.asarray(values, np.float64) - want_values) <= 2.0**-11 * np.abs(want_values) + 2.0**-25)):
                problem = f"its document {position} is not row {row} of the index ({where})"
                break
    if problem:
        raise DataFormatError(path, f"{problem}: another shard's file, or altered; delete the seismic/ folder to rebuild it")


def load(target: Path, stored: dict, shape: tuple[int, int], docs: sp.csr_matrix | None = None) -> ShardedSeismic:
    """Reopen the shards stored in ``target`` (``seismic/``) as ``params.json`` (``stored``) lists them.
    Each shard is checked against what it must hold, cheaply (a shard file swapped with another
    shard's, or copied over it, answers with the other rows' documents): its file's size
    (``shard_files``, when recorded), and once loaded its number of documents (the range's) and,
    given the index's documents ``docs`` (``[D, V]`` CSR), its number of entries and its first and
    last non-empty rows (components equal, values within Seismic's f16 rounding). The files'
    SHA-256 is compared by :func:`verify_files` (``Index.verify``).

    Raises:
        DataFormatError: a listed shard's file is missing, unreadable or not the shard's, holds a
            k-NN graph of another size than ``build.nknn``, or the ranges do not tile ``[0, D)``.
    """
    from spladekit.errors import DataFormatError

    params = _stored_build(stored, target)
    if params is None:
        raise DataFormatError(target / "params.json", "no Seismic build parameters; delete the seismic/ folder to rebuild it", field="build")
    listed = stored.get("shards") or [[0, shape[0], stored.get("empty", False)]]  # a folder written before shards
    each = [params] * len(listed)  # a folder written before the share: n_postings in every shard
    if "shard_postings" in stored or "shard_n_postings" in stored:
        shares = stored.get("shard_n_postings")
        if (stored.get("shard_postings") != SHARD_POSTINGS or not isinstance(shares, list) or len(shares) != len(listed)
                or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= params.n_postings for n in shares)):
            raise DataFormatError(target / "params.json", f"shard_postings {stored.get('shard_postings')!r} / shard_n_postings {shares!r}: "
                                  f"expected {SHARD_POSTINGS!r} and {len(listed)} integers in [1, n_postings]; delete the seismic/ folder to rebuild it",
                                  field="shard_n_postings")
        each = [replace(params, n_postings=n) for n in shares]
    ranges = [(int(a), int(b)) for a, b, _ in listed]
    if ranges[0][0] != 0 or ranges[-1][1] != shape[0] or any(b != c for (_, b), (c, _) in zip(ranges[:-1], ranges[1:])):
        raise DataFormatError(target / "params.json", f"shard ranges {ranges} do not cover the {shape[0]} document rows", field="shards")
    records = _file_records(target, stored, len(listed)) or [None] * len(listed)
    shards = []
    for number, ((start, stop), (_, _, empty)) in enumerate(zip(ranges, listed)):
        where = shard_folder(target, number, len(listed))
        path = where / SeismicSearcher.INDEX_FILE
        if records[number] is not None and path.exists() and path.stat().st_size != records[number][0]:
            raise DataFormatError(path, f"{path.stat().st_size} bytes where params.json's shard_files records {records[number][0]}: "
                                  "altered, or another shard's file; delete the seismic/ folder to rebuild it")
        searcher = SeismicSearcher.load(where, each[number], (stop - start, shape[1]), empty=bool(empty))
        if searcher.index is not None:
            _check_shard(path, number, searcher, start, stop, docs)
            if searcher.knn_len != params.nknn:  # searches would be refused, or rebuilds skipped, on the record's word
                raise DataFormatError(target / "params.json", f"build.nknn {params.nknn} where shard {number}'s file holds a k-NN graph of "
                                      f"{searcher.knn_len} ({path}); delete the seismic/ folder to rebuild it", field="build.nknn")
        shards.append((start, searcher))
    return ShardedSeismic(shards, ranges, params, shape, stored.get("max_entries"), stored.get("shard_postings"))
