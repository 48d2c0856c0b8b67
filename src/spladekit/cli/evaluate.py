"""compare (two runs, paired significance tests, per-query delta plots) and evaluation-convention options."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer

from spladekit.cli.app import app, fail


def build_conventions(
    preset: str | None = None,
    rel: list[str] | None = None,
    remove_query_id: bool | None = None,
    dedupe: bool = False,
    qrels: str | None = None,
):
    """Evaluation conventions from command-line options: a preset, then overrides.

    Args:
        preset: preset name; when None, the preset matching the ``qrels`` path (its file name and
            BEIR dataset folder, :meth:`EvalConventions.for_qrels`: ``beir`` when no name matches), and
            ``default`` without one (``beir`` and ``default`` hold the same rules; the name recorded differs).
        rel: ``MEASURE=LEVEL`` items (``MRR=2``, ``R=2``) or a bare ``LEVEL`` for every binary measure.
        remove_query_id: overrides the preset when not None.
        dedupe: drop duplicate run lines (keep the best score) instead of failing.

    Raises:
        typer.BadParameter: unknown preset or a malformed ``--rel``.
    """
    from spladekit.evaluate.metrics import EvalConventions

    try:
        if preset is None and qrels:
            conventions = EvalConventions.for_qrels(qrels)
        else:
            conventions = EvalConventions.preset(preset or "default")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--preset") from exc
    changes: dict = {}
    levels = dict(conventions.relevance_levels)
    for item in rel or []:
        name, sep, level = item.rpartition("=")
        if not level.strip().isdigit() or (sep and not name.strip()):
            raise typer.BadParameter(f"expected MEASURE=LEVEL or LEVEL, got {item!r}", param_hint="--rel")
        if sep:
            levels[name.strip()] = int(level)
        else:
            changes["relevance_level"] = int(level)
    if levels != conventions.relevance_levels:
        changes["relevance_levels"] = levels
    if remove_query_id is not None and remove_query_id != conventions.remove_query_id:
        changes["remove_query_id"] = remove_query_id
    if dedupe:
        changes["dedupe"] = True
    if changes:
        try:
            conventions = dataclasses.replace(conventions, name=f"{conventions.name}+custom", **changes)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--rel") from exc
    return conventions


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="baseline TREC run (A)"),
    run_b: Path = typer.Argument(..., help="TREC run compared with it (B)"),
    qrels: Path = typer.Option(..., help="qrels file (TREC or BEIR TSV)"),
    measure: list[str] | None = typer.Option(
        None, "--measure", "-m", help="repeatable; default nDCG@10 MRR@10 R@100 R@1000"
    ),
    preset: str | None = typer.Option(
        None, help="default | beir | msmarco | trec-dl | arguana | quora (default: from the qrels path)"
    ),
    rel: list[str] | None = typer.Option(None, help="relevance level: MEASURE=LEVEL (e.g. MRR=2) or LEVEL; repeatable"),
    remove_query_id: bool | None = typer.Option(
        None, "--remove-query-id/--keep-query-id", help="default: the preset's"
    ),
    dedupe: bool = typer.Option(False, help="keep the best score of a document listed twice instead of failing"),
    permutations: int = typer.Option(10_000, help="random sign flips of the randomisation test"),
    seed: int = typer.Option(0, help="seed of the randomisation test"),
    out: Path = typer.Option(
        Path("outputs/compare"), help="folder for compare.json, per_query_delta.json, delta_*.png"
    ),
):
    """Compare run B against run A: per-measure deltas, paired t-test, randomisation test, delta plots."""
    from spladekit.data.trec import read_qrels, read_run
    from spladekit.errors import SpladekitError
    from spladekit.evaluate.compare import compare_runs, comparison_table, comparisons_to_dict, judged_coverage
    from spladekit.evaluate.metrics import DEFAULT_MEASURES
    from spladekit.io import ensure_folder, write_json
    from spladekit.plots import per_query_delta

    conventions = build_conventions(preset, rel, remove_query_id, dedupe, qrels=str(qrels))
    measures = list(measure or DEFAULT_MEASURES)
    try:
        judgments = read_qrels(qrels)
        a, b = read_run(run_a, dedupe=conventions.dedupe), read_run(run_b, dedupe=conventions.dedupe)
        comparisons, deltas = compare_runs(a, b, judgments, measures, conventions, permutations, seed)
        name_a, name_b = run_labels(run_a, run_b)
        ensure_folder(out)
        write_json(
            out / "compare.json",
            {
                "run_a": str(run_a),
                "run_b": str(run_b),
                "qrels": str(qrels),
                "judged_queries": len(judgments),
                "judged_queries_answered": {"a": judged_coverage(a, judgments), "b": judged_coverage(b, judgments)},
                "measures": comparisons_to_dict(comparisons),
                "conventions": conventions.to_dict(measures),
                "tests": "paired t-test (scipy.stats.ttest_rel, two-sided); paired randomisation test (random sign flips, two-sided)",
            },
        )
        write_json(out / "per_query_delta.json", deltas)
        for name in measures:
            safe = "".join(c if c.isalnum() or c in "@-_." else "_" for c in name)
            per_query_delta(deltas[name], name, out / f"delta_{safe}.png", name_a, name_b)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(comparison_table(comparisons, name_a, name_b))
    typer.echo(
        f"conventions: {json.dumps({k: v for k, v in conventions.to_dict().items() if k in ('name', 'relevance_level', 'relevance_levels', 'remove_query_id', 'dedupe')})}"
    )
    typer.echo(f"outputs in {out}/")


def run_labels(run_a: Path, run_b: Path) -> tuple[str, str]:
    """Column labels of two run files: their file names, with as many parent folders as it takes to
    tell them apart (the demo writes ``before/run.trec`` and ``after/run.trec``), ``A:``/``B:`` when
    the paths still end alike."""
    parts_a, parts_b = run_a.parts, run_b.parts
    for depth in range(1, max(len(parts_a), len(parts_b)) + 1):
        label_a, label_b = "/".join(parts_a[-depth:]), "/".join(parts_b[-depth:])
        if label_a != label_b:
            return label_a, label_b
    return f"A: {run_a.name}", f"B: {run_b.name}"
