"""Seismic by shards (spladekit.index.seismic_shards): shards equal pyseismic built on their ranges,
the merge follows the tie rule, a one-shard index answers as the single searcher, a killed build
resumes, and the build's peak memory follows the shard size, not the corpus."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.index.index import Index
from spladekit.index.seismic import SeismicBuildParams, SeismicSearcher, SeismicSearchParams
from spladekit.index.seismic_shards import ShardedSeismic, shard_params, shard_ranges
from spladekit.index.seismic_store import SeismicConfig, open_or_build

pytest.importorskip("seismic", reason="pyseismic-lsr not installed")

ROOT = Path(__file__).resolve().parents[2]
EXHAUSTIVE = SeismicSearchParams(query_cut=10_000, heap_factor=1e-9, num_threads=1)
"""Every query term traversed and every block scored: the answer is the exact top-k over the postings
the build kept (static pruning is deterministic; the clustering into blocks is seeded at random, so
two builds differ in bytes but not in this answer)."""


def integer_matrix(rows: int, cols: int, nnz: int, seed: int) -> sp.csr_matrix:
    """Rows of ``nnz`` distinct Zipf-drawn columns with integer weights 1..4 (many tied scores;
    integer sums are exact in float32 and in Seismic's f16 values up to 2048)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, cols + 1) ** 0.8
    p /= p.sum()
    indices = np.concatenate([np.sort(rng.choice(cols, size=nnz, replace=False, p=p)) for _ in range(rows)])
    data = rng.integers(1, 5, size=rows * nnz).astype(np.float32)
    return sp.csr_matrix((data, indices, np.arange(rows + 1) * nnz), shape=(rows, cols))


def shuffled_ids(n: int, seed: int) -> list[str]:
    """Ids whose order is not the row order (so the tie rule is not row order)."""
    return [f"d{v:05d}" for v in np.random.default_rng(seed).permutation(n)]


def structure(searcher: SeismicSearcher) -> tuple:
    """What a build determines: document and entry counts, and each posting list's documents after
    static pruning (as sets: the order inside a list follows the random clustering)."""
    index = searcher.index
    return index.len, index.nnz, tuple(tuple(sorted(index.get_doc_ids_in_postings(j))) for j in range(index.dim))


@pytest.fixture
def corpus(tmp_path):
    docs = integer_matrix(900, 120, 12, seed=5)
    ids = shuffled_ids(900, 6)
    index = Index.from_vectors(tmp_path / "idx", docs, ids)
    queries = integer_matrix(25, 120, 6, seed=7)
    return index, docs, ids, queries


def test_shard_ranges_tile_the_rows_within_the_entry_limit():
    indptr = np.array([0, 3, 5, 5, 12, 13, 14])  # row entries 3, 2, 0, 7, 1, 1
    assert shard_ranges(indptr, 5) == [(0, 3), (3, 4), (4, 6)]  # row 3 (7 entries) is a range of its own
    assert shard_ranges(indptr, 100) == [(0, 6)]
    assert shard_ranges(np.array([0]), 5) == [(0, 0)]
    # about equal ranges: 10 rows of 10 entries under 60 a range make 2 ranges of 50, not 60 + 40
    assert shard_ranges(np.arange(0, 101, 10), 60) == [(0, 5), (5, 10)]
    # 1,000 rows of 1-9 entries under a limit of a third of them and one row: 3 ranges, none a remnant, each within the limit
    lengths = np.random.default_rng(0).integers(1, 10, 1000)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    limit = -(-int(indptr[-1]) // 3) + 9
    ranges = shard_ranges(indptr, limit)
    sizes = [int(indptr[b] - indptr[a]) for a, b in ranges]
    assert (
        len(ranges) == 3
        and ranges[0][0] == 0
        and ranges[-1][1] == 1000
        and all(x[1] == y[0] for x, y in zip(ranges, ranges[1:]))
    )
    assert max(sizes) <= limit and min(sizes) >= limit - 2 * 9, sizes
    with pytest.raises(ValueError, match="max_entries"):
        shard_ranges(indptr, 0)


def test_each_shard_keeps_its_share_of_n_postings():
    indptr = np.array([0, 3, 5, 5, 12, 13, 14])  # 14 entries: ranges of 5, 7 and 2
    params = SeismicBuildParams(n_postings=100, summary_energy=0.3)
    shares = shard_params(params, indptr, [(0, 3), (3, 4), (4, 6)])
    assert [p.n_postings for p in shares] == [36, 50, 15]  # ⌈100 × 5/14⌉ = ⌈35.7⌉, 100 × 7/14, ⌈14.3⌉
    assert all(p.summary_energy == 0.3 for p in shares)  # only n_postings changes
    assert shard_params(params, indptr, [(0, 6)]) == [params]  # one shard: the parameters as given
    assert [p.n_postings for p in shard_params(SeismicBuildParams(n_postings=1), indptr, [(0, 3), (3, 6)])] == [
        1,
        1,
    ]  # ⌈·⌉: never 0
    assert shard_params(params, np.zeros(4, np.int64), [(0, 1), (1, 3)]) == [params, params]  # no entry at all


def test_a_folder_stored_by_an_older_spladekit_is_refused(corpus):
    """A params.json without the share rule (every shard kept n_postings) is refused, naming the file
    and the entry, whether or not build parameters are asked for; a build asked for anew replaces it."""
    from spladekit.errors import DataFormatError

    index, docs, ids, queries = corpus
    params = SeismicBuildParams(n_postings=60)
    open_or_build(index.folder, index.docs, index.metadata["content_hash"], params, max_entries=3000)
    record = index.folder / "seismic" / "params.json"
    old = json.loads(record.read_text())
    old.pop("shard_postings"), old.pop("shard_n_postings")
    record.write_text(json.dumps(old))
    for build in (None, params):
        with pytest.raises(DataFormatError, match="older spladekit.*rebuild it") as raised:
            open_or_build(index.folder, index.docs, index.metadata["content_hash"], build)
        assert raised.value.path == record
    shutil.rmtree(index.folder / "seismic")
    built = []
    again = open_or_build(
        index.folder, index.docs, index.metadata["content_hash"], params, on_shard=built.append, max_entries=3000
    )
    assert built == [0, 1, 2, 3] and json.loads(record.read_text())["shard_postings"] == "share"
    assert [s.params.n_postings for _, s in again.shards] == [
        -(-60 * (b - a) // 900) for a, b in again.ranges
    ]  # 12 entries a row


@pytest.mark.parametrize(
    "shares", [5, ["x"] * 4, [0] * 4, [-1] * 4, [True] * 4, [2.9] * 4, ["7"] * 4, [15] * 3, [61] * 4, None]
)
def test_a_bad_shard_n_postings_is_an_error_naming_the_field(corpus, shares):
    from spladekit.errors import DataFormatError

    index, docs, ids, queries = corpus
    open_or_build(
        index.folder, index.docs, index.metadata["content_hash"], SeismicBuildParams(n_postings=60), max_entries=3000
    )
    record = index.folder / "seismic" / "params.json"
    stored = json.loads(record.read_text())
    stored["shard_n_postings"] = shares  # None: the list missing while "shard_postings" says "share"
    record.write_text(json.dumps(stored))
    with pytest.raises(DataFormatError, match="shard_n_postings") as error:
        open_or_build(index.folder, index.docs, index.metadata["content_hash"], None)
    assert "params.json" in str(error.value)


def test_n_postings_beyond_what_pyseismic_can_multiply_is_refused():
    from spladekit.index.seismic import MAX_N_POSTINGS

    assert SeismicBuildParams(n_postings=MAX_N_POSTINGS).n_postings == 2**32
    with pytest.raises(ValueError, match="n_postings"):
        SeismicBuildParams(n_postings=MAX_N_POSTINGS + 1)  # 2^62 kept nothing, 2^64 - 1 wrapped: caught here


def test_a_new_shard_size_without_build_parameters_keeps_the_stored_ones(corpus):
    index, docs, ids, queries = corpus
    open_or_build(
        index.folder,
        index.docs,
        index.metadata["content_hash"],
        SeismicBuildParams(n_postings=40, summary_energy=0.3),
        max_entries=3000,
    )
    again = open_or_build(
        index.folder, index.docs, index.metadata["content_hash"], None, max_entries=5400
    )  # 2 shards, not 4
    assert len(again) == 2 and again.params == SeismicBuildParams(n_postings=40, summary_energy=0.3)
    assert [s.params.n_postings for _, s in again.shards] == [20, 20]  # ⌈40 × 5,400 / 10,800⌉


def test_each_shard_equals_pyseismic_built_directly_on_its_range(corpus):
    index, docs, ids, queries = corpus
    params = SeismicBuildParams(n_postings=60, centroid_fraction=0.2)
    sharded = open_or_build(index.folder, index.docs, index.metadata["content_hash"], params, max_entries=3000)
    ranges = shard_ranges(docs.indptr, 3000)
    assert len(ranges) == 4 and sharded.ranges == ranges  # 900 × 12 entries / 3000
    stored = json.loads((index.folder / "seismic" / "params.json").read_text())
    assert stored["shards"] == [[a, b, False] for a, b in ranges] and stored["max_entries"] == 3000
    # each shard keeps its share of n_postings: ⌈60 × its entries / 10,800⌉, by hand (12 entries a row)
    shares = [-(-60 * 12 * (b - a) // (12 * 900)) for a, b in ranges]
    assert stored["shard_n_postings"] == shares and stored["shard_postings"] == "share"
    reopened = Index.open(index.folder).seismic(params)  # from the folder, not rebuilt
    for (start, stop), (got_start, got), share in zip(ranges, reopened.shards, shares):
        assert got.params.n_postings == share
        direct = SeismicSearcher(
            docs[start:stop], params.model_copy(update={"n_postings": share})
        )  # pyseismic on the same rows, same parameters
        assert got_start == start and structure(got) == structure(direct)
        a = got.search_arrays(got.prepare(queries), 10, EXHAUSTIVE)
        b = direct.search_arrays(direct.prepare(queries), 10, EXHAUSTIVE)
        for (ra, sa), (rb, sb) in zip(a, b):
            np.testing.assert_array_equal(ra, rb)  # the same engine on the same postings: identical
            np.testing.assert_array_equal(sa, sb)


def test_merged_top_k_is_the_by_hand_merge_of_the_shards_hits(corpus):
    index, docs, ids, queries = corpus
    at = SeismicSearchParams(query_cut=5, heap_factor=0.7, num_threads=1)
    open_or_build(index.folder, index.docs, index.metadata["content_hash"], None, max_entries=2000)
    index = Index.open(index.folder)  # searches the stored shards
    got = index.search(queries, k=10, searcher=SeismicConfig(search=at)).hits
    sharded = index.seismic()
    assert len(sharded) == 6
    ties = 0
    for q in range(queries.shape[0]):
        pooled = []
        for (start, _stop), (_, shard) in zip(sharded.ranges, sharded.shards):
            for row, score in shard.search(queries[q], k=10, params=at)[0]:  # each shard's own answer, its rows
                pooled.append((ids[start + row], score))
        want = sorted(pooled, key=lambda pair: (-pair[1], pair[0]))[:10]  # score descending, then document id
        assert got[q] == want
        ties += len(want) - len({s for _, s in want})
    assert ties > 0  # integer weights: the tie rule was exercised


def test_one_shard_answers_exactly_as_the_single_searcher(corpus):
    index, docs, ids, queries = corpus
    one = index.seismic()
    assert isinstance(one, ShardedSeismic) and len(one) == 1
    assert (index.folder / "seismic" / SeismicSearcher.INDEX_FILE).exists()  # today's layout
    single = one.shards[0][1]
    at = SeismicSearchParams(query_cut=5, heap_factor=0.7, num_threads=1)
    prepared = one.prepare(queries)
    for (ra, sa), (rb, sb) in zip(
        one.search_arrays(prepared, 10, at, index.tie_rank), single.search_arrays(prepared, 10, at, index.tie_rank)
    ):
        np.testing.assert_array_equal(ra, rb)  # no merge at all: the same arrays
        np.testing.assert_array_equal(sa, sb)


KILLED_BUILD = """
import os, signal, sys
from spladekit.index.index import Index
from spladekit.index.seismic_store import open_or_build
index = Index.open(sys.argv[1])
def stop(number):
    if number == 1:  # shards 0 and 1 are stored: the process dies before shard 2
        os.kill(os.getpid(), signal.SIGKILL)
open_or_build(index.folder, index.docs, index.metadata["content_hash"], None, max_entries=3000, on_shard=stop)
"""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_killed_build_keeps_its_stored_shards_and_resumes(corpus, tmp_path):
    index, docs, ids, queries = corpus
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), RAYON_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_BUILD, str(index.folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -9, proc.stderr  # really killed (SIGKILL), not a clean exit
    work = index.folder / ".seismic.build"
    assert not (index.folder / "seismic").exists()
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("shard-")) == ["shard-000000", "shard-000001"]
    kept = {n: _digest(work / n / SeismicSearcher.INDEX_FILE) for n in ("shard-000000", "shard-000001")}
    built = []
    resumed = open_or_build(
        index.folder, index.docs, index.metadata["content_hash"], None, max_entries=3000, on_shard=built.append
    )
    assert built == [2, 3]  # only the shards the killed run had not stored
    assert not work.exists()
    final = index.folder / "seismic"
    assert {n: _digest(final / n / SeismicSearcher.INDEX_FILE) for n in kept} == kept  # kept as they were
    # an uninterrupted build of the same index, in a second folder: the same folder (the same
    # params.json, the same files; each shard the same index, compared by what a build determines)
    other = Index.from_vectors(tmp_path / "other", docs, ids)
    fresh = open_or_build(other.folder, other.docs, other.metadata["content_hash"], None, max_entries=3000)
    stored, again = (json.loads((f / "params.json").read_text()) for f in (final, other.folder / "seismic"))
    # shard_files: each file's size and SHA-256 as stored (pyseismic's clustering is not byte-for-byte
    # repeatable, so two builds' files are compared by structure below, not by hash)
    for params, folder in ((stored, final), (again, other.folder / "seismic")):
        assert params.pop("shard_files") == [
            [p.stat().st_size, _digest(p)] for p in sorted(folder.glob("shard-*/" + SeismicSearcher.INDEX_FILE))
        ]
    assert stored == again
    assert sorted(p.name for p in final.rglob("*")) == sorted(p.name for p in (other.folder / "seismic").rglob("*"))
    for (_, a), (_, b) in zip(resumed.shards, fresh.shards):
        assert structure(a) == structure(b)


PEAK = """
import sys
sys.path.insert(0, sys.argv[4])
from spladekit.index.index import Index
mode, folder, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
index = Index.open(folder)
import seismic  # the library's fixed cost is loaded before the baseline
from spladekit.index.seismic import SeismicSearcher
from spladekit.index.seismic_rule import max_shard_entries, DEFAULT_SEISMIC_BUDGET
from spladekit.index.seismic_shards import row_slice, shard_ranges
from spladekit.index.seismic_store import build_shards
from spladekit.index.seismic import SeismicBuildParams

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

try:
    with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to the current RSS (Linux ≥ 4.0)
        f.write("5")
except OSError:
    print("no-peak-reset")
    raise SystemExit
before = status("VmRSS")
if mode == "range":  # pyseismic on the first shard's rows alone
    SeismicSearcher(row_slice(index.docs, 0, rows), canonical=True)
else:
    entries = max_shard_entries(DEFAULT_SEISMIC_BUDGET) if mode == "whole" else int(index.docs.indptr[rows])
    build_shards(index.folder, index.docs, SeismicBuildParams(), shard_ranges(index.docs.indptr, entries), {})
print(status("VmHWM") - before)
"""


def test_the_build_peak_follows_the_shard_size_not_the_corpus(tmp_path):
    """Peak RSS growth (of the build itself, :func:`build_shards`, each in a fresh process, the library loaded first, the peak reset to the
    current RSS; VmHWM − VmRSS) of: pyseismic on one shard's range alone (``range``), the sharded
    build of 8 such ranges (``sharded``) and one build of the whole corpus (``whole``).

    Bound: sharded ≤ range + 16 MB (allocator, thread and JSON slack), independent of the number of
    shards: the pages of the folder's ``docs.indices``/``docs.data`` (8 bytes an entry) that a shard
    reads through the memory map leave the resident set after its build
    (:func:`~spladekit.index.layout.release_mapped_pages`); kept, the other 7 ranges' 4.5 MB of
    them would count too. An unsharded build grows by ≈ 80 B an entry (measured here: 20 MB at 80k
    entries, 66 MB at 640k), ≈ 45 MB above one range's: more than the bound allows, so the test
    fails for a build that holds the corpus. The library's rule (:func:`build_bytes_per_entry`: 100 B
    an entry when every entry is kept, as here) bounds that growth within 32 MB, the fixed cost of a
    build it leaves out (≈ 13 MB measured here: 20 MB at 80k entries)."""
    rows, nnz = 2000, 40  # 8 shards of 2000 rows × 40 entries = 640k entries in all
    docs = integer_matrix(8 * rows, 1500, nnz, seed=11)
    Index.from_vectors(tmp_path / "idx", docs, [f"d{i}" for i in range(docs.shape[0])])
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), RAYON_NUM_THREADS="1")

    def peak(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", PEAK, mode, str(tmp_path / "idx"), str(rows), str(ROOT / "tests")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        shutil.rmtree(tmp_path / "idx" / "seismic", ignore_errors=True)  # each mode builds from scratch
        if "no-peak-reset" in out.stdout:
            pytest.skip("/proc/self/clear_refs cannot be written here (the peak cannot be reset)")
        return int(out.stdout.split()[-1])

    one, sharded, whole = peak("range"), peak("sharded"), peak("whole")
    bound = one + (16 << 20)
    assert sharded <= bound, (one, sharded, whole)
    assert whole > bound, (one, sharded, whole)  # the measurement tells a corpus-sized build from a shard-sized one
    from spladekit.index.seismic_rule import build_bytes_per_entry

    rule = docs.nnz * build_bytes_per_entry(SeismicBuildParams(), docs.nnz, docs.shape[0], docs.shape[1])
    assert whole <= rule + (32 << 20), (whole, rule)


def test_search_memory_budget_sets_the_shard_size(tmp_path):
    """`spladekit search --backend seismic --memory-budget` builds shards of budget // (bytes an entry)
    entries (recorded in params.json); the option is refused for exact search and below the writer's least budget."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.index.seismic_rule import SEISMIC_ENTRY_BYTES, SEISMIC_POSTING_BYTES
    from tests.index_helpers import index_with_cli, make_beir, make_model

    model, beir = make_model(tmp_path / "model"), make_beir(tmp_path / "beir")
    out = tmp_path / "index"
    index_with_cli(model, beir, out)
    runner = CliRunner()
    args = [
        "search",
        "--index",
        str(out),
        "--queries",
        str(beir / "queries.tsv"),
        "--k",
        "5",
        "--out",
        str(tmp_path / "run.trec"),
    ]
    r = runner.invoke(app, args + ["--backend", "seismic", "--memory-budget", "16MiB"])
    assert r.exit_code == 0, r.output
    stored = json.loads((out / "seismic" / "params.json").read_text())
    docs = Index.open(out).docs
    assert docs.shape[1] * 3500 > docs.nnz  # the tiny corpus keeps every entry (n_postings 3500): 48 + 52 B an entry
    assert stored["memory_budget"] == 16 << 20 and stored["max_entries"] == (16 << 20) // (
        SEISMIC_ENTRY_BYTES + SEISMIC_POSTING_BYTES
    )
    assert stored["shards"] == [[0, Index.open(out).docs.shape[0], False]]
    r = runner.invoke(app, args + ["--backend", "exact", "--memory-budget", "16MiB"])
    assert r.exit_code != 0 and "--memory-budget" in r.output and "seismic or two_step only" in r.output
    r = runner.invoke(app, args + ["--backend", "seismic", "--memory-budget", "1MiB"])
    assert r.exit_code != 0 and "--memory-budget" in r.output


def test_released_map_pages_leave_the_resident_set_and_read_the_same(tmp_path):
    """A 64 MiB float32 array read through ``np.load(mmap_mode="r")`` counts its pages in RssFile
    (``/proc/self/status``); after :func:`release_mapped_pages` on a slice of it (the map is found
    through ``.base``) they are gone from it, and the array reads the same values (refaulted from
    the file). Margins: 8 MiB of the 64 (other files the process maps or drops meanwhile)."""
    from spladekit.index.layout import release_mapped_pages

    def rss_file() -> int:
        for line in open("/proc/self/status"):
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
        pytest.skip("no RssFile in /proc/self/status")

    size = 64 << 20
    values = np.arange(size // 4, dtype=np.float32)
    np.save(tmp_path / "a.npy", values)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    before = rss_file()
    total = float(np.asarray(mapped, dtype=np.float64).sum())  # every page read
    read = rss_file()
    assert read - before > size - (8 << 20)
    assert release_mapped_pages(mapped[10:20], values) == 1  # one map; the plain array is skipped
    assert read - rss_file() > size - (8 << 20)
    assert (
        float(np.asarray(mapped, dtype=np.float64).sum()) == total
    )  # same bytes, same summation order: equal by construction


def test_a_shard_file_swapped_copied_or_altered_is_refused_naming_it(tmp_path):
    """Each shard's Seismic file answers with its own rows' documents: another shard's file in its
    place (swapped, copied over) would rank the other rows' documents under this shard's row numbers.
    Refused on opening (size, counts, first and last row), and with ``verify`` by SHA-256."""
    from spladekit.errors import DataFormatError
    from spladekit.io import read_json

    docs = integer_matrix(910, 120, 12, seed=5)  # 12 entries a row, 4 ranges of about equal size
    index = Index.from_vectors(tmp_path / "idx", docs, shuffled_ids(910, 6))

    def reopen(verify=False):
        opened = Index.open(index.folder, verify=verify)
        return open_or_build(opened.folder, opened.docs, opened.metadata["content_hash"], None, max_entries=3000)

    sharded = reopen()
    target = index.folder / "seismic"
    files = [target / f"shard-{n:06d}" / SeismicSearcher.INDEX_FILE for n in range(len(sharded))]
    sizes = [b - a for a, b in sharded.ranges]
    assert (
        len(files) == 4
        and sizes[0] == sizes[1]
        and sizes[0] != sizes[3]
        and read_json(target / "params.json")["shard_files"] == [[f.stat().st_size, _digest(f)] for f in files]
    )
    saved = [f.read_bytes() for f in files]

    def restore():
        for f, content in zip(files, saved):
            f.write_bytes(content)

    # shard 1's file copied over shard 0's (the same document and entry counts): its rows are another range's
    shutil.copyfile(files[1], files[0])
    params = read_json(target / "params.json")
    with pytest.raises(DataFormatError, match=r"shard-000000/index\.index\.seismic: "):
        reopen()

    # the same with params.json's records rewritten to the files there (sizes that match): the first row gives it away
    def forge():
        (target / "params.json").write_text(
            json.dumps(dict(params, shard_files=[[f.stat().st_size, _digest(f)] for f in files]))
        )

    forge()
    with pytest.raises(
        DataFormatError, match=r"shard-000000/index\.index\.seismic: its document 0 is not row 0 of the index"
    ):
        reopen()
    # shards 0 and 3 swapped (their document counts differ)
    restore()
    files[0].write_bytes(saved[3])
    files[3].write_bytes(saved[0])
    forge()
    with pytest.raises(
        DataFormatError,
        match=rf"shard-000000/index\.index\.seismic: holds {sizes[3]} documents and {12 * sizes[3]} "
        rf"entries where shard 0, rows \[0, {sizes[0]}\) has {sizes[0]} and {12 * sizes[0]}",
    ):
        reopen()
    (target / "params.json").write_text(json.dumps(params))
    restore()
    hits = reopen().search(integer_matrix(5, 120, 6, seed=7), k=10)
    assert hits == sharded.search(integer_matrix(5, 120, 6, seed=7), k=10)  # restored: opens and answers as before
    # bytes changed in place, the size kept: found by verify (SHA-256); which damage pyseismic's loader
    # notices without it is its own
    damaged = bytearray(saved[1])
    middle = len(damaged) // 2
    damaged[middle : middle + 8] = bytes(255 - b for b in damaged[middle : middle + 8])
    files[1].write_bytes(bytes(damaged))
    with pytest.raises(
        DataFormatError, match=r"shard-000001/index\.index\.seismic: does not match params.json's shard_files"
    ):
        reopen(verify=True)


def test_a_link_out_of_the_index_folder_is_refused_read_or_built_through(tmp_path):
    """A shard file that is a link elsewhere (the same bytes: every other check passes) is not read; a
    build folder that is a link elsewhere is not written through (build.json and shards there)."""
    from spladekit.errors import DataFormatError

    docs = integer_matrix(300, 60, 8, seed=3)
    index = Index.from_vectors(tmp_path / "idx", docs, shuffled_ids(300, 4))
    content = index.metadata["content_hash"]
    open_or_build(index.folder, index.docs, content, None, max_entries=1200)
    outside = tmp_path / "outside"
    outside.mkdir()
    shard = index.folder / "seismic" / "shard-000000" / SeismicSearcher.INDEX_FILE
    shutil.move(shard, outside / shard.name)
    shard.symlink_to(outside / shard.name)
    with pytest.raises(DataFormatError, match="outside the index folder") as info:
        open_or_build(index.folder, index.docs, content, None, max_entries=1200)
    assert info.value.path == shard
    with pytest.raises(DataFormatError, match="outside the index folder"):
        Index.open(index.folder, verify=True)
    shutil.rmtree(index.folder / "seismic")
    (outside / "keep.txt").write_text("not spladekit's")
    (index.folder / ".seismic.build").symlink_to(outside)
    before = sorted(p.name for p in outside.rglob("*"))
    with pytest.raises(DataFormatError, match="outside the index folder") as info:
        open_or_build(index.folder, index.docs, content, None, max_entries=1200)
    assert info.value.path == index.folder / ".seismic.build"
    assert sorted(p.name for p in outside.rglob("*")) == before


def test_shards_with_a_knn_graph_answer_the_exact_top_k_pruning_dropped(tmp_path):
    """Each shard builds its own k-NN graph (``nknn``): on the twin corpus of
    ``test_index_seismic`` (term 0's lists keep the A rows only), a search with ``n_knn`` 1 through
    ``Index.search`` finds every B too, and equals the exact dot-product top-k (numpy); the graph is
    stored in the shards (reopened: ``knn_len``), and ``n_knn`` beyond it is refused."""
    from tests.index.test_seismic import _twins

    pairs = 6
    docs = _twins(pairs)
    ids = shuffled_ids(docs.shape[0], 3)
    index = Index.from_vectors(tmp_path / "idx", docs, ids)
    build = SeismicBuildParams(n_postings=pairs, max_fraction=1, min_cluster_size=1, nknn=1)
    sharded = open_or_build(index.folder, index.docs, index.metadata["content_hash"], build, max_entries=docs.nnz // 2)
    assert sharded.ranges == [(0, pairs), (pairs, 2 * pairs)]  # 2 shards, 3 pairs each (shares of n_postings: 3)
    reopened = Index.open(index.folder)
    assert reopened.seismic().knn_len == 1
    query = sp.csr_matrix((np.array([1.0], np.float32), ([0], [0])), shape=(1, docs.shape[1]))
    every = dict(query_cut=10_000, heap_factor=1e-9, num_threads=1)
    k = 2 * pairs
    scores = docs[:, 0].toarray().ravel()
    exact = [(ids[r], float(scores[r])) for r in np.argsort(-scores, kind="stable")[:k]]  # no ties: the weights differ
    without = reopened.search(query, k=k, searcher=SeismicConfig(search=SeismicSearchParams(**every))).hits[0]
    assert sorted(without) == sorted(exact[:pairs])  # the A's only: each shard's list of term 0 lost its B's
    got = reopened.search(query, k=k, searcher=SeismicConfig(search=SeismicSearchParams(**every, n_knn=1))).hits[0]
    assert [d for d, _ in got] == [d for d, _ in exact]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in exact], rtol=2**-10)  # Seismic stores f16 values
    with pytest.raises(
        ValueError, match=r"n-knn 2 asks for more neighbours than the k-NN graph .* holds \(1\)"
    ):  # before any search
        reopened.search(query, k=k, searcher=SeismicConfig(search=SeismicSearchParams(**every, n_knn=2)))


def test_a_shard_too_small_for_the_knn_graph_is_refused_before_any_shard_is_built(tmp_path):
    """Shards of 5, 5 and 4 documents with nknn 3 (needs 5): the third is refused, naming it,
    before the first shard is built (no shard folder, no build journal left)."""
    from tests.index.test_seismic import _twins

    docs = _twins(7)  # 14 rows of 2 entries
    index = Index.from_vectors(tmp_path / "idx", docs, shuffled_ids(14, 4))
    build = SeismicBuildParams(n_postings=7, max_fraction=1, min_cluster_size=1, nknn=3)
    assert shard_ranges(docs.indptr, 12) == [(0, 5), (5, 10), (10, 14)]  # about equal: 28 entries in 3
    with pytest.raises(
        ValueError, match=r"nknn 3: .* needs at least 5 documents with a term, and shard 2 \(rows \[10, 14\)\) has 4"
    ):
        open_or_build(index.folder, index.docs, index.metadata["content_hash"], build, max_entries=12)
    assert not (index.folder / "seismic").exists() and not (index.folder / ".seismic.build").exists()


def test_a_params_json_whose_nknn_differs_from_the_shards_graph_is_refused(tmp_path):
    """params.json saying nknn 5 over files built without a graph would let a rebuild asking for 5
    be skipped and every n_knn search be refused: opening names the field."""
    from spladekit.errors import DataFormatError
    from tests.index.test_seismic import _twins

    docs = _twins(6)
    index = Index.from_vectors(tmp_path / "idx", docs, shuffled_ids(12, 5))
    open_or_build(
        index.folder, index.docs, index.metadata["content_hash"], SeismicBuildParams(n_postings=6), max_entries=12
    )
    path = index.folder / "seismic" / "params.json"
    record = json.loads(path.read_text())
    record["build"]["nknn"] = 5
    path.write_text(json.dumps(record))
    with pytest.raises(
        DataFormatError,
        match=r"params.json: field 'build.nknn': build.nknn 5 where shard 0's file holds a k-NN graph of 0",
    ):
        Index.open(index.folder).seismic()
