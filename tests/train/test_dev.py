"""Dev-set retrieval during training: the logged metrics are those of ``spladekit evaluate``, ``model/``
is the checkpoint with the highest logged dev metric, ``last/`` the final one, early stopping, and
no dev set from a test split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from spladekit.errors import DataFormatError
from tests.train_helpers import make_examples, make_tiny_model, tiny_config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-dev") / "model")


def _records(out: Path, split: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("split") == split]


def _beir_dev(folder: Path, examples) -> Path:
    """A BEIR folder of the examples' documents with ``qrels/dev.tsv`` (the examples' positives)."""
    (folder / "qrels").mkdir(parents=True)
    docs = {}
    for e in examples:
        for d, text in e.positives + e.negatives:
            docs[d] = text
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": e.qid, "text": e.query}) + "\n" for e in examples))
    lines = "".join(f"{e.qid}\t{e.positives[0][0]}\t1\n" for e in examples)
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return folder


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_best_checkpoint_is_the_highest_logged_dev_metric(tiny, tmp_path):
    from spladekit.evaluate.systems import EvalConfig, run_evaluation
    from spladekit.train import train

    examples = make_examples(16, negatives=3, seed=3)
    beir = _beir_dev(tmp_path / "beir", make_examples(10, negatives=2, seed=9))
    config = tiny_config(
        tiny,
        steps=8,
        lr=3e-3,
        eval_every=2,
        checkpoint_every=2,
        keep_checkpoints=10,
        dev={"data": str(beir), "split": "dev", "k": 10},
    )
    out = tmp_path / "run"
    result = train(config, out, examples=examples, show_progress=False)
    dev = _records(out, "dev")
    assert [r["step"] for r in dev] == [0, 2, 4, 6, 8]
    for r in dev:  # logged beside the metric: active terms and FLOPS of the dev vectors
        assert {"nDCG@10", "MRR@10", "avg_query_terms", "avg_doc_terms", "flops"} <= set(r)
    top = max(r["nDCG@10"] for r in dev)
    best = next(r for r in dev if r["nDCG@10"] == top)  # the first step reaching the highest value
    assert result.best == {"metric": "nDCG@10", "value": top, "step": best["step"]}
    assert json.loads((out / "best.json").read_text()) == result.best
    assert result.model_dir == out / "model" and result.last_dir == out / "last"
    # model/ holds the weights of the best step (equal tensors: the same values saved twice), last/ the final ones
    final_weights = _weights(out / "last")
    assert all(
        torch.equal(final_weights[k], v) for k, v in _weights(out / "checkpoints" / "step-0000008" / "model").items()
    )
    if best["step"] > 0:
        ckpt = _weights(out / "checkpoints" / f"step-{best['step']:07d}" / "model")
        assert all(torch.equal(ckpt[k], v) for k, v in _weights(out / "model").items())
    # spladekit evaluate on model/ and last/ gives the logged numbers (same encoder, index and evaluation code)
    for folder, record in ((out / "model", best), (out / "last", dev[-1])):
        metrics = run_evaluation(
            EvalConfig(model=str(folder), data=str(beir), split="dev", k=10, measures=["nDCG@10", "MRR@10"]),
            tmp_path / folder.name,
            show_progress=False,
        ).metrics
        # same weights, same batches, same code: equal up to float summation order (1e-9 is far below a rank swap)
        assert metrics["nDCG@10"] == pytest.approx(record["nDCG@10"], abs=1e-9)
        assert metrics["MRR@10"] == pytest.approx(record["MRR@10"], abs=1e-9)
    saved = json.loads((out / "model" / "spladekit.json").read_text())
    assert saved["extra"]["training"]["selected"] == result.best


def test_dev_scores_of_an_inference_free_run_are_those_of_its_saved_model(tiny, tmp_path):
    """With an inference-free query side the dev evaluation uses the query weights being trained (not
    the transformer): the final dev record equals `spladekit evaluate` of last/ (saved weights)."""
    from spladekit.evaluate.systems import EvalConfig, run_evaluation
    from spladekit.train import train

    examples = make_examples(16, negatives=3, seed=3)
    beir = _beir_dev(tmp_path / "beir", make_examples(10, negatives=2, seed=9))
    config = tiny_config(
        tiny,
        steps=4,
        lr=3e-3,
        eval_every=2,
        dev={"data": str(beir), "split": "dev", "k": 10},
        **{"model__query_encoder": "inference-free"},
    )
    out = tmp_path / "run"
    train(config, out, examples=examples, show_progress=False)
    last = _records(out, "dev")[-1]
    assert last["step"] == 4
    metrics = run_evaluation(
        EvalConfig(model=str(out / "last"), data=str(beir), split="dev", k=10, measures=["nDCG@10", "MRR@10"]),
        tmp_path / "eval",
        show_progress=False,
    ).metrics
    # same weights and code path: equal up to float summation order (1e-9 is far below a rank swap)
    assert metrics["nDCG@10"] == pytest.approx(last["nDCG@10"], abs=1e-9)
    assert metrics["avg_query_terms"] == pytest.approx(last["avg_query_terms"], abs=1e-9)


def test_a_nan_dev_value_never_stays_the_best():
    from spladekit.train.dev import BestTracker

    tracker = BestTracker("nDCG@10")
    assert tracker.update({"step": 0, "nDCG@10": float("nan")})
    assert tracker.update({"step": 2, "nDCG@10": 0.1}) and tracker.best["step"] == 2
    assert not tracker.update({"step": 4, "nDCG@10": float("nan")}) and tracker.best["step"] == 2


def test_held_out_training_queries_and_early_stopping(tiny, tmp_path):
    from spladekit.train import train

    examples = make_examples(20, negatives=3, seed=5)
    # lr so small that the ranking never changes: no evaluation improves on step 0, patience 2 stops at step 2·2
    config = tiny_config(
        tiny, steps=20, lr=1e-12, eval_every=2, data__validation_fraction=0.25, dev={"patience": 2, "k": 10}
    )
    out = tmp_path / "run"
    result = train(config, out, examples=examples, show_progress=False)
    dev = _records(out, "dev")
    assert result.early_stopped and result.steps == 4
    assert [r["step"] for r in dev] == [0, 2, 4]
    assert dev[0]["dev_queries"] == 5  # round(0.25 · 20) held-out queries
    assert result.best["step"] == 0 and (out / "last").is_dir() and (out / "model").is_dir()


def test_held_out_dev_set_from_texts():
    from spladekit.train.data import TrainingExample
    from spladekit.train.dev import _doc_id, held_out_dev_set

    train_ex = [TrainingExample("a", "w1", [("1+", "w1 w2")], [("1-", "w3")])]
    held = [
        TrainingExample("b", "w5", [("2+", "w5 w6")], [("2-", "w1 w2")]),  # negative = the training positive
        TrainingExample("c", "w5", [("3+", "w7")], []),
    ]  # the same query text: one query, two positives
    ds = held_out_dev_set(held, train_ex)
    assert sorted(ds.corpus.values()) == ["w1 w2", "w3", "w5 w6", "w7"]  # 5 texts, one repeated
    assert ds.queries == {"b": "w5"}
    assert ds.qrels == {"b": {_doc_id("w5 w6"): 1, _doc_id("w7"): 1}}
    with pytest.raises(ValueError, match="held-out"):
        held_out_dev_set([], train_ex)


@pytest.mark.parametrize("split", ["test", "Test", "test-small", "beir_test"])
def test_dev_set_never_from_the_test_split(split, tiny, tmp_path):
    from spladekit.train import load_config
    from spladekit.train.config import DevConfig

    with pytest.raises(ValueError, match="never comes from the test split"):
        DevConfig(data="x", split=split)
    with pytest.raises(DataFormatError, match="dev"):
        load_config(None, [f"dev.split={split}", "dev.data=x", "eval_every=5"])
    DevConfig(data="x", split="dev")  # a dev split is fine


def test_eval_every_needs_a_dev_set():
    from spladekit.train import load_config

    with pytest.raises(DataFormatError, match="eval_every needs a dev set"):
        load_config(None, ["eval_every=5", "data.validation_fraction=0"])
    load_config(None, ["eval_every=5", "data.validation_fraction=0.1"])


def test_curves_draw_the_dev_row(tmp_path, monkeypatch):
    """The figure has a third row whose panels hold the dev records' values at their steps, the best
    one marked; and the PNG shows that mark (gold, a colour no other line has) in the third row's
    first panel. Without dev records: two rows, no mark."""
    import matplotlib.image
    import numpy as np

    from spladekit import plots

    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    records = [{"step": s, "loss": 1.0 / s, "active_q": 10, "active_d": 20} for s in range(1, 5)]
    dev = [
        {
            "step": s,
            "split": "dev",
            "nDCG@10": 0.1 * s,
            "MRR@10": 0.1,
            "avg_query_terms": 5,
            "avg_doc_terms": 9,
            "flops": 2.0,
            "best": s == 2,
        }
        for s in (0, 2, 4)
    ]
    path = plots.training_curves(records + dev, tmp_path / "c.png")
    plots.training_curves(records, tmp_path / "plain.png")
    with_dev, plain = figures
    panels = {ax.get_title(): ax for ax in with_dev.axes if ax.get_visible()}
    assert {ax.get_subplotspec().rowspan.start for ax in plain.axes} == {0, 1} and "dev retrieval" not in {
        ax.get_title() for ax in plain.axes
    }
    drawn = {}
    for title in ("dev retrieval", "dev active terms", "dev FLOPS"):
        assert panels[title].get_subplotspec().rowspan.start == 2, title  # the third row
        drawn.update(
            {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in panels[title].lines}
        )
    steps = [0, 2, 4]
    assert drawn == {
        "nDCG@10": (steps, [0.0, 0.2, 0.4]),
        "MRR@10": (steps, [0.1] * 3),
        "best": ([2], [0.2]),
        "avg_query_terms": (steps, [5] * 3),
        "avg_doc_terms": (steps, [9] * 3),
        "flops": (steps, [2.0] * 3),
    }
    # the PNG: gold pixels (matplotlib's "gold", #FFD700) only in the left quarter of the lower third
    pixels = matplotlib.image.imread(path)[..., :3]
    rows, cols = np.nonzero(np.all(np.abs(pixels - np.array([1.0, 215 / 255, 0.0])) < 0.02, axis=-1))
    height, width = pixels.shape[:2]
    assert rows.size > 20 and rows.min() > 2 * height / 3 and cols.max() < width / 4, (rows.size, height, width)
    plain_pixels = matplotlib.image.imread(tmp_path / "plain.png")[..., :3]
    assert not np.any(np.all(np.abs(plain_pixels - np.array([1.0, 215 / 255, 0.0])) < 0.02, axis=-1))


def test_resume_keeps_the_selection_consistent(tiny, tmp_path):
    """Interrupted at step 3 (checkpoint at 2, dev records at 0 and 2), resumed to 6: the dev history
    and the best checkpoint equal those of an uninterrupted run."""
    from spladekit.train import train

    examples = make_examples(16, negatives=3, seed=3)
    beir = _beir_dev(tmp_path / "beir", make_examples(10, negatives=2, seed=9))
    config = tiny_config(tiny, steps=6, lr=3e-3, eval_every=2, checkpoint_every=2, dev={"data": str(beir), "k": 10})
    whole = train(config, tmp_path / "whole", examples=examples, show_progress=False)
    train(config, tmp_path / "part", examples=examples, show_progress=False, stop_after=3)
    resumed = train(config, tmp_path / "part", examples=examples, show_progress=False)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "dev_seconds"} for r in rows]  # noqa: E731
    assert strip(_records(tmp_path / "part", "dev")) == strip(_records(tmp_path / "whole", "dev"))
    assert resumed.best == whole.best
    a, b = _weights(tmp_path / "part" / "model"), _weights(tmp_path / "whole" / "model")
    assert all(torch.equal(a[k], b[k]) for k in a)  # exact resume: the same weights by construction
