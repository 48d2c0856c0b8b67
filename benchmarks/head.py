"""Benchmark of the SPLADE head: sentence-transformers vs spladekit's plain and fused heads.

One run, one model, one batch, one dtype per config. Cases:

training step (forward + backward + AdamW step, same loss for every case):
    ``encoder-only``   the same encoder and batch with a trivial head (max over positions of the
                       ``[B, L, H]`` hidden states): the memory floor and the time ceiling;
    ``st``             sentence-transformers ``SparseEncoder`` (``MLMTransformer`` + ``SpladePooling``)
                       with ``SpladeLoss(SparseMultipleNegativesRankingLoss)``;
    ``plain``          spladekit ``SpladeModel(head_impl="plain")`` (full ``[B, L, V]`` logits);
    ``fused``          spladekit ``SpladeModel(head_impl="fused")``.
  spladekit's loss is the same as ST's: in-batch + hard-negative cross-entropy on dot products
  (scale 1) plus the FLOPS regulariser ``Σ_j (mean_i w_ij)²`` on queries and documents
  (Paria et al. 2020; Formal et al. 2021 eq. 4) with ST's weights.
  Run at two sparsities: ``init`` (random weights, about half the vocabulary active) and
  ``1%`` (the decoder bias shifted so that about 1% of document entries are active, as after
  training), so the sparse backward is measured at a realistic sparsity.

encoding (forward under ``torch.inference_mode``, model weights in the benchmark dtype):
    the same four cases on pre-tokenised random ids (tokenisation is not timed for anyone).

The models are random (timing does not depend on the weights); ST and spladekit use the very
same ``*ForMaskedLM`` module. Time: wall clock on CUDA (synchronised); process CPU time on CPU,
so that other load on a shared machine does not count. Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (weights,
gradients and optimizer state included); on CPU the growth of the process RSS during the case
(sampled every ms, after ``malloc_trim``), an approximation.

Usage::

    python benchmarks/head.py --mode cpu                 # small shapes, a few minutes on 1 core
    python benchmarks/head.py --mode gpu --out results.json   # BERT-base and ModernBERT-base, bf16
    python benchmarks/head.py --mode cpu --scifact-docs 320   # + real SciFact encoding, splade-tiny

Not a test: no assertion on speed. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from spladekit.model.splade import SpladeModel  # noqa: E402

QUERY_REG, DOC_REG = 5e-3, 3e-3  # FLOPS weights, used by ST's SpladeLoss and by spladekit alike


@dataclass
class Shape:
    """A model shape and a batch: ``q`` queries × ``q_len`` tokens, ``d`` documents × ``d_len``."""

    name: str
    family: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    q: int
    q_len: int
    d: int
    d_len: int
    enc: int
    enc_len: int


GPU_SHAPES = [
    Shape("bert-base", "bert", 768, 12, 12, 3072, 30522, 32, 32, 64, 256, 256, 256),
    Shape("modernbert-base", "modernbert", 768, 22, 12, 1152, 50368, 32, 32, 64, 256, 256, 256),
]
CPU_SHAPES = [
    Shape("bert-tiny", "bert", 128, 2, 2, 512, 30522, 8, 16, 16, 64, 32, 128),
    Shape("modernbert-tiny", "modernbert", 128, 2, 2, 256, 50368, 8, 16, 16, 64, 32, 128),
]


# ---------------------------------------------------------------------------- building
def build_st_model(shape: Shape, folder: Path, device: torch.device):
    """A random ``*ForMaskedLM`` saved to ``folder`` and loaded by ST's ``SparseEncoder``."""
    from sentence_transformers import SparseEncoder
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    torch.manual_seed(0)
    if shape.family == "bert":
        config = BertConfig(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            intermediate_size=shape.intermediate,
        )
        mlm = BertForMaskedLM(config)
    else:
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        config = ModernBertConfig(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            intermediate_size=shape.intermediate,
            pad_token_id=0,
        )
        mlm = ModernBertForMaskedLM(config)
    mlm.save_pretrained(folder)
    # ids are fed directly; the tokenizer is only there because ST loads one
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    st = SparseEncoder(str(folder), device=str(device))
    return st


def st_mlm(st) -> torch.nn.Module:
    """The ``*ForMaskedLM`` module inside an ST ``SparseEncoder``."""
    return st[0].auto_model


