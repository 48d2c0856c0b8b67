"""What a training run says while it runs (spladekit.train.progress): a line per phase, in order, with
the numbers the run's files hold, and a step bar whose rate counts training steps only."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spladekit.train.callbacks import Callback  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _records(out: Path, split: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("split") == split]


def test_spladekit_train_says_each_phase_in_order(tiny, tmp_path):
    triples = tmp_path / "t.tsv"
    triples.write_text("".join(f"{e.query}\t{e.positives[0][1]}\t{e.negatives[0][1]}\n" for e in make_examples()))
    cfg = tiny_config(
        tiny,
        steps=4,
        eval_every=2,
        validate_every=2,
        data={"format": "triples", "path": str(triples), "num_negatives": 1, "validation_fraction": 0.25},
        dev={"k": 10},
    )
    (tmp_path / "c.yaml").write_text(cfg.to_yaml())
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "spladekit", "train", str(tmp_path / "c.yaml"), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout
    lines = [line.strip() for line in re.split(r"[\r\n]+", done.stdout) if line.strip()]
    dev = _records(out, "dev")
    validation = _records(out, "validation")
    best = json.loads((out / "best.json").read_text())
    # the scores printed are those the run logged (metrics.jsonl) and selected on (best.json)
    expected = [
        f"training {tiny} on {triples} (triples) into {out}",
        "reading the training data",
        "9 training queries, 3 held out",
        "loading the model",
        "155 terms, max pooling",
        "loading the dev set",
        "dev set ",
        f"validation at step 0: ranking loss {validation[0]['val_loss_rank']:.4f}",
        "dev evaluation at step 0: 3 queries",
        f"dev at step 0: nDCG@10 {dev[0]['nDCG@10']:.4f}",
    ]
    for step, val, row in ((2, validation[1], dev[1]), (4, validation[2], dev[2])):
        expected += [
            "training:",
            f"validation at step {step}: ranking loss {val['val_loss_rank']:.4f}",
            f"dev evaluation at step {step}",
            f"dev at step {step}: nDCG@10 {row['nDCG@10']:.4f}",
        ]
    expected += [
        "saving the final model",
        f"final model (step 4): {out / 'last'}",
        "done: 4 steps in ",
        f"trained 4 steps; best dev nDCG@10 {best['value']:.4f} at step {best['step']}: {out / 'model'}; "
        f"last model (step 4): {out / 'last'}",
    ]
    position = 0
    for want in expected:
        found = next((i for i in range(position, len(lines)) if lines[i].startswith(want)), None)
        assert found is not None, f"{want!r} not found in order after line {position}:\n" + "\n".join(lines)
        position = found + 1
    marked = [int(m.group(1)) for m in (re.match(r"dev at step (\d+): .* \*best\*", line) for line in lines) if m]
    assert marked == [r["step"] for r in dev if r.get("best")]  # a new best is marked where the log marks it
    assert "validation: {" not in done.stdout  # no raw record


class SlowEvaluations(Callback):
    """Each dev evaluation takes ``seconds`` longer (inside the evaluation phase)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_phase_end(self, trainer, phase, seconds):
        if phase == "dev":
            time.sleep(self.seconds)


def _seconds_per_step(rendered: str) -> float:
    """The rate tqdm printed last, as seconds per step (it writes ``3.2step/s`` or ``1.5s/step``)."""
    rate = re.findall(r"([\d.]+)(step/s|s/step)", rendered)[-1]
    return 1.0 / float(rate[0]) if rate[1] == "step/s" else float(rate[0])


def test_the_step_bar_counts_training_steps_only(tiny, tmp_path):
    from spladekit.train import train
    from spladekit.train.progress import Progress

    sleep = 3.0
    stream = io.StringIO()
    progress = Progress(stream=stream)
    cfg = tiny_config(
        tiny,
        steps=4,
        eval_every=2,
        data={"format": "triples", "path": "unused", "num_negatives": 1, "validation_fraction": 0.25},
        dev={"k": 10},
    )
    began = time.perf_counter()
    train(
        cfg,
        tmp_path / "out",
        examples=make_examples(),
        show_progress=False,
        callbacks=[SlowEvaluations(sleep), progress],
    )
    wall = time.perf_counter() - began
    # three dev evaluations (steps 0, 2, 4), each longer than `sleep`: evaluation time, not training time
    assert progress.evaluated_s >= 3 * sleep
    assert progress.trained_s <= wall - 3 * sleep
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    step_times = sum(r["step_time_s"] for r in rows if "step_time_s" in r)
    # the bar's time holds the four steps (each timed in the log) and not the evaluation of step 2 between them,
    # which alone would add `sleep`; the steps' bookkeeping around step_time_s is far below a second
    assert step_times <= progress.trained_s < step_times + sleep
    segments = [part for part in stream.getvalue().split("\n") if "training:" in part]
    assert len(segments) == 2  # the bar closes for the evaluation of step 2 and reopens after it
    # the rate the bar ends with: the run's 4 steps over its training time (printed to 3 significant digits)
    assert _seconds_per_step(segments[-1]) == pytest.approx(progress.trained_s / 4, rel=0.01, abs=0.01)
