"""encode, search, evaluate, demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from spladekit.cli.app import app
from spladekit.data.resolve import DEFAULT_MODEL


def _fail(exc: Exception) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def encode(
    model: str = typer.Option(DEFAULT_MODEL, help="model folder or hub id"),
    data: str = typer.Option(..., help="BEIR folder or dataset name"),
    out: Path = typer.Option(..., help="index folder to write"),
    batch_size: int = typer.Option(32),
    doc_max_length: Optional[int] = typer.Option(None, help="default: the model's saved value or 256"),
    doc_top_k: Optional[int] = typer.Option(None, help="keep the k largest weights per document"),
):
    """Encode a BEIR corpus into an index folder (CSR vectors + doc ids + metadata)."""
    from spladekit.data.beir import _find, read_corpus
    from spladekit.data.resolve import resolve_dataset
    from spladekit.errors import SpladekitError
    from spladekit.index.io import save_index
    from spladekit.model.encoder import SpladeEncoder

    try:
        folder = resolve_dataset(data)
        corpus = read_corpus(_find(folder, "corpus"))
        encoder = SpladeEncoder.from_pretrained(model, doc_max_length=doc_max_length, doc_top_k=doc_top_k, batch_size=batch_size)
        vectors = encoder.encode_documents(list(corpus.values()), show_progress=True)
        meta = dict(encoder.metadata.__dict__, model=model, data=str(folder), truncated_docs=encoder.last_truncated)
        save_index(out, vectors, list(corpus), meta)
    except SpladekitError as exc:
        _fail(exc)
    typer.echo(f"wrote {out} ({vectors.shape[0]} documents, {vectors.nnz / max(1, vectors.shape[0]):.1f} active terms/doc)")


@app.command()
def search(
    index: Path = typer.Option(..., help="index folder written by `spladekit encode`"),
    data: Optional[str] = typer.Option(None, help="BEIR folder: its judged queries of --split are searched"),
    queries: Optional[Path] = typer.Option(None, help="id<TAB>text file of queries (instead of --data)"),
    split: str = typer.Option("test"),
    model: Optional[str] = typer.Option(None, help="default: the model recorded in the index"),
    k: int = typer.Option(1000),
    out: Path = typer.Option(..., help="TREC run file to write"),
):
    """Search an index with queries; write a TREC run."""
    from spladekit.data.beir import load_beir
    from spladekit.data.trec import write_run
    from spladekit.data.tsv import read_tsv
    from spladekit.errors import SpladekitError
    from spladekit.index.exact import exact_search, results_to_run
    from spladekit.index.io import load_index
    from spladekit.model.encoder import SpladeEncoder

    try:
        vectors, doc_ids, meta = load_index(index)
        if queries is not None:
            topics = read_tsv(queries)
        elif data is not None:
            topics = load_beir(data, split).queries
        else:
            raise typer.BadParameter("give --data or --queries")
        encoder = SpladeEncoder.from_pretrained(model or meta["model"], query_max_length=meta.get("query_max_length"))
        q = encoder.encode_queries(list(topics.values()), show_progress=True)
        run = results_to_run(exact_search(q, vectors, k=k, doc_ids=doc_ids), list(topics), doc_ids)
        write_run(run, out)
    except SpladekitError as exc:
        _fail(exc)
    typer.echo(f"wrote {out} ({len(run)} queries)")


@app.command()
def evaluate(
    model: Optional[str] = typer.Option(None, help="model folder or hub id (encode + search + evaluate)"),
    data: Optional[str] = typer.Option(None, help="BEIR folder or dataset name"),
    split: str = typer.Option("test"),
    out: Optional[Path] = typer.Option(None, help="output folder: metrics.json, run.trec, per_query.json, config.json"),
    run: Optional[Path] = typer.Option(None, help="evaluate an existing TREC run instead of a model"),
    qrels: Optional[Path] = typer.Option(None, help="qrels file (with --run)"),
    k: int = typer.Option(1000),
    batch_size: int = typer.Option(32),
    preset: Optional[str] = typer.Option(None, help="evaluation conventions: default | beir | msmarco | trec-dl | arguana | quora (default: from the dataset name or the qrels path)"),
    rel: Optional[List[str]] = typer.Option(None, help="relevance level: MEASURE=LEVEL (e.g. MRR=2) or LEVEL; repeatable"),
    remove_query_id: Optional[bool] = typer.Option(None, "--remove-query-id/--keep-query-id", help="default: the preset's"),
    dedupe: bool = typer.Option(False, help="with --run: keep the best score of a document listed twice instead of failing"),
):
    """Evaluate a model on a BEIR split (or an existing run against qrels)."""
    from spladekit.cli.evaluate import build_conventions
    from spladekit.errors import SpladekitError
    from spladekit.io import write_json

    custom = preset is not None or rel or remove_query_id is not None or dedupe
    if run is not None:  # no preset: the one matching the qrels path (e.g. qrels.dl19-passage.txt → trec-dl)
        conventions = build_conventions(preset, rel, remove_query_id, dedupe, dataset_hint=str(qrels or ""))
    else:  # no preset: the pipeline picks the one matching the dataset name
        conventions = build_conventions(preset, rel, remove_query_id, dedupe) if custom else None
    try:
        if run is not None:
            from spladekit.data.trec import read_qrels, read_run
            from spladekit.evaluate.metrics import evaluate as evaluate_run

            if qrels is None:
                raise typer.BadParameter("--run needs --qrels")
            per_query: dict = {}
            metrics = evaluate_run(read_run(run, dedupe=dedupe), read_qrels(qrels), conventions=conventions,
                                   per_query=per_query)
            if out:
                write_json(out / "metrics.json", metrics)
                write_json(out / "per_query.json", per_query)
        else:
            from spladekit.pipeline import EvalConfig, run_evaluation

            if model is None or data is None or out is None:
                raise typer.BadParameter("give --model, --data and --out (or --run and --qrels)")
            config = EvalConfig(model=model, data=data, split=split, k=k, batch_size=batch_size)
            metrics = run_evaluation(config, out, conventions=conventions).metrics
    except SpladekitError as exc:
        _fail(exc)
    typer.echo(json.dumps(metrics, indent=2))


@app.command()
def demo(
    model: str = typer.Option(DEFAULT_MODEL, help="model folder or hub id"),
    data: str = typer.Option("scifact", help="BEIR folder or dataset name"),
    out: Path = typer.Option(Path("outputs/demo"), help="output folder"),
    batch_size: int = typer.Option(32),
):
    """The main job on the embedded default: SPLADE vs BM25 on SciFact test, one table, a plot."""
    from spladekit.demo import run_demo

    run_demo(model=model, data=data, out=out, batch_size=batch_size)
