"""Model cards (README.md) beside every saved model, and `spladekit push`.

Judges: huggingface_hub's own ModelCard parser and EvalResult reader, sentence-transformers' SparseEncoder
loading the folder with its card, the card's snippets run as written, and a real hub client against a
closed local port (no mock anywhere)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.train_helpers import make_examples, make_tiny_model, tiny_config

SRC = Path(__file__).resolve().parents[2] / "src"


def _beir(folder: Path, examples) -> Path:
    """A BEIR folder of the examples' documents, qrels ``dev`` and ``test`` (the examples' positives)."""
    (folder / "qrels").mkdir(parents=True)
    docs = {d: t for e in examples for d, t in e.positives + e.negatives}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": e.qid, "text": e.query}) + "\n" for e in examples))
    lines = "".join(f"{e.qid}\t{e.positives[0][0]}\t1\n" for e in examples)
    for split in ("dev", "test"):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 4-step run with dev evaluation every 2 steps (model/ = best, last/ = final), and an
    `evaluate` of model/ on the test split."""
    from spladekit.evaluate.systems import EvalConfig, run_evaluation
    from spladekit.train import train

    root = tmp_path_factory.mktemp("card")
    base = make_tiny_model(root / "base")
    beir = _beir(root / "tinybeir", make_examples(10, negatives=2, seed=9))
    config = tiny_config(base, steps=4, lr=3e-3, eval_every=2, dev={"data": str(beir), "split": "dev", "k": 10})
    with warnings.catch_warnings():  # the tiny model collapses (the monitor says so): not this test's subject
        warnings.simplefilter("ignore", RuntimeWarning)
        result = train(config, root / "run", examples=make_examples(16, negatives=3, seed=3), show_progress=False)
    run_evaluation(
        EvalConfig(model=str(result.model_dir), data=str(beir), split="test", k=10), root / "eval", show_progress=False
    )
    return {
        "root": root,
        "base": base,
        "beir": beir,
        "run": root / "run",
        "model": result.model_dir,
        "last": result.last_dir,
        "eval": root / "eval",
    }


def _load(path: Path):
    from huggingface_hub import ModelCard

    return ModelCard.load(path / "README.md" if path.is_dir() else path)


