"""`spladekit import` from the notes of earlier sessions: the model named by export.json, repeated ids
named by their lines, and no empty folder left by a failed import.

The export folders are the project's own exports (`export_vectors`, `spladekit export`), edited as a
hand edit would; the expected lines are read off the edited file (the lines holding the id), not
computed by the code under test.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.errors import DataFormatError
from spladekit.index.export import FILES, export_vectors, import_to_index
from spladekit.index.index import load_index
from spladekit.index.layout import load_vocabulary
from tests.index_helpers import DOCS, index_with_cli, make_beir, make_model, vocabulary

V = 6
VOCAB = [f"t{j}" for j in range(V)]
ROW_MAJOR = ["seismic", "qdrant", "milvus", "pgvector", "elastic", "anserini"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("manifest")
    model, beir = make_model(root / "model"), make_beir(root / "beir")
    out = root / "index"
    index_with_cli(model, beir, out)
    return model, out


def test_import_takes_the_model_export_json_names(built, tmp_path):
    model, index = built
    runner = CliRunner()
    r = runner.invoke(app, ["export", "--index", str(index), "--format", "seismic", "--out", str(tmp_path / "exp")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "exp" / "export.json").read_text())["model"] == str(model)
    r = runner.invoke(
        app, ["import", "--input", str(tmp_path / "exp"), "--format", "seismic", "--out", str(tmp_path / "back")]
    )
    assert r.exit_code == 0, r.output
    assert f"model: {model} (from {tmp_path / 'exp' / 'export.json'})" in r.output
    vectors, ids, meta = load_index(index)
    back, back_ids, back_meta = load_index(tmp_path / "back")
    assert back_ids == ids == [f"d{i}" for i in range(len(DOCS))]
    assert load_vocabulary(tmp_path / "back") == vocabulary()  # the model's tokenizer, as with --model
    assert back_meta["model"] == str(model) and back_meta["model_revision"] == meta["model_revision"]
    assert (back != vectors).nnz == 0  # seismic JSONL holds float32 weights exactly


def test_import_without_a_named_model_asks_for_one(tmp_path):
    m = sp.csr_matrix(np.eye(3, V, dtype=np.float32))
    export_vectors("seismic", tmp_path / "exp", m, ["a", "b", "c"], VOCAB)  # model=None: none recorded
    runner = CliRunner()
    r = runner.invoke(
        app, ["import", "--input", str(tmp_path / "exp"), "--format", "seismic", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 2 and f"{tmp_path / 'exp' / 'export.json'} names no model" in r.output, r.output
    data = tmp_path / "exp" / FILES["seismic"]
    r = runner.invoke(app, ["import", "--input", str(data), "--format", "seismic", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "is a file: no export.json names its model" in r.output, r.output
    assert not (tmp_path / "o").exists()


def _marker(fmt: str) -> str:
    return "\td1\t" if fmt == "pgvector" else '"d1"'


@pytest.mark.parametrize("fmt", ROW_MAJOR)
def test_a_repeated_id_is_named_with_both_lines(tmp_path, fmt):
    m = sp.csr_matrix(np.eye(5, V, dtype=np.float32) + 0.5)
    folder = tmp_path / "exp"
    export_vectors(fmt, folder, m, ["d0", "d1", "d2", "d3", "d1"], VOCAB)
    data = folder / FILES[fmt]
    lines = data.read_text().splitlines()
    lines = ["", ""] + lines[:3] + [""] + lines[3:]  # blank lines (skipped by the readers): lines ≠ vectors
    data.write_text("\n".join(lines) + "\n")
    holding = [n for n, line in enumerate(lines, 1) if _marker(fmt) in line]  # elastic: action and source lines
    first, second = (holding[1], holding[-1]) if fmt == "elastic" else (holding[0], holding[-1])
    out = tmp_path / "new" / "deeper" / "index"
    with pytest.raises(DataFormatError) as caught:
        import_to_index(fmt, folder, VOCAB, out)
    assert caught.value.line == second and caught.value.path == data
    assert re.search(
        rf"line {second}: field 'id': document id 'd1' is given twice: vector 2 \(line {first}\) "
        rf"and vector 5 \(line {second}\)",
        str(caught.value),
    ), str(caught.value)
    # a failed import leaves nothing: no index, no scratch rows, and not the parents it had to make
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_a_failed_cli_import_leaves_no_empty_parent_and_keeps_an_existing_one(tmp_path):
    m = sp.csr_matrix(np.eye(3, V, dtype=np.float32))
    export_vectors("qdrant", tmp_path / "exp", m, ["a", "b", "a"], VOCAB)
    (tmp_path / "like").mkdir()
    (tmp_path / "like" / "vocab.json").write_text(json.dumps(VOCAB))
    (tmp_path / "like" / "index.json").write_text("{}")
    (tmp_path / "kept").mkdir()
    runner = CliRunner()
    for out, left in ((tmp_path / "made" / "here" / "idx", "made"), (tmp_path / "kept" / "sub" / "idx", None)):
        r = runner.invoke(
            app,
            [
                "import",
                "--input",
                str(tmp_path / "exp"),
                "--format",
                "qdrant",
                "--like",
                str(tmp_path / "like"),
                "--out",
                str(out),
            ],
        )
        assert (
            r.exit_code == 2 and "document id 'a' is given twice: vector 1 (line 1) and vector 3 (line 3)" in r.output
        ), r.output
        if left:
            assert not (tmp_path / left).exists()
    assert list((tmp_path / "kept").iterdir()) == []  # the folder that was there before stays; what was made goes
