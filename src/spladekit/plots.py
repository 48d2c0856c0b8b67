"""Every PNG spladekit draws, in one place (matplotlib, Agg backend, no screen needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: str | Path) -> Path:
    from spladekit.io import atomic_write

    path = Path(path)
    with atomic_write(path, "wb", encoding=None) as handle:
        fig.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def overlaid_histograms(
    series: Mapping[str, Sequence[float]],
    path: str | Path,
    xlabel: str,
    title: str = "",
    bins: int = 80,
    log_y: bool = False,
    keep_open: bool = False,
):
    """Histograms of several value sets on shared bins, overlaid (first series = this model).

    Args:
        series: ``{label: values}``; empty series are skipped.
        xlabel: axis label with units, e.g. ``"decoder row norm ‖W_v‖₂"``.
        log_y: logarithmic count axis (for long-tailed logits).
        keep_open: return ``(figure, axes)`` for the caller to add to and save, instead of the saved path.

    Raises:
        ValueError: every series is empty.
    """
    import numpy as np

    data = {label: np.asarray(values, dtype=np.float64).ravel() for label, values in series.items()}
    data = {label: values[np.isfinite(values)] for label, values in data.items() if values.size}
    if not data:
        raise ValueError(f"nothing to plot for {path}")
    low = min(values.min() for values in data.values())
    high = max(values.max() for values in data.values())
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, values in data.items():
        ax.hist(values, bins=edges, alpha=0.55, label=f"{label} (n={values.size})", density=True, log=log_y)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return (fig, ax) if keep_open else _save(fig, path)


def head_row_norms(norms: Mapping[str, Sequence[float]], path: str | Path, title: str = "") -> Path:
    """Histogram of the decoder row norms ``‖W_v‖₂`` of each model (reference overlaid)."""
    return overlaid_histograms(norms, path, "decoder row norm ‖W_v‖₂", title or "MLM-head decoder row norms")


def head_logits(
    logits: Mapping[str, Sequence[float]],
    path: str | Path,
    title: str = "",
    marks: Mapping[str, float] | None = None,
    note: str = "",
) -> Path:
    """Histogram of sampled MLM logits ``z = W h + b`` of each model (reference overlaid), log density.

    ``marks`` (``{label: value}``, e.g. the p99 and max of all logits, not only of the sample) are drawn
    as vertical lines, the x axis reaching the largest; where a mark lies beyond the sample's range
    (the sample cut the tail), the plot says so. ``note`` is written under the title.
    """
    import numpy as np

    fig_path = overlaid_histograms(
        logits,
        path,
        "logit z = W h + b",
        title or "MLM logits on sample text",
        log_y=True,
        keep_open=bool(marks or note),
    )
    if not (marks or note):
        return fig_path
    fig, ax = fig_path
    drawn = max(float(np.nanmax(np.asarray(v, dtype=np.float64))) for v in logits.values() if len(v))
    lines = [note] if note else []
    for (label, value), style in zip((marks or {}).items(), ("--", ":", "-.")):
        ax.axvline(value, color="black", ls=style, lw=1, label=f"{label}: {value:.4g}")
        if value > drawn:
            lines.append(
                f"{label} ({value:.4g}) lies beyond the sample's largest ({drawn:.4g}): the sample cuts the tail"
            )
    low, high = ax.get_xlim()
    ax.set_xlim(low, max(high, *((marks or {}).values() or [high])) + 0.02 * (high - low))
    ax.legend(fontsize=8)
    if lines:  # under the title, above the axes: never over the bars or the legend
        ax.set_title(ax.get_title() + "\n" + "\n".join(lines), fontsize=8)
    return _save(fig, path)


def _delta_bars(
    ax, deltas: Mapping[str, float], measure: str, name_a: str, name_b: str, title: str = "", limit: float | None = None
) -> None:
    """Draw per-query differences ``B − A`` on ``ax`` as bars sorted from the largest gain to the largest
    loss (green better, red worse, grey equal), the counts under the axis and the mean in the title, on a
    y axis symmetric about 0 up to ``limit`` (default: the largest |Δ|), so gains and losses compare."""
    qids = sorted(deltas, key=lambda q: (-deltas[q], q))
    values = [deltas[q] for q in qids]
    colours = ["tab:green" if v > 0 else "tab:red" if v < 0 else "tab:gray" for v in values]
    ax.bar(range(len(qids)), values, width=1.0, color=colours)
    ax.axhline(0.0, color="black", lw=0.8)
    wins, losses = sum(v > 0 for v in values), sum(v < 0 for v in values)
    mean = sum(values) / len(values)
    ax.set_xlabel(f"query (sorted by Δ; {wins} better, {losses} worse, {len(values) - wins - losses} equal)")
    ax.set_ylabel(f"Δ {measure} ({name_b} − {name_a})")
    ax.set_title(title or f"per-query Δ{measure}: {name_b} vs {name_a} (mean {mean:+.4f})")
    ax.set_xlim(-0.5, len(qids) - 0.5)
    limit = limit or max(abs(v) for v in values) or 1.0
    ax.set_ylim(-1.08 * limit, 1.08 * limit)
    ax.grid(alpha=0.3, axis="y")


def per_query_delta(
    deltas: Mapping[str, float], measure: str, path: str | Path, name_a: str = "A", name_b: str = "B", title: str = ""
) -> Path:
    """Per-query differences ``B − A`` of one measure, sorted from largest gain to largest loss.

    Args:
        deltas: ``{qid: value_B − value_A}``.
        measure: axis label, e.g. ``"nDCG@10"``.

    Raises:
        ValueError: ``deltas`` is empty.
    """
    if not deltas:
        raise ValueError("no per-query differences to plot")
    fig, ax = plt.subplots(figsize=(9, 4))
    _delta_bars(ax, deltas, measure, name_a, name_b, title)
    return _save(fig, path)


def per_query_deltas(
    pairs: Sequence[tuple[str, str, Mapping[str, float]]], measure: str, path: str | Path, title: str = ""
) -> Path:
    """Several comparisons of per-query values, one panel of :func:`per_query_delta`'s bars each, stacked
    on one Δ axis (e.g. the demo's fine-tuned model against the model before, and fusion against BM25).

    Args:
        pairs: ``[(name_a, name_b, {qid: value_B − value_A})]``, one panel each, in order.
        measure: axis label, e.g. ``"nDCG@10"``.
        title: the figure's title.

    Raises:
        ValueError: no pair, or a pair without differences.
    """
    if not pairs or any(not deltas for _, _, deltas in pairs):
        raise ValueError("no per-query differences to plot")
    limit = max(abs(v) for _, _, deltas in pairs for v in deltas.values()) or 1.0  # one Δ scale for every panel
    fig, axes = plt.subplots(len(pairs), 1, figsize=(9, 3.2 * len(pairs)), sharey=True, squeeze=False)
    for ax, (name_a, name_b, deltas) in zip(axes[:, 0], pairs):
        _delta_bars(ax, deltas, measure, name_a, name_b, limit=limit)
        ax.set_ylabel(f"Δ {measure}")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def training_curves(records, path: str | Path, vocab_size: int | None = None) -> Path:
    """Training curves from the metrics log: loss parts, λ, active terms, FLOPS, scores, logits,
    head norm and gradient norm, against the optimiser step; with dev-set records a third row:
    dev retrieval quality (nDCG@10, MRR@10...), dev active terms per query/document and dev FLOPS.

    Args:
        records: metrics records (dicts with ``step``); validation records (``split`` =
            ``"validation"``) are drawn on the loss panel, dev records (``split`` = ``"dev"``) on
            the third row (the best one marked).
        vocab_size: V, drawn as a reference on the active-terms panel when given.
    """
    train = [r for r in records if "split" not in r]
    val = [r for r in records if r.get("split") == "validation"]
    dev = [r for r in records if r.get("split") == "dev"]
    panels = [
        ("loss", ("loss", "loss_rank", "loss_reg_q", "loss_reg_d", "loss_anti_zero"), "log", train),
        ("λ (regulariser weight)", ("lambda_q", "lambda_d"), "linear", train),
        ("active terms per vector", ("active_q", "active_d"), "log", train),
        ("batch FLOPS", ("batch_flops",), "log", train),
        ("scores", ("pos_score", "neg_score", "margin"), "linear", train),
        ("MLM logits", ("logit_mean", "logit_p99", "logit_max"), "linear", train),
        ("MLM-head norm", ("head_norm",), "linear", train),
        ("gradient norm (before clipping)", ("grad_norm",), "log", train),
    ]
    if dev:
        quality = tuple(k for k in dev[0] if "@" in k)
        panels += [
            ("dev retrieval", quality, "linear", dev),
            ("dev active terms", ("avg_query_terms", "avg_doc_terms"), "log", dev),
            ("dev FLOPS", ("flops",), "log", dev),
        ]
    rows = 3 if dev else 2
    fig, axes = plt.subplots(rows, 4, figsize=(18, 3.5 * rows))
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    for ax, (title, keys, scale, rows_of) in zip(axes.ravel(), panels):
        steps = [r["step"] for r in rows_of]
        style = "o-" if rows_of is dev else "-"
        for key in keys:
            values = [r.get(key) for r in rows_of]
            pts = [(s, v) for s, v in zip(steps, values) if isinstance(v, (int, float))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=key, lw=1, ms=3)
        if title == "dev retrieval":
            best = [r for r in dev if r.get("best")]
            if best and quality:
                ax.plot([best[-1]["step"]], [best[-1][quality[0]]], "*", ms=12, color="gold", mec="k", label="best")
        if title == "loss" and val:
            ax.plot([r["step"] for r in val], [r["val_loss_rank"] for r in val], "o-", label="val_loss_rank", ms=3)
        if title.startswith("active") and vocab_size:
            ax.set_title(f"{title} (V = {vocab_size})")
        else:
            ax.set_title(title)
        values = [r[k] for r in rows_of for k in keys if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
        if scale == "log" and values and min(values) > 0 and max(values) / min(values) > 100:
            ax.set_yscale("log")  # only when the curve spans decades (log ticks are slow and useless otherwise)
        else:
            ax.ticklabel_format(axis="y", useOffset=False)  # show the real values (e.g. a head norm of 119.9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.subplots_adjust(left=0.04, right=0.99, top=0.95, bottom=0.08, wspace=0.25, hspace=0.35)
    return _save(fig, path)


# ------------------------------------------------------------------------ reproduction grid
def metric_per_arm(
    values: Mapping[str, tuple[float | None, float | None]], path: str | Path, ylabel: str, title: str = ""
) -> Path:
    """Bar chart of one metric per arm, with the spread over seeds as error bars.

    Args:
        values: ``{arm: (mean, std or None)}``; arms with a None mean are drawn empty.
        ylabel: e.g. ``"scifact nDCG@10"``.
    """
    arms = list(values)
    means = [values[a][0] if values[a][0] is not None else 0.0 for a in arms]
    errs = [values[a][1] or 0.0 for a in arms]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(arms) + 1), 3.8))
    bars = ax.bar(range(len(arms)), means, yerr=errs, capsize=4, color="#4c72b0")
    for bar, mean, arm in zip(bars, means, arms):
        ax.annotate(
            f"{mean:.3f}" if values[arm][0] is not None else "n/a",
            (bar.get_x() + bar.get_width() / 2, mean),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title or ylabel + " per arm")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def quality_vs_flops(
    points: Mapping[str, list[tuple[float, float]]],
    path: str | Path,
    xlabel: str = "FLOPS",
    ylabel: str = "nDCG@10",
    title: str = "",
    errors: Mapping[str, list[float]] | None = None,
    baseline: str | None = None,
    flops_share: float | None = None,
) -> Path:
    """Scatter of quality against FLOPS (log x axis), one colour per arm, one point per seed.

    Args:
        points: ``{arm: [(flops, metric), ...]}``; FLOPS must be > 0 for the log axis (others are dropped).
        errors: ``{arm: [error of each point]}`` drawn as vertical error bars (e.g. one standard error).
        baseline: the arm drawn as a star, with its first point's error band (± its error) shaded.
        flops_share: with ``baseline``, a dashed vertical line at this share of the baseline's FLOPS
            (e.g. 0.7: the target region is left of it, inside the band).
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, pts in points.items():
        kept = [(x, y, e) for (x, y), e in zip(pts, (errors or {}).get(arm) or [None] * len(pts)) if x > 0]
        if not kept:
            continue
        marker, size = ("*", 14) if arm == baseline else ("o", 6)
        errs = [e for _, _, e in kept]
        ax.errorbar(
            [p[0] for p in kept],
            [p[1] for p in kept],
            yerr=None if None in errs else errs,
            fmt=marker,
            ms=size,
            label=arm,
            alpha=0.85,
            capsize=3,
        )
        if arm == baseline:
            x0, y0, e0 = kept[0]
            if e0:
                ax.axhspan(y0 - e0, y0 + e0, color="grey", alpha=0.15, label=f"{arm} ± 1 SE")
            if flops_share:
                ax.axvline(flops_share * x0, color="grey", ls="--", lw=1, label=f"{flops_share:g} × {arm} FLOPS")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel + " (log)")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "quality vs FLOPS")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(fig, path)


