"""Inputs an import used to accept silently (found by a bad-input tester, 2 Dec 2026), each refused
with an error naming the file and the line or field; and SIGTERM unwinding the CLI's temporary folders.

The vectors come from :func:`spladekit.index.export.export_vectors` (the project's own exports), edited
the way a cut copy or a hand edit would; what is expected is read off the edit (the line changed,
the count removed), not computed by the code under test.
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
from spladekit.index.export import FILES, export_vectors, import_to_index, import_vectors
from spladekit.index.formats import normalise_entries

V = 12
VOCAB = [f"t{j}" for j in range(V)]


def _export(tmp_path: Path, fmt: str, rows: int = 5) -> Path:
    rng = np.random.default_rng(1)
    dense = rng.uniform(0.1, 2.0, (rows, V)).astype(np.float32) * (rng.random((rows, V)) < 0.5)
    dense[:, 0] = 0.5  # every row has a term
    folder = tmp_path / f"exp-{fmt}"
    export_vectors(fmt, folder, sp.csr_matrix(dense), [f"d{i}" for i in range(rows)], VOCAB)
    return folder


@pytest.mark.parametrize("fmt", ["seismic", "qdrant", "pgvector", "elastic", "anserini"])
def test_a_file_cut_at_a_line_boundary_is_refused_by_the_manifest_count(tmp_path, fmt):
    folder = _export(tmp_path, fmt)
    data = folder / FILES[fmt]
    lines = data.read_text().splitlines(keepends=True)
    cut = 2 if fmt == "elastic" else 1  # elastic: an action line and its document
    data.write_text("".join(lines[:-cut]))  # every remaining line is whole: it parses cleanly
    for attempt in (
        lambda: import_vectors(fmt, folder, VOCAB),
        lambda: import_to_index(fmt, folder, VOCAB, tmp_path / "out", memory_budget=1 << 24),
    ):
        with pytest.raises(DataFormatError, match=r"export\.json.*count.*announces 5 vectors, but 4 were read"):
            attempt()
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch rows left


def test_a_manifest_for_another_vocabulary_size_is_refused(tmp_path):
    folder = _export(tmp_path, "seismic")
    manifest = json.loads((folder / "export.json").read_text())
    manifest["vocab_size"] = V + 88
    (folder / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(DataFormatError, match=r"vocab_size.*100 columns, the vocabulary given has 12"):
        import_to_index("seismic", folder, VOCAB, tmp_path / "out")


def test_nan_weights_are_refused_naming_the_line(tmp_path):
    folder = _export(tmp_path, "seismic")
    data = folder / FILES["seismic"]
    lines = data.read_text().splitlines()
    record = json.loads(lines[2])
    record["vector"][next(iter(record["vector"]))] = float("nan")
    lines[2] = json.dumps(record)  # json writes NaN, which json.loads reads back as nan
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 3.*not finite \(nan\)"):
        import_to_index("seismic", data, VOCAB, tmp_path / "out")
    with pytest.raises(ValueError, match="not finite"):
        normalise_entries([1, 2], [0.5, float("nan")])
    assert normalise_entries([2, 1, 2], [0.5, 1.0, -0.25])[1].tolist() == [
        1.0,
        0.25,
    ]  # the stated rule: summed, ≤ 0 dropped


def test_weights_beyond_float32_are_refused_naming_the_line(tmp_path):
    """A finite float64 weight above float32's largest value (≈ 3.4e38) would be stored as inf."""
    folder = _export(tmp_path, "seismic")
    data = folder / FILES["seismic"]
    lines = data.read_text().splitlines()
    record = json.loads(lines[1])
    record["vector"][next(iter(record["vector"]))] = 1e39
    lines[1] = json.dumps(record)
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 2.*beyond float32's range \(1e\+39"):
        import_to_index("seismic", data, VOCAB, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    big = float(np.finfo(np.float32).max)
    with pytest.raises(ValueError, match="beyond float32"):  # two finite entries of one term, summed past the range
        normalise_entries([3, 3], [big, big])
    assert normalise_entries([3], [big])[1].tolist() == [big]  # the largest float32 itself is kept


def _tamper(data: Path, line: int, change) -> None:
    """Apply ``change`` to the JSON record on 1-based ``line`` of ``data`` and write it back."""
    lines = data.read_text().splitlines()
    record = json.loads(lines[line - 1])
    change(record)
    lines[line - 1] = json.dumps(record)
    data.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", ["seismic", "qdrant", "milvus", "elastic"])
def test_an_integer_past_float64_is_refused_naming_the_line(tmp_path, fmt):
    """A JSON integer of 400 digits: Python's OverflowError in the float64 conversion used to escape
    the readers as a traceback."""
    folder = _export(tmp_path, fmt)
    data = folder / FILES[fmt]
    line = 4 if fmt == "elastic" else 2  # elastic: an action line before each document

    def huge(record):
        if fmt in ("seismic", "elastic"):
            vector = record["vector" if fmt == "seismic" else next(k for k, v in record.items() if isinstance(v, dict))]
            vector[next(iter(vector))] = 10**400
        else:
            vector = (
                record["vector"]["splade"]
                if fmt == "qdrant"
                else next(v for v in record.values() if isinstance(v, dict))
            )
            vector["values"][0] = 10**400

    _tamper(data, line, huge)
    with pytest.raises(DataFormatError, match=rf"line {line}.*beyond float64's range"):
        import_to_index(fmt, data, VOCAB, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["1.5", True, None])
@pytest.mark.parametrize("fmt", ["qdrant", "milvus"])
def test_sparse_values_that_are_not_numbers_are_refused(tmp_path, fmt, value):
    """numpy reads "1.5" as 1.5 and true as 1.0: refused, as the token formats refuse them."""
    folder = _export(tmp_path, fmt)
    data = folder / FILES[fmt]

    def bad(record):
        vector = (
            record["vector"]["splade"] if fmt == "qdrant" else next(v for v in record.values() if isinstance(v, dict))
        )
        vector["values"][0] = value

    _tamper(data, 3, bad)
    with pytest.raises(DataFormatError, match=rf"line 3.*sparse value {re.escape(repr(value))} is not a number"):
        import_to_index(fmt, data, VOCAB, tmp_path / "out")


def test_repeated_keys_are_summed_in_term_vectors_only(tmp_path):
    folder = _export(tmp_path, "seismic")
    data = folder / FILES["seismic"]
    lines = data.read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = '{"id": "d0", "id": "d9", ' + json.dumps(first)[1:]  # an id given twice: which one is meant?
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 1: field 'id': given more than once"):
        import_to_index("seismic", data, VOCAB, tmp_path / "out")
    lines[0] = json.dumps(first)
    lines[1] = lines[1].replace('"vector": {', '"vector": {"t5": true, "t5": true, ', 1)  # not summed into 2
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 2: field 'vector': expected an object"):
        import_to_index("seismic", data, VOCAB, tmp_path / "out")
    lines[1] = lines[1].replace('"t5": true, "t5": true, ', '"t5": 0.25, "t5": 0.5, ', 1)  # the module rule: summed
    data.write_text("\n".join(lines) + "\n")
    matrix, _ = import_vectors("seismic", data, VOCAB)
    original = json.loads(lines[1].replace('"t5": 0.25, "t5": 0.5, ', "", 1))["vector"]
    assert matrix[1, 5] == np.float32(
        0.75 + original.get("t5", 0.0)
    )  # float32 of the float64 sum, as normalise_entries stores it


@pytest.mark.parametrize("fmt", ["anserini", "ciff"])
def test_a_scale_pushing_weights_past_float32_is_named(tmp_path, fmt):
    """Integer impacts divided by a tiny --scale: past float32 they were stored as inf (a numpy
    warning, then an error by row number); now refused naming the file and the scale."""
    folder = _export(tmp_path, fmt)
    with pytest.raises(DataFormatError, match=r"beyond float32's range \(check --scale\)"):
        import_to_index(fmt, folder, VOCAB, tmp_path / "out", scale=1e-37)
    assert not (tmp_path / "out").exists()
    matrix, _ = import_vectors(fmt, folder, VOCAB, scale=1e-30)  # impacts ≤ 2.0 · 100: within range at 1e-30
    assert np.isfinite(matrix.data).all()


def test_elastic_bulk_ending_on_an_action_line_and_string_weights_are_refused(tmp_path):
    folder = _export(tmp_path, "elastic")
    data = folder / FILES["elastic"]
    lines = data.read_text().splitlines()
    data.write_text("\n".join(lines[:-1]) + "\n")  # the last document line gone, its action line kept
    with pytest.raises(DataFormatError, match=rf"line {len(lines) - 1}.*no document line after it"):
        import_vectors("elastic", data, VOCAB)
    source = json.loads(lines[1])
    field = next(k for k, v in source.items() if isinstance(v, dict))
    key = next(iter(source[field]))
    source[field][key] = "5"
    lines[1] = json.dumps(source)
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 2.*expected an object \{key: number\}"):
        import_vectors("elastic", data, VOCAB)


def test_damaged_ciff_lengths_are_a_data_format_error(tmp_path):
    folder = _export(tmp_path, "ciff")
    data = folder / FILES["ciff"]
    raw = bytearray(data.read_bytes())
    raw[-20:] = b"\xff" * 20  # a varint that never ends / a length beyond the file
    data.write_bytes(bytes(raw))
    with pytest.raises(DataFormatError, match=r"CIFF"):
        import_vectors("ciff", data, VOCAB)


def test_sigterm_unwinds_the_cli_so_temporary_folders_are_removed(tmp_path):
    """The CLI's SIGTERM handler (spladekit.cli.main) turns the signal into SystemExit: a process
    killed inside an atomic folder write leaves no temporary folder (without it, Python ends at once)."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from spladekit.cli import _exit_on_sigterm
        from spladekit.io import atomic_folder
        if sys.argv[1] == "handled":
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        with atomic_folder(Path({str(tmp_path)!r}) / sys.argv[1]) as tmp:
            (tmp / "part").write_text("x")
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
    """)
    for mode, code in (("handled", 143), ("default", -15)):
        proc = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not any("handled" in name for name in left), left  # unwound: removed
    assert any("default" in name for name in left), left  # the control: without the handler it stays


