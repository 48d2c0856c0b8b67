"""Load on ``spladekit serve``: throughput and latency at 1, 8 and 32 concurrent clients against 1 and
2 workers, text and vector queries; an overload run at 2x the measured capacity; the workers' memory.

Everything goes to 127.0.0.1 only, and every loop is bounded in requests and in seconds.

Index: the 5,183 SciFact documents encoded with ``../shared/models/splade-tiny`` (256 tokens),
built once into ``benchmarks/.cache/serve/scifact`` (git-ignored). Queries: the 300 SciFact test
queries, one per request, k = 10, exact search; as texts (encoded by the server) and as sparse
vectors (encoded here once, by the same model).

Each worker and this process use one torch thread (``--threads 1``: on a shared 2-core machine two
threads per process contend and encode up to 10x slower). Per configuration (workers x query kind
x clients), a closed loop: each client sends its next
request when the previous answer arrived, until ``--requests`` answers or ``--seconds`` have
passed (after ``--warmup`` requests not counted). Reported: answers/s, p50/p95/p99 latency (ms,
at the client), errors (anything but 200; 503s counted apart), and the hits' agreement with
``Index.search`` in this process on the same queries (vectors: identical lists; texts: same top-10
ids), and the CPU seconds per request of the server (all its processes, /proc/PID/stat) and of this
load generator, apart (they share the machine's cores). The anchor, measured in the same run: the same queries through ``Index.search`` in process,
one query per call (text: encoding included), and all in one call.

Overload: a server with ``--overload-queue`` waiting requests per worker, fed by an open loop at
2x the capacity measured for it (the best closed-loop answers/s of that worker count, text queries)
for ``--overload-seconds``: counts of 200 and 503 (by cause, from the 503's message), latency of the
answered requests in the first and second half of the run, and the workers' memory (sum of PSS from
``/proc/PID/smaps_rollup``) sampled through the run. Run twice per worker count, one after the other:
with the queue-wait deadline ``--max-queue-wait-ms`` set to the queue's drain time at that capacity
(queue × workers ÷ capacity) and the latency limit ``--max-latency-ms`` set to the bound below; with
the deadline alone; and with neither (the queue bound alone) as the anchor. The bound of an
answered request's latency is that deadline plus one full batch at capacity (max batch × workers ÷
capacity), i.e. (queue + max batch) × workers ÷ capacity; reported against it: max and p99 of the
latency at the client, and of the server's own ``took_ms`` (from the request's body read to its
answer: the part the deadline bounds, without the wait for the event loop before it and the
response's writing after it).

Memory: after each worker count's runs, the sum over the server's processes of PSS
(``smaps_rollup``), and the PSS and RSS of the mappings of the index's files (``/proc/PID/smaps``):
the page cache holds the index once, so with 2 workers the index's PSS sum stays what it is with 1
while each worker's RSS of it is the whole.

Load: ``--busy`` keeps one competing process on the machine for the whole run (a pure-Python busy
loop, its own lifetime bounded to 30 minutes, killed at the end), the anchor and every server run
included, as ``benchmarks/encode_cpu.py``'s "busy" load: a server sharing its cores with other work.

    PYTHONPATH=src python benchmarks/serve.py --out benchmarks/.cache/serve/results.json
    PYTHONPATH=src python benchmarks/serve.py --busy --out benchmarks/.cache/serve/results-busy.json

Seismic by shards (issue 35 part 3): ``--backend seismic`` builds (or reopens) the index's Seismic
shards (``Index.seismic(memory_budget=--seismic-budget)``) before any server starts, and every request,
the anchor included, asks for ``"backend": "seismic"`` at ``--query-cut`` / ``--heap-factor``; each
worker loads every shard (pyseismic reads its files into memory: no sharing between spawned workers, so the
PSS sum grows by one Seismic index per worker), unless ``--share-index`` (servers of 2+ workers fork them
from the server after it loaded the shards: one copy). ``--index FOLDER`` serves an existing folder (e.g. the
8.8M folder of ``benchmarks/retrieval.py --keep``) with ``retrieval.queries()``' vectors; it must
record a query model for text queries. ``--no-overload`` skips the overload runs.

    PYTHONPATH=src python benchmarks/serve.py --index W/synthetic-8800000/spladekit --backend seismic \
        --clients 1 --clients 8 --workers 1 --workers 2 --no-overload --out benchmarks/.cache/serve/results-8m.json
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPLADEKIT_BENCH_CACHE", HERE / ".cache")) / "serve"
K = 10
MAX_BATCH = 32  # the server's default --max-batch, which the runs use


def shared() -> Path:
    return Path(os.environ.get("SPLADEKIT_SHARED", HERE.parent.parent / "shared"))


# ----------------------------------------------------------------------------------- data
def scifact_index():
    """The SciFact index (built once, cached) and its 300 test queries as texts."""
    import torch

    from spladekit.data.beir import load_beir
    from spladekit.index.index import Index

    folder = CACHE / "scifact"
    model = shared() / "models" / "splade-tiny"
    dataset = load_beir(shared() / "data" / "beir" / "scifact", "test")
    if not (folder / "index.json").exists():
        from spladekit.model.encoder import SpladeEncoder

        torch.set_num_threads(1)
        encoder = SpladeEncoder.from_pretrained(str(model), batch_size=32)
        Index.build(
            encoder,
            shared() / "data" / "beir" / "scifact" / "corpus.jsonl.gz",
            folder,
            metadata={"model": str(model)},
            distributed=False,
            show_progress=True,
        )
    return Index.open(folder), list(dataset.queries.values())


def synthetic_index(n: int, vocabulary_from):
    """``synthetic-N`` of ``benchmarks/retrieval.py`` (quantised impacts, SciFact rows resampled) as
    an index folder recording splade-tiny as its query model (built once, cached), and the 300
    SciFact test queries as quantised vectors (``retrieval.queries()``, the queries of its 1M runs)."""
    sys.path.insert(0, str(HERE))
    import retrieval

    from spladekit.index.index import Index
    from spladekit.index.layout import load_vocabulary
    from spladekit.index.writer import write_index

    folder = CACHE / f"synthetic-{n}"
    if not (folder / "index.json").exists():
        blocks, ids, vocab = retrieval.corpus_blocks(f"synthetic-{n}")
        write_index(
            folder,
            blocks,
            ids,
            vocab,
            {"corpus": f"synthetic-{n}", "model": str(shared() / "models" / "splade-tiny")},
            load_vocabulary(vocabulary_from),
        )
    return Index.open(folder), retrieval.queries()[0]


# ----------------------------------------------------------------------------------- the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m spladekit serve`` on a free loopback port; stopped by its PID (and its workers' PIDs).

    It stays in this process's process group, so that what pauses or stops a benchmark run by its
    group (``/work/notes/exclusive.sh`` pauses every other group's Python processes while a timing
    run holds the machine) treats the server with its load generator."""

    def __init__(self, folder: Path, workers: int, log: Path, *options: str):
        import httpx

        self.url = f"http://127.0.0.1:{free_port()}"
        command = [
            sys.executable,
            "-m",
            "spladekit",
            "serve",
            "--index",
            str(folder),
            "--port",
            self.url.rsplit(":", 1)[1],
            "--workers",
            str(workers),
            "--threads",
            "1",
            *options,
        ]
        self.log = open(log, "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline, seen = time.monotonic() + 180, set()
        while len(seen) < workers:  # every worker loaded: /health on fresh connections answered by each pid
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{len(seen)} of {workers} workers answered within 180 s")
            try:
                seen.add(httpx.get(self.url + "/health", timeout=1).json()["pid"])
            except httpx.TransportError:
                time.sleep(0.3)

    def processes(self) -> list[int]:
        """The server's PID and its descendants (uvicorn's workers, multiprocessing's helpers)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        out, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def stop(self) -> None:
        """SIGTERM to the server (uvicorn's supervisor stops its workers); after 30 s, SIGKILL to it and
        to each of its descendants seen before, by PID."""
        if self.process.poll() is None:
            pids = self.processes()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                self.process.wait(timeout=10)
        self.log.close()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (``/proc/PID/stat``; 0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def pss_kib(pid: int) -> int:
    """PSS of a process, KiB (``/proc/PID/smaps_rollup``; 0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def index_mapping_kib(pid: int, folder: Path) -> tuple[int, int]:
    """``(PSS, RSS)`` KiB of the process's mappings of files under ``folder``."""
    pss = rss = 0
    inside = False
    prefix = str(folder.resolve())
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return 0, 0
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):  # a mapping's header line
            inside = len(head) >= 6 and head[5].startswith(prefix)
        elif inside and line.startswith("Pss:"):
            pss += int(head[1])
        elif inside and line.startswith("Rss:"):
            rss += int(head[1])
    return pss, rss


def memory(server: Server, folder: Path) -> dict:
    pids = server.processes()
    index = [index_mapping_kib(p, folder) for p in pids]
    return {
        "pss_sum_mib": sum(pss_kib(p) for p in pids) / 1024,
        "processes": len(pids),
        "index_pss_sum_mib": sum(p for p, _ in index) / 1024,
        "index_rss_per_process_mib": [r / 1024 for _, r in index if r],
    }


# ----------------------------------------------------------------------------------- load
def percentiles(ms: list[float]) -> dict:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99)}


