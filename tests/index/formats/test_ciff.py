"""CIFF export and import (spladekit.index.formats.ciff).

The wire format is checked against the protobuf library's own serialisation of the same messages;
the round trip against the original folder's arrays and content hash. That BMP's own converter
reads the files (and scores them exactly) is in tests/index/formats/test_engines.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.export import export_index, import_to_index
from spladekit.index.formats import ciff
from spladekit.index.index import Index


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_posting_lists_are_the_bytes_protobuf_writes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    docids = np.sort(rng.choice(2**30, size=n, replace=False))
    if seed == 0:
        docids[0] = 0  # a first docid 0: protobuf omits the zero field
    tfs = rng.integers(1, 2**31 - 1, size=n) if seed == 2 else rng.integers(1, 300, size=n)
    m = ciff.messages()
    want = m["PostingsList"](term=f"tok-é{seed}", df=n, cf=int(tfs.sum()))
    want.postings.extend([m["Posting"](docid=int(g), tf=int(t)) for g, t in zip(np.diff(docids, prepend=0), tfs)])
    assert ciff.postings_list_bytes(f"tok-é{seed}", docids, tfs) == want.SerializeToString()


def quantised_corpus(seed=3, rows=400, vocab=60):
    rng = np.random.default_rng(seed)
    m = sp.random(rows, vocab, density=0.15, random_state=rng, format="csr", dtype=np.float32)
    m.data = (rng.integers(1, 400, m.nnz) / 100).astype(np.float32)  # k / 100: exactly what scale 100 gives back
    m = m.tolil()
    m[5] = 0  # a document with no term
    m = m.tocsr()
    m.eliminate_zeros()
    return m, [f"d{i}" for i in rng.permutation(rows)], [f"t{j}" if j % 7 else f"##é{j}" for j in range(vocab)]


def test_round_trip_index_ciff_index_is_identical(tmp_path):
    m, ids, vocab = quantised_corpus()
    Index.from_vectors(tmp_path / "a", m, ids, {"model": "M"}, vocabulary=vocab)
    manifest = export_index(tmp_path / "a", "ciff", tmp_path / "exp")
    assert manifest.format == "ciff" and manifest.scale == 100.0
    import_to_index("ciff", tmp_path / "exp", vocab, tmp_path / "b")
    a, b = Index.open(tmp_path / "a"), Index.open(tmp_path / "b", verify=True)
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a.docs, part), getattr(b.docs, part))  # float32(k / 100) both ways: exact
    assert list(a.doc_ids) == list(b.doc_ids)
    assert a.metadata["content_hash"] == b.metadata["content_hash"]
    # the header's counts, read with the protobuf classes
    m_ = ciff.messages()
    with open(tmp_path / "exp" / "index.ciff", "rb") as f:
        header = m_["Header"].FromString(ciff._read_delimited(f, tmp_path, "header"))
    tf = np.rint(m.data * 100).astype(np.int64)
    assert (header.num_docs, header.num_postings_lists, header.total_terms_in_collection) == (
        400,
        len(np.unique(m.indices)),
        int(tf.sum()),
    )
    assert json.loads((tmp_path / "exp" / "export.json").read_text())["count"] == 400


def test_quantisation_drops_impacts_that_round_to_zero_and_bad_files_are_named(tmp_path):
    m = sp.csr_matrix(np.array([[0.004, 0.5], [0.0, 0.0]], np.float32))
    out = tmp_path / "x.ciff"
    stats = ciff.write_ciff(out, m, m.T.tocsr(), ["a", "b"], ["u", "v"], scale=100)
    assert stats == {"num_postings_lists": 1, "num_docs": 2, "postings": 1, "max_tf": 50}
    back, ids = ciff.read_ciff(out, ["u", "v"])
    assert back.toarray().tolist() == [[0.0, 0.5], [0.0, 0.0]] and ids == ["a", "b"]
    with pytest.raises(DataFormatError, match="term 'v' is not in the vocabulary"):
        ciff.read_ciff(out, ["u", "w"])
    whole = out.read_bytes()
    out.write_bytes(whole + b"garbage")  # a complete stream with bytes after it: refused, not read in part
    with pytest.raises(DataFormatError, match="7 bytes after the last document record"):
        ciff.read_ciff(out, ["u", "v"])
    out.write_bytes(whole[:-3])
    with pytest.raises(DataFormatError, match="truncated"):
        ciff.read_ciff(out, ["u", "v"])
    with pytest.raises(ValueError, match="tokens repeat"):
        ciff.write_ciff(out, m, m.T.tocsr(), ["a", "b"], ["u", "u"])


def _folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_external_transpose_gives_read_ciffs_matrix_in_runs_and_blocks(tmp_path):
    """Tiny budgets (runs of 50 postings, blocks of 5 entries: many runs and a posting list spanning
    several) give the very matrix of the in-memory reader, block by block; written as a folder, the
    same bytes."""
    from spladekit.index.writer import write_index

    m, ids, vocab = quantised_corpus(seed=4, rows=300, vocab=40)
    m = m.tolil()
    m[7, :] = 0.004  # impacts that round to 0: no entry either way
    m = m.tocsr()
    stats = ciff.write_ciff(tmp_path / "x.ciff", m, m.T.tocsr(), ids, vocab)
    want, want_ids = ciff.read_ciff(tmp_path / "x.ciff", vocab)
    spill = tmp_path / "spill"
    spill.mkdir()
    budget = 4000
    got_ids, count, blocks = ciff.transposed_blocks(tmp_path / "x.ciff", vocab, spill, memory_budget=budget)
    assert count == 300 and list(got_ids) == want_ids
    capacity, limit = (
        budget // ciff.RUN_ENTRY_BYTES,
        budget // 8 // ciff.BLOCK_ENTRY_BYTES,
    )  # 100 postings a run, 10 entries a block
    assert len(sorted(spill.glob("run-*.rows.npy"))) == -(-stats["postings"] // capacity)  # ⌈postings / capacity⌉ runs
    assert max(stats["postings"] // 40, 1) > capacity // 10  # lists long enough to span runs
    parts = list(blocks())
    assert len(parts) > 1 and all(p.nnz <= limit or p.shape[0] == 1 for p in parts)
    got = sp.vstack(parts, format="csr")
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(got, part), getattr(want, part))  # same float32(tf / scale), same order
    write_index(tmp_path / "a", blocks, got_ids, len(vocab), {}, vocab)
    from spladekit.index.writer import save_index

    save_index(tmp_path / "b", want, want_ids, {}, vocabulary=vocab)
    assert _folder_bytes(tmp_path / "a") == _folder_bytes(tmp_path / "b")


def test_bounded_ciff_import_equals_the_in_memory_import(tmp_path):
    from spladekit.index.writer import save_index

    m, ids, vocab = quantised_corpus(seed=5, rows=500, vocab=70)
    Index.from_vectors(tmp_path / "src", m, ids, vocabulary=vocab)
    export_index(tmp_path / "src", "ciff", tmp_path / "exp")
    meta = {"model": "M"}
    import_to_index("ciff", tmp_path / "exp", vocab, tmp_path / "bounded", metadata=meta, memory_budget=1 << 24)
    matrix, read_ids = ciff.read_ciff(tmp_path / "exp" / "index.ciff", vocab)
    save_index(
        tmp_path / "whole",
        matrix,
        read_ids,
        dict(meta, imported_from=str(tmp_path / "exp"), imported_format="ciff"),
        vocabulary=vocab,
    )
    assert _folder_bytes(tmp_path / "bounded") == _folder_bytes(tmp_path / "whole")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the runs are removed


CIFF_PEAK = """
import sys
from pathlib import Path
from spladekit.index.export import import_to_index
from spladekit.index.formats import ciff
from spladekit.index.writer import save_index
import google.protobuf, spladekit.index.writer  # loaded before the baseline
ciff.messages()

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

