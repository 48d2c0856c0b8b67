"""``spladekit serve --workers 2 --share-index``: the workers are forked from the server once it has
loaded the index, so they share its memory (the Seismic index, which pyseismic holds in memory).

Judged by the kernel's own accounting (``/proc/PID/smaps_rollup``): a forked worker's anonymous pages
written before the fork and only read since are ``Shared_Dirty`` (shared with the server and the other
worker); a spawned worker (``tests/serve/test_server.py``'s ``guarded``, the control) has none of those. And by
the answers: each worker answers text and vector queries, exact and Seismic, as :meth:`Index.search`
in this process does (torch's OpenMP pool and pyseismic's threads work in a forked child: a child's
first parallel operation hangs when the server ran torch with more than one thread before the fork).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from spladekit.index.index import searcher_config
from tests.serve_helpers import (
    Server,
    assert_close_ranking,
    assert_quiet_stop,
    hits_of,
    scifact_index_with_seismic,
    smaps,
    vector_body,
    wait_for_workers,
    workers_of,
)

httpx = pytest.importorskip("httpx")
pytestmark = [
    pytest.mark.xdist_group("serve-shared"),
    pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux's /proc/PID/smaps_rollup"),
]
K = 10


@pytest.fixture(scope="module")
def index_and_queries(tmp_path_factory):
    return scifact_index_with_seismic(tmp_path_factory.mktemp("shared") / "index", 120)


@pytest.fixture(scope="module")
def shared(index_and_queries, tmp_path_factory):
    index, _ = index_and_queries
    running = Server(
        index.folder, tmp_path_factory.mktemp("log") / "server.log", "--workers", "2", "--threads", "2", "--share-index"
    )
    try:
        wait_for_workers(running, 2)
        yield running
    finally:
        running.stop()
    assert_quiet_stop(running)
    assert running.process.returncode == 0  # SIGTERM: a graceful stop


def _answers_by_worker(url: str, bodies: list[dict], workers: int) -> dict[int, list[dict]]:
    """Every body answered by each of ``workers`` workers: fresh keep-alive connections (a connection
    stays on the worker that accepted it, whose PID /health names) until each worker has had one."""
    answers, deadline = {}, time.monotonic() + 90
    while len(answers) < workers:
        assert time.monotonic() < deadline, f"{len(answers)} of {workers} workers answered within 90 s"
        with httpx.Client(base_url=url, timeout=60) as client:
            pid = client.get("/health").json()["pid"]
            if pid not in answers:
                responses = [client.post("/search", json=b) for b in bodies]
                assert all(r.status_code == 200 for r in responses), [
                    r.text for r in responses if r.status_code != 200
                ][:2]
                answers[pid] = [r.json() for r in responses]
    return answers


@pytest.mark.parametrize("backend", ["exact", "seismic"])
def test_each_forked_worker_answers_like_index_search(shared, index_and_queries, backend):
    index, queries = index_and_queries
    queries = queries[:8]
    vectors = index.query_encoder().encode_queries(queries)
    want = index.search(vectors, k=K, searcher=searcher_config(backend)).hits
    bodies = [{"vector": vector_body(vectors[i]), "k": K, "backend": backend} for i in range(len(queries))]
    bodies.append({"query": queries, "k": K, "backend": backend})
    for pid, answers in _answers_by_worker(shared.url, bodies, 2).items():
        # exactly equal: the worker calls Index.search on the same float32 vectors (tests/serve/test_server.py)
        assert [hits_of(a)[0] for a in answers[:-1]] == want, pid
        assert_close_ranking(hits_of(answers[-1]), want)  # texts: encoded in the worker (its own encoder)


def test_forked_workers_share_the_servers_pages(shared):
    """Most of each forked worker's anonymous memory (the index, Seismic included, and the libraries
    the server loaded) is shared: Shared_Dirty ≥ half its Anonymous (measured 304 of 357 MiB on this
    120-document index; the worker's own encoder and its writes since the fork are the rest)."""
    workers = workers_of(shared)
    assert len(workers) == 2
    for pid in workers:
        m = smaps(pid)
        assert m["Shared_Dirty"] >= 0.5 * m["Anonymous"], (pid, m)


def test_forked_workers_each_accept_their_own_connections(shared):
    """Each forked worker listens on a socket of its own (its copy of the server's reserved socket
    replaced after the fork, spladekit.serve.workers): 16 connections opened at once reach both
    (all 16 on one worker: probability 2 / 2**16 by the kernel's hash; with the one inherited socket
    the first awake worker took nearly all)."""

    async def pids():
        clients = [httpx.AsyncClient(base_url=shared.url, timeout=30) for _ in range(16)]
        try:
            return [r.json()["pid"] for r in await asyncio.gather(*(c.get("/health") for c in clients))]
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    assert len(set(asyncio.run(pids()))) == 2


def test_a_killed_forked_worker_is_replaced_by_a_fork_that_answers(shared, index_and_queries):
    index, queries = index_and_queries
    before = workers_of(shared)
    os.kill(before[0], signal.SIGKILL)
    deadline = time.monotonic() + 90
    while True:  # uvicorn's supervisor notices within its 0.5 s loop and forks a replacement
        now = workers_of(shared)
        if len(now) == 2 and before[0] not in now:
            break
        if time.monotonic() >= deadline:  # seen in 2 of about 12 full suites (both under MKL_CBWR=AVX2), never alone:
            # the supervisor neither reaped the killed worker nor stopped on SIGTERM. SIGABRT makes its
            # faulthandler (PYTHONFAULTHANDLER, set by Server) write every thread's stack into the log.
            os.kill(shared.process.pid, signal.SIGABRT)
            time.sleep(3)
            raise AssertionError(f"no replacement worker within 90 s: {now}\n{shared.log.read_text()[-12000:]}")
        time.sleep(0.2)
    (new,) = set(now) - set(before)
    assert smaps(new)["Shared_Dirty"] >= 0.5 * smaps(new)["Anonymous"]  # forked from the server again, not spawned
    vectors = index.query_encoder().encode_queries(queries[:2])
    want = index.search(vectors, k=K, searcher=searcher_config("seismic")).hits
    body = {"vector": vector_body(vectors[0]), "k": K, "backend": "seismic"}
    answers = _answers_by_worker(shared.url, [body], 2)
    assert new in answers and hits_of(answers[new][0])[0] == want[0]