class RawHTTP:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams, for the load generator only (the
    tests use httpx): httpx's AsyncClient spent 2 ms of CPU per request at 8 connections and 6.6 ms
    at 32 on this machine (it capped even ``GET /health`` at 95 requests/s), so it, not the server,
    was what the runs measured. Responses must carry ``Content-Length`` (uvicorn's do)."""

    def __init__(self, url: str):
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.idle: list = []

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``(status, body)``; status -1 when the connection failed (it is then dropped). A kept-alive
        connection the server closed meanwhile (uvicorn closes idle ones after 5 s) is retried once
        on a new connection, as HTTP clients do."""
        if self.idle:
            status, data = await self._post(self.idle.pop(), path, body)
            if status != -1:
                return status, data
        try:
            connection = await asyncio.open_connection(self.host, self.port)
        except OSError:
            return -1, b""
        return await self._post(connection, path, body)

    async def _post(self, connection, path: str, body: bytes) -> tuple[int, bytes]:
        reader, writer = connection
        try:
            writer.write(
                b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (path.encode(), self.host.encode(), len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = dict(line.split(b":", 1) for line in lines[1:] if b":" in line)
            headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
            data = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            writer.close()
            return -1, b""
        if headers.get(b"connection", b"").lower() == b"close":
            writer.close()
        else:
            self.idle.append((reader, writer))
        return int(lines[0].split()[1]), data

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


def encoded(bodies: list[dict]) -> list[bytes]:
    return [json.dumps(b).encode() for b in bodies]


async def closed_loop(url: str, bodies: list[bytes], clients: int, requests: int, seconds: float, warmup: int) -> dict:
    """``clients`` clients, each on its own connection sending its next request when its answer
    came; bounded by ``requests`` answers and ``seconds``."""
    latencies, codes, answers = [], {}, {}
    sent = 0
    http = [RawHTTP(url) for _ in range(clients)]
    for i in range(warmup):
        await http[0].post("/search", bodies[i % len(bodies)])
    began = time.perf_counter()
    stop_at = began + seconds

    async def one_client(conn):
        nonlocal sent
        while sent < requests and time.perf_counter() < stop_at:
            i = sent
            sent += 1
            t = time.perf_counter()
            status, data = await conn.post("/search", bodies[i % len(bodies)])
            latencies.append((time.perf_counter() - t) * 1000)
            codes[status] = codes.get(status, 0) + 1
            if status == 200 and i < len(bodies):
                answers[i] = [h["id"] for h in json.loads(data)["results"][0]["hits"]]

    cpu = time.process_time()
    await asyncio.gather(*(one_client(conn) for conn in http))
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    for conn in http:
        conn.close()
    ok = codes.get(200, 0)
    return {
        "clients": clients,
        "answers": ok,
        "seconds": elapsed,
        "throughput": ok / elapsed,
        **percentiles(latencies),
        "errors": sum(n for c, n in codes.items() if c not in (200, 503)),
        "refused_503": codes.get(503, 0),
        "client_cpu_ms_per_request": 1000 * cpu / max(1, sum(codes.values())),
        "hits": answers,
    }  # warm-up not in the client's


def refusal_cause(body: bytes) -> str:
    """The cause of a 503 from its message (``spladekit.serve.batching.Overloaded``; the request timeout's own)."""
    message = json.loads(body).get("error", "") if body else ""
    for cause, words in (
        ("queue_full", "queue is full"),
        ("queue_wait", "in the queue, over the queue-wait limit"),
        ("expected_wait", "ms of work, over the queue-wait limit"),
        ("expected_wait", "ms of work, over the latency limit"),
        ("latency", "more, over the latency limit"),
        ("timeout", "request timeout"),
    ):
        if words in message:
            return cause
    return "other"


async def open_loop(url: str, bodies: list[bytes], rate: float, seconds: float, sample) -> dict:
    """Requests started at ``rate`` per second for ``seconds`` whatever the answers (at most
    ``rate * seconds`` of them; a request takes an idle connection or opens one); ``sample()``
    called every 0.5 s (memory)."""
    total = int(rate * seconds)
    records: list[tuple[float, float, int]] = []  # (start offset s, latency ms, status)
    took: list[float] = []  # the server's took_ms of the answered requests
    causes: dict[str, int] = {}
    samples = []
    http = RawHTTP(url)
    began = time.perf_counter()

    async def one(i):
        t = time.perf_counter()
        status, data = await http.post("/search", bodies[i % len(bodies)])
        records.append((t - began, (time.perf_counter() - t) * 1000, status))
        if status == 200:
            took.append(json.loads(data)["took_ms"])
        elif status == 503:
            cause = refusal_cause(data)
            causes[cause] = causes.get(cause, 0) + 1

    async def sampler():
        while time.perf_counter() - began < seconds + 1:
            samples.append((time.perf_counter() - began, sample()))
            await asyncio.sleep(0.5)

    tasks = [asyncio.ensure_future(sampler())]
    for i in range(total):
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    http.close()
    half = seconds / 2
    served = [(s, ms) for s, ms, status in records if status == 200]
    first = [ms for s, ms in served if s < half]
    second = [ms for s, ms in served if s >= half]
    codes: dict[int, int] = {}
    for _, _, status in records:
        codes[status] = codes.get(status, 0) + 1
    return {
        "rate": rate,
        "sent": total,
        "answered_200": codes.get(200, 0),
        "refused_503": codes.get(503, 0),
        "errors": sum(n for c, n in codes.items() if c not in (200, 503)),
        "refused_by_cause": causes,
        "answered_per_s": codes.get(200, 0) / seconds,
        "first_half": percentiles(first),
        "second_half": percentiles(second),
        "all": percentiles([ms for _, ms in served]),
        "max_ms": max((ms for _, ms in served), default=None),
        "server_took": {**percentiles(took), "max_ms": max(took, default=None)},
        "pss_sum_mib": [m for _, m in samples],
    }


# ----------------------------------------------------------------------------------- anchor
def in_process(index, texts: list[str], vectors, opts: dict | None = None) -> dict:
    """The same queries through Index.search in this process (``opts``: its backend keywords): one per
    call, and all in one call."""
    out = {}
    encoder = index.query_encoder()
    opts = opts or {}
    for kind, one, everything in (
        (
            "text",
            lambda i: index.search([texts[i]], k=K, encoder=encoder, **opts),
            lambda: index.search(texts, k=K, encoder=encoder, **opts),
        ),
        ("vector", lambda i: index.search(vectors[i : i + 1], k=K, **opts), lambda: index.search(vectors, k=K, **opts)),
    ):
        one(0)
        began = time.perf_counter()
        for i in range(len(texts)):
            one(i)
        per_call = len(texts) / (time.perf_counter() - began)
        began = time.perf_counter()
        result = everything()
        batch = len(texts) / (time.perf_counter() - began)
        out[kind] = {
            "one_per_call_qps": per_call,
            "one_call_qps": batch,
            "hits": [[d for d, _ in h] for h in result.hits],
        }
    return out


def agreement(answers: dict[int, list[str]], want: list[list[str]]) -> float:
    """Fraction of the answered queries (first pass over the queries, those of the anchor) whose top-k ids equal ``want``'s."""
    checked = [i for i in answers if i < len(want)]
    if not checked:
        return float("nan")
    return sum(answers[i] == want[i] for i in checked) / len(checked)


# ----------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients", type=int, action="append", help="concurrent clients (repeatable; default 1, 8, 32)"
    )
    parser.add_argument("--workers", type=int, action="append", help="worker counts (repeatable; default 1, 2)")
    parser.add_argument("--requests", type=int, default=1500, help="answers per run at most")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per run at most")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--overload-seconds", type=float, default=10.0)
    parser.add_argument("--overload-queue", type=int, default=32, help="queue size of the overload run's server")
    parser.add_argument(
        "--synthetic",
        type=int,
        help="serve benchmarks/retrieval.py's synthetic-N corpus instead of SciFact (e.g. 1000000)",
    )
    parser.add_argument(
        "--anchor-queries",
        type=int,
        default=300,
        help="queries of the in-process anchor (all 300 at SciFact; fewer at 1M)",
    )
    parser.add_argument(
        "--index", type=Path, help="serve this index folder (its vectors: retrieval.queries()) instead of SciFact"
    )
    parser.add_argument(
        "--backend", choices=("exact", "seismic"), default="exact", help="the backend every request asks for"
    )
    parser.add_argument(
        "--seismic-budget", type=int, help="bytes of build memory of one Seismic shard (default: the library's)"
    )
    parser.add_argument(
        "--query-cut", type=int, default=20, help="Seismic query_cut of every request (backend seismic)"
    )
    parser.add_argument(
        "--heap-factor", type=float, default=0.5, help="Seismic heap_factor of every request (backend seismic)"
    )
    parser.add_argument("--no-overload", action="store_true", help="skip the overload runs")
    parser.add_argument(
        "--share-index",
        action="store_true",
        help="servers of 2+ workers with --share-index (workers forked after the index loaded: one copy of the Seismic shards)",
    )
    parser.add_argument("--busy", action="store_true", help="one competing busy-loop process beside the whole run")
    parser.add_argument("--out", type=Path, default=CACHE / "results.json")
    args = parser.parse_args()
    if args.synthetic and args.index:
        parser.error("--synthetic and --index name two indexes: give one")
    busy = subprocess.Popen([sys.executable, "-c", BUSY]) if args.busy else None
    try:
        run_all(args)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