def _moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def training_curves_per_arm(
    curves: Mapping[str, list[dict]],
    path: str | Path,
    keys: tuple[str, ...] = ("loss", "grad_norm", "active_q", "active_d"),
    window: int | None = None,
) -> Path:
    """Training statistics against the step, one line per arm, one panel per statistic (log y).

    Args:
        curves: ``{arm: metrics.jsonl records}`` (each a dict with ``step`` and the keys).
        keys: statistics to draw; a key no arm logged is skipped.
        window: trailing moving average over this many logged steps (default: 1 up to 50 records,
            else about 1/25 of them); the window is written in the panel titles.
    """
    keys = tuple(k for k in keys if any(k in r for records in curves.values() for r in records))
    longest = max((len(r) for r in curves.values()), default=0)
    window = window or (1 if longest <= 50 else max(2, longest // 25))
    fig, axes = plt.subplots(1, max(1, len(keys)), figsize=(4.2 * max(1, len(keys)), 3.6), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for arm, records in curves.items():
            pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float)) and "step" in r]
            if pts:
                ax.plot([p[0] for p in pts], _moving_average([p[1] for p in pts], window), label=arm, lw=1.2)
        ax.set_xlabel("step")
        ax.set_title(key + (f" (moving average over {window} steps)" if window > 1 else ""), fontsize=9)
        if all(
            r.get(key, 1) > 0 for records in curves.values() for r in records if isinstance(r.get(key), (int, float))
        ):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