def _no_nulls(node, where="front matter"):
    if isinstance(node, dict):
        for key, value in node.items():
            _no_nulls(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _no_nulls(value, f"{where}.{i}")
    else:
        assert node is not None, f"null value at {where}"


def _tree(folder: Path) -> dict:
    """Every file under ``folder`` (hidden ones too) with its size, mtime and SHA-256."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _cli(*args, env=None, cwd=None):
    full = dict(os.environ, PYTHONPATH=str(SRC), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "spladekit", *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=120
    )


# ------------------------------------------------------------------------------------------ train
def test_train_writes_a_card_the_hub_parses(trained):
    from spladekit.io import read_json, read_jsonl

    dev = {r["step"]: r for _, r in read_jsonl(trained["run"] / "metrics.jsonl") if r.get("split") == "dev"}
    best = read_json(trained["run"] / "best.json")
    for folder, step in ((trained["model"], best["step"]), (trained["last"], max(dev))):
        card = _load(folder)
        data = card.data.to_dict()
        assert data["library_name"] == "sentence-transformers" and data["pipeline_tag"] == "feature-extraction"
        assert data["tags"] == ["sparse-encoder", "splade", "spladekit"]
        _no_nulls(data)
        assert "base_model" not in data  # a local folder is no hub id: left out, not guessed
        results = card.data.eval_results
        assert {r.dataset_type for r in results} == {"tinybeir"} and {r.dataset_split for r in results} == {"dev"}
        record = dev[step]  # the dev evaluation of exactly this saved model
        assert {r.metric_name: r.metric_value for r in results} == {
            k: record[k] for k in ("nDCG@10", "MRR@10", "avg_query_terms", "avg_doc_terms", "flops")
        }
        text = card.text
        for needed in (
            "## Training",
            "λ_q = 0.01",
            "Dev curve",
            "## MLM head",
            "not rescaled",
            "## Framework versions",
            "2606.18811",
            "10.1145/3404835.3463098",
        ):
            assert needed in text, needed
        assert len(re.findall(r"^\| [024] \|", text, flags=re.M)) == 3  # one dev-curve row per evaluation step


def test_eval_results_read_back_equal_metrics_json(trained, tmp_path):
    from spladekit.io import read_json
    from spladekit.publish.card import write_model_card

    folder = tmp_path / "model"
    folder.mkdir()
    for p in trained["model"].iterdir():  # a copy without the run beside it: only the given evaluation
        if p.is_file() and p.name != "README.md":
            (folder / p.name).write_bytes(p.read_bytes())
    (folder / "1_SpladePooling").mkdir()
    (folder / "1_SpladePooling" / "config.json").write_bytes(
        (trained["model"] / "1_SpladePooling" / "config.json").read_bytes()
    )
    assert (
        write_model_card(folder, evaluations=[trained["eval"]], license="apache-2.0", language=["en"])
        == folder / "README.md"
    )
    card = _load(folder)
    metrics = read_json(trained["eval"] / "metrics.json")
    measures = read_json(trained["eval"] / "config.json")["measures"]
    results = card.data.eval_results
    # exact: YAML writes Python's shortest round-trip repr of each float, as JSON does
    assert {r.metric_name: r.metric_value for r in results} == {
        k: metrics[k] for k in [*measures, "avg_query_terms", "avg_doc_terms", "flops"]
    }
    assert {(r.dataset_type, r.dataset_name, r.dataset_split) for r in results} == {("tinybeir", "tinybeir", "test")}
    assert {r.metric_type for r in results} >= {"ndcg_at_10", "query_active_dims", "corpus_active_dims", "flops"}
    assert card.data.license == "apache-2.0" and card.data.language == ["en"]
    _no_nulls(card.data.to_dict())
    assert f"| {metrics['num_queries']} |" in card.text and "conventions `beir`" in card.text


def test_no_model_index_without_an_evaluation(tmp_path):
    from huggingface_hub import ModelCard

    from spladekit.train import train

    base = make_tiny_model(tmp_path / "base")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = train(
            tiny_config(base, steps=2), tmp_path / "run", examples=make_examples(8, negatives=1), show_progress=False
        )
    text = (result.model_dir / "README.md").read_text()
    assert "model-index" not in text and "## Evaluation" not in text
    assert ModelCard.load(result.model_dir / "README.md").data.eval_results is None


def test_an_evaluation_without_its_dataset_is_refused(trained, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    bare = tmp_path / "eval"  # what `evaluate --run --qrels --out` writes: metrics without the dataset's name
    bare.mkdir()
    (bare / "metrics.json").write_bytes((trained["eval"] / "metrics.json").read_bytes())
    done = CliRunner().invoke(app, ["card", str(trained["model"]), "--overwrite", "--eval", str(bare)])
    assert done.exit_code == 2 and "config.json" in done.stderr and "data" in done.stderr, done.stderr
    assert "tinybeir" in (trained["model"] / "README.md").read_text()  # the card in place is untouched


def test_front_matter_from_a_hub_base_model_and_named_training_data(tmp_path):
    from spladekit.io import write_json, write_yaml
    from spladekit.publish.card import build_model_card

    write_json(tmp_path / "config.json", {"architectures": ["BertForMaskedLM"], "vocab_size": 30522})
    write_json(tmp_path / "spladekit.json", {"source": "rasyosef/splade-tiny", "extra": {}})
    write_yaml(
        tmp_path / "config.yaml",
        {"data": {"format": "beir", "path": "../shared/data/beir/scifact"}, "regularizer": {"kind": "l1"}, "steps": 3},
    )
    data = build_model_card(tmp_path).data
    assert data.base_model == "rasyosef/splade-tiny" and data.datasets == ["BeIR/scifact"]
    assert (
        data.library_name is None and data.eval_results is None
    )  # no modules.json: not a sentence-transformers folder
    write_yaml(tmp_path / "config.yaml", {"data": {"format": "hf", "path": "sentence-transformers/msmarco-bm25"}})
    assert build_model_card(tmp_path).data.datasets == ["sentence-transformers/msmarco-bm25"]
    write_yaml(tmp_path / "config.yaml", {"data": {"format": "triples", "path": str(tmp_path)}})
    assert build_model_card(tmp_path).data.datasets is None  # a local file: no dataset id to name


def test_an_engine_export_card_points_to_its_own_calls(trained, tmp_path):
    from spladekit.publish.card import write_model_card

    folder = tmp_path / "es"  # the files an engine's export holds: no config.json spladekit could load
    folder.mkdir()
    (folder / "spladekit.json").write_bytes((trained["model"] / "spladekit.json").read_bytes())
    (folder / "HOW_TO_LOAD.md").write_text("eland_import_hub_model ...\n")
    write_model_card(folder, engine="elasticsearch")
    card = _load(folder)
    assert card.data.tags[-1] == "elasticsearch" and card.data.library_name is None
    assert "[HOW_TO_LOAD.md](HOW_TO_LOAD.md)" in card.text and "```python" not in card.text
    write_model_card(folder, overwrite=True, usage="```bash\ncurl -X PUT ...\n```", library_name="transformers")
    card = _load(folder)
    assert card.data.library_name == "transformers" and "## Usage\n\n```bash\ncurl -X PUT" in card.text


# ------------------------------------------------------------------------- loading, snippets
def test_sentence_transformers_loads_the_folder_with_its_card(trained):
    from sentence_transformers import SparseEncoder

    from spladekit.model.encoder import SpladeEncoder

    assert (trained["model"] / "README.md").is_file()
    texts = ["w1 w2 w3", "w4 w5 w6 w7 w8"]
    from tests.model.test_folders import _check_close  # the bound derived there (float32 sums in two orders)

    st = (
        SparseEncoder(str(trained["model"]), device="cpu")
        .encode_document(texts, convert_to_tensor=True)
        .to_dense()
        .numpy()
    )
    encoder = SpladeEncoder.from_pretrained(str(trained["model"]), device="cpu")
    _check_close(
        encoder.encode_documents(texts).toarray(),
        st,
        encoder,
        texts,
        encoder.metadata.doc_max_length,
        "sentence-transformers on the folder with its card",
    )


def _run_snippets(folder: Path, tmp_path: Path, expected: int, monkeypatch) -> list[str]:
    """Run every ```python block of ``folder``'s card as written (in this interpreter, each in a fresh
    namespace, from a folder of its own: a fresh interpreter would only add torch's import time); their outputs."""
    import contextlib
    import io

    text = (folder / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == expected
    monkeypatch.chdir(tmp_path)
    outputs = []
    for code in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"{folder / 'README.md'} snippet", "exec"), {"__name__": "__main__"})
        outputs.append(printed.getvalue())
    return outputs


def _scores(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", output)]


def test_the_card_snippets_run(trained, tmp_path, monkeypatch):
    st, ours = _run_snippets(
        trained["model"], tmp_path, expected=2, monkeypatch=monkeypatch
    )  # sentence-transformers, spladekit
    assert len(_scores(st)) == 2 and len(_scores(ours)) == 2  # the [1, 2] scores printed
    # the same dot products from the two libraries: torch's repr prints 4 decimals (±5e-5); the vectors
    # agree to float32 rounding (test above) and each score sums ≤ V = 155 float32 products, whose two
    # summation orders differ by ≤ 2γ_V·Σ|q_j d_j| ≈ 2·155·6e-8 ≈ 1.9e-5 relative (Higham §3.1)
    assert _scores(st) == pytest.approx(_scores(ours), rel=2e-5, abs=5e-5)


# ---------------------------------------------------------------------------------- overwrite
def test_an_existing_card_is_never_overwritten_without_the_flag(trained, tmp_path):
    from spladekit.publish.card import write_model_card

    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("config.json", "spladekit.json"):
        (folder / name).write_bytes((trained["model"] / name).read_bytes())
    mine = "---\nlicense: mit\n---\n\n# my own card\n"
    (folder / "README.md").write_text(mine)
    with pytest.warns(UserWarning, match="kept"):
        assert write_model_card(folder) is None
    assert (folder / "README.md").read_text() == mine
    from typer.testing import CliRunner

    from spladekit.cli import app

    with pytest.warns(UserWarning, match="kept"):
        done = CliRunner().invoke(app, ["card", str(folder)])
    assert done.exit_code == 0 and "kept" in done.stdout and (folder / "README.md").read_text() == mine
    done = CliRunner().invoke(app, ["card", str(folder), "--overwrite", "--repo-id", "someone/tiny-splade"])
    assert done.exit_code == 0, done.output
    card = _load(folder)
    assert card.text.startswith("\n# someone/tiny-splade\n") or "# someone/tiny-splade\n" in card.text
    assert "SparseEncoder" not in card.text and card.data.library_name is None  # no modules.json here
    assert "from_pretrained('someone/tiny-splade')" in card.text
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # atomic: no temporary file left


def test_rescale_writes_its_record_and_keeps_a_card(trained, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.io import read_json

    out = tmp_path / "rescaled"
    done = CliRunner().invoke(app, ["rescale", str(trained["base"]), "--out", str(out), "--factor", "0.5"])
    assert done.exit_code == 0, done.output
    card = _load(out)
    step = read_json(out / "config.json")["spladekit_rescale"]["history"][0]
    row = (
        f"| 1 | factor | 0.5000 | no | {step['shift']:.4f} | {step['norms_before']['row_norm_mean']:.4f} | "
        f"{step['norms_after']['row_norm_mean']:.4f} |"
    )
    assert row in card.text
    assert step["norms_after"]["row_norm_mean"] == pytest.approx(0.5 * step["norms_before"]["row_norm_mean"], rel=1e-6)
    (out / "README.md").write_text("# kept\n")
    with pytest.warns(UserWarning, match="kept"):
        done = CliRunner().invoke(app, ["rescale", str(out), "--out", str(out), "--factor", "0.5", "--force"])
    assert done.exit_code == 0, done.output
    assert (out / "README.md").read_text() == "# kept\n"


def test_a_shift_and_a_cap_are_rows_and_facts_of_the_card(trained, tmp_path):
    """``rescale --shift --position-top-k``: the card shows the shift in the head's table and the cap
    among the model's rows, and its record line states both (a hand-edited card of the uncapped model
    is then another model's)."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.errors import CardMismatchError
    from spladekit.io import read_json
    from spladekit.publish.card import write_model_card
    from spladekit.publish.card_record import read_card_record

    out = tmp_path / "shifted"
    done = CliRunner().invoke(
        app, ["rescale", str(trained["base"]), "--out", str(out), "--shift", "1.5", "--position-top-k", "4"]
    )
    assert done.exit_code == 0, done.output
    text = (out / "README.md").read_text(encoding="utf-8")
    step = read_json(out / "config.json")["spladekit_rescale"]["history"][0]
    assert step["shift"] == 1.5
    assert f"| 1 | shift | 1.0000 | no | 1.5000 | {step['norms_before']['row_norm_mean']:.4f} |" in text
    assert "| pooled per position | its 4 largest logits (`position_top_k`) |" in text
    facts = read_card_record(text).facts
    assert facts["head shift"] == 1.5 and facts["pooled per position"] == 4
    plain = tmp_path / "plain"
    done = CliRunner().invoke(app, ["rescale", str(trained["base"]), "--out", str(plain), "--shift", "1.5"])
    assert done.exit_code == 0, done.output
    (plain / "README.md").write_text(
        text.replace("## ", "## Edited: ", 1), encoding="utf-8"
    )  # the capped model's, edited
    with pytest.raises(CardMismatchError, match="pooled per position: 4 in the card, none in this model"):
        write_model_card(plain)


def test_a_diagnosis_goes_into_the_card(trained, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.io import read_json

    texts = tmp_path / "texts.txt"
    texts.write_text("w1 w2 w3\nw4 w5 w6 w7\nw8 w9\n")
    done = CliRunner().invoke(
        app, ["diagnose", str(trained["base"]), "--out", str(tmp_path / "diag"), "--texts", str(texts)]
    )
    assert done.exit_code == 0, done.output
    out = tmp_path / "rescaled"
    done = CliRunner().invoke(app, ["rescale", str(trained["base"]), "--out", str(out), "--factor", "2"])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(app, ["card", str(out), "--overwrite", "--diagnosis", str(tmp_path / "diag")])
    assert done.exit_code == 0, done.output
    diagnosis = read_json(tmp_path / "diag" / "diagnosis.json")
    text = (out / "README.md").read_text()
    assert f"Verdict: {diagnosis['verdict']}" in text
    assert f"| mean decoder-row norm | {diagnosis['head']['row_norm']['mean']:.4f} |" in text
    done = CliRunner().invoke(app, ["card", str(out), "--overwrite", "--diagnosis", str(tmp_path / "nothing")])
    assert done.exit_code == 2 and "nothing" in done.stderr


def test_inference_free_card_and_a_replaced_folder_keeps_its_card(trained, tmp_path, monkeypatch):
    from sentence_transformers import SparseEncoder

    from spladekit.cli.inference_free import build_inference_free

    out = tmp_path / "if"
    build_inference_free(str(trained["model"]), str(trained["beir"]), out)
    card = _load(out)
    assert card.data.tags == ["sparse-encoder", "inference-free", "spladekit"]
    assert "inference-free" in card.text and "2411.04403" in card.text
    scores = SparseEncoder(str(out), device="cpu").encode_query(["w1 w2"], convert_to_tensor=True)
    assert scores.shape[-1] == 155
    _run_snippets(out, tmp_path, expected=2, monkeypatch=monkeypatch)
    (out / "README.md").write_text("# mine\n")
    with pytest.warns(UserWarning, match="kept"):
        build_inference_free(str(trained["model"]), str(trained["beir"]), out)  # the folder is replaced whole
    assert (out / "README.md").read_text() == "# mine\n"


def test_export_model_writes_a_card(trained, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from typer.testing import CliRunner

    from spladekit.cli import app

    out = tmp_path / "onnx"
    done = CliRunner().invoke(app, ["export-model", "--model", str(trained["model"]), "--out", str(out)])
    assert done.exit_code == 0, done.output
    card = _load(out)
    assert card.data.library_name == "onnx" and "onnx" in card.data.tags
    assert "OnnxSpladeEncoder(" in card.text and "SparseEncoder" not in card.text
    assert "## Training" in card.text  # the training record travels with the export
    (output,) = _run_snippets(out, tmp_path, expected=1, monkeypatch=monkeypatch)
    assert len(_scores(output)) == 2
    (out / "README.md").write_text("# mine\n")
    with pytest.warns(UserWarning, match="kept"):
        done = CliRunner().invoke(app, ["export-model", "--model", str(trained["model"]), "--out", str(out)])
    assert done.exit_code == 0 and (out / "README.md").read_text() == "# mine\n"  # the folder was replaced whole


@pytest.mark.parametrize("fmt", ["onnx", "elasticsearch"])
def test_export_model_swaps_the_card_in_with_the_export(trained, tmp_path, monkeypatch, fmt):
    """The README.md is in the folder when it is renamed to OUT (one swap, not an export in place and a
    card written after it): every folder put in place of OUT holds README.md, and the card's snippets
    name OUT, not the temporary folder."""
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    from typer.testing import CliRunner

    import spladekit.io
    from spladekit.cli import app

    out = tmp_path / "export"
    swaps = []
    real = spladekit.io.replace_folder

    def watched(source, path):
        swaps.append((Path(path), sorted(p.name for p in Path(source).iterdir())))
        return real(source, path)

    monkeypatch.setattr(spladekit.io, "replace_folder", watched)
    done = CliRunner().invoke(
        app, ["export-model", "--model", str(trained["model"]), "--out", str(out), "--format", fmt]
    )
    assert done.exit_code == 0, done.output
    into_out = [names for path, names in swaps if path == out]
    assert into_out and all("README.md" in names for names in into_out), swaps
    assert sorted(p.name for p in out.iterdir()) == into_out[-1]
    text = (out / "README.md").read_text()
    assert str(out.resolve()) in text or fmt != "onnx"  # the onnx snippets load OUT
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


# ------------------------------------------------------------------------ a card of another model
def test_a_reexport_over_another_models_export_refreshes_or_refuses_its_card(trained, tmp_path):
    """An export into a folder holding another model's export: spladekit's own card is rewritten with
    the folder's new model; a card edited by hand is kept while its record matches the model, else the
    export is refused (naming the facts that differ and --overwrite) and the folder is left as it was."""
    pytest.importorskip("onnx")
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.publish.card import model_facts, read_records
    from spladekit.publish.card_record import canonical_facts, read_card_record

    out = tmp_path / "onnx"

    def export(model, *extra):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = CliRunner().invoke(app, ["export-model", "--model", str(model), "--out", str(out), *extra])
        return done, [str(w.message) for w in caught if "model card" in str(w.message)]

    def recorded():
        return read_card_record((out / "README.md").read_text())

    done, kept = export(trained["base"])  # an untrained model: no training record
    assert done.exit_code == 0, done.output
    assert not recorded().edited and "## Training" not in (out / "README.md").read_text()
    done, kept = export(trained["model"])  # the trained model over it: the card is the new model's
    assert done.exit_code == 0 and not kept, (done.output, kept)
    record, text = recorded(), (out / "README.md").read_text()
    assert not record.edited and record.facts == canonical_facts(model_facts(read_records(out)))
    steps = json.loads((trained["model"] / "spladekit.json").read_text())["extra"]["training"]["steps"]
    assert record.facts["training steps"] == steps and f"| step of this model | {steps} |" in text

    edited = text.replace("## Usage", "Edited by hand: a note about this model.\n\n## Usage")
    (out / "README.md").write_text(edited)
    done, kept = export(trained["model"])  # the same model again: the edited card is kept
    assert done.exit_code == 0 and (out / "README.md").read_text() == edited, done.output
    assert kept and "edited by hand; its record matches this model" in kept[0]

    before = _tree(out)
    done, _ = export(trained["base"])  # another model: refused, the folder left as it was
    assert done.exit_code == 2, done.output
    assert "README.md: edited by hand, and it describes another model" in done.stderr
    assert f"training steps: {steps} in the card, none in this model" in done.stderr
    assert "--overwrite" in done.stderr and "nothing was exported" in done.stderr
    assert _tree(out) == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    done, _ = export(trained["base"], "--overwrite")
    assert done.exit_code == 0, done.output
    assert "Edited by hand" not in (out / "README.md").read_text() and "training steps" not in recorded().facts


def test_the_card_record_line_reads_back_and_refuses_hostile_lines():
    """The record line is read with json only, bounded, its structure checked: a malformed, deep, huge or
    non-scalar line is no record; a value holding ``-->`` cannot end the comment; text after the line or an
    edit before it counts as edited."""
    from spladekit.publish.card_record import MAX_LINE, PREFIX, SUFFIX, read_card_record, sign_card

    facts = {
        "made from": "a --> b <!-- c",
        "training steps": 100,
        "selected": "nDCG@10 0.6592 at step 0",
        "inference-free queries": True,
        "head rescaling factor": 0.5,
    }
    signed = sign_card("---\nlicense: mit\n---\n\n# m\n", facts)
    last = signed.splitlines()[-1]
    assert last.startswith(PREFIX) and last.endswith(SUFFIX) and last.count("-->") == 1 and "<!--" not in last[4:]
    record = read_card_record(signed)
    assert record.facts == facts and not record.edited
    assert read_card_record(signed + "\n  \n").edited is False  # white space after it
    assert read_card_record(signed + "more text\n").edited is True
    assert read_card_record(signed.replace("# m", "# M")).edited is True
    assert read_card_record("# a card written by hand\n") is None
    digest = "0" * 64
    hostile = [
        PREFIX + "{not json" + SUFFIX,
        PREFIX + "[" * 100_000 + "]" * 100_000 + SUFFIX,
        PREFIX + json.dumps({"sha256": digest, "model": {"x": "y" * MAX_LINE}}) + SUFFIX,
        PREFIX + json.dumps({"sha256": digest, "model": {"x": {"nested": 1}}}) + SUFFIX,
        PREFIX + json.dumps({"sha256": "abc", "model": {}}) + SUFFIX,
        PREFIX + json.dumps({"sha256": digest, "model": ["x"]}) + SUFFIX,
        PREFIX + json.dumps({"sha256": digest, "model": {}}),
    ]  # the comment never closed
    for line in hostile:
        assert read_card_record("# card\n" + line + "\n") is None, line[:80]


def test_card_rewrites_its_own_card_and_keeps_one_written_by_hand(trained, tmp_path):
    """`spladekit card FOLDER` again: its own unedited card is rewritten (here with a new --repo-id); a card
    edited by hand whose record names another model is refused, left as it was, naming --overwrite."""
    from spladekit.errors import CardMismatchError
    from spladekit.publish.card import write_model_card

    folder = _model_folder(trained, tmp_path / "m")
    assert write_model_card(folder) is not None
    assert write_model_card(folder, reference="someone/tiny-splade", model_name="someone/tiny-splade") is not None
    assert "# someone/tiny-splade\n" in (folder / "README.md").read_text()
    meta = json.loads((folder / "spladekit.json").read_text())
    edited = (folder / "README.md").read_text().replace("## Usage", "My note.\n\n## Usage")
    (folder / "README.md").write_text(edited)
    meta["doc_max_length"] = 77
    (folder / "spladekit.json").write_text(json.dumps(meta))
    with pytest.raises(CardMismatchError, match=r"document max length: \d+ in the card, 77 in this model.*--overwrite"):
        write_model_card(folder)
    assert (folder / "README.md").read_text() == edited
    assert write_model_card(folder, overwrite=True) is not None and "My note" not in (folder / "README.md").read_text()


# ------------------------------------------------------------------------------------------ push
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed when the block ends: connections are refused


def test_push_dry_run_lists_the_files_and_the_card(trained):
    from typer.testing import CliRunner

    from spladekit.cli import app

    before = _tree(trained["model"])
    done = CliRunner().invoke(app, ["push", str(trained["model"]), "someone/tiny-splade", "--dry-run", "--private"])
    assert done.exit_code == 0, done.output
    assert "snippets load the local path" in done.stderr
    listed = re.findall(r"^ +[\d,]+  (\S+)$", done.stdout, flags=re.M)
    assert listed == sorted(k for k in before if not any(part.startswith(".") for part in Path(k).parts))
    for name in listed:
        assert re.search(rf"^ +{before[name][0]:,}  {re.escape(name)}$", done.stdout, flags=re.M)
    assert (trained["model"] / "README.md").read_text().rstrip("\n") in done.stdout
    assert "private" in done.stdout.splitlines()[0]
    assert _tree(trained["model"]) == before


def test_push_offline_fails_in_one_line_naming_the_endpoint(trained, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from typer.testing import CliRunner

    from spladekit.cli import app

    before = _tree(trained["model"])
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": "hf_not_a_real_token",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    done = _cli("push", str(trained["model"]), "someone/tiny-splade", env=env)  # HF_ENDPOINT as a user sets it
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert endpoint in lines[0] and "cannot reach" in lines[0] and "create_repo" in lines[0]
    # the other paths in this process: huggingface_hub read HF_ENDPOINT into constants.ENDPOINT at import,
    # so the same closed port is set there (HfApi reads it when made)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    for extra in (["--revision", "v1"], ["--create-pr", "--private"]):
        done = CliRunner().invoke(app, ["push", str(trained["model"]), "someone/tiny-splade", *extra])
        lines = done.stderr.strip().splitlines()
        assert done.exit_code == 2 and len(lines) == 1 and endpoint in lines[0] and "cannot reach" in lines[0], (
            done.stderr
        )
    assert _tree(trained["model"]) == before


def test_push_refuses_a_folder_without_a_card_before_any_request(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    (tmp_path / "config.json").write_text("{}")
    done = CliRunner().invoke(app, ["push", str(tmp_path), "someone/x", "--dry-run"])
    assert done.exit_code == 2 and "spladekit card" in done.stderr
    done = CliRunner().invoke(app, ["push", str(tmp_path), "bad id/x", "--dry-run"])
    assert done.exit_code == 2 and "REPO_ID" in done.stderr
    (tmp_path / "README.md").write_text("---\n- not: a mapping\n---\n")
    done = CliRunner().invoke(app, ["push", str(tmp_path), "someone/x", "--dry-run"])
    assert done.exit_code == 2 and "README.md" in done.stderr and "does not parse" in done.stderr, done.stderr


def _pushable(trained, folder: Path) -> Path:
    """A copy of the trained model folder (its card included) to change freely."""
    import shutil

    shutil.copytree(trained["model"], folder)
    return folder


@pytest.mark.parametrize("link", ["file", "folder", "dangling"])
def test_push_refuses_a_link_out_of_the_folder_by_name(trained, tmp_path, monkeypatch, link):
    """notes.txt -> a file outside (upload_folder would send the target's bytes), a sub-folder linked
    outside, a dangling link: refused naming the link and its target, by --dry-run and by a push, before
    any request (the endpoint is a closed port: a request would fail as 'cannot reach' instead)."""
    from huggingface_hub import constants
    from typer.testing import CliRunner

    from spladekit.cli import app

    folder = _pushable(trained, tmp_path / "model")
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not for the hub")
    name, target = {
        "file": ("notes.txt", secret),
        "folder": ("extra", secret.parent),
        "dangling": ("gone.txt", tmp_path / "nowhere.txt"),
    }[link]
    (folder / name).symlink_to(target)
    (folder / ".hidden-link").symlink_to(secret)  # hidden files are never uploaded: not refused
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    for extra in (["--dry-run"], []):
        done = CliRunner().invoke(app, ["push", str(folder), "someone/x", *extra])
        lines = done.stderr.strip().splitlines()
        assert done.exit_code == 2 and len(lines) == 1, done.output
        assert f"{name}: a link to {target}" in lines[0] and "cannot reach" not in lines[0], lines


def test_push_dry_run_lists_exactly_what_upload_folder_would_send(trained, tmp_path):
    """The dry run's files equal huggingface_hub's own upload plan of the folder (its
    _prepare_upload_folder_additions, what upload_folder commits; offline: README.md, whose front matter
    it would send to the hub to validate, is compared apart), and the commit push_folder sends is that list:
    nested folders, hidden files, .git/ and .cache/huggingface/, a link inside the folder (sent as its target's
    bytes, as upload_folder sends it)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils._paths import DEFAULT_IGNORE_PATTERNS

    from spladekit.publish.push import IGNORE_PATTERNS, folder_files, plan_push

    folder = _pushable(trained, tmp_path / "model")
    for name, text in (
        ("sub/deeper/notes.txt", "x" * 7),
        (".git/HEAD", "ref"),
        (".cache/huggingface/x", "y"),
        ("sub/.tmp", "t"),
        ("a b[1].txt", "odd name"),
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "sub" / "alias.json").symlink_to(folder / "config.json")
    plan = plan_push(folder, "someone/x")
    theirs = HfApi(endpoint="http://127.0.0.1:9")._prepare_upload_folder_additions(  # as upload_folder calls it
        folder, "", ignore_patterns=[*IGNORE_PATTERNS, *DEFAULT_IGNORE_PATTERNS, "README.md"]
    )
    assert [n for n, _ in plan.files if n != "README.md"] == [op.path_in_repo for op in theirs]
    assert [size for n, size in plan.files if n != "README.md"] == [op.upload_info.size for op in theirs]
    ours = [op for op in plan.operations() if op.path_in_repo != "README.md"]
    assert [(op.path_in_repo, op.upload_info.sha256) for op in ours] == [
        (op.path_in_repo, op.upload_info.sha256) for op in theirs
    ]
    assert (
        "README.md" in dict(plan.files) and "sub/alias.json" in dict(plan.files) and "sub/.tmp" not in dict(plan.files)
    )
    assert dict(plan.files)["sub/alias.json"] == (folder / "config.json").stat().st_size
    assert list(folder_files(folder)) == [n for n, _ in plan.files]


# ------------------------------------------------------------------------------------------ licences
def _model_folder(trained, folder: Path) -> Path:
    folder.mkdir()
    for name in ("config.json", "spladekit.json"):
        (folder / name).write_bytes((trained["model"] / name).read_bytes())
    return folder


@pytest.mark.parametrize(
    "given, suggestion",
    [
        ("Apache 2.0", "apache-2.0"),
        ("MIT License", "mit"),
        ("CC-BY-4.0", "cc-by-4.0"),
        ("GPL v3", "gpl-3.0"),
        ("proprietary", None),
    ],
)
def test_card_refuses_a_licence_the_hub_refuses(trained, tmp_path, given, suggestion):
    """`card --license "Apache 2.0"` wrote a card the Hub rejects; it is refused, suggesting the Hub's
    lowercase identifier when one is close, and nothing is written."""
    from typer.testing import CliRunner

    from spladekit.cli import app

    folder = _model_folder(trained, tmp_path / "m")
    done = CliRunner().invoke(app, ["card", str(folder), "--license", given])
    assert done.exit_code == 2, done.output
    assert f"license {given!r} is not a Hugging Face Hub licence identifier" in done.stderr
    assert (f"did you mean {suggestion!r}?" in done.stderr) if suggestion else "did you mean" not in done.stderr
    assert "repositories-licenses" in done.stderr and not (folder / "README.md").exists()
    done = CliRunner().invoke(app, ["card", str(folder), "--license", "other"])
    assert done.exit_code == 2 and "license_name" in done.stderr and not (folder / "README.md").exists()
    for good in ("apache-2.0", "llama3.1", "openrail++"):
        done = CliRunner().invoke(app, ["card", str(folder), "--license", good, "--overwrite"])
        assert done.exit_code == 0, done.output
        assert _load(folder).data.license == good


def test_card_refuses_a_bad_repo_id(trained, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    folder = _model_folder(trained, tmp_path / "m")
    for bad in ("bad id/x", "a/b/c", "-x/y"):
        done = CliRunner().invoke(app, ["card", str(folder), "--repo-id", bad])
        assert done.exit_code == 2 and f"--repo-id {bad!r}" in done.stderr, done.output
    assert not (folder / "README.md").exists()


@pytest.mark.parametrize(
    "front, words",
    [
        (
            "license: Apache 2.0",
            r"field 'license': license 'Apache 2.0' is not a Hugging Face Hub licence identifier; "
            r"did you mean 'apache-2.0'\?",
        ),
        ("license: other", r"field 'license': license 'other' needs license_name"),
    ],
)
def test_push_dry_run_refuses_a_card_licence_the_hub_refuses(trained, tmp_path, front, words):
    """A card edited by hand (or written before this check): the dry run refuses what the Hub would;
    `other` with a license_name passes."""
    from typer.testing import CliRunner

    from spladekit.cli import app

    folder = _model_folder(trained, tmp_path / "m")
    (folder / "README.md").write_text(f"---\n{front}\n---\n\n# mine\n")
    done = CliRunner().invoke(app, ["push", str(folder), "someone/x", "--dry-run"])
    assert done.exit_code == 2 and re.search(r"README\.md: " + words, done.stderr), done.stderr
    (folder / "README.md").write_text(
        "---\nlicense: other\nlicense_name: my-licence\nlicense_link: LICENSE\n---\n\n# mine\n"
    )
    done = CliRunner().invoke(app, ["push", str(folder), "someone/x", "--dry-run"])
    assert done.exit_code == 0, done.output


def test_a_base_model_licence_the_hub_refuses_is_not_inherited(trained, tmp_path):
    """The base model folder's own card says `license: Apache 2.0`: the new card does not copy it (a
    warning names the base card); `other` is inherited with its license_name and license_link."""
    import shutil

    from spladekit.publish.card import build_model_card

    base = tmp_path / "base"
    shutil.copytree(trained["base"], base)
    folder = _model_folder(trained, tmp_path / "m")
    record = json.loads((folder / "spladekit.json").read_text())
    record["source"] = str(base)
    (folder / "spladekit.json").write_text(json.dumps(record))
    (base / "README.md").write_text("---\nlicense: Apache 2.0\nlanguage: en\n---\n\n# base\n")
    with pytest.warns(UserWarning, match=r"base/README\.md: license 'Apache 2\.0' is not .*not inherited"):
        card = build_model_card(folder)
    assert card.data.license is None and card.data.language == "en"
    (base / "README.md").write_text(
        "---\nlicense: other\nlicense_name: base-licence\nlicense_link: https://x.org/l\n---\n"
    )
    card = build_model_card(folder)
    assert (card.data.license, card.data.license_name, card.data.license_link) == (
        "other",
        "base-licence",
        "https://x.org/l",
    )
