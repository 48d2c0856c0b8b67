"""The streamed import (spladekit.index.export.import_to_index for row-major formats).

What it is compared with, computed another way: the folder :func:`spladekit.index.writer.save_index`
writes from the matrix :func:`spladekit.index.export.import_vectors` reads whole (the in-memory
import, the path every format took before), file by file and byte by byte; the blocks the import
hands the writer are checked against that matrix's rows (scipy slices). Peak memory is the
``VmHWM`` of a fresh subprocess minus its ``VmRSS`` just before the import (Linux ``/proc``; the peak is
reset through ``/proc/self/clear_refs`` before each of its two imports), as in
``tests/index/test_writer.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index import writer
from spladekit.index.export import export_vectors, import_to_index, import_vectors, resolve_import, streamed_import
from spladekit.index.index import Index
from spladekit.index.writer import save_index

V = 60
VOCAB = [f"t{j}" for j in range(V - 2)] + ["a.m.", "50%"]  # elastic escapes '.' and '%' in its keys
ROW_MAJOR = ("anserini", "anserini-queries", "seismic", "qdrant", "milvus", "pgvector", "elastic")
BLOCK = 37  # entries per block once PIECE_BYTES is patched below (budget // 8 // PIECE_BYTES)


def vectors(rows: int = 300, seed: int = 0) -> tuple[sp.csr_matrix, list[str]]:
    """Random weights with a row of every term (longer than a block), an empty row, and ids with
    multi-byte UTF-8 (the empty row is left out of anserini-queries exports: no term)."""
    rng = np.random.default_rng(seed)
    m = sp.random(rows, V, density=0.15, random_state=rng, format="lil", dtype=np.float32)
    if rows > 11:
        m[7, :] = rng.uniform(0.05, 3.0, V).astype(np.float32)  # 60 entries > BLOCK: a block of its own
        m[11, :] = 0
    m = sp.csr_matrix(m)
    m.data = (m.data * 3 + 0.01).astype(np.float32)  # ≥ 0.01: no weight rounds to 0 at scale 100
    m.eliminate_zeros()
    ids = [f"d{i}-{'é' * (i % 3)}" for i in range(rows)]
    return m, ids


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("fmt", ROW_MAJOR)
def test_streamed_import_writes_the_in_memory_import_byte_for_byte(tmp_path, monkeypatch, fmt):
    m, ids = vectors()
    if fmt == "anserini-queries":  # its export leaves out the query with no term
        keep = np.flatnonzero(np.diff(m.indptr) > 0)
        m, ids = m[keep], [ids[i] for i in keep]
    export_vectors(fmt, tmp_path / "exp", m, ids, VOCAB)
    matrix, read_ids = import_vectors(fmt, tmp_path / "exp", VOCAB)
    meta = {"model": "M", "imported_from": str(tmp_path / "exp"), "imported_format": fmt}
    save_index(tmp_path / "memory", matrix, read_ids, meta, vocabulary=VOCAB)  # the in-memory import, default budget
    # blocks of ≤ 37 entries (and runs / merge steps as small as test_index_writer's): many blocks
    monkeypatch.setattr(writer, "PIECE_BYTES", writer.MIN_BUDGET // 8 // BLOCK)
    monkeypatch.setattr(writer, "RUN_BYTES", writer.MIN_BUDGET // 2 // 61)
    monkeypatch.setattr(writer, "MERGE_BYTES", writer.MIN_BUDGET * 3 // 4 // 50)
    import_to_index(
        fmt, tmp_path / "exp", VOCAB, tmp_path / "streamed", metadata={"model": "M"}, memory_budget=writer.MIN_BUDGET
    )
    assert files(tmp_path / "streamed") == files(
        tmp_path / "memory"
    )  # same rows into a writer whose output is independent of blocks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "memory", "streamed"]  # the scratch rows are gone

    # the blocks themselves: consecutive row ranges of the matrix, ≤ BLOCK entries unless one row
    path, scale, options = resolve_import(fmt, tmp_path / "exp", None, {})
    (tmp_path / "spill").mkdir()
    doc_ids, blocks = streamed_import(fmt, path, VOCAB, scale, options, tmp_path / "spill", writer.MIN_BUDGET)
    assert list(doc_ids) == read_ids
    row = 0
    for block in blocks():
        assert block.nnz <= BLOCK or block.shape[0] == 1
        want = matrix[row : row + block.shape[0]]
        assert (block != want).nnz == 0 and block.has_canonical_format and block.dtype == np.float32
        row += block.shape[0]
    assert row == matrix.shape[0]


@pytest.mark.parametrize(
    "fmt, line, message",
    [
        (
            "seismic",
            '{"id": "x", "vector": {"nope": 1.0}}',
            "line 3: field 'vector': token 'nope' is not in the model's vocabulary",
        ),
        (
            "qdrant",
            '{"id": 2, "payload": {"doc_id": "x"}, "vector": {"splade": {"indices": [99], "values": [1.0]}}}',
            "line 3: field 'indices': index 99 ≥ vocabulary size 60",
        ),
        ("pgvector", "2\tx\t{1:0.5}/61", "line 3: field 'v': dimension 61 ≠ vocabulary size 60"),
        ("anserini", "not json", "line 3: not valid JSON (Expecting value, column 1)"),  # spladekit.io.read_jsonl
    ],
)
def test_a_bad_line_fails_the_streamed_import_as_it_fails_the_in_memory_one(tmp_path, fmt, line, message):
    m, ids = vectors(rows=2)
    export_vectors(fmt, tmp_path / "exp", m, ids, VOCAB)
    from spladekit.index.export import FILES

    target = tmp_path / "exp" / FILES[fmt]
    target.write_text(target.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    expected = f"{target}, {message}"  # DataFormatError's "FILE, line N: field 'F': ..." (spladekit.errors)
    with pytest.raises(DataFormatError) as memory:
        import_vectors(fmt, tmp_path / "exp", VOCAB)
    with pytest.raises(DataFormatError) as streamed:
        import_to_index(fmt, tmp_path / "exp", VOCAB, tmp_path / "out")
    assert str(streamed.value) == str(memory.value) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]  # no folder, no scratch rows


def test_an_empty_file_repeated_ids_and_a_non_finite_weight_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=re.escape(f"{tmp_path / 'empty.jsonl'}: no vectors: the file is empty")):
        import_to_index("seismic", tmp_path / "empty.jsonl", VOCAB, tmp_path / "out")
    twice = (
        '{"id": "a", "vector": {"t1": 1.0}}\n{"id": "b", "vector": {"t2": 1.0}}\n{"id": "a", "vector": {"t3": 1.0}}\n'
    )
    (tmp_path / "twice.jsonl").write_text(twice, encoding="utf-8")
    with pytest.raises(ValueError, match="'a' is given twice"):
        import_to_index("seismic", tmp_path / "twice.jsonl", VOCAB, tmp_path / "out")
    (tmp_path / "inf.jsonl").write_text(
        '{"id": "a", "vector": {"t1": 1.0}}\n{"id": "b", "vector": {"t2": Infinity}}\n', encoding="utf-8"
    )
    with pytest.raises(DataFormatError, match=r"inf\.jsonl, line 2.*not finite \(inf\)"):  # refused as it is read
        import_to_index("seismic", tmp_path / "inf.jsonl", VOCAB, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl", "inf.jsonl", "twice.jsonl"]
    (tmp_path / "file").write_text("x")
    from spladekit.errors import OutputPathError

    with pytest.raises(OutputPathError, match="is a file"):
        import_to_index("seismic", tmp_path / "twice.jsonl", VOCAB, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


# ----------------------------------------------------------------------------------- peak memory
BUDGET = writer.MIN_BUDGET  # 16 MiB, the smallest the writer accepts
DOCS, TERMS, VOCAB_SIZE = 10_000, 400, 30_522  # 4M entries: 46 MiB as an int64/float32 CSR, 2.9 × the budget

PROBE = textwrap.dedent("""
    import json, re, sys, time
    from pathlib import Path
    from spladekit.index.export import import_to_index, import_vectors
    from spladekit.index.writer import save_index

    def status(key):
        return int(re.search(rf"^{key}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024

    streamed_source, streamed_out, memory_source, memory_out = sys.argv[1:5]
    budget, vocab_size = int(sys.argv[5]), int(sys.argv[6])
    vocabulary = [f"t{j}" for j in range(vocab_size)]
    result = {}
    for mode, source, out in (("streamed", streamed_source, streamed_out), ("memory", memory_source, memory_out)):
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0): each import's own peak
        base, start = status("VmRSS"), time.perf_counter()
        if mode == "streamed":
            import_to_index("qdrant", source, vocabulary, out, memory_budget=budget)
        else:  # the in-memory import this replaces: the whole matrix, then the bounded writer
            matrix, ids = import_vectors("qdrant", source, vocabulary)
            save_index(out, matrix, ids, {"imported_from": source, "imported_format": "qdrant"}, vocabulary=vocabulary, memory_budget=budget)
            del matrix, ids
        result[mode] = {"growth": status("VmHWM") - base, "seconds": time.perf_counter() - start}
    print(json.dumps(result))
""")


def probe(*args) -> dict:
    """Both imports in one fresh interpreter (importing spladekit takes seconds), each measured from
    the RSS just before it to its own peak."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def point_chunks():
    """DOCS points of TERMS distinct sorted terms each (deterministic), 1,000 at a time: ``[1000, TERMS]``
    column ids and integer weights."""
    rng = np.random.default_rng(0)
    for start in range(0, DOCS, 1000):
        cols = np.sort(
            rng.integers(0, VOCAB_SIZE // TERMS, size=(1000, TERMS)) + np.arange(TERMS) * (VOCAB_SIZE // TERMS), axis=1
        )
        yield start, cols, rng.integers(1, 1000, size=(1000, TERMS))


def write_points(path: Path) -> int:
    """The points of :func:`point_chunks` as ``points.jsonl``, written with plain string joins (no
    JSON object per point); returns the entries."""
    with open(path, "w", encoding="utf-8") as f:
        for start, cols, vals in point_chunks():
            for i in range(1000):
                f.write(
                    f'{{"id": {start + i}, "payload": {{"doc_id": "doc{start + i}"}}, "vector": {{"splade": {{"indices": ['
                    + ",".join(map(str, cols[i].tolist()))
                    + '], "values": ['
                    + ",".join(map(str, vals[i].tolist()))
                    + "]}}}\n"
                )
    return DOCS * TERMS


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="peak memory is read (and reset) from Linux /proc"
)
def test_an_import_several_times_the_budget_stays_within_it(tmp_path):
    entries = write_points(tmp_path / "points.jsonl")
    in_memory_csr = entries * (8 + 4) + (DOCS + 1) * 8  # int64 indices + float32 weights + indptr (rows_to_csr)
    assert in_memory_csr > 2.8 * BUDGET
    # the in-memory import this replaces, on half the points (to keep the test short): already over the bound
    with open(tmp_path / "points.jsonl", "rb") as whole, open(tmp_path / "half.jsonl", "wb") as half:
        half.writelines(line for _, line in zip(range(DOCS // 2), whole))
    peaks = probe(
        tmp_path / "points.jsonl",
        tmp_path / "streamed",
        tmp_path / "half.jsonl",
        tmp_path / "memory",
        BUDGET,
        VOCAB_SIZE,
    )
    streamed, memory = peaks["streamed"], peaks["memory"]
    print(
        f"peak growth: streamed {streamed['growth'] / 2**20:.1f} MiB ({streamed['seconds']:.1f} s), in memory (half the points) "
        f"{memory['growth'] / 2**20:.1f} MiB ({memory['seconds']:.1f} s), budget {BUDGET / 2**20:.0f} MiB, in-memory CSR {in_memory_csr / 2**20:.1f} MiB"
    )
    # the budget covers the writer's work (tests/index/test_writer.py: ≤ budget + 8 MiB); on top:
    # the ids (10,000 × (≤ 8 + 16) bytes < 0.3 MB), one parsed point (400 ints and weights as Python
    # objects and arrays, < 0.1 MB), one block (≤ budget / 384 entries as int32 + float32 + its
    # canonical copy, < 1 MB) and the spill's three 1 MiB write buffers: budget + 8 MiB holds them all
    assert streamed["growth"] <= BUDGET + (8 << 20), streamed
    assert memory["growth"] > BUDGET + (8 << 20), memory  # the bound tells the two apart: it can fail
    index = Index.open(tmp_path / "streamed")  # mapped, not read
    assert (
        index.docs.shape == (DOCS, VOCAB_SIZE)
        and index.docs.nnz == entries
        and list(index.doc_ids) == [f"doc{i}" for i in range(DOCS)]
    )
    np.testing.assert_array_equal(index.docs.indptr, np.arange(0, entries + 1, TERMS))
    for start, cols, vals in point_chunks():  # every row, against the generator (integer weights: exact in float32)
        a, b = start * TERMS, (start + 1000) * TERMS
        np.testing.assert_array_equal(np.asarray(index.docs.indices[a:b]).reshape(1000, TERMS), cols)
        np.testing.assert_array_equal(np.asarray(index.docs.data[a:b]).reshape(1000, TERMS), vals.astype(np.float32))
