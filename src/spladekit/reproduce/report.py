"""Tables (Markdown + CSV) and plots of a grid's results.

Files written into ``OUT``:
- ``results_cells.csv``: one row per cell (every seed), all numbers;
- ``results_arms.csv``: one row per arm (backbone × treatment), mean and sample standard deviation
  over seeds (``std`` is empty with one seed);
- ``results.md``: both tables for people, headline metric of each set, efficiency (active terms,
  FLOPS) next to quality so that arms can be compared at matched sparsity;
- ``plots/metric_<set>.png`` (metric per arm), ``plots/quality_vs_flops.png``,
  ``plots/training_curves.png`` (loss, gradient norm and active terms per arm), ``plots/sweep.png``
  (headline metric, FLOPS and active terms against the net head scale);
- ``sweep.csv``, ``matched_flops.csv``, ``paired_tests.csv``: the factor sweep, quality at matched
  FLOPS and the paired significance tests (:mod:`spladekit.reproduce.analysis`, methods there);
- the sittings (``sittings.jsonl``: command and wall time of every invocation).

FLOPS here is the expected number of multiply-adds of a query-document product,
``Σ_j p_q(j)·p_d(j)`` (Paria et al., ICLR 2020, §3), measured on the evaluation set.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from spladekit.errors import DataFormatError
from spladekit.io import atomic_write, read_json
from spladekit.reproduce.analysis import mean_std, number
from spladekit.reproduce.config import ReproduceConfig
from spladekit.reproduce.grid import RESULT, plan_grid


@dataclass
class Column:
    """A table column: key in a row, header, number format."""

    key: str
    header: str
    fmt: str = "{:.3f}"


def load_cell_results(config: ReproduceConfig, out: str | Path) -> list[dict]:
    """The ``result.json`` of every finished cell of the plan (plan order); unfinished cells are left out."""
    rows = []
    for cell in plan_grid(config):
        path = Path(out) / "cells" / cell.id / RESULT
        if path.exists():
            rows.append(read_json(path))
    return rows


def cell_row(result: dict, config: ReproduceConfig) -> dict:
    """Flatten one cell's result into a table row (numbers or None)."""
    init = result.get("init") or {}
    before = init.get("diagnosis_before") or {}
    after = init.get("diagnosis_after") or before
    summary = ((result.get("train") or {}).get("summary")) or {}
    first, last = summary.get("first") or {}, summary.get("last") or {}
    row = {
        "cell": result["id"],
        "arm": result["arm"],
        "backbone": result["backbone"],
        "treatment": result["treatment"],
        "seed": result["seed"],
        "status": result.get("status", ""),
        "factor": number(init.get("factor")),
        "shift": number(init.get("shift")),
        "init_row_norm": number(((after.get("head") or {}).get("row_norm") or {}).get("mean")),
        "init_logit_p99": number((after.get("logits") or {}).get("p99")),
        "init_active_terms": number((((after.get("splade") or {}).get("active_terms")) or {}).get("mean")),
        "first_loss": number(first.get("loss")),
        "first_grad_norm": number(first.get("grad_norm")),
        "max_grad_norm": number(summary.get("max_grad_norm")),
        "last_loss": number(last.get("loss")),
        "last_active_q": number(last.get("active_q")),
        "last_active_d": number(last.get("active_d")),
        "train_seconds": number(summary.get("train_seconds")),
    }
    ood = []
    for role, dataset in config.evaluation.datasets():
        metrics = (result.get("eval") or {}).get(dataset.name) or {}
        value = number(metrics.get(dataset.metric))
        row[f"{dataset.name}:{dataset.metric}"] = value
        row[f"{dataset.name}:q_terms"] = number(metrics.get("avg_query_terms"))
        row[f"{dataset.name}:d_terms"] = number(metrics.get("avg_doc_terms"))
        row[f"{dataset.name}:flops"] = number(metrics.get("flops"))
        if role == "out_of_domain":
            ood.append(value)
    if config.evaluation.out_of_domain:
        row["ood_mean"] = sum(ood) / len(ood) if ood and all(v is not None for v in ood) else None
    return row


