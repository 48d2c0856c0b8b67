"""CPU document and query encoding: spladekit's paths against sentence-transformers and fastembed, one run.

Every case encodes the same SciFact documents (first ``--docs`` of the corpus, title + text, max
length 256, batch 32) and the same test queries one at a time, with the same splade-tiny weights,
converted locally for each backend (no model hub):

    sk-fused        spladekit SpladeEncoder, fused head (the default)
    sk-plain        spladekit SpladeEncoder, plain head (full [B, L, V] logits)
    sk-onnx         spladekit export_onnx (vocabulary tiles in the graph) + OnnxSpladeEncoder
    sk-onnx-int8    the same with --quantize int8 (encoder int8, head float32)
    sk-onnx-int8h   the same with --quantize int8 --quantize-head (head int8 too, per column)
    st-torch        sentence-transformers SparseEncoder (Transformer fill-mask + SpladePooling), torch
    st-onnx         SparseEncoder(backend="onnx") (optimum's ONNX export of the MLM; pooling in torch)
    st-onnx-int8    the same, export_dynamic_quantized_onnx_model (avx512_vnni config)
    st-openvino     SparseEncoder(backend="openvino"), INFERENCE_PRECISION_HINT f32 (bf16 is OpenVINO's
                    default on CPUs with bf16 support)
    st-openvino-int8  the same with optimum-intel's 8-bit weight quantisation (``load_in_8bit``; the
                    static int8 of sentence-transformers needs a calibration set from the hub)
    fastembed       fastembed SparseTextEmbedding (its SPLADE++ class, onnxruntime) on a local ONNX
                    export of splade-tiny's MLM logits (torch.onnx, written by this script)

Packages that cannot live beside spladekit's environment get one of their own, created by this
script under ``benchmarks/.cache/`` (git-ignored) with ``python -m venv --system-site-packages``
(torch, onnxruntime and the rest are shared, only the conflicting packages are installed there):
``sentence-transformers[onnx]``/``optimum-onnx`` and ``optimum-intel[openvino]`` (need transformers < 4.58;
the project has 5.x; pip also puts its own torch there) and
``fastembed`` (needs huggingface_hub < 2). ``--setup`` creates them (PyPI only); a case whose
environment is missing or fails is reported as not run, with the reason.

Measure: each configuration (case × threads × load) runs in a fresh process with
``OMP_NUM_THREADS``/``torch.set_num_threads``/onnxruntime intra-op threads = ``--threads``;
configurations are interleaved (rep → load → threads → case) and the table gives medians over
``--reps``: documents per second (wall, ``--docs`` documents after a warm-up batch, tokenisation
included), documents per CPU-second (user + system time of the process during the timed encoding,
all threads), the process's peak RSS (``VmHWM``: the model, the libraries and the run), batch-1
query milliseconds (wall, median over ``--queries`` queries encoded one per call, tokenisation
included) and the agreement of the document vectors with sk-plain at one thread (float32 torch,
the formula's plain evaluation): the smallest cosine and the largest absolute difference ([PAD]
column zeroed for every case, spladekit's convention). Load "busy": the script starts one
competing process (a pure-Python busy loop, its own lifetime bounded to 15 minutes) before the
configuration and kills it after. The load average is printed at the start and the end.

Usage::

    PYTHONPATH=src python benchmarks/encode_cpu.py --setup          # once: the competitors' envs
    PYTHONPATH=src python benchmarks/encode_cpu.py --reps 3 --out benchmarks/.cache/encode_cpu.json
    # or one repetition per invocation (e.g. between other jobs), then the table of all of them:
    PYTHONPATH=src python benchmarks/encode_cpu.py --reps 1 --first-rep 1   # ... --first-rep 2
    PYTHONPATH=src python benchmarks/encode_cpu.py --report

Not a test: no assertion on speed. Prints a markdown table, then the ratios to sk-fused at one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
ENVS = {  # environment → packages it adds over the project's
    "st-onnx": ["sentence-transformers[onnx]", "optimum-intel[openvino]", "transformers<4.58"],
    "fastembed": ["fastembed==0.9.1"],
}
CASES = {  # case → environment (None: the project's own)
    "sk-fused": None,
    "sk-plain": None,
    "sk-onnx": None,
    "sk-onnx-int8": None,
    "sk-onnx-int8h": None,
    "st-torch": None,
    "st-onnx": "st-onnx",
    "st-onnx-int8": "st-onnx",
    "st-openvino": "st-onnx",
    "st-openvino-int8": "st-onnx",
    "fastembed": "fastembed",
}
BATCH, LENGTH = 32, 256


def env_python(env: str | None) -> Path:
    return Path(sys.executable) if env is None else CACHE / env / "bin" / "python"


def setup() -> None:
    """Create the competitors' environments (``--system-site-packages`` venvs, PyPI installs)."""
    for env, packages in ENVS.items():
        python = env_python(env)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(CACHE / env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)


