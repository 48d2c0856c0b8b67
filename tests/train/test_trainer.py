"""Training: config, data readers, the loop (loss parts, resume, accumulation, alarms), export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.train import TrainConfig, load_config, train  # noqa: E402
from spladekit.train.data import global_batch, iter_triples, read_beir_training, read_naver  # noqa: E402
from spladekit.train.monitor import TrainingDivergedError  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ config
def test_config_unknown_key_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\nregularizer:\n  lambda_q: 0.1\n  lamda_d: 0.2\n")
    with pytest.raises(DataFormatError, match="regularizer.lamda_d"):
        load_config(path)


def test_config_overrides_and_yaml_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\n")
    cfg = load_config(path, ["regularizer.lambda_d=2e-3", "loss.kind=kl", "data.num_negatives=2"])
    assert (cfg.steps, cfg.regularizer.lambda_d, cfg.loss.kind) == (3, 2e-3, "kl")
    (tmp_path / "again.yaml").write_text(cfg.to_yaml())
    assert load_config(tmp_path / "again.yaml") == cfg
    with pytest.raises(DataFormatError, match="batch_size"):
        load_config(None, ["batch_size=5", "grad_accum=2"])


# ------------------------------------------------------------------------------------ data
def test_triples_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "triples.tsv"
    path.write_text("q1\tpos one\tneg one\nq2\tpos two\n")
    reader = iter_triples(path)
    first = next(reader)
    assert (first.query, first.positives[0][1], first.negatives[0][1]) == ("q1", "pos one", "neg one")
    with pytest.raises(DataFormatError, match=r"triples.tsv, line 2: expected 3"):
        next(reader)


def test_naver_toy_layout_with_teacher_scores(tmp_path):
    from spladekit.data.resolve import shared_roots

    folder = next((r / "data" / "splade_toy" for r in shared_roots() if (r / "data" / "splade_toy").is_dir()), None)
    if folder is None:
        pytest.skip("../shared/data/splade_toy not found (set SPLADEKIT_SHARED)")
    triples = read_naver(folder)
    assert len(triples) == 100
    # the toy's query files repeat id 1048876: a clear error, not a silent overwrite
    with pytest.raises(DataFormatError, match=r"dev_queries/raw.tsv, line 7: duplicate id '1048876'"):
        read_naver(folder, "scores/toy.json", "dev_queries/raw.tsv")
    seen, lines = set(), []
    for line in (folder / "dev_queries" / "raw.tsv").read_text(encoding="utf-8").splitlines():
        if line.split("\t")[0] not in seen:
            seen.add(line.split("\t")[0])
            lines.append(line)
    (tmp_path / "queries.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    examples = read_naver(folder, folder / "scores" / "toy.json", tmp_path / "queries.tsv")
    scores = json.loads((folder / "scores" / "toy.json").read_text())
    qrel = json.loads((folder / "qrel" / "qrel.json").read_text())
    assert {e.qid for e in examples} == set(scores)
    by_id = {e.qid: e for e in examples}
    assert [d for d, _ in by_id["2"].positives] == list(qrel["2"])
    assert [d for d, _ in by_id["2"].negatives] == [d for d in scores["2"] if d not in qrel["2"]]
    assert by_id["2"].teacher == {k: float(v) for k, v in scores["2"].items()}


def test_naver_scores_must_be_numbers(tmp_path):
    for sub in ("qrel", "scores", "full_collection", "train_queries"):
        (tmp_path / sub).mkdir()
    (tmp_path / "qrel" / "qrel.json").write_text('{"1": {"10": 1}}')
    (tmp_path / "scores" / "s.json").write_text('{"1": {"10": "high"}}')
    (tmp_path / "full_collection" / "raw.tsv").write_text("10\tdoc\n")
    (tmp_path / "train_queries" / "raw.tsv").write_text("1\tquery\n")
    with pytest.raises(DataFormatError, match=r"s.json: field '1.10'"):
        read_naver(tmp_path, tmp_path / "scores" / "s.json")


def _tiny_beir(folder: Path) -> Path:
    docs = {"d1": "apple banana fruit", "d2": "apple pie recipe", "d3": "car engine oil", "d4": "banana bread"}
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    )
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "apple banana"}) + "\n")
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


def test_beir_training_with_bm25_negatives(tmp_path):
    examples = read_beir_training(_tiny_beir(tmp_path / "beir"), "train", "bm25", depth=5)
    (example,) = examples
    assert example.positives == [("d1", "apple banana fruit")]
    # BM25 ranks the documents sharing query words (d2, d4), never the positive; d3 shares none
    assert sorted(d for d, _ in example.negatives) == ["d2", "d4"]


def test_beir_training_with_model_negatives(tiny, tmp_path):
    from spladekit.index.exact import exact_search
    from spladekit.model.encoder import SpladeEncoder

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = {"d1": "w1 w2 w3", "d2": "w1 w2 w9", "d3": "w1 w8 w7", "d4": "w40 w41 w42"}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "w1 w2"}) + "\n")
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq\td1\t1\n")
    (example,) = read_beir_training(folder, "train", "model", depth=2, negatives_model=str(tiny))
    enc = SpladeEncoder.from_pretrained(tiny, head_impl="plain", device="cpu")
    ranked = [
        list(docs)[i]
        for i, _ in exact_search(enc.encode_queries(["w1 w2"]), enc.encode_documents(list(docs.values())), k=4)[0]
    ]
    assert [d for d, _ in example.negatives] == [d for d in ranked if d != "d1"][:2]
    with pytest.raises(ValueError, match="negatives_model"):
        read_beir_training(folder, "train", "model")


def test_global_batch_is_deterministic_and_covers_an_epoch():
    examples = make_examples(8, negatives=3)
    a = global_batch(examples, 0, 4, 2, seed=1)
    assert a == global_batch(examples, 0, 4, 2, seed=1)
    assert len(a.docs) == 4 * 3 and a.group == 3
    seen = a.queries + global_batch(examples, 1, 4, 2, seed=1).queries
    assert sorted(seen) == sorted(e.query for e in examples)  # one epoch: every query once
    b = global_batch(examples, 0, 4, 2, seed=1, need_teacher=True)
    by_query = {e.query: e for e in examples}
    for i, query in enumerate(b.queries):
        assert b.teacher[i][0] == by_query[query].teacher[by_query[query].positives[0][0]]


# ------------------------------------------------------------------------------------ the loop
def test_loss_parts_add_up_and_monitoring_is_logged(tiny, tmp_path):
    result = train(
        tiny_config(tiny, steps=3, curves=True), tmp_path / "out", examples=make_examples(), show_progress=False
    )
    records = _records(tmp_path / "out")
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert r["loss"] == pytest.approx(r["loss_rank"] + r["loss_reg_q"] + r["loss_reg_d"], rel=1e-5)
        assert r["loss_reg_d"] == pytest.approx(r["lambda_d"] * r["reg_d"], rel=1e-5)
        for key in (
            "head_norm",
            "logit_mean",
            "logit_p99",
            "logit_max",
            "active_q",
            "active_d",
            "batch_flops",
            "pos_score",
            "neg_score",
            "margin",
            "grad_norm",
            "lr",
        ):
            assert np.isfinite(r[key]), key
    assert [r["lambda_q"] for r in records] == pytest.approx([1e-2 / 4, 1e-2, 1e-2])  # (t/2)², T = 2
    assert result.curves is not None and result.curves.stat().st_size > 0
    assert (tmp_path / "out" / "config.yaml").exists() and (result.model_dir / "config.yaml").exists()


def test_exact_resume(tiny, tmp_path):
    cfg = tiny_config(tiny, steps=4, checkpoint_every=2, grad_accum=2)
    examples = make_examples()
    full = train(cfg, tmp_path / "full", examples=examples, show_progress=False)
    part = train(cfg, tmp_path / "resumed", examples=examples, show_progress=False, stop_after=2)
    assert part.model_dir is None and (tmp_path / "resumed" / "checkpoints" / "step-0000002").is_dir()
    resumed = train(cfg, tmp_path / "resumed", examples=examples, show_progress=False)
    a, b = _records(tmp_path / "full"), _records(tmp_path / "resumed")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    # exact by construction: one process, the same thread count, the same batches, float32 state
    # saved and loaded bit for bit, the RNG restored: the same computation twice
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    from safetensors.torch import load_file

    sa, sb = load_file(full.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_run_is_not_redone_nor_continued_with_other_settings(tiny, tmp_path):
    """Rerun into its --out: with the same config and data, nothing is computed (the stored result is
    returned, the CLI says so, also with --trust-remote-code); with another learning rate, or after its data file changed, refused
    naming the difference, and nothing in --out changes (config.yaml included)."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.train.checkpoints import RunChangedError

    triples = tmp_path / "t.tsv"
    triples.write_text("".join(f"{e.query}\t{e.positives[0][1]}\t{e.negatives[0][1]}\n" for e in make_examples()))
    cfg = tiny_config(tiny, steps=2, checkpoint_every=1, data={"format": "triples", "path": str(triples)})
    (tmp_path / "c.yaml").write_text(cfg.to_yaml())
    out = tmp_path / "out"
    first = train(cfg, out, show_progress=False)
    before = _tree(out)
    again = train(cfg, out, show_progress=False)
    assert again.already_done and not first.already_done and _tree(out) == before
    assert (again.steps, again.last_metrics, again.model_dir) == (first.steps, first.last_metrics, first.model_dir)
    done = CliRunner().invoke(app, ["train", str(tmp_path / "c.yaml"), "--out", str(out), "--no-progress"])
    assert done.exit_code == 0 and "already trained" in done.output and "nothing was done" in done.output, done.output
    trusted = CliRunner().invoke(
        app, ["train", str(tmp_path / "c.yaml"), "--out", str(out), "--no-progress", "--trust-remote-code"]
    )
    assert trusted.exit_code == 0 and "already trained" in trusted.output, trusted.output  # a permission, not a setting
    bad = CliRunner().invoke(
        app, ["train", str(tmp_path / "c.yaml"), "--out", str(out), "--set", "lr=0.002", "--no-progress"]
    )
    assert bad.exit_code == 2 and "lr: 0.001 → 0.002" in bad.stderr and "left as it is" in bad.stderr, bad.output
    assert len(bad.stderr.strip().splitlines()) == 1 and _tree(out) == before
    triples.write_text(triples.read_text().replace("w", "W", 1))  # one character of the data changed
    with pytest.raises(RunChangedError, match=r"data.path: its file t.tsv changed"):
        train(cfg, out, show_progress=False)
    assert _tree(out) == before


