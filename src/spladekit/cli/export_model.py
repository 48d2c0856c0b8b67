"""export-model: the encoder as a serving artefact (ONNX graph with the SPLADE pooling inside, or an engine's
own contract: spladekit.model.engines)."""

from __future__ import annotations

from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option
from spladekit.data.resolve import DEFAULT_MODEL

FORMATS = ("onnx",)
#: engines whose own contract is written (spladekit.model.engines; docs/engines.md)
ENGINE_FORMATS = ("elasticsearch", "opensearch", "fastembed", "anserini")
#: the engine formats whose graph is ONNX (spladekit.model.engines.common.require_onnx)
ONNX_ENGINES = ("fastembed", "anserini")
#: the end of the refusal when OUT's README.md was edited by hand and describes another model
CARD_REMEDY = (
    "nothing was exported (the folder is as it was): give --overwrite to replace it with this model's card "
    "(move it away first to keep your edits)"
)


@app.command("export-model")
def export_model(
    model: str = typer.Option(DEFAULT_MODEL, help="model folder or hub id"),
    format: str = typer.Option(
        "onnx",
        "--format",
        help="onnx: one graph input_ids + attention_mask -> [B, V] SPLADE vector; elasticsearch, opensearch, fastembed, anserini: the form that engine runs itself (with HOW_TO_LOAD.md; docs/engines.md)",
    ),
    out: Path = typer.Option(
        ..., help="folder to write (onnx: model.onnx, tokenizer files, spladekit.json; engines: docs/engines.md)"
    ),
    opset: int | None = typer.Option(
        None,
        help="--format onnx: ONNX opset version (from 14, where attention exports, to torch.onnx's newest; default 17)",
    ),
    query_max_length: int | None = typer.Option(None, help="default: the model's spladekit.json or 64"),
    doc_max_length: int | None = typer.Option(None, help="default: the model's spladekit.json or 256"),
    quantize: str | None = typer.Option(
        None,
        help="int8: onnxruntime dynamic quantisation of the encoder's matrix "
        "products (int8 weights per output column, activations per tensor), except "
        "the MLM-head transform's and the first and last layer's feed-forward output, "
        "kept float32; quality and speed: benchmarks/RESULTS.md, 'int8'",
    ),
    quantize_head: bool = typer.Option(
        False,
        help="with --quantize, quantise the head's products too (one scale per "
        "vocabulary column; default: kept float32)",
    ),
    vocab_tile: int = typer.Option(512, help="vocabulary columns per in-graph tile (memory O(batch x length x tile))"),
    pooling: str | None = typer.Option(None, help="max or sum (default: the model's own)"),
    activation: str | None = typer.Option(None, help="relu or log1p_relu (default: the model's own)"),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="replace OUT's README.md with this model's card even when it "
        "was edited by hand (default: a card spladekit wrote is rewritten; an edited one is "
        "kept while its record matches this model, else the export is refused)",
    ),
    trust_remote_code: bool = trust_option(),
):
    """Export the model for serving: an ONNX graph from token ids to the SPLADE vector, run with onnxruntime, or
    (--format elasticsearch|opensearch|fastembed|anserini) the form that engine runs itself, with HOW_TO_LOAD.md."""
    from spladekit.errors import SpladekitError, check_extra
    from spladekit.io import check_output_folder

    try:
        if format in ENGINE_FORMATS:
            if quantize or quantize_head or opset is not None:
                raise ValueError(
                    f"--quantize/--quantize-head/--opset apply to --format onnx only, not {format} (the "
                    "engine's own contract fixes its graph)"
                )
            if format in ONNX_ENGINES:  # before the model loads
                check_extra("onnx", f"the {format} export (it writes ONNX)", ("onnx",))
            return _export_engine(
                model, format, out, query_max_length, doc_max_length, pooling, activation, overwrite, trust_remote_code
            )
        if format not in FORMATS:
            raise ValueError(f"unknown --format {format!r}; choose one of {', '.join(FORMATS + ENGINE_FORMATS)}")
        check_extra("onnx", "ONNX export (and its onnxruntime check)")  # before the model loads
        check_output_folder(out, "ONNX export", ("model.onnx",), {"--model": model})
        opset = 17 if opset is None else opset
        encoder = _load_for_onnx(model, query_max_length, doc_max_length, trust_remote_code)
        _write_onnx(encoder, out, opset, pooling, activation, vocab_tile, quantize, quantize_head, overwrite)
        written = out
    except (SpladekitError, ValueError, ImportError) as exc:
        fail(exc)
    typer.echo(
        f"wrote {written}/ (model.onnx: input_ids, attention_mask -> weights [B, {encoder.vocab_size}]"
        + (f", {quantize} quantised" if quantize else "")
        + ")"
    )
    from spladekit.model.onnx_export import check_export

    try:
        typer.echo(f"onnxruntime check: max |onnx - torch| = {check_export(encoder, written):.2e} on 3 texts")
    except ImportError:
        from spladekit.errors import install_line

        typer.echo(f"onnxruntime not installed: the export was not run ({install_line('onnx')})")


