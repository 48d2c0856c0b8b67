"""Sparsity regularisers side by side in one run, and pruning rules at equal active terms.

Part 1, the regularisers: the fine-tuning recipe of the demo (``configs/demo.yaml``: splade-tiny,
SciFact train with BM25 negatives, 10 % of the training queries held out, batch 32, lr 2e-4, λ
warm-up over the first third of the steps) trained once per arm, each arm only changing
``regularizer.*``: the FLOPS baseline of the demo (λ_q = λ_d = 1e-3) and each new regulariser
(``flops_l0`` with τ = 32, ``idf_flops``, ``df_flops`` with α = 0.1, β = 2, re-estimated every 25
steps from 500 training documents) at λ = 3e-3 and 1e-2 (L1 with ``--arm "l1 3e-4"``). The
strengths come from the start model's penalty per term: for a term in a share x of the documents,
DF-FLOPS at α = 0.1, β = 2 weighs its FLOPS share by a(x)² ≈ 0.7 at x = 0.3, 0.25 at 0.1, 0.01 at
0.01, and IDF-aware FLOPS by 1/idf² ≈ 0.7, 0.19, 0.05 — λ = 3e-3 puts about 2× the baseline's
price on the frequent terms that make most of the FLOPS and less on the rare ones, 1e-2 about 7×.
The demo's dev selection is left out
(``eval_every: 0``): every arm's *final* model is evaluated, so the table compares regularisers,
not what a selection on 81 held-out queries picked. Each final model is evaluated on the SciFact
test split (300 queries, 5,183 documents, exact search, k = 100, the demo's max lengths 64/128):
nDCG@10 with its standard error over queries (``std / sqrt(n)``; and for each arm the paired
difference to the baseline with its standard error), mean FLOPS (``Σ_j p_q(j)·p_d(j)``,
:func:`spladekit.evaluate.efficiency.flops`) and active terms per query and per document. The
target of the sparsity work: an arm within one standard error of the baseline's nDCG@10 at ≤ 0.7×
its FLOPS.

Part 2, pruning at encoding (:mod:`spladekit.model.pruning`): the baseline model's document vectors
pruned by ``top_k``, ``mass``, ``max_ratio`` and ``threshold``, each rule's value found by bisection
so that the mean active terms per document match a few levels (shares of the unpruned mean); the
queries unpruned; nDCG@10 per rule per level (exact search over an index of the pruned vectors).

Outputs under ``--work``: one folder per arm (the training run, its test index, ``eval.json``; a
finished arm is not redone), ``regularizers.json`` (every number), ``regularizers.png`` (nDCG@10
against FLOPS, the baseline marked, by :func:`spladekit.plots.quality_vs_flops`).

Usage::

    PYTHONPATH=src nice -n 5 python benchmarks/regularizers.py --work W [--steps 100] [--arm NAME ...] [--pilot]

``--pilot`` trains the chosen arms only (no test evaluation) and prints the last training record's
sparsity (a way to choose strengths). ``--steps`` below the demo's 100 scales the λ and learning-rate
warm-ups with it (a third and a tenth of the steps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import numpy as np  # noqa: E402

# name: regularizer settings (the demo's kind flops, λ_q = λ_d = 1e-3, is the baseline)
DF = {"alpha": 0.1, "beta": 2.0, "refresh_every": 25, "sample_docs": 500}
ARMS: dict[str, dict] = {
    "flops 1e-3 (baseline)": {"kind": "flops", "lambda_q": 1e-3, "lambda_d": 1e-3},
    "flops_l0 τ=32 3e-3": {"kind": "flops_l0", "threshold": 32, "lambda_q": 3e-3, "lambda_d": 3e-3},
    "flops_l0 τ=32 1e-2": {"kind": "flops_l0", "threshold": 32, "lambda_q": 1e-2, "lambda_d": 1e-2},
    "idf_flops 3e-3": {"kind": "idf_flops", "lambda_q": 3e-3, "lambda_d": 3e-3},
    "idf_flops 1e-2": {"kind": "idf_flops", "lambda_q": 1e-2, "lambda_d": 1e-2},
    "df_flops 3e-3": {"kind": "df_flops", "df": DF, "lambda_q": 3e-3, "lambda_d": 3e-3},
    "df_flops 1e-2": {"kind": "df_flops", "df": DF, "lambda_q": 1e-2, "lambda_d": 1e-2},
    "l1 3e-4": {"kind": "l1", "lambda_q": 3e-4, "lambda_d": 3e-4},
}
DEFAULT_ARMS = [name for name in ARMS if not name.startswith("l1")]  # L1 on request (--arm): one more training
BASELINE = "flops 1e-3 (baseline)"
LEVELS = (0.6, 0.4, 0.25)  # shares of the baseline's mean active terms per document
RULES = ("top_k", "mass", "max_ratio", "threshold")
TARGET_FLOPS_SHARE = 0.7


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in name).strip("-")


def arm_config(name: str, steps: int):
    """The demo's config with the arm's regulariser, no dev selection, ``steps`` optimiser steps."""
    from spladekit.train.config import load_config

    reg = dict(ARMS[name])
    overrides = [
        "eval_every=0",
        "validate_every=0",
        "curves=false",
        f"steps={steps}",
        f"warmup_steps={max(1, round(steps / 10))}",
        f"regularizer.warmup_steps={max(1, round(steps / 3))}",
    ]
    config = load_config(HERE.parent / "configs" / "demo.yaml", overrides)
    data = config.model_dump()
    data["regularizer"] = {**data["regularizer"], **reg}
    return type(config).model_validate(data)


def train_arm(name: str, steps: int, work: Path, examples) -> tuple:
    from spladekit.train import train

    config = arm_config(name, steps)
    began = time.perf_counter()
    result = train(config, work / slug(name) / "train", examples=examples, show_progress=False)
    seconds, timing = time.perf_counter() - began, work / slug(name) / "train_s.json"
    if not result.already_done:
        timing.write_text(json.dumps({"train_s": seconds, "load": os.getloadavg()}))
    elif timing.exists():
        seconds = json.loads(timing.read_text())["train_s"]
    return config, result, seconds


def standard_error(values) -> float:
    values = np.asarray(list(values), dtype=np.float64)
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def evaluate_arm(name: str, config, model_dir: Path, work: Path, dataset) -> dict:
    """Test-split nDCG@10 (per query kept), FLOPS and active terms of an arm's final model (cached)."""
    from spladekit.evaluate.retrieval import evaluate_splade
    from spladekit.model.encoder import SpladeEncoder

    cache = work / slug(name) / "eval.json"
    if cache.exists():
        return json.loads(cache.read_text())
    encoder = SpladeEncoder.from_pretrained(
        model_dir,
        batch_size=32,
        query_max_length=config.model.query_max_length,
        doc_max_length=config.model.doc_max_length,
    )
    began = time.perf_counter()
    result = evaluate_splade(
        encoder, dataset, k=100, measures=["nDCG@10"], show_progress=False, name=name, index=work / slug(name) / "index"
    )
    per_query = result.per_query["nDCG@10"]
    record = {
        "arm": name,
        "nDCG@10": result.metrics["nDCG@10"],
        "se": standard_error(per_query.values()),
        "flops": result.metrics["flops"],
        "avg_query_terms": result.metrics["avg_query_terms"],
        "avg_doc_terms": result.metrics["avg_doc_terms"],
        "per_query": per_query,
        "eval_s": time.perf_counter() - began,
        "regularizer": ARMS[name],
    }
    cache.write_text(json.dumps(record))
    return record


