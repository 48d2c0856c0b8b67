"""The numbers of a grid's report beyond per-arm means: factor sweep, matched-FLOPS comparison,
paired significance tests, sittings. Everything is computed from the cells' own files in ``OUT``.

- **Sweep** (:func:`sweep_rows`): for each net head scale ``s`` of ``config.sweep`` (emulation factor
  × treatment factor), the mean ± sample std over seeds of the headline metric, FLOPS and active
  terms of the headline in-domain set.
- **Matched FLOPS** (:func:`matched_flops`): every arm's quality at one common FLOPS level ``L``.
  A cell contributes the points ``(FLOPS, metric)`` of the headline set and of its *pruned
  variants* (in-domain sets on the same data with ``query_top_k``/``doc_top_k``); the sweep adds one
  pseudo-arm, the constant-factor family, whose points per seed (the sweep's seeds) are those of
  all its net scales.
  Per seed, the quality at ``L`` is interpolated linearly in ``log10 FLOPS`` between the two points
  nearest to ``L`` on either side (:func:`quality_at_flops`); when ``L`` lies outside a seed's
  points, the point whose FLOPS is nearest to ``L`` (in log ratio) is used and the row says
  ``nearest`` with that point's FLOPS. Then mean ± std over seeds. ``L`` is ``report.matched_flops``
  (a number or an arm, whose mean headline FLOPS is used; default the grid's first arm).
- **Paired tests** (:func:`paired_tests`): between every two treatments of a backbone (sweep
  points left out) and between every arm and ``report.reference`` when given, on each unpruned
  evaluation set's headline metric: per-query values (``eval/<set>/per_query.json``) averaged over
  the seeds both arms have, then :func:`spladekit.evaluate.compare.compare_values` (paired t-test
  and paired randomisation test over queries). No correction for multiple comparisons is applied.
"""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

from spladekit.io import read_json
from spladekit.reproduce.config import EvalDatasetSpec, ReproduceConfig