def random_batch(n: int, length: int, vocab: int, device, seed: int) -> dict[str, torch.Tensor]:
    """Random ids ``[n, length]`` with ``[CLS]``=2 … ``[SEP]``=3 and right padding (lengths in [L/2, L])."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(2, length // 2), length + 1, (n,), generator=gen)
    lengths[0] = length
    ids = torch.randint(5, vocab, (n, length), generator=gen)
    pos = torch.arange(length)[None]
    mask = (pos < lengths[:, None]).long()
    ids[:, 0] = 2
    ids[torch.arange(n), lengths - 1] = 3
    ids = ids * mask
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


# ---------------------------------------------------------------------------- losses
def mnrl_flops_loss(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """ST's SpladeLoss(SparseMNRL): CE over q·dᵀ (targets: i-th document) + FLOPS on q and d."""
    scores = q.float() @ d.float().T
    ce = F.cross_entropy(scores, torch.arange(q.shape[0], device=q.device))
    flops_q = (q.float().mean(dim=0) ** 2).sum()
    flops_d = (d.float().mean(dim=0) ** 2).sum()
    return ce + QUERY_REG * flops_q + DOC_REG * flops_d


# ---------------------------------------------------------------------------- measuring
class PeakMemory:
    """Peak memory of a block, in bytes: CUDA allocator peak, or CPU RSS growth (sampled)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak = 0

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        else:
            try:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            except OSError:
                pass
            self._start = self._rss()
            self._max = self._start
            self._stop = threading.Event()

            def sample():
                while not self._stop.is_set():
                    self._max = max(self._max, self._rss())
                    time.sleep(0.001)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
            self._max = max(self._max, self._rss())
            self.peak = self._max - self._start


def clock(device: torch.device) -> float:
    """Wall-clock seconds on CUDA; process CPU seconds on CPU (robust on a shared, loaded machine)."""
    return time.perf_counter() if device.type == "cuda" else time.process_time()


def timed(fn, device, warmup: int, steps: int) -> tuple[float, int]:
    """Mean seconds per call of ``fn`` after ``warmup`` calls (see :func:`clock`), and the peak memory."""
    for _ in range(warmup):
        fn()
    with PeakMemory(device) as mem:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = clock(device)
        for _ in range(steps):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = (clock(device) - start) / steps
    return seconds, mem.peak


@dataclass
class Row:
    config: str
    task: str
    sparsity: str
    case: str
    seconds: float
    tokens_per_s: float
    docs_per_s: float
    peak_gib: float
    active_per_doc: float


# ---------------------------------------------------------------------------- cases
def train_cases(st, model_plain, model_fused, q, d_pos, d_neg, device, dtype, args):
    """Yield ``(case, step function, active-per-doc function)`` for the training step."""
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss

    mlm = st_mlm(st)
    docs = {k: torch.cat([d_pos[k], d_neg[k]]) for k in d_pos}
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    state = {}

    def with_optimizer(loss_fn):
        opt = torch.optim.AdamW(mlm.parameters(), lr=1e-9)  # tiny: the sparsity stays as set

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = loss_fn()
            loss.backward()
            opt.step()
            state["loss"] = float(loss.detach())

        return step, opt

    def encoder_only():
        hq = model_fused.hidden_states(q["input_ids"], q["attention_mask"])
        hd = model_fused.hidden_states(docs["input_ids"], docs["attention_mask"])
        pool = lambda h, m: h.float().masked_fill(~m.bool()[..., None], -1e4).amax(dim=1)  # noqa: E731
        return mnrl_flops_loss(pool(hq, q["attention_mask"]), pool(hd, docs["attention_mask"]))

    st_loss = SpladeLoss(
        st,
        SparseMultipleNegativesRankingLoss(st),
        document_regularizer_weight=DOC_REG,
        query_regularizer_weight=QUERY_REG,
    )

    def st_step():
        out = st_loss([q, d_pos, d_neg], None)
        return sum(out.values())

    def spladekit(model):
        def run():
            return mnrl_flops_loss(
                model(q["input_ids"], q["attention_mask"]), model(docs["input_ids"], docs["attention_mask"])
            )

        return run

    for case, fn in (
        ("encoder-only", encoder_only),
        ("st", st_step),
        ("plain", spladekit(model_plain)),
        ("fused", spladekit(model_fused)),
    ):
        if case not in args.cases:
            continue
        yield case, with_optimizer(fn)


def active_per_doc(model, batch) -> float:
    with torch.inference_mode():
        w = model(batch["input_ids"], batch["attention_mask"])
    return float((w > 0).sum(dim=1).float().mean())


def shift_bias_to_sparsity(model: SpladeModel, batch, fraction: float, dtype) -> None:
    """Lower the decoder bias so that about ``fraction`` of the batch's entries are active."""
    from spladekit.model.fused import _masked_max

    head = model.head
    with (
        torch.inference_mode(),
        torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype != torch.float32),
    ):
        hidden = model.hidden_states(batch["input_ids"], batch["attention_mask"])
        w = head.weight.to(hidden.dtype)
        b = head.bias.to(hidden.dtype)
        maxval, _ = _masked_max(hidden, batch["attention_mask"], w, b, False, "torch")
    flat = maxval.flatten()
    flat = flat[torch.isfinite(flat)].float()
    if flat.numel() > 8_000_000:
        flat = flat[torch.randperm(flat.numel(), device=flat.device)[:8_000_000]]
    threshold = torch.quantile(flat, 1.0 - fraction)
    with torch.no_grad():
        head.decoder.bias -= threshold.to(head.decoder.bias.dtype)