def test_a_stopped_run_resumes_only_from_the_same_inputs(tiny, tmp_path):
    """Checkpoints of a stopped run are resumed with the same examples; other examples are refused; a
    bookkeeping setting (how often checkpoints are kept) may change."""
    from spladekit.train.checkpoints import RunChangedError

    cfg = tiny_config(tiny, steps=3, checkpoint_every=1)
    examples = make_examples()
    train(cfg, tmp_path / "out", examples=examples, show_progress=False, stop_after=1)
    with pytest.raises(RunChangedError, match=r"the training examples changed"):
        train(cfg, tmp_path / "out", examples=make_examples(seed=5), show_progress=False)
    resumed = train(
        tiny_config(tiny, steps=3, checkpoint_every=2), tmp_path / "out", examples=examples, show_progress=False
    )
    assert resumed.steps == 3 and [r["step"] for r in _records(tmp_path / "out")] == [1, 2, 3]


def test_a_checkpoint_file_that_would_run_code_is_refused(tiny, tmp_path):
    """trainer.pt replaced by a pickle whose __reduce__ runs a command: resuming names the file, the
    command never runs (torch's weights_only unpickler), and torch.load without it would run it."""
    import os

    class WritesMarker:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'marker'}",)

    cfg = tiny_config(tiny, steps=2, checkpoint_every=1)
    train(cfg, tmp_path / "out", examples=make_examples(), show_progress=False, stop_after=1)
    target = tmp_path / "out" / "checkpoints" / "step-0000001" / "trainer.pt"
    torch.save({"model": WritesMarker()}, target)
    with pytest.raises(DataFormatError, match=r"trainer.pt: not a spladekit checkpoint file"):
        train(cfg, tmp_path / "out", examples=make_examples(), show_progress=False)
    assert not (tmp_path / "marker").exists()
    torch.load(target, weights_only=False)  # the judge: the unsafe load of the same file runs the command
    assert (tmp_path / "marker").exists()


