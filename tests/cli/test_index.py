"""`spladekit index / search / export / import` on a tiny random model, and the torchrun build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.data.resolve import sha256_file
from spladekit.data.trec import read_run
from spladekit.index.exact import exact_search
from spladekit.index.index import load_index
from spladekit.index.layout import content_hash, load_vocabulary
from tests.index_helpers import DOCS, QUERIES, index_with_cli, make_beir, make_model, vocabulary

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return make_model(root / "model"), make_beir(root / "beir")


@pytest.fixture(scope="module")
def built(tiny, tmp_path_factory):
    model, beir = tiny
    out = tmp_path_factory.mktemp("idx") / "index"
    index_with_cli(model, beir, out)
    return out


def encoder(model):
    from spladekit.model.encoder import SpladeEncoder

    return SpladeEncoder.from_pretrained(str(model), head_impl="plain")


def test_index_folder_contents(tiny, built):
    model, _ = tiny
    vectors, ids, meta = load_index(built)
    assert ids == [f"d{i}" for i in range(len(DOCS))]
    assert load_vocabulary(built) == vocabulary()
    assert meta["model_revision"] == "sha256:" + sha256_file(model / "model.safetensors")
    # max lengths come from the model's spladekit.json (16 / 32), not the library defaults
    assert (meta["query_max_length"], meta["doc_max_length"]) == (16, 32)
    assert meta["truncated_docs"] == 1  # DOCS[5] is 6 × 7 words > 32 tokens
    assert meta["content_hash"] == content_hash(vectors, ids)
    assert not any(p.name.startswith(".index") for p in built.parent.iterdir())  # no temporary leftovers


def test_same_text_same_vector_api_cli_and_round_trip(tiny, built, tmp_path):
    model, _ = tiny
    enc = encoder(model)
    api = enc.encode_documents(DOCS)
    vectors, _, _ = load_index(built)
    # the index was built in batches of 4 and the API in batches of 32: other padding, other matmul
    # shapes, float32 rounding only (≤ 32·EPS32 ≈ 3.8e-6 relative, see the torchrun test below)
    assert np.allclose(vectors.toarray(), api.toarray(), rtol=1e-5, atol=1e-6)
    long_untruncated = enc.encode([DOCS[5]], max_length=256)
    assert not np.allclose(long_untruncated.toarray(), vectors[5].toarray(), atol=1e-3)  # 32 was applied
    runner = CliRunner()
    for fmt, tol in (("anserini", 0.5 / 1000 + 1e-6), ("seismic", 0.0), ("qdrant", 0.0), ("elastic", 0.0)):
        exp, back = tmp_path / f"exp-{fmt}", tmp_path / f"back-{fmt}"
        scale = ["--scale", "1000"] if fmt == "anserini" else []  # the float formats refuse a --scale they would ignore
        r = runner.invoke(app, ["export", "--index", str(built), "--format", fmt, "--out", str(exp), *scale])
        assert r.exit_code == 0, r.output
        r = runner.invoke(
            app, ["import", "--input", str(exp), "--format", fmt, "--like", str(built), "--out", str(back)]
        )
        assert r.exit_code == 0, r.output
        imported, ids, meta = load_index(back)
        assert ids == [f"d{i}" for i in range(len(DOCS))] and meta["doc_max_length"] == 32
        assert np.abs(imported.toarray() - vectors.toarray()).max() <= tol  # vs the index: float formats exact


def test_search_exact_and_seismic(tiny, built, tmp_path):
    model, beir = tiny
    enc = encoder(model)
    q = enc.encode_queries(list(QUERIES.values()))
    want = exact_search(q, enc.encode_documents(DOCS), k=5)
    runner = CliRunner()
    for backend in ("exact", "seismic"):
        out = tmp_path / f"{backend}.trec"
        args = [
            "search",
            "--index",
            str(built),
            "--queries",
            str(beir / "queries.tsv"),
            "--k",
            "5",
            "--out",
            str(out),
            "--backend",
            backend,
        ]
        stored_before = (built / "seismic" / "params.json").exists()  # another test of this module may have built it
        r = runner.invoke(app, args + (["--recall-k", "3"] if backend == "seismic" else []))
        assert r.exit_code == 0, r.output
        # said when (and only when) this search built and stored the Seismic index
        assert ("built the Seismic index and stored it in" in r.output) == (
            backend == "seismic" and not stored_before
        ), r.output
        run = read_run(out)
        for qid, hits in zip(QUERIES, want):
            got = sorted(run[qid].items(), key=lambda kv: -kv[1])
            assert [d for d, _ in got] == [f"d{i}" for i, _ in hits]
            assert np.allclose([s for _, s in got], [s for _, s in hits], rtol=1e-4)
    assert json.loads((tmp_path / "seismic.trec.recall.json").read_text())["recall@3"] == 1.0
    settings = json.loads((tmp_path / "seismic.trec.config.json").read_text())
    assert (
        settings["backend"] == "seismic"
        and settings["query_max_length"] == 16
        and settings["seismic_search"]["query_cut"] == 20
    )
    again = runner.invoke(app, args)  # the stored index reused: nothing built, nothing said
    assert again.exit_code == 0 and "built the Seismic index" not in again.output, again.output


def test_search_two_step_is_recorded_and_its_copy_stored_once(tiny, built, tmp_path):
    """`--backend two_step`: the pruned copy built and stored on the first search (said), reused by
    the next (not said); a rule keeping every term and candidates covering every document give the
    exact run (scores included: the same float32 sums, tests/index/test_two_step.py); the settings record
    and --recall-k name what was searched."""
    import shutil

    model, beir = tiny
    folder = tmp_path / "index"
    shutil.copytree(built, folder, ignore=shutil.ignore_patterns("seismic", "pruned"))
    runner = CliRunner()
    base = ["search", "--index", str(folder), "--queries", str(beir / "queries.tsv"), "--k", "5"]
    r = runner.invoke(app, base + ["--out", str(tmp_path / "exact.trec")])
    assert r.exit_code == 0, r.output
    two = base + [
        "--backend",
        "two_step",
        "--first",
        "top_k=10000",
        "--candidates",
        str(len(DOCS)),
        "--first-query",
        "none",
        "--recall-k",
        "3",
    ]
    r = runner.invoke(app, two + ["--out", str(tmp_path / "a.trec")])
    assert r.exit_code == 0 and "built the pruned copy (top_k=10000)" in r.output, r.output
    assert read_run(tmp_path / "a.trec") == read_run(tmp_path / "exact.trec")
    assert json.loads((tmp_path / "a.trec.recall.json").read_text())["recall@3"] == 1.0
    settings = json.loads((tmp_path / "a.trec.config.json").read_text())
    stored = json.loads((folder / "pruned" / "pruned.json").read_text())
    assert settings["backend"] == "two_step" and settings["two_step"] == {
        "first": {"kind": "top_k", "value": 10000},
        "first_query": None,
        "candidates": len(DOCS),
        "pruned_hash": stored["postings_hash"],
    }
    r = runner.invoke(
        app,
        base
        + ["--backend", "two_step", "--candidates", "2", "--first-query", "top_k=1", "--out", str(tmp_path / "b.trec")],
    )
    assert r.exit_code == 0 and "built" not in r.output, r.output  # the stored copy, its rule
    settings = json.loads((tmp_path / "b.trec.config.json").read_text())
    assert settings["two_step"]["first"] == {"kind": "top_k", "value": 10000} and settings["two_step"][
        "first_query"
    ] == {"kind": "top_k", "value": 1}
    assert all(len(hits) <= 5 for hits in read_run(tmp_path / "b.trec").values())  # max(c, k) = 5 candidates


def test_seismic_knn_options_keep_the_stored_build_and_are_recorded(tiny, built, tmp_path):
    """`--knn` rebuilds the stored Seismic index with a k-NN graph and keeps the other build parameters
    it was built with (here `--max-fraction 3`: one option asked for does not reset the rest);
    `--n-knn` reaches the search and its settings record; more than the graph holds is refused."""
    import shutil

    model, beir = tiny
    folder = tmp_path / "index"
    shutil.copytree(built, folder, ignore=shutil.ignore_patterns("seismic"))  # this test's own Seismic builds
    runner = CliRunner()
    base = [
        "search",
        "--index",
        str(folder),
        "--queries",
        str(beir / "queries.tsv"),
        "--k",
        "5",
        "--backend",
        "seismic",
    ]
    r = runner.invoke(app, base + ["--out", str(tmp_path / "a.trec"), "--max-fraction", "3"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, base + ["--out", str(tmp_path / "b.trec"), "--knn", "2", "--n-knn", "2"])
    assert r.exit_code == 0 and "built the Seismic index" in r.output, r.output
    stored = json.loads((folder / "seismic" / "params.json").read_text())["build"]
    assert stored["nknn"] == 2 and stored["max_fraction"] == 3.0
    settings = json.loads((tmp_path / "b.trec.config.json").read_text())
    assert settings["seismic_search"]["n_knn"] == 2 and settings["seismic_build"]["nknn"] == 2
    r = runner.invoke(app, base + ["--out", str(tmp_path / "c.trec"), "--n-knn", "3"])
    assert (
        r.exit_code != 0
        and "--n-knn 3 asks for more neighbours than the k-NN graph" in r.output
        and "holds (2)" in r.output
    ), r.output
    r = runner.invoke(
        app, base + ["--out", str(tmp_path / "d.trec"), "--knn", "3", "--n-knn", "5"]
    )  # refused before the build
    assert r.exit_code != 0 and "would hold (3)" in r.output and not (tmp_path / "d.trec").exists(), r.output
    assert json.loads((folder / "seismic" / "params.json").read_text())["build"]["nknn"] == 2  # not rebuilt
    # two folders: each keeps its own stored parameters when one option is asked for
    from spladekit.index.index import Index

    other = tmp_path / "other"  # the same vectors under other ids (the folders of one search hold distinct documents)
    vectors, ids, meta = load_index(built)
    Index.from_vectors(
        other,
        vectors,
        [f"x{i}" for i in range(len(ids))],
        metadata={k: v for k, v in meta.items() if k not in ("content_hash", "num_docs", "vocab_hash")},
        vocabulary=load_vocabulary(built),
    )
    r = runner.invoke(
        app,
        [
            "search",
            "--index",
            str(other),
            "--queries",
            str(beir / "queries.tsv"),
            "--k",
            "5",
            "--backend",
            "seismic",
            "--out",
            str(tmp_path / "e.trec"),
            "--max-fraction",
            "4",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "search",
            "--index",
            str(folder),
            "--index",
            str(other),
            "--queries",
            str(beir / "queries.tsv"),
            "--k",
            "5",
            "--backend",
            "seismic",
            "--out",
            str(tmp_path / "f.trec"),
            "--knn",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    for where, fraction in ((folder, 3.0), (other, 4.0)):
        stored = json.loads((where / "seismic" / "params.json").read_text())["build"]
        assert (stored["nknn"], stored["max_fraction"]) == (1, fraction), where


def test_export_queries_then_import_then_reexport(tiny, built, tmp_path):
    model, beir = tiny
    runner = CliRunner()
    r = runner.invoke(
        app,
        [
            "export",
            "--index",
            str(built),
            "--format",
            "anserini-queries",
            "--queries",
            str(beir / "queries.tsv"),
            "--out",
            str(tmp_path / "q"),
            "--scale",
            "100",
        ],
    )
    assert r.exit_code == 0, r.output
    q = encoder(model).encode_queries(list(QUERIES.values()))
    r = runner.invoke(
        app,
        [
            "import",
            "--input",
            str(tmp_path / "q"),
            "--format",
            "anserini-queries",
            "--model",
            str(model),
            "--out",
            str(tmp_path / "qi"),
        ],
    )
    assert r.exit_code == 0, r.output
    imported, ids, _ = load_index(tmp_path / "qi")
    assert ids == list(QUERIES) and np.abs(imported.toarray() - q.toarray()).max() <= 0.5 / 100 + 1e-6
    r = runner.invoke(
        app,
        [
            "export",
            "--index",
            str(tmp_path / "qi"),
            "--format",
            "anserini-queries",
            "--out",
            str(tmp_path / "q2"),
            "--scale",
            "100",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "q2" / "queries.tsv").read_text() == (tmp_path / "q" / "queries.tsv").read_text()
    # an option of another format given with --queries is refused, not dropped
    r = runner.invoke(
        app,
        [
            "export",
            "--index",
            str(built),
            "--format",
            "anserini-queries",
            "--queries",
            str(beir / "queries.tsv"),
            "--out",
            str(tmp_path / "q3"),
            "--keys",
            "id",
        ],
    )
    assert r.exit_code != 0 and "keys (--keys) applies to elastic only" in r.output and not (tmp_path / "q3").exists()


def test_bad_inputs_give_clear_errors(tiny, built, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\tprotein notatoken\n")
    r = CliRunner().invoke(
        app,
        [
            "import",
            "--input",
            str(bad),
            "--format",
            "anserini-queries",
            "--like",
            str(built),
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert r.exit_code == 2 and "line 1" in r.output and "notatoken" in r.output
    r = CliRunner().invoke(
        app,
        ["search", "--index", str(built), "--queries", str(bad), "--out", str(tmp_path / "r"), "--backend", "annoy"],
    )
    assert r.exit_code == 2 and "backend" in r.output


def _run(cmd, env, timeout):
    """Run in a new session; on timeout kill the whole group (torchrun's workers too)."""
    import signal

    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.slow
def test_search_checks_both_hashes_and_refuses_a_damaged_folder(tiny, built, tmp_path):
    """postings_hash is the SHA-256 of the term-major arrays (recomputed here by hand from the
    documents' transpose); a folder whose postings were altered is refused by `search` unless
    --no-verify is given (then it searches what is there)."""
    import hashlib
    import shutil

    import scipy.sparse as sp

    vectors, _, meta = load_index(built)
    t = sp.csr_matrix(vectors.T)
    t.sort_indices()
    digest = hashlib.sha256()
    for array, dtype in ((t.indptr, np.int64), (t.indices, np.int64), (t.data, np.float32)):
        digest.update(array.astype(dtype).tobytes())
    digest.update(b"[]")  # json.dumps of no ids
    digest.update(str(t.shape).encode())
    assert meta["postings_hash"] == digest.hexdigest()

    damaged = tmp_path / "damaged"
    shutil.copytree(built, damaged)
    data = np.load(damaged / "postings.data.npy")
    data[0] += 1.0  # one impact changed, shapes intact: only the hash can tell
    np.save(damaged / "postings.data.npy", data)
    model, beir = tiny
    args = ["search", "--index", str(damaged), "--data", str(beir), "--out", str(tmp_path / "run.trec")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "postings_hash" in result.output and "postings.*.npy" in result.output
    assert not (tmp_path / "run.trec").exists()
    result = CliRunner().invoke(app, args + ["--no-verify"])
    assert result.exit_code == 0, result.output


def test_torchrun_two_processes_equal_one_process(tiny, tmp_path):
    model, beir = tiny
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    common = [
        "-m",
        "spladekit",
        "index",
        "--model",
        str(model),
        "--data",
        str(beir),
        "--batch-size",
        "2",
        "--head-impl",
        "plain",
        "--chunk-size",
        "2",
    ]
    import torch

    from spladekit.index.builder import IndexConfig, build_index

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as torchrun's workers (OMP_NUM_THREADS=1): the same kernels
    try:
        build_index(
            IndexConfig(
                model=str(model),
                data=str(beir),
                out=str(tmp_path / "one"),
                batch_size=2,
                head_impl="plain",
                chunk_size=2,
            )
        )
    finally:
        torch.set_num_threads(threads)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    two = _run([*launcher, *common, "--out", str(tmp_path / "two")], env, timeout=180)
    assert two.returncode == 0, two.stderr[-3000:]
    a, ids_a, meta_a = load_index(tmp_path / "one")
    b, ids_b, meta_b = load_index(tmp_path / "two")
    assert meta_b["world_size"] == 2 and meta_a["world_size"] == 1
    assert ids_a == ids_b and meta_a["truncated_docs"] == meta_b["truncated_docs"]
    # Every batch holds the same documents and padding in both builds (index/builder.py), so each
    # vector comes from the same float32 computation; no BLAS promises the same bits in another
    # process (MKL without MKL_CBWR may pick its code path per call and per memory alignment), so
    # the contract is float32 rounding: the weights are log1p of logits that are H = 32-term dot
    # products after one layer; a reordering of those sums moves a logit by ≤ 32·EPS32/2 of the
    # magnitude of its terms, about the largest weight, so |Δw| ≤ 32·EPS32·max w ≈ 3.8e-6·max w
    eps32 = float(np.finfo(np.float32).eps)
    assert a.shape == b.shape and np.abs((a - b).toarray()).max() <= 32 * eps32 * np.abs(a.toarray()).max()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # shards removed


def test_an_index_built_with_a_relative_model_path_searches_from_anywhere(tiny, tmp_path, monkeypatch):
    """index.json records a local model folder as an absolute path (found by a user who built with
    `--model ../shared/...` and searched from another folder)."""
    model, beir = tiny
    monkeypatch.chdir(model.parent)
    r = CliRunner().invoke(
        app,
        [
            "index",
            "--model",
            model.name,
            "--data",
            str(beir),
            "--out",
            str(tmp_path / "i"),
            "--batch-size",
            "4",
            "--head-impl",
            "plain",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "i" / "index.json").read_text())["model"] == str(model.resolve())
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["search", "--index", "i", "--data", str(beir), "--out", "run.trec", "--k", "3"])
    assert r.exit_code == 0, r.output
    assert read_run(tmp_path / "run.trec")


def test_memory_budget_option(tiny, built, tmp_path):
    """`--memory-budget` with units: an import under the smallest budget writes the same folder, byte
    for byte, as under the default; a bad size is refused naming the option before anything is
    read or written (index: before the model loads)."""
    model, beir = tiny
    runner = CliRunner()
    assert (
        runner.invoke(
            app, ["export", "--index", str(built), "--format", "ciff", "--out", str(tmp_path / "x.ciff")]
        ).exit_code
        == 0
    )
    folders = []
    for budget in ([], ["--memory-budget", "16MiB"]):
        out = tmp_path / f"back{len(folders)}"
        r = runner.invoke(
            app,
            [
                "import",
                "--input",
                str(tmp_path / "x.ciff"),
                "--format",
                "ciff",
                "--like",
                str(built),
                "--out",
                str(out),
                *budget,
            ],
        )
        assert r.exit_code == 0, r.output
        folders.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert (
        folders[0] == folders[1]
    )  # the writer's output does not depend on its budget (by construction, tests/index/test_writer.py)
    for cmd in (
        ["index", "--model", str(model), "--data", str(beir), "--out", str(tmp_path / "never")],
        [
            "import",
            "--input",
            str(tmp_path / "x.ciff"),
            "--format",
            "ciff",
            "--like",
            str(built),
            "--out",
            str(tmp_path / "never"),
        ],
    ):
        r = runner.invoke(app, [*cmd, "--memory-budget", "3 bananas"])
        assert r.exit_code == 2 and "--memory-budget" in r.output and "is not a size" in r.output, r.output
        r = runner.invoke(app, [*cmd, "--memory-budget", "2000TiB"])
        assert r.exit_code == 2 and "--memory-budget" in r.output and "1 PiB" in r.output, r.output
        assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("query_max_length", -3, "must be an integer ≥ 2 or null, got -3"),
        ("query_top_k", 0, "must be an integer ≥ 1 or null, got 0"),
        ("pooling", "mean", "'mean' is not a SPLADE pooling spladekit computes (max, sum)"),
        ("activation", "gelu", "'gelu' is not a SPLADE activation"),
        ("pooling", "sum", "'sum', but the model"),  # a pooling spladekit has, but not the recorded model's (max)
    ],
)
def test_index_json_query_settings_are_checked(built, tmp_path, field, value, message):
    """index.json's query settings out of range, or a pooling the queries would not be encoded with,
    are refused naming the file and the field (query_max_length -3 did not name the file; pooling
    "mean" was ignored: queries were max-pooled in silence)."""
    import shutil

    folder = tmp_path / "index"
    shutil.copytree(built, folder)
    meta = json.loads((folder / "index.json").read_text())
    assert meta["pooling"] == "max"  # what the tiny model computes (the last case depends on it)
    meta[field] = value
    (folder / "index.json").write_text(json.dumps(meta))
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tprotein\n")
    r = CliRunner().invoke(
        app, ["search", "--index", str(folder), "--queries", str(queries), "--out", str(tmp_path / "run")]
    )
    assert r.exit_code == 2, r.output
    assert f"{folder / 'index.json'}: field '{field}': {message}" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "run").exists()