mode, source, out, vocab_size = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
vocab = [f"t{j}" for j in range(vocab_size)]
try:
    with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to the current RSS
        f.write("5")
except OSError:
    print("no-peak-reset")
    raise SystemExit
before = status("VmRSS")
if mode == "bounded":
    import_to_index("ciff", source, vocab, out, memory_budget=1 << 24)
else:  # the in-memory reader, then the same writer
    matrix, ids = ciff.read_ciff(source, vocab)
    save_index(out, matrix, ids, {}, vocabulary=vocab, memory_budget=1 << 24)
print(status("VmHWM") - before)
"""


def test_bounded_ciff_import_peak_stays_within_the_budget(tmp_path):
    """Peak RSS growth (fresh process, libraries loaded, peak reset; VmHWM − VmRSS) of importing a
    1.2M-posting CIFF file at the least budget B = 16 MiB. Bound for the bounded import: the read
    pass's run buffer and sort (≤ B) and then the writer (≤ B) with the caller's block (B / 8) never
    overlap, so ≤ B + B / 8, plus the ids and row counts (D × (8 + 16 + 6) bytes), the parsed
    message of one posting list (≤ D postings × ≈ 50 bytes) and 16 MB of allocator slack. The
    in-memory reader holds int64 rows, columns and impacts of every posting twice over (≈ 50 bytes
    a posting: ≈ 60 MB here), so the test fails for an import that holds the file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    rng = np.random.default_rng(9)
    rows, vocab_size, nnz = 24_000, 2_000, 50
    indices = np.concatenate([np.sort(rng.choice(vocab_size, nnz, replace=False)) for _ in range(rows)])
    m = sp.csr_matrix(
        (rng.integers(1, 300, rows * nnz) / 100, indices, np.arange(rows + 1) * nnz), shape=(rows, vocab_size)
    )
    ciff.write_ciff(
        tmp_path / "x.ciff", m, m.T.tocsr(), [f"doc{i}" for i in range(rows)], [f"t{j}" for j in range(vocab_size)]
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3] / "src"))

    def peak(mode):
        out = subprocess.run(
            [sys.executable, "-c", CIFF_PEAK, mode, str(tmp_path / "x.ciff"), str(tmp_path / mode), str(vocab_size)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        if "no-peak-reset" in out.stdout:
            pytest.skip("/proc/self/clear_refs cannot be written here (the peak cannot be reset)")
        return int(out.stdout.split()[-1])

    budget = 1 << 24
    bounded, whole = peak("bounded"), peak("whole")
    bound = budget + budget // 8 + rows * 30 + rows * 50 + (16 << 20)
    assert bounded <= bound, (bounded, whole, bound)
    assert whole > bound, (bounded, whole, bound)
    assert _folder_bytes(tmp_path / "bounded") != {} and Index.open(tmp_path / "bounded", verify=True).docs.nnz == m.nnz


def _craft(path, lists, records, **header):
    """A CIFF stream written message by message with the protobuf classes: ``lists`` =
    ``[(term, df, [(docid gap, tf)])]``, ``records`` = collection ids in docid order."""
    m = ciff.messages()
    with open(path, "wb") as f:
        head = dict(version=1, num_postings_lists=len(lists), num_docs=len(records))
        ciff._write_delimited(f, m["Header"](**{**head, **header}).SerializeToString())
        for term, df, postings in lists:
            plist = m["PostingsList"](term=term, df=df)
            plist.postings.extend([m["Posting"](docid=g, tf=t) for g, t in postings])
            ciff._write_delimited(f, plist.SerializeToString())
        for docid, name in enumerate(records):
            ciff._write_delimited(f, m["DocRecord"](docid=docid, collection_docid=name).SerializeToString())
    return path


@pytest.mark.parametrize(
    "lists, records, header, message",
    [
        ([], [], {"num_docs": -1}, "header: num_docs -1 is negative"),
        ([("u", 3, [(0, 2), (1, 5)])], ["a", "b"], {}, r"posting list 0 \('u'\): df 3 but 2 postings"),
        (
            [("u", 2, [(0, 2), (1, -500)])],
            ["a", "b"],
            {},
            r"posting list 0 \('u'\): tf -500 at docid 1: an impact is ≥ 0",
        ),
        ([("u", 1, [(0, 2)])], ["a", ""], {}, "document record 1: collection_docid '' is empty"),
        (
            [("u", 1, [(0, 2)])],
            ["a", "b\tc"],
            {},
            "document record 1: collection_docid 'b\\\\tc' is holding white space",
        ),
    ],
)
def test_bad_ciff_fields_are_refused_naming_the_file_and_record(tmp_path, lists, records, header, message):
    path = _craft(tmp_path / "bad.ciff", lists, records, **header)
    with pytest.raises(DataFormatError, match=rf"bad\.ciff: .*{message}"):
        ciff.read_ciff(path, ["u", "v"])
    with pytest.raises(
        DataFormatError, match=rf"bad\.ciff: .*{message}"
    ):  # the bounded import reads with the same checks
        import_to_index("ciff", path, ["u", "v"], tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_a_repeated_collection_docid_names_the_file_and_both_records(tmp_path):
    path = _craft(tmp_path / "rep.ciff", [("u", 3, [(0, 2), (1, 5), (1, 1)])], ["a", "b", "a"])
    with pytest.raises(
        DataFormatError, match=r"rep\.ciff: .*collection_docid 'a' is given twice: document records 0 and 2"
    ):
        import_to_index("ciff", path, ["u", "v"], tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_weights_that_round_to_impact_zero_are_counted_and_an_empty_export_refused(tmp_path, capsys):
    m, ids, vocab = quantised_corpus()
    m = m.copy()
    m.data[::3] = m.data[::3] / 1000  # a third of the weights below 0.005: impact 0 at scale 100
    Index.from_vectors(tmp_path / "a", m, ids, vocabulary=vocab)
    manifest = export_index(tmp_path / "a", "ciff", tmp_path / "exp")
    zero = int(np.count_nonzero(np.floor(m.data.astype(np.float64) * 100 + 0.5) == 0))
    assert zero > 0 and manifest.options["weights_rounded_to_zero"] == zero
    assert f"{zero} of {m.nnz} weights" in capsys.readouterr().err
    assert ciff.read_ciff(tmp_path / "exp" / "index.ciff", vocab)[0].nnz == m.nnz - zero
    with pytest.raises(ValueError, match=r"every one of the \d+ weights rounds to impact 0 at scale 1e-06"):
        export_index(tmp_path / "a", "ciff", tmp_path / "none", scale=1e-6)
    assert not (tmp_path / "none").exists()
