"""diagnose, rescale: the MLM-head tools (arXiv 2606.18811)."""

from __future__ import annotations

from pathlib import Path

import typer

from spladekit.cli.app import app, fail, options_error, trust_option


def _record(cls, **values):
    """``cls(**values)``: a settings record of the command's options.

    Raises:
        ValueError: a value the record refuses (a non-finite number), naming its option.
    """
    from pydantic import ValidationError

    try:
        return cls(**values)
    except ValidationError as exc:
        raise options_error(exc) from None


def _text_source(texts: Path | None, data: str | None, n_queries: int, n_docs: int, seed: int):
    """The sample text of ``--texts`` / ``--data`` as a ``TextSource`` (sizes kept only with ``--data``)."""
    from spladekit.model.calibrate.outputs import TextSource

    return _record(
        TextSource, texts=str(texts) if texts else None, data=data, n_queries=n_queries, n_docs=n_docs, seed=seed
    )


@app.command()
def diagnose(
    model: str = typer.Argument(..., help="model folder or hub id"),
    out: Path = typer.Option(..., help="output folder: diagnosis.json, diagnosis.txt, row_norms.png, logits.png"),
    texts: Path | None = typer.Option(None, help="sample text: one text per line"),
    data: str | None = typer.Option(None, help="sample text: a BEIR folder (queries and documents are sampled)"),
    reference: str | None = typer.Option(None, help="reference model (folder or id), or its mean decoder-row norm"),
    n_queries: int = typer.Option(64, help="queries sampled from --data"),
    n_docs: int = typer.Option(64, help="documents sampled from --data"),
    seed: int = typer.Option(0),
    max_length: int = typer.Option(128, help="tokens per text"),
    max_tokens: int = typer.Option(1024, help="tokens sampled for the logit statistics"),
    batch_size: int = typer.Option(16),
    trust_remote_code: bool = trust_option(),
):
    """Measure an MLM head: decoder norms, logits and SPLADE activity on sample text; a verdict and a
    suggested factor and shift, against --reference or the built-in splade-tiny one."""
    from spladekit.errors import SpladekitError
    from spladekit.model.calibrate.outputs import DiagnoseConfig, run_diagnose

    try:
        config = _record(
            DiagnoseConfig,
            model=model,
            source=_text_source(texts, data, n_queries, n_docs, seed),
            reference=reference,
            max_length=max_length,
            max_tokens=max_tokens,
            batch_size=batch_size,
            trust_remote_code=trust_remote_code,
        )
        diagnosis = run_diagnose(config, out, progress=lambda line: typer.echo(line, err=True))
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(diagnosis.table())
    typer.echo(f"wrote {out}")


@app.command()
def rescale(
    model: str = typer.Argument(..., help="model folder or hub id"),
    out: Path = typer.Option(
        ...,
        help="folder for the rescaled model: new, empty or a model folder (its other files "
        "stay); MODEL itself only with --force",
    ),
    factor: float | None = typer.Option(None, help="multiply the head projection by F (< 1 shrinks)"),
    match_norm: str | None = typer.Option(
        None, help="match the mean decoder-row norm of a model (folder or id) or a number"
    ),
    target_logit: float | None = typer.Option(
        None,
        help="calibrate F on sample text so that --statistic of the logits hits this value (with --joint: the std)",
    ),
    statistic: str = typer.Option(
        "p99", help="logit statistic for --target-logit: mean, std, max or a percentile (p99, p99.9)"
    ),
    joint: bool = typer.Option(
        False,
        "--joint",
        help="choose F and the shift together: the logits' std and the SPLADE "
        "activity of --reference, or the numbers --target-logit and --target-activity",
    ),
    reference: str | None = typer.Option(None, help="--joint: the reference model (folder or id)"),
    shift: float | None = typer.Option(None, help="subtract S from every logit (the decoder bias becomes b - S)"),
    target_activity: str | None = typer.Option(
        None,
        help="calibrate the shift so that --activity-statistic on the "
        "sample text hits this number, or that of this model (folder or id)",
    ),
    activity_statistic: str = typer.Option(
        "active_terms", help="active_terms (per text) or frac_positive (of the logits)"
    ),
    position_top_k: int | None = typer.Option(
        None, help="head option: pool each token position's K largest vocabulary entries only (0: no cap)"
    ),
    fold_vocabulary: bool = typer.Option(
        False,
        "--fold-vocabulary",
        help="head option: fold case and word-start variants of a byte-level BPE vocabulary into one term",
    ),
    scale_bias: bool = typer.Option(False, "--scale-bias/--no-scale-bias", help="scale the decoder bias by F too"),
    force: bool = typer.Option(
        False, help="rescale an already rescaled model (factors compound); allow --out = MODEL (in place)"
    ),
    texts: Path | None = typer.Option(None, help="sample text for --target-logit: one text per line"),
    data: str | None = typer.Option(None, help="sample text for --target-logit: a BEIR folder"),
    n_queries: int = typer.Option(64),
    n_docs: int = typer.Option(64),
    seed: int = typer.Option(0),
    max_length: int = typer.Option(128),
    max_tokens: int = typer.Option(1024),
    batch_size: int = typer.Option(16),
    trust_remote_code: bool = trust_option(),
):
    """Rescale the MLM-head projection by a constant F, shift its logits by s, set its options; save the model."""
    from spladekit.errors import SpladekitError
    from spladekit.model.calibrate.outputs import RescaleConfig, run_rescale

    try:
        source = _text_source(texts, data, n_queries, n_docs, seed) if texts or data else None
        config = _record(
            RescaleConfig,
            model=model,
            factor=factor,
            match_norm=match_norm,
            target_logit=target_logit,
            joint=joint,
            reference=reference,
            statistic=statistic,
            shift=shift,
            target_activity=target_activity,
            activity_statistic=activity_statistic,
            position_top_k=position_top_k,
            fold_vocabulary=True if fold_vocabulary else None,  # not given: the start model's
            scale_bias=scale_bias,
            force=force,
            source=source,
            max_length=max_length,
            max_tokens=max_tokens,
            batch_size=batch_size,
            trust_remote_code=trust_remote_code,
        )
    except ValueError as exc:
        fail(exc)
    from spladekit.cli.inference_free import MODEL_MARKERS
    from spladekit.errors import OutputPathError
    from spladekit.io import check_output_folder, staged_files

    try:
        in_place = Path(model).exists() and Path(model).resolve() == out.resolve()
        if in_place and not force:
            raise OutputPathError(
                f"--out {out} is the input model folder {model}: its weights would be overwritten; "
                "give another --out, or --force to rescale it in place"
            )
        check_output_folder(out, "model folder", MODEL_MARKERS, None if in_place else {"MODEL": model})
        with staged_files(out) as staging:  # all files or none; other files in OUT stay
            applied = run_rescale(config, staging)
        from spladekit.publish.card import write_model_card

        write_model_card(out)  # README.md beside the model (an existing one kept)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    options = config.head()
    what = [f"F = {applied['factor']:.6g}", f"shift s = {applied['shift']:.6g}"] if applied["mode"] else []
    if options.position_top_k is not None:
        what.append(f"position_top_k = {options.position_top_k or 'none'}")
    if options.fold_vocabulary is not None:
        what.append("vocabulary folded" if options.fold_vocabulary else "vocabulary not folded")
    typer.echo(
        f"set up the MLM head of {model}: {', '.join(what)}"
        + (f" ({applied['mode']})" if applied["mode"] else "")
        + f"; wrote {out}"
    )
