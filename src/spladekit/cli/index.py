"""index, search, export, import."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option
from spladekit.data.resolve import DEFAULT_MODEL

INDEX_MARKERS = ("index.json",)  # what marks a folder as an index (spladekit.index.layout)
EXPORT_MARKERS = ("export.json",)  # what marks a folder as an export (spladekit.index.export)


BUDGET_HELP = (
    "working memory of writing the index folder (both layouts, sorted runs on disk), e.g. 512MiB, 2GiB, 1.5GB "
    "(B, KB/MB/GB/TB = powers of 1000, KiB/MiB/GiB/TiB = powers of 1024; 16MiB to 1PiB); default 1GiB. "
    "The folder is the same at any budget"
)


@app.command("index")
def index_command(
    model: str = typer.Option(DEFAULT_MODEL, help="model folder or hub id"),
    data: str = typer.Option(..., help="BEIR folder or dataset name"),
    out: Path = typer.Option(
        ...,
        help="index folder to write: a new or empty folder, or an index (replaced); never the --model or --data folder",
    ),
    batch_size: int = typer.Option(32),
    doc_max_length: int | None = typer.Option(None, help="default: the model's saved value (spladekit.json) or 256"),
    doc_top_k: int | None = typer.Option(None, help="keep the k largest weights per document"),
    doc_pruning: str | None = typer.Option(
        None,
        help="prune every document vector (after --doc-top-k): top_k=K, "
        "mass=ALPHA (fewest heaviest terms holding that share of the L1 mass), "
        "max_ratio=R (weights >= R x the largest), threshold=T (weights >= T); "
        "ties: lower term id first; default: the model's saved rule",
    ),
    head_impl: str | None = typer.Option(None, help="plain or fused (default: fused when available)"),
    chunk_size: int = typer.Option(
        10_000, help="documents per chunk (memory bound; a killed run resumes at the first unfinished chunk)"
    ),
    memory_budget: str | None = typer.Option(None, "--memory-budget", help=BUDGET_HELP),
    trust_remote_code: bool = trust_option(),
):
    """Encode a BEIR corpus into an index folder (streamed, resumable). Data-parallel under `torchrun --nproc_per_node N -m spladekit index ...`."""
    from spladekit.data.irds import check_irds
    from spladekit.errors import SpladekitError

    try:
        check_irds(data)  # before torch and the model load
    except SpladekitError as exc:
        fail(exc)
    from spladekit.index.builder import build_index
    from spladekit.index.index import Index
    from spladekit.index.writer import parse_size
    from spladekit.io import check_output_folder

    try:
        config = _index_config(
            model=model,
            data=data,
            out=str(out),
            batch_size=batch_size,
            doc_max_length=doc_max_length,
            doc_top_k=doc_top_k,
            head_impl=head_impl,
            chunk_size=chunk_size,
            doc_pruning=doc_pruning,
            trust_remote_code=trust_remote_code,
        )  # options checked here
        check_output_folder(out, "spladekit index", INDEX_MARKERS, {"--model": model, "--data": data})
        budget = None if memory_budget is None else parse_size(memory_budget)
        written = build_index(config, show_progress=True, memory_budget=budget)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    if written is not None:
        opened = Index.open(written)
        docs = opened.docs
        truncated, length = opened.metadata.get("truncated_docs"), opened.metadata.get("doc_max_length")
        cut = f"; {truncated} truncated to {length} tokens" if truncated else ""
        typer.echo(
            f"wrote {written} ({docs.shape[0]} documents, {docs.nnz / max(1, docs.shape[0]):.1f} active terms/doc{cut})"
        )


def _index_config(**options):
    """The :class:`~spladekit.index.builder.IndexConfig` of ``spladekit index``'s options.

    Raises:
        ValueError: one line per refused option, the record's own message (it names the option).
    """
    from pydantic import ValidationError

    from spladekit.errors import validation_problems
    from spladekit.index.builder import IndexConfig

    try:
        return IndexConfig(**options)
    except ValidationError as exc:
        raise ValueError("\n".join(message for _, message in validation_problems(exc))) from None


@app.command()
def search(
    index: list[Path] = typer.Option(
        ..., help="index folder written by `spladekit index`; repeat it for shards (merged top-k)"
    ),
    data: str | None = typer.Option(None, help="BEIR folder: its judged queries of --split are searched"),
    queries: Path | None = typer.Option(None, help="id<TAB>text file of queries (instead of --data)"),
    split: str = typer.Option("test"),
    model: str | None = typer.Option(None, help="default: the model recorded in the index"),
    k: int = typer.Option(1000),
    out: Path = typer.Option(..., help="TREC run file to write"),
    backend: str = typer.Option(
        "exact", help="exact, seismic, or two_step (a pruned copy answers, its candidates rescored exactly)"
    ),
    one_at_a_time: bool = typer.Option(False, help="search each query in its own call (latency per call)"),
    query_cut: int | None = typer.Option(None, help="seismic: query terms traversed (default 20)"),
    heap_factor: float | None = typer.Option(None, help="seismic: block-skipping factor (default 0.8)"),
    n_postings: int | None = typer.Option(
        None,
        help="seismic build: average posting-list length kept over the whole index, each shard its share (default: the stored index's, else 3500)",
    ),
    summary_energy: float | None = typer.Option(
        None, help="seismic build: L1 mass kept by block summaries (default: stored, else 0.4)"
    ),
    centroid_fraction: float | None = typer.Option(
        None, help="seismic build: blocks per posting list, fraction (default: stored, else 0.1)"
    ),
    max_fraction: float | None = typer.Option(
        None, help="seismic build: longest posting list kept, as a multiple of n_postings (default: stored, else 6)"
    ),
    knn: int | None = typer.Option(
        None,
        help="seismic build: neighbours per document in a k-NN graph (default: stored, else 0 = none; "
        "builds take several times longer)",
    ),
    n_knn: int | None = typer.Option(
        None, help="seismic: neighbours of each found document also scored (≤ --knn of the build; default 0)"
    ),
    first: str | None = typer.Option(
        None,
        help="two_step: the pruned copy's rule for every document, KIND=VALUE (top_k=K, mass=ALPHA, "
        "max_ratio=R, threshold=T; default: the stored copy's, else top_k=80); "
        "another rule rebuilds the copy stored in the folder",
    ),
    candidates: int | None = typer.Option(
        None,
        help="two_step: documents of the first step rescored with the full vectors "
        "per query (at least --k; default 700)",
    ),
    first_query: str | None = typer.Option(
        None,
        help="two_step: prune each query for the first step only, KIND=VALUE, or none "
        "(the whole query; default top_k=16)",
    ),
    recall_k: int | None = typer.Option(
        None, help="seismic, two_step: also report recall@R of its top-R against exact (writes RUN.recall.json)"
    ),
    memory_budget: str | None = typer.Option(
        None,
        "--memory-budget",
        help="seismic build: memory of one shard's build, e.g. 8GiB "
        "(the index is built as one Seismic index per range of documents that fits; "
        "default: the stored index's shards, else 11GiB); two_step: memory of building "
        "the pruned copy (default 1GiB)",
    ),
    verify: bool = typer.Option(
        True, help="check the folder's content hashes first (reads every array once: seconds at 1M documents)"
    ),
    trust_remote_code: bool = trust_option(),
):
    """Search an index with queries; write a TREC run (exact dot product, Seismic, or two-step), RUN.config.json
    (the settings record) and RUN.latency.json. The Seismic index and the pruned copy of two-step search
    are built once and stored in the folder."""
    from dataclasses import asdict

    from spladekit.data.trec import write_run
    from spladekit.errors import SpladekitError, check_extra
    from spladekit.index.index import open_index
    from spladekit.io import write_json

    try:
        if k < 1:
            raise ValueError(f"--k must be ≥ 1, got {k}")
        if recall_k is not None and recall_k < 1:
            raise ValueError(f"--recall-k must be ≥ 1, got {recall_k}")
        _check_run_path(out, index, queries, data)
        searcher = _searcher_options(
            backend,
            dict(query_cut=query_cut, heap_factor=heap_factor, n_knn=n_knn),
            dict(
                n_postings=n_postings,
                summary_energy=summary_energy,
                centroid_fraction=centroid_fraction,
                max_fraction=max_fraction,
                knn=knn,
            ),
            dict(first=first, candidates=candidates, first_query=first_query),
            memory_budget,
            recall_k,
        )
        if backend == "seismic":  # before the queries, the index (its hashes) or the model are read
            check_extra("seismic", "Seismic search")
        topics = _topics(queries, data, split)
        searched = open_index(index, verify=verify)
        searched.check(searcher)  # before any query is encoded or index built
        q = searched.query_encoder(model, trust_remote_code=trust_remote_code)
        vectors = q.encode_queries(list(topics.values()), show_progress=True)
        result = searched.search(vectors, k=k, searcher=searcher, query_ids=list(topics), one_at_a_time=one_at_a_time)
        for what in result.built:
            typer.echo(f"built {what} (searches and `spladekit serve` reuse it)")
        write_run(result.run, out)
        settings = result.settings.record()
        settings.update(
            queries=str(queries or f"{data}:{split}"),
            num_queries=len(topics),
            model=model or searched.metadata.get("model"),
            query_max_length=q.metadata.query_max_length,
            query_top_k=q.metadata.query_top_k,
            query_pruning=q.metadata.query_pruning,
        )
        write_json(Path(str(out) + ".config.json"), settings)
        write_json(Path(str(out) + ".latency.json"), asdict(result.latency))
        if recall_k:
            _write_recall(searched, result, vectors, list(topics), searcher, k, recall_k, one_at_a_time, out, settings)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(f"wrote {out} ({len(topics)} queries, {result.latency.mean_ms:.2f} ms/query)")


def _write_recall(searched, result, vectors, query_ids, searcher, k, recall_k, one_at_a_time, out: Path, settings):
    """``RUN.recall.json``: recall@R of the searcher's top-R (``result`` itself when R ≤ k) against exact
    search's, with the run's settings record; the recall printed as one JSON line."""
    from spladekit.index.results import recall_at_k
    from spladekit.io import write_json

    approx = (
        result
        if recall_k <= k
        else searched.search(vectors, k=recall_k, searcher=searcher, query_ids=query_ids, one_at_a_time=one_at_a_time)
    )
    exact = searched.search(vectors, k=recall_k, query_ids=query_ids)
    recall = {f"recall@{recall_k}": recall_at_k(approx.hits, exact.hits, k=recall_k)}
    write_json(Path(str(out) + ".recall.json"), dict(recall, **settings))
    typer.echo(json.dumps(recall))


def _check_run_path(out: Path, index: list[Path], queries: Path | None, data: str | None) -> None:
    """Refuse ``--out`` inside an index folder or on the queries file, and ``--data`` with ``--queries``.

    Raises:
        ValueError: naming the options.
    """
    if queries is not None and data is not None:
        raise ValueError("give --data or --queries, not both")
    for given, what in [
        *((folder, "index folder") for folder in index),
        *([(queries, "queries file")] if queries else []),
    ]:
        if out.resolve() == given.resolve() or given.resolve() in out.resolve().parents:
            raise ValueError(
                f"--out {out} is {'inside ' if out.resolve() != given.resolve() else ''}the {what} {given}: "
                "the run would overwrite it; write the run elsewhere"
            )


def _searcher_options(
    backend: str, searching: dict, building: dict, stepping: dict, memory_budget: str | None, recall_k: int | None
):
    """The searcher configuration of ``spladekit search``'s options (``searching``: Seismic's search
    options, ``building``: its build options, ``stepping``: two-step's options; None where not given).

    Raises:
        ValueError: an unknown backend; another backend's options; a value a configuration refuses
            (its message, naming the parameter).
    """
    from pydantic import ValidationError

    from spladekit.errors import validation_problems
    from spladekit.index.index import searcher_config
    from spladekit.index.seismic import SeismicBuildParams, SeismicSearchParams

    searching = {name: value for name, value in searching.items() if value is not None}
    building = {"nknn" if name == "knn" else name: value for name, value in building.items() if value is not None}
    stepping = {name: value for name, value in stepping.items() if value is not None}
    own = {
        "seismic": [f"--{'knn' if n == 'nknn' else n.replace('_', '-')}" for n in [*building, *searching]],
        "two_step": [f"--{n.replace('_', '-')}" for n in stepping],
    }
    if backend == "exact":  # options of both approximate backends
        own["seismic or two_step"] = (["--recall-k"] if recall_k is not None else []) + (
            ["--memory-budget"] if memory_budget is not None else []
        )
    for other, given in own.items():
        if other != backend and given:
            raise ValueError(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --backend {other} only, "
                f"not to {backend!r}; drop {'it' if len(given) == 1 else 'them'}"
            )
    try:
        budget = None
        if memory_budget is not None:
            from spladekit.index.writer import parse_size

            budget = parse_size(memory_budget)
        if backend == "two_step":
            return searcher_config(backend, **stepping, **({"memory_budget": budget} if budget is not None else {}))
        if backend != "seismic":
            return searcher_config(backend)
        return searcher_config(
            backend,
            search=SeismicSearchParams(**searching),
            build=SeismicBuildParams(**building) if building else None,
            memory_budget=budget,
        )
    except ValidationError as exc:
        raise ValueError("\n".join(message for _, message in validation_problems(exc))) from None


def _topics(queries: Path | None, data: str | None, split: str) -> dict[str, str]:
    """The queries of ``--queries`` (id<TAB>text) or of ``--data``'s ``--split``, each id one a run can hold.

    Raises:
        typer.BadParameter: neither given.
        DataFormatError: an unreadable file, or an id a run file cannot hold (naming the file).
    """
    from spladekit.data.beir import load_beir
    from spladekit.data.trec import check_trec_id
    from spladekit.data.tsv import read_tsv

    if queries is not None:
        topics = read_tsv(queries)
    elif data is not None:
        topics = load_beir(data, split).queries
    else:
        raise typer.BadParameter("give --data or --queries")
    for qid in topics:  # a run file cannot hold it: said before the search, naming the queries' file
        check_trec_id(qid, queries if queries is not None else f"{data}:{split}", "query id")
    return topics


@app.command("export")
def export_command(
    index: Path = typer.Option(..., help="index folder (documents), or one written by `import`"),
    format: str = typer.Option(
        ..., "--format", help="anserini | anserini-queries | seismic | qdrant | milvus | pgvector | elastic | ciff"
    ),
    out: Path = typer.Option(..., help="export folder (files + export.json)"),
    queries: Path | None = typer.Option(
        None,
        help="anserini-queries: id<TAB>text file to encode with the index's model (default: export the index's own vectors)",
    ),
    scale: float = typer.Option(
        100.0, help="quantisation scale for integer impacts (anserini formats, ciff, qdrant with --idf)"
    ),
    keys: str = typer.Option("token", help="elastic: token (escaped: % -> %25, . -> %2E) or id"),
    field_type: str = typer.Option("rank_features", help="elastic: rank_features or sparse_vector"),
    query_top_k: int | None = typer.Option(
        None,
        help="anserini-queries: keep each query's k heaviest terms (≤ 1024, Lucene's clause limit; default: a longer query is an error)",
    ),
    hnsw: bool = typer.Option(
        False, help="pgvector: add an HNSW index to schema.sql (approximate; ≤ 1000 non-zeros per vector)"
    ),
    table: str = typer.Option("splade", help="pgvector: table name"),
    trust_remote_code: bool = trust_option(),
    idf: bool = typer.Option(
        False,
        help="qdrant: a collection with Qdrant's IDF modifier (collection.json: modifier idf; "
        "points with integer impacts at --scale, no IDF folded in)",
    ),
):
    """Export an index to Anserini, Seismic, Qdrant, Milvus, PostgreSQL/pgvector, Elasticsearch/OpenSearch or CIFF files."""
    from spladekit.errors import SpladekitError
    from spladekit.index.export import export_index, export_vectors
    from spladekit.index.layout import load_metadata, load_vocabulary
    from spladekit.index.search import query_encoder
    from spladekit.io import check_output_folder

    try:
        check_output_folder(out, "spladekit export", EXPORT_MARKERS, {"--index": index, "--queries": queries})
        if queries is not None:
            from spladekit.data.tsv import read_tsv

            if format != "anserini-queries":
                raise typer.BadParameter("--queries goes with --format anserini-queries")
            meta = load_metadata(index)
            topics = read_tsv(queries)
            encoder = query_encoder(meta, path=Path(index) / "index.json", trust_remote_code=trust_remote_code)
            q = encoder.encode_queries(list(topics.values()))
            manifest = export_vectors(
                format,
                out,
                q,
                list(topics),
                load_vocabulary(index) or encoder.vocabulary,
                scale=scale,
                model=meta.get("model"),
                model_revision=meta.get("model_revision"),
                query_top_k=query_top_k,
                keys=keys,
                field_type=field_type,
                hnsw=hnsw,
                table=table,
                idf=idf,
            )  # refused there: not for this format
        else:
            manifest = export_index(
                index,
                format,
                out,
                scale=scale,
                keys=keys,
                field_type=field_type,
                query_top_k=query_top_k,
                hnsw=hnsw,
                table=table,
                idf=idf,
            )
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(f"wrote {out} ({manifest.count} vectors, format {manifest.format})")


@app.command("import")
def import_command(
    input: Path = typer.Option(..., "--input", help="exported file, or export folder with export.json"),
    format: str = typer.Option(
        ..., "--format", help="anserini | anserini-queries | seismic | qdrant | milvus | pgvector | elastic | ciff"
    ),
    out: Path = typer.Option(..., help="index folder to write (vectors, ids, vocabulary)"),
    model: str | None = typer.Option(
        None, help="model whose vocabulary names the tokens (default: the one export.json names)"
    ),
    like: Path | None = typer.Option(None, help="index folder whose vocab.json names the tokens (instead of --model)"),
    scale: float | None = typer.Option(None, help="quantisation scale (default: export.json's, else 100)"),
    memory_budget: str | None = typer.Option(None, "--memory-budget", help=BUDGET_HELP),
    trust_remote_code: bool = trust_option(),
):
    """Import exported vectors (or real Anserini pre-encoded query files) into an index folder."""
    from spladekit.errors import SpladekitError
    from spladekit.index.export import import_to_index, model_vocabulary, recorded_model
    from spladekit.index.layout import load_metadata, load_vocabulary
    from spladekit.io import check_output_folder

    try:
        check_output_folder(out, "spladekit index", INDEX_MARKERS, {"--input": input, "--like": like, "--model": model})
        if like is not None and model is not None:
            raise typer.BadParameter("give --model or --like, not both")
        if like is not None:
            vocabulary = load_vocabulary(like)
            meta = load_metadata(like)
            if vocabulary is None:
                raise typer.BadParameter(f"{like} has no vocab.json")
            meta = {
                k: meta[k]
                for k in (
                    "model",
                    "model_revision",
                    "query_max_length",
                    "doc_max_length",
                    "query_top_k",
                    "doc_top_k",
                    "query_pruning",
                    "doc_pruning",
                )
                if k in meta
            }
        elif model is not None:
            vocabulary, meta = model_vocabulary(model, trust_remote_code), {"model": model}
        else:  # the model export.json names, when it names one
            recorded = recorded_model(input)
            if recorded is None:
                raise ValueError(
                    "give --model or --like ("
                    + (
                        f"{input / 'export.json'} names no model)"
                        if input.is_dir()
                        else f"{input} is a file: no export.json names its model)"
                    )
                )
            meta = {"model": recorded[0], **({"model_revision": recorded[1]} if recorded[1] else {})}
            typer.echo(f"model: {recorded[0]} (from {input / 'export.json'})", err=True)
            try:
                vocabulary = model_vocabulary(recorded[0], trust_remote_code)
            except SpladekitError as exc:
                raise ValueError(f"{exc} (the model {input / 'export.json'} names; give --model or --like)") from exc
        from spladekit.index.writer import parse_size

        budget = None if memory_budget is None else parse_size(memory_budget)
        written = import_to_index(format, input, vocabulary, out, scale=scale, metadata=meta, memory_budget=budget)
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    typer.echo(f"wrote {written}")
