"""fuse: hybrid retrieval by fusing TREC runs (RRF or normalised score fusion)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, options_error


@app.command()
def fuse(
    runs: list[Path] = typer.Argument(
        ..., help="TREC run files to fuse: two or more, each once (e.g. a SPLADE run and a BM25 run)"
    ),
    out: Path = typer.Option(
        ..., help="fused TREC run to write (settings in OUT.config.json; with --qrels, metrics in OUT.metrics.json)"
    ),
    method: str = typer.Option(
        "rrf", help="rrf (reciprocal rank fusion, Cormack et al. 2009) or score (normalised CombSUM)"
    ),
    rrf_k: float = typer.Option(60.0, help="RRF constant k (60 in Cormack et al. 2009)"),
    norm: str = typer.Option("min-max", help="score fusion: min-max or z-score, per query and run"),
    weight: list[float] | None = typer.Option(None, "--weight", help="one per run, in order (default: 1 each)"),
    depth: int = typer.Option(1000, help="documents kept per query"),
    qrels: Path | None = typer.Option(None, help="also evaluate the fused run against these qrels"),
    preset: str | None = typer.Option(None, help="evaluation conventions (default: from the qrels path)"),
    measure: list[str] | None = typer.Option(
        None, "--measure", "-m", help="with --qrels; repeatable; default nDCG@10 MRR@10 R@100 R@1000"
    ),
):
    """Fuse runs into one (hybrid retrieval); optionally evaluate it with the usual conventions."""
    from pydantic import ValidationError

    from spladekit.cli.evaluate import build_conventions
    from spladekit.data.trec import read_qrels, read_run, write_run
    from spladekit.errors import SpladekitError
    from spladekit.index.fusion import FusionConfig
    from spladekit.index.fusion import fuse as fuse_runs
    from spladekit.io import write_json

    try:
        check_distinct(runs, out)
        if measure and qrels is None:
            raise ValueError("--measure goes with --qrels (the fused run is evaluated only against qrels)")
        try:
            config = FusionConfig(method=method, rrf_k=rrf_k, norm=norm, weights=weight or None, depth=depth)
        except ValidationError as exc:
            raise options_error(exc, renamed={"weights": "--weight"}) from None
        judged = read_qrels(qrels) if qrels is not None else None  # bad qrels fail before anything is written
        conventions = build_conventions(preset, qrels=str(qrels)) if qrels is not None else None
        fused = fuse_runs([read_run(path) for path in runs], config)
        write_run(fused, out, tag=f"fused-{config.method}")
        unused = {"rrf": {"norm"}, "score": {"rrf_k"}}[
            config.method
        ]  # a setting the method does not read is not recorded
        write_json(
            Path(str(out) + ".config.json"),
            {"runs": [str(p) for p in runs], "fusion": config.model_dump(exclude=unused)},
        )
        if judged is not None:
            from spladekit.evaluate.metrics import DEFAULT_MEASURES, evaluate

            metrics = evaluate(fused, judged, list(measure or DEFAULT_MEASURES), conventions=conventions)
            write_json(Path(str(out) + ".metrics.json"), dict(metrics, qrels=str(qrels)))
            typer.echo(json.dumps(metrics, indent=2))
            typer.echo(f"conventions: {conventions.name}")
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(f"wrote {out} ({len(fused)} queries, {config.method})", err=True)


def check_distinct(runs: list[Path], out: Path | None = None) -> None:
    """Raise ``ValueError`` when two of ``runs`` are the same file (same resolved path: a run fused
    with itself only weighs more, which ``--weight`` says openly), or when ``out`` or its settings
    record (``OUT.config.json``) is one of them (the input would be replaced by the fused run)."""
    seen: dict[Path, Path] = {}
    written = (
        {}
        if out is None
        else {
            out.resolve(): "--out",
            Path(str(out) + ".config.json").resolve(): "--out's settings record",
            Path(str(out) + ".metrics.json").resolve(): "--out's metrics",
        }
    )
    for path in runs:
        if path.resolve() in written:
            raise ValueError(
                f"{path}: a run to fuse is also the {written[path.resolve()]} ({out}): it would be overwritten"
            )
        key = path.resolve()
        if key in seen:
            raise ValueError(
                f"{path}: the same run file as {seen[key]}, given twice (use --weight to weigh a run more)"
            )
        seen[key] = path
