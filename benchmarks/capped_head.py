"""Benchmark: the capped fused SPLADE head (``position_top_k``) against the uncapped fused head, same run.

The capped head finds each position's ``k`` largest logits chunk by chunk (a running top-(k+1) merged
per vocabulary chunk, :mod:`spladekit.model.capped`) and pools only those; the uncapped fused head
keeps a running max (:mod:`spladekit.model.fused`). Both never hold ``[B, L, V]``. Cases, on random
head inputs (hidden states ``[B, L, H]``, decoder ``[V, H]`` and bias; timing does not depend on the
weights, and random logits have no ties, so the capped search is its one-pass form):

    ``encode``  forward under ``torch.inference_mode``;
    ``train``   forward + backward of ``sum(w · g)`` (the head's gradients w.r.t. hidden, W and b);

each for the uncapped fused head (the anchor), the capped fused head (``k``), and, as a second
reference, the plain head capped (full ``[B, L, V]`` logits, a dense top-k). Optionally
(``--scifact-docs N``) whole-encoder encoding of SciFact documents with splade-tiny, capped and not.

Time: process CPU seconds on CPU (other load on a shared machine does not count), wall clock on
CUDA. Peak memory: the growth of the process RSS during the case (sampled every ms, after
``malloc_trim``; ``PeakMemory`` of ``benchmarks/head.py``), or the CUDA allocator's peak.
``--busy`` runs the same cases again beside a busy process (one spinning core).

Usage::

    PYTHONPATH=src python benchmarks/capped_head.py                    # small: ~1 minute on 1 core
    PYTHONPATH=src python benchmarks/capped_head.py --busy --scifact-docs 64

Not a test: no assertion on speed. Prints a markdown table with the ratios to the uncapped fused head.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from head import timed  # noqa: E402  (the same timing and peak-memory rules as the head benchmark)

from spladekit.model.fused import fused_splade_head  # noqa: E402
from spladekit.model.pooling import plain_splade_head  # noqa: E402

CASES = ("fused", "fused capped", "plain capped")


def head_inputs(batch: int, length: int, hidden: int, vocab: int, device, grad: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, length, hidden, generator=gen).to(device)
    w = (torch.randn(vocab, hidden, generator=gen) / hidden**0.5).to(device)
    b = (torch.randn(vocab, generator=gen) - 2.0).to(device)
    mask = torch.ones(batch, length, dtype=torch.long, device=device)
    for row in range(batch):  # lengths from L/2 to L: padding, as in a real batch
        mask[row, length // 2 + (row * length // (2 * batch)) :] = 0
    if grad:
        h, w, b = (t.requires_grad_(True) for t in (h, w, b))
    return h, mask, w, b, torch.rand(batch, vocab, generator=gen).to(device)


def call(case: str, k: int, mode: str, inputs):
    h, mask, w, b, g = inputs
    cap = None if case == "fused" else k

    def run():
        if mode == "encode":
            with torch.inference_mode():
                if case.startswith("plain"):
                    return plain_splade_head(h, mask, w, b, position_top_k=cap)
                return fused_splade_head(h, mask, w, b, backend="torch", position_top_k=cap)
        for t in (h, w, b):
            t.grad = None
        head = plain_splade_head if case.startswith("plain") else fused_splade_head
        kwargs = {} if case.startswith("plain") else {"backend": "torch"}
        out = head(h, mask, w, b, position_top_k=cap, **kwargs)
        (out * g).sum().backward()
        return out

    return run


def measure(args, device, label: str) -> list[dict]:
    rows = []
    for mode in ("encode", "train"):
        inputs = head_inputs(args.batch, args.length, args.hidden, args.vocab, device, grad=mode == "train")
        for case in CASES:
            seconds, peak = timed(call(case, args.k, mode, inputs), device, args.warmup, args.steps)
            rows.append({"load": label, "mode": mode, "case": case, "seconds": seconds, "peak": peak})
            print(f"  [{label}] {mode} {case}: {seconds:.4f} s, {peak / 2**20:.1f} MiB", file=sys.stderr)
    return rows


def scifact(args, device, label: str) -> list[dict]:
    """Whole-encoder encoding of SciFact documents with splade-tiny, uncapped and capped (fused head)."""
    import itertools

    from spladekit.data.beir import iter_corpus
    from spladekit.model.encoder import SpladeEncoder

    shared = Path(__file__).resolve().parents[2] / "shared"
    docs = [t for _, t in itertools.islice(iter_corpus(shared / "data" / "beir" / "scifact"), args.scifact_docs)]
    encoder = SpladeEncoder.from_pretrained(shared / "models" / "splade-tiny", head_impl="fused", device=device)
    rows, active = [], {}
    for case, cap in (("fused", None), ("fused capped", args.k)):
        encoder.model.configure_head(cap, None)

        def run():
            return encoder.encode(docs, 256, batch_size=32)

        seconds, peak = timed(run, device, 1, 1)
        vectors = run()
        active[case] = vectors.nnz / vectors.shape[0]
        rows.append(
            {
                "load": label,
                "mode": f"splade-tiny, {len(docs)} SciFact docs",
                "case": case,
                "seconds": seconds,
                "peak": peak,
                "active": active[case],
            }
        )
        print(f"  [{label}] scifact {case}: {seconds:.3f} s, {active[case]:.1f} active terms/doc", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    anchor = {(r["load"], r["mode"]): r for r in rows if r["case"] == "fused"}
    lines = [
        "| load | case | head | s per call | peak MiB | time ÷ uncapped fused | memory ÷ uncapped fused |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a = anchor[(r["load"], r["mode"])]
        memory = f"{r['peak'] / a['peak']:.2f}" if a["peak"] > 0 else "n/a"
        extra = f" ({r['active']:.1f} active terms/doc)" if "active" in r else ""
        lines.append(
            f"| {r['load']} | {r['mode']} | {r['case']}{extra} | {r['seconds']:.4f} | {r['peak'] / 2**20:.1f} | "
            f"{r['seconds'] / a['seconds']:.2f} | {memory} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--k", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="measure again beside a busy process (one spinning core)")
    parser.add_argument("--scifact-docs", type=int, default=0, help="also encode N SciFact documents with splade-tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(
        f"# capped fused head: B={args.batch} L={args.length} H={args.hidden} V={args.vocab} k={args.k}, float32, "
        f"{device}, {args.threads} thread(s), torch {torch.__version__}, {platform.processor() or platform.machine()}"
    )
    rows = measure(args, device, "idle") + (scifact(args, device, "idle") if args.scifact_docs else [])
    if args.busy:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            rows += measure(args, device, "busy") + (scifact(args, device, "busy") if args.scifact_docs else [])
        finally:
            spinner.kill()
            spinner.wait()
    print(table(rows))


if __name__ == "__main__":
    main()
