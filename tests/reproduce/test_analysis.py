"""The non-circular local grid: emulated backbones in the config, the factor sweep, quality at matched
FLOPS, paired tests and sittings in the report; values checked by hand or against scipy."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ttest_rel

from spladekit.errors import DataFormatError
from spladekit.io import write_json
from spladekit.reproduce.analysis import comparison_pairs, matched_flops, quality_at_flops, sweep_markers, sweep_rows
from spladekit.reproduce.config import ReproduceConfig, load_reproduce_config, scale_label
from spladekit.reproduce.grid import backbone_spec, plan_grid, read_sittings, record_sitting, run_grid
from spladekit.reproduce.report import load_cell_results, write_report
from tests.reproduce.test_grid import ROOT, RecordingRunner, _write, silent

QIDS = [f"q{i}" for i in range(12)]


def grid_dict() -> dict:
    return {
        "name": "g",
        "seeds": [0, 1, 2],
        "backbones": [
            {"name": "orig", "path": "m", "treatments": ["none"]},
            {"name": "rows", "path": "m", "emulate": {"kind": "row_lognormal", "factor": 16, "sigma": 0.5}},
        ],
        "treatments": [
            {"name": "none"},
            {"name": "constant", "rescale": {"mode": "factor", "factor": 0.0625}},
            {"name": "matched", "rescale": {"mode": "match_norm", "reference": 1.0}},
        ],
        "sweep": {"backbone": "rows", "net_scales": [0.25, 1, 4, 16], "seeds": [0, 1]},
        "report": {"matched_flops": "orig/none", "reference": "orig/none", "permutations": 2000},
        "diagnosis": {"dataset": "d", "num_texts": 4},
        "train": {"steps": 2, "batch_size": 2},
        "evaluation": {
            "in_domain": [
                {"name": "ind", "path": "d"},
                {"name": "ind-top2", "path": "d", "query_top_k": 2, "doc_top_k": 2},
            ],
            "out_of_domain": [{"name": "ood", "path": "d"}],
        },
    }


# ------------------------------------------------------------------------------------ config and plan
def test_sweep_expands_into_factor_treatments_and_reuses_existing_cells():
    config = ReproduceConfig.model_validate(grid_dict())
    points = config.sweep_points()
    assert [(s, t.name) for s, t in points] == [(0.25, "sweep-x1_4"), (1, "constant"), (4, "sweep-x4"), (16, "none")]
    assert points[0][1].rescale.factor == 0.25 / 16 and points[2][1].rescale.factor == 4 / 16
    ids = [c.id for c in plan_grid(config)]
    assert ids[:3] == ["orig--none--s0", "orig--none--s1", "orig--none--s2"]
    # the swept backbone: its own treatments × 3 seeds, then the two new sweep points × the sweep's 2 seeds
    assert ids[3:] == [f"rows--{t}--s{s}" for t in ("none", "constant", "matched") for s in (0, 1, 2)] + [
        f"rows--{t}--s{s}" for t in ("sweep-x1_4", "sweep-x4") for s in (0, 1)
    ]
    assert scale_label(1 / 64) == "1_64" and scale_label(4.0) == "4" and scale_label(0.3) == "0.3"


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d["sweep"].update(backbone="nope"), "sweep.backbone"),
        (lambda d: d["treatments"].append({"name": "sweep-x2"}), "reserved for the sweep"),
        (lambda d: d["report"].update(reference="orig/constant"), "report.reference"),
        (lambda d: d["backbones"][1].update(inflate=4), "inflate or emulate"),
        (lambda d: d["backbones"][1]["emulate"].update(kind="huge"), "emulate.kind"),
        (lambda d: d["sweep"].update(net_scales=[1, 0]), "must be > 0"),
    ],
)
def test_grid_config_errors(tmp_path, change, words):
    data = grid_dict()
    change(data)
    with pytest.raises(DataFormatError) as info:
        load_reproduce_config(_write(tmp_path, data))
    assert words in str(info.value) or words in (info.value.field or "")


def test_backbone_fingerprint_of_old_grids_is_unchanged():
    config = ReproduceConfig.model_validate(grid_dict())
    assert backbone_spec(config.backbones[0]) == {"path": "m", "inflate": None}  # as before emulations existed
    assert backbone_spec(config.backbones[1])["emulate"] == {
        "kind": "row_lognormal",
        "factor": 16.0,
        "sigma": 0.5,
        "seed": 0,
    }


def test_local_config_is_the_non_circular_grid():
    config = load_reproduce_config(ROOT / "configs" / "reproduce-local.yaml")
    kinds = {b.name: b.emulate.kind if b.emulate else None for b in config.backbones}
    assert set(kinds.values()) == {None, "uniform", "row_lognormal", "ln_gain"}
    assert len(config.seeds) >= 3 and all(d.max_docs is None for _, d in config.evaluation.datasets())
    assert [d.path for d in config.evaluation.out_of_domain] == ["cranfield", "cisi", "medline", "cacm"]
    assert {t.name for t in config.treatments} == {
        "none",
        "constant",
        "calibrated",
        "match-norm",
        "shift",
        "scale+shift",
        "cap12",
    }
    scales = [s for s, _ in config.sweep_points()]
    assert min(scales) == 1 / 64 and max(scales) == 16
    cells = plan_grid(config)
    arms = {c.arm for c in cells}
    for backbone in ("tiny-rows", "tiny-lngain"):
        assert {f"{backbone}/{t}" for t in ("none", "constant", "calibrated", "match-norm")} <= arms
    for backbone in ("tiny-uniform", "tiny-rows", "tiny-lngain"):  # the shift's question, on every emulation
        assert {f"{backbone}/{t}" for t in ("none", "constant", "shift", "scale+shift")} <= arms
    assert {a for a in arms if a.endswith("/cap12")} == {"tiny/cap12"}  # the cap on the original head only
    for arm in arms - {c.arm for c in cells if c.treatment.name.startswith("sweep-")}:
        assert len([c for c in cells if c.arm == arm]) >= 3, arm
    by_name = {t.name: t for t in config.treatments}
    calibrated, joint = by_name["calibrated"].rescale, by_name["scale+shift"].rescale
    # scale+shift's factor is calibrated's (the same std target), its shift the shift treatment's (the same activity)
    assert joint.mode == "joint" and joint.target == calibrated.target and calibrated.statistic == "std"
    assert joint.activity == by_name["shift"].rescale.activity == "rasyosef/splade-tiny"


def test_the_local_grid_as_first_run_keeps_its_fingerprints():
    """The 45 cells of the local grid before the shift, scale+shift and cap treatments were added (the
    config without them) have the very stage fingerprints they have in the grid with them, so a rerun
    into the first run's folder skips them."""
    import yaml

    from spladekit.reproduce.grid import eval_spec, fingerprint, init_spec, train_spec

    path = ROOT / "configs" / "reproduce-local.yaml"
    full = load_reproduce_config(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    added = {"shift", "scale+shift", "cap12"}
    data["treatments"] = [t for t in data["treatments"] if t["name"] not in added]
    first_lists = {"tiny": ["none"], "tiny-uniform": ["none", "constant"], "tiny-rows": None, "tiny-lngain": None}
    for backbone in data["backbones"]:
        backbone["treatments"] = first_lists[backbone["name"]]
    first = ReproduceConfig.model_validate(data)

    def prints(config):
        return {
            c.id: (
                fingerprint(init_spec(config, c)),
                fingerprint(train_spec(config, c)),
                [fingerprint(eval_spec(config, c, d)) for _, d in config.evaluation.datasets()],
            )
            for c in plan_grid(config)
        }

    before, after = prints(first), prints(full)
    assert len(before) == 45 and len(after) == 66
    assert {k: after[k] for k in before} == before
    assert {k.split("--")[1] for k in set(after) - set(before)} == added


# ------------------------------------------------------------------------------------ matched FLOPS by hand
def test_quality_at_flops_exact_interpolated_nearest():
    points = [(1.0, 0.2), (10.0, 0.5), (100.0, 0.6)]
    assert quality_at_flops(points, 10.0) == (0.5, "exact", 10.0)
    # log10 3.1623 = 0.5: halfway between 1 and 10 in log FLOPS
    value, method, used = quality_at_flops(points, math.sqrt(10))
    assert method == "interpolated" and used == pytest.approx(math.sqrt(10)) and value == pytest.approx(0.35)
    value, _, _ = quality_at_flops(points, 10**1.25)  # a quarter of the way from 10 to 100
    assert value == pytest.approx(0.525)
    assert quality_at_flops(points, 0.1) == (0.2, "nearest", 1.0)
    assert quality_at_flops(points, 1000.0) == (0.6, "nearest", 100.0)
    with pytest.raises(ValueError):
        quality_at_flops([], 1.0)
    with pytest.raises(ValueError):
        quality_at_flops([(0.0, 0.1)], 1.0)


class TableRunner(RecordingRunner):
    """Metrics and per-query values from fixed tables keyed by cell id (FLOPS halved by pruning)."""

    def __init__(self, flops: dict[str, float], metric: dict[str, float]):
        super().__init__()
        self.flops, self.metric = flops, metric

    def evaluate(self, model, dataset, config, folder):
        cell = model.split(":", 1)[1]
        pruned = dataset.query_top_k is not None
        values = {q: per_query_value(cell, dataset.name, q) for q in QIDS}
        write_json(folder / "per_query.json", {dataset.metric: values})
        return {
            "nDCG@10": self.metric[cell] - (0.1 if pruned else 0.0),
            "flops": self.flops[cell] / (2 if pruned else 1),
            "avg_query_terms": 5.0,
            "avg_doc_terms": 50.0,
        }


def per_query_value(cell: str, dataset: str, qid: str) -> float:
    return (sum(map(ord, cell + dataset + qid)) % 89) / 100


def run_table_grid(tmp_path: Path):
    config = ReproduceConfig.model_validate(grid_dict())
    cells = [c.id for c in plan_grid(config)]
    flops, metric = {}, {}
    for cell in plan_grid(config):
        arm, s = cell.arm, cell.seed
        base = {
            "orig/none": 5.0,
            "rows/none": 0.5,
            "rows/constant": 8.0,
            "rows/matched": 2.0,
            "rows/sweep-x1_4": 16.0,
            "rows/sweep-x4": 1.0,
        }[arm]
        flops[cell.id] = base * (1 + 0.01 * s)
        metric[cell.id] = 0.3 + 0.01 * math.log2(base) + 0.001 * s
    run_grid(config, tmp_path, TableRunner(flops, metric), log=silent)
    return config, cells, flops, metric


def test_matched_flops_and_sweep_from_the_cells(tmp_path):
    config, _, flops, metric = run_table_grid(tmp_path)
    results = load_cell_results(config, tmp_path)
    out = matched_flops(config, results)
    level = statistics.fmean(flops[f"orig--none--s{s}"] for s in range(3))
    assert out["level"] == pytest.approx(level) and "orig/none" in out["source"]
    rows = {r["arm"]: r for r in out["rows"]}
    assert list(rows)[-1] == "rows/factor sweep"
    assert "rows/sweep-x4" not in rows  # sweep points only count in the family's curve

    def by_hand(points):
        points = sorted(points)
        lo = max(p for p in points if p[0] < level)
        hi = min(p for p in points if p[0] > level)
        t = (math.log10(level) - math.log10(lo[0])) / (math.log10(hi[0]) - math.log10(lo[0]))
        return lo[1] + t * (hi[1] - lo[1])

    # rows/constant: points (8, m) unpruned and (4, m − 0.1) pruned bracket L ≈ 5.05 for every seed
    expected = [
        by_hand([(flops[c], metric[c]), (flops[c] / 2, metric[c] - 0.1)])
        for c in (f"rows--constant--s{s}" for s in range(3))
    ]
    assert rows["rows/constant"]["value"] == pytest.approx(statistics.fmean(expected))
    assert rows["rows/constant"]["value:std"] == pytest.approx(statistics.stdev(expected))
    assert rows["rows/constant"]["methods"] == ["interpolated"]
    # rows/none (FLOPS 0.5 and 0.25) never reaches L: its nearest point is the unpruned one
    assert rows["rows/none"]["methods"] == ["nearest"]
    assert rows["rows/none"]["value"] == pytest.approx(statistics.fmean(metric[f"rows--none--s{s}"] for s in range(3)))
    # the family: seeds 0 and 1 (the sweep's), points of all four net scales and their pruned variants
    family = rows["rows/factor sweep"]
    assert family["seeds"] == 2
    arms = ("rows--sweep-x1_4", "rows--constant", "rows--sweep-x4", "rows--none")
    expected = [
        by_hand(
            [
                p
                for a in arms
                for p in (
                    (flops[f"{a}--s{s}"], metric[f"{a}--s{s}"]),
                    (flops[f"{a}--s{s}"] / 2, metric[f"{a}--s{s}"] - 0.1),
                )
            ]
        )
        for s in (0, 1)
    ]
    assert family["value"] == pytest.approx(statistics.fmean(expected))

    # the match-norm arm (init factor 0.5 from the test double) drawn at net scale 16 × 0.5 = 8
    assert sweep_markers(config, results) == {
        "matched (F = 0.5)": (8.0, pytest.approx(statistics.fmean(metric[f"rows--matched--s{s}"] for s in range(3))))
    }
    sweep = sweep_rows(config, results)
    assert [r["net_scale"] for r in sweep] == [0.25, 1, 4, 16] and [r["seeds"] for r in sweep] == [2, 3, 2, 3]
    assert sweep[1]["flops"] == pytest.approx(statistics.fmean(flops[f"rows--constant--s{s}"] for s in range(3)))
    assert sweep[0]["metric:std"] == pytest.approx(statistics.stdev(metric[f"rows--sweep-x1_4--s{s}"] for s in (0, 1)))


def test_paired_tests_match_scipy_on_seed_averaged_queries(tmp_path):
    config, *_ = run_table_grid(tmp_path)
    record_sitting(
        tmp_path,
        {
            "command": "spladekit reproduce g.yaml",
            "started": "2026-12-01T09:00:00Z",
            "wall_seconds": 3725.0,
            "done": 27,
            "skipped": 0,
            "diverged": 0,
            "failed": 0,
        },
    )
    record_sitting(
        tmp_path,
        {
            "command": "spladekit reproduce g.yaml",
            "started": "2026-12-01T11:00:00Z",
            "wall_seconds": 60.0,
            "done": 1,
            "skipped": 27,
            "diverged": 0,
            "failed": 0,
        },
    )
    assert [s["wall_seconds"] for s in read_sittings(tmp_path)] == [3725.0, 60.0]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sittings.jsonl").write_text('{"wall_seconds": 1}\n{oops\n')
    with pytest.raises(DataFormatError, match="line 2"):
        read_sittings(broken)
    publish = tmp_path / "docs" / "results.md"
    written = write_report(config, tmp_path, command="spladekit reproduce g.yaml", publish=publish)
    with open(written["tests_csv"], newline="") as handle:
        tests = list(csv.DictReader(handle))
    assert ("rows/none", "rows/constant") in comparison_pairs(config) and (
        "orig/none",
        "rows/matched",
    ) in comparison_pairs(config)
    assert not [t for t in tests if "sweep" in t["a"] + t["b"] or t["dataset"] == "ind-top2"]
    row = next(t for t in tests if (t["a"], t["b"], t["dataset"]) == ("rows/none", "rows/matched", "ood"))
    a = np.array(
        [statistics.fmean(per_query_value(f"rows--none--s{s}", "ood", q) for s in range(3)) for q in sorted(QIDS)]
    )
    b = np.array(
        [statistics.fmean(per_query_value(f"rows--matched--s{s}", "ood", q) for s in range(3)) for q in sorted(QIDS)]
    )
    assert float(row["delta"]) == pytest.approx(float((b - a).mean()))
    assert float(row["p_ttest"]) == pytest.approx(float(ttest_rel(b, a).pvalue))
    assert 0 < float(row["p_randomisation"]) <= 1 and row["seeds"] == "3" and row["n"] == str(len(QIDS))

    text = written["markdown"].read_text()
    assert "Total wall time 1 h 03 min 05 s over 2 invocation(s)" in text
    assert "## Factor sweep on `rows`" in text and "## Quality at matched FLOPS" in text and "Bonferroni" in text
    assert written["sweep"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = publish.read_text()
    assert "](img/g-sweep.png)" in page and "](plots/" not in page and ".csv)" not in page
    assert not (publish.parent / "img" / "g-sweep.csv").exists()
    assert (publish.parent / "img" / "g-sweep.png").read_bytes() == written["sweep"].read_bytes()

    # the hand-written reading survives a republish, placed before the generated tables
    from spladekit.reproduce.report import READING_END, READING_START

    reading = f"{READING_START}\n## What it shows\n\nWritten by a person.\n{READING_END}"
    publish.write_text(
        page.replace("## Quality and efficiency per arm", reading + "\n\n## Quality and efficiency per arm")
    )
    write_report(config, tmp_path, command="spladekit reproduce g.yaml", publish=publish)
    again = publish.read_text()
    assert again.count(reading) == 1 and again.index(reading) < again.index("## Quality and efficiency per arm")
    assert again.replace("\n" + reading + "\n", "") == page
    publish.write_text(f"{READING_START}\nunclosed")
    with pytest.raises(DataFormatError, match="without"):
        write_report(config, tmp_path, publish=publish)
    assert publish.read_text() == f"{READING_START}\nunclosed"


def test_report_without_per_query_files_or_sweep(tmp_path):
    data = grid_dict()
    data.pop("sweep")
    data["report"] = {}
    config = ReproduceConfig.model_validate(data)
    run_grid(config, tmp_path, RecordingRunner(), log=silent)  # writes no per_query.json
    text = write_report(config, tmp_path)["markdown"].read_text()
    assert "No pair of arms with per-query results" in text and "Factor sweep" not in text
    assert "Common level L" in text  # default level: the first arm's FLOPS


def test_compare_values_matches_compare_runs_tests():
    from spladekit.evaluate.compare import compare_values

    rng = np.random.default_rng(0)
    a, b = rng.random(30), rng.random(30)
    c = compare_values("nDCG@10", a, b, permutations=500)
    assert c.delta == pytest.approx(float((b - a).mean())) and c.p_ttest == pytest.approx(float(ttest_rel(b, a).pvalue))
    assert c.wins + c.losses + c.ties == 30
    with pytest.raises(ValueError):
        compare_values("x", [1.0], [1.0, 2.0])


def test_real_runner_builds_emulated_backbones(tiny_bert_dir, tmp_path):
    import torch
    from transformers import AutoModelForMaskedLM

    from spladekit.model.calibrate import emulation_record, row_factors
    from spladekit.reproduce.cells import SpladekitRunner

    data = grid_dict()
    data["backbones"] = [
        {"name": "rows", "path": str(tiny_bert_dir), "emulate": {"kind": "row_lognormal", "seed": 3}},
        {"name": "gain", "path": str(tiny_bert_dir), "emulate": {"kind": "ln_gain", "factor": 8}},
    ]
    data.pop("sweep"), data.pop("report")
    config = ReproduceConfig.model_validate(data)
    original = AutoModelForMaskedLM.from_pretrained(tiny_bert_dir)
    runner = SpladekitRunner(show_progress=False)
    rows = runner.prepare_backbone(config.backbones[0], config, tmp_path / "rows")
    model = AutoModelForMaskedLM.from_pretrained(rows["model"])
    W0 = original.cls.predictions.decoder.weight.detach().double()
    f = torch.from_numpy(row_factors(W0.shape[0], 16.0, 0.5, 3))
    torch.testing.assert_close(
        model.cls.predictions.decoder.weight.detach().double(), W0 * f[:, None], rtol=2**-23, atol=0
    )
    assert rows["emulation"]["seed"] == 3 and emulation_record(model)["kind"] == "row_lognormal"
    gain = runner.prepare_backbone(config.backbones[1], config, tmp_path / "gain")
    model = AutoModelForMaskedLM.from_pretrained(gain["model"])
    torch.testing.assert_close(
        model.cls.predictions.transform.LayerNorm.weight,
        8 * original.cls.predictions.transform.LayerNorm.weight,
        rtol=0,
        atol=0,
    )  # ×8 is exact in binary floating point