BUSY = "import time\nend = time.time() + 1800\nwhile time.time() < end:\n    pass\n"


def run_all(args) -> None:
    clients_list, workers_list = args.clients or [1, 8, 32], args.workers or [1, 2]
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(
        1
    )  # as each worker (--threads 1): on 2 shared cores 2 torch threads contend (10x slower here)
    index, texts = scifact_index()
    vectors = index.query_encoder().encode_queries(texts)
    if args.synthetic:
        index, vectors = synthetic_index(args.synthetic, index.folder)
    elif args.index:
        from spladekit.index.index import Index

        sys.path.insert(0, str(HERE))
        import retrieval

        index, vectors = Index.open(args.index), retrieval.queries()[0]
        texts = texts[: vectors.shape[0]]
    route, opts = {}, {}
    if args.backend == "seismic":
        from spladekit.index.seismic import SeismicSearchParams
        from spladekit.index.seismic_store import SeismicConfig

        began = time.perf_counter()
        shards = len(
            index.seismic(memory_budget=args.seismic_budget)
        )  # built (or reopened) here, once, before any server
        print(f"seismic: {shards} shards ready in {time.perf_counter() - began:.0f} s", flush=True)
        route = {"backend": "seismic", "seismic": {"query_cut": args.query_cut, "heap_factor": args.heap_factor}}
        opts = {
            "searcher": SeismicConfig(search=SeismicSearchParams(**route["seismic"]))
        }  # the requests' own settings, in process
    arrays_mib = sum(f.stat().st_size for f in index.folder.glob("*.npy")) / 2**20
    bodies = {
        "text": encoded([{"query": t, "k": K, **route} for t in texts]),
        "vector": encoded(
            [
                {
                    "vector": {
                        "indices": [int(j) for j in vectors[i].indices],
                        "values": [float(w) for w in vectors[i].data],
                    },
                    "k": K,
                    **route,
                }
                for i in range(len(texts))
            ]
        ),
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load": "busy (one competing busy-loop process)" if args.busy else "idle",
        "load_average_start": os.getloadavg(),
        "num_docs": len(index),
        "index_arrays_mib": arrays_mib,
        "route": route,
        "requests": args.requests,
        "seconds": args.seconds,
        "runs": [],
        "memory": {},
        "overload": {},
    }
    anchor = in_process(index, texts[: args.anchor_queries], vectors[: args.anchor_queries], opts)
    report["in_process"] = {kind: {k: v for k, v in a.items() if k != "hits"} for kind, a in anchor.items()}
    print(json.dumps(report["in_process"]), flush=True)
    folder = index.folder
    del index  # and its Seismic shards (≈ 11 GB at 8.8M), handed back before any server loads its own
    gc.collect()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).malloc_trim(0)  # glibc keeps freed heap pages unless asked
    share = ("--share-index",) if args.share_index else ()
    report["share_index"] = args.share_index

    for workers in workers_list:
        server = Server(folder, workers, logs / f"server-{workers}.log", *(share if workers > 1 else ()))
        try:
            for kind in ("text", "vector"):
                for clients in clients_list:
                    pids = server.processes()
                    before = cpu_seconds(pids)
                    run = asyncio.run(
                        closed_loop(server.url, bodies[kind], clients, args.requests, args.seconds, args.warmup)
                    )
                    served = max(1, run["answers"] + run["refused_503"] + run["errors"] + args.warmup)
                    run["server_cpu_ms_per_request"] = 1000 * (cpu_seconds(pids) - before) / served
                    run["agreement"] = agreement(run.pop("hits"), anchor[kind]["hits"])
                    run.update(
                        workers=workers,
                        kind=kind,
                        vs_in_process_one_per_call=run["throughput"] / anchor[kind]["one_per_call_qps"],
                    )
                    report["runs"].append(run)
                    print(json.dumps(run), flush=True)
            report["memory"][workers] = memory(server, folder)
            print(json.dumps({"workers": workers, **report["memory"][workers]}), flush=True)
        finally:
            server.stop()

    for workers in (
        [] if args.no_overload else workers_list
    ):  # overload: 2x the capacity measured for text queries, with and without the deadline
        capacity = max(r["throughput"] for r in report["runs"] if r["workers"] == workers and r["kind"] == "text")
        deadline_ms = (
            1000 * args.overload_queue * workers / capacity
        )  # the per-worker queue's drain time at capacity / workers
        batch_ms = 1000 * MAX_BATCH * workers / capacity  # one full batch of one worker at capacity / workers
        bound = float(f"{deadline_ms:.1f}") + batch_ms  # = (queue + max batch) x workers / capacity
        for deadline, limit in ((deadline_ms, bound), (deadline_ms, None), (None, None)):
            options = ["--queue-size", str(args.overload_queue)] + (
                [] if deadline is None else ["--max-queue-wait-ms", f"{deadline:.1f}"]
            )
            options += [] if limit is None else ["--max-latency-ms", f"{limit:.1f}"]
            name = f"overload-{workers}{'-deadline' if deadline else ''}{'-latency' if limit else ''}"
            server = Server(folder, workers, logs / f"{name}.log", *options, *(share if workers > 1 else ()))
            try:
                pids = server.processes()
                run = asyncio.run(
                    open_loop(
                        server.url,
                        bodies["text"],
                        2 * capacity,
                        args.overload_seconds,
                        lambda: sum(pss_kib(p) for p in pids) / 1024,  # noqa: B023 (called in this iteration only)
                    )
                )
                run.update(
                    workers=workers,
                    capacity=capacity,
                    queue_size=args.overload_queue,
                    max_queue_wait_ms=deadline,
                    max_latency_ms=None if limit is None else float(f"{limit:.1f}"),
                    bound_ms=bound,
                )
                report["overload"][name] = run
                print(json.dumps(run), flush=True)
            finally:
                server.stop()
    report["load_average_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(markdown(report))


def markdown(r: dict) -> str:
    lines = [
        f"Date {r['date']}; {r['machine']}; {r.get('load', 'idle')}; load average at start {r['load_average_start'][0]:.1f}, at end "
        f"{r['load_average_end'][0]:.1f}; {r['num_docs']} documents, index arrays {r['index_arrays_mib']:.1f} MiB; "
        f"k = {K}; backend {r.get('route', {}).get('backend', 'exact')} {r.get('route', {}).get('seismic', '')}; runs bounded by {r['requests']} answers / {r['seconds']:g} s.",
        "",
        "In process (`Index.search`, same queries): "
        + "; ".join(
            f"{kind}: {a['one_per_call_qps']:.0f} q/s one per call, {a['one_call_qps']:.0f} q/s all in one call"
            for kind, a in r["in_process"].items()
        ),
        "",
        "| workers | queries | clients | answers/s | × 1 client | ÷ in-process one per call | p50 ms | p95 ms | p99 ms | p99 ÷ p50 | errors | 503 | same hits | CPU ms per request: server / client |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        one = next(
            x["throughput"]
            for x in r["runs"]
            if x["workers"] == run["workers"]
            and x["kind"] == run["kind"]
            and x["clients"] == min(y["clients"] for y in r["runs"])
        )
        lines.append(
            f"| {run['workers']} | {run['kind']} | {run['clients']} | {run['throughput']:.0f} | {run['throughput'] / one:.2f} | "
            f"{run['vs_in_process_one_per_call']:.2f} | {run['p50_ms']:.1f} | {run['p95_ms']:.1f} | {run['p99_ms']:.1f} | "
            f"{run['p99_ms'] / run['p50_ms']:.2f} | {run['errors']} | {run['refused_503']} | {run['agreement']:.3f} | "
            f"{run['server_cpu_ms_per_request']:.2f} / {run['client_cpu_ms_per_request']:.2f} |"
        )
    lines += [
        "",
        "| workers | processes | PSS sum MiB | index files: PSS sum MiB | index files: RSS per process MiB |",
        "|---|---|---|---|---|",
    ]
    for workers, m in r["memory"].items():
        lines.append(
            f"| {workers} | {m['processes']} | {m['pss_sum_mib']:.0f} | {m['index_pss_sum_mib']:.1f} | "
            f"{', '.join(f'{x:.1f}' for x in m['index_rss_per_process_mib'])} |"
        )
    if not r["overload"]:  # --no-overload
        return "\n".join(lines)
    lines += [
        "",
        "| workers | deadline ms | latency limit ms | capacity answers/s | offered /s | answered /s | sent | 200 | 503: queue full / waited past deadline / expected wait / latency / timeout | errors "
        "| p50 / p99 ms first half | p50 / p99 ms second half | client p99 / max ms | server took_ms p99 / max | bound ms | max ÷ bound: client / server "
        "| PSS sum MiB first → max → last |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in r["overload"].values():
        f, s, a, t, mem, c = (
            o["first_half"],
            o["second_half"],
            o["all"],
            o["server_took"],
            o["pss_sum_mib"],
            o["refused_by_cause"],
        )
        deadline = "off" if o["max_queue_wait_ms"] is None else f"{o['max_queue_wait_ms']:.0f}"
        other = f" (+{c['other']} other)" if c.get("other") else ""
        limit = "off" if o.get("max_latency_ms") is None else f"{o['max_latency_ms']:.0f}"
        lines.append(
            f"| {o['workers']} | {deadline} | {limit} | {o['capacity']:.0f} | {o['rate']:.0f} | {o['answered_per_s']:.0f} | {o['sent']} | {o['answered_200']} | "
            f"{c.get('queue_full', 0)} / {c.get('queue_wait', 0)} / {c.get('expected_wait', 0)} / {c.get('latency', 0)} / {c.get('timeout', 0)}"
            f"{other} | {o['errors']} | "
            f"{f['p50_ms']:.0f} / {f['p99_ms']:.0f} | {s['p50_ms']:.0f} / {s['p99_ms']:.0f} | {a['p99_ms']:.0f} / {o['max_ms']:.0f} | "
            f"{t['p99_ms']:.0f} / {t['max_ms']:.0f} | {o['bound_ms']:.0f} | {o['max_ms'] / o['bound_ms']:.2f} / {t['max_ms'] / o['bound_ms']:.2f} | "
            f"{mem[0]:.0f} → {max(mem):.0f} → {mem[-1]:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
