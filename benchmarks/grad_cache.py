"""Gradient caching (``train.cached``): peak memory and step time of a batch of 256 cached at
mini-batch 16, against uncached batches of 16 and 256, in one run.

Targets (issue 34): memory ≤ 1.3 × uncached batch 16, time ≤ 1.4 × uncached batch 256.

Each configuration runs in its own subprocess (so one's peak cannot hide another's): a random BERT
masked LM built in code (no download; word-level vocabulary, every text exactly its max length),
the trainer's own ``train_step`` (InfoNCE with in-batch negatives + FLOPS on both sides, dropout
0.1, the fused head unless ``--head plain``) followed by the AdamW step, as in ``spladekit train``.
One warm-up step (it allocates the gradients and AdamW's state), then ``--steps`` measured steps.

Memory of a step: on the CPU the peak resident set above the resident set at the step's start
(``VmHWM`` reset through ``/proc/self/clear_refs`` before each step, Linux ≥ 4.0, after glibc's
``malloc_trim`` has returned the heap the previous step freed); on CUDA
``max_memory_allocated`` above ``memory_allocated`` at the step's start. Both exclude the model,
its gradients' steady state and the optimiser state, which are the same in every configuration.
Reported: medians over the measured steps, and ratios against the anchors of the same run.

The model size: what gradient caching adds is the batch's vectors and their gradients,
``(1 + G)·B·V`` float32 values each (plus the loss's temporaries of that size); what it saves is
the graph of all but one mini-batch, ``≈ layers·L·(68·H + 10·heads·L)`` bytes per text in float32
(Korthikanti et al. 2022, §4.1, doubled for float32). The memory target therefore holds when a
text's activations are large against ``V`` (BERT-base at 256 tokens: ≈ 80 MB against 0.37 MB), which
on a 2-core CPU in a few minutes needs a small vocabulary: the defaults (V 4096, H 128, 4 layers,
8 heads, documents of 96 tokens) keep that ratio of a real encoder within a CPU's time.

    PYTHONPATH=src nice -n 10 python benchmarks/grad_cache.py            # defaults: a few minutes on 2 cores
    PYTHONPATH=src python benchmarks/grad_cache.py --device cuda --vocab 30522 --hidden 768 --layers 6 \\
        --doc-length 256 --query-length 32

Not a test: it asserts nothing, it prints each ratio beside its target.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

TARGET_MEMORY, TARGET_TIME = 1.3, 1.4


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _malloc_trim() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the start may include freed, retained heap
        pass


class Meter:
    """Peak memory of a region above its start, in MiB (module docstring)."""

    def __init__(self, device):
        import torch

        self.torch, self.device = torch, device

    def start(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
            self.base = self.torch.cuda.memory_allocated()
        else:
            _malloc_trim()  # the heap freed by the previous step goes back, so the start is what is live
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
            self.base = _status_kib("VmRSS") * 1024

    def peak_mib(self) -> float:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
            return (self.torch.cuda.max_memory_allocated() - self.base) / 2**20
        return (_status_kib("VmHWM") * 1024 - self.base) / 2**20


def build(args, folder: Path):
    """A random BERT masked LM and its word-level tokenizer, as a SpladeModel and a trainer encoder."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from spladekit.model.splade import SpladeModel
    from spladekit.train.config import TrainConfig
    from spladekit.train.head_setup import suppress_pad_column
    from spladekit.train.step import _Encoder

    words = [f"w{i}" for i in range(args.vocab - 5)]
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tokenizer = BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    mlm = BertForMaskedLM(
        BertConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            intermediate_size=4 * args.hidden,
            max_position_embeddings=max(args.doc_length, args.query_length) + 2,
        )
    )
    suppress_pad_column(mlm, tokenizer)
    config = TrainConfig.model_validate(
        {
            "model": {
                "path": "built-in-code",
                "head_impl": args.head,
                "query_max_length": args.query_length,
                "doc_max_length": args.doc_length,
            },
            "data": {"num_negatives": args.negatives},
            "regularizer": {"lambda_q": 1e-3, "lambda_d": 1e-3},
            "batch_size": args.batch,
            "precision": args.precision,
            "device": args.device,
            "cached": {"mini_batch_size": args.mini} if args.mini else None,
        }
    )
    device = torch.device(args.device)
    model = SpladeModel(mlm, args.head).to(device).train()
    return config, model, _Encoder(model, tokenizer, config, device), words


