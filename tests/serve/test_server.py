"""``spladekit serve`` as a real server: a subprocess on a free loopback port, queried with httpx,
stopped by its PID; its hits compared with :meth:`Index.search` in this process on the same
queries (SciFact documents encoded with splade-tiny, exact and Seismic, texts and vectors).

Index: 120 SciFact documents (judged ones first, 96 tokens), built once for the module. Servers: one with the
defaults (1 worker), one with 2 workers, an API key and a queue of 1 request per worker.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from spladekit.index.index import searcher_config
from spladekit.serve.batching import MicroBatcher, Overloaded
from tests.serve_helpers import (
    RUNNING,
    Server,
    assert_close_ranking,
    assert_quiet_stop,
    die_with_parent,
    free_port,
    hits_of,
    scifact_index_with_seismic,
    smaps,
    snapshot,
    stop,
    vector_body,
    wait_for_workers,
    workers_of,
)

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.xdist_group("serve")  # the module's servers and index are built once per xdist worker
K = 10
NUM_DOCS = 120


# ----------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def scifact_index(tmp_path_factory):
    """An index of 120 SciFact documents with a stored Seismic index and pruned copy (two-step
    search, the default rule), and 40 test queries."""
    from spladekit.index.two_step import DEFAULT_FIRST

    index, queries = scifact_index_with_seismic(tmp_path_factory.mktemp("serve") / "index", NUM_DOCS)
    index.pruned(DEFAULT_FIRST)  # stored in the folder: the server serves it, never builds it
    return index, queries


@pytest.fixture(scope="module")
def server(scifact_index, tmp_path_factory):
    index, _ = scifact_index
    before = snapshot(index.folder)
    running = Server(index.folder, tmp_path_factory.mktemp("log") / "server.log")
    try:
        yield running
    finally:
        running.stop()
    assert snapshot(index.folder) == before, "the server changed the index folder"
    assert_quiet_stop(running)
    assert running.process.returncode == 0  # SIGTERM: a graceful stop


@pytest.fixture(scope="module")
def guarded(scifact_index, tmp_path_factory):
    """2 workers, an API key, a queue of 1 request per worker, batches of 1 query."""
    index, _ = scifact_index
    key_file = tmp_path_factory.mktemp("key") / "key.txt"
    key_file.write_text("s3cret-clé\n", encoding="utf-8")  # not ASCII: its UTF-8 bytes are the key
    running = Server(
        index.folder,
        key_file.parent / "server.log",
        "--workers",
        "2",
        "--threads",
        "1",
        "--api-key-file",
        str(key_file),
        "--queue-size",
        "1",
        "--max-batch",
        "1",
        "--max-wait-ms",
        "0",
    )
    running.key = "s3cret-clé"
    try:
        wait_for_workers(running, 2)
        yield running
    finally:
        running.stop(ctrl_c=True)
    assert_quiet_stop(running)
    assert running.process.returncode == 0


async def _concurrent(url: str, bodies: list[dict], headers: dict | None = None) -> list:
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
        return await asyncio.gather(*(client.post("/search", json=b) for b in bodies))


# ----------------------------------------------------------------------------------- results
@pytest.mark.parametrize("backend", ["exact", "seismic", "two_step"])
def test_vector_queries_under_concurrency_equal_index_search(server, scifact_index, backend):
    index, queries = scifact_index
    vectors = index.query_encoder().encode_queries(queries)
    want = index.search(vectors, k=K, searcher=searcher_config(backend)).hits
    bodies = [{"vector": vector_body(vectors[i]), "k": K, "backend": backend} for i in range(len(queries))]
    responses = asyncio.run(_concurrent(server.url, bodies))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:2]
    got = [hits_of(r.json())[0] for r in responses]
    # exactly equal: the server calls Index.search on the same float32 vectors, and each query's
    # hits do not depend on the other queries of its micro-batch (exact: one score row per query,
    # tests/index/test_exact.py::test_results_do_not_depend_on_the_batch; Seismic: each query its own search;
    # two-step: its first step is exact search's kernel, its rescoring per query)
    assert got == want
    assert max(r.json()["batch_queries"] for r in responses) > 1  # concurrent requests were micro-batched


@pytest.mark.parametrize("backend", ["exact", "seismic", "two_step"])
def test_text_queries_equal_index_search(server, scifact_index, backend):
    index, queries = scifact_index
    want = index.search(queries, k=K, searcher=searcher_config(backend)).hits
    one = httpx.post(
        server.url + "/search", json={"query": queries, "k": K, "backend": backend}, timeout=60
    )  # a list in one request
    assert one.status_code == 200, one.text
    assert_close_ranking(hits_of(one.json()), want)
    alone = asyncio.run(
        _concurrent(server.url, [{"query": q, "k": K, "backend": backend} for q in queries])
    )  # one text per request
    assert all(r.status_code == 200 for r in alone)
    assert_close_ranking([hits_of(r.json())[0] for r in alone], want)


def test_two_step_candidates_of_a_request_reach_the_search(server, scifact_index):
    from spladekit.index.two_step import TwoStepConfig

    index, queries = scifact_index
    vectors = index.query_encoder().encode_queries(queries[:8])
    for candidates in (3, 40):  # 3 < k: at least k are rescored
        want = index.search(vectors, k=K, searcher=TwoStepConfig(candidates=candidates)).hits
        body = {
            "vector": [vector_body(vectors[i]) for i in range(8)],
            "k": K,
            "backend": "two_step",
            "two_step": {"candidates": candidates},
        }
        response = httpx.post(server.url + "/search", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert hits_of(response.json()) == want


def test_fields_and_query_terms(server, scifact_index):
    index, queries = scifact_index
    encoder = index.query_encoder()
    ids = httpx.post(server.url + "/search", json={"query": queries[0], "k": 3, "fields": "ids"}).json()
    want = index.search([queries[0]], k=3).hits[0]
    assert ids["results"][0]["hits"] == [doc for doc, _ in want]
    terms = httpx.post(
        server.url + "/search", json={"query": queries[0], "k": 3, "fields": "terms", "top_terms": 5}
    ).json()
    expected = encoder.decode(encoder.encode_queries([queries[0]]), top_k=5)  # (token, weight), heaviest first
    got = [(t["term"], t["weight"]) for t in terms["results"][0]["terms"]]
    assert [t for t, _ in got] == [t for t, _ in expected]
    np.testing.assert_allclose(
        [w for _, w in got], [w for _, w in expected], rtol=1e-5
    )  # encoded alone both times; float32


def test_health_info_and_openapi(server, scifact_index):
    import spladekit

    index, _ = scifact_index
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok"
    info = httpx.get(server.url + "/info").json()
    assert info["index"]["num_docs"] == NUM_DOCS and info["index"]["vocab_size"] == 30522
    assert (
        info["index"]["model"] == index.metadata["model"]
        and info["index"]["content_hash"] == index.metadata["content_hash"]
    )
    assert info["index"]["query_max_length"] == index.metadata["query_max_length"]
    assert info["backends"] == ["exact", "seismic", "two_step"] and info["unavailable_backends"] == {}
    assert info["server"]["version"] == spladekit.__version__
    assert info["query_encoder"]["kind"].startswith("torch")
    schema = httpx.get(server.url + "/openapi.json").json()
    assert "/search" in schema["paths"] and "SparseVector" in schema["components"]["schemas"]
    assert httpx.get(server.url + "/docs").status_code == 200


def test_a_stored_seismic_index_without_pyseismic_is_explained(scifact_index, monkeypatch, caplog):
    """The service in this process, `import seismic` failing (a None entry in sys.modules) as where
    pyseismic-lsr is not installed: exact search only, and the log, /info and a request asking for
    Seismic all give the install line (a request was told to store an index the folder holds)."""
    from pydantic import ValidationError

    from spladekit.serve.config import ServeConfig
    from spladekit.serve.service import Service

    index, _ = scifact_index
    monkeypatch.setitem(sys.modules, "seismic", None)
    with caplog.at_level("WARNING"):
        service = Service(ServeConfig(index=str(index.folder)), threads=1)
    assert service.backends == ("exact", "two_step")
    from spladekit.errors import install_line

    assert install_line("seismic") in service.info()["unavailable_backends"]["seismic"]
    assert "a Seismic index is stored, but" in caplog.text and install_line("seismic") in caplog.text
    with pytest.raises(ValidationError, match=r"a Seismic index is stored, but Seismic search needs pyseismic-lsr"):
        service.request_model.model_validate({"query": "a", "backend": "seismic"})


# ----------------------------------------------------------------------------------- other query encoders
def _index_with_query_model(index, folder: Path, model: Path):
    """The module's document vectors as a new index whose recorded query model is ``model``."""
    from spladekit.index.index import Index

    metadata = {"model": str(model), "query_max_length": index.metadata["query_max_length"]}
    return Index.from_vectors(folder, index.docs, index.doc_ids, metadata=metadata)


