"""Two-step search against exact search, side by side in one run (``spladekit.index.two_step``).

Anchor: exact search as users get it (``ExactConfig()``: MaxScore over blocks, the default), on the
same folder, the same queries, in the same process, interleaved with two-step query by query
(alternating which of the two runs first: the second runs on warm caches). Printed: each setting's
CPU ms a query, one query per call, and ``exact ÷ two-step`` (the speed-up), with recall@10 (and
recall@k) of two-step's top-k against exact's.

Corpus: ``synthetic-N`` of ``benchmarks/retrieval.py`` (document ``i`` = SciFact document ``i mod
5,183``'s splade-tiny vector, each term kept with probability 0.8, weights × U(0.8, 1.2), quantised
to integer impacts ``round(100 w)``), built by its build phase under ``--work`` (reused when
present); queries: the SciFact test queries, quantised the same way. For each pruning rule
(``--rule``) the pruned copy is built in a process of its own (time, process CPU, peak RSS, entries
kept), then searched in another: recall over every query (batch calls, untimed), timing over the
first ``--one`` queries one per call, for k = 10 and 1000 and each ``--candidates`` c (at least k
are rescored) and each first-step query rule (``--first-query``; ``none`` = the whole query).

SciFact (``--scifact``): the real 5,183 documents' splade-tiny vectors (float32, not quantised) and
the test qrels: nDCG@10 of exact search and of two-step at each rule and c, and their difference.

Usage::

    PYTHONPATH=src python benchmarks/two_step.py --docs 1000000 --work W --rule top_k=32 --rule top_k=64 \\
        --candidates 100 --candidates 1000 --scifact --json W/two_step.json

``--busy`` runs a busy process (one core spinning) beside the timed searches.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import retrieval  # noqa: E402  (the corpora, queries and helpers of the retrieval benchmark)


def folder(corpus: str, work: Path) -> Path:
    return work / corpus / "spladekit"


# ----------------------------------------------------------------------------------- phases (one process each)
def phase_copy(corpus: str, work: Path, rule: str) -> dict:
    """Build the pruned copy of ``rule`` (replacing the stored one): time, CPU, peak RSS, entries."""
    from spladekit.index.index import Index

    index = Index.open(folder(corpus, work))
    base = retrieval.peak_rss()
    with retrieval.Clock() as c:
        copy = index.pruned(rule)
    target = folder(corpus, work) / "pruned"
    return {
        "rule": rule,
        "build_s": c.wall,
        "build_cpu_s": c.cpu,
        "rss": retrieval.peak_rss(),
        "base_rss": base,
        "nnz": int(copy.postings.nnz),
        "index_nnz": int(index.docs.nnz),
        "bytes": retrieval.folder_bytes(target),
    }


def exact_hits(index, q, work: Path, corpus: str) -> dict[int, list[list[str]]]:
    """Exact top-k ids of every query, k = 10 and 1000 (computed once, kept under ``work``)."""
    from spladekit.index.searcher import ExactConfig

    path = work / corpus / "two-step-exact.json"
    if path.exists():
        return {int(k): v for k, v in json.loads(path.read_text()).items()}
    hits = {k: [[d for d, _ in h] for h in index.search(q, k=k, searcher=ExactConfig()).hits] for k in (10, 1000)}
    path.write_text(json.dumps(hits))
    return hits


def recall(approx: list[list[str]], exact: list[list[str]], k: int) -> float:
    values = [len(set(e[:k]) & set(a[:k])) / len(e[:k]) for a, e in zip(approx, exact) if e]
    return float(np.mean(values))


def interleaved(index, q, config, k: int, n: int) -> tuple[float, float]:
    """CPU ms a query of exact and of ``config``, one query per call, interleaved (alternating order)."""
    from spladekit.index.searcher import ExactConfig

    exact, two = [], []
    pair = ((ExactConfig(), exact), (config, two))
    for i in range(n):
        for searcher, into in pair if i % 2 == 0 else pair[::-1]:
            began = time.process_time()
            index.search(q[i : i + 1], k=k, searcher=searcher)
            into.append(time.process_time() - began)
    return 1000 * float(np.mean(exact)), 1000 * float(np.mean(two))


def phase_search(
    corpus: str, work: Path, candidates: list[int], first_queries: list[str | None], one: int
) -> list[dict]:
    """Every (k, c, first-query rule) of the stored copy: recall over all queries, interleaved timing."""
    from spladekit.index.index import Index
    from spladekit.index.two_step import TwoStepConfig

    q, _ = retrieval.queries(corpus)
    index = Index.open(folder(corpus, work))
    truth = exact_hits(index, q, work, corpus)
    for k in (10, 1000):  # untimed: the pages both read and exact's block maxima (filled as terms are queried)
        index.search(q, k=k)
        index.search(q, k=k, searcher=TwoStepConfig(candidates=k, first_query=None))
    rule = index.pruned().rule
    rows = []
    for k in (10, 1000):
        for c in sorted({max(c, k) for c in candidates}):
            for fq in first_queries:
                config = TwoStepConfig(candidates=c, first_query=fq)
                got = [[d for d, _ in h] for h in index.search(q, k=k, searcher=config).hits]
                exact_ms, two_ms = interleaved(index, q, config, k, min(one, q.shape[0]))
                rows.append(
                    {
                        "rule": f"{rule['kind']}={rule['value']}",
                        "k": k,
                        "c": c,
                        "first_query": fq,
                        "recall@10": recall(got, truth[k], 10),
                        f"recall@{k}": recall(got, truth[k], k),
                        "exact_ms": exact_ms,
                        "two_step_ms": two_ms,
                        "speedup": exact_ms / two_ms,
                        "load": os.getloadavg()[0],
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def phase_scifact(work: Path, rules: list[str], candidates: list[int], first_queries: list[str | None]) -> list[dict]:
    """nDCG@10 of exact and two-step on SciFact (float32 splade-tiny vectors, the test qrels), k = 10
    (so that ``c`` decides the candidates: at least k are rescored)."""
    from spladekit.data.beir import load_beir
    from spladekit.evaluate.metrics import evaluate
    from spladekit.index.index import Index
    from spladekit.index.two_step import TwoStepConfig

    docs, q, doc_ids, query_ids = retrieval.scifact_vectors()
    qrels = load_beir(retrieval.shared() / "data/beir/scifact", "test").qrels
    out = work / "scifact-two-step"
    index = Index.open(out) if (out / "index.json").exists() else Index.from_vectors(out, docs, doc_ids)
    exact = index.search(q, k=10, query_ids=query_ids)
    base = evaluate(exact.run, qrels, ["nDCG@10"])["nDCG@10"]
    rows = []
    for rule in rules:
        for c in candidates:
            for fq in first_queries:
                result = index.search(
                    q, k=10, query_ids=query_ids, searcher=TwoStepConfig(first=rule, candidates=c, first_query=fq)
                )
                value = evaluate(result.run, qrels, ["nDCG@10"])["nDCG@10"]
                rows.append(
                    {
                        "rule": rule,
                        "c": c,
                        "first_query": fq,
                        "exact_ndcg@10": base,
                        "two_step_ndcg@10": value,
                        "difference": value - base,
                        "copy_share": index.pruned().postings.nnz / index.docs.nnz,
                        "recall@10": recall(
                            [[d for d, _ in h] for h in result.hits], [[d for d, _ in h] for h in exact.hits], 10
                        ),
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


PHASES = {"copy": phase_copy, "search": phase_search}


# ----------------------------------------------------------------------------------- driver
def run_phase(name: str, corpus: str, work: Path, extra: dict, busy: bool):
    """A phase in a fresh process (its own peak RSS); ``busy``: one spinning process beside it."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        cmd = [
            sys.executable,
            __file__,
            "--phase",
            name,
            "--corpus",
            corpus,
            "--work",
            str(work),
            "--extra",
            json.dumps(extra),
        ]
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
        )
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if done.returncode != 0:
        raise RuntimeError(f"phase {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(copies: list[dict], rows: list[dict], scifact: list[dict]) -> str:
    lines = [
        "| rule | entries kept | copy build CPU s (peak RSS GB) | k | c | first-step query | exact ms | two-step ms | exact ÷ two-step | "
        "recall@10 | recall@k |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_rule = {c["rule"]: c for c in copies}
    for r in rows:
        c = by_rule.get(r["rule"], {})
        share = f"{c['nnz'] / c['index_nnz']:.3f}" if c else ""
        build = f"{c['build_cpu_s']:.0f} ({c['rss'] / 1e9:.2f})" if c else ""
        mark = " **✓**" if r["speedup"] >= 3 and r["recall@10"] >= 0.99 else ""
        at_k = r[f"recall@{r['k']}"]
        lines.append(
            f"| {r['rule']} | {share} | {build} | {r['k']} | {r['c']} | {r['first_query'] or 'whole'} | {r['exact_ms']:.2f} | "
            f"{r['two_step_ms']:.2f} | {r['speedup']:.2f}{mark} | {r['recall@10']:.4f} | {at_k:.4f} |"
        )
    if scifact:
        lines += [
            "",
            "| SciFact rule | c | first-step query | entries kept | nDCG@10 exact | nDCG@10 two-step | difference | recall@10 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in scifact:
            lines.append(
                f"| {s['rule']} | {s['c']} | {s['first_query'] or 'whole'} | {s['copy_share']:.3f} | {s['exact_ndcg@10']:.4f} | "
                f"{s['two_step_ndcg@10']:.4f} | {s['difference']:+.4f} | {s['recall@10']:.4f} |"
            )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=None, help="synthetic corpus size (its folder built when missing)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/spladekit-bench"))
    ap.add_argument("--rule", action="append", default=[], help="the pruned copy's rule, KIND=VALUE (repeat)")
    ap.add_argument("--candidates", type=int, action="append", default=[], help="c (repeat; at least k are rescored)")
    ap.add_argument(
        "--first-query", action="append", default=[], help="first-step query rule (repeat; 'none': the whole query)"
    )
    ap.add_argument("--one", type=int, default=100, help="queries timed one per call")
    ap.add_argument("--scifact", action="store_true", help="also nDCG@10 on SciFact (real vectors, qrels)")
    ap.add_argument("--busy", action="store_true", help="a busy process beside the timed phases")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--phase")
    ap.add_argument("--corpus")
    ap.add_argument("--extra", default="{}")
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args.corpus, args.work, **json.loads(args.extra)), default=float))
        return
    rules = args.rule or ["top_k=32"]
    candidates = args.candidates or [100, 300, 1000]
    first_queries = [None if f == "none" else f for f in (args.first_query or ["none"])]
    results = {"command": " ".join(sys.argv), "load_start": os.getloadavg(), "copies": [], "rows": [], "scifact": []}
    if args.docs:
        corpus = f"synthetic-{args.docs}"
        if not (folder(corpus, args.work) / "index.json").exists():
            results["build"] = retrieval.run_phase("build", corpus, args.work)
        for rule in rules:
            results["copies"].append(run_phase("copy", corpus, args.work, {"rule": rule}, False))
            results["rows"] += run_phase(
                "search",
                corpus,
                args.work,
                {"candidates": candidates, "first_queries": first_queries, "one": args.one},
                args.busy,
            )
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, default=float))
    if args.scifact:
        results["scifact"] = phase_scifact(args.work, rules, candidates, first_queries)
    results["load_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    print(table(results["copies"], results["rows"], results["scifact"]))
    print(f"\nload average at start {results['load_start']}, at end {results['load_end']}")


if __name__ == "__main__":
    main()