def test_rerun_without_checkpoint_starts_the_metrics_afresh(tiny, tmp_path):
    # a run killed before its first checkpoint leaves metrics.jsonl; the rerun starts at step 0 and
    # must not keep the killed run's records next to its own (each step once)
    cfg = tiny_config(tiny, steps=2, checkpoint_every=0)
    examples = make_examples()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "kind": "killed-run"}) + "\n" + json.dumps({"step": 1, "loss": 9.0}) + "\n"
    )
    train(cfg, tmp_path / "out", examples=examples, show_progress=False)
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert not any(r.get("kind") == "killed-run" or r.get("loss") == 9.0 for r in lines)
    steps = [r["step"] for r in _records(tmp_path / "out")]
    assert steps == [1, 2]


def test_gradient_accumulation_gives_the_same_losses(tiny, tmp_path):
    examples = make_examples()
    one = train(tiny_config(tiny, steps=2), tmp_path / "one", examples=examples, show_progress=False)
    two = train(tiny_config(tiny, steps=2, grad_accum=4), tmp_path / "two", examples=examples, show_progress=False)
    for a, b in zip(_records(tmp_path / "one"), _records(tmp_path / "two")):
        for key in ("loss", "loss_rank", "reg_q", "reg_d", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4), key
    assert one.steps == two.steps == 2


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tiny, tmp_path):
    cfg = tiny_config(tiny, steps=4, checkpoint_every=1, lr=1e-3)
    examples = make_examples()
    train(cfg, tmp_path / "out", examples=examples, show_progress=False, stop_after=1)
    state = torch.load(tmp_path / "out" / "checkpoints" / "step-0000001" / "trainer.pt", weights_only=False)
    poisoned = dict(state)
    poisoned["model"] = {
        k: (torch.full_like(v, float("nan")) if "decoder.bias" in k or k.endswith("predictions.bias") else v)
        for k, v in state["model"].items()
    }
    torch.save(poisoned, tmp_path / "out" / "checkpoints" / "step-0000001" / "trainer.pt")
    with pytest.raises(TrainingDivergedError, match="non-finite loss"):
        train(cfg, tmp_path / "out", examples=examples, show_progress=False)
    assert [p.name for p in (tmp_path / "out" / "checkpoints").iterdir()] == ["step-0000001"]
    assert not (tmp_path / "out" / "model").exists()


