"""Which products to quantise: onnxruntime dynamic int8 variants of the float32 export, against float32.

Each variant is ``quantize_dynamic`` applied to :func:`spladekit.model.onnx_export.export_onnx`'s
float32 graph of splade-tiny, with some MatMul products kept float32. A variant's name is tokens
joined by ``+``:

    all              every product with a constant weight int8 (encoder and head's vocabulary tiles)
    enc              the encoder's products int8, the head's tiles float32
    head             the head's tiles only
    only:X           the one product X (names below)
    fp:X             keep X float32 (X a product or a prefix: ``fp:L0`` = all of layer 0)
    export           what ``export_onnx(quantize="int8")`` writes (the library's own choice)
    export-head      ``export_onnx(quantize="int8", quantize_head=True)``
    rr / pt / asym / wsym / constb / u8w    reduce_range / per-tensor weights / ActivationSymmetric /
                     WeightSymmetric / MatMulConstBOnly / uint8 weights (default: per-channel int8 weights,
                     uint8 asymmetric activations per tensor)

Product names (BERT): ``L<i>.query|key|value`` attention projections, ``L<i>.ao`` attention output,
``L<i>.fi`` feed-forward up (intermediate), ``L<i>.fo`` feed-forward down (output), ``T`` the MLM-head
transform's dense; ``L<i>.qk|pv`` attention's activation products (onnxruntime leaves those float32).

Per variant: cosine of each document vector to the float32 graph's (min, mean), nDCG@10 on SciFact
test (300 queries; documents and queries encoded by the variant, exact dot products, top 100,
:func:`spladekit.evaluate.metrics.evaluate`) and its change against float32, on the whole corpus and on
the first ``--subset`` documents of the judged-first order of benchmarks/onnx_quality.py (the rows of
the same vectors: int8 activation scales are per batch, so a vector can differ slightly from one
encoded among other documents). Vectors are cached under ``--cache``.

``--time N``: instead, docs/s of each variant on the first N corpus documents (max length 256,
batch 32) at ``--threads`` threads, one onnxruntime session each, ``--reps`` interleaved repetitions
after a warm-up, medians, and the ratio to float32 measured in the same run.

Usage::

    PYTHONPATH=src python benchmarks/int8_variants.py --docs 0 all export export-head   # quality, whole corpus
    PYTHONPATH=src python benchmarks/int8_variants.py --time 64 --threads 1 all export export-head
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from onnx_quality import run_of  # noqa: E402

from spladekit.data.beir import load_beir  # noqa: E402
from spladekit.evaluate.metrics import evaluate  # noqa: E402
from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx  # noqa: E402


class Graph:
    """The float32 export's products, by the short names of the module docstring."""

    def __init__(self, path: Path):
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        weights = {t.name for t in graph.initializer}
        self.products = [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm")]
        self.head = [n for n in self.products if n.count("/") == 1]
        self.short = {}
        for node in graph.node:
            if node.op_type not in ("MatMul", "Gemm") or node.name in self.head:
                continue
            name = node.name.replace("/bert/encoder/layer.", "L")
            if not any(i in weights for i in node.input):
                self.short[node.name] = name.split("/")[0] + (".pv" if node.name.endswith("_1") else ".qk")
                continue
            for old, new in (
                ("/MatMul", ""),
                ("/attention/self/", "."),
                ("/attention/output/dense", ".ao"),
                ("/intermediate/dense", ".fi"),
                ("/output/dense", ".fo"),
                ("/transform/dense", "T"),
            ):
                name = name.replace(old, new)
            self.short[node.name] = name
        self.by_short = {v: k for k, v in self.short.items()}


def spec(graph: Graph, name: str):
    """``(products to quantise, quantize_dynamic keyword arguments, extra_options)`` of a variant name."""
    from onnxruntime.quantization import QuantType

    quant: set[str] = set()
    options = dict(per_channel=True, reduce_range=False, weight_type=QuantType.QInt8)
    extra = {}
    for token in name.split("+"):
        if token == "all":
            quant |= set(graph.products)
        elif token == "enc":
            quant |= set(graph.short)
        elif token == "head":
            quant |= set(graph.head)
        elif token.startswith("only:"):
            quant |= {graph.by_short[token[5:]]}
        elif token.startswith("fp:"):
            key = token[3:]
            quant -= {n for s, n in graph.by_short.items() if s == key or s.startswith(key + ".")}
        elif token in ("rr", "pt", "asym", "wsym", "constb", "u8w"):
            if token == "rr":
                options["reduce_range"] = True
            elif token == "pt":
                options["per_channel"] = False
            elif token == "u8w":
                options["weight_type"] = QuantType.QUInt8
            else:
                extra[
                    {"asym": "ActivationSymmetric", "wsym": "WeightSymmetric", "constb": "MatMulConstBOnly"}[token]
                ] = True
        else:
            raise SystemExit(f"unknown variant token {token!r} in {name!r} (see the module docstring)")
    return quant, options, extra


def build(name: str, float32: Path, work: Path, encoder_of) -> Path:
    """The folder of variant ``name`` (built once under ``work``)."""
    from onnxruntime.quantization import quantize_dynamic

    out = work / name.replace(":", "_")
    if (out / "model.onnx").exists():
        return out
    if name in ("export", "export-head"):
        return export_onnx(encoder_of(), out, quantize="int8", quantize_head=name == "export-head")
    graph = Graph(float32 / "model.onnx")
    quant, options, extra = spec(graph, name)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(float32, tmp, ignore=shutil.ignore_patterns("model.onnx"))
    quantize_dynamic(
        str(float32 / "model.onnx"),
        str(tmp / "model.onnx"),
        op_types_to_quantize=["MatMul", "Gemm"],
        nodes_to_exclude=[n for n in graph.products if n not in quant],
        extra_options=extra,
        **options,
    )
    tmp.rename(out)
    return out


def cosines(a: sp.csr_matrix, b: sp.csr_matrix) -> np.ndarray:
    """Row-wise cosine of two ``[N, V]`` sparse matrices."""
    dot = np.asarray(a.multiply(b).sum(1)).ravel()
    norms = np.sqrt(np.asarray(a.multiply(a).sum(1)).ravel() * np.asarray(b.multiply(b).sum(1)).ravel())
    return dot / np.maximum(norms, 1e-30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--model", type=Path, default=ROOT.parent / "shared" / "models" / "splade-tiny")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "beir" / "scifact")
    parser.add_argument("--docs", type=int, default=0, help="0: the whole corpus; else the first N (judged first)")
    parser.add_argument("--subset", type=int, default=1500, help="also report nDCG@10 on the first N of the documents")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache" / "int8_variants")
    parser.add_argument("--time", type=int, default=0, help="N > 0: time docs/s on N documents instead")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from spladekit.model.encoder import SpladeEncoder

    data = load_beir(args.data, "test")
    judged = {d for rel in data.qrels.values() for d in rel}
    dids = [d for d in data.corpus if d in judged] + [d for d in data.corpus if d not in judged]
    if args.docs > 0:
        dids = dids[: args.docs]
    texts = [data.corpus[d] for d in dids]
    qids = list(data.queries)
    queries = [data.queries[q] for q in qids]
    work = args.cache
    (work / "vectors").mkdir(parents=True, exist_ok=True)
    loaded = []

    def encoder_of():
        if not loaded:
            loaded.append(SpladeEncoder.from_pretrained(args.model, device="cpu"))
        return loaded[0]

    float32 = work / "float32"
    if not (float32 / "model.onnx").exists():
        export_onnx(encoder_of(), float32)
    folders = {"float32": float32} | {name: build(name, float32, work, encoder_of) for name in args.variants}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.time:
        sessions = {name: OnnxSpladeEncoder(folder, threads=args.threads) for name, folder in folders.items()}
        sample = texts[: args.time]
        for encoder in sessions.values():
            encoder.encode_documents(sample[:32])  # warm-up
        seconds = {name: [] for name in sessions}
        for _ in range(args.reps):
            for name, encoder in sessions.items():
                start = time.perf_counter()
                encoder.encode_documents(sample)
                seconds[name].append(time.perf_counter() - start)
        load = os.getloadavg()
        print(
            f"# docs/s, {len(sample)} SciFact documents (max length 256, batch 32), {args.threads} thread(s), "
            f"medians of {args.reps} interleaved repetitions; {stamp}; load average at end "
            f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}\n"
        )
        print("| variant | docs/s | ÷ float32 |\n|---|---|---|")
        base = len(sample) / statistics.median(seconds["float32"])
        for name, values in seconds.items():
            rate = len(sample) / statistics.median(values)
            print(f"| {name} | {rate:.1f} | {rate / base:.2f} |")
        return

    def vectors(name, folder):
        path_d = work / "vectors" / f"{name.replace(':', '_')}_{len(dids)}.npz"
        path_q = work / "vectors" / f"{name.replace(':', '_')}_queries.npz"
        if path_d.exists() and path_q.exists():
            return sp.load_npz(path_d), sp.load_npz(path_q)
        encoder = OnnxSpladeEncoder(folder, threads=args.threads)
        d, q = encoder.encode_documents(texts), encoder.encode_queries(queries)
        sp.save_npz(path_d, d)
        sp.save_npz(path_q, q)
        return d, q

    sub = min(args.subset, len(dids))

    def ndcg(q, d, n):
        """(nDCG@10, {qid: nDCG@10}) against the first n documents."""
        values: dict = {}
        mean = evaluate(run_of(q, d[:n], qids, dids[:n]), data.qrels, ["nDCG@10"], per_query=values)["nDCG@10"]
        return mean, values["nDCG@10"]

    def change(variant, reference):
        """Mean change and its standard error over the queries (paired: s.d. of the per-query change / √n)."""
        diff = np.array([variant[1].get(q, 0.0) - reference[1].get(q, 0.0) for q in qids])
        return variant[0] - reference[0], diff.std(ddof=1) / np.sqrt(len(diff)), int((diff != 0).sum())

    ref_d, ref_q = vectors("float32", float32)
    base, base_sub = ndcg(ref_q, ref_d, len(dids)), ndcg(ref_q, ref_d, sub)
    rows = []
    for name in args.variants:
        d, q = vectors(name, folders[name])
        c = cosines(d, ref_d)
        rows.append((name, ndcg(q, d, len(dids)), ndcg(q, d, sub), c.min(), c.mean()))
        print(f"  {name}: {rows[-1][1][0]:.4f} {rows[-1][2][0]:.4f} {c.min():.5f}", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        f"# SciFact test ({len(qids)} queries), {len(dids)} documents (and the first {sub}), splade-tiny, "
        f"onnxruntime dynamic int8 variants vs the float32 graph; {stamp}; load average at end "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}\n"
    )
    print(
        f"| variant | nDCG@10 ({len(dids)} docs) | change ± s.e. (queries changed) | nDCG@10 (first {sub}) | "
        "change ± s.e. (queries changed) | min cosine | 1 − mean cosine |"
    )
    print("|---|---|---|---|---|---|---|")
    print(f"| float32 | {base[0]:.4f} | | {base_sub[0]:.4f} | | 1 | 0 |")
    for name, full, part, cmin, cmean in rows:
        cells = []
        for got, ref in ((full, base), (part, base_sub)):
            delta, se, moved = change(got, ref)
            cells.append(f"{got[0]:.4f} | {delta:+.4f} ± {se:.4f} ({moved})")
        print(f"| {name} | {cells[0]} | {cells[1]} | {cmin:.5f} | {1 - cmean:.1e} |")


if __name__ == "__main__":
    main()
