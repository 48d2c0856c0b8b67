"""``spladekit demo``: SPLADE (default ``rasyosef/splade-tiny``) vs BM25 on SciFact test."""

from __future__ import annotations

from pathlib import Path

from spladekit.data.beir import load_beir
from spladekit.io import write_json
from spladekit.model.encoder import SpladeEncoder
from spladekit.pipeline import SystemResult, evaluate_bm25, evaluate_splade, write_system
from spladekit.plots import per_query_comparison

QUALITY_COLUMNS = ("nDCG@10", "MRR@10", "R@100", "R@1000")
TABLE_COLUMNS = ("nDCG@10", "MRR@10", "R@100", "R@1000", "avg_query_terms", "avg_doc_terms", "flops", "wall_time_s")


def format_table(results: list[SystemResult]) -> str:
    """A Markdown table of the systems' metrics (columns :data:`TABLE_COLUMNS`; '-' where absent)."""
    header = "| system | " + " | ".join(TABLE_COLUMNS) + " |"
    lines = [header, "|" + "---|" * (len(TABLE_COLUMNS) + 1)]
    for result in results:
        values = dict(result.metrics, wall_time_s=result.seconds)
        cells = []
        for column in TABLE_COLUMNS:
            value = values.get(column)
            cells.append("-" if value is None else f"{value:.4f}" if column in QUALITY_COLUMNS else f"{value:.1f}")
        lines.append(f"| {result.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_demo(model: str, data: str, out: Path, batch_size: int = 32) -> list[SystemResult]:
    """Evaluate ``model`` and BM25 on ``data`` (test split); write runs, metrics, table and plot."""
    out = Path(out)
    dataset = load_beir(data, "test")
    print(f"dataset {dataset.path}: {len(dataset.corpus)} documents, {len(dataset.queries)} judged test queries")
    encoder = SpladeEncoder.from_pretrained(model, batch_size=batch_size)
    print(f"model {model}: vocabulary {encoder.vocab_size}, max lengths q/d "
          f"{encoder.metadata.query_max_length}/{encoder.metadata.doc_max_length}, head {encoder.model.head_impl}")
    name = Path(model).name or model
    splade = evaluate_splade(encoder, dataset, name=name)
    bm25 = evaluate_bm25(dataset)
    results = [splade, bm25]
    for result in results:
        write_system(result, out / result.name)
    table = format_table(results)
    (out).mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", {r.name: dict(r.metrics, wall_time_s=r.seconds) for r in results})
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    per_query_comparison({r.name: r.per_query["nDCG@10"] for r in results}, "nDCG@10", out / "per_query_ndcg10.png",
                         title=f"{dataset.name} test: per-query nDCG@10")
    print(table)
    print(f"outputs in {out}/")
    return results