def number(value) -> float | None:
    """``value`` as a float when it is a finite int/float (not a bool), else None (missing results)."""
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std of the values that are not None (std None below two values)."""
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def headline_set(config: ReproduceConfig) -> EvalDatasetSpec:
    """The first in-domain set (else the first out-of-domain one): the sweep's and matched-FLOPS' set."""
    return (config.evaluation.in_domain or config.evaluation.out_of_domain)[0]


def is_pruned(dataset: EvalDatasetSpec) -> bool:
    return dataset.query_top_k is not None or dataset.doc_top_k is not None


def variants(config: ReproduceConfig, dataset: EvalDatasetSpec) -> list[EvalDatasetSpec]:
    """``dataset`` and the in-domain sets that are the same data and metric, pruned differently."""
    key = ("path", "split", "qrels", "queries", "max_docs", "metric")
    same = [
        d
        for d in config.evaluation.in_domain
        if d.name != dataset.name and all(getattr(d, k) == getattr(dataset, k) for k in key)
    ]
    return [dataset] + same


def _point(result: dict, dataset: EvalDatasetSpec) -> tuple[float, float] | None:
    metrics = (result.get("eval") or {}).get(dataset.name) or {}
    flops, value = number(metrics.get("flops")), number(metrics.get(dataset.metric))
    return (flops, value) if flops is not None and flops > 0 and value is not None else None


# ------------------------------------------------------------------------------ sweep
def sweep_rows(config: ReproduceConfig, results: list[dict]) -> list[dict]:
    """One row per net scale of the sweep, in ``net_scales`` order (empty without a sweep)."""
    if config.sweep is None:
        return []
    dataset = headline_set(config)
    rows = []
    for scale, treatment in config.sweep_points():
        arm = f"{config.sweep.backbone}/{treatment.name}"
        cells = [r for r in results if r["arm"] == arm and r.get("status") == "done"]
        row = {
            "net_scale": scale,
            "treatment": treatment.name,
            "arm": arm,
            "factor": treatment.rescale.factor if treatment.rescale else 1.0,
            "seeds": len(cells),
            "diverged": sum(r.get("status") == "diverged" for r in results if r["arm"] == arm),
        }
        for key, field in (
            ("metric", dataset.metric),
            ("flops", "flops"),
            ("q_terms", "avg_query_terms"),
            ("d_terms", "avg_doc_terms"),
        ):
            row[key], row[f"{key}:std"] = mean_std(
                [number(((r.get("eval") or {}).get(dataset.name) or {}).get(field)) for r in cells]
            )
        rows.append(row)
    return rows


def sweep_markers(config: ReproduceConfig, results: list[dict]) -> dict[str, tuple[float, float]]:
    """``{arm: (net scale, mean headline metric)}`` of the swept backbone's other treatments (calibrated,
    match-norm...), placed at emulation factor × their mean applied factor, for the sweep plot."""
    if config.sweep is None:
        return {}
    backbone = next(b for b in config.backbones if b.name == config.sweep.backbone)
    swept = {t.name for _, t in config.sweep_points()}
    dataset = headline_set(config)
    markers = {}
    for treatment in config.treatments_of(backbone):
        if treatment.name in swept:
            continue
        cells = [r for r in results if r["arm"] == f"{backbone.name}/{treatment.name}" and r.get("status") == "done"]
        factor, _ = mean_std([number((r.get("init") or {}).get("factor")) for r in cells])
        value, _ = mean_std(
            [number(((r.get("eval") or {}).get(dataset.name) or {}).get(dataset.metric)) for r in cells]
        )
        if factor is not None and value is not None:
            markers[f"{treatment.name} (F = {factor:.3g})"] = (backbone.nominal_scale * factor, value)
    return markers


# ------------------------------------------------------------------------------ matched FLOPS
def quality_at_flops(points: list[tuple[float, float]], level: float) -> tuple[float, str, float]:
    """The quality at FLOPS ``level`` from ``(flops, quality)`` points (FLOPS > 0).

    Returns:
        ``(quality, method, flops used)``: method ``"exact"`` (a point at ``level``), ``"interpolated"``
        (linear in ``log10 FLOPS`` between the nearest points below and above; flops used = ``level``)
        or ``"nearest"`` (``level`` outside the points: the point nearest in ``|log(flops/level)|``).

    Raises:
        ValueError: no points, a FLOPS ≤ 0, or ``level`` ≤ 0.
    """
    if not points:
        raise ValueError("no (FLOPS, quality) points")
    if not level > 0 or any(not f > 0 for f, _ in points):
        raise ValueError("FLOPS must be > 0 for a log-FLOPS interpolation")
    at = [q for f, q in points if f == level]
    if at:
        return statistics.fmean(at), "exact", level
    below = [(f, q) for f, q in points if f < level]
    above = [(f, q) for f, q in points if f > level]
    if below and above:
        (f0, q0), (f1, q1) = max(below), min(above)
        t = (math.log10(level) - math.log10(f0)) / (math.log10(f1) - math.log10(f0))
        return q0 + t * (q1 - q0), "interpolated", level
    f, q = min(points, key=lambda p: (abs(math.log(p[0] / level)), p[0]))
    return q, "nearest", f


def matched_level(config: ReproduceConfig, results: list[dict]) -> tuple[float | None, str]:
    """The common FLOPS level and where it comes from (see the module docstring)."""
    choice = config.report.matched_flops
    if isinstance(choice, (int, float)):
        return float(choice), "set in the config (report.matched_flops)"
    arm = choice or (results[0]["arm"] if results else None)
    dataset = headline_set(config)
    flops = [p[0] for r in results if r["arm"] == arm and (p := _point(r, dataset))]
    if not flops:
        return None, f"arm {arm} has no finished cell"
    return statistics.fmean(flops), f"the mean {dataset.name} FLOPS of arm {arm} ({len(flops)} seed(s))"


def matched_flops(config: ReproduceConfig, results: list[dict]) -> dict:
    """``{"level", "source", "rows": [{arm, value, value:std, seeds, methods, flops_used}]}``."""
    level, source = matched_level(config, results)
    out = {"level": level, "source": source, "rows": []}
    if level is None:
        return out
    sets = variants(config, headline_set(config))
    sweep_names = {t.name for _, t in config.sweep_points()}
    sweep_seeds = set(config.sweep.seeds or config.seeds) if config.sweep else set()
    curves: dict[str, dict[int, list[tuple[float, float]]]] = {}
    for r in results:
        points = [p for d in sets if (p := _point(r, d))]
        if not r["treatment"].startswith("sweep-"):  # generated sweep points only count in the family's curve
            curves.setdefault(r["arm"], {})[r["seed"]] = points
        if (
            config.sweep
            and r["backbone"] == config.sweep.backbone
            and r["treatment"] in sweep_names
            and r["seed"] in sweep_seeds
        ):  # the family's curve: only seeds that have every net scale
            curves.setdefault(f"{config.sweep.backbone}/factor sweep", {}).setdefault(r["seed"], []).extend(points)
    family = f"{config.sweep.backbone}/factor sweep" if config.sweep else None
    for arm, by_seed in sorted(curves.items(), key=lambda item: item[0] == family):  # the family last
        found = [quality_at_flops(points, level) for _, points in sorted(by_seed.items()) if points]
        value, spread = mean_std([f[0] for f in found])
        out["rows"].append(
            {
                "arm": arm,
                "value": value,
                "value:std": spread,
                "seeds": len(found),
                "methods": sorted({f[1] for f in found}),
                "flops_used": [f[2] for f in found],
            }
        )
    return out


# ------------------------------------------------------------------------------ paired tests
def per_query(out: Path, cell_id: str, dataset: EvalDatasetSpec) -> dict[str, float] | None:
    """``{qid: value}`` of the dataset's headline metric for one cell, or None when not written."""
    path = Path(out) / "cells" / cell_id / "eval" / dataset.name / "per_query.json"
    if not path.exists():
        return None
    return {q: float(v) for q, v in (read_json(path).get(dataset.metric) or {}).items()}


