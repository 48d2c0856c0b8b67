"""The HTTP application of ``spladekit serve``: an index and its query encoder behind FastAPI.

Endpoints (the OpenAPI page is ``/docs``, the schema ``/openapi.json``):

- ``POST /search``: texts (encoded here with the index's model) or sparse vectors → top-``k``
  documents per query, by :meth:`spladekit.index.index.Index.search` itself (exact or Seismic), so
  the hits are those of an in-process search of the same vectors. Bodies:
  ``{"query": "text"}``, ``{"query": ["a", "b"]}``, ``{"vector": {"indices": [..], "values": [..]}}``
  or a list of vectors; ``k``, ``backend``, ``seismic`` (``query_cut``, ``heap_factor``),
  ``fields`` (``ids`` | ``scores`` | ``terms``), ``top_terms`` (rules: :mod:`spladekit.serve.schemas`).
- ``GET /health``: ``{"status": "ok", ...}`` once the index and encoder are loaded (no key needed).
- ``GET /info``: the index's settings record (``index.json``: model, max lengths, counts, content
  hash, ...), the query encoder, the backends, the server's settings and version.

Status codes: 200; 400 malformed JSON (naming line and column); 401 missing or wrong API key;
408 head not received within ``head_timeout_s`` or body within ``body_timeout_s``; 413 body over
``max_body_bytes``; 415 a ``/search`` body not sent as JSON (``Content-Type``); 422 a field
refused (each named in ``problems``; a key given twice in one object too, as Elasticsearch refuses
it); 503 queue full, queue-wait deadline passed or expected to pass
(``max_queue_wait_ms``, ``max_latency_ms``: :mod:`spladekit.serve.batching`), or request timed out (``Retry-After`` in
seconds); 500 an unexpected failure of one batch (logged; the server goes on). Every error body is :class:`~spladekit.serve.schemas.ErrorResponse`.

What a request cannot do: write anything (the index folder is only read: the Seismic index is
served only when it is already stored there, never built by a request), name a file to read
(no field is a path), or change the server's settings.

Several worker processes (``workers``) each run this application: each maps the same index files
(:meth:`Index.open`; the page cache holds their pages once) and loads its own encoder.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import json
import logging
import multiprocessing
import os
import socket
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.protocols.http.auto import AutoHTTPProtocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools missing: uvicorn parses with h11, which bounds a head itself
    HttpToolsProtocol = None

from spladekit.io import repeated_key
from spladekit.serve.batching import Abandoned, MicroBatcher, Overloaded
from spladekit.serve.schemas import ErrorResponse, SearchResponse, request_model

log = logging.getLogger("spladekit.serve")

CONFIG_ENV = "SPLADEKIT_SERVE_CONFIG"
"""Environment variable through which ``spladekit serve`` hands its :class:`ServeConfig` to the workers."""


class ServeConfig(BaseModel):
    """Settings of a server (``/info`` shows them; the API key itself never).

    Attributes:
        index: the index folder.
        model: query model overriding the one recorded in the index (None: the index's).
        host, port, workers: where to listen and how many worker processes.
        threads: torch/Seismic threads per worker (None: CPU cores // workers, at least 1).
        max_batch: queries per micro-batch; max_wait_ms: longest wait for more requests (none when
            every open connection already has its request in the batch).
        queue_size: requests waiting per worker; one more is answered 503.
        max_queue_wait_ms: queue-wait deadline (None: none): a request that has waited longer in a
            worker's queue when its batch is formed is answered 503 and not computed, and one whose
            expected wait already exceeds it is refused on arrival (:mod:`spladekit.serve.batching`);
            an answered request then spends at most this plus one batch's time in the batcher. Must
            exceed ``max_wait_ms``.
        max_latency_ms: latency limit (None: none): a request is computed only if its wait plus its
            batch's expected compute time (a conservative estimate from the batches before) fits
            within it; else 503, not computed (:mod:`spladekit.serve.batching`, "Latency limit").
            Must exceed ``max_wait_ms``.
        request_timeout_s: a request not answered by then (from when its body is read) gets 503.
        head_timeout_s: a request head (request line and headers) not received whole by then, from
            the connection's opening or the head's first byte, gets 408 (connection closed; a
            connection that sent nothing is closed without an answer): :class:`NoDelayHTTPProtocol`.
        body_timeout_s: a request body not received whole by then gets 408 (connection closed).
        max_body_bytes: larger request bodies get 413.
        max_k, max_query_chars, max_queries: request limits (422 past them).
        max_connections: open connections (and requests in flight) per worker; 503 past it (:class:`ConnectionLimit`).
        api_key_file: file holding the key (first line); None: no key asked.
    """

    model_config = ConfigDict(extra="forbid")

    index: str
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    threads: int | None = Field(None, ge=1)
    max_batch: int = Field(32, ge=1)
    max_wait_ms: float = Field(2.0, ge=0, allow_inf_nan=False)
    queue_size: int = Field(256, ge=1)
    max_queue_wait_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    max_latency_ms: float | None = Field(None, gt=0, allow_inf_nan=False)
    request_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    head_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    body_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    max_body_bytes: int = Field(1 << 20, ge=64)
    max_k: int = Field(1000, ge=1)
    max_query_chars: int = Field(2000, ge=1)
    max_queries: int = Field(64, ge=1)
    max_connections: int = Field(1024, ge=1)
    api_key_file: str | None = None
    access_log: bool = False

    @field_validator("max_queue_wait_ms", "max_latency_ms")
    @classmethod
    def _deadline_exceeds_batch_wait(cls, value, info):
        wait = info.data.get("max_wait_ms")
        if value is not None and wait is not None and value <= wait:
            raise ValueError(f"must exceed max_wait_ms ({wait:g}): a lone request waits that long for company before its batch is formed")
        return value

    @model_validator(mode="after")
    def _deadline_below_request_timeout(self):
        for name in ("max_queue_wait_ms", "max_latency_ms"):
            value = getattr(self, name)
            if value is not None and value >= 1000 * self.request_timeout_s:
                raise ValueError(f"{name} ({value:g}) must be below the request timeout "
                                 f"({1000 * self.request_timeout_s:g} ms): a longer deadline never fires before the timeout answers 503")
        return self

    def worker_threads(self) -> int:
        return self.threads or max(1, (os.cpu_count() or 1) // self.workers)


def read_api_key(path: str | Path) -> bytes:
    """The key in the file's first line (surrounding whitespace removed), as UTF-8 bytes.

    Raises:
        ValueError: the file cannot be read, or its first line is empty.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the API key file ({exc})") from exc
    key = lines[0].strip() if lines else ""
    if not key:
        raise ValueError(f"{path}: the API key file's first line is empty")
    return key.encode("utf-8")


# ----------------------------------------------------------------------------------- the service
class Service:
    """The index, its query encoder and the batch function of one worker.

    Raises (at construction):
        DataFormatError: the index folder cannot be opened.
        ResolutionError / HeadNotFoundError: the query model cannot be loaded.
    """

    def __init__(self, config: ServeConfig):
        import threading

        import torch
        from tqdm import tqdm

        from spladekit.index.index import Index

        # transformers' "Loading weights" bar would give tqdm its default lock, a multiprocessing
        # semaphore that is never released in a worker process: at every stop of a server with
        # workers > 1, multiprocessing's resource tracker warned of "2 leaked semaphore objects";
        # a thread lock is all one process's bars need
        tqdm.set_lock(threading.RLock())
        self.config = config
        self.threads = config.worker_threads()
        torch.set_num_threads(self.threads)
        self.index = Index.open(config.index)
        self.num_docs, self.vocab_size = self.index.docs.shape
        self.encoder, self.encoder_kind = _query_encoder(self.index, config.model, config.max_batch)
        self.backends = ("exact", "seismic") if _seismic_stored(self.index) else ("exact",)
        if "seismic" in self.backends:
            self.index.seismic()  # the stored index, loaded once here (never built by a request)
        self.vocabulary = _vocabulary(self.index, self.encoder)
        self.request_model = request_model(self.vocab_size, self.backends, config.max_k, config.max_query_chars, config.max_queries)
        if self.encoder is not None:  # the first forward pass is slow (allocations, kernels): not a request's
            self.encoder.encode_queries(["warm up"])
        self.index.search(sp.csr_matrix((1, self.vocab_size), dtype=np.float32), k=1)

    def info(self) -> dict:
        import spladekit

        meta = self.index.metadata
        settings = self.config.model_dump(exclude={"api_key_file"})
        settings.update(api_key=self.config.api_key_file is not None, threads_per_worker=self.threads)
        encoder = None
        if self.encoder is not None:
            m = self.encoder.metadata
            encoder = {"kind": self.encoder_kind, "model": self.config.model or meta.get("model"),
                       "query_max_length": m.query_max_length, "query_top_k": m.query_top_k}
        return {"server": {"name": "spladekit", "version": spladekit.__version__, "settings": settings},
                "index": {"num_docs": self.num_docs, "vocab_size": self.vocab_size, "model": meta.get("model"),
                          "query_max_length": meta.get("query_max_length"), "doc_max_length": meta.get("doc_max_length"),
                          "content_hash": meta.get("content_hash"), "metadata": meta},
                "query_encoder": encoder, "backends": list(self.backends)}

    # ------------------------------------------------------------------ one micro-batch
    def run_batch(self, requests: Sequence) -> list:
        """Answer a batch of validated requests: the texts of all of them encoded in one call, then
        one :meth:`Index.search` per group of requests with the same backend, ``k`` and parameters.
        A group that fails gets its exception (the other groups are answered)."""
        from spladekit.index.seismic import SeismicSearchParams

        answers: list = [None] * len(requests)
        vectors: list[sp.csr_matrix | None] = [None] * len(requests)
        texts = [(i, r.query) for i, r in enumerate(requests) if r.query is not None]
        if texts:
            try:
                if self.encoder is None:
                    raise NoQueryModel()
                encoded = self.encoder.encode_queries([t for _, ts in texts for t in ts], batch_size=max(1, self.config.max_batch))
            except Exception as exc:  # noqa: BLE001  (given to the text requests; vector requests go on)
                encoded = exc
            start = 0
            for i, ts in texts:
                if isinstance(encoded, Exception):
                    answers[i] = encoded
                else:
                    vectors[i] = encoded[start : start + len(ts)]
                start += len(ts)
        for i, r in enumerate(requests):
            if r.vector is not None:
                vectors[i] = _csr(r.vector, self.vocab_size)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            if answers[i] is None:
                params = (r.seismic.query_cut, r.seismic.heap_factor) if r.seismic is not None else None
                groups.setdefault((r.backend, r.k, params), []).append(i)
        batch_queries = sum(r.size for r in requests)
        for (backend, k, params), members in groups.items():
            try:
                seismic = None
                if backend == "seismic":
                    cut, factor = params or (SeismicSearchParams.query_cut, SeismicSearchParams.heap_factor)
                    seismic = SeismicSearchParams(query_cut=cut, heap_factor=factor, num_threads=self.threads)
                stacked = sp.vstack([vectors[i] for i in members], format="csr")
                result = self.index.search(stacked, k=k, backend=backend, seismic=seismic)
                start = 0
                for i in members:
                    size = vectors[i].shape[0]
                    answers[i] = self._answer(requests[i], result.hits[start : start + size], vectors[i], batch_queries)
                    start += size
            except Exception as exc:  # noqa: BLE001
                log.exception("search of %d requests failed", len(members))
                for i in members:
                    answers[i] = exc
        return answers

    def _answer(self, request, hits: list[list[tuple[str, float]]], vectors: sp.csr_matrix, batch_queries: int) -> dict:
        results = []
        for row, row_hits in enumerate(hits):
            if request.fields == "ids":
                result = {"hits": [doc for doc, _ in row_hits]}
            else:
                result = {"hits": [{"id": doc, "score": score} for doc, score in row_hits]}
            if request.fields == "terms":
                result["terms"] = self._terms(vectors[row], request.top_terms or 10)
            results.append(result)
        return {"results": results, "k": request.k, "backend": request.backend, "batch_queries": batch_queries}

    def _terms(self, row: sp.csr_matrix, top: int) -> list[dict]:
        """The ``top`` heaviest terms of a 1-row vector (ties: lower column first)."""
        order = np.lexsort((row.indices, -row.data))[:top]
        return [{"term": self.vocabulary[int(row.indices[i])] if self.vocabulary else f"[{int(row.indices[i])}]",
                 "weight": float(row.data[i])} for i in order]


class NoQueryModel(RuntimeError):
    """Text queries on a server without a query model."""

    def __init__(self):
        super().__init__("this server has no query model (the index records none); send vectors, or start it with --model")


def _csr(vectors, vocab_size: int) -> sp.csr_matrix:
    """Validated sparse vectors → ``[n, V]`` float32 CSR, columns sorted (unique by validation)."""
    indptr = np.cumsum([0] + [len(v.indices) for v in vectors])
    indices = np.fromiter((j for v in vectors for j in v.indices), dtype=np.int64, count=int(indptr[-1]))
    data = np.fromiter((w for v in vectors for w in v.values), dtype=np.float32, count=int(indptr[-1]))
    matrix = sp.csr_matrix((data, indices, indptr), shape=(len(vectors), vocab_size))
    matrix.sort_indices()
    return matrix


def _query_encoder(index, model: str | None, batch_size: int):
    """``(encoder, kind)`` of the index's queries (:meth:`Index.query_encoder`: an exported ONNX folder
    runs in onnxruntime, any other model in torch); ``kind`` says which, and ``inference-free`` when the
    query side is a term-weight table. ``(None, None)`` when neither the index nor ``model`` names one."""
    from spladekit.model.onnx_export import OnnxSpladeEncoder

    if not (model or index.metadata.get("model")):
        return None, None
    encoder = index.query_encoder(model, batch_size=batch_size)
    kind = "onnx" if isinstance(encoder, OnnxSpladeEncoder) else f"torch ({getattr(encoder.model, 'head_impl', 'plain')} head)"
    if encoder.query_weights is not None:
        kind = f"inference-free (term weights; {kind} for documents)"
    return encoder, kind


def _seismic_stored(index) -> bool:
    """Whether the folder holds a Seismic index built over these vectors (and pyseismic-lsr is installed)."""
    params = index.folder / "seismic" / "params.json"
    if not params.exists():
        return False
    try:
        import seismic  # noqa: F401

        from spladekit.io import read_json

        stored = read_json(params)
    except ImportError:
        log.warning("%s: a Seismic index is stored but pyseismic-lsr is not installed; serving exact search only", index.folder)
        return False
    if stored.get("content_hash") != index.metadata.get("content_hash"):
        log.warning("%s: the stored Seismic index was built over other vectors; serving exact search only", params)
        return False
    return True


def _vocabulary(index, encoder) -> list[str] | None:
    from spladekit.index.io import load_vocabulary

    vocab = load_vocabulary(index.folder)
    if vocab is None and encoder is not None:
        vocab = encoder.vocabulary
    return vocab


# ----------------------------------------------------------------------------------- the app
def _error(status: int, message: str, problems: list | None = None, headers: dict | None = None):
    body = ErrorResponse(error=message, problems=problems or []).model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


class ConnectionLimit:
    """ASGI middleware: a request arriving while this worker has more than ``max_connections`` open
    connections, or ``max_connections`` requests in flight, gets 503 with ``Retry-After`` and the
    connection is closed (the JSON error body of every refusal here). uvicorn's own
    ``limit_concurrency``, which this replaces with the same rule, answered plain text without
    ``Retry-After``."""

    def __init__(self, app, max_connections: int, connections: Callable[[], int]):
        self.app = app
        self.max_connections = max_connections
        self.connections = connections
        self.in_flight = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.connections() > self.max_connections or self.in_flight >= self.max_connections:
            response = _error(503, f"the server is at its limit of {self.max_connections} open connections per worker; "
                                   "retry later", headers={"Retry-After": "1", "Connection": "close"})
            return await response(scope, receive, send)
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class BodyLimit:
    """ASGI middleware: request bodies over ``max_bytes`` get 413 (by ``Content-Length`` before
    reading, else while reading a chunked body), bodies not received whole within ``timeout_s`` get
    408 and the connection is closed; the body read is handed on whole.

    The time bound is for a client that sends less than its ``Content-Length`` (or stops inside a
    chunked body) and waits: uvicorn has no timeout of its own while a body is read (its
    ``timeout_keep_alive`` runs only between requests), so each such client held its connection
    (one of ``max_connections``) until it went away. The request never reached the queue, so it held
    no place there."""

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(scope, receive, send)
        chunks, received, more = [], 0, True
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while more:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                response = _error(408, f"body: the request body was not received within {self.timeout_s:g} s "
                                       f"({received} bytes came{f' of {int(declared)}' if declared else ''})",
                                  headers={"Connection": "close"})
                return await response(scope, receive, send)
            if message["type"] != "http.request":  # the client left
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                return await self._refuse(scope, receive, send)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send):
        response = _error(413, f"body: the request body exceeds the limit of {self.max_bytes} bytes")
        await response(scope, receive, send)


def create_app(config: ServeConfig, service: Service | None = None):
    """The FastAPI application for ``config`` (``service``: an already loaded one, else loaded here).

    Raises:
        ValueError: the API key file is unreadable or empty.
        DataFormatError, ResolutionError, HeadNotFoundError: see :class:`Service`.
    """
    import spladekit

    key = read_api_key(config.api_key_file) if config.api_key_file else None
    service = service or Service(config)
    NoDelayHTTPProtocol.head_timeout_s = config.head_timeout_s  # one application per worker process
    batcher = MicroBatcher(service.run_batch, config.max_batch, config.max_wait_ms / 1000.0, config.queue_size,
                           None if config.max_queue_wait_ms is None else config.max_queue_wait_ms / 1000.0,
                           None if config.max_latency_ms is None else config.max_latency_ms / 1000.0,
                           company=_open_connections)
    bearer = HTTPBearer(auto_error=False, description="the key of --api-key-file, as `Authorization: Bearer KEY`")

    @asynccontextmanager
    async def lifespan(_app):
        # the ~425,000 objects of torch, transformers and the model, loaded once, out of the garbage
        # collector's sight (gc.freeze): a full collection walked them all, 300 ms on the SciFact
        # server, stalling every request in flight (the p99 of 330 ms against a p50 of 39 ms in
        # benchmarks/serve.py); after the freeze a full collection takes microseconds
        gc.collect()
        gc.freeze()
        batcher.start()
        yield
        await batcher.stop()
        if multiprocessing.parent_process() is not None:  # a worker of uvicorn's supervisor, shut down
            uvicorn_log = logging.getLogger("uvicorn.error")  # the lines uvicorn would print after this
            uvicorn_log.info("Application shutdown complete.")
            uvicorn_log.info("Finished server process [%d]", os.getpid())
            exit_quietly(0)

    app = FastAPI(title="spladekit", version=spladekit.__version__, lifespan=lifespan,
                  description=f"SPLADE retrieval over {service.num_docs} documents (index {Path(config.index).name}).")
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout_s=config.body_timeout_s)
    app.add_middleware(ConnectionLimit, max_connections=config.max_connections, connections=_open_connections)  # outermost
    app.state.service, app.state.batcher = service, batcher
    SearchRequest = service.request_model

    class Unauthorized(Exception):
        pass

    async def authorised(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if key is None:
            return
        # the header's own bytes: Starlette decodes headers as Latin-1, so encoding back to Latin-1 is
        # exact, and a key sent as UTF-8 (curl, httpx) meets the key file's UTF-8 bytes
        given = credentials.credentials.encode("latin-1") if credentials is not None else b""
        if not hmac.compare_digest(given, key):  # constant time in the key's length
            raise Unauthorized()

    @app.exception_handler(Unauthorized)
    async def _unauthorised(_request, _exc):
        return _error(401, "missing or wrong API key (send `Authorization: Bearer KEY`)", headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request, exc):
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc):
        problems = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()]
        return _error(422, "; ".join(f"{p['field']}: {p['message']}" for p in problems), problems)

    errors = {400: {"model": ErrorResponse}, 401: {"model": ErrorResponse}, 413: {"model": ErrorResponse},
              415: {"model": ErrorResponse}, 422: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}

    @app.post("/search", response_model=SearchResponse, responses=errors, dependencies=[Depends(authorised)],
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": SearchRequest.model_json_schema(
                  ref_template="#/components/schemas/{model}")}}}})
    async def search(request: Request):
        """Top-k documents of each query (texts are encoded with the index's query model)."""
        arrived = request.scope.get(ARRIVED, time.perf_counter())  # its head parsed (NoDelayHTTPProtocol)
        content_type = request.headers.get("content-type")
        if not _is_json(content_type):
            return _error(415, f"content-type: the body must be sent as application/json (got {content_type or 'no Content-Type'}; "
                               "curl: -H 'Content-Type: application/json')", [{"field": "content-type", "message": "not JSON"}])
        raw = await request.body()
        # pydantic's parser keeps the last of repeated keys ({"k": 5, "k": 500} asked for 500): refused, as
        # read_json does and as Elasticsearch does since 6.0 ("Breaking changes in 6.0": duplicate keys),
        # before validation, which would judge only the last value; a body Python's json cannot read
        # (malformed, nested too deep) is left to pydantic's parser, whose 400 names line and column
        try:
            repeated = repeated_key(raw)
        except (ValueError, RecursionError):
            repeated = None
        if repeated is not None:
            message = f"'{repeated.rpartition('.')[2]}' appears more than once in one object (which value is meant?)"
            return _error(422, f"{repeated}: {message}", [{"field": repeated, "message": message}])
        try:
            body = SearchRequest.model_validate_json(raw)
        except ValidationError as exc:
            return _refusal(exc)
        try:
            answer = await batcher.submit(body, body.size, config.request_timeout_s, time.perf_counter() - arrived,
                                          gone=lambda: _disconnected(request))
        except Abandoned:
            return Response(status_code=499)  # nobody reads it (nginx's code for "client closed request")
        except Overloaded as exc:
            return _error(503, str(exc), headers={"Retry-After": str(exc.retry_after)})
        except asyncio.TimeoutError:
            return _error(503, f"not answered within the request timeout ({config.request_timeout_s:g} s); the server is busy",
                          headers={"Retry-After": "1"})
        except NoQueryModel as exc:
            return _error(422, f"query: {exc}", [{"field": "query", "message": str(exc)}])
        except Exception:  # noqa: BLE001
            log.exception("a search failed")
            return _error(500, "the search failed (see the server's log); the server goes on")
        answer["took_ms"] = (time.perf_counter() - arrived) * 1000.0
        return JSONResponse(answer)

    @app.get("/health")
    async def health():
        """Liveness: the index and the encoder are loaded (no API key needed)."""
        return {"status": "ok", "pid": os.getpid(), "waiting": batcher.waiting, "queue_size": config.queue_size,
                "batches": batcher.batches, "queries": batcher.queries, "abandoned": batcher.abandoned, "refused": batcher.refused,
                "refused_by_cause": dict(batcher.refused_by_cause), "seconds_per_query": batcher.seconds_per_query,
                "expected_seconds_per_query": batcher.expected_seconds_per_query}

    @app.get("/info", dependencies=[Depends(authorised)], responses={401: {"model": ErrorResponse}})
    async def info():
        """The index's settings record, the query encoder, the backends, the server's settings and version."""
        return service.info()

    # the schemas the request body refers to ($defs) go where the OpenAPI page looks for them
    original = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = original()
            defs = SearchRequest.model_json_schema(ref_template="#/components/schemas/{model}").get("$defs", {})
            schema.setdefault("components", {}).setdefault("schemas", {}).update(defs)
        return app.openapi_schema

    app.openapi = openapi
    return app