def arm_rows(rows: list[dict]) -> list[dict]:
    """Mean and sample std (n-1; None with one seed) over seeds of every numeric column, per arm."""
    arms: dict[str, list[dict]] = {}
    for row in rows:
        arms.setdefault(row["arm"], []).append(row)
    out = []
    for arm, members in arms.items():
        agg = {
            "arm": arm,
            "backbone": members[0]["backbone"],
            "treatment": members[0]["treatment"],
            "seeds": len(members),
            "diverged": sum(m["status"] == "diverged" for m in members),
        }
        keys = [k for k in members[0] if k not in ("cell", "arm", "backbone", "treatment", "seed", "status")]
        for key in keys:
            agg[key], agg[f"{key}:std"] = mean_std([m.get(key) for m in members])
        out.append(agg)
    return out


def _fmt(value, fmt: str = "{:.3f}") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return fmt.format(value)
    return str(value)


def markdown_table(rows: list[dict], columns: list[Column], std: bool = False) -> str:
    """A Markdown table; with ``std``, ``mean ± std`` where a ``<key>:std`` value exists."""
    lines = [
        "| " + " | ".join(c.header for c in columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(columns))) + "|",
    ]
    for row in rows:
        cells = []
        for c in columns:
            text = _fmt(row.get(c.key), c.fmt)
            spread = row.get(f"{c.key}:std") if std else None
            if spread is not None:
                text += " ± " + c.fmt.format(spread)
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict]) -> None:
    """All keys of all rows as columns (first-seen order); None as an empty field; atomic."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in keys})
    with atomic_write(path) as handle:
        handle.write(buffer.getvalue())


def _columns(config: ReproduceConfig, per_cell: bool) -> tuple[list[Column], list[Column]]:
    head = [Column("cell" if per_cell else "arm", "cell" if per_cell else "arm")]
    if not per_cell:
        head.append(Column("seeds", "seeds", "{}"))
    quality = list(head)
    for _, dataset in config.evaluation.datasets():
        quality.append(Column(f"{dataset.name}:{dataset.metric}", f"{dataset.name} {dataset.metric}"))
    if config.evaluation.out_of_domain:
        quality.append(Column("ood_mean", "OOD mean"))
    first = (config.evaluation.in_domain or config.evaluation.out_of_domain)[0].name
    quality += [
        Column(f"{first}:q_terms", f"{first} q terms", "{:.1f}"),
        Column(f"{first}:d_terms", f"{first} d terms", "{:.1f}"),
    ]
    quality += [Column(f"{d.name}:flops", f"{d.name} FLOPS", "{:.3g}") for _, d in config.evaluation.datasets()]
    training = list(head) + [
        Column("factor", "head factor", "{:.4g}"),
        Column("shift", "head shift", "{:.4g}"),
        Column("init_row_norm", "init row norm", "{:.3g}"),
        Column("init_logit_p99", "init logit p99", "{:.3g}"),
        Column("init_active_terms", "init active terms", "{:.0f}"),
        Column("first_loss", "first loss", "{:.4g}"),
        Column("first_grad_norm", "first grad norm", "{:.4g}"),
        Column("max_grad_norm", "max grad norm", "{:.4g}"),
        Column("last_loss", "last loss", "{:.4g}"),
        Column("last_active_q", "last q terms", "{:.1f}"),
        Column("last_active_d", "last d terms", "{:.1f}"),
        Column("train_seconds", "train s", "{:.0f}"),
    ]
    if per_cell:
        training.insert(1, Column("status", "status", "{}"))
    return quality, training


def training_records(config: ReproduceConfig, out: Path, results: list[dict]) -> dict[str, list[dict]]:
    """``{arm: metrics.jsonl records}`` of the first seed of each arm that has a log."""
    from spladekit.reproduce.cells import read_metrics_log

    curves: dict[str, list[dict]] = {}
    for result in results:
        if result["arm"] in curves:
            continue
        path = out / "cells" / result["id"] / "train" / "metrics.jsonl"
        if not path.exists():  # a runner that keeps its log elsewhere
            path = Path((result.get("train") or {}).get("metrics_path") or path)
        records = read_metrics_log(path)
        if records:
            curves[result["arm"]] = records
    return curves


def write_report(
    config: ReproduceConfig, out: str | Path, command: str | None = None, publish: str | Path | None = None
) -> dict[str, Path]:
    """Write the tables and plots of every finished cell in ``out``; return ``{name: path}``.

    Cells not finished yet are listed as missing in ``results.md``. With ``publish`` (e.g.
    ``docs/results.md``) the same page is also written there, its plots beside it in ``img/``
    (:func:`publish_report`).
    """
    out = Path(out)
    results = load_cell_results(config, out)
    rows = [cell_row(r, config) for r in results]
    arms = arm_rows(rows)
    written: dict[str, Path] = {}
    write_csv(out / "results_cells.csv", rows)
    write_csv(out / "results_arms.csv", arms)
    written.update(cells_csv=out / "results_cells.csv", arms_csv=out / "results_arms.csv")

    finished = {r["id"] for r in results}
    missing = [c.id for c in plan_grid(config) if c.id not in finished]
    text = _report_header(config, command, len(results), missing) + _report_tables(config, rows, arms)
    if rows:
        written.update(_grid_plots(config, out, results, rows, arms))
    text += analysis_sections(config, out, results, written)
    text += sittings_section(out)
    figures = plot_files(written)
    if figures:
        text += ["## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in figures] + [""]
    with atomic_write(out / "results.md") as handle:
        handle.write("\n".join(text))
    written["markdown"] = out / "results.md"
    if publish is not None:
        written["published"] = publish_report(config, written, Path(publish))
    return written


def _report_header(config: ReproduceConfig, command: str | None, n_finished: int, missing: list[str]) -> list[str]:
    """The lines of ``results.md`` before its tables: title, description, command, the cells finished
    and missing, the evaluation sets."""
    text = [f"# Reproduction grid `{config.name}`", ""]
    if config.description:
        text += [config.description.strip(), ""]
    if command:
        text += ["Command:", "", "```", command, "```", ""]
    text += [
        f"{n_finished} of {n_finished + len(missing)} cells finished"
        + (f"; missing: {', '.join(missing)}" if missing else "")
        + ".",
        "",
    ]
    sets = ", ".join(
        f"{d.name} ({role.replace('_', '-')}, {d.metric}"
        + (f", corpus reduced to {d.max_docs} documents" if d.max_docs else "")
        + (
            f", vectors pruned to the top {d.query_top_k}/{d.doc_top_k} terms per query/document"
            if d.query_top_k or d.doc_top_k
            else ""
        )
        + ")"
        for role, d in config.evaluation.datasets()
    )
    text += [
        f"Evaluation sets: {sets}. Mean ± sample std over seeds. FLOPS = Σ_j p_q(j)·p_d(j) on each set "
        "(Paria et al. 2020); compare quality at matched FLOPS / active terms too.",
        "",
    ]
    return text


def _report_tables(config: ReproduceConfig, rows: list[dict], arms: list[dict]) -> list[str]:
    """The per-arm and per-cell tables of ``results.md``."""
    quality_arm, training_arm = _columns(config, per_cell=False)
    quality_cell, training_cell = _columns(config, per_cell=True)
    return [
        "## Quality and efficiency per arm",
        "",
        markdown_table(arms, quality_arm, std=True),
        "",
        "## Initialisation and training per arm",
        "",
        markdown_table(arms, training_arm, std=True),
        "",
        "## Every cell",
        "",
        markdown_table(rows, quality_cell),
        "",
        markdown_table(rows, training_cell),
        "",
    ]


def _grid_plots(
    config: ReproduceConfig, out: Path, results: list[dict], rows: list[dict], arms: list[dict]
) -> dict[str, Path]:
    """The grid's plots in ``out/plots``: each set's metric per arm, quality against FLOPS, the
    training curves; ``{name: path}`` of those drawn (a plot without data is not drawn)."""
    import spladekit.plots as plots

    written: dict[str, Path] = {}
    plot_dir = out / "plots"
    for _, dataset in config.evaluation.datasets():
        key = f"{dataset.name}:{dataset.metric}"
        values = {a["arm"]: (a.get(key), a.get(f"{key}:std")) for a in arms}
        if any(v[0] is not None for v in values.values()):
            written[f"metric_{dataset.name}"] = plots.metric_per_arm(
                values, plot_dir / f"metric_{dataset.name}.png", ylabel=f"{dataset.name} {dataset.metric}"
            )
    first = (config.evaluation.in_domain or config.evaluation.out_of_domain)[0]
    # every in-domain set with the first set's metric (e.g. the same set at several top-k prunings)
    sets = [d for d in (config.evaluation.in_domain or [first]) if d.metric == first.metric]
    points = {}
    for dataset in sets:
        for row in rows:
            x, y = row.get(f"{dataset.name}:flops"), row.get(f"{dataset.name}:{dataset.metric}")
            if x is not None and y is not None:
                label = row["arm"] if len(sets) == 1 else f"{row['arm']} [{dataset.name}]"
                points.setdefault(label, []).append((x, y))
    if points:
        written["quality_vs_flops"] = plots.quality_vs_flops(
            points,
            plot_dir / "quality_vs_flops.png",
            xlabel="FLOPS on " + ", ".join(d.name for d in sets),
            ylabel=first.metric,
        )
    curves = training_records(config, out, results)
    if curves:
        written["training_curves"] = plots.training_curves_per_arm(curves, plot_dir / "training_curves.png")
    return written


def plot_files(written: dict[str, Path]) -> list[Path]:
    """The PNG plots among ``write_report``'s files, in the order written."""
    return [p for p in written.values() if p.suffix == ".png"]


