"""How close the fused CPU head's products run to this core's matrix-multiply rate, at batch 1 and 8.

What bounds the batch gain of query encoding (and so what micro-batching can give ``spladekit
serve`` with one worker): splade-tiny's query encoding is mostly the MLM head's decoder product,
``[T, 128] x [128, 30522]`` for the ``T`` tokens of a batch's queries, which the fused CPU head
(:mod:`spladekit.model.fused`) computes in vocabulary chunks of ``CHUNK_BUDGET_BYTES`` (1 MiB) of
logits, each reduced by a max over positions. FLOPs of the product: ``2 · T · 128 · 30522``.

Cases, one thread, same run (the anchor is the first line):

    ``sgemm 1024^3``            ``A @ B`` of two ``[1024, 1024]`` float32 matrices: this core's
                                practical float32 rate (2 · 1024³ FLOPs);
    ``T tokens, products``      the head's chunked ``F.linear`` products alone, as the fused head cuts
                                them (columns per chunk = 1 MiB ÷ (4 · T));
    ``T tokens, with amax``     the same with the max over positions of each chunk (the fused head's
                                whole forward but the bias-free parts).

``T`` = 15 (one SciFact query, batch 1) and 120 (eight queries grouped, batch 8). Reported: median
milliseconds of 9 repetitions and GFLOP/s; the products' rate at each T ÷ the sgemm rate.

    PYTHONPATH=src python benchmarks/head_flops.py

Not a test: no assertion on speed.
"""

from __future__ import annotations

import statistics
import time

import torch

from spladekit.model.fused import CHUNK_BUDGET_BYTES

HIDDEN, VOCAB = 128, 30522


def median_seconds(work, repetitions: int = 9) -> float:
    work()  # warm-up
    times = []
    for _ in range(repetitions):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    anchor = 2 * 1024**3 / median_seconds(lambda: a @ b) / 1e9
    print(f"sgemm 1024^3: {anchor:.1f} GFLOP/s (anchor)")
    weight, bias = torch.randn(VOCAB, HIDDEN), torch.randn(VOCAB)
    for tokens in (15, 120):
        hidden = torch.randn(tokens, HIDDEN)
        cols = max(1, CHUNK_BUDGET_BYTES["cpu"] // (tokens * 4))

        def products():
            for start in range(0, VOCAB, cols):  # noqa: B023 (called in this iteration only)
                torch.nn.functional.linear(hidden, weight[start : start + cols], bias[start : start + cols])  # noqa: B023 (called in this iteration only)

        def with_amax():
            for start in range(0, VOCAB, cols):  # noqa: B023 (called in this iteration only)
                torch.amax(
                    torch.nn.functional.linear(hidden, weight[start : start + cols], bias[start : start + cols]),  # noqa: B023 (called in this iteration only)
                    0,
                )

        flops = 2 * tokens * HIDDEN * VOCAB
        seconds, total = median_seconds(products), median_seconds(with_amax)
        rate = flops / seconds / 1e9
        print(
            f"{tokens} tokens ({cols} columns per chunk): products {1e3 * seconds:.2f} ms, {rate:.1f} GFLOP/s "
            f"= {rate / anchor:.2f} x sgemm; with amax {1e3 * total:.2f} ms"
        )


if __name__ == "__main__":
    main()
