"""card, push: the model card of a saved model, and its upload to the Hugging Face hub."""

from __future__ import annotations

from pathlib import Path

import typer

from spladekit.cli.app import app, fail


@app.command()
def card(
    folder: Path = typer.Argument(
        ..., metavar="FOLDER", help="a saved model folder (train's model/, rescale, inference-free, export-model)"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace an existing README.md (default: keep it)"),
    eval_: list[Path] | None = typer.Option(
        None,
        "--eval",
        help="an `spladekit evaluate --out` folder (metrics.json + config.json) for the model-index; repeatable",
    ),
    run_dir: Path | None = typer.Option(None, help="the training run folder (default: the parent of model/ or last/)"),
    diagnosis: Path | None = typer.Option(None, help="a `spladekit diagnose --out` folder or its diagnosis.json"),
    repo_id: str | None = typer.Option(None, help="the hub repo the card's snippets load (default: the folder's path)"),
    base_model: str | None = typer.Option(None, help="base_model (default: spladekit.json's source when a hub id)"),
    dataset: list[str] | None = typer.Option(None, help="training dataset hub id for `datasets`; repeatable"),
    language: list[str] | None = typer.Option(None, help="language code(s), e.g. en; repeatable"),
    license: str | None = typer.Option(
        None,
        help="a Hub licence id, e.g. apache-2.0 (huggingface.co/docs/hub/repositories-licenses; "
        "default: the base model card's)",
    ),
):
    """Write the model card (README.md) of a saved model: metadata for the hub, usage, the MLM-head record,
    training, evaluation with sparsity, framework versions, citations."""
    from spladekit.errors import SpladekitError
    from spladekit.publish.card import write_model_card
    from spladekit.publish.push import check_repo_id

    try:
        if repo_id is not None:
            check_repo_id(repo_id, "--repo-id")
        written = write_model_card(
            folder,
            overwrite=overwrite,
            evaluations=list(eval_ or []),
            run_dir=run_dir,
            diagnosis=diagnosis,
            reference=repo_id,
            base_model=base_model,
            datasets=list(dataset or []) or None,
            language=list(language or []) or None,
            license=license,
            model_name=repo_id,
        )
    except (SpladekitError, ValueError, OSError) as exc:
        fail(exc)
    if written is None:
        typer.echo(f"kept {folder / 'README.md'} (it exists; --overwrite replaces it)")
    else:
        typer.echo(f"wrote {written}")


@app.command()
def push(
    folder: Path = typer.Argument(..., metavar="FOLDER", help="a saved model folder with its README.md"),
    repo_id: str = typer.Argument(..., metavar="REPO_ID", help="hub repository id, namespace/name"),
    private: bool = typer.Option(False, "--private", help="create the repository private"),
    revision: str | None = typer.Option(None, help="branch to push to (created when missing)"),
    create_pr: bool = typer.Option(
        False, "--create-pr", help="open a pull request instead of committing to the branch"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the files and print the card; send nothing"),
):
    """Upload a saved model folder to the Hugging Face hub (huggingface_hub create_repo + create_commit of the listed files).

    The token is huggingface_hub's (HF_TOKEN or `hf auth login`); HF_ENDPOINT selects another hub.
    Nothing in FOLDER is changed."""
    from spladekit.errors import SpladekitError
    from spladekit.publish.push import plan_push, push_folder

    try:
        plan = plan_push(folder, repo_id, private=private, revision=revision, create_pr=create_pr)
        local = str(folder.resolve()) in plan.card
        note = (
            f"note: the card's snippets load the local path; `spladekit card {folder} --repo-id {repo_id} "
            f"--overwrite` makes them load {repo_id}"
        )
        if dry_run:
            typer.echo(plan.describe())
            if local:
                typer.secho(note, fg=typer.colors.YELLOW, err=True)
            return
        url = push_folder(plan)
    except (SpladekitError, ValueError, OSError) as exc:
        fail(exc)
    typer.echo(f"pushed {len(plan.files)} files of {folder} to {plan.endpoint}/{repo_id}: {url}")
    if local:
        typer.secho(note, fg=typer.colors.YELLOW, err=True)