def analysis_sections(config: ReproduceConfig, out: Path, results: list[dict], written: dict[str, Path]) -> list[str]:
    """Markdown of the factor sweep (with its plot), the matched-FLOPS comparison and the paired
    tests (:mod:`spladekit.reproduce.analysis`); also writes ``sweep.csv``, ``matched_flops.csv``
    and ``paired_tests.csv`` into ``out``."""
    import spladekit.reproduce.analysis as analysis

    sweep = analysis.sweep_rows(config, results)
    return (
        _sweep_section(config, out, results, sweep, written)
        + _matched_flops_section(config, out, results, bool(sweep), written)
        + _paired_tests_section(config, out, results, written)
    )


def _sweep_section(
    config: ReproduceConfig, out: Path, results: list[dict], sweep: list[dict], written: dict[str, Path]
) -> list[str]:
    """The factor sweep's table (``sweep.csv``) and plot; no lines without a sweep."""
    import spladekit.plots as plots
    import spladekit.reproduce.analysis as analysis

    if not sweep:
        return []
    dataset = analysis.headline_set(config)
    backbone = next(b for b in config.backbones if b.name == config.sweep.backbone)
    write_csv(out / "sweep.csv", sweep)
    written["sweep_csv"] = out / "sweep.csv"
    text = [
        f"## Factor sweep on `{backbone.name}` ({backbone.inflation_text() or 'head unchanged'})",
        "",
        f"Net head scale at initialisation = emulation factor {backbone.nominal_scale:g} × treatment factor F "
        f"(×1 = the original head's scale on average). {dataset.name}, mean ± std over seeds.",
        "",
        markdown_table(
            sweep,
            [
                Column("net_scale", "net scale", "{:g}"),
                Column("treatment", "cells of", "{}"),
                Column("factor", "F", "{:.4g}"),
                Column("seeds", "seeds", "{}"),
                Column("metric", f"{dataset.metric}"),
                Column("flops", "FLOPS", "{:.3g}"),
                Column("q_terms", "q terms", "{:.1f}"),
                Column("d_terms", "d terms", "{:.1f}"),
                Column("diverged", "diverged", "{}"),
            ],
            std=True,
        ),
        "",
    ]
    series = {
        f"{dataset.name} {dataset.metric}": [(r["net_scale"], r["metric"], r["metric:std"]) for r in sweep],
        f"{dataset.name} FLOPS": [(r["net_scale"], r["flops"], r["flops:std"]) for r in sweep],
        f"{dataset.name} active doc terms": [(r["net_scale"], r["d_terms"], r["d_terms:std"]) for r in sweep],
    }
    if any(m is not None for _, m, _ in series[f"{dataset.name} {dataset.metric}"]):
        written["sweep"] = plots.factor_sweep(
            series,
            out / "plots" / "sweep.png",
            title=f"factor sweep on {backbone.name}: {backbone.inflation_text()}"
            " (crosses: per-model treatments at their net scale)",
            markers=analysis.sweep_markers(config, results),
        )
    return text


