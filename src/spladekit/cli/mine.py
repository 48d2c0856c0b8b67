"""``spladekit mine --data D --out OUT [--candidates bm25|model|run] [--teacher CE ...] [filters]``."""

from __future__ import annotations

from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option


@app.command()
def mine(
    data: str = typer.Option(
        ..., help="BEIR folder/name or irds: id (--format beir), a (query, positive) dataset (hf) or TSV (tsv)"
    ),
    out: Path = typer.Option(
        ..., help="output folder: dataset/ (sentence-transformers columns), naver/, stats.json, mine.yaml"
    ),
    format: str = typer.Option("beir", "--format", help="beir | hf | tsv"),
    split: str = typer.Option("train", help="beir: qrels split; hf: dataset split"),
    corpus: str | None = typer.Option(
        None, help="hf/tsv: more candidate documents (BEIR folder, corpus.jsonl, id<TAB>text)"
    ),
    max_queries: int | None = typer.Option(None, help="mine only the first N queries"),
    candidates: str = typer.Option("bm25", help="bm25 | model | run"),
    model: str | None = typer.Option(None, help="candidates=model: spladekit model (indexes the corpus on the fly)"),
    index: str | None = typer.Option(None, help="candidates=model: an existing spladekit index folder"),
    run: str | None = typer.Option(None, help="candidates=run: a TREC run file"),
    depth: int | None = typer.Option(None, help="candidates per query (default range_max + max positives + 1)"),
    teacher: list[str] = typer.Option(
        [], "--teacher", help="cross-encoder (folder or hub id); repeat to average several"
    ),
    activation: str = typer.Option("identity", help="identity (raw logits) | sigmoid | model"),
    teacher_batch_size: int = typer.Option(32, help="pairs per cross-encoder batch"),
    teacher_max_length: int | None = typer.Option(None, help="cross-encoder max tokens per pair (default: its own)"),
    chunk_queries: int = typer.Option(256, help="queries per resumable scoring chunk"),
    num_negatives: int = typer.Option(3, help="negatives per query"),
    range_min: int = typer.Option(0, help="skip the first N surviving candidates"),
    range_max: int | None = typer.Option(None, help="consider surviving candidates up to rank N"),
    max_score: float | None = typer.Option(None, help="drop candidates scoring above this"),
    min_score: float | None = typer.Option(None, help="drop candidates scoring below this"),
    absolute_margin: float | None = typer.Option(None, help="drop candidates with score + m > lowest positive score"),
    relative_margin: float | None = typer.Option(
        None, help="drop candidates with score > p - |p|·r (p: lowest positive score)"
    ),
    sampling: str = typer.Option("top", help="top | random"),
    seed: int = typer.Option(0, help="random sampling seed"),
    device: str | None = typer.Option(None, help="cross-encoder device"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bars"),
    trust_remote_code: bool = trust_option(),
):
    """Mine hard negatives (BM25, a spladekit model or a run), score them with cross-encoder teachers,
    filter false negatives (sentence-transformers' rules) and write training data."""
    from pydantic import ValidationError

    from spladekit.cli.app import options_error
    from spladekit.errors import SpladekitError

    _check_extras(data, corpus, teacher)
    from spladekit.io import check_output_folder
    from spladekit.mine import MineConfig
    from spladekit.mine import mine as run_mining
    from spladekit.mine.mining import MARKERS

    try:
        config = MineConfig(
            data=data,
            format=format,
            split=split,
            corpus=corpus,
            max_queries=max_queries,
            candidates=candidates,
            model=model,
            index=index,
            run=run,
            depth=depth,
            teachers=teacher,
            activation=activation,
            teacher_batch_size=teacher_batch_size,
            teacher_max_length=teacher_max_length,
            chunk_queries=chunk_queries,
            num_negatives=num_negatives,
            range_min=range_min,
            range_max=range_max,
            max_score=max_score,
            min_score=min_score,
            absolute_margin=absolute_margin,
            relative_margin=relative_margin,
            sampling=sampling,
            seed=seed,
            device=device,
            trust_remote_code=trust_remote_code,
        )
    except ValidationError as exc:
        fail(options_error(exc, {"teachers": "--teacher"}))
    try:
        check_output_folder(
            out,
            "spladekit mine output",
            MARKERS,
            {"--data": data, "--corpus": corpus, "--run": run, "--index": index, "--model": model},
        )
        result = run_mining(config, out, show_progress=progress)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(result.line)
    typer.echo(
        f"written: {out / 'dataset'} (data.format: hf), {out / 'naver'} (data.format: naver), {out / 'stats.json'}"
    )


def _check_extras(data: str, corpus: str | None, teacher: list[str]) -> None:
    """Before torch, a model or the data load: the extras mining needs (the dataset/ output needs ``datasets``, a
    teacher ``sentence-transformers``) and ir_datasets for an ``irds:`` id; a missing one ends the command in one line."""
    from spladekit.data.irds import check_irds
    from spladekit.errors import SpladekitError, check_extra

    try:
        check_extra(
            "mine",
            "spladekit mine" + (" with a --teacher" if teacher else ""),
            ("datasets", "sentence_transformers") if teacher else ("datasets",),
        )
        check_irds(data, corpus)
    except SpladekitError as exc:
        fail(exc)
