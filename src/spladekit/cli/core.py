"""evaluate, demo (``index``/``encode``, ``search``, ``export``, ``import`` live in :mod:`spladekit.cli.index`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option
from spladekit.data.resolve import DEFAULT_MODEL


@app.command()
def evaluate(
    model: str | None = typer.Option(None, help="model folder or hub id (encode + search + evaluate)"),
    data: str | None = typer.Option(None, help="BEIR folder or dataset name"),
    split: str = typer.Option("test"),
    out: Path | None = typer.Option(
        None,
        help="output folder: metrics.json, per_query.json and, with --model, run.trec, "
        "config.json (default with --model: outputs/eval; with --run: none, the metrics are "
        "only printed)",
    ),
    run: Path | None = typer.Option(None, help="evaluate an existing TREC run instead of a model"),
    qrels: Path | None = typer.Option(None, help="qrels file (with --run)"),
    measure: list[str] | None = typer.Option(
        None, "--measure", "-m", help="repeatable; default nDCG@10 MRR@10 R@100 R@1000"
    ),
    k: int = typer.Option(1000),
    batch_size: int = typer.Option(32),
    preset: str | None = typer.Option(
        None,
        help="evaluation conventions: default | beir | msmarco | trec-dl | arguana | quora (default: from the dataset name or the qrels path)",
    ),
    rel: list[str] | None = typer.Option(None, help="relevance level: MEASURE=LEVEL (e.g. MRR=2) or LEVEL; repeatable"),
    remove_query_id: bool | None = typer.Option(
        None, "--remove-query-id/--keep-query-id", help="default: the preset's"
    ),
    dedupe: bool = typer.Option(
        False, help="with --run: keep the best score of a document listed twice instead of failing"
    ),
    trust_remote_code: bool = trust_option(),
):
    """Evaluate a model on a BEIR split (or an existing run against qrels). The metrics are printed as JSON
    on stdout; where they were written, on stderr."""
    from spladekit.cli.evaluate import build_conventions
    from spladekit.data.irds import check_irds
    from spladekit.errors import SpladekitError
    from spladekit.evaluate.metrics import DEFAULT_MEASURES
    from spladekit.io import write_json

    measures = list(measure or DEFAULT_MEASURES)
    custom = preset is not None or rel or remove_query_id is not None or dedupe
    if run is not None:  # no preset: the one matching the qrels path (e.g. qrels.dl19-passage.txt → trec-dl)
        conventions = build_conventions(preset, rel, remove_query_id, dedupe, qrels=str(qrels or ""))
    else:  # no preset: the pipeline picks the one matching the dataset name
        conventions = build_conventions(preset, rel, remove_query_id, dedupe) if custom else None
    try:
        check_irds(data)  # before the model loads
        if run is not None:
            from spladekit.data.trec import read_qrels, read_run
            from spladekit.evaluate.metrics import evaluate as evaluate_run

            if qrels is None:
                raise typer.BadParameter("--run needs --qrels")
            per_query: dict = {}
            metrics = evaluate_run(
                read_run(run, dedupe=dedupe), read_qrels(qrels), measures, conventions=conventions, per_query=per_query
            )
            if out:
                write_json(out / "metrics.json", metrics)
                write_json(out / "per_query.json", per_query)
            written = "metrics.json, per_query.json"
        else:
            from spladekit.evaluate.systems import EvalConfig, run_evaluation

            if model is None or data is None:
                raise typer.BadParameter("give --model and --data (or --run and --qrels)")
            out = out or Path("outputs/eval")
            config = EvalConfig(
                model=model,
                data=data,
                split=split,
                k=k,
                batch_size=batch_size,
                measures=measures,
                trust_remote_code=trust_remote_code,
            )
            metrics = run_evaluation(config, out, conventions=conventions).metrics
            written = "metrics.json, per_query.json, run.trec, config.json"
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(json.dumps(metrics, indent=2))
    if out:
        typer.echo(f"wrote {out}/ ({written})", err=True)
    missing = metrics.get("num_unretrieved", 0)
    if missing:
        typer.secho(
            f"warning: {missing} of {metrics['num_queries']} judged queries have no result in the run "
            "(each scores 0 in the averages)",
            fg=typer.colors.YELLOW,
            err=True,
        )


@app.command()
def demo(
    model: str = typer.Option(DEFAULT_MODEL, help="model folder or hub id"),
    data: str = typer.Option("scifact", help="BEIR folder or dataset name"),
    out: Path = typer.Option(Path("outputs/demo"), help="output folder"),
    batch_size: int = typer.Option(32),
    train: bool = typer.Option(True, "--train/--no-train", help="fine-tune on the train split and evaluate again"),
    full: bool = typer.Option(False, "--full", help="the stronger (GPU) training recipe instead of the 2-core CPU one"),
    set_: list[str] = typer.Option([], "--set", help="override a training-config field, e.g. --set steps=50"),
    trust_remote_code: bool = trust_option(),
):
    """The main job on the embedded default: SPLADE vs BM25 on SciFact test, then fine-tune and compare."""
    from spladekit.data.irds import check_irds
    from spladekit.errors import SpladekitError

    try:
        check_irds(data)  # before torch and the model load
        from spladekit.demo import run_demo

        run_demo(
            model=model,
            data=data,
            out=out,
            batch_size=batch_size,
            train=train,
            full=full,
            overrides=set_,
            trust_remote_code=trust_remote_code,
        )
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    except (
        KeyboardInterrupt
    ):  # Ctrl-C: a line, not a traceback (each file was written whole: temporary file, then renamed)
        typer.echo(
            f"interrupted: what was written is kept in {out}/ (the baseline once printed as written); "
            "rerun the same command to finish",
            err=True,
        )
        raise typer.Exit(130) from None