def paired(record: dict, base: dict) -> tuple[float, float]:
    """Mean and standard error of the per-query nDCG@10 difference ``arm − baseline``."""
    qids = sorted(base["per_query"])
    diff = [record["per_query"].get(q, 0.0) - base["per_query"][q] for q in qids]
    return float(np.mean(diff)), standard_error(diff)


# ----------------------------------------------------------------------------------- pruning
def search_ndcg(docs, doc_ids, queries, qids, dataset, folder: Path) -> tuple[float, float, dict]:
    """nDCG@10 (and its standard error) of exact search over ``docs`` with the query vectors ``queries``."""
    import shutil

    from spladekit.evaluate.efficiency import efficiency_stats
    from spladekit.evaluate.metrics import evaluate
    from spladekit.evaluate.retrieval import conventions_for
    from spladekit.index.index import Index

    shutil.rmtree(folder, ignore_errors=True)
    index = Index.from_vectors(folder, docs, doc_ids)
    run = index.search(queries, k=100, query_ids=qids).run
    per_query: dict = {}
    metrics = evaluate(run, dataset.qrels, ["nDCG@10"], conventions_for(dataset, None), per_query=per_query)
    del index
    shutil.rmtree(folder, ignore_errors=True)
    return metrics["nDCG@10"], standard_error(per_query["nDCG@10"].values()), efficiency_stats(queries, docs)