def test_ids_a_run_cannot_hold_are_refused_on_import(tmp_path):
    data = tmp_path / "ids.jsonl"
    data.write_text('{"id": "a", "vector": {"t1": 1.0}}\n{"id": "b c", "vector": {"t2": 0.5}}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"ids\.jsonl.*vector 2.*'b c' is empty or contains white space"):
        import_to_index("seismic", data, VOCAB, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.jsonl"]


def test_petabyte_units_parse_up_to_the_stated_limit():
    from spladekit.index.writer import MAX_BUDGET, parse_size

    assert parse_size("1PiB") == MAX_BUDGET == 2**50  # the limit the help and the error state
    with pytest.raises(ValueError, match="1.5PiB"):
        parse_size("1.5PiB")


def test_a_queue_wait_deadline_not_below_the_request_timeout_is_refused():
    from pydantic import ValidationError

    from spladekit.serve.config import ServeConfig

    with pytest.raises(ValidationError, match=r"must be below the request timeout \(1000 ms\)"):
        ServeConfig(index="x", max_queue_wait_ms=1000, request_timeout_s=1.0)
    assert ServeConfig(index="x", max_queue_wait_ms=999, request_timeout_s=1.0).max_queue_wait_ms == 999


@pytest.mark.parametrize("fmt", ["qdrant", "milvus"])
def test_sparse_indices_that_are_not_integers_are_refused(tmp_path, fmt):
    folder = _export(tmp_path, fmt)
    data = folder / FILES[fmt]
    lines = data.read_text().splitlines()
    lines[1] = lines[1].replace('"indices": [0', '"indices": [0.5', 1)
    assert "0.5" in lines[1]  # the edit took
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"line 2.*sparse index 0\.5 is not an integer"):
        import_vectors(fmt, folder, VOCAB)