def test_zero_and_dense_collapse_alarms(tmp_path):
    from spladekit.train.monitor import CollapseError

    dead = make_tiny_model(tmp_path / "dead")
    from safetensors.torch import load_file, save_file

    weights = load_file(dead / "model.safetensors")
    weights["cls.predictions.bias"] = torch.full_like(weights["cls.predictions.bias"], -1e3)  # every logit < 0
    save_file(weights, dead / "model.safetensors", metadata={"format": "pt"})
    cfg = tiny_config(dead, steps=1, monitor={"stop_on_collapse": True, "logit_sample": 0})
    with pytest.raises(CollapseError, match="zero collapse at step 1: every query vector"):
        train(cfg, tmp_path / "zero", examples=make_examples(), show_progress=False)
    # the tiny model starts dense (bias +1): after the warm-up the dense alarm fires, without stopping
    live = make_tiny_model(tmp_path / "live")
    cfg = tiny_config(
        live, steps=1, regularizer={"warmup_steps": 0}, monitor={"dense_fraction": 0.1, "logit_sample": 0}
    )
    result = train(cfg, tmp_path / "dense", examples=make_examples(), show_progress=False)
    assert any(a.startswith("dense collapse at step 1") for a in result.alarms)


def test_distillation_losses_train(tiny, tmp_path):
    for kind in ("margin_mse", "kl"):
        cfg = tiny_config(
            tiny, steps=1, loss={"kind": kind}, data={"format": "triples", "path": "x", "num_negatives": 2}
        )
        result = train(cfg, tmp_path / kind, examples=make_examples(), show_progress=False)
        assert np.isfinite(result.last_metrics["loss_rank"])


def test_rescale_goes_through_calibrate(tiny):
    from spladekit.train.step import load_model

    plain, _, none = load_model(tiny_config(tiny))
    scaled, _, record = load_model(tiny_config(tiny, rescale={"factor": 0.5}))
    assert none is None and record == {"mode": "factor", "factor": 0.5, "shift": 0.0}
    # arXiv 2606.18811 §3 with scale_bias=False: W -> F·W, b unchanged
    torch.testing.assert_close(scaled.head.weight, 0.5 * plain.head.weight)
    torch.testing.assert_close(scaled.head.bias, plain.head.bias)


