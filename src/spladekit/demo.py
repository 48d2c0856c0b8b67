"""``spladekit demo``: SPLADE (default ``rasyosef/splade-tiny``) vs BM25 on SciFact test, then
(by default) fine-tune the model on SciFact train and evaluate again: a before/after table.

The training recipes are :data:`DEMO_RECIPES` (the same as ``configs/demo.yaml`` and
``configs/scifact-splade-tiny.yaml``): the default one is sized for 2 CPU cores (its timings:
docs/demo.md), ``full`` is the stronger GPU recipe. Both evaluate retrieval on held-out training
queries during training (``eval_every``) and the demo scores the best checkpoint by that dev nDCG@10
(``train/model/``) on the test split; the final model (``train/last/``) gets its own row when it differs.
"""

from __future__ import annotations

import time
from pathlib import Path

from spladekit.data.beir import load_beir
from spladekit.evaluate.retrieval import SystemResult, evaluate_splade
from spladekit.evaluate.systems import evaluate_bm25, write_system
from spladekit.index.index import Index
from spladekit.io import atomic_write, ensure_folder, write_json
from spladekit.model.encoder import SpladeEncoder
from spladekit.plots import per_query_deltas

QUALITY_COLUMNS = ("nDCG@10", "MRR@10", "R@100", "R@1000")
TABLE_COLUMNS = (
    "nDCG@10",
    "MRR@10",
    "R@100",
    "R@1000",
    "avg_query_terms",
    "avg_doc_terms",
    "flops",
    "query_ms",
    "wall_time_s",
)
COLUMN_LABELS = {
    "avg_query_terms": "avg query terms",
    "avg_doc_terms": "avg doc terms",
    "flops": "FLOPS",
    "query_ms": "query ms",
    "wall_time_s": "wall time (s)",
}
COLUMN_FORMATS = {**{c: "{:.4f}" for c in QUALITY_COLUMNS}, "query_ms": "{:.3f}"}  # others: one decimal


