"""The reproduction grid: config validation, planning, resume, reports, dry run, CLI.

The grid's own bookkeeping (which stage runs when, resume, failures, tables) is checked with a
recording test double of the cell runner; the real runner (diagnose, rescale, train, evaluate) runs
end to end on a tiny random BERT in :func:`test_real_runner_end_to_end`.
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

from spladekit.errors import DataFormatError, SpladekitError
from spladekit.reproduce.config import ReproduceConfig, apply_overrides, load_reproduce_config
from spladekit.reproduce.grid import StaleCellError, cell_status, fingerprint, plan_grid, run_grid
from spladekit.reproduce.report import write_report

ROOT = Path(__file__).resolve().parents[2]


def base_dict(data: str = "unused-folder") -> dict:
    return {
        "name": "t",
        "seeds": [0, 1],
        "backbones": [
            {"name": "orig", "path": "m", "treatments": ["none"]},
            {"name": "big", "path": "m", "inflate": 16},
        ],
        "treatments": [
            {"name": "none"},
            {"name": "constant", "rescale": {"mode": "factor", "factor": 0.0625}},
            {"name": "calibrated", "rescale": {"mode": "target_logit", "target": 2.0, "statistic": "std"}},
        ],
        "diagnosis": {"dataset": data, "num_texts": 4},
        "train": {"steps": 2, "batch_size": 2},
        "evaluation": {
            "in_domain": [{"name": "ind", "path": data}],
            "out_of_domain": [{"name": "ood1", "path": data}, {"name": "ood2", "path": data}],
        },
    }


# ------------------------------------------------------------------------------------ test double
class RecordingRunner:
    """Records every call; metrics are a fixed function of (cell, dataset) so tables can be checked."""

    def __init__(self, fail_train: set[str] = frozenset(), diverge: set[str] = frozenset()):
        self.calls: list[tuple] = []
        self.fail_train, self.diverge = set(fail_train), set(diverge)

    def prepare_backbone(self, backbone, config, folder):
        self.calls.append(("backbone", backbone.name))
        return {"model": f"base:{backbone.name}"}

    def init_cell(self, cell, base_model, config, folder):
        self.calls.append(("init", cell.id))
        assert base_model == f"base:{cell.backbone.name}"
        return {"model": f"init:{cell.id}", "factor": 0.5}

    def train_cell(self, cell, init_model, config, folder):
        self.calls.append(("train", cell.id))
        assert init_model == f"init:{cell.id}"
        if cell.id in self.fail_train:
            raise RuntimeError("boom")
        if cell.id in self.diverge:
            from spladekit.train.monitor import TrainingDivergedError

            raise TrainingDivergedError("non-finite loss")
        return {
            "model": f"trained:{cell.id}",
            "summary": {"steps": 2, "first": {"loss": 10.0 + cell.seed}, "last": {"loss": 1.0}, "max_grad_norm": 3.0},
        }

    def evaluate(self, model, dataset, config, folder):
        self.calls.append(("eval", model, dataset.name))
        return {
            "nDCG@10": metric_value(model.split(":", 1)[1], dataset.name),
            "avg_query_terms": 5.0,
            "avg_doc_terms": 50.0,
            "flops": 1.0 + len(model) / 100,
        }


def metric_value(cell_id: str, dataset: str) -> float:
    return (sum(map(ord, cell_id + dataset)) % 97) / 100


def silent(_msg):
    pass


# ------------------------------------------------------------------------------------ config
def test_shipped_configs_validate():
    for name in ("reproduce-paper.yaml", "reproduce-local.yaml"):
        config = load_reproduce_config(ROOT / "configs" / name)
        assert config.evaluation.datasets()
    paper = load_reproduce_config(ROOT / "configs" / "reproduce-paper.yaml")
    assert len(plan_grid(paper)) == len(paper.backbones) * len(paper.treatments) * len(paper.seeds)
    assert [d.name for d in paper.evaluation.out_of_domain] and len(paper.evaluation.out_of_domain) == 13
    local = load_reproduce_config(ROOT / "configs" / "reproduce-local.yaml")
    ids = [c.id for c in plan_grid(local)]
    assert ids[:4] == ["tiny--none--s0", "tiny--none--s1", "tiny--none--s2", "tiny--cap12--s0"]
    # 3 seeds; treatments of 4 backbones (tiny: none, cap12; uniform: 4; per-row and LayerNorm gain: 6) + 4 extra sweep points
    assert len(ids) == len(set(ids)) == 3 * (2 + 4 + 6 + 6 + 4)


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "change, field, words",
    [
        (lambda d: d.update(colour="red"), "colour", "Extra inputs"),
        (lambda d: d["treatments"][1]["rescale"].pop("factor"), "treatments.1.rescale", "needs 'factor'"),
        (lambda d: d["treatments"].append({"name": "none"}), None, "duplicate treatment"),
        (lambda d: d["backbones"][0].update(treatments=["nope"]), None, "unknown treatment"),
        (lambda d: d["train"].update(seed=3), None, "set by the grid"),
        (lambda d: d["backbones"][0].update(name="a/b"), "backbones.0.name", "folder"),
        (lambda d: d.update(seeds=[1, 1]), None, "duplicate seeds"),
        (lambda d: d["evaluation"].update(in_domain=[], out_of_domain=[]), None, "at least one"),
    ],
)
def test_config_errors_name_the_field(tmp_path, change, field, words):
    data = base_dict()
    change(data)
    with pytest.raises(DataFormatError) as info:
        load_reproduce_config(_write(tmp_path, data))
    assert words in str(info.value)
    assert str(tmp_path / "grid.yaml") in str(info.value)
    if field:
        assert info.value.field == field


def test_bad_yaml_and_missing_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="not valid YAML"):
        load_reproduce_config(path)
    with pytest.raises(DataFormatError, match="cannot read"):
        load_reproduce_config(tmp_path / "absent.yaml")


def test_overrides_reach_nested_keys_and_list_items(tmp_path):
    data = base_dict()
    apply_overrides(data, ["train.steps=7", "backbones.1.inflate=4", "seeds=[3]", "evaluation.k=10"])
    assert data["train"]["steps"] == 7 and data["backbones"][1]["inflate"] == 4 and data["seeds"] == [3]
    config = load_reproduce_config(_write(tmp_path, base_dict()), ["backbones.1.inflate=4", "seeds=[5]"])
    assert config.backbones[1].inflate == 4 and config.seeds == [5]
    with pytest.raises(DataFormatError, match="not an index"):
        load_reproduce_config(_write(tmp_path, base_dict()), ["backbones.9.path=x"])
    with pytest.raises(DataFormatError, match="not key=value"):
        load_reproduce_config(_write(tmp_path, base_dict()), ["train.steps"])
    with pytest.raises(DataFormatError, match="'steps' is not a section"):
        load_reproduce_config(_write(tmp_path, base_dict()), ["train.steps.x=1"])


def test_plan_is_backbone_by_allowed_treatment_by_seed():
    config = ReproduceConfig.model_validate(base_dict())
    expected = [
        f"{b}--{t}--s{s}"
        for b, ts in (("orig", ["none"]), ("big", ["none", "constant", "calibrated"]))
        for t, s in itertools.product(ts, [0, 1])
    ]
    assert [c.id for c in plan_grid(config)] == expected


def test_metric_is_always_measured():
    data = base_dict()
    data["evaluation"]["in_domain"][0].update(metric="MRR@10", measures=["R@100"])
    config = ReproduceConfig.model_validate(data)
    assert config.evaluation.in_domain[0].measures == ["MRR@10", "R@100"]


# ------------------------------------------------------------------------------------ grid bookkeeping
def test_grid_runs_every_stage_once_and_resumes(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    runner = RecordingRunner()
    outcome = run_grid(config, tmp_path, runner, log=silent)
    cells = [c.id for c in plan_grid(config)]
    assert outcome.done == cells and not outcome.failed
    assert sorted(c[1] for c in runner.calls if c[0] == "backbone") == ["big", "orig"]
    assert [c[1] for c in runner.calls if c[0] == "init"] == cells
    assert [c[1] for c in runner.calls if c[0] == "train"] == cells
    assert len([c for c in runner.calls if c[0] == "eval"]) == len(cells) * 3
    for cell in cells:
        result = json.loads((tmp_path / "cells" / cell / "result.json").read_text())
        assert result["status"] == "done"
        assert result["eval"]["ood2"]["nDCG@10"] == metric_value(cell, "ood2")
        assert cell_status(config, next(c for c in plan_grid(config) if c.id == cell), tmp_path) == "done"
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["name"] == "t"

    again = RecordingRunner()
    outcome = run_grid(config, tmp_path, again, log=silent)
    assert again.calls == [] and outcome.skipped == cells

    # a lost evaluation is redone alone; an added evaluation set runs only for the new set
    (tmp_path / "cells" / cells[0] / "eval" / "ood1" / "done.json").unlink()
    data = base_dict()
    data["evaluation"]["out_of_domain"].append({"name": "ood3", "path": "x"})
    bigger = ReproduceConfig.model_validate(data)
    third = RecordingRunner()
    run_grid(bigger, tmp_path, third, log=silent)
    assert all(kind == "eval" for kind, *_ in third.calls)
    assert sorted(third.calls) == sorted(
        [("eval", f"trained:{cells[0]}", "ood1")] + [("eval", f"trained:{c}", "ood3") for c in cells]
    )


def test_failed_cell_is_reported_and_retried_without_redoing_finished_stages(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    bad = "big--constant--s1"
    runner = RecordingRunner(fail_train={bad})
    outcome = run_grid(config, tmp_path, runner, log=silent)
    assert list(outcome.failed) == [bad] and "boom" in outcome.failed[bad]
    assert bad not in outcome.done and len(outcome.done) == len(plan_grid(config)) - 1
    assert "boom" in json.loads((tmp_path / "cells" / bad / "error.json").read_text())["error"]
    status = cell_status(config, next(c for c in plan_grid(config) if c.id == bad), tmp_path)
    assert status == "partial: init done"

    retry = RecordingRunner()
    outcome = run_grid(config, tmp_path, retry, log=silent)
    assert outcome.done == [bad]
    # the backbone (marked done) and the cell's init stage are not redone
    assert [c[0] for c in retry.calls] == ["train", "eval", "eval", "eval"]


def test_divergence_is_a_result_not_retried(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    bad = "big--none--s0"
    outcome = run_grid(config, tmp_path, RecordingRunner(diverge={bad}), log=silent)
    assert outcome.diverged == [bad] and not outcome.failed
    result = json.loads((tmp_path / "cells" / bad / "result.json").read_text())
    assert result["status"] == "diverged" and result["eval"] == {}
    again = RecordingRunner()
    assert run_grid(config, tmp_path, again, log=silent).skipped == [c.id for c in plan_grid(config)]
    assert again.calls == []


def test_changed_training_config_is_refused_unless_forced(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    run_grid(config, tmp_path, RecordingRunner(), log=silent)
    data = base_dict()
    data["train"]["steps"] = 3
    changed = ReproduceConfig.model_validate(data)
    assert {cell_status(changed, c, tmp_path) for c in plan_grid(changed)} == {"stale"}
    with pytest.raises(StaleCellError, match="--force"):
        run_grid(changed, tmp_path, RecordingRunner(), log=silent)
    runner = RecordingRunner()
    outcome = run_grid(changed, tmp_path, runner, force=True, log=silent)
    assert len(outcome.done) == len(plan_grid(changed))
    # the init stage does not depend on the training config: it is kept
    assert not [c for c in runner.calls if c[0] == "init"]
    assert len([c for c in runner.calls if c[0] == "train"]) == len(plan_grid(changed))


def test_half_done_training_is_not_resumed_with_another_config(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    bad = "orig--none--s0"
    run_grid(config, tmp_path, RecordingRunner(fail_train={bad}), cells=[bad], log=silent)
    assert (tmp_path / "cells" / bad / "train" / "started.json").exists()
    data = base_dict()
    data["train"]["steps"] = 5
    with pytest.raises(StaleCellError, match="train stage"):
        run_grid(ReproduceConfig.model_validate(data), tmp_path, RecordingRunner(), cells=[bad], log=silent)
    # with the same config it is simply resumed
    assert run_grid(config, tmp_path, RecordingRunner(), cells=[bad], log=silent).done == [bad]


def test_changed_input_files_are_seen_by_the_fingerprints(tmp_path):
    """An evaluation set whose qrels changed at the same path is evaluated again; a backbone folder
    whose files changed makes the grid refuse to reuse what was built from it (unless forced)."""
    backbone, beir = tmp_path / "backbone", tmp_path / "beir"
    (backbone).mkdir()
    (backbone / "config.json").write_text("{}")
    (beir / "qrels").mkdir(parents=True)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    data = base_dict()
    for spec in data["backbones"]:
        spec["path"] = str(backbone)
    for spec in data["evaluation"]["out_of_domain"]:
        spec["path"] = str(beir)
    config = ReproduceConfig.model_validate(data)
    out = tmp_path / "out"
    run_grid(config, out, RecordingRunner(), log=silent)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    again = RecordingRunner()
    run_grid(config, out, again, log=silent)
    cells = [c.id for c in plan_grid(config)]
    assert sorted(again.calls) == sorted(("eval", f"trained:{c}", name) for c in cells for name in ("ood1", "ood2"))
    (backbone / "config.json").write_text('{"vocab_size": 10}')
    assert {cell_status(config, c, out) for c in plan_grid(config)} == {"stale"}
    with pytest.raises(StaleCellError):
        run_grid(config, out, RecordingRunner(), log=silent)


def test_only_selected_cells(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    runner = RecordingRunner()
    outcome = run_grid(config, tmp_path, runner, cells=["orig--none--s1"], log=silent)
    assert outcome.done == ["orig--none--s1"] and ("backbone", "big") not in runner.calls
    with pytest.raises(ValueError, match="unknown cell"):
        run_grid(config, tmp_path, runner, cells=["nope"], log=silent)


def test_fingerprint_is_order_insensitive_for_keys():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_evaluation_backend_is_in_the_fingerprint_only_when_not_exact():
    """Switching the evaluation backend makes finished evaluations stale (seismic is approximate);
    the exact default leaves the fingerprints of grids run before the option existed unchanged."""
    from spladekit.reproduce.grid import eval_spec

    config = ReproduceConfig.model_validate(base_dict())
    cell, (_, dataset) = plan_grid(config)[0], config.evaluation.datasets()[0]
    exact = eval_spec(config, cell, dataset)
    assert "backend" not in exact["encoding"]
    seismic = ReproduceConfig.model_validate(
        {**base_dict(), "evaluation": {**base_dict()["evaluation"], "backend": "seismic"}}
    )
    assert fingerprint(eval_spec(seismic, plan_grid(seismic)[0], dataset)) != fingerprint(exact)


def test_a_seismic_grid_without_pyseismic_stops_before_any_work(tmp_path, monkeypatch):
    """A None entry in sys.modules makes `import seismic` fail as where pyseismic-lsr is not installed:
    the grid refuses before its first stage (not after hours of training, at every cell's
    evaluation), and the dry run says so."""
    import re
    import sys

    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.errors import MissingExtraError, install_line

    monkeypatch.setitem(sys.modules, "seismic", None)
    config = ReproduceConfig.model_validate(
        {**base_dict(), "evaluation": {**base_dict()["evaluation"], "backend": "seismic"}}
    )
    runner = RecordingRunner()
    with pytest.raises(MissingExtraError, match=re.escape(install_line("seismic"))):
        run_grid(config, tmp_path / "o", runner, log=silent)
    assert runner.calls == []
    path = _write(tmp_path, {**base_dict(), "evaluation": {**base_dict()["evaluation"], "backend": "seismic"}})
    result = CliRunner().invoke(app, ["reproduce", str(path), "--dry-run", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0 and "evaluate (seismic)" in result.output
    assert "pyseismic-lsr, which is not installed" in result.output and "refuses to start" in result.output


@pytest.mark.parametrize(
    "blocked, change, words",
    [
        (
            "ir_datasets",
            {"evaluation": {"in_domain": [{"name": "ind", "path": "irds:beir/scifact/test"}]}},
            "irds:beir/scifact/test needs ir_datasets",
        ),
        (
            "datasets",
            {"train": {"steps": 2, "batch_size": 2, "data": {"format": "hf", "path": "someone/pairs"}}},
            "train.data.format: hf) needs datasets",
        ),
    ],
)
def test_a_grid_missing_another_extra_stops_before_any_work(tmp_path, monkeypatch, blocked, change, words):
    """An irds: evaluation set or Hugging Face training data without their packages: refused before the first
    stage (the evaluation or the training data would fail hours in), and the dry run says so."""
    import sys

    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, blocked, None)  # as where the package is not installed
    settings = {**base_dict(), **change}
    runner = RecordingRunner()
    with pytest.raises(MissingExtraError, match=re.escape(words)):
        run_grid(ReproduceConfig.model_validate(settings), tmp_path / "o", runner, log=silent)
    assert runner.calls == []
    result = CliRunner().invoke(
        app, ["reproduce", str(_write(tmp_path, settings)), "--dry-run", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0 and words in result.output and "refuses to start" in result.output, result.output


# ------------------------------------------------------------------------------------ report
def test_report_tables_and_plots(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    run_grid(config, tmp_path, RecordingRunner(diverge={"big--calibrated--s1"}), log=silent)
    written = write_report(config, tmp_path, command="spladekit reproduce grid.yaml")
    with open(written["cells_csv"], newline="") as handle:
        cells = list(csv.DictReader(handle))
    assert [r["cell"] for r in cells] == [c.id for c in plan_grid(config)]
    by_id = {r["cell"]: r for r in cells}
    assert float(by_id["big--constant--s1"]["ood1:nDCG@10"]) == metric_value("big--constant--s1", "ood1")
    assert by_id["big--calibrated--s1"]["status"] == "diverged" and by_id["big--calibrated--s1"]["ind:nDCG@10"] == ""
    expected_ood = (metric_value("orig--none--s0", "ood1") + metric_value("orig--none--s0", "ood2")) / 2
    assert float(by_id["orig--none--s0"]["ood_mean"]) == pytest.approx(expected_ood)

    with open(written["arms_csv"], newline="") as handle:
        arms = {r["arm"]: r for r in csv.DictReader(handle)}
    values = [metric_value(f"big--constant--s{s}", "ind") for s in (0, 1)]
    assert float(arms["big/constant"]["ind:nDCG@10"]) == pytest.approx(statistics.fmean(values))
    assert float(arms["big/constant"]["ind:nDCG@10:std"]) == pytest.approx(statistics.stdev(values))
    assert float(arms["big/constant"]["first_loss"]) == pytest.approx(10.5)  # seeds 0 and 1: 10, 11
    # the diverged seed has no metric: the arm's mean is the other seed's value, and no std
    assert float(arms["big/calibrated"]["ind:nDCG@10"]) == pytest.approx(metric_value("big--calibrated--s0", "ind"))
    assert arms["big/calibrated"]["ind:nDCG@10:std"] == "" and arms["big/calibrated"]["diverged"] == "1"

    text = written["markdown"].read_text()
    assert "spladekit reproduce grid.yaml" in text and "8 of 8 cells finished" in text
    assert f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}" in text
    for key in ("metric_ind", "metric_ood1", "quality_vs_flops"):
        assert written[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_partial_grid_lists_missing_cells(tmp_path):
    config = ReproduceConfig.model_validate(base_dict())
    run_grid(config, tmp_path, RecordingRunner(), cells=["orig--none--s0"], log=silent)
    text = write_report(config, tmp_path)["markdown"].read_text()
    assert "1 of 8 cells finished; missing: orig--none--s1, big--none--s0" in text


def test_training_curves_plot_from_metrics_logs(tmp_path):
    from spladekit.reproduce.cells import read_metrics_log, summarize_training

    log = tmp_path / "metrics.jsonl"
    records = [
        {"step": 2, "loss": 3.0, "grad_norm": 9.0, "active_q": 10, "active_d": 40, "step_time_s": 0.5},
        {"step": 1, "loss": 5.0, "grad_norm": 2.0, "active_q": 20, "active_d": 80, "step_time_s": 0.25},
        {"step": 2, "split": "validation", "loss": 4.0},
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    read = read_metrics_log(log)
    assert [r["step"] for r in read] == [1, 2]
    summary = summarize_training(read)
    assert summary["first"]["loss"] == 5.0 and summary["last"]["active_d"] == 40
    assert summary["max_grad_norm"] == 9.0 and summary["train_seconds"] == 0.75 and summary["steps"] == 2
    from spladekit import plots

    path = plots.training_curves_per_arm({"a": read, "b": read}, tmp_path / "curves.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    log.write_text("{broken\n")
    with pytest.raises(DataFormatError, match="line 1"):
        read_metrics_log(log)


# ------------------------------------------------------------------------------------ data, dry run, CLI
def test_eval_dataset_with_trec_qrels_and_topics(tiny_beir, tmp_path):
    from spladekit.reproduce.cells import load_eval_dataset
    from spladekit.reproduce.config import EvalDatasetSpec

    qrels = tmp_path / "qrels.txt"
    qrels.write_text("t1 Q0 d5 2\nt1 Q0 d1 0\nt2 Q0 d6 1\n")
    topics = tmp_path / "topics.txt"
    topics.write_text("t1\tbrain activity\nt2\tdrug dose\nt3\tnot judged\n")
    spec = EvalDatasetSpec(name="x", path=str(tiny_beir), qrels=str(qrels), queries=str(topics))
    dataset = load_eval_dataset(spec, download=False)
    assert dataset.queries == {"t1": "brain activity", "t2": "drug dose"}
    assert dataset.qrels == {"t1": {"d5": 2, "d1": 0}, "t2": {"d6": 1}} and len(dataset.corpus) == 6
    plain = load_eval_dataset(EvalDatasetSpec(name="y", path=str(tiny_beir)), download=False)
    assert sorted(plain.queries) == ["q1", "q2", "q3"]
    topics.write_text("t1\tbrain activity\n")
    with pytest.raises(DataFormatError, match="1 judged query ids have no text"):
        load_eval_dataset(spec, download=False)
    with pytest.raises(SpladekitError, match="not found"):
        load_eval_dataset(EvalDatasetSpec(name="z", path=str(tiny_beir), qrels="no/such/file.txt"), download=False)


def test_paper_dry_run_downloads_nothing(monkeypatch, tmp_path):
    import subprocess
    import urllib.request

    from spladekit.reproduce.plan import OFFLINE, describe_plan

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run tried to reach the network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setenv("SPLADEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = load_reproduce_config(ROOT / "configs" / "reproduce-paper.yaml")
    text = describe_plan(config, tmp_path / "out")
    assert f"{len(plan_grid(config))} cells" in text
    assert "bert-base-uncased" in text and OFFLINE in text
    assert "ettin-1b--calibrated--s2: pending" in text
    assert "rescale so that logit p99 = 8" in text


def test_local_dry_run_resolves_shared_inputs(shared, tmp_path, monkeypatch):
    from spladekit.reproduce.plan import OFFLINE, resolve_offline

    monkeypatch.setenv("SPLADEKIT_SHARED", str(shared))
    config = load_reproduce_config(ROOT / "configs" / "reproduce-local.yaml")
    resolved = dict(resolve_offline(config))
    assert resolved["backbone tiny: rasyosef/splade-tiny"] == str(shared / "models" / "splade-tiny")
    assert resolved["in_domain scifact: corpus scifact"] == str(shared / "data" / "beir" / "scifact")
    assert not [w for w in resolved.values() if w.startswith(OFFLINE)]


def test_cli_dry_run_and_bad_config(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    runner = CliRunner()
    path = _write(tmp_path, base_dict())
    result = runner.invoke(
        app, ["reproduce", str(path), "--dry-run", "--set", "seeds=[4]", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    assert "orig--none--s4: pending" in result.output and "big--calibrated--s4 (head inflated ×16)" in result.output
    bad = copy.deepcopy(base_dict())
    bad["treatments"][1]["rescale"]["mode"] = "shrink"
    result = runner.invoke(app, ["reproduce", str(_write(tmp_path, bad)), "--dry-run"])
    assert result.exit_code == 2 and "treatments.1.rescale.mode" in result.output


def test_a_killed_sitting_is_recorded_and_counted(tmp_path, monkeypatch):
    """`kill PID` (SIGTERM) during a sitting: the CLI records it (interrupted, its wall time) before
    exiting with 130, and the report's total wall time includes it. The grid's work is replaced by
    a function that sends the real signal to this process."""
    import os
    import signal
    import time

    from typer.testing import CliRunner

    import spladekit.reproduce as reproduce
    from spladekit.cli import app
    from spladekit.reproduce.grid import read_sittings

    def killed(*args, **kwargs):
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the sitting")

    monkeypatch.setattr(reproduce, "run_grid", killed)
    before = signal.getsignal(signal.SIGTERM)
    result = CliRunner().invoke(app, ["reproduce", str(_write(tmp_path, base_dict())), "--out", str(tmp_path / "o")])
    assert result.exit_code == 130, result.output
    assert signal.getsignal(signal.SIGTERM) == before  # handler restored
    (sitting,) = read_sittings(tmp_path / "o")
    assert sitting["interrupted"] and 0.2 <= sitting["wall_seconds"] < 5
    assert (
        "Total wall time 0 min 00 s over 1 invocation(s)"
        in write_report(load_reproduce_config(_write(tmp_path, base_dict())), tmp_path / "o")["markdown"].read_text()
    )


# ------------------------------------------------------------------------------------ real runner
@pytest.mark.slow
def test_real_runner_end_to_end(tiny_bert_dir, tiny_beir, tmp_path):
    """Inflate a tiny random BERT ×4, rescale it back by matching the original's decoder norm, train
    two steps, evaluate; then resume without redoing anything."""
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM

    from spladekit.reproduce.cells import SpladekitRunner

    (tiny_beir / "qrels" / "train.tsv").write_text((tiny_beir / "qrels" / "test.tsv").read_text())
    data = {
        "name": "e2e",
        "seeds": [0],
        "backbones": [{"name": "x4", "path": str(tiny_bert_dir), "inflate": 4}],
        "treatments": [
            {"name": "none"},
            {"name": "matched", "rescale": {"mode": "match_norm", "reference": str(tiny_bert_dir)}},
        ],
        "diagnosis": {"dataset": str(tiny_beir), "num_texts": 4, "max_length": 16, "max_tokens": 64},
        "train": {
            "model": {"query_max_length": 8, "doc_max_length": 16, "head_impl": "plain"},
            "data": {"format": "beir", "path": str(tiny_beir), "negatives": "none", "num_negatives": 0},
            "steps": 2,
            "batch_size": 2,
            "device": "cpu",
            "monitor": {"logit_sample": 1},
        },
        "evaluation": {
            "in_domain": [{"name": "tiny", "path": str(tiny_beir)}],
            "out_of_domain": [{"name": "tiny-top1", "path": str(tiny_beir), "query_top_k": 1, "doc_top_k": 1}],
            "batch_size": 4,
            "head_impl": "plain",
            "k": 10,
        },
        "device": "cpu",
    }
    config = ReproduceConfig.model_validate(data)
    out = tmp_path / "grid"
    outcome = run_grid(config, out, SpladekitRunner(show_progress=False), log=silent)
    assert outcome.done == ["x4--none--s0", "x4--matched--s0"], outcome.failed

    original = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir).cls.predictions.decoder.weight.detach()
    inflated = AutoModelForMaskedLM.from_pretrained(
        out / "backbones" / "x4" / "model"
    ).cls.predictions.decoder.weight.detach()
    torch.testing.assert_close(inflated, 4 * original)
    matched = json.loads((out / "cells" / "x4--matched--s0" / "result.json").read_text())
    assert matched["init"]["factor"] == pytest.approx(0.25, rel=1e-6)
    row_norm = float(np.linalg.norm(original.double().numpy(), axis=1).mean())
    assert matched["init"]["diagnosis_after"]["head"]["row_norm"]["mean"] == pytest.approx(row_norm, rel=1e-5)
    assert matched["init"]["diagnosis_before"]["head"]["row_norm"]["mean"] == pytest.approx(4 * row_norm, rel=1e-5)
    for cell in outcome.done:
        result = json.loads((out / "cells" / cell / "result.json").read_text())
        metrics = result["eval"]["tiny"]
        assert 0.0 <= metrics["nDCG@10"] <= 1.0 and metrics["num_queries"] == 3
        assert result["train"]["summary"]["steps"] == 2 and result["train"]["summary"]["first"]["loss"] > 0
        assert (out / "cells" / cell / "eval" / "tiny" / "run.trec").exists()
        pruned = result["eval"]["tiny-top1"]
        assert pruned["avg_doc_terms"] <= 1.0 and pruned["avg_query_terms"] <= 1.0
    written = write_report(config, out)
    assert "x4/matched" in written["markdown"].read_text() and written["training_curves"].exists()
    assert run_grid(config, out, SpladekitRunner(show_progress=False), log=silent).skipped == outcome.done


def test_reduced_corpus_keeps_judged_documents_first(tiny_beir):
    from spladekit.reproduce.cells import load_eval_dataset
    from spladekit.reproduce.config import EvalDatasetSpec

    # judged: d1, d4 (q1), d2 (q2), d3 (q3); the first other document in corpus order is d5
    reduced = load_eval_dataset(EvalDatasetSpec(name="r", path=str(tiny_beir), max_docs=5), download=False)
    assert list(reduced.corpus) == ["d1", "d2", "d3", "d4", "d5"]
    with pytest.raises(ValueError, match="below the 4 judged"):
        load_eval_dataset(EvalDatasetSpec(name="r", path=str(tiny_beir), max_docs=3), download=False)


def test_moving_average_by_hand():
    from spladekit.plots import _moving_average

    assert _moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert _moving_average([2.0, 4.0], 1) == [2.0, 4.0]


# ------------------------------------------------------------------------------------ head treatments
SHIFT_TREATMENTS = [
    {"name": "shift", "rescale": {"activity": "rasyosef/splade-tiny"}},  # calibrated on the activity at initialisation
    {"name": "scale+shift", "rescale": {"mode": "joint", "reference": "rasyosef/splade-tiny"}},
    {"name": "cap12", "head": {"position_top_k": 12}},
]


def test_a_grid_naming_shift_scale_shift_and_a_cap_plans_and_validates(tmp_path):
    from spladekit.reproduce.grid import init_spec
    from spladekit.reproduce.plan import describe_plan

    data = base_dict()
    data["treatments"] += SHIFT_TREATMENTS
    data["backbones"][0]["treatments"] = ["none", "cap12"]
    config = load_reproduce_config(_write(tmp_path, data))
    ids = [c.id for c in plan_grid(config)]
    assert {"orig--cap12--s0", "big--shift--s1", "big--scale+shift--s0"} <= set(ids) and "orig--shift--s0" not in ids
    text = describe_plan(config, tmp_path / "out")
    assert "shift so that the active terms match rasyosef/splade-tiny" in text
    assert "rescale and shift so that the logit std and the active terms match rasyosef/splade-tiny" in text
    assert "each position's 12 largest logits pooled" in text
    cells = {c.id: c for c in plan_grid(config)}
    assert init_spec(config, cells["orig--cap12--s0"])["head"] == {"position_top_k": 12, "fold_vocabulary": None}
    # a treatment without the new fields keeps its earlier fingerprint (the fields are left out at their defaults)
    assert set(init_spec(config, cells["big--constant--s0"])["rescale"]) == {
        "mode",
        "factor",
        "reference",
        "target",
        "statistic",
        "scale_bias",
    }
    assert "head" not in init_spec(config, cells["big--constant--s0"])
    assert init_spec(config, cells["big--shift--s0"])["rescale"]["activity"] == "rasyosef/splade-tiny"
    for bad, words in (
        ({"name": "x", "rescale": {"shift": 1.0, "activity": 3.0}}, "not both"),
        ({"name": "x", "head": {"position_top_k": -1}}, "greater than or equal"),
        ({"name": "x", "rescale": {"mode": "joint", "target": 2.0}}, "reference"),
    ):
        broken = base_dict()
        broken["treatments"].append(bad)
        with pytest.raises(DataFormatError, match=words):
            load_reproduce_config(_write(tmp_path, broken))


def test_the_runner_sets_the_head_up_for_shift_and_cap_treatments(shared, tmp_path, monkeypatch):
    """The real runner's init stage on splade-tiny: a shift calibrated on the activity of the original
    head lands on its own activity (s ≈ 0, the same texts), and a cap is recorded in the initial
    model's spladekit.json so training and evaluation take it."""
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.reproduce.cells import SpladekitRunner

    monkeypatch.setenv("SPLADEKIT_SHARED", str(shared))
    data = base_dict(str(shared / "data" / "beir" / "scifact"))
    data["backbones"] = [{"name": "tiny", "path": str(shared / "models" / "splade-tiny")}]
    data["treatments"] = [
        {"name": "shift", "rescale": {"activity": str(shared / "models" / "splade-tiny")}},
        {"name": "cap12", "head": {"position_top_k": 12}},
    ]
    data["diagnosis"] = {"dataset": str(shared / "data" / "beir" / "scifact"), "num_texts": 8, "max_length": 32}
    config = ReproduceConfig.model_validate(data)
    cells = {c.treatment.name: c for c in plan_grid(config)}
    runner = SpladekitRunner(show_progress=False)
    shifted = runner.init_cell(cells["shift"], str(shared / "models" / "splade-tiny"), config, tmp_path / "shift")
    step = json.loads((Path(shifted["model"]) / "config.json").read_text())["spladekit_rescale"]["history"][0]
    assert step["shift_mode"] == "activity" and step["activity_reached"] == step["activity_target"]
    assert abs(step["shift"]) < 0.5  # the midpoint between two neighbouring pooled logits around the same count
    from spladekit.reproduce.report import cell_row

    row = cell_row(
        {
            "id": "tiny--shift--s0",
            "arm": "tiny/shift",
            "backbone": "tiny",
            "treatment": "shift",
            "seed": 0,
            "init": shifted,
        },
        config,
    )
    assert row["shift"] == step["shift"] and row["factor"] == 1.0  # the report's head shift is the one the model stores
    capped = runner.init_cell(cells["cap12"], str(shared / "models" / "splade-tiny"), config, tmp_path / "cap")
    assert SpladeEncoder.from_pretrained(capped["model"], device="cpu").model.position_top_k == 12
    # the diagnoses count the head that runs: the uncapped start model before, the capped one after (a cap
    # only removes entries, so a capped vector's active terms are a subset of the uncapped one's)
    before, after = (capped[k]["splade"]["active_terms"]["mean"] for k in ("diagnosis_before", "diagnosis_after"))
    assert after < before