def _arm_values(
    out: Path, cells: dict[int, str], seeds: list[int], dataset: EvalDatasetSpec
) -> dict[str, float] | None:
    """Per-query values averaged over ``seeds`` (None when a seed's file is missing)."""
    runs = [per_query(out, cells[s], dataset) for s in seeds]
    if not runs or any(r is None for r in runs):
        return None
    qids = set.intersection(*(set(r) for r in runs))
    return {q: statistics.fmean(r[q] for r in runs) for q in qids}


def comparison_pairs(config: ReproduceConfig) -> list[tuple[str, str]]:
    """``[(arm A, arm B)]``: every two treatments of each backbone (config order, sweep points left
    out), then every other arm against ``report.reference``."""
    pairs = []
    for backbone in config.backbones:
        arms = [f"{backbone.name}/{t.name}" for t in config.treatments_of(backbone) if not t.name.startswith("sweep-")]
        pairs += list(itertools.combinations(arms, 2))
    reference = config.report.reference
    if reference:
        for backbone in config.backbones:
            for t in config.treatments_of(backbone):
                arm = f"{backbone.name}/{t.name}"
                if arm != reference and not t.name.startswith("sweep-") and (reference, arm) not in pairs:
                    pairs.append((reference, arm))
    return pairs


def paired_tests(config: ReproduceConfig, out: str | Path, results: list[dict]) -> list[dict]:
    """One row per (pair, unpruned evaluation set) with both arms finished on a common seed:
    ``{a, b, dataset, metric, seeds, n, mean_a, mean_b, delta, p_ttest, p_randomisation, wins, losses}``
    (``delta = B − A``); pairs without per-query files are left out."""
    from spladekit.evaluate.compare import compare_values

    cells: dict[str, dict[int, str]] = {}
    for r in results:
        if r.get("status") == "done":
            cells.setdefault(r["arm"], {})[r["seed"]] = r["id"]
    rows = []
    for a, b in comparison_pairs(config):
        seeds = sorted(set(cells.get(a, {})) & set(cells.get(b, {})))
        if not seeds:
            continue
        for _, dataset in config.evaluation.datasets():
            if is_pruned(dataset):
                continue
            va, vb = _arm_values(out, cells[a], seeds, dataset), _arm_values(out, cells[b], seeds, dataset)
            if not va or not vb:
                continue
            qids = sorted(set(va) & set(vb))
            c = compare_values(
                dataset.metric,
                [va[q] for q in qids],
                [vb[q] for q in qids],
                permutations=config.report.permutations,
                seed=0,
            )
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "dataset": dataset.name,
                    "metric": dataset.metric,
                    "seeds": len(seeds),
                    "n": c.n,
                    "mean_a": c.mean_a,
                    "mean_b": c.mean_b,
                    "delta": c.delta,
                    "p_ttest": c.p_ttest,
                    "p_randomisation": c.p_randomisation,
                    "wins": c.wins,
                    "losses": c.losses,
                }
            )
    return rows