def _matched_flops_section(
    config: ReproduceConfig, out: Path, results: list[dict], swept: bool, written: dict[str, Path]
) -> list[str]:
    """Quality at a common FLOPS level (``matched_flops.csv``); ``swept``: the grid has a factor sweep."""
    import spladekit.reproduce.analysis as analysis

    dataset = analysis.headline_set(config)
    matched = analysis.matched_flops(config, results)
    sets = analysis.variants(config, dataset)
    text = ["## Quality at matched FLOPS", ""]
    if matched["level"] is None:
        return text + [f"No common FLOPS level: {matched['source']}.", ""]
    rows = [
        {
            **r,
            "methods": ", ".join(r["methods"]),
            "used": ", ".join(f"{f:.3g}" for f in r["flops_used"]) if "nearest" in r["methods"] else "",
        }
        for r in matched["rows"]
    ]
    write_csv(out / "matched_flops.csv", rows)
    written["matched_csv"] = out / "matched_flops.csv"
    return text + [
        f"Common level L = {matched['level']:.4g} FLOPS ({matched['source']}). Each cell's points are "
        f"(FLOPS, {dataset.metric}) on {', '.join(d.name for d in sets)}"
        + ("; the factor-sweep family's points per seed are those of all its net scales" if swept else "")
        + ". Per seed, the quality at L is interpolated linearly in log FLOPS between the nearest points "
        "below and above L; when L is outside a seed's points, the nearest point is used (method "
        "`nearest`, its FLOPS listed). Mean ± std over seeds.",
        "",
        markdown_table(
            rows,
            [
                Column("arm", "arm"),
                Column("seeds", "seeds", "{}"),
                Column("value", f"{dataset.metric} at L"),
                Column("methods", "method", "{}"),
                Column("used", "FLOPS of nearest point(s)", "{}"),
            ],
            std=True,
        ),
        "",
    ]