def factor_sweep(
    series: Mapping[str, Sequence[tuple[float, float | None, float | None]]],
    path: str | Path,
    xlabel: str = "net head scale at initialisation",
    title: str = "",
    markers: Mapping[str, tuple[float, float]] | None = None,
) -> Path:
    """Panels of quantities against a factor (log x axis): one panel per series, mean with the spread
    over seeds as error bars (e.g. ``{"scifact nDCG@10": [...], "scifact FLOPS": [...]}``).

    Args:
        series: ``{panel label: [(x, mean or None, std or None), ...]}``; points with a None mean are
            skipped; a panel whose values are all > 0 and span more than a factor 10 gets a log y axis.
        markers: ``{label: (x, y)}`` drawn on the first panel as labelled crosses (e.g. other treatments).
    """
    fig, axes = plt.subplots(1, max(1, len(series)), figsize=(4.6 * max(1, len(series)), 3.8), squeeze=False)
    for index, (ax, (label, points)) in enumerate(zip(axes[0], series.items())):
        pts = sorted((x, m, s or 0.0) for x, m, s in points if m is not None and x > 0)
        if pts:
            ax.errorbar(
                [p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3, lw=1.2
            )
            values = [p[1] for p in pts]
            if min(values) > 0 and max(values) > 10 * min(values):
                ax.set_yscale("log")
        if index == 0 and markers:
            for name, (x, y) in markers.items():
                if x > 0 and y is not None:
                    ax.plot([x], [y], "x", ms=8, mew=2, label=name)
            ax.legend(fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel + " (log)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(title or "factor sweep", fontsize=10)
    return _save(fig, path)
