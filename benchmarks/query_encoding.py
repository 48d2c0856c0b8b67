"""Query-encoding latency on this CPU: onnxruntime vs spladekit's torch path (and inference-free), one run.

Cases, all on the same model and the same query texts (SciFact test queries by default):

    ``torch (<head>)``   :meth:`SpladeEncoder.encode_queries` (the default head; ``--plain`` adds the plain one);
                         the anchor of the ratios is the first torch case;
    ``torch (fused, row by row)``  the fused head with ``GROUP_TOKENS = 1`` (each query its own
                         products, as before row groups; ``spladekit.model.fused._row_groups``): the
                         anchor of the CPU head's batch gain;
    ``onnxruntime``      :class:`spladekit.model.onnx_export.OnnxSpladeEncoder` on the folder written by
                         ``export_onnx`` (the SPLADE pooling inside the graph), CPU execution provider;
    ``inference-free``   the bag-of-tokens query side (IDF of the corpus; no forward pass at all).

Every case does the whole user-facing work (tokenisation, forward, sparse conversion). Batches of 1,
8 and 32 queries; for each batch, every case runs in turn (interleaved), so load from other jobs on
a shared machine falls on all cases alike. Reported: median wall milliseconds per batch and per
query, the median process CPU milliseconds per batch, the ratio of each median to the anchor's, and
each case's batch gain (its ms per query at batch 1 ÷ at this batch: what micro-batching can give a
server, ``spladekit serve``).
torch and onnxruntime get the same number of threads (``--threads``).

Usage::

    PYTHONPATH=src python benchmarks/query_encoding.py                       # splade-tiny, SciFact, 1 thread
    PYTHONPATH=src python benchmarks/query_encoding.py --threads 2 --out results.json

Not a test: no assertion on speed. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import spladekit.model.fused as fused  # noqa: E402
from spladekit.data.beir import load_beir  # noqa: E402
from spladekit.data.resolve import shared_roots  # noqa: E402
from spladekit.model.encoder import SpladeEncoder  # noqa: E402
from spladekit.model.inference_free import make_inference_free  # noqa: E402
from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx  # noqa: E402


def _default(relative: str) -> str:
    for root in shared_roots():
        if (root / relative).exists():
            return str(root / relative)
    return relative


class RowByRow:
    """An encoder whose fused CPU head multiplies each query's tokens alone (``GROUP_TOKENS = 1`` during its calls)."""

    def __init__(self, encoder):
        self.encoder = encoder

    def encode_queries(self, queries, **kwargs):
        before, fused.GROUP_TOKENS = fused.GROUP_TOKENS, 1
        try:
            return self.encoder.encode_queries(queries, **kwargs)
        finally:
            fused.GROUP_TOKENS = before


def measure(cases: dict, queries: list[str], batch_size: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per case, the wall and CPU milliseconds of every timed batch (first batch of each round untimed)."""
    batches = [queries[i : i + batch_size] for i in range(0, len(queries), batch_size)]
    times = {name: {"wall": [], "cpu": []} for name in cases}
    for _ in range(rounds):
        for b, batch in enumerate(batches):
            for name, encoder in cases.items():
                wall, cpu = time.perf_counter(), time.process_time()
                encoder.encode_queries(batch, batch_size=batch_size)
                if b:  # the first batch of a round warms caches
                    times[name]["wall"].append((time.perf_counter() - wall) * 1000)
                    times[name]["cpu"].append((time.process_time() - cpu) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=_default("models/splade-tiny"))
    parser.add_argument("--data", default=_default("data/beir/scifact"))
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries per batch size")
    parser.add_argument("--queries", type=int, default=300, help="first N test queries")
    parser.add_argument("--plain", action="store_true", help="also time the plain torch head")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dataset = load_beir(args.data, "test")
    queries = list(dataset.queries.values())[: args.queries]
    torch_default = SpladeEncoder.from_pretrained(args.model, device="cpu")
    cases = {f"torch ({torch_default.model.head_impl})": torch_default}
    if torch_default.model.head_impl == "fused":
        cases["torch (fused, row by row)"] = RowByRow(torch_default)
    if args.plain and torch_default.model.head_impl != "plain":
        cases["torch (plain)"] = SpladeEncoder.from_pretrained(args.model, device="cpu", head_impl="plain")
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_onnx(
            SpladeEncoder.from_pretrained(args.model, device="cpu", head_impl="plain"), Path(tmp) / "onnx"
        )
        cases["onnxruntime"] = OnnxSpladeEncoder(folder, threads=args.threads)
        free = make_inference_free(
            SpladeEncoder.from_pretrained(args.model, device="cpu"), list(dataset.corpus.values())
        )
        cases["inference-free"] = free
        results = {}
        for batch_size in (1, 8, 32):
            times = measure(cases, queries, batch_size, args.rounds)
            results[batch_size] = {
                name: {k: statistics.median(v) for k, v in t.items()} | {"batches": len(t["wall"])}
                for name, t in times.items()
            }
    anchor = next(iter(cases))
    import onnxruntime
    import transformers

    print(
        f"# query encoding latency ({date.today().isoformat()}; {platform.machine()}, {platform.processor() or 'cpu'}; "
        f"threads {args.threads}; torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"transformers {transformers.__version__})"
    )
    print(
        f"model {args.model}; {len(queries)} queries of {args.data} (test), query max length "
        f"{torch_default.metadata.query_max_length}; {args.rounds} rounds; medians; ratio = anchor ({anchor}) ÷ case\n"
    )
    print(
        "| batch | case | ms / batch (wall) | ms / query (wall) | ms / batch (CPU) | speed-up vs anchor (wall) | (CPU) | batch gain (wall) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for batch_size, row in results.items():
        for name, r in row.items():
            a, single = row[anchor], results[1][name]["wall"]
            print(
                f"| {batch_size} | {name} | {r['wall']:.3f} | {r['wall'] / batch_size:.3f} | {r['cpu']:.3f} | "
                f"{a['wall'] / r['wall']:.2f}× | {a['cpu'] / max(r['cpu'], 1e-9):.2f}× | {single * batch_size / r['wall']:.2f}× |"
            )
    if args.out:
        args.out.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2)
        )


if __name__ == "__main__":
    main()
