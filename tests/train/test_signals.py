"""`spladekit train` ended by SIGTERM (what `kill` and job schedulers send) in each phase of a run.

Each case runs the real command line in a subprocess (tests/signal_driver.py) that sends SIGTERM to
its main thread at an exact point of one phase of :class:`spladekit.train.trainer.Trainer` (the N-th
call of a function of that phase, as `kill` would at that moment): the set-up's data phase (mining
hard negatives with a model), the set-up after ``inputs.json`` and ``config.yaml`` are written (before
the model), the dev evaluation, the optimiser step, writing a checkpoint, writing the final model, and
the model cards of the end of the run (``on_train_end``). Judged from outside: the exit status is 143
(128 + SIGTERM) with no abort message nor traceback, no temporary file or folder is left beside or
inside ``--out`` (nor in ``TMPDIR``), and every file that is there is complete (it parses, and a
checkpoint holds all its parts).

The two encoding phases run on the CPU worker threads of :mod:`spladekit.model.cpu_pool`
(``OMP_NUM_THREADS=2`` and the fused head, so that path is taken whatever the suite's own thread
setting): the signal comes while a worker is inside torch operations, which is when an interpreter
shutting down under it aborted the process (exit 134).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_helpers import make_examples, make_tiny_model

HERE = Path(__file__).resolve().parents[1]  # tests/, where signal_driver.py lives
SRC = HERE.parent / "src"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A tiny model, a triples file and a BEIR folder (train and dev qrels) of the same examples."""
    root = tmp_path_factory.mktemp("signals")
    model = make_tiny_model(root / "model")
    examples = make_examples(12, negatives=2, seed=4)
    triples = root / "triples.tsv"
    triples.write_text("".join(f"{e.query}\t{e.positives[0][1]}\t{e.negatives[0][1]}\n" for e in examples))
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {d: t for e in examples for d, t in e.positives + e.negatives}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": e.qid, "text": e.query}) + "\n" for e in examples))
    for split in ("train", "dev"):
        (beir / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{e.qid}\t{e.positives[0][0]}\t1\n" for e in examples)
        )
    return {"root": root, "model": model, "triples": triples, "beir": beir}


def _config(inputs, folder: Path, **more) -> Path:
    import yaml

    config = {
        "model": {"path": str(inputs["model"]), "head_impl": "fused", "query_max_length": 16, "doc_max_length": 24},
        "data": {"format": "triples", "path": str(inputs["triples"]), "num_negatives": 1},
        "steps": 3,
        "batch_size": 4,
        "lr": 1e-3,
        "seed": 0,
        "curves": False,
        "monitor": {"logit_sample": 0},
    }
    for key, value in more.items():
        node = config
        *path, last = key.split("__")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(target: str, nth: int, when: str, config: Path, out: Path, tmp: Path):
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="2", TMPDIR=str(tmp))
    command = [
        sys.executable,
        str(HERE / "signal_driver.py"),
        target,
        str(nth),
        when,
        "--",
        "train",
        str(config),
        "--out",
        str(out),
        "--no-progress",
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def _check_left_complete(out: Path, tmp: Path) -> None:
    """No temporary anywhere; every file of the run that exists parses or loads."""
    import torch

    from spladekit.io import read_jsonl, read_yaml

    hidden = [p for p in [out, *out.rglob("*")] if p.name.startswith(".")] if out.exists() else []
    beside = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    assert hidden == [] and beside == [], (hidden, beside)
    assert list(tmp.iterdir()) == []
    if not out.exists():
        return
    if (out / "config.yaml").exists():
        assert read_yaml(out / "config.yaml")["steps"] == 3
    if (out / "inputs.json").exists():
        assert set(json.loads((out / "inputs.json").read_text())) == {"settings", "inputs"}
    if (out / "metrics.jsonl").exists():
        list(read_jsonl(out / "metrics.jsonl"))
    for step in sorted((out / "checkpoints").glob("*")):
        assert step.name.startswith("step-"), step
        assert {p.name for p in step.iterdir()} == {"trainer.pt", "rng-0.pt", "model", "config.yaml"}, step
        torch.load(step / "trainer.pt", weights_only=True)
        assert (step / "model" / "config.json").is_file()
    for name in ("model", "last"):
        if (out / name).exists():
            assert (out / name / "model.safetensors").is_file() and (out / name / "config.json").is_file()
            if (out / name / "README.md").exists():
                assert (
                    (out / name / "README.md").read_text().rstrip().splitlines()[-1].startswith("<!-- spladekit-card ")
                )


PHASES = {
    # phase: (what the driver wraps, which call, before/after it, config fields)
    "mining": (
        "spladekit.model.splade:SpladeModel._forward",
        1,
        "before",
        {"data__format": "beir", "data__negatives": "model", "data__mining_depth": 4},
    ),
    "set-up, the model not loaded": ("spladekit.train.trainer:Trainer._setup_model", 1, "before", {}),
    "dev evaluation": ("spladekit.model.splade:SpladeModel._forward", 1, "before", {"eval_every": 2}),
    "a step": ("spladekit.train.trainer:Trainer.optimizer_step", 2, "before", {"checkpoint_every": 1}),
    "writing a checkpoint": (
        "transformers.modeling_utils:PreTrainedModel.save_pretrained",
        2,
        "after",
        {"checkpoint_every": 1},
    ),
    "writing the final model": ("transformers.modeling_utils:PreTrainedModel.save_pretrained", 1, "after", {}),
    "the model cards": ("spladekit.train.callbacks:ModelCards.on_train_end", 1, "before", {}),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_sigterm_in_each_phase_exits_143_leaving_only_complete_files(inputs, tmp_path, phase):
    target, nth, when, more = PHASES[phase]
    if phase == "mining":
        more = {**more, "data__path": str(inputs["beir"]), "data__negatives_model": str(inputs["model"])}
    if phase == "dev evaluation":
        more = {**more, "dev": {"data": str(inputs["beir"]), "split": "dev", "k": 10}}
    config = _config(inputs, tmp_path, **more)
    out = tmp_path / "run"
    done = _run(target, nth, when, config, out, tmp_path / "tmp")
    assert done.returncode == 143, (done.returncode, done.stderr[-3000:])
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    _check_left_complete(out, tmp_path / "tmp")
    if phase == "a step":  # checkpoint 1 written, step 2 not: the run resumes from step 1 to its end
        assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000001"]
    if phase == "writing a checkpoint":
        assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-0000001"]
    if phase == "set-up, the model not loaded":  # the run's record written, nothing of the model yet
        assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "inputs.json"]
    if phase == "the model cards":  # the final model written, its card not yet, nor result.json (written last)
        assert (out / "model" / "model.safetensors").is_file() and not (out / "model" / "README.md").exists()
        assert not (out / "result.json").exists()
        again = subprocess.run(
            [sys.executable, "-m", "spladekit", "train", str(config), "--out", str(out), "--no-progress"],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(SRC)),
            timeout=300,
        )
        assert again.returncode == 0 and "already trained" not in again.stdout, again.stderr[-3000:]
        assert (out / "model" / "README.md").is_file() and (out / "result.json").is_file()
