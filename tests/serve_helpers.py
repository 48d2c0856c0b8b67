"""Helpers of the tests that run ``spladekit serve`` as a real server (tests/serve/test_server.py,
tests/serve/test_shared_index.py): a subprocess on a free loopback port, stopped by its PID (and its
workers by its process group), never left behind; the SciFact index they serve."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")


def scifact_index_with_seismic(folder: Path, num_docs: int):
    """``(index, queries)``: an index of ``num_docs`` SciFact documents (judged ones first, 96 tokens,
    splade-tiny) in ``folder`` with a stored Seismic index, and 40 test queries (skips without ../shared)."""
    import torch

    from spladekit.data.beir import load_beir
    from spladekit.data.resolve import shared_roots
    from spladekit.index.index import Index
    from spladekit.model.encoder import SpladeEncoder

    found = [(r / "data" / "beir" / "scifact", r / "models" / "splade-tiny") for r in shared_roots()]
    found = [(d, m) for d, m in found if d.is_dir() and (m / "model.safetensors").exists()]
    if not found:
        pytest.skip("shared SciFact + splade-tiny not found; set SPLADEKIT_SHARED")
    data, model = found[0]
    ds = load_beir(data, "test")
    judged = [d for q in ds.qrels.values() for d in q]
    ids = list(dict.fromkeys(judged + list(ds.corpus)))[:num_docs]
    encoder = SpladeEncoder.from_pretrained(str(model), doc_max_length=96, batch_size=64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on 2 shared cores one thread encodes faster than two contending ones
    try:
        index = Index.build(
            encoder, {i: ds.corpus[i] for i in ids}, folder, metadata={"model": str(model)}, distributed=False
        )
    finally:
        torch.set_num_threads(threads)
    index.seismic()  # stored in the folder: the server serves it, never builds it
    queries = list(ds.queries.values())[:40]
    return index, queries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


RUNNING: dict[int, subprocess.Popen] = {}
"""Servers started by this module and not yet stopped, by PID: stopped by the fixtures' finalisers,
and also at interpreter exit (atexit) and on SIGTERM / SIGHUP to pytest (whose default action would end
pytest without either), so that no test run leaves a ``spladekit serve`` behind. Each server is
started with ``PR_SET_PDEATHSIG`` (Linux): it gets SIGTERM when pytest dies even by SIGKILL."""


def stop(process: subprocess.Popen, ctrl_c: bool = False) -> None:
    """SIGTERM to the server (uvicorn's supervisor stops its workers), or with ``ctrl_c`` SIGINT to its
    whole process group (what Ctrl-C in a terminal sends: the workers get it too), then SIGKILL to
    its process group (its own session: the workers it started) if it has not exited within 20 s."""
    RUNNING.pop(process.pid, None)
    if process.poll() is None:
        if ctrl_c:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # workers left behind by a supervisor that died
    except (ProcessLookupError, PermissionError):
        pass
    if process.poll() is None:
        process.wait(timeout=10)


def _stop_all(*_args) -> None:
    for process in list(RUNNING.values()):
        stop(process)


def _on_signal(signum, frame):
    _stop_all()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        previous(signum, frame)
    else:  # the default action (end the process) after the servers are stopped
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


atexit.register(_stop_all)
_PREVIOUS = {}
if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
    for _signum in (signal.SIGTERM, signal.SIGHUP):
        _PREVIOUS[_signum] = signal.getsignal(_signum)
        signal.signal(_signum, _on_signal)


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent (pytest) dies (Linux ``prctl``; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class Server:
    """``python -m spladekit serve`` in a subprocess (own session), stopped by its PID."""

    def __init__(self, folder: Path, log: Path, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [
            sys.executable,
            "-m",
            "spladekit",
            "serve",
            "--index",
            str(folder),
            "--port",
            str(self.port),
            *options,
        ]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env=dict(os.environ, PYTHONFAULTHANDLER="1"),
            )  # stacks in the log on a fatal signal
        RUNNING[self.process.pid] = self.process
        try:
            self._wait_healthy()
        except BaseException:  # not answering, or pytest interrupted meanwhile: stopped here
            self.stop()
            raise

    HEALTH_WAIT_S = 240
    """How long a server may take to answer /health: each spawned worker imports torch and loads the
    model; with 2 workers beside the other test worker and a benchmark on a 2-core machine that took
    over 90 s (6 Dec 2026). Only a failing start waits this long."""

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.HEALTH_WAIT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(
            f"the server did not answer /health within {self.HEALTH_WAIT_S} s:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self, ctrl_c: bool = False) -> None:
        stop(self.process, ctrl_c)


def assert_quiet_stop(running: Server) -> None:
    """A stopped server's log ends with uvicorn's own lines: no interpreter-teardown noise (triton's
    "nanobind: leaked ..." lines, multiprocessing's "leaked semaphore objects" with workers > 1)."""
    log = running.log.read_text()
    assert "Finished server process" in log, log[-2000:]  # it did stop gracefully
    assert "leaked" not in log, log[-2000:]


def wait_for_workers(running: Server, workers: int) -> None:
    """Until ``/health`` on fresh connections has answered from ``workers`` processes (each loads its own
    index and encoder; one not yet listening gets no connections)."""
    seen, deadline = set(), time.monotonic() + 90
    while len(seen) < workers:
        assert time.monotonic() < deadline, f"{len(seen)} of {workers} workers answered within 90 s"
        seen.add(httpx.get(running.url + "/health").json()["pid"])
        time.sleep(0.05)


def vector_body(row) -> dict:
    """A CSR row as the JSON body's vector (float32 → Python float: exact, and its repr reads back exactly)."""
    return {"indices": [int(j) for j in row.indices], "values": [float(w) for w in row.data]}


def hits_of(body: dict) -> list[list[tuple[str, float]]]:
    return [[(h["id"], h["score"]) for h in r["hits"]] for r in body["results"]]


def assert_close_ranking(got, want):
    """Hits of text queries: the server encodes them in micro-batches of other sizes than the
    in-process call, so query weights may differ in the last bits (float32 matmuls of other
    shapes; ≤ ~1e-6 relative on splade-tiny): scores agree to rtol 1e-5, and ids agree wherever
    the neighbouring scores are more than that apart (a near-tie may swap)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], rtol=1e-5)
        scores = [s for _, s in w]
        for i, ((gid, _), (wid, _)) in enumerate(zip(g, w)):
            gaps = [abs(scores[i] - scores[j]) for j in (i - 1, i + 1) if 0 <= j < len(scores)]
            if all(gap > 1e-5 * abs(scores[i]) for gap in gaps):
                assert gid == wid


def smaps(pid: int) -> dict[str, int]:
    """The KiB fields of ``/proc/PID/smaps_rollup`` (Rss, Pss, Anonymous, Shared_Dirty, Private_Dirty, ...)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields


def workers_of(running: Server) -> list[int]:
    """The PIDs of the server's worker processes: its children, less multiprocessing's resource tracker
    (spawned workers start one beside them; forked workers do not)."""
    pid = running.process.pid
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children += [int(c) for c in f.read().split()]
    workers = []
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"resource_tracker" in f.read():
                    continue
        except FileNotFoundError:  # ended between the two reads
            continue
        workers.append(child)
    return workers
