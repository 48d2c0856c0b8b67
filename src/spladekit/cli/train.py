"""``spladekit train CONFIG.yaml [--set key=value ...]``."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option

TRAIN_MARKERS = (
    "inputs.json",
    "config.yaml",
    "metrics.jsonl",
    "checkpoints",
)  # what a training run writes first (spladekit.train.trainer)


@app.command()
def train(
    config: Path | None = typer.Argument(None, help="YAML training config (see configs/); defaults when omitted"),
    out: Path = typer.Option(Path("outputs/train"), help="output folder (checkpoints, metrics.jsonl, curves, model/)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field: --set regularizer.lambda_d=1e-3"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress lines and bars (stderr)"),
    trust_remote_code: bool = trust_option(),
):
    """Train a SPLADE model; resumes from the newest checkpoint in OUT (unless resume=false)."""
    from spladekit.errors import SpladekitError
    from spladekit.io import check_output_folder
    from spladekit.train import load_config
    from spladekit.train import train as run_training

    try:
        cfg = load_config(config, list(set_) + (["model.trust_remote_code=true"] if trust_remote_code else []))
        inputs = {
            "model.path": cfg.model.path,
            "data.path": cfg.data.path,
            "data.negatives_model": cfg.data.negatives_model,
            "data.teacher_scores": cfg.data.teacher_scores,
            "data.queries": cfg.data.queries,
            "data.corpus": cfg.data.corpus,
        }
        check_output_folder(out, "training output folder", TRAIN_MARKERS, inputs)  # resumable: its own folder is fine
        result = run_training(cfg, out, show_progress=progress)
    except SpladekitError as exc:
        fail(exc)
    if int(os.environ.get("RANK", "0")) != 0:  # data-parallel: only the main process reports
        return
    if result.already_done:
        typer.echo(
            f"already trained: {out} holds this run finished (the same settings and input files); nothing was done"
        )
    typer.echo(result.summary())
    last, held_out = result.last_metrics, result.validation
    details = (
        [f"last step: loss {last['loss']:.4f}, active terms q/d {last['active_q']:.1f}/{last['active_d']:.1f}"]
        if last
        else []
    )
    if held_out:
        details.append(
            f"held-out validation at step {held_out['step']}: ranking loss {held_out['val_loss_rank']:.4f}, "
            f"accuracy {held_out['val_accuracy']:.3f}"
        )
    if details:
        typer.echo("; ".join(details))
    for alarm in result.alarms:
        typer.secho(f"alarm: {alarm}", fg=typer.colors.YELLOW, err=True)