def _is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header value names JSON: ``application/json`` or a structured
    ``application/*+json`` type (RFC 6839 §3.1), parameters such as ``charset`` allowed, case ignored.

    A missing or other type is refused (415) before the body is read: a web page can make a browser
    send a cross-origin POST without asking the server first only as ``text/plain``, a form type or
    with no type at all (the Fetch standard's CORS-safelisted request headers), so without this any
    page a user of a keyless server on loopback opens could make it compute. Elasticsearch requires a
    supported Content-Type on every request with a body since 6.0 ("Breaking changes in 6.0", REST
    changes: Content-Type auto-detection); FastAPI parses a declared JSON body only from a
    JSON type (since 0.65.2), which this handler, reading the body itself, would otherwise bypass."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


async def _disconnected(request) -> None:
    """Return when the request's client has disconnected. After the request body, the ASGI
    ``receive`` returns only ``http.disconnect`` (uvicorn: when the client leaves or the response is
    complete). Without this watch (``MicroBatcher.submit``'s ``gone``), clients that sent requests and
    hung up at once had them all computed (1,280 of 1,280 queries in a bad-input review), a way to
    take the CPU for free."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _refusal(exc: ValidationError):
    """A request body's ValidationError → 400 (not JSON) or 422 (a field refused), naming the fields."""
    from spladekit.errors import validation_problems

    problems = [{"field": field or "body", "message": message} for field, message in validation_problems(exc)]
    if any(e["type"] == "json_invalid" for e in exc.errors()):
        return _error(400, f"body: {problems[0]['message']}", problems)
    return _error(422, "; ".join(f"{p['field']}: {p['message']}" for p in problems), problems)


ARRIVED = "spladekit.arrived"
"""ASGI scope key: ``time.perf_counter()`` when the request's head was parsed (httptools protocol)."""

MAX_HEAD_BYTES = 64 * 1024
"""Bytes of a request's head (request line and headers) a worker reads before answering 431
(nginx's default bound is 4 × 8 KiB buffers; Node.js's 16 KiB)."""

BOUNDS_HEAD = HttpToolsProtocol is not None and issubclass(AutoHTTPProtocol, HttpToolsProtocol)
"""Whether :class:`NoDelayHTTPProtocol` bounds a request head's size and time: with httptools, the
parser ``spladekit[serve]`` installs (its callbacks mark a head's start and end)."""

LINGER_S = 2.0
"""Seconds a connection refused for its head is still read (and dropped) before it is closed."""


class NoDelayHTTPProtocol(AutoHTTPProtocol):
    """uvicorn's HTTP protocol with ``TCP_NODELAY`` set on every connection.

    With ``workers`` > 1 uvicorn binds the listening socket itself with protocol number 0, and
    asyncio sets ``TCP_NODELAY`` only on sockets whose protocol is TCP; without it a response
    written in two parts (head, body) waited for the client's delayed ACK: measured 52 ms instead of
    8 ms per request on loopback (Nagle's algorithm against Linux's 40 ms delayed ACK)."""

    open_connections = 0
    """Client connections open in this process (one worker per process): the batcher's ``company``."""

    _head_bytes = 0  # bytes received since the request began, while its head is not complete
    _in_head = True

    head_timeout_s = 10.0
    """Seconds a request's head may take (:attr:`ServeConfig.head_timeout_s`; :func:`create_app` sets it)."""

    _head_timer = None

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        NoDelayHTTPProtocol.open_connections += 1
        super().connection_made(transport)
        if BOUNDS_HEAD:
            self._arm_head_timer()

    # Bounds on a request's head (request line + headers), in size and in time. httptools, uvicorn's
    # parser here, has neither: a client sending one 64 MiB header had all of it buffered (+74 MB of
    # RSS) and answered; so the bytes received while a head is incomplete are counted, and past
    # MAX_HEAD_BYTES the request gets 431 and the connection is closed (h11, uvicorn's other parser,
    # bounds the size itself at 16 KiB). And uvicorn times nothing before a head is complete (its
    # timeout_keep_alive runs between requests and stops at any byte received): a connection opened
    # with nothing sent, or a head sent a byte at a time, stayed open as long as its client wished,
    # holding one of max_connections ("slowloris"). A head must now be whole within head_timeout_s of
    # the connection's opening (first request) or of its first byte (later requests on the
    # connection, after uvicorn's keep-alive wait): else 408 and the connection closed, as nginx's
    # client_header_timeout; a connection that sent nothing is closed without an answer (an
    # unasked 408 would be read as the answer to a request the client sends later). Pipelined
    # requests (the next head sent before the answer to the one before): answers go out in the
    # requests' order, so a 431 for the next head waits for the pending answer, and the next head's
    # clock starts when that answer is written; a head that begins inside a read after the previous
    # request's body counts only what the parser has taken of it in that read (see data_received).
    if BOUNDS_HEAD:

        def _arm_head_timer(self) -> None:
            self._head_timer = asyncio.get_running_loop().call_later(self.head_timeout_s, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self._refused_head or not self._in_head:
                return
            if self._message_done:  # an idle connection (no byte of a request came): nothing to answer
                self.transport.close()
                return
            self._refuse(b"408 Request Timeout", f"headers: the request's head was not received within {self.head_timeout_s:g} s "
                                                 f"({self._head_bytes} bytes came)", "not received in time")

        def _answer_owed(self) -> bool:
            """Whether an earlier request on this connection is still to be answered (pipelining)."""
            return (self.cycle is not None and not self.cycle.response_complete) or bool(self.pipeline)

        def on_message_begin(self) -> None:
            self._in_head, self._head_bytes, self._message_done = True, 0, False
            self._begins_in_read += 1
            # a later request on a kept-alive connection: its clock starts now, or, pipelined behind a
            # request still to be answered, when that answer is written (on_response_complete)
            if self._head_timer is None and not self._answer_owed():
                self._arm_head_timer()
            super().on_message_begin()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if self._pending_refusal is not None:  # a refusal of the next head, held back for this answer
                self._write_refusal(self._pending_refusal)
            elif self._in_head and not self._message_done and self._head_timer is None:
                self._arm_head_timer()  # the pipelined request's head: its turn has come

        def on_message_complete(self) -> None:
            self._message_done = True
            super().on_message_complete()

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._cancel_head_timer()
            # when the server had the request: the handler counts its time from here, so the
            # latency limit covers the wait for the event loop before it (under overload, the loop
            # is busy refusing others) and took_ms is the time in this process
            self.scope[ARRIVED] = time.perf_counter()
            super().on_headers_complete()

        _refused_head = False
        _pending_refusal: bytes | None = None
        _begins_in_read = 0  # requests begun in the read being parsed
        _message_done = True  # the last request is whole (or none came yet): a read now starts with a new head

        def data_received(self, data: bytes) -> None:
            if self._refused_head:
                return  # read and dropped until the client closes (or LINGER_S): see below
            started_between = self._message_done
            self._begins_in_read = 0
            super().data_received(data)
            if self._in_head:
                if self._begins_in_read > int(started_between):
                    # the head began inside this read, after the previous request's bytes (pipelining): only
                    # what the parser has passed on of it counts (its target and its whole header lines), so
                    # the previous body is not taken for head bytes; a header line still open at the end of
                    # the read counts from the next read on (a head can so reach MAX_HEAD_BYTES + one read,
                    # 256 KiB, asyncio's recv size, before its 431)
                    self._head_bytes = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
                else:
                    self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self._refuse(b"431 Request Header Fields Too Large", f"headers: the request's head exceeds {MAX_HEAD_BYTES} bytes",
                                 f"over {MAX_HEAD_BYTES} bytes")

        def _refuse(self, status: bytes, error: str, problem: str) -> None:
            """Answer ``status`` (431 or 408) for an incomplete head, then a lingering close (as
            nginx's): the write side is shut (FIN after the answer) and what the client still sends
            is read and dropped for up to LINGER_S before the connection is closed; closing at once
            with unread data made the kernel send a reset, which could destroy the answer before the
            client read it."""
            self._refused_head = True
            self._cancel_head_timer()
            body = json.dumps({"error": error, "problems": [{"field": "headers", "message": problem}]}).encode()
            answer = (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
            if self._answer_owed():  # answers go out in the requests' order: this one after the pending one
                self._pending_refusal = answer
            else:
                self._write_refusal(answer)

        def _write_refusal(self, answer: bytes) -> None:
            self._pending_refusal = None
            self.transport.write(answer)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def connection_lost(self, exc) -> None:
        NoDelayHTTPProtocol.open_connections -= 1
        if BOUNDS_HEAD:
            self._cancel_head_timer()
        super().connection_lost(exc)


def _open_connections() -> int:
    """Open client connections of this worker (:class:`NoDelayHTTPProtocol`'s count; the protocol
    every ``spladekit serve`` worker runs)."""
    return NoDelayHTTPProtocol.open_connections


def exit_quietly(code: int) -> None:
    """Exit with ``code`` at once, the server having shut down (connections closed, lifespan ended,
    log written): the interpreter's teardown adds nothing a read-only server needs, and during it
    triton's extension (imported by torch._dynamo, which transformers imports) printed ~30 lines of
    "nanobind: leaked instances/types/functions" per process at every stop."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


_PRELOADED: list[Service] = []


def preload(service: Service) -> None:
    """Hand a :class:`Service` the command has already loaded to :func:`app_from_environment` of this
    process (one worker: uvicorn runs the app in the command's own process, so nothing loads twice)."""
    _PRELOADED[:] = [service]


def app_from_environment():
    """The application of one worker, from the :class:`ServeConfig` JSON in ``$SPLADEKIT_SERVE_CONFIG``
    (what ``spladekit serve`` hands to ``uvicorn.run(..., factory=True)``), with the service
    :func:`preload` left in this process, if any (worker processes load their own)."""
    return create_app(ServeConfig.model_validate(json.loads(os.environ[CONFIG_ENV])), _PRELOADED.pop() if _PRELOADED else None)