def _paired_tests_section(
    config: ReproduceConfig, out: Path, results: list[dict], written: dict[str, Path]
) -> list[str]:
    """The paired significance tests between arms (``paired_tests.csv``)."""
    import spladekit.reproduce.analysis as analysis

    tests = analysis.paired_tests(config, out, results)
    text = ["## Paired significance tests", ""]
    if not tests:
        return text + ["No pair of arms with per-query results on a common seed yet.", ""]
    write_csv(out / "paired_tests.csv", tests)
    written["tests_csv"] = out / "paired_tests.csv"
    return text + [
        "B against A on each set's headline metric over its judged queries: per-query values averaged "
        "over the seeds both arms have, Δ = mean(B − A), paired t-test and paired randomisation test "
        f"({config.report.permutations} sign flips, seed 0; `spladekit compare`'s tests). Two-sided, "
        f"uncorrected: with {len(tests)} tests, Bonferroni at 0.05 is p < {0.05 / len(tests):.2g}.",
        "",
        markdown_table(
            tests,
            [
                Column("a", "A"),
                Column("b", "B"),
                Column("dataset", "set", "{}"),
                Column("seeds", "seeds", "{}"),
                Column("n", "queries", "{}"),
                Column("mean_a", "A"),
                Column("mean_b", "B"),
                Column("delta", "Δ", "{:+.3f}"),
                Column("p_ttest", "p (t)", "{:.3g}"),
                Column("p_randomisation", "p (rand.)", "{:.3g}"),
            ],
        ),
        "",
    ]