def format_table(results: list[SystemResult]) -> str:
    """A Markdown table of the systems' metrics (columns :data:`TABLE_COLUMNS`; '-' where absent)."""
    header = "| system | " + " | ".join(COLUMN_LABELS.get(c, c) for c in TABLE_COLUMNS) + " |"
    lines = [header, "|" + "---|" * (len(TABLE_COLUMNS) + 1)]
    for result in results:
        values = dict(result.metrics, wall_time_s=result.seconds)
        cells = []
        for column in TABLE_COLUMNS:
            value = values.get(column)
            cells.append("-" if value is None else COLUMN_FORMATS.get(column, "{:.1f}").format(value))
        lines.append(f"| {result.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: Output folders of the rows of :func:`query_side_rows`, in order.
EXTRA_FOLDERS = ["inference_free", "fused_rrf", "fused_minmax"]

#: Training recipes of the demo (kept equal to configs/demo.yaml and configs/scifact-splade-tiny.yaml by a test).
DEMO_RECIPES = {
    "default": {
        "model": {"query_max_length": 64, "doc_max_length": 128},
        "data": {
            "format": "beir",
            "split": "train",
            "negatives": "bm25",
            "num_negatives": 1,
            "validation_fraction": 0.1,
        },
        "regularizer": {"kind": "flops", "lambda_q": 1e-3, "lambda_d": 1e-3, "warmup_steps": 33},
        "steps": 100,
        "batch_size": 32,
        "lr": 2e-4,
        "warmup_steps": 10,
        "precision": "fp32",
        "validate_every": 50,
        "seed": 0,
        "eval_every": 50,
        "dev": {"metric": "nDCG@10", "k": 100, "max_docs": 1000},
    },
    "full": {
        "model": {"query_max_length": 64, "doc_max_length": 256},
        "data": {
            "format": "beir",
            "split": "train",
            "negatives": "bm25",
            "num_negatives": 1,
            "validation_fraction": 0.1,
        },
        "regularizer": {"kind": "flops", "lambda_q": 1e-3, "lambda_d": 1e-3, "warmup_steps": 200},
        "steps": 600,
        "batch_size": 64,
        "lr": 5e-5,
        "warmup_steps": 60,
        "precision": "bf16",
        "checkpoint_every": 200,
        "validate_every": 100,
        "seed": 0,
        "eval_every": 100,
        "dev": {"metric": "nDCG@10", "k": 100},
    },
}


def demo_config(model: str, data: str, full: bool = False, overrides: list[str] | None = None):
    """The demo's :class:`~spladekit.train.config.TrainConfig` for ``model`` on ``data`` (train split)."""
    import copy

    from spladekit.train.config import TrainConfig, apply_overrides

    recipe = copy.deepcopy(DEMO_RECIPES["full" if full else "default"])
    recipe["model"]["path"] = model
    recipe["data"]["path"] = data
    return TrainConfig.model_validate(apply_overrides(recipe, overrides or []))


def query_side_rows(
    encoder: SpladeEncoder, splade: SystemResult, bm25: SystemResult, dataset, latency_queries: int = 100
) -> list[SystemResult]:
    """The demo's query-side rows, built from one SPLADE system (``encoder`` and its result ``splade``):

    - ``inference-free``: ``encoder``'s documents (the same index folder, ``splade.index_folder``)
      with an inference-free query side, IDF of the corpus (:mod:`spladekit.model.inference_free`);
    - ``fused RRF`` and ``fused min-max``: ``splade`` fused with ``bm25``
      (:mod:`spladekit.index.fusion`: RRF k = 60; min-max normalised CombSUM, equal weights).

    ``query_ms`` (median ms per query, batch of one, first ``latency_queries`` test queries) is
    measured for ``splade`` and the inference-free row side by side and set on both. To add a row,
    append another :class:`SystemResult` here.
    """
    import copy

    from spladekit.evaluate.systems import evaluate_fused, query_latency
    from spladekit.index.fusion import FusionConfig
    from spladekit.model.inference_free import make_inference_free

    started = time.perf_counter()
    free = copy.copy(encoder)  # shares the model and tokenizer; its own metadata and query side
    free.metadata = copy.deepcopy(encoder.metadata)
    make_inference_free(free, list(dataset.corpus.values()))
    idf_seconds = time.perf_counter() - started
    free_row = evaluate_splade(
        free,
        dataset,
        name="inference-free (IDF queries, same docs)",
        index=Index.open(splade.index_folder),
        show_progress=False,
    )
    free_row.seconds += idf_seconds
    texts = list(dataset.queries.values())[:latency_queries]
    warmup = min(5, len(texts) // 2)
    latency = query_latency({"splade": encoder, "inference-free": free}, texts, warmup=warmup)
    splade.metrics["query_ms"], free_row.metrics["query_ms"] = latency["splade"], latency["inference-free"]
    source = splade.name
    rows = [
        free_row,
        evaluate_fused([splade, bm25], dataset, f"fused RRF ({source} + bm25)", FusionConfig(method="rrf")),
        evaluate_fused(
            [splade, bm25], dataset, f"fused min-max ({source} + bm25)", FusionConfig(method="score", norm="min-max")
        ),
    ]
    print(
        f"query encoding, median per query (batch 1, {len(texts) - warmup} timed queries, side by side): "
        f"{source} {latency['splade']:.2f} ms, inference-free {latency['inference-free']:.3f} ms "
        f"({latency['splade'] / max(latency['inference-free'], 1e-9):.0f}× faster)"
    )
    return rows


def _load(model: str, data: str, batch_size: int, **encoder_options):
    dataset = load_beir(data, "test")
    print(f"dataset {dataset.path}: {len(dataset.corpus)} documents, {len(dataset.queries)} judged test queries")
    encoder = SpladeEncoder.from_pretrained(model, batch_size=batch_size, **encoder_options)
    meta = encoder.metadata
    print(
        f"model {model}: vocabulary {encoder.vocab_size}, max lengths q/d {meta.query_max_length}/"
        f"{meta.doc_max_length}, head {getattr(encoder.model, 'head_impl', 'its own modules')}"
    )
    return dataset, encoder


#: What a trained demo writes beside ``train/`` and ``index/``: removed when a new one writes its baseline.
RESULT_NAMES = ("summary.json", "table.md", "per_query_ndcg10.png", "before", "after", "last", "bm25", *EXTRA_FOLDERS)


def _remove_previous_results(out: Path) -> None:
    """Remove a previous demo's results from ``out`` (:data:`RESULT_NAMES`; ``train/``, whose checkpoints a
    training resumes from, and ``index/``, replaced whole, are kept), saying so."""
    import shutil

    found = [out / name for name in RESULT_NAMES if (out / name).exists()]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if found:
        print(f"removed the previous demo's results from {out}/ ({', '.join(p.name for p in found)}); train/ is kept")


def _report(
    results: list[SystemResult],
    folders: list[str],
    dataset,
    out: Path,
    extra: dict | None = None,
    written: tuple[str, ...] = (),
) -> None:
    """Write every system's outputs (but those in the folders ``written`` already), ``summary.json``,
    ``table.md`` and the per-query plot; print the table."""
    for system, folder in zip(results, folders):
        if folder not in written:
            write_system(system, out / folder)
    table = format_table(results)
    ensure_folder(out)
    summary = {r.name: dict(r.metrics, wall_time_s=r.seconds) for r in results}
    summary.update(extra or {})
    write_json(out / "summary.json", summary)
    with atomic_write(out / "table.md") as handle:
        handle.write(table + "\n")
    per_query_deltas(
        delta_pairs(results, folders),
        "nDCG@10",
        out / "per_query_ndcg10.png",
        title=f"{dataset.name} test: per-query nDCG@10, wins and losses",
    )
    print(table)
    for line in truncation_lines(results, len(dataset.corpus)):
        print(line)


#: The demo's per-query comparisons (``per_query_ndcg10.png``) as (baseline, compared) output folders:
#: fine-tuning, then fusion against BM25; without training, the SPLADE row against BM25 comes first.
DELTA_PAIRS = (("before", "after"), ("bm25", "fused_rrf"), ("bm25", "fused_minmax"))


def delta_pairs(
    results: list[SystemResult], folders: list[str], measure: str = "nDCG@10"
) -> list[tuple[str, str, dict]]:
    """``[(label A, label B, {qid: B − A})]`` of :data:`DELTA_PAIRS` (those whose two systems ran), from the
    systems' per-query values of ``measure`` (every judged query, 0 where unretrieved:
    :func:`spladekit.evaluate.metrics.evaluate`), for :func:`spladekit.plots.per_query_deltas`.

    ``folders`` are the systems' output folders, in the order of ``results``.
    """
    by_folder = dict(zip(folders, results))
    splade = "after" if "after" in by_folder else folders[0]
    wanted = list(DELTA_PAIRS) if splade == "after" else [("bm25", splade), *DELTA_PAIRS[1:]]
    labels = {"before": "before fine-tuning", "after": "fine-tuned", "bm25": "BM25"}
    labels.setdefault(splade, by_folder[splade].name)
    labels.update(
        fused_rrf=f"fused RRF ({labels[splade]} + BM25)", fused_minmax=f"fused min-max ({labels[splade]} + BM25)"
    )
    pairs = []
    for a, b in wanted:
        if a in by_folder and b in by_folder:
            values_a, values_b = by_folder[a].per_query[measure], by_folder[b].per_query[measure]
            deltas = {q: values_b.get(q, 0.0) - values_a.get(q, 0.0) for q in values_a.keys() | values_b.keys()}
            pairs.append((labels[a], labels[b], deltas))
    return pairs


def truncation_lines(results: list[SystemResult], documents: int) -> list[str]:
    """One line per count of truncated documents (``metrics["truncated_docs"]``), naming every system
    that truncated that many (the demo's SPLADE rows share their encoder settings: one line, not one
    a row)."""
    truncated: dict[int, list[str]] = {}
    for result in results:
        if result.metrics.get("truncated_docs"):
            truncated.setdefault(result.metrics["truncated_docs"], []).append(result.name)
    return [
        f"{', '.join(names)}: {count} of {documents} documents were longer than the document max length and truncated"
        for count, names in truncated.items()
    ]


def _model_record(model: str | Path) -> dict:
    """``index.json``'s model record for the demo's index, as ``spladekit index`` writes it."""
    from spladekit.data.resolve import resolve_model
    from spladekit.index.layout import model_record

    return model_record(model, resolve_model(str(model)))


def run_demo(
    model: str,
    data: str,
    out: Path,
    batch_size: int = 32,
    train: bool = True,
    full: bool = False,
    overrides: list[str] | None = None,
    trust_remote_code: bool = False,
) -> list[SystemResult]:
    """Evaluate ``model`` and BM25 on ``data`` (test split); with ``train``, fine-tune ``model`` on the
    train split (:func:`demo_config`) and evaluate the result the same way. Writes runs, metrics,
    the table (``table.md``), per-query plot and, with training, ``train/`` (curves, metrics, model).
    With training, ``before/`` and ``bm25/`` are written before training starts, so a demo stopped
    during training keeps its baseline evaluation (``summary.json`` and the table come at the end).
    ``trust_remote_code``: run the model folder's own code (the training config's ``model.trust_remote_code``).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    if train:
        trusted = ["model.trust_remote_code=true"] if trust_remote_code else []
        return _run_train_demo(model, data, out, batch_size, full, list(overrides or []) + trusted)
    dataset, encoder = _load(model, data, batch_size, trust_remote_code=trust_remote_code)
    splade = evaluate_splade(
        encoder, dataset, name=Path(model).name or model, index=out / "index", index_metadata=_model_record(model)
    )
    bm25 = evaluate_bm25(dataset)
    extra = query_side_rows(encoder, splade, bm25, dataset)
    results = [splade, bm25, *extra]
    _report(results, [r.name for r in results[:2]] + EXTRA_FOLDERS, dataset, out)
    print(f"outputs in {out}/")
    return results


def _run_train_demo(model: str, data: str, out: Path, batch_size: int, full: bool, overrides) -> list[SystemResult]:
    import time

    from spladekit.train import train as run_training

    config = demo_config(model, data, full, overrides)
    lengths = dict(query_max_length=config.model.query_max_length, doc_max_length=config.model.doc_max_length)
    name = Path(model).name or model
    dataset, before, bm25 = _train_demo_baseline(model, data, out, batch_size, config, lengths, name)
    print(
        f"fine-tuning on {data} train: {config.steps} steps, batch {config.batch_size}, lr {config.lr}, "
        f"FLOPS λ_q/λ_d {config.regularizer.lambda_q:g}/{config.regularizer.lambda_d:g}",
        flush=True,
    )
    started = time.perf_counter()
    result = run_training(config, out / "train")
    train_seconds = time.perf_counter() - started
    print(result.summary(), flush=True)  # as `spladekit train` ends
    after, fine_tuned, extra = _fine_tuned_systems(result, name, dataset, bm25, out, batch_size, config, lengths)
    systems = [before, *fine_tuned]
    folders = ["before", "after", "last"][: len(systems)]
    training = {
        "seconds": train_seconds,
        "steps": result.steps,
        "config": config.model_dump(mode="json"),
        "validation": result.validation,
        "alarms": result.alarms,
        "best": result.best,
        "dev": result.dev,
        "early_stopped": result.early_stopped,
    }
    _report(
        systems + [bm25, *extra],
        folders + ["bm25", *EXTRA_FOLDERS],
        dataset,
        out,
        {"training": training},
        written=("before", "bm25"),
    )
    delta = after.metrics["nDCG@10"] - before.metrics["nDCG@10"]
    print(
        f"fine-tuning: nDCG@10 {before.metrics['nDCG@10']:.4f} -> {after.metrics['nDCG@10']:.4f} ({delta:+.4f}), "
        f"doc active terms {before.metrics['avg_doc_terms']:.1f} -> {after.metrics['avg_doc_terms']:.1f}, "
        f"training {train_seconds:.0f} s"
    )
    if result.best:
        best = result.best
        print(
            f"model selected on the held-out training queries (dev {best['metric']} {best['value']:.4f} at step "
            f"{best['step']}); the test split was not looked at during training"
        )
    if result.curves:
        print(f"training curves: {result.curves}")
    print(f"outputs in {out}/")
    return systems + [bm25, *extra]


def _train_demo_baseline(model: str, data: str, out: Path, batch_size: int, config, lengths: dict, name: str):
    """The training demo's baseline, ``(dataset, before, bm25)``: the model before fine-tuning and BM25 evaluated,
    written to ``out/before`` and ``out/bm25`` (kept if training is stopped) and printed."""
    dataset, before_encoder = _load(
        model,
        data,
        batch_size,
        head_impl=config.model.head_impl,
        trust_remote_code=config.model.trust_remote_code,
        **lengths,
    )
    before = evaluate_splade(before_encoder, dataset, name=f"{name} (before)")
    del before_encoder
    bm25 = evaluate_bm25(dataset)
    # an interrupted rerun must not leave this run's baseline beside the last run's results
    _remove_previous_results(out)
    for system, folder in ((before, "before"), (bm25, "bm25")):  # kept if training is stopped
        write_system(system, out / folder)
    print(
        f"before fine-tuning: {before.name} nDCG@10 {before.metrics['nDCG@10']:.4f}, bm25 {bm25.metrics['nDCG@10']:.4f} "
        f"(runs and metrics in {out / 'before'}/ and {out / 'bm25'}/)",
        flush=True,
    )  # before the training's lines (stderr)
    return dataset, before, bm25


def _fine_tuned_systems(result, name: str, dataset, bm25, out: Path, batch_size: int, config, lengths: dict):
    """``(after, systems, extra)``: the selected model evaluated (indexed in ``out/index``), then the last step's
    model when it differs from the selected one (``systems``: after, and last if so), and the query-side rows."""
    best = result.best
    label = f"{name} (fine-tuned, best dev step {best['step']})" if best else f"{name} (fine-tuned)"
    trusted = config.model.trust_remote_code  # a model saved from one with its own classes carries their code
    after_encoder = SpladeEncoder.from_pretrained(
        result.model_dir, batch_size=batch_size, head_impl=config.model.head_impl, trust_remote_code=trusted, **lengths
    )
    after = evaluate_splade(
        after_encoder, dataset, name=label, index=out / "index", index_metadata=_model_record(result.model_dir)
    )
    extra = query_side_rows(after_encoder, after, bm25, dataset)
    systems = [after]
    # the final model differs from the selected one
    if best and result.last_dir is not None and best["step"] != result.steps:
        del after_encoder
        last_encoder = SpladeEncoder.from_pretrained(
            result.last_dir,
            batch_size=batch_size,
            head_impl=config.model.head_impl,
            trust_remote_code=trusted,
            **lengths,
        )
        systems.append(evaluate_splade(last_encoder, dataset, name=f"{name} (fine-tuned, last step {result.steps})"))
    return after, systems, extra