def rule_for_level(docs, kind: str, target: float):
    """The rule of ``kind`` whose pruned documents have mean active terms closest to ``target`` (bisection)."""
    from spladekit.model.pruning import PruningRule, prune

    def mean_terms(value) -> float:
        return prune(docs, PruningRule(kind=kind, value=value)).nnz / docs.shape[0]

    if kind == "top_k":
        lo, hi = 1, int(np.diff(docs.indptr).max())
        while lo < hi:  # the smallest k reaching the target
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if mean_terms(mid) < target else (lo, mid)
        best = min((k for k in (lo - 1, lo) if k >= 1), key=lambda k: abs(mean_terms(k) - target))
        return PruningRule(kind=kind, value=best)
    lo, hi = {"mass": (1e-6, 1.0), "max_ratio": (0.0, 1.0), "threshold": (0.0, float(docs.data.max()))}[kind]
    increasing = kind == "mass"  # more mass kept: more terms; a larger ratio or threshold: fewer
    for _ in range(40):
        mid = (lo + hi) / 2
        if (mean_terms(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return PruningRule(kind=kind, value=round((lo + hi) / 2, 6) if kind != "top_k" else lo)


def pruning_table(config, model_dir: Path, work: Path, dataset) -> list[dict]:
    """Each rule at each level of :data:`LEVELS` on the baseline's test index (its documents)."""
    from spladekit.index.index import Index
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.pruning import prune

    index = Index.open(work / slug(BASELINE) / "index")
    docs, doc_ids = index.docs.astype(np.float32).tocsr(), list(index.doc_ids)
    encoder = SpladeEncoder.from_pretrained(
        model_dir,
        batch_size=32,
        query_max_length=config.model.query_max_length,
        doc_max_length=config.model.doc_max_length,
    )
    qids = sorted(q for q in dataset.queries if q in dataset.qrels)
    queries = encoder.encode_queries([dataset.queries[q] for q in qids])
    scratch = work / "pruning-index"
    full, full_se, full_eff = search_ndcg(docs, doc_ids, queries, qids, dataset, scratch)
    rows = [{"rule": "none", "level": 1.0, "value": None, "nDCG@10": full, "se": full_se, **full_eff}]
    unpruned = docs.nnz / docs.shape[0]
    for level in LEVELS:
        for kind in RULES:
            rule = rule_for_level(docs, kind, level * unpruned)
            ndcg, se, eff = search_ndcg(prune(docs, rule), doc_ids, queries, qids, dataset, scratch)
            rows.append({"rule": kind, "level": level, "value": rule.value, "nDCG@10": ndcg, "se": se, **eff})
            print(
                f"  pruning {kind}={rule.value} (level {level}): nDCG@10 {ndcg:.4f} ± {se:.4f}, "
                f"doc terms {eff['avg_doc_terms']:.1f}",
                flush=True,
            )
    return rows


# ----------------------------------------------------------------------------------- report
def table(records: list[dict]) -> str:
    base = next(r for r in records if r["arm"] == BASELINE)
    lines = [
        "| arm | nDCG@10 ± SE | Δ vs baseline (paired SE) | FLOPS | × baseline FLOPS | query terms | doc terms | "
        "train s | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        delta, delta_se = paired(r, base)
        ratio = r["flops"] / base["flops"]
        met = r["arm"] != BASELINE and r["nDCG@10"] >= base["nDCG@10"] - base["se"] and ratio <= TARGET_FLOPS_SHARE
        lines.append(
            f"| {r['arm']} | {r['nDCG@10']:.4f} ± {r['se']:.4f} | {delta:+.4f} ({delta_se:.4f}) | "
            f"{r['flops']:.2f} | {ratio:.2f} | {r['avg_query_terms']:.1f} | {r['avg_doc_terms']:.1f} | "
            f"{r.get('train_s', float('nan')):.0f} | {'met' if met else ('—' if r['arm'] == BASELINE else 'no')} |"
        )
    return "\n".join(lines)


def pruning_markdown(rows: list[dict]) -> str:
    lines = [
        "| level (× unpruned doc terms) | rule=value | doc terms | nDCG@10 ± SE | FLOPS |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        shown = "none" if r["rule"] == "none" else f"{r['rule']}={r['value']:g}"
        lines.append(
            f"| {r['level']:g} | {shown} | {r['avg_doc_terms']:.1f} | {r['nDCG@10']:.4f} ± {r['se']:.4f} | "
            f"{r['flops']:.2f} |"
        )
    return "\n".join(lines)


def plot(records: list[dict], path: Path) -> Path:
    from spladekit.plots import quality_vs_flops

    points = {r["arm"]: [(r["flops"], r["nDCG@10"])] for r in records}
    errors = {r["arm"]: [r["se"]] for r in records}
    return quality_vs_flops(
        points,
        path,
        xlabel="mean FLOPS (SciFact test)",
        ylabel="nDCG@10 (SciFact test)",
        title="regularisers: nDCG@10 vs FLOPS (± 1 SE)",
        errors=errors,
        baseline=BASELINE,
        flops_share=TARGET_FLOPS_SHARE,
    )


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {"cpu": cpu, "cores": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--arm", action="append", choices=list(ARMS), help="arms to run (default: all but L1)")
    parser.add_argument("--pilot", action="store_true", help="train only; print the last record's sparsity")
    parser.add_argument("--no-pruning", action="store_true")
    args = parser.parse_args(argv)
    from spladekit.data.beir import load_beir
    from spladekit.data.resolve import resolve_dataset
    from spladekit.train.data import load_training_examples

    args.work.mkdir(parents=True, exist_ok=True)
    arms = args.arm or DEFAULT_ARMS
    print(json.dumps({"machine_start": machine(), "steps": args.steps, "arms": arms}), flush=True)
    examples = load_training_examples(arm_config(BASELINE, args.steps).data)  # BM25 negatives mined once
    dataset = None if args.pilot else load_beir(resolve_dataset("scifact"), "test")
    records, baseline_run = [], None
    for name in arms:
        config, result, seconds = train_arm(name, args.steps, args.work, examples)
        last = result.last_metrics
        print(
            f"{name}: trained {result.steps} steps in {seconds:.0f} s (done before: {result.already_done}); "
            f"last batch: active_q {last.get('active_q', float('nan')):.1f}, active_d {last.get('active_d', float('nan')):.1f}, "
            f"batch_flops {last.get('batch_flops', float('nan')):.2f}, loss_rank {last.get('loss_rank', float('nan')):.3f}",
            flush=True,
        )
        if args.pilot:
            continue
        record = evaluate_arm(name, config, result.model_dir, args.work, dataset)
        record["train_s"] = seconds
        records.append(record)
        if name == BASELINE:
            baseline_run = (config, result.model_dir)
        print(
            f"  test: nDCG@10 {record['nDCG@10']:.4f} ± {record['se']:.4f}, FLOPS {record['flops']:.2f}, "
            f"terms q/d {record['avg_query_terms']:.1f}/{record['avg_doc_terms']:.1f}",
            flush=True,
        )
    if args.pilot or not any(r["arm"] == BASELINE for r in records):
        return 0
    print("\n" + table(records), flush=True)
    plot(records, args.work / "regularizers.png")
    rows = [] if args.no_pruning else pruning_table(*baseline_run, args.work, dataset)
    if rows:
        print("\n" + pruning_markdown(rows), flush=True)
    out = {
        "machine_end": machine(),
        "steps": args.steps,
        "arms": [{k: v for k, v in r.items() if k != "per_query"} for r in records],
        "pruning": rows,
    }
    (args.work / "regularizers.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({"machine_end": out["machine_end"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