def sittings_section(out: Path) -> list[str]:
    """Markdown of the invocations that ran cells (``OUT/sittings.jsonl``) and their total wall time."""
    from spladekit.reproduce.grid import read_sittings

    sittings = read_sittings(out)
    if not sittings:
        return []
    total = sum(s.get("wall_seconds", 0.0) for s in sittings)
    lines = [
        "## Sittings",
        "",
        f"Total wall time {_duration(total)} over {len(sittings)} invocation(s):",
        "",
        "| started (UTC) | wall | cells done | skipped | diverged | failed | command |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in sittings:
        lines.append(
            f"| {s.get('started', '')} | {_duration(s.get('wall_seconds', 0.0))} | {s.get('done', '–')} "
            f"| {s.get('skipped', '–')} | {s.get('diverged', '–')} | {s.get('failed', '–')} | `{s.get('command', '')}`"
            + (
                " (interrupted: cells finished in it are counted in the next sitting's skipped)"
                if s.get("interrupted")
                else ""
            )
            + (f" {s['note']}" if s.get("note") else "")
            + " |"
        )
    return lines + [""]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {secs:02d} s" if hours else f"{minutes} min {secs:02d} s"


READING_START, READING_END = "<!-- reading: written by hand, kept by --publish -->", "<!-- /reading -->"


def kept_reading(target: Path) -> str | None:
    """The hand-written block of a published page (from :data:`READING_START` to
    :data:`READING_END`, markers included), or None when the page or the block is absent.

    Raises:
        DataFormatError: the start marker is there without the end marker (the block would be lost).
    """
    if not target.exists():
        return None
    page = target.read_text(encoding="utf-8")
    if READING_START not in page:
        return None
    start = page.index(READING_START)
    end = page.find(READING_END, start)
    if end < 0:
        raise DataFormatError(
            target, f"has {READING_START!r} without {READING_END!r}; close the block so --publish can keep it"
        )
    return page[start : end + len(READING_END)]


def publish_report(config: ReproduceConfig, written: dict[str, Path], target: Path) -> Path:
    """Copy ``results.md`` to ``target`` (e.g. ``docs/results.md``) and its plots to
    ``target.parent/img/<grid name>-<plot>.png``, with the image links rewritten; atomic writes.

    What the numbers do and do not show is written by a person: a block between
    :data:`READING_START` and :data:`READING_END` in the existing ``target`` is kept, placed before
    the generated tables, so republishing (after more cells finish) never loses it.

    Raises:
        DataFormatError: ``target`` has an unclosed reading block (nothing is written).
    """
    img = target.parent / "img"
    reading = kept_reading(target)
    text = written["markdown"].read_text(encoding="utf-8")
    if reading is not None:
        anchor = "\n## Quality and efficiency per arm"
        at = text.find(anchor)
        text = text[:at] + "\n" + reading + "\n" + text[at:] if at >= 0 else text + "\n" + reading + "\n"
    for path in plot_files(written):
        name = f"{config.name}-{path.name}"
        with atomic_write(img / name, "wb", encoding=None) as handle:
            handle.write(path.read_bytes())
        text = text.replace(f"(plots/{path.name})", f"(img/{name})")
    with atomic_write(target) as handle:
        handle.write(text)
    return target