def _load_for_export(model: str, query_max_length: int | None, doc_max_length: int | None, trust_remote_code: bool):
    """The :class:`~spladekit.model.encoder.SpladeEncoder` of ``model`` that every export reads: on the CPU,
    with the plain head (the exported graphs and files compute the head themselves), max lengths as given.

    Raises:
        What :meth:`SpladeEncoder.from_pretrained <spladekit.model.encoder.SpladeEncoder.from_pretrained>`
        and :func:`~spladekit.model.remote_code.require_masked_lm` raise (not a masked LM, e.g. a folder of
        custom modules).
    """
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.remote_code import require_masked_lm

    encoder = SpladeEncoder.from_pretrained(
        model,
        query_max_length=query_max_length,
        doc_max_length=doc_max_length,
        head_impl="plain",
        device="cpu",
        trust_remote_code=trust_remote_code,
    )
    require_masked_lm(encoder)
    return encoder


def _load_for_onnx(model: str, query_max_length: int | None, doc_max_length: int | None, trust_remote_code: bool):
    """The masked-LM ``model`` on the CPU with the plain head, for the ONNX export.

    Raises:
        ValueError: a max length below 1 or past the model's positions (its position embeddings).
    """
    for name, value in (("--query-max-length", query_max_length), ("--doc-max-length", doc_max_length)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    encoder = _load_for_export(model, query_max_length, doc_max_length, trust_remote_code)
    limit = encoder.max_positions
    for name, value in (("--query-max-length", query_max_length), ("--doc-max-length", doc_max_length)):
        if value is not None and limit is not None and value > limit:
            raise ValueError(
                f"{name} {value} exceeds the model's {limit} positions (its position embeddings); "
                f"choose at most {limit}"
            )
    return encoder


def _write_onnx(encoder, out: Path, opset: int, pooling, activation, vocab_tile, quantize, quantize_head, overwrite):
    """The ONNX export and its model card written to ``out`` together (atomic: a failure leaves ``out`` as it was).

    Raises:
        ValueError: torch.onnx refused the export (its first line, not torch's IR dump).
    """
    from spladekit.io import atomic_folder
    from spladekit.model.onnx_export import export_onnx
    from spladekit.publish.card import write_model_card

    with atomic_folder(out) as stage:  # export and README.md swapped in together; a failure leaves OUT as it was
        try:
            export_onnx(
                encoder,
                stage,
                opset=opset,
                pooling=pooling,
                activation=activation,
                vocab_tile=vocab_tile,
                quantize=quantize,
                quantize_head=quantize_head,
            )
        except RuntimeError as exc:  # torch.onnx's refusal, e.g. an unsupported --opset
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise ValueError(f"ONNX export failed (--opset {opset}): {first}") from exc  # not torch's IR dump
        write_model_card(stage, previous=out, reference=str(out.resolve()), overwrite=overwrite, remedy=CARD_REMEDY)


def _export_engine(
    model: str,
    engine: str,
    out: Path,
    query_max_length,
    doc_max_length,
    pooling,
    activation,
    overwrite: bool,
    trust_remote_code: bool = False,
) -> None:
    """``--format elasticsearch|opensearch|fastembed|anserini`` (spladekit.model.engines)."""
    from spladekit.io import check_output_folder
    from spladekit.model.engines import export_for_engine
    from spladekit.model.engines.common import HOW_TO_LOAD

    check_output_folder(out, f"{engine} export", (HOW_TO_LOAD,), {"--model": model})
    encoder = _load_for_export(model, query_max_length, doc_max_length, trust_remote_code)
    from spladekit.index.formats.elastic import mapping
    from spladekit.io import atomic_folder
    from spladekit.publish.card import write_model_card

    extra = {
        "elasticsearch": {"index_mapping": mapping("splade", "sparse_vector")},
        "opensearch": {"index_mapping": mapping("splade", "rank_features")},
    }.get(engine, {})
    with atomic_folder(out) as stage:  # export and README.md swapped in together; a failure leaves OUT as it was
        export_for_engine(engine, encoder, stage, pooling=pooling, activation=activation, **extra)
        write_model_card(
            stage,
            previous=out,
            reference=str(out.resolve()),
            engine=engine,
            overwrite=overwrite,
            remedy=CARD_REMEDY,
            usage=f"This folder is {engine}'s form of the model: the engine runs it itself. Its own "
            f"register/import calls, the index mapping and the query body: [{HOW_TO_LOAD}]({HOW_TO_LOAD}).",
        )
    written = out
    typer.echo(f"wrote {written}/ for {engine}: " + ", ".join(sorted(p.name for p in Path(written).iterdir())))
    typer.echo(f"how to load it: {Path(written) / HOW_TO_LOAD}")