def run_config(shape: Shape, args, device: torch.device, dtype: torch.dtype, workdir: Path) -> list[Row]:
    rows: list[Row] = []
    st = build_st_model(shape, workdir / shape.name, device)
    mlm = st_mlm(st)
    model_plain = SpladeModel(mlm, "plain")
    model_fused = SpladeModel(mlm, "fused")
    q = random_batch(shape.q, shape.q_len, shape.vocab, device, 1)
    d_pos = random_batch(shape.d // 2, shape.d_len, shape.vocab, device, 2)
    d_neg = random_batch(shape.d - shape.d // 2, shape.d_len, shape.vocab, device, 3)
    enc = random_batch(shape.enc, shape.enc_len, shape.vocab, device, 4)
    train_tokens = shape.q * shape.q_len + shape.d * shape.d_len
    for sparsity in args.sparsities:
        if sparsity != "init":
            shift_bias_to_sparsity(model_fused, d_pos, float(sparsity.rstrip("%")) / 100, dtype)
        mlm.train()
        active = active_per_doc(model_fused, d_pos)
        for case, (step, opt) in train_cases(st, model_plain, model_fused, q, d_pos, d_neg, device, dtype, args):
            try:
                seconds, peak = timed(step, device, args.warmup, args.steps)
            except torch.OutOfMemoryError:
                seconds, peak = float("nan"), float("nan")
            del opt
            rows.append(
                Row(
                    shape.name,
                    "train",
                    sparsity,
                    case,
                    seconds,
                    train_tokens / seconds,
                    shape.d / seconds,
                    peak / 2**30,
                    active,
                )
            )
            print(f"  {shape.name} train {sparsity} {case}: {seconds:.4f} s, {peak / 2**30:.2f} GiB", file=sys.stderr)
            mlm.zero_grad(set_to_none=True)
            gc.collect()
        # encoding, model in the benchmark dtype
        mlm.eval()
        mlm.to(dtype)
        # the cases run in this iteration, before the models are deleted at the end (what ruff's F821 sees)
        enc_cases = {
            "encoder-only": lambda: model_fused.hidden_states(enc["input_ids"], enc["attention_mask"]).amax(dim=1),  # noqa: F821
            "st": lambda: st(enc)["sentence_embedding"],  # noqa: F821
            "plain": lambda: model_plain(enc["input_ids"], enc["attention_mask"]),  # noqa: F821
            "fused": lambda: model_fused(enc["input_ids"], enc["attention_mask"]),  # noqa: F821
        }
        active = active_per_doc(model_fused, enc)
        for case, fn in enc_cases.items():
            if case not in args.cases:
                continue

            def call(fn=fn):
                with torch.inference_mode():
                    fn()

            try:
                seconds, peak = timed(call, device, args.warmup, args.steps)
            except torch.OutOfMemoryError:
                seconds, peak = float("nan"), float("nan")
            rows.append(
                Row(
                    shape.name,
                    "encode",
                    sparsity,
                    case,
                    seconds,
                    shape.enc * shape.enc_len / seconds,
                    shape.enc / seconds,
                    peak / 2**30,
                    active,
                )
            )
            print(f"  {shape.name} encode {sparsity} {case}: {shape.enc / seconds:.1f} docs/s", file=sys.stderr)
        mlm.float()
    del st, mlm, model_plain, model_fused
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def table(rows: list[Row]) -> str:
    """Markdown table with ratios against ST and the encoder-only case of the same group."""
    lines = [
        "| config | task | sparsity | case | s/step | tokens/s | docs/s | peak GiB | active/doc | time ÷ ST | speed × ST | mem ÷ ST | mem ÷ encoder-only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        groups.setdefault((r.config, r.task, r.sparsity), {})[r.case] = r
    for r in rows:
        g = groups[(r.config, r.task, r.sparsity)]
        st, enc = g.get("st"), g.get("encoder-only")
        ratio = lambda a, b: f"{a / b:.2f}" if b and b == b and a == a else "–"  # noqa: E731
        lines.append(
            f"| {r.config} | {r.task} | {r.sparsity} | {r.case} | {r.seconds:.4f} | {r.tokens_per_s:,.0f} | "
            f"{r.docs_per_s:,.1f} | {r.peak_gib:.3f} | {r.active_per_doc:.0f} | "
            f"{ratio(r.seconds, st.seconds) if st else '–'} | {ratio(st.seconds, r.seconds) if st else '–'} | "
            f"{ratio(r.peak_gib, st.peak_gib) if st else '–'} | {ratio(r.peak_gib, enc.peak_gib) if enc else '–'} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- SciFact (CPU)
def scifact_encoding(n_docs: int, batch_size: int) -> str:
    """Encode the first ``n_docs`` SciFact documents with splade-tiny, plain vs fused head."""
    from spladekit.data.beir import read_corpus
    from spladekit.data.resolve import shared_roots
    from spladekit.model.encoder import SpladeEncoder

    roots = [
        r for r in shared_roots() if (r / "models" / "splade-tiny").is_dir() and (r / "data/beir/scifact").is_dir()
    ]
    if not roots:
        return "SciFact / splade-tiny not found in the shared folder: skipped"
    root = roots[0]
    corpus = read_corpus(root / "data/beir/scifact/corpus.jsonl.gz")
    texts = list(corpus.values())[:n_docs]
    out, mats = [], {}
    for impl in ("plain", "fused"):
        encoder = SpladeEncoder.from_pretrained(
            root / "models/splade-tiny", head_impl=impl, device="cpu", batch_size=batch_size
        )
        encoder.encode_documents(texts[:batch_size])  # warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        mats[impl] = encoder.encode_documents(texts)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        out.append(f"| {impl} | {len(texts)} | {cpu:.2f} | {len(texts) / cpu:.1f} | {wall:.2f} |")
    diff = abs(mats["plain"] - mats["fused"]).max()
    header = [
        f"SciFact documents, splade-tiny, CPU ({torch.get_num_threads()} threads), batch {batch_size}, max length 256:",
        "",
        "| head | docs | CPU seconds (all threads) | docs per CPU second | wall seconds |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(header + out + ["", f"max |plain − fused| over all weights: {diff:.2e}"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--configs", nargs="*", help="shape names (default: all of the mode)")
    parser.add_argument("--cases", nargs="*", default=["encoder-only", "st", "plain", "fused"])
    parser.add_argument("--sparsities", nargs="*", default=["init", "1%"], help="'init' and/or e.g. '1%%'")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="default: bf16 on GPU, fp32 on CPU")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default 1 in CPU mode)")
    parser.add_argument("--scifact-docs", type=int, default=0, help="also encode this many SciFact docs (CPU)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/spladekit-bench"))
    args = parser.parse_args(argv)
    gpu = args.mode == "gpu"
    if args.threads or not gpu:
        torch.set_num_threads(args.threads or 1)
    if gpu and not torch.cuda.is_available():
        sys.exit("--mode gpu needs CUDA")
    device = torch.device("cuda" if gpu else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype or ("bf16" if gpu else "fp32")]
    args.warmup = args.warmup if args.warmup is not None else (3 if gpu else 1)
    args.steps = args.steps or (10 if gpu else 2)
    shapes = GPU_SHAPES if gpu else CPU_SHAPES
    if args.configs:
        shapes = [s for s in shapes if s.name in args.configs]
    args.workdir.mkdir(parents=True, exist_ok=True)
    import sentence_transformers
    import transformers

    card = (
        torch.cuda.get_device_name()
        if gpu
        else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    )
    print(
        f"# {card}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, sentence-transformers {sentence_transformers.__version__}; "
        f"dtype {dtype}; warmup {args.warmup}, steps {args.steps}"
    )
    rows: list[Row] = []
    for shape in shapes:
        print(f"- {shape}", file=sys.stderr)
        rows += run_config(shape, args, device, dtype, args.workdir)
    print(table(rows))
    if args.out:
        from spladekit.io import write_json

        write_json(args.out, {"card": card, "dtype": str(dtype), "rows": [asdict(r) for r in rows]})
    if args.scifact_docs:
        print()
        print(scifact_encoding(args.scifact_docs, 32))


if __name__ == "__main__":
    main()