def worker(args) -> dict:
    """One configuration: warm-up step, then ``args.steps`` measured steps; returns times and peaks."""
    import random

    import torch

    from spladekit.train.data import Batch
    from spladekit.train.distributed import DistInfo
    from spladekit.train.step import _optimizer, train_step

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        config, model, encoder, words = build(args, Path(tmp))
    optimizer, _ = _optimizer(model, config)
    scaler = torch.amp.GradScaler(args.device) if args.precision == "fp16" else None
    rng = random.Random(0)
    text = lambda n: " ".join(rng.choices(words, k=n - 2))  # noqa: E731  (+ [CLS], [SEP]: exactly n tokens)
    group = 1 + args.negatives
    meter, times, peaks = Meter(torch.device(args.device)), [], []
    for step in range(1 + args.steps):
        batch = Batch(
            [text(args.query_length) for _ in range(args.batch)],
            [text(args.doc_length) for _ in range(args.batch * group)],
            None,
            group,
        )
        meter.start()
        began = time.perf_counter()
        train_step(encoder, batch, config, DistInfo(), 1e-3, 1e-3, scaler)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        if step:  # the first step allocates AdamW's state: not measured
            times.append(time.perf_counter() - began)
            peaks.append(meter.peak_mib())
    return {"times_s": times, "peaks_mib": peaks, "threads": torch.get_num_threads()}


CONFIGS = [("uncached 16", 16, None), ("uncached 256", 256, None), ("cached 256 / 16", 256, 16)]


def machine(device: str) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        name = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        cpu = name
    except (OSError, StopIteration):
        pass
    text = f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start"
    if device.startswith("cuda"):
        import torch

        text = f"{torch.cuda.get_device_name()}; {text}"
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--query-length", type=int, default=24)
    parser.add_argument("--doc-length", type=int, default=96)
    parser.add_argument("--negatives", type=int, default=1, help="hard negatives per query (G = 1 + this)")
    parser.add_argument("--head", choices=["fused", "plain"], default="fused")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per configuration (after one warm-up)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch's default); 1 by default: on "
        "a shared 2-core machine two threads' barriers made identical mini-batch backwards take 0.04-2.8 s",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)  # worker mode
    parser.add_argument("--mini", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return

    command = "PYTHONPATH=src python " + " ".join([sys.argv[0]] + sys.argv[1:])
    started = datetime.now(UTC)
    where = machine(args.device)
    base = [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("json", "batch", "mini", "worker")
    ]
    results = {}
    for name, batch, mini in CONFIGS:
        extra = ["--worker", "--batch", str(batch)] + (["--mini", str(mini)] if mini else [])
        done = subprocess.run([sys.executable, __file__, *base, *extra], capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if done.returncode or line is None:
            sys.exit(f"{name}: the worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        out = json.loads(line[len("RESULT ") :])
        results[name] = {
            **out,
            "time_s": statistics.median(out["times_s"]),
            "peak_mib": statistics.median(out["peaks_mib"]),
        }
        print(
            f"{name:16s} step {results[name]['time_s']:7.2f} s   peak +{results[name]['peak_mib']:8.1f} MiB   "
            f"(steps {', '.join(f'{t:.2f}' for t in out['times_s'])} s)",
            flush=True,
        )

    cached, small, large = results["cached 256 / 16"], results["uncached 16"], results["uncached 256"]
    memory_ratio = cached["peak_mib"] / small["peak_mib"]
    time_ratio = cached["time_s"] / large["time_s"]
    print()
    print(
        f"memory: cached 256/16 ÷ uncached 16  = {memory_ratio:.2f}  (target ≤ {TARGET_MEMORY}: "
        f"{'met' if memory_ratio <= TARGET_MEMORY else 'NOT met'})"
    )
    print(
        f"time:   cached 256/16 ÷ uncached 256 = {time_ratio:.2f}  (target ≤ {TARGET_TIME}: "
        f"{'met' if time_ratio <= TARGET_TIME else 'NOT met'})"
    )
    print(f"memory: uncached 256 ÷ uncached 16   = {large['peak_mib'] / small['peak_mib']:.2f}  (what caching saves)")
    print(
        f"model: V {args.vocab}, H {args.hidden}, {args.layers} layers, {args.heads} heads, query {args.query_length} / "
        f"document {args.doc_length} tokens, G = {1 + args.negatives}, {args.head} head, {args.precision}, "
        f"{small['threads']} threads, medians of {args.steps} steps after 1 warm-up"
    )
    print(f"command: {command}")
    print(f"machine: {where}")
    print(f"date: {started.isoformat(timespec='seconds')}")
    if args.json:
        from spladekit.io import write_json

        write_json(
            args.json,
            {
                "results": results,
                "memory_ratio": memory_ratio,
                "time_ratio": time_ratio,
                "command": command,
                "machine": where,
                "date": started.isoformat(),
            },
        )


if __name__ == "__main__":
    main()