def test_head_options_and_a_shift_train_and_are_saved(tiny, tmp_path):
    """head.position_top_k and a calibrated shift at initialisation: the trained model is capped in both
    heads, its bias carries the shift, and the final folder records both (no sentence-transformers
    files: SpladePooling has no cap)."""
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.train.step import load_model

    cfg = tiny_config(tiny, steps=2, head={"position_top_k": 3}, rescale={"activity": 4.0, "sample_texts": 8})
    model, _, record = load_model(cfg, [e.positives[0][1] for e in make_examples()[:8]])
    assert model.position_top_k == 3 and record["mode"] == "shift" and record["shift"] != 0.0
    plain, _, _ = load_model(tiny_config(tiny))
    # every column but [PAD] (id 0, held at -1e4 after the shift by suppress_pad): b - s, one float32 rounding
    torch.testing.assert_close(model.head.bias[1:], plain.head.bias[1:] - record["shift"], rtol=0, atol=1e-6)
    result = train(cfg, tmp_path / "out", examples=make_examples(), show_progress=False)
    meta = json.loads((result.model_dir / "spladekit.json").read_text())
    assert meta["position_top_k"] == 3 and meta["extra"]["rescale"]["history"][0]["shift_mode"] == "activity"
    assert not (result.model_dir / "modules.json").exists()
    # the trainer's records beside the head options: config.yaml and the training record, the card's facts
    from spladekit.io import read_yaml
    from spladekit.publish.card_record import read_card_record

    assert read_yaml(result.model_dir / "config.yaml")["head"]["position_top_k"] == 3
    assert meta["extra"]["training"]["steps"] == 2 and meta["extra"]["training"]["rescale"]["shift"] == record["shift"]
    facts = read_card_record((result.model_dir / "README.md").read_text(encoding="utf-8")).facts
    assert facts["pooled per position"] == 3 and facts["shifted before training"] == pytest.approx(record["shift"])
    encoder = SpladeEncoder.from_pretrained(result.model_dir, head_impl="fused", device="cpu")
    vectors = encoder.encode(["w1 w2 w3", "w10 w20 w30 w40 w5"], 24)
    assert encoder.model.position_top_k == 3 and max(np.diff(vectors.indptr)) <= 3 * 7  # ≤ k per real position
    encoder.model.head_impl = "plain"
    np.testing.assert_allclose(
        encoder.encode(["w1 w2 w3", "w10 w20 w30 w40 w5"], 24).toarray(), vectors.toarray(), rtol=1e-5, atol=1e-6
    )


