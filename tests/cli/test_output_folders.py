"""Every command writing a folder with --out refuses an output that would destroy something
(spladekit.io.check_output_folder): the input model or data folder, a folder of another kind, a
path under a file; bad index options are refused before anything is created; outputs get the
usual umask mode."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spladekit.cli import app
from tests.index_helpers import make_beir, make_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return make_model(root / "model"), make_beir(root / "beir")


def snapshot(folder: Path) -> dict[str, str]:
    """Relative path → SHA-256 of every file under ``folder`` (what must stay untouched)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def index_args(model, beir, out):
    return ["index", "--model", model, "--data", beir, "--out", out, "--batch-size", "4", "--head-impl", "plain"]


def refused(result, *names: str) -> None:
    """Exit 2 with one ``error:`` line naming each of ``names``, no traceback."""
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    for name in names:
        assert name in errors[0], result.output


def test_index_refuses_its_model_and_data_folders(tiny, tmp_path):
    model, beir = tiny
    before_model, before_beir = snapshot(model), snapshot(beir)
    for out in (model, beir, beir / "sub", model.parent):  # is, lies inside, contains an input
        refused(invoke(*index_args(model, beir, out)), str(out))
    assert snapshot(model) == before_model and snapshot(beir) == before_beir
    assert not (beir / "sub").exists()
    assert sorted(p.name for p in model.parent.iterdir()) == ["beir", "model"]  # no .NAME.build left either


def test_index_refuses_a_folder_that_is_not_an_index_and_replaces_an_index(tiny, tmp_path):
    model, beir = tiny
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    refused(invoke(*index_args(model, beir, other)), str(other), "index.json")
    assert snapshot(other) == {"notes.txt": hashlib.sha256(b"keep me").hexdigest()}
    empty = tmp_path / "empty"
    empty.mkdir()
    first = invoke(*index_args(model, beir, empty))  # an empty folder is fine
    assert first.exit_code == 0, first.output
    first_files = snapshot(empty)
    again = invoke(*index_args(model, beir, empty))  # an index is rebuilt in place (atomic swap), as before
    assert again.exit_code == 0, again.output
    # same corpus and model, same code path: the matrices and ids are the same bytes
    assert {k: v for k, v in snapshot(empty).items() if k.endswith(".npy")} == {
        k: v for k, v in first_files.items() if k.endswith(".npy")
    }


def test_index_out_under_a_file_is_one_error_line(tiny, tmp_path):
    model, beir = tiny
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(invoke(*index_args(model, beir, afile / "sub")), str(afile))
    assert afile.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(
    "option", [["--doc-max-length", "0"], ["--doc-max-length", "1"], ["--doc-top-k", "-1"], ["--doc-top-k", "0"]]
)
def test_bad_index_options_create_nothing(tiny, tmp_path, option):
    model, beir = tiny
    refused(invoke(*index_args(model, beir, tmp_path / "ix"), *option), option[0])
    assert list(tmp_path.iterdir()) == []  # neither ix nor .ix.build


def test_inference_free_refuses_an_unrelated_folder(tiny, tmp_path):
    model, beir = tiny
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "x").write_text("hi")
    refused(invoke("inference-free", "--model", model, "--data", beir, "--out", keep), str(keep))
    assert snapshot(keep) == {"x": hashlib.sha256(b"hi").hexdigest()}
    refused(invoke("inference-free", "--model", model, "--data", beir, "--out", model), str(model), "--model")


@pytest.mark.parametrize("command", ["import", "export", "export-model", "train"])
def test_other_folder_commands_refuse_an_unrelated_folder(tiny, tmp_path, command):
    model, beir = tiny
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "x").write_text("hi")
    args = {
        "import": ["import", "--input", beir, "--format", "seismic", "--model", model],
        "export": ["export", "--index", tmp_path / "missing-index", "--format", "seismic"],
        "export-model": ["export-model", "--model", model],
        "train": ["train", "--no-progress"],
    }[command]
    refused(invoke(*args, "--out", keep), str(keep))
    assert snapshot(keep) == {"x": hashlib.sha256(b"hi").hexdigest()}


def test_rescale_in_place_needs_force_and_gives_umask_modes(tiny, tmp_path):
    model, _ = tiny
    m0 = tmp_path / "m0"
    make_model(m0)
    before = snapshot(m0)
    refused(invoke("rescale", m0, "--out", m0, "--factor", "0.5"), str(m0), "--force")
    assert snapshot(m0) == before  # the source weights are untouched
    (m0 / "README.md").write_text("mine")
    forced = invoke("rescale", m0, "--out", m0, "--factor", "0.5", "--force")
    assert forced.exit_code == 0, forced.output
    assert snapshot(m0)["model.safetensors"] != before["model.safetensors"]
    assert (m0 / "README.md").read_text() == "mine"  # files of the folder that rescale does not write stay
    umask = os.umask(0)
    os.umask(umask)
    for path in m0.rglob("*"):  # README.md excepted: written by the test with the same umask
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert path.stat().st_mode & 0o777 == expected, (path, oct(path.stat().st_mode))
    inside = invoke("rescale", m0, "--out", m0 / "sub", "--factor", "0.5", "--force")
    refused(inside, str(m0))  # --force allows in place only, never inside the source


def test_rescale_refuses_an_unrelated_folder(tiny, tmp_path):
    model, _ = tiny
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "x").write_text("hi")
    refused(invoke("rescale", model, "--out", keep, "--factor", "0.5"), str(keep))
    assert snapshot(keep) == {"x": hashlib.sha256(b"hi").hexdigest()}
