"""inference-free: give a SPLADE model a document-only query side (bag of tokens, IDF weights)."""

from __future__ import annotations

from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option
from spladekit.data.resolve import DEFAULT_MODEL

MODEL_MARKERS = ("spladekit.json", "config.json")  # what marks a model folder (spladekit's or transformers')


@app.command("inference-free")
def inference_free(
    model: str = typer.Option(DEFAULT_MODEL, help="SPLADE model folder or hub id (its document encoder is kept)"),
    data: str = typer.Option(..., help="BEIR folder or dataset name whose corpus gives the IDF query weights"),
    out: Path = typer.Option(..., help="model folder to write (loads in spladekit and sentence-transformers): a new or empty folder, "
                             "or a model folder (replaced whole)"),
    trust_remote_code: bool = trust_option(),
):
    """Write an inference-free model: documents through MODEL, queries a bag of tokens weighted by the corpus IDF.

    To train the query weights jointly with the documents instead, use `spladekit train` with
    `--set model.query_encoder=inference-free`.
    """
    from spladekit.errors import SpladekitError
    from spladekit.pipeline import build_inference_free

    from spladekit.io import check_output_folder

    try:
        check_output_folder(out, "model folder", MODEL_MARKERS, {"--model": model, "--data": data})
        encoder = build_inference_free(model, data, out, trust_remote_code=trust_remote_code)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    active = int((encoder.query_weights > 0).sum())
    documents = encoder.metadata.extra["inference_free"]["idf_documents"]
    typer.echo(f"wrote {out}/ (IDF of {documents} documents, {active} vocabulary entries with a query weight)")