def test_final_model_loads_in_three_libraries_with_the_same_vectors(tiny, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.pooling import splade_max_pool

    result = train(tiny_config(tiny, steps=1), tmp_path / "out", examples=make_examples(), show_progress=False)
    texts = ["w1 w2 w3", "w10 w20 w30 w40 w5"]
    ours = SpladeEncoder.from_pretrained(result.model_dir, head_impl="plain", device="cpu").encode(texts, 24).toarray()
    mlm = AutoModelForMaskedLM.from_pretrained(result.model_dir).eval()
    tok = AutoTokenizer.from_pretrained(result.model_dir)
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hf = splade_max_pool(mlm(**batch).logits, batch["attention_mask"]).numpy()
    np.testing.assert_allclose(ours, hf, rtol=1e-5, atol=1e-6)
    st = pytest.importorskip("sentence_transformers")
    encoder = st.SparseEncoder(str(result.model_dir), device="cpu")
    st_vectors = encoder.encode(texts, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(st_vectors, ours, rtol=1e-5, atol=1e-6)


def test_cli_train(tiny, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    triples = tmp_path / "t.tsv"
    triples.write_text("".join(f"{e.query}\t{e.positives[0][1]}\t{e.negatives[0][1]}\n" for e in make_examples()))
    cfg = tiny_config(tiny, steps=2, data={"format": "triples", "path": str(triples)})
    (tmp_path / "c.yaml").write_text(cfg.to_yaml())
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["train", str(tmp_path / "c.yaml"), "--out", str(out), "--set", "steps=1", "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    assert "trained 1 steps" in res.output
    assert (
        TrainConfig.model_validate(__import__("yaml").safe_load((out / "model" / "config.yaml").read_text())).steps == 1
    )
    bad = CliRunner().invoke(app, ["train", str(tmp_path / "c.yaml"), "--out", str(out), "--set", "stepz=1"])
    assert bad.exit_code == 2 and "stepz" in bad.output


def test_shipped_configs_equal_the_demo_recipes():
    from spladekit.demo import DEMO_RECIPES, demo_config

    root = Path(__file__).resolve().parents[2] / "configs"
    for name, file in (("default", "demo.yaml"), ("full", "scifact-splade-tiny.yaml")):
        shipped = load_config(root / file)
        assert demo_config(shipped.model.path, shipped.data.path, full=name == "full") == shipped, file
    assert set(DEMO_RECIPES) == {"default", "full"}


def _demo_beir(tmp_path):
    """A BEIR folder of 8 queries, each judging its own document, in train and test."""
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    examples = make_examples(8, negatives=0)
    docs = {f"d{i}": e.positives[0][1] for i, e in enumerate(examples)}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": e.query}) + "\n" for i, e in enumerate(examples))
    )
    rows = "".join(f"q{i}\td{i}\t1\n" for i in range(8))
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return beir


def test_demo_trains_and_prints_before_after(tiny, tmp_path, capsys):
    from spladekit.demo import run_demo

    beir = _demo_beir(tmp_path)
    results = run_demo(
        str(tiny),
        str(beir),
        tmp_path / "demo",
        batch_size=4,
        overrides=[
            "steps=2",
            "batch_size=4",
            "validate_every=0",
            "data.validation_fraction=0.25",
            "eval_every=1",
            "model.head_impl=plain",
            "curves=false",
        ],
    )
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["training"]["steps"] == 2
    best = summary["training"]["best"]  # selected on the 2 held-out training queries, never on test
    dev = [json.loads(line) for line in (tmp_path / "demo" / "train" / "metrics.jsonl").read_text().splitlines()]
    dev = [r for r in dev if r.get("split") == "dev"]
    assert best["value"] == max(r["nDCG@10"] for r in dev) and [r["step"] for r in dev] == [0, 1, 2]
    names = ["model (before)", f"model (fine-tuned, best dev step {best['step']})"]
    if best["step"] != 2:
        names.append("model (fine-tuned, last step 2)")
    assert [r.name for r in results][: len(names) + 1] == names + ["bm25"]
    assert [r.name for r in results][len(names) + 1 :] == [  # the query-side rows, built on the selected model
        "inference-free (IDF queries, same docs)",
        f"fused RRF ({names[1]} + bm25)",
        f"fused min-max ({names[1]} + bm25)",
    ]
    printed = capsys.readouterr().out
    assert f"| {names[1]} |" in printed and "fine-tuning: nDCG@10" in printed
    assert (tmp_path / "demo" / "train" / "model" / "modules.json").exists()
    for folder, name in (("before", names[0]), ("bm25", "bm25")):
        assert (
            json.loads((tmp_path / "demo" / folder / "metrics.json").read_text())["nDCG@10"] == summary[name]["nDCG@10"]
        )
    from tests.index.test_fusion import _check_delta_plot

    folders = [
        "before",
        "after",
        *(["last"] if len(names) == 3 else []),
        "bm25",
        "inference_free",
        "fused_rrf",
        "fused_minmax",
    ]
    _check_delta_plot(
        tmp_path / "demo",
        results,
        folders,
        [("before", "after"), ("bm25", "fused_rrf"), ("bm25", "fused_minmax")],
        [
            ("before fine-tuning", "fine-tuned"),
            ("BM25", "fused RRF (fine-tuned + BM25)"),
            ("BM25", "fused min-max (fine-tuned + BM25)"),
        ],
    )


def test_the_demo_names_truncation_once_for_the_systems_that_share_it():
    from spladekit.demo import truncation_lines
    from spladekit.evaluate.retrieval import SystemResult

    def system(name, truncated):
        return SystemResult(name, {}, {} if truncated is None else {"truncated_docs": truncated}, {}, 0.0)

    lines = truncation_lines(
        [system("before", 7), system("fine-tuned", 7), system("bm25", None), system("other", 3), system("none", 0)], 10
    )
    assert lines == [
        "before, fine-tuned: 7 of 10 documents were longer than the document max length and truncated",
        "other: 3 of 10 documents were longer than the document max length and truncated",
    ]


def test_a_demo_stopped_during_training_keeps_its_baseline(tiny, tmp_path, monkeypatch):
    """Training interrupted (Ctrl-C as a KeyboardInterrupt raised by spladekit.train.train): before/ and
    bm25/ are on disk, equal to the same evaluation run again; no summary.json claims a full demo, and
    no result of a previous demo in the folder is left beside the new baseline."""
    import spladekit.train
    from spladekit.demo import _load, run_demo
    from spladekit.evaluate.retrieval import evaluate_splade

    beir = _demo_beir(tmp_path)

    def interrupted(config, out, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(spladekit.train, "train", interrupted)
    previous = tmp_path / "demo"  # a previous demo's results: removed when the new baseline is written
    (previous / "after").mkdir(parents=True)
    (previous / "after" / "metrics.json").write_text("{}")
    (previous / "summary.json").write_text("{}")
    (previous / "train").mkdir()
    (previous / "train" / "checkpoint.txt").write_text("kept")
    with pytest.raises(KeyboardInterrupt):
        run_demo(
            str(tiny),
            str(beir),
            tmp_path / "demo",
            batch_size=4,
            overrides=["steps=2", "batch_size=4", "model.head_impl=plain"],
        )
    dataset, encoder = _load(str(tiny), str(beir), 4, head_impl="plain", query_max_length=64, doc_max_length=128)
    again = evaluate_splade(encoder, dataset, name="again", show_progress=False)
    kept = json.loads((tmp_path / "demo" / "before" / "metrics.json").read_text())
    assert kept["nDCG@10"] == pytest.approx(again.metrics["nDCG@10"], abs=1e-12)  # same model, data and code path
    assert (tmp_path / "demo" / "before" / "run.trec").exists() and (
        tmp_path / "demo" / "bm25" / "metrics.json"
    ).exists()
    assert not (tmp_path / "demo" / "summary.json").exists() and not (tmp_path / "demo" / "after").exists()
    assert (tmp_path / "demo" / "train" / "checkpoint.txt").read_text() == "kept"  # training resumes from its folder


def test_demo_cli_interrupted_ends_with_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import spladekit.demo
    from spladekit.cli import app

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(spladekit.demo, "run_demo", interrupted)
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code == 130 and "interrupted: what was written is kept" in result.output
    assert "Traceback" not in result.output


def test_bf16_autocast_keeps_float32_weights(tiny, tmp_path):
    from spladekit.train.step import _Encoder, load_model

    cfg = tiny_config(tiny, steps=1, precision="bf16")
    model, tokenizer, _ = load_model(cfg)
    encoder = _Encoder(model, tokenizer, cfg, torch.device("cpu"))
    weights = encoder(encoder.tokens(["w1 w2 w3"], 16))
    assert weights.dtype == torch.float32 and bool((weights >= 0).all())
    result = train(cfg, tmp_path / "out", examples=make_examples(), show_progress=False)
    assert np.isfinite(result.last_metrics["loss"])


def test_fused_and_plain_heads_train_alike(tiny, tmp_path):
    pytest.importorskip("spladekit.model.fused")
    model = {"path": str(tiny), "query_max_length": 16, "doc_max_length": 24}
    train(
        tiny_config(tiny, steps=2, model=dict(model, head_impl="fused")),
        tmp_path / "f",
        examples=make_examples(),
        show_progress=False,
    )
    train(
        tiny_config(tiny, steps=2, model=dict(model, head_impl="plain")),
        tmp_path / "p",
        examples=make_examples(),
        show_progress=False,
    )
    fused, plain = _records(tmp_path / "f"), _records(tmp_path / "p")
    assert [r["loss"] for r in fused] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
    # exact: counts of weights > 0, and every max logit of this tiny model sits ≥ 0.8 above 0 (its
    # bias is +1), far beyond the float32 rounding (~1e-6) by which the two heads' logits differ
    assert [r["active_d"] for r in fused] == [r["active_d"] for r in plain]


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("lr", float("inf"), "finite"),  # passed gt=0; the run stopped at step 2 with a non-finite loss
        ("steps", True, "boolean"),  # pydantic's lax mode read it as 1 step
        ("regularizer.lambda_d", True, "boolean"),
        ("seed", 10**23, "less than or equal"),  # was accepted, then torch.manual_seed overflowed
    ],
)
def test_settings_refuse_non_finite_boolean_and_out_of_range_numbers(tmp_path, field, value, words):
    import yaml

    from spladekit.errors import DataFormatError
    from spladekit.train.config import load_config

    *section, key = field.split(".")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({section[0]: {key: value}} if section else {key: value}))
    with pytest.raises(DataFormatError, match=words) as info:
        load_config(path)
    assert info.value.field == field and info.value.path == path