@pytest.fixture(scope="module")
def onnx_served(scifact_index, tmp_path_factory):
    """splade-tiny exported by ``spladekit export-model`` (ONNX), recorded as an index's query model, served."""
    index, _ = scifact_index
    root = tmp_path_factory.mktemp("onnx")
    command = [
        sys.executable,
        "-m",
        "spladekit",
        "export-model",
        "--model",
        index.metadata["model"],
        "--out",
        str(root / "model"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    served = _index_with_query_model(index, root / "index", root / "model")
    running = Server(served.folder, root / "server.log", "--threads", "1")
    try:
        yield served, running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def inference_free_served(scifact_index, tmp_path_factory):
    """splade-tiny with spladekit's inference-free query side (IDF term weights of the 120 documents,
    saved by ``save_pretrained``: ``query_weights.safetensors`` and the sentence-transformers Router
    files), recorded as an index's query model, served."""
    from spladekit.data.beir import load_beir  # noqa: F401  (the shared data are there: scifact_index found them)
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.inference_free import make_inference_free

    index, queries = scifact_index
    root = tmp_path_factory.mktemp("inference_free")
    encoder = SpladeEncoder.from_pretrained(index.metadata["model"])
    make_inference_free(encoder, queries + [" ".join(queries)])  # any texts: the weights only need to be a table
    encoder.save_pretrained(root / "model")
    served = _index_with_query_model(index, root / "index", root / "model")
    running = Server(served.folder, root / "server.log", "--threads", "1")
    try:
        yield served, running, encoder
    finally:
        running.stop()


def test_onnx_query_model_through_the_server_equals_index_search(onnx_served, scifact_index):
    served, running = onnx_served
    _, queries = scifact_index
    info = httpx.get(running.url + "/info").json()
    assert info["query_encoder"]["kind"] == "onnx"
    want = served.search(queries, k=K).hits  # Index.search encodes them in onnxruntime too (index/search.query_encoder)
    one = httpx.post(running.url + "/search", json={"query": queries, "k": K}, timeout=60)
    assert one.status_code == 200, one.text
    assert_close_ranking(hits_of(one.json()), want)
    alone = asyncio.run(_concurrent(running.url, [{"query": q, "k": K} for q in queries]))
    assert all(r.status_code == 200 for r in alone)
    assert_close_ranking([hits_of(r.json())[0] for r in alone], want)


def test_inference_free_query_side_through_the_server_equals_index_search(inference_free_served, scifact_index):
    served, running, encoder = inference_free_served
    _, queries = scifact_index
    info = httpx.get(running.url + "/info").json()
    assert info["query_encoder"]["kind"].startswith("inference-free")
    want = served.search(queries, k=K).hits
    alone = asyncio.run(_concurrent(running.url, [{"query": q, "k": K} for q in queries]))
    assert all(r.status_code == 200 for r in alone)
    # exactly equal: an inference-free query is a table look-up per token (no float arithmetic that
    # depends on the batch), then the same Index.search on the same float32 vector
    assert [hits_of(r.json())[0] for r in alone] == want
    # the query's terms, computed here from the tokenizer and the weight table alone
    terms = httpx.post(
        running.url + "/search", json={"query": queries[0], "k": 1, "fields": "terms", "top_terms": 1000}
    ).json()
    ids = encoder.tokenizer(
        queries[0], add_special_tokens=False, truncation=True, max_length=served.metadata["query_max_length"]
    )["input_ids"]
    weights = encoder.query_weights.numpy()
    expected = {encoder.tokenizer.convert_ids_to_tokens(j): float(weights[j]) for j in set(ids) if weights[j] > 0}
    assert {t["term"]: t["weight"] for t in terms["results"][0]["terms"]} == expected


@pytest.fixture(scope="module")
def impatient(scifact_index, tmp_path_factory):
    """A server whose requests time out after 0.5 s, heads and bodies after 1 s, batches of at most 40 queries."""
    index, _ = scifact_index
    running = Server(
        index.folder,
        tmp_path_factory.mktemp("timeout") / "server.log",
        "--threads",
        "1",
        "--request-timeout",
        "0.5",
        "--head-timeout",
        "1",
        "--body-timeout",
        "1",
        "--max-batch",
        "40",
    )
    try:
        yield running
    finally:
        running.stop()


def test_request_timeout_through_the_server_then_the_next_request_served(impatient, scifact_index):
    """Eight requests of 40 long texts each (one batch each; ≥ 0.1 s of encoding apiece on splade-tiny,
    so at least the later ones wait past 0.5 s in the queue): they are answered 503 with Retry-After and a
    message naming the timeout; the server then answers the next request as usual."""
    _, queries = scifact_index
    long = [
        ((q + " ") * 20)[:1900] for q in queries
    ]  # under max_query_chars; the tokenizer truncates to the query max length
    responses = asyncio.run(_concurrent(impatient.url, [{"query": long, "k": K}] * 8))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503} and 503 in codes, codes
    for r in responses:
        if r.status_code == 503:
            assert "request timeout (0.5 s)" in r.json()["error"] and int(r.headers["retry-after"]) >= 1
    deadline = time.monotonic() + 30  # the batch that was running when they timed out finishes (its answer dropped)
    while httpx.get(impatient.url + "/health").json()["waiting"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = httpx.post(impatient.url + "/search", json={"query": queries[0], "k": K})
    assert after.status_code == 200, after.text
    assert hits_of(after.json()) == hits_of(
        httpx.post(impatient.url + "/search", json={"query": queries[0], "k": K}).json()
    )


def test_a_body_shorter_than_its_content_length_gets_408_and_others_are_served(impatient):
    """A client that sends 10 of the 200 bytes it announced and waits: other clients are served
    meanwhile; after the body timeout (1 s) it gets 408 naming the body and the connection is closed
    (before, uvicorn waited for the rest as long as the client stayed)."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as slow:
        began = time.monotonic()
        slow.sendall(
            b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"query": '
        )
        assert httpx.post(impatient.url + "/search", json={"query": "protein", "k": 3}).status_code == 200
        answer = b""
        while chunk := slow.recv(65536):  # to the end: the server closes the connection
            answer += chunk
        waited = time.monotonic() - began
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), head
    assert json.loads(body)["error"].startswith(
        "body: the request body was not received within 1 s (10 bytes came of 200)"
    )
    # the server's timer runs on its event loop, whose timers may fire a little early (0.99992 s was seen);
    # 0.95 s still tells 'held for the body timeout' from 'answered at once'
    assert 0.95 <= waited < 15, waited
    assert httpx.post(impatient.url + "/search", json={"query": "protein", "k": 3}).status_code == 200


def _content_length(answer: bytes) -> int:
    head = answer.partition(b"\r\n\r\n")[0]
    return next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)


def _read_to_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):  # to the end: the server closes the connection
        data += chunk
    return data


def test_a_head_not_received_in_time_gets_408_and_a_silent_connection_is_closed(impatient):
    """Slow or absent heads (a "slowloris" client holds connections by sending a head a byte at a
    time, or nothing): a head not whole within the head timeout (1 s) gets 408 naming the headers and
    the connection is closed, both for a connection's first request and for a later one on a
    kept-alive connection; a connection that sends nothing is closed without an answer. Other clients
    are served meanwhile. (Before, uvicorn timed nothing before a head was complete: each such
    connection stayed open for as long as its client wished.)"""
    good = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with (
        socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as slow,
        socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as silent,
        socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as kept,
    ):
        began = time.monotonic()
        slow.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\n")  # the head's blank line never comes
        kept.sendall(good)
        first = b""
        while b"\r\n\r\n" not in first or len(first.partition(b"\r\n\r\n")[2]) < _content_length(first):
            first += kept.recv(65536)  # the whole first answer (head and body may come in two reads)
        assert first.startswith(b"HTTP/1.1 200"), first
        kept.sendall(b"GET /health HTTP/1.1\r\n")  # a second request whose head stops half way
        assert httpx.post(impatient.url + "/search", json={"query": "protein", "k": 3}).status_code == 200
        answers = {name: _read_to_close(sock) for name, sock in (("slow", slow), ("kept", kept))}
        waited = time.monotonic() - began
        assert _read_to_close(silent) == b""  # closed, nothing said
        silent_waited = time.monotonic() - began
    for name, answer in answers.items():
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), (name, head)
        assert json.loads(body)["error"].startswith("headers: the request's head was not received within 1 s"), (
            name,
            body,
        )
    # the timers run on the server's event loop, which may fire them a little early (see the 408 of a body)
    assert 0.95 <= waited < 15 and 0.95 <= silent_waited < 15, (waited, silent_waited)
    assert httpx.post(impatient.url + "/search", json={"query": "protein", "k": 3}).status_code == 200


def _answers(data: bytes) -> list[tuple[int, bytes]]:
    """The (status, body) of each whole answer in ``data``, in order (bodies by Content-Length)."""
    out = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = _content_length(head + b"\r\n\r\n")
        if len(rest) < length:
            break
        out.append((int(head.split(b" ", 2)[1]), rest[:length]))
        data = rest[length:]
    return out


def _search_head(body: bytes) -> bytes:
    return (
        f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()


def test_a_pipelined_request_after_a_large_body_is_answered_in_order(impatient):
    """One send holding a search whose body is 70 KB (spaces inside the JSON), then the start of a
    second request's head: the first is answered 200 with its hits, and once the second head is
    finished it is answered too. The body's bytes used to be counted as the second head's: 431
    (over 64 KiB), written before the first request's answer, whose own write then failed."""
    body = b'{"query": "protein folding", "k": 3' + b" " * 70_000 + b"}"
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as s:
        s.sendall(_search_head(body) + body + b"GET /health HTTP/1.1\r\nHost: x\r\n")
        data = b""
        while len(_answers(data)) < 1:
            data += s.recv(65536)
        s.sendall(b"Connection: close\r\n\r\n")
        data += _read_to_close(s)
    answers = _answers(data)
    assert [status for status, _ in answers] == [200, 200], data[:300]
    assert len(json.loads(answers[0][1])["results"][0]["hits"]) == 3 and json.loads(answers[1][1])["status"] == "ok"


def test_a_pipelined_head_is_refused_after_the_answer_before_it(impatient, scifact_index):
    """The answer owed to a request goes out before the refusal of the next head on its connection: a
    search of 40 long texts (computed for up to the 0.5 s request timeout) followed at once by the
    start of a head, which 0.1 s later grows past 64 KiB in later reads: the search is answered
    first (200, or 503 if it timed out), then 431 naming the headers, then the connection is closed.
    (The 431 used to be written at once, before the search's answer, whose own write then failed.)"""
    from spladekit.serve.connection import MAX_HEAD_BYTES

    _, queries = scifact_index
    body = json.dumps({"query": [((q + " ") * 20)[:1900] for q in queries], "k": K}).encode()
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as s:
        s.sendall(_search_head(body) + body + b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        time.sleep(0.1)  # the padding comes in reads of its own, while the search is computed
        for _ in range(2 * MAX_HEAD_BYTES // 8192):
            s.sendall(b"a" * 8192)
        data = _read_to_close(s)
    answers = _answers(data)
    assert [status for status, _ in answers] in ([200, 431], [503, 431]), data[:300]
    assert json.loads(answers[1][1])["problems"][0]["field"] == "headers"


def test_a_pipelined_heads_clock_starts_when_the_answer_before_it_is_written(impatient, scifact_index):
    """A search of 40 long texts (its answer takes a while: up to the 0.5 s request timeout, then 503)
    followed at once by a head that stops half way: the search is answered first (200, or 503 if it
    timed out), and the half head gets its 408 a whole head timeout (1 s) after that answer, its turn
    having come only then (nginx reads a pipelined request when the one before is answered). Before,
    its clock ran from its first byte: the 408 was written over the pending answer whenever that took
    longer than 1 s, and at most 1 s − the answer's time after it otherwise."""
    _, queries = scifact_index
    body = json.dumps({"query": [((q + " ") * 20)[:1900] for q in queries], "k": K}).encode()
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=20) as s:
        s.sendall(_search_head(body) + body + b"GET /health HTTP/1.1\r\nHost: x\r\n")
        data = b""
        while len(_answers(data)) < 1:
            data += s.recv(65536)
        answered = time.monotonic()
        data += _read_to_close(s)
        refused = time.monotonic()
    answers = _answers(data)
    assert [status for status, _ in answers] in ([200, 408], [503, 408]), data[:300]
    assert json.loads(answers[1][1])["error"].startswith("headers: the request's head was not received within 1 s")
    # the server's timer may fire a little early (see the 408 of a body); the old clock came ≥ 0.1 s sooner
    assert refused - answered >= 0.95, refused - answered


# ----------------------------------------------------------------------------------- bad requests
def _vec(indices, values):
    return {"vector": {"indices": indices, "values": values}}


BAD = [  # (what, raw body or JSON object, status, field named in the message)
    ("malformed JSON", b'{"query": "protein"', 400, "body"),
    ("not an object", b"[1, 2]", 422, "body"),
    ("nested too deep", b"[" * 5000, 400, "body"),
    ("unknown field", {"query": "protein", "kk": 3}, 422, "kk"),
    ("repeated key", b'{"query": "protein", "k": 5, "k": 500}', 422, "k"),  # Python's json and pydantic keep the last
    ("repeated nested key", b'{"vector": {"indices": [5], "values": [1.0], "values": [2.0]}}', 422, "vector.values"),
    ("k = 0", {"query": "protein", "k": 0}, 422, "k"),
    ("k over max_k", {"query": "protein", "k": 1001}, 422, "k"),
    ("k a string", {"query": "protein", "k": "10"}, 422, "k"),
    ("k a boolean", {"query": "protein", "k": True}, 422, "k"),
    ("empty query", {"query": ""}, 422, "query.0"),
    ("blank query", {"query": "  \t "}, 422, "query.0"),
    ("zero-width space only", {"query": "\u200b\u3000"}, 422, "query.0"),  # the tokenizer gives no token of either
    ("NUL only", {"query": ["protein", "\u0000"]}, 422, "query.1"),
    ("empty list", {"query": []}, 422, "query"),
    ("query a number", {"query": 42}, 422, "query.0"),
    ("over-long query", {"query": ["protein", "protein " * 300]}, 422, "query.1"),
    ("too many queries", {"query": ["protein"] * 65}, 422, "query"),
    ("query and vector", {"query": "protein", **_vec([1], [1.0])}, 422, "vector"),
    ("neither", {"k": 3}, 422, "query"),
    ("index out of vocabulary", _vec([5, 30522], [1.0, 1.0]), 422, "vector.0.indices"),
    ("negative index", _vec([-1], [1.0]), 422, "vector.0.indices"),
    ("repeated index", _vec([7, 7], [1.0, 2.0]), 422, "vector.0.indices"),
    ("fractional index", _vec([1.5], [1.0]), 422, "vector.0.indices"),
    ("negative weight", _vec([5], [-0.5]), 422, "vector.0.values"),
    ("NaN weight", b'{"vector": {"indices": [5], "values": [NaN]}}', 422, "vector.0.values"),
    ("infinite weight", b'{"vector": {"indices": [5], "values": [Infinity]}}', 422, "vector.0.values"),
    ("weight overflowing float32", _vec([5], [1e39]), 422, "vector.0.values"),
    ("lengths differ", _vec([5, 6], [1.0]), 422, "vector.0"),
    ("unknown backend", {"query": "protein", "backend": "bm25"}, 422, "backend"),
    ("seismic parameters with exact", {"query": "protein", "seismic": {"query_cut": 3}}, 422, "seismic"),
    (
        "seismic query_cut 0",
        {"query": "protein", "backend": "seismic", "seismic": {"query_cut": 0}},
        422,
        "seismic.query_cut",
    ),
    (
        "seismic n_knn without a k-NN graph",
        {"query": "protein", "backend": "seismic", "seismic": {"n_knn": 1}},
        422,
        "seismic.n_knn",
    ),
    ("two_step parameters with exact", {"query": "protein", "two_step": {"candidates": 30}}, 422, "two_step"),
    (
        "two_step candidates 0",
        {"query": "protein", "backend": "two_step", "two_step": {"candidates": 0}},
        422,
        "two_step.candidates",
    ),
    (
        "two_step rule asked",
        {"query": "protein", "backend": "two_step", "two_step": {"first": "top_k=1"}},
        422,
        "two_step.first",
    ),
    ("unknown fields value", {"query": "protein", "fields": "everything"}, 422, "fields"),
    ("body over the size limit", _vec(list(range(30000)), [1.0] * 30000) | {"pad": "x" * (1 << 20)}, 413, "body"),
]


def test_bad_requests_refused_and_the_next_request_served(server):
    good = {"query": "protein folding", "k": 5}
    first = httpx.post(server.url + "/search", json=good)
    assert first.status_code == 200
    for what, body, status, field in BAD:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = httpx.post(server.url + "/search", content=content, headers={"content-type": "application/json"})
        assert response.status_code == status, (what, response.text)
        message = response.json()["error"]
        assert message.startswith(field) or f"{field}:" in message or f"'{field}'" in message, (what, message)
        after = httpx.post(server.url + "/search", json=good)
        assert after.status_code == 200, (what, after.text)
        assert after.json()["results"] == first.json()["results"], what  # same answer: the server is unharmed


@pytest.mark.parametrize(
    "body, field",
    [
        (b'{"query": "protein", "k": 5, "k": 500}', "k"),
        (
            b'{"vector": [{"indices": [1000], "values": [1.0]}, {"indices": [2000], "values": [1.0], "values": [2.0]}], "k": 3}',
            "vector.1.values",
        ),  # named by its place, as pydantic names fields
        (b'{"vector": {"indices": [1000], "values": [1.0], "indices": [2000]}}', "vector.indices"),
        (
            b'{"query": "protein", "query": 5}',
            "query",
        ),  # found before validation, which judged only the last value (query.0)
    ],
)
def test_a_repeated_key_is_named_by_its_path(server, body, field):
    response = httpx.post(server.url + "/search", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["problems"] == [
        {
            "field": field,
            "message": f"'{field.rpartition('.')[2]}' appears more than once in one object (which value is meant?)",
        }
    ], response.text
    assert response.json()["error"].startswith(f"{field}: ")


@pytest.mark.parametrize(
    "content_type, status",
    [
        (None, 415),  # no Content-Type: what a browser sends cross-origin for a Blob body, unasked
        ("text/plain;charset=UTF-8", 415),  # what a browser sends cross-origin for a string body, unasked
        ("application/x-www-form-urlencoded", 415),  # curl -d without -H; an HTML form
        ("multipart/form-data; boundary=x", 415),
        ("application/jsonp", 415),
        ("application/json", 200),
        ("Application/JSON; charset=utf-8", 200),  # media types are case-insensitive (RFC 9110 §8.3.1)
        ("application/vnd.api+json", 200),  # a structured +json type (RFC 6839 §3.1)
    ],
)
def test_search_bodies_must_be_sent_as_json(server, content_type, status):
    """/search reads its body only when the request says it is JSON: the types a web page can make a
    browser send without the server's leave (CORS "simple" requests) are refused with 415 naming the
    header, and the next request is served."""
    headers = {} if content_type is None else {"content-type": content_type}
    response = httpx.post(
        server.url + "/search", content=json.dumps({"query": "protein", "k": 3}).encode(), headers=headers
    )
    assert response.request.headers.get("content-type") == content_type  # httpx added none of its own
    assert response.status_code == status, response.text
    if status == 415:
        assert response.json()["error"].startswith("content-type: the body must be sent as application/json"), (
            response.text
        )
        assert response.json()["problems"] == [{"field": "content-type", "message": "not JSON"}]
    assert httpx.post(server.url + "/search", json={"query": "protein", "k": 3}).status_code == 200


def test_requests_of_clients_that_left_are_not_computed(server, scifact_index):
    """12 clients each send 40 texts (one batch each: 40 > the default 32 queries per batch) and hang up
    at once: the requests still queued when their client left are dropped, not computed. Every
    request is either taken into a batch (its 40 queries counted in ``queries``) or dropped
    (``abandoned``), so the two counts add up exactly; the first batch starts before anyone leaves."""
    _, queries = scifact_index
    payload = json.dumps({"query": queries, "k": K}).encode()
    request = (
        f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    before = httpx.get(server.url + "/health").json()
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(12)]
    for s in sockets:
        s.sendall(request)
    time.sleep(0.05)
    for s in sockets:
        s.close()
    deadline = time.monotonic() + 60
    while True:
        health = httpx.get(server.url + "/health").json()
        taken = (health["queries"] - before["queries"]) // len(queries)
        dropped = health["abandoned"] - before["abandoned"]
        if taken + dropped == 12 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert taken + dropped == 12 and health["queries"] - before["queries"] == taken * len(queries), health
    assert dropped >= 6, (taken, dropped)  # at most a few batches of 40 texts run in the 50 ms before they left
    assert httpx.post(server.url + "/search", json={"query": "protein", "k": 3}).status_code == 200


def _raw_exchange(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send one request as raw bytes (the head in 8 KiB pieces); the status and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for piece in [head[i : i + 8192] for i in range(0, len(head), 8192)] + [body]:
            s.sendall(piece)  # a refused head is still read (lingering close): sending goes on
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                status_line, _, rest = data.partition(b"\r\n")
                headers, _, payload = rest.partition(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in headers.split(b"\r\n") if h.lower().startswith(b"content-length")),
                    0,
                )
                if len(payload) >= length:
                    return int(status_line.split()[1]), payload[:length]
    raise AssertionError(f"no complete answer: {data[:200]!r}")


def test_an_over_long_head_gets_431_and_a_long_one_is_served(server):
    """A request head over MAX_HEAD_BYTES (64 KiB) is answered 431 and its connection closed, not
    buffered without end (a 64 MiB header was, before); a 32 KiB header is served as usual."""
    from spladekit.serve.connection import MAX_HEAD_BYTES

    body = json.dumps({"query": "protein folding", "k": 3}).encode()

    def head(header_bytes: int) -> bytes:
        return (
            f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-Pad: {'a' * header_bytes}\r\n\r\n"
        ).encode()

    status, payload = _raw_exchange(server.port, head(2 * MAX_HEAD_BYTES), body)
    assert status == 431 and json.loads(payload)["problems"][0]["field"] == "headers", payload
    status, payload = _raw_exchange(server.port, head(MAX_HEAD_BYTES // 2), body)
    assert status == 200 and len(json.loads(payload)["results"][0]["hits"]) == 3, payload


def test_past_max_connections_503_with_retry_after(scifact_index, tmp_path):
    """--max-connections 2: a request on a third open connection gets the JSON 503 with Retry-After
    (uvicorn's own limit answered plain text without it); once connections close, requests are served."""
    index, _ = scifact_index
    running = Server(index.folder, tmp_path / "server.log", "--threads", "1", "--max-connections", "2")
    try:

        async def three():
            clients = [httpx.AsyncClient(base_url=running.url, timeout=30) for _ in range(3)]
            try:
                for c in clients[:2]:
                    assert (await c.get("/health")).status_code == 200  # two connections held open (keep-alive)
                return await clients[2].post("/search", json={"query": "protein", "k": 3})
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))

        refused = asyncio.run(three())
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1, refused.text
        assert "2 open connections" in refused.json()["error"]
        assert httpx.post(running.url + "/search", json={"query": "protein", "k": 3}).status_code == 200
    finally:
        running.stop()


# ----------------------------------------------------------------------------------- who may ask, load
def test_api_key_refused_and_accepted(guarded):
    body = {"query": "protein", "k": 3}
    assert httpx.post(guarded.url + "/search", json=body).status_code == 401
    wrong = httpx.post(guarded.url + "/search", json=body, headers={"Authorization": "Bearer s3cret-kez"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert httpx.get(guarded.url + "/info").status_code == 401
    right = {"Authorization": b"Bearer " + guarded.key.encode("utf-8")}  # as curl sends a UTF-8 terminal's key
    latin = {"Authorization": b"Bearer " + guarded.key.encode("latin-1")}  # other bytes: another key
    assert httpx.post(guarded.url + "/search", json=body, headers=latin).status_code == 401
    assert httpx.post(guarded.url + "/search", json=body, headers=right).status_code == 200
    assert httpx.get(guarded.url + "/info", headers=right).json()["server"]["settings"]["workers"] == 2
    assert httpx.get(guarded.url + "/health").status_code == 200  # liveness needs no key


def test_workers_each_accept_their_own_connections(guarded):
    """16 keep-alive connections opened at once reach both workers (each worker listens on its own
    SO_REUSEPORT socket, spladekit.serve.workers; with one shared socket the first awake worker took
    nearly all). The kernel spreads them by a hash of the client's port: all 16 on one worker has
    probability 2 / 2**16."""

    async def pids():
        clients = [httpx.AsyncClient(base_url=guarded.url, timeout=30) for _ in range(16)]
        try:
            return [r.json()["pid"] for r in await asyncio.gather(*(c.get("/health") for c in clients))]
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    assert len(set(asyncio.run(pids()))) == 2


def test_spawned_workers_share_no_pages_with_the_server(guarded):
    """The control of tests/serve/test_shared_index.py: without --share-index each worker is a fresh process
    that loads everything itself, so (almost) none of its anonymous memory is Shared_Dirty."""
    workers = workers_of(guarded)
    assert len(workers) == 2
    for pid in workers:
        m = smaps(pid)
        assert m["Shared_Dirty"] < 0.1 * m["Anonymous"], (pid, m)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_in_use_is_refused_naming_the_address(guarded, scifact_index, workers):
    """Refused before the index and model load (no "Loading weights"), as one line and exit 2, with one
    worker too (there uvicorn itself used to find it, after the model loaded, and exit 3)."""
    index, _ = scifact_index
    command = [
        sys.executable,
        "-m",
        "spladekit",
        "serve",
        "--index",
        str(index.folder),
        "--port",
        str(guarded.port),
        "--workers",
        str(workers),
    ]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=die_with_parent
    )
    RUNNING[process.pid] = process
    try:
        _, stderr = process.communicate(timeout=120)  # bounded: one that bound the port would serve on
    finally:
        stop(process)  # and its workers, by its process group
    assert process.returncode == 2 and f"cannot bind 127.0.0.1:{guarded.port}" in stderr, stderr[-2000:]
    assert "Loading weights" not in stderr and "leaked" not in stderr, stderr[-2000:]


def test_503_with_retry_after_past_a_queue_of_one(guarded, scifact_index):
    _, queries = scifact_index
    right = {"Authorization": b"Bearer " + guarded.key.encode("utf-8")}
    bodies = [{"query": queries, "k": K}] * 24  # 40 texts each: a batch takes long enough for the others to pile up
    responses = asyncio.run(_concurrent(guarded.url, bodies, right))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503} and 503 in codes and 200 in codes, codes
    refused = [r for r in responses if r.status_code == 503]
    assert all(int(r.headers["retry-after"]) >= 1 and "queue is full" in r.json()["error"] for r in refused)
    served = [r.json()["results"] for r in responses if r.status_code == 200]
    assert all(s == served[0] for s in served)  # the same request, the same answer, under load
    assert httpx.post(guarded.url + "/search", json={"query": "protein", "k": 3}, headers=right).status_code == 200


@pytest.fixture(scope="module")
def shedding(scifact_index, tmp_path_factory):
    """A server with a queue-wait deadline of 100 ms and batches of at most 64 queries."""
    index, _ = scifact_index
    running = Server(
        index.folder,
        tmp_path_factory.mktemp("deadline") / "server.log",
        "--threads",
        "1",
        "--max-batch",
        "64",
        "--max-queue-wait-ms",
        "100",
    )
    try:
        yield running
    finally:
        running.stop()


def test_503_with_retry_after_past_the_queue_wait_deadline_then_the_next_request_served(shedding, scifact_index):
    """Eight concurrent requests of 64 long texts each: one batch each (64 = --max-batch), 0.7–1.0 s of
    encoding apiece on splade-tiny on this project's 2-core AMD machine, idle or beside three busy
    processes (the request-timeout test's 40 texts take ≥ 0.1 s), so a request still queued behind the
    first batch has waited several times the 100 ms deadline when its batch is formed: it is answered
    503 with Retry-After naming the limit, and not computed (the batcher's query count is 64 per 200);
    a request arriving after a batch is refused on arrival (the queued work × the measured seconds per
    query exceeds 100 ms) with the same limit named. The first request is computed: its time in the
    server before it was queued (its body read and checked) is milliseconds, and the batcher's wait for
    company stops before its deadline. 20 ms was too tight a deadline for that: on a loaded CI machine
    every request, the first included, was refused. Then a request on the idle server is served."""
    _, queries = scifact_index
    long = [((q + " ") * 20)[:1900] for q in queries * 2][:64]
    responses = asyncio.run(_concurrent(shedding.url, [{"query": long, "k": K}] * 8))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503} and 503 in codes and 200 in codes, codes
    for r in responses:
        if r.status_code == 503:
            message = r.json()["error"]
            assert "over the queue-wait limit of 100 ms" in message and int(r.headers["retry-after"]) >= 1, message
    served = [r.json()["results"] for r in responses if r.status_code == 200]
    assert all(s == served[0] for s in served)
    health = httpx.get(shedding.url + "/health").json()
    # one worker: every 503 above is one of its refusals (no request timed out: the timeout is 10 s), and
    # only the answered requests were computed, 64 queries each
    assert health["refused_by_cause"]["queue_wait"] + health["refused_by_cause"]["expected_wait"] == codes.count(503), (
        health
    )
    assert health["refused_by_cause"]["queue_full"] == 0 and health["queries"] == 64 * codes.count(200), health
    # the queue is empty: nothing ahead of it (64 long texts: 0.7–1 s idle, past httpx's default 5 s on a loaded machine)
    after = httpx.post(shedding.url + "/search", json={"query": long, "k": K}, timeout=60)
    assert after.status_code == 200, after.text
    assert after.json()["results"] == served[0]


# ----------------------------------------------------------------------------------- the batcher alone
def _run(coroutine):
    return asyncio.run(coroutine)


def test_batcher_collects_concurrent_requests_into_one_batch():
    seen = []

    def run_batch(payloads):
        seen.append(list(payloads))
        return [p * 10 for p in payloads]

    async def main():
        batcher = MicroBatcher(run_batch, max_batch=4, max_wait_s=0.2, queue_size=10)
        batcher.start()
        answers = await asyncio.gather(*(batcher.submit(i, 1, 5) for i in range(6)))
        await batcher.stop()
        return answers

    assert _run(main()) == [0, 10, 20, 30, 40, 50]
    assert [len(b) for b in seen] == [4, 2]  # max_batch queries, then the rest after max_wait


def test_batcher_queue_bound_timeout_and_failing_batch():

    release = threading.Event()

    def run_batch(payloads):
        release.wait(5)
        return [ValueError("bad") if p == "fail" else p for p in payloads]

    async def main():
        batcher = MicroBatcher(run_batch, max_batch=1, max_wait_s=0, queue_size=1)
        batcher.start()
        running = asyncio.ensure_future(batcher.submit("a", 1, 5))
        await asyncio.sleep(0.05)  # "a" is in the running batch
        waiting = asyncio.ensure_future(batcher.submit("fail", 1, 5))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded) as refused:  # the queue holds "fail"
            await batcher.submit("c", 1, 5)
        assert refused.value.retry_after >= 1
        release.set()
        assert await running == "a"
        with pytest.raises(ValueError, match="bad"):  # one payload's failure is its own
            await waiting
        release.clear()
        blocked = asyncio.ensure_future(batcher.submit("d", 1, 5))
        await asyncio.sleep(0.05)
        with pytest.raises(asyncio.TimeoutError):  # "e" waits behind "d" past its timeout
            await batcher.submit("e", 1, 0.1)
        release.set()
        assert await blocked == "d"
        assert await batcher.submit("f", 1, 5) == "f"  # the loop goes on
        await batcher.stop()
        return batcher.queries

    assert _run(main()) == 4  # a, fail, d, f ("e" timed out in the queue and was skipped)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_damaged_model_is_one_error_before_any_worker(scifact_index, tmp_path, workers):
    """A model whose weights file is cut short: ``serve`` loads the index and its encoder before uvicorn
    starts, so it exits with status 2 and one ``error:`` naming the folder, at once — with ``--workers 2``
    uvicorn used to restart the dying workers without end, each printing a traceback."""
    import shutil

    index, _ = scifact_index
    model = tmp_path / "damaged"
    shutil.copytree(Path(index.metadata["model"]), model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    command = [
        sys.executable,
        "-m",
        "spladekit",
        "serve",
        "--index",
        str(index.folder),
        "--model",
        str(model),
        "--port",
        str(free_port()),
        "--workers",
        workers,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)  # bounded: a loop would time out
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: ")
    assert f"{weights}: cannot read the model's weights" in done.stderr  # the damaged file, named
