"""inference-free: give a SPLADE model a document-only query side (bag of tokens, IDF weights).

The command's job, :func:`build_inference_free`, lives here beside it: it strings the data stage (the
corpus), the model stage (:func:`spladekit.model.inference_free.make_inference_free`, and the folder
written by ``SpladeEncoder.save_pretrained``) and the model card (:mod:`spladekit.publish.card`, a later
stage than the model's).
"""

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
    out: Path = typer.Option(
        ...,
        help="model folder to write (loads in spladekit and sentence-transformers): a new or empty folder, "
        "or a model folder (replaced whole)",
    ),
    trust_remote_code: bool = trust_option(),
):
    """Write an inference-free model: documents through MODEL, queries a bag of tokens weighted by the corpus IDF.

    To train the query weights jointly with the documents instead, use `spladekit train` with
    `--set model.query_encoder=inference-free`.
    """
    from spladekit.errors import SpladekitError
    from spladekit.io import check_output_folder

    try:
        check_output_folder(out, "model folder", MODEL_MARKERS, {"--model": model, "--data": data})
        encoder = build_inference_free(model, data, out, trust_remote_code=trust_remote_code)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    active = int((encoder.query_weights > 0).sum())
    documents = encoder.metadata.extra["inference_free"]["idf_documents"]
    typer.echo(f"wrote {out}/ (IDF of {documents} documents, {active} vocabulary entries with a query weight)")


def build_inference_free(
    model: str, data: str | None, out: str | Path, documents: list[str] | None = None, trust_remote_code: bool = False
):
    """``spladekit inference-free``: ``model``'s document encoder with an inference-free query side
    whose weights are the IDF of the corpus of ``data`` (or of ``documents``), saved into ``out``
    atomically with the sentence-transformers ``Router`` files (where expressible, see
    :func:`spladekit.model.st_modules.write_inference_free_sentence_transformers_files`).

    Returns:
        The :class:`~spladekit.model.encoder.SpladeEncoder` (its ``query_weights`` set).

    Raises:
        ValueError: neither ``data`` nor ``documents``, or an empty corpus.
        OutputPathError: ``out`` is an existing file.
    """
    from spladekit.data.beir import load_corpus
    from spladekit.io import atomic_folder, ensure_folder
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.inference_free import make_inference_free
    from spladekit.publish.card import write_model_card

    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    if documents is None:
        if data is None:
            raise ValueError("give the corpus: a BEIR folder (data) or the documents")
        documents = list(load_corpus(data).values())
    encoder = make_inference_free(
        SpladeEncoder.from_pretrained(model, device="cpu", trust_remote_code=trust_remote_code), documents
    )
    with atomic_folder(out) as tmp:
        encoder.save_pretrained(tmp)  # with the sentence-transformers Router files where expressible
        write_model_card(tmp, previous=out, reference=str(out.resolve()))  # README.md (the one OUT has is kept)
    return encoder
