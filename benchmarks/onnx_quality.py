"""Retrieval quality of the ONNX exports: nDCG@10 on SciFact (test) with float32 torch, ONNX float32 and int8.

Cases, same splade-tiny weights, same texts (corpus title + text, max length 256; test queries, 64):

    torch           spladekit SpladeEncoder (fused head), float32: the reference
    onnx            export_onnx, float32 (vocabulary tiles in the graph)
    onnx-int8       export_onnx(quantize="int8"): encoder products int8 (dynamic, per column) except the
                    transform's and the first/last layer's feed-forward down-projection, head float32
    onnx-int8-head  export_onnx(quantize="int8", quantize_head=True): the head's products int8 too

Documents and queries are encoded by the same case; scores are exact dot products (scipy sparse
product), the top 100 per query are evaluated with :func:`spladekit.evaluate.metrics.evaluate`.
Reported: nDCG@10 and its change against torch, and the encoding wall time of the corpus (one thread).

Usage::

    PYTHONPATH=src python benchmarks/onnx_quality.py                  # the whole corpus (5,183 documents)
    PYTHONPATH=src python benchmarks/onnx_quality.py --docs 2000      # a subset: the judged documents + the first others

Not a test: prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spladekit.data.beir import load_beir  # noqa: E402
from spladekit.evaluate.metrics import evaluate  # noqa: E402
from spladekit.model.encoder import SpladeEncoder  # noqa: E402
from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_of(queries, docs, qids, dids, k: int = 100) -> dict:
    """``{qid: {docid: score}}``, the top ``k`` documents of each query by dot product."""
    scores = (queries @ docs.T).toarray()
    run = {}
    for i, qid in enumerate(qids):
        top = np.argsort(-scores[i], kind="stable")[:k]
        run[qid] = {dids[j]: float(scores[i, j]) for j in top if scores[i, j] > 0}
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT.parent / "shared" / "models" / "splade-tiny")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "beir" / "scifact")
    parser.add_argument(
        "--docs", type=int, default=0, help="0: the whole corpus; else judged docs + the first others up to N"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_beir(args.data, "test")
    dids = list(data.corpus)
    if args.docs:
        judged = {d for rel in data.qrels.values() for d in rel}
        dids = [d for d in dids if d in judged] + [d for d in dids if d not in judged]
        dids = dids[: max(args.docs, len(judged))]
    texts = [data.corpus[d] for d in dids]
    qids = list(data.queries)
    queries = [data.queries[q] for q in qids]
    torch_encoder = SpladeEncoder.from_pretrained(args.model, device="cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"torch": torch_encoder}
        for name, kwargs in (
            ("onnx", {}),
            ("onnx-int8", {"quantize": "int8"}),
            ("onnx-int8-head", {"quantize": "int8", "quantize_head": True}),
        ):
            cases[name] = OnnxSpladeEncoder(
                export_onnx(torch_encoder, Path(tmp) / name, **kwargs), threads=args.threads
            )
        for name, encoder in cases.items():
            start = time.perf_counter()
            d = encoder.encode_documents(texts)
            seconds = time.perf_counter() - start
            q = encoder.encode_queries(queries)
            ndcg = evaluate(run_of(q, d, qids, dids), data.qrels, ["nDCG@10"])["nDCG@10"]
            rows.append((name, ndcg, seconds))
            print(f"  {name}: nDCG@10 {ndcg:.4f}, {seconds:.1f} s", file=sys.stderr)
    load = os.getloadavg()
    print(
        f"# SciFact test ({len(qids)} queries), {len(dids)} documents, splade-tiny, {args.threads} thread(s); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at end {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}\n"
    )
    print("| case | nDCG@10 | change vs torch | corpus encoding s (wall) |")
    print("|---|---|---|---|")
    base = rows[0][1]
    for name, ndcg, seconds in rows:
        print(f"| {name} | {ndcg:.4f} | {ndcg - base:+.4f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