# ---------------------------------------------------------------------------- preparing the models
def prepare(model: Path, work: Path, data: Path, n_docs: int, n_queries: int) -> None:
    """Texts and every backend's local model folder under ``work`` (made once, reused)."""
    import gzip

    import torch

    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.onnx_export import export_onnx

    work.mkdir(parents=True, exist_ok=True)
    texts = work / "texts.json"
    if texts.exists():  # made by an earlier run: reused only for the same --docs / --queries
        held = json.loads(texts.read_text())
        if len(held["docs"]) != n_docs or len(held["queries"]) != n_queries:
            texts.unlink()
    if not texts.exists():
        docs = []
        with gzip.open(data / "corpus.jsonl.gz", "rt") as fh:
            for line in fh:
                record = json.loads(line)
                docs.append((record.get("title", "") + " " + record["text"]).strip())
                if len(docs) == n_docs:
                    break
        test = {line.split("\t")[0] for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]}
        queries = [json.loads(line) for line in (data / "queries.jsonl").read_text().splitlines()]
        queries = [q["text"] for q in queries if q["_id"] in test][:n_queries]
        (work / "texts.json").write_text(json.dumps({"docs": docs, "queries": queries}))
    encoder = SpladeEncoder.from_pretrained(model, device="cpu")
    for name, kwargs in (
        ("sk-onnx", {}),
        ("sk-onnx-int8", {"quantize": "int8"}),
        ("sk-onnx-int8h", {"quantize": "int8", "quantize_head": True}),
    ):
        if not (work / name / "model.onnx").exists():
            export_onnx(encoder, work / name, **kwargs)
    folder = work / "fastembed-model"  # the MLM logits graph fastembed's SPLADE++ class expects
    if not (folder / "model.onnx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        mlm = encoder.model.mlm.float().eval()

        class Logits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mlm = mlm

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.mlm(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).logits

        sample = encoder.tokenizer(["fastembed export", "a"], padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch", 1: "sequence"}}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Logits(),
                tuple(sample[n] for n in names),
                str(folder / "model.onnx"),
                input_names=names,
                output_names=["logits"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        encoder.tokenizer.save_pretrained(folder)
        encoder.model.mlm.config.save_pretrained(folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["model_max_length"] = LENGTH  # fastembed truncates at the tokenizer's max length
        (folder / "tokenizer_config.json").write_text(json.dumps(config))


# ---------------------------------------------------------------------------- one configuration
def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(field + ":"))


def _cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _dense(rows, vocab: int):
    """Rows of any case's output as a dense float32 ``[n, V]`` array."""
    import numpy as np

    out = np.zeros((len(rows), vocab), dtype=np.float32)
    for i, (indices, values) in enumerate(rows):
        out[i, np.asarray(indices, dtype=np.int64)] = values
    return out


def build(case: str, model: Path, work: Path, threads: int):
    """``(encode_docs(texts) → [(indices, values)], encode_query(text) → anything, vocab)`` for ``case``."""
    if case.startswith("sk-"):
        import torch

        torch.set_num_threads(threads)
        if case in ("sk-fused", "sk-plain"):
            from spladekit.model.encoder import SpladeEncoder

            encoder = SpladeEncoder.from_pretrained(model, device="cpu", head_impl=case[3:], batch_size=BATCH)
        else:
            from spladekit.model.onnx_export import OnnxSpladeEncoder

            encoder = OnnxSpladeEncoder(work / case, batch_size=BATCH, threads=threads)

        def docs(texts):
            m = encoder.encode(texts, LENGTH).tocsr()
            return [
                (m.indices[m.indptr[i] : m.indptr[i + 1]], m.data[m.indptr[i] : m.indptr[i + 1]])
                for i in range(m.shape[0])
            ]

        return docs, lambda q: encoder.encode_queries([q]), encoder.vocab_size
    if case.startswith("st-"):
        import torch

        torch.set_num_threads(threads)
        from sentence_transformers import SparseEncoder

        kwargs = {}
        if case == "st-torch":
            st = SparseEncoder(str(model), device="cpu")
        elif case in ("st-onnx", "st-onnx-int8"):
            folder = work / "st-onnx-model"
            if not (folder / "onnx" / "model.onnx").exists():
                SparseEncoder(str(model), device="cpu", backend="onnx").save_pretrained(str(folder))
            if case == "st-onnx-int8" and not (folder / "onnx" / "model_qint8_avx512_vnni.onnx").exists():
                from sentence_transformers import export_dynamic_quantized_onnx_model

                export_dynamic_quantized_onnx_model(
                    SparseEncoder(str(folder), device="cpu", backend="onnx"), "avx512_vnni", str(folder)
                )
            if case == "st-onnx-int8":
                kwargs["model_kwargs"] = {"file_name": "onnx/model_qint8_avx512_vnni.onnx"}
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads  # onnxruntime's own pool ignores OMP_NUM_THREADS
            kwargs.setdefault("model_kwargs", {}).update(provider="CPUExecutionProvider", session_options=options)
            st = SparseEncoder(str(folder), device="cpu", backend="onnx", **kwargs)
        else:  # st-openvino(-int8), float32 forced; int8: optimum-intel's 8-bit weight quantisation at export
            ov = {"ov_config": {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": str(threads)}}
            if case == "st-openvino-int8":
                ov["load_in_8bit"] = True
            st = SparseEncoder(str(model), device="cpu", backend="openvino", model_kwargs=ov)
        st.max_seq_length = LENGTH

        def docs(texts):
            out = st.encode(texts, batch_size=BATCH, convert_to_tensor=True, convert_to_sparse_tensor=False)
            rows = []
            for row in out:
                idx = torch.nonzero(row).flatten()
                rows.append((idx.numpy(), row[idx].float().numpy()))
            return rows

        vocab = int(st[0].auto_model.config.vocab_size)
        return docs, lambda q: st.encode([q], convert_to_sparse_tensor=False), vocab
    if case == "fastembed":
        from fastembed import SparseTextEmbedding

        fe = SparseTextEmbedding(
            "prithivida/Splade_PP_en_v1", specific_model_path=str(work / "fastembed-model"), threads=threads
        )

        def docs(texts):
            return [(e.indices, e.values) for e in fe.embed(texts, batch_size=BATCH)]

        vocab = json.loads((work / "fastembed-model" / "config.json").read_text())["vocab_size"]
        return docs, lambda q: list(fe.query_embed(q)), vocab
    raise ValueError(case)


def worker(case: str, model: Path, work: Path, threads: int, out: Path) -> None:
    """Run one configuration in this (fresh) process and write its numbers and vectors to ``out``."""
    import numpy as np

    texts = json.loads((work / "texts.json").read_text())
    docs, queries = texts["docs"], texts["queries"]
    encode_docs, encode_query, vocab = build(case, model, work, threads)
    encode_docs(docs[:BATCH])  # warm-up: one batch
    wall, cpu = time.perf_counter(), _cpu()
    rows = encode_docs(docs)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    for q in queries[:3]:
        encode_query(q)
    times = []
    for q in queries:
        start = time.perf_counter()
        encode_query(q)
        times.append((time.perf_counter() - start) * 1000)
    dense = _dense(rows, vocab)
    np.save(out.with_suffix(".npy"), dense)
    out.write_text(
        json.dumps(
            {
                "docs_per_s": len(docs) / wall,
                "docs_per_cpu_s": len(docs) / cpu,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mib": _status("VmHWM") / 2**20,
                "query_ms": statistics.median(times),
            }
        )
    )


# ---------------------------------------------------------------------------- the run
BUSY = "import time\nend = time.time() + 900\nwhile time.time() < end:\n    pass\n"


def run_config(case, env, threads, load, args, out: Path) -> dict:
    python = env_python(env)
    if not python.exists():
        return {"error": f"environment {env} missing (run --setup)"}
    environment = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONPATH=str(ROOT / "src"),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    busy = subprocess.Popen([sys.executable, "-c", BUSY]) if load == "busy" else None
    try:
        if busy:
            time.sleep(0.5)
        proc = subprocess.run(
            [
                str(python),
                __file__,
                "--worker",
                case,
                "--threads",
                str(threads),
                "--model",
                str(args.model),
                "--work",
                str(args.work),
                "--result",
                str(out),
            ],
            env=environment,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    finally:
        if busy:
            busy.kill()
            busy.wait()
    if proc.returncode:
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}"}
    return json.loads(out.read_text())


def agreement(case_file: Path, reference):
    import numpy as np

    got = np.load(case_file)
    got[:, 0] = 0.0  # [PAD] = id 0 in splade-tiny's vocabulary: zero for every case (spladekit's convention)
    ref = reference.copy()
    ref[:, 0] = 0.0
    cos = (got * ref).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1), 1e-30)
    return float(cos.min()), float(np.abs(got - ref).max())


def report(results: dict, errors: dict, args, load_start, load_end, started: str) -> None:
    """Print the table of medians and the ratios (module docstring) from ``{(case, threads, load): [run]}``."""
    model_name = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    print(
        f"# CPU encoding, splade-tiny, {args.docs} SciFact documents × ≤{LENGTH} tokens, batch {BATCH}; "
        f"{args.queries} test queries one at a time; {started}; {model_name}, {os.cpu_count()} CPUs; "
        f"load average at start {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, "
        f"at end {load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f}; medians of {max((len(v) for v in results.values()), default=0)} interleaved repetitions\n"
    )
    print(
        "| case | threads | load | docs/s | docs per CPU-s | peak RSS MiB | batch-1 query ms | min cosine vs fp32 | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    med = {}
    for case in args.cases:
        for load in args.loads:
            for threads in args.threads:
                key = (case, threads, load)
                if key in errors and key not in results:
                    print(f"| {case} | {threads} | {load} | not run: {errors[key]} | | | | | |")
                    continue
                rs = results.get(key, [])
                if not rs:
                    continue
                m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                m["cos_min"] = min(r["cos_min"] for r in rs)
                m["max_abs"] = max(r["max_abs"] for r in rs)
                med[key] = m
                print(
                    f"| {case} | {threads} | {load} | {m['docs_per_s']:.1f} | {m['docs_per_cpu_s']:.1f} | "
                    f"{m['peak_rss_mib']:.0f} | {m['query_ms']:.2f} | {m['cos_min']:.5f} | {m['max_abs']:.2e} |"
                )
    print("\nRatios (same run):")
    for case in args.cases:
        for load in args.loads:
            one, two = med.get((case, 1, load)), med.get((case, 2, load))
            if one and two:
                print(f"- {case}, {load}: 2 threads ÷ 1 thread docs/s = {two['docs_per_s'] / one['docs_per_s']:.2f}")
    for load in args.loads:
        for threads in args.threads:
            fused, plain = med.get(("sk-fused", threads, load)), med.get(("sk-plain", threads, load))
            if fused and plain:
                print(
                    f"- sk-fused ÷ sk-plain docs/s, {threads} thread(s), {load}: {fused['docs_per_s'] / plain['docs_per_s']:.2f}"
                )
    for load in args.loads:
        for threads in args.threads:
            best = {
                side: min(
                    (
                        (m["query_ms"], k[0])
                        for k, m in med.items()
                        if k[0].startswith(side) and k[1:] == (threads, load)
                    ),
                    default=None,
                )
                for side in ("sk-", "st-")
            }
            if best["sk-"] and best["st-"]:
                print(
                    f"- batch-1 query, {threads} thread(s), {load}: best spladekit {best['sk-'][1]} "
                    f"{best['sk-'][0]:.2f} ms, best sentence-transformers {best['st-'][1]} {best['st-'][0]:.2f} ms"
                )


def report_existing(args) -> None:
    """:func:`report` of the run files in ``--work/runs`` (``CASE-THREADS-LOAD-REP.json`` + ``.npy``)."""
    import numpy as np

    runs = args.work / "runs"
    header = json.loads((runs / "started.json").read_text())
    ref = np.load(runs / "reference.npy")
    results: dict[tuple, list] = {}
    for path in sorted(runs.glob("segment-*.json")):
        seg = json.loads(path.read_text())
        print(
            f"# repetitions {seg['reps'][0]}–{seg['reps'][1]}: {seg['started']} to {seg['ended']}, load average "
            f"{'/'.join(f'{x:.2f}' for x in seg['load_start'])} → {'/'.join(f'{x:.2f}' for x in seg['load_end'])}"
        )
    for path in sorted(runs.glob("*-*-*-*.json")):
        if path.stem.startswith("segment-"):
            continue
        case, threads, load, _ = path.stem.rsplit("-", 3)
        if not path.with_suffix(".npy").exists():
            continue
        r = json.loads(path.read_text())
        r["cos_min"], r["max_abs"] = agreement(path.with_suffix(".npy"), ref)
        results.setdefault((case, int(threads), load), []).append(r)
    report(results, {}, args, header["load_start"], os.getloadavg(), header["started"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT.parent / "shared" / "models" / "splade-tiny")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "beir" / "scifact")
    parser.add_argument("--work", type=Path, default=CACHE / "encode_cpu")
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--first-rep",
        type=int,
        default=0,
        help="number of the first repetition (to run repetitions as separate invocations "
        "into the same --work, then --report all of them)",
    )
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--loads", nargs="*", default=["idle", "busy"], choices=["idle", "busy"])
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per configuration")
    parser.add_argument("--out", type=Path, default=None, help="write every measurement as JSON")
    parser.add_argument("--setup", action="store_true", help="create the competitors' environments and exit")
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the table of the runs already in --work/runs "
        "(e.g. of an interrupted run; load at end = now) and exit",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.work, args.threads[0], args.result)
        return
    if args.setup:
        setup()
        return
    if args.report:
        report_existing(args)
        return
    import numpy as np

    if not args.model.exists():
        sys.exit(f"{args.model}: no such model folder (the shared splade-tiny)")
    prepare(args.model, args.work, args.data, args.docs, args.queries)
    runs = args.work / "runs"
    runs.mkdir(exist_ok=True)
    load_start, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.first_rep == 0 or not (runs / "started.json").exists():
        (runs / "started.json").write_text(json.dumps({"load_start": load_start, "started": started}))
    print(f"# load average at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", file=sys.stderr)
    results: dict[tuple, list] = {}
    errors: dict[tuple, str] = {}
    reference = runs / "reference.json"
    run_config("sk-plain", None, 1, "idle", args, reference)  # the vectors every case is compared with
    ref = np.load(reference.with_suffix(".npy"))
    for rep in range(args.first_rep, args.first_rep + args.reps):
        for load in args.loads:
            for threads in args.threads:
                for case in args.cases:
                    key = (case, threads, load)
                    if key in errors:
                        continue
                    out = runs / f"{case}-{threads}-{load}-{rep}.json"
                    r = run_config(case, CASES[case], threads, load, args, out)
                    if "error" in r:
                        errors[key] = r["error"]
                        print(f"  {key}: {r['error']}", file=sys.stderr)
                        continue
                    r["cos_min"], r["max_abs"] = agreement(out.with_suffix(".npy"), ref)
                    results.setdefault(key, []).append(r)
                    print(
                        f"  rep {rep} {key}: {r['docs_per_s']:.1f} docs/s, {r['query_ms']:.1f} ms/query, "
                        f"{r['peak_rss_mib']:.0f} MiB (load {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                    )
    load_end = os.getloadavg()
    (runs / f"segment-{args.first_rep}.json").write_text(
        json.dumps(
            {
                "reps": [args.first_rep, args.first_rep + args.reps - 1],
                "started": started,
                "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "load_start": load_start,
                "load_end": load_end,
            }
        )
    )
    report(results, errors, args, load_start, load_end, started)
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "results": {"|".join(map(str, k)): v for k, v in results.items()},
                    "errors": {"|".join(map(str, k)): v for k, v in errors.items()},
                    "load_start": load_start,
                    "load_end": load_end,
                    "started": started,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
