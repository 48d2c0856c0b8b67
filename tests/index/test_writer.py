"""Writing an index under a memory budget (spladekit.index.writer).

The expected folder is computed independently: the document arrays by scipy (canonical CSR), the
term-major copy by scipy's transpose (``docs.T.tocsr()``), the tie ranks by sorting the Python id
strings, the hashes by :func:`spladekit.index.layout.hash_arrays` over those arrays. Peak memory is the
``VmHWM`` of a fresh subprocess minus its ``VmRSS`` just before the write (Linux ``/proc``), with the
pages of a memory-mapped input (the caller's file, read in place) subtracted as the kernel reports
them for that mapping (``/proc/self/smaps``).
"""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.index import writer
from spladekit.index.exact import tie_ranks
from spladekit.index.index import Index
from spladekit.index.layout import hash_arrays
from spladekit.index.merge import merge_shards
from spladekit.index.writer import matrix_blocks, write_index

FILES = (
    "docs.indptr.npy",
    "docs.indices.npy",
    "docs.data.npy",
    "postings.indptr.npy",
    "postings.indices.npy",
    "postings.data.npy",
    "doc_ids.offsets.npy",
    "doc_ids.utf8.npy",
    "tie_rank.npy",
    "index.json",
)


def random_matrix(rows: int, vocab: int, density: float, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    m = sp.random(rows, vocab, density=density, random_state=rng, format="csr", dtype=np.float32)
    m.data = rng.integers(1, 300, size=m.nnz).astype(np.float32)
    dense = m.toarray()
    dense[:, 3] = 7.0  # one term in every document: a posting list longer than a merge step below
    return sp.csr_matrix(dense)


def check_folder(folder: Path, m: sp.csr_matrix, ids: list[str]) -> None:
    """The folder holds m (rows and term-major), the ids and their tie ranks, with correct hashes."""
    docs = sp.csr_matrix(m, dtype=np.float32, copy=True)
    docs.sum_duplicates()
    docs.eliminate_zeros()
    postings = docs.T.tocsr()  # scipy's own transpose: rows ascending inside each list
    postings.sort_indices()
    for name, matrix in (("docs", docs), ("postings", postings)):
        for part in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(
                np.load(folder / f"{name}.{part}.npy"), getattr(matrix, part)
            )  # integers / same float32 values: exact
    np.testing.assert_array_equal(np.load(folder / "tie_rank.npy"), tie_ranks(ids))
    meta = json.loads((folder / "index.json").read_text())
    assert meta["content_hash"] == hash_arrays(docs.indptr, docs.indices, docs.data, ids, docs.shape)
    assert meta["postings_hash"] == hash_arrays(postings.indptr, postings.indices, postings.data, (), postings.shape)
    index = Index.open(folder, verify=True)
    assert list(index.doc_ids) == ids


def test_tiny_runs_and_steps_give_the_in_memory_folder(tmp_path, monkeypatch):
    m = random_matrix(700, 90, 0.05, seed=0)
    ids = [f"d{i}" for i in np.random.default_rng(1).permutation(700)]
    ids[10], ids[11] = "é-ü", "z\x00"  # multi-byte UTF-8 and a trailing NUL (the fallback sort)
    write_index(tmp_path / "big", matrix_blocks(m), ids, 90, {"x": 1})
    # runs of 61 postings and merge steps of 50: many runs, and term 3's list (700) copied in pieces
    monkeypatch.setattr(writer, "RUN_BYTES", writer.MIN_BUDGET // 2 // 61)
    monkeypatch.setattr(writer, "MERGE_BYTES", writer.MIN_BUDGET * 3 // 4 // 50)
    monkeypatch.setattr(writer, "PIECE_BYTES", writer.MIN_BUDGET // 8 // 37)
    write_index(
        tmp_path / "small", matrix_blocks(m, writer.MIN_BUDGET), ids, 90, {"x": 1}, memory_budget=writer.MIN_BUDGET
    )
    check_folder(tmp_path / "small", m, ids)
    for name in FILES:
        assert filecmp.cmp(tmp_path / "big" / name, tmp_path / "small" / name, shallow=False), name
    assert not (tmp_path / "small" / ".runs").exists()


def test_unicode_ids_sort_like_python_strings(tmp_path):
    ids = ["b", "a\x80", "é", "a", "ab", "Z", "日本", "a\x00b", "\U0001f600"]
    m = sp.csr_matrix(np.ones((len(ids), 4), np.float32))
    Index.from_vectors(tmp_path / "i", m, ids)
    np.testing.assert_array_equal(np.load(tmp_path / "i" / "tie_rank.npy"), tie_ranks(ids))


def test_repeated_ids_and_small_budgets_are_refused(tmp_path):
    m = sp.csr_matrix(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="'x' is given twice"):
        Index.from_vectors(tmp_path / "i", m, ["x", "y", "x"])
    assert not (tmp_path / "i").exists()
    with pytest.raises(ValueError, match="memory_budget"):
        Index.from_vectors(tmp_path / "i", m, ["a", "b", "c"], memory_budget=1 << 20)


def test_merged_shards_equal_one_folder_and_refuse_an_id_in_two(tmp_path):
    m = random_matrix(300, 40, 0.1, seed=2)
    ids = [f"doc{i:03d}" for i in range(300)]
    Index.from_vectors(tmp_path / "a", m[:120], ids[:120], {"model": "M"})
    Index.from_vectors(tmp_path / "b", m[120:], ids[120:], {"model": "M"})
    merged = merge_shards([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    check_folder(tmp_path / "ab", m, ids)
    assert merged.metadata["merged_from"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    Index.from_vectors(tmp_path / "c", m[:5], ["x", "y", "z", "w", "doc007"], {"model": "M"})
    with pytest.raises(ValueError, match="'doc007' is given twice"):
        merge_shards([tmp_path / "a", tmp_path / "c"], tmp_path / "ac")
    Index.from_vectors(tmp_path / "d", m[:5], list("vwxyz"), {"model": "other"})
    with pytest.raises(ValueError, match="different models"):
        merge_shards([tmp_path / "a", tmp_path / "d"], tmp_path / "ad")


# ----------------------------------------------------------------------------------- peak memory
DOCS, TERMS, VOCAB, BLOCK = 200_000, 125, 30_522, 2_000  # 25 M postings: 200 MB of indices + impacts
BUDGET = 64 << 20

PROBE = textwrap.dedent("""
    import json, re, sys
    from pathlib import Path
    import numpy as np, scipy.sparse as sp
    from spladekit.index.index import Index
    from spladekit.index.writer import write_index

    def status(key):
        return int(re.search(rf"^{key}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024

    def mapped(folder):  # resident bytes of the mappings of files under folder
        total, inside = 0, False
        for line in Path("/proc/self/smaps").read_text().splitlines():
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = folder in line
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
        return total

    mode, out, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    docs, terms, vocab, block = (int(a) for a in sys.argv[4:8])
    ids = [f"doc{i}" for i in range(docs)]
    if mode == "blocks":
        def blocks():  # deterministic synthetic blocks, generated as they are asked for
            for b, start in enumerate(range(0, docs, block)):
                rng = np.random.default_rng(b)
                n = min(block, docs - start)
                cols = np.sort(rng.integers(0, vocab // terms, size=(n, terms)) + np.arange(terms) * (vocab // terms), axis=1)
                yield sp.csr_matrix((rng.integers(1, 300, n * terms).astype(np.float32), cols.ravel().astype(np.int32),
                                     np.arange(0, n * terms + 1, terms)), shape=(n, vocab))
        base = status("VmRSS")
        write_index(out, blocks, ids, vocab, {}, memory_budget=budget)
        extra = 0
    else:
        src = sys.argv[8]
        parts = [np.load(Path(src) / f"docs.{p}.npy", mmap_mode="r") for p in ("data", "indices", "indptr")]
        m = sp.csr_matrix(tuple(parts), shape=(docs, vocab), copy=False)
        base = status("VmRSS")
        Index.from_vectors(out, m, ids, memory_budget=budget)
        extra = mapped(src)
    print(json.dumps({"growth": status("VmHWM") - base, "input_pages": extra}))
""")


def probe(*args) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from Linux /proc")
def test_a_corpus_three_times_the_budget_is_written_within_it(tmp_path):
    small = probe("blocks", tmp_path / "small", BUDGET, DOCS, TERMS, VOCAB, BLOCK)
    corpus = sum((tmp_path / "small" / f"docs.{p}.npy").stat().st_size for p in ("indices", "data"))
    assert corpus > 2.9 * BUDGET  # 200 MB for 64 MiB
    # the budget covers the writer's work; the ids (200k × (8 + 16) bytes) and one caller block
    # (2,000 × 125 postings with their generation temporaries, < 4 MB) come on top
    assert small["growth"] <= BUDGET + (8 << 20), small
    probe("blocks", tmp_path / "big", 8 << 30, DOCS, TERMS, VOCAB, BLOCK)  # one run, one merge step
    for name in FILES:
        assert filecmp.cmp(tmp_path / "big" / name, tmp_path / "small" / name, shallow=False), name
    # from_vectors over the memory-mapped arrays of that folder: its own pages are the caller's
    mapped = probe("mapped", tmp_path / "copy", BUDGET, DOCS, TERMS, VOCAB, BLOCK, tmp_path / "small")
    print(
        f"peak growth: blocks {small['growth'] / 2**20:.1f} MiB, memory-mapped {(mapped['growth'] - mapped['input_pages']) / 2**20:.1f} MiB "
        f"(+ {mapped['input_pages'] / 2**20:.1f} MiB of the input's pages), budget {BUDGET / 2**20:.0f} MiB"
    )
    assert mapped["growth"] - mapped["input_pages"] <= BUDGET + (8 << 20), mapped
    for name in FILES:
        assert filecmp.cmp(tmp_path / "copy" / name, tmp_path / "small" / name, shallow=False), name


def test_hit_ids_decode_at_once_like_one_by_one(tmp_path):
    ids = [f"d{i}-{'é' * (i % 4)}" for i in range(500)]
    index = Index.from_vectors(tmp_path / "i", sp.csr_matrix(np.ones((500, 2), np.float32)), ids)
    rows = np.random.default_rng(0).integers(0, 500, 300).tolist() + [0, 499, 7, 7]
    assert index.doc_ids.take(rows) == [ids[r] for r in rows] == [index.doc_ids[r] for r in rows]
    assert index.doc_ids.take([]) == []
    with pytest.raises(IndexError):
        index.doc_ids.take([500])


def test_budget_out_of_range_and_sizes_in_units():
    """A budget beyond 1 PiB is a ValueError naming the parameter and the range (it was an
    OverflowError deep in the merge); sizes parse by their unit's definition (SI: 1000^n, IEC: 1024^n)."""
    from spladekit.index.writer import MAX_BUDGET, parse_size

    m = sp.csr_matrix(np.ones((3, 4), np.float32))
    with pytest.raises(
        ValueError,
        match=r"memory_budget .*\[16777216 \(16 MiB\), 1125899906842624 \(1 PiB\)\], got 1180591620717411303424",
    ):
        Index.from_vectors("/nonexistent/never-written", m, ["a", "b", "c"], memory_budget=2**70)
    assert MAX_BUDGET == 1024**5
    assert (
        parse_size("512MiB") == 512 * 1024**2
        and parse_size("2GiB") == 2 * 1024**3
        and parse_size("1.5GB") == 1_500_000_000
    )
    assert (
        parse_size("67108864") == 64 * 1024**2 and parse_size(" 1 tib ") == 1024**4 and parse_size("20MB") == 20_000_000
    )
    for bad, why in (
        ("12XB", "is not a size"),
        ("-5MiB", "is not a size"),
        ("1KiB", "16 MiB"),
        ("2PiB", "1 PiB"),
        ("2000TiB", "1 PiB"),
    ):
        with pytest.raises(ValueError, match="--memory-budget") as info:
            parse_size(bad)
        assert why in str(info.value)
