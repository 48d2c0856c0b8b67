"""The HTTP application of ``spladekit serve``: an index and its query encoder behind FastAPI.

Endpoints (the OpenAPI page is ``/docs``, the schema ``/openapi.json``):

- ``POST /search``: texts (encoded here with the index's model) or sparse vectors → top-``k``
  documents per query, by :meth:`spladekit.index.index.Index.search` itself (exact, Seismic or
  two-step), so the hits are those of an in-process search of the same vectors. Bodies:
  ``{"query": "text"}``, ``{"query": ["a", "b"]}``, ``{"vector": {"indices": [..], "values": [..]}}``
  or a list of vectors; ``k``, ``backend``, ``seismic`` (``query_cut``, ``heap_factor``, ``n_knn``),
  ``two_step`` (``candidates``),
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
served only when it is already stored there, never built by a request, and so is two-step search's
pruned copy), name a file to read
(no field is a path), or change the server's settings.

Several worker processes (``workers``) each run this application: each maps the same index files
(:meth:`Index.open`; the page cache holds their pages once) and loads its own encoder; with
``share_index`` they are forked from the server after it loaded the index, so the index's memory
(the Seismic shards' included) is held once.

The handlers are functions of this module that read what they need from the application's state
(``request.app.state``: ``config``, ``service``, ``batcher``, ``api_key``), which :func:`create_app`
fills; the rest of the server: :mod:`spladekit.serve.service` (the index, the query encoder and the
batch function of one worker), :mod:`spladekit.serve.config` (:class:`ServeConfig`),
:mod:`spladekit.serve.limits` (the ASGI limits on connections and bodies),
:mod:`spladekit.serve.connection` (uvicorn's HTTP protocol with the bounds on a request's head).
"""

from __future__ import annotations

import gc
import hmac
import json
import logging
import multiprocessing
import os
import sys
import time
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from spladekit.io import repeated_key
from spladekit.serve.batching import Abandoned, MicroBatcher, Overloaded
from spladekit.serve.config import CONFIG_ENV, ServeConfig, read_api_key
from spladekit.serve.connection import ARRIVED, open_connections
from spladekit.serve.limits import BodyLimit, ConnectionLimit
from spladekit.serve.limits import error_response as _error
from spladekit.serve.schemas import ErrorResponse, SearchResponse
from spladekit.serve.service import NoQueryModel, Service

log = logging.getLogger("spladekit.serve")

ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 413, 415, 422, 503)}
"""The error bodies ``/search`` documents in the OpenAPI schema."""

BEARER = HTTPBearer(auto_error=False, description="the key of --api-key-file, as `Authorization: Bearer KEY`")


def create_app(config: ServeConfig, service: Service | None = None) -> FastAPI:
    """The FastAPI application for ``config`` (``service``: an already loaded one, else loaded here).
    Its state holds what the handlers read: ``config``, ``service``, ``batcher`` and ``api_key``
    (bytes, or None when no key is asked).

    Raises:
        ValueError: the API key file is unreadable or empty.
        DataFormatError, ResolutionError, HeadNotFoundError: see :class:`Service`.
    """
    from spladekit.version import __version__

    key = read_api_key(config.api_key_file) if config.api_key_file else None
    service = service or Service(config)
    batcher = MicroBatcher(
        service.run_batch,
        config.max_batch,
        config.max_wait_ms / 1000.0,
        config.queue_size,
        None if config.max_queue_wait_ms is None else config.max_queue_wait_ms / 1000.0,
        None if config.max_latency_ms is None else config.max_latency_ms / 1000.0,
        open_connections=open_connections,
    )
    app = FastAPI(
        title="spladekit",
        version=__version__,
        lifespan=lifespan,
        description=f"SPLADE retrieval over {service.num_docs} documents (index {Path(config.index).name}).",
    )
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout_s=config.body_timeout_s)
    app.add_middleware(
        ConnectionLimit, max_connections=config.max_connections, connections=open_connections
    )  # outermost
    app.state.config, app.state.service, app.state.batcher, app.state.api_key = config, service, batcher, key
    app.add_exception_handler(Unauthorized, _unauthorised)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    schema = service.request_model.model_json_schema(ref_template="#/components/schemas/{model}")
    app.add_api_route(
        "/search",
        search,
        methods=["POST"],
        response_model=SearchResponse,
        responses=ERRORS,
        dependencies=[Depends(authorised)],
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}},
    )
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route(
        "/info", info, methods=["GET"], dependencies=[Depends(authorised)], responses={401: {"model": ErrorResponse}}
    )
    app.openapi = partial(_openapi, app, app.openapi, schema.get("$defs", {}))
    return app


@asynccontextmanager
async def lifespan(app: FastAPI):
    """Start the app's batcher (and freeze what is loaded out of the garbage collector's sight); at
    the end stop it and, in a worker of uvicorn's supervisor, exit quietly after uvicorn's own lines.

    The objects of torch, transformers and the model are loaded once: ``gc.freeze`` keeps a full
    collection from walking them all, which stalled every request in flight."""
    batcher = app.state.batcher
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


class Unauthorized(Exception):
    """A request without the server's API key (answered 401)."""


async def authorised(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> None:
    """Refuse a request whose bearer token is not the app's ``api_key`` (none asked: every request passes).

    Raises:
        Unauthorized: a missing or wrong key.
    """
    key = request.app.state.api_key
    if key is None:
        return
    # the header's own bytes: Starlette decodes headers as Latin-1, so encoding back to Latin-1 is
    # exact, and a key sent as UTF-8 (curl, httpx) meets the key file's UTF-8 bytes
    given = credentials.credentials.encode("latin-1") if credentials is not None else b""
    if not hmac.compare_digest(given, key):  # constant time in the key's length
        raise Unauthorized()


async def _unauthorised(_request, _exc):
    return _error(
        401, "missing or wrong API key (send `Authorization: Bearer KEY`)", headers={"WWW-Authenticate": "Bearer"}
    )


async def _http_error(_request, exc):
    return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))


async def _invalid(_request, exc):
    problems = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()]
    return _error(422, "; ".join(f"{p['field']}: {p['message']}" for p in problems), problems)


async def search(request: Request):
    """Top-k documents of each query (texts are encoded with the index's query model)."""
    arrived = request.scope.get(ARRIVED, time.perf_counter())  # its head parsed (NoDelayHTTPProtocol)
    state = request.app.state
    content_type = request.headers.get("content-type")
    if not _is_json(content_type):
        return _error(
            415,
            f"content-type: the body must be sent as application/json (got {content_type or 'no Content-Type'}; "
            "curl: -H 'Content-Type: application/json')",
            [{"field": "content-type", "message": "not JSON"}],
        )
    body = _request_body(await request.body(), state.service.request_model)
    if isinstance(body, Response):
        return body
    timeout_s = state.config.request_timeout_s
    try:
        answer = await state.batcher.submit(
            body, body.size, timeout_s, time.perf_counter() - arrived, gone=lambda: _disconnected(request)
        )
    except Abandoned:
        return Response(status_code=499)  # nobody reads it (nginx's code for "client closed request")
    except Overloaded as exc:
        return _error(503, str(exc), headers={"Retry-After": str(exc.retry_after)})
    except TimeoutError:
        return _error(
            503,
            f"not answered within the request timeout ({timeout_s:g} s); the server is busy",
            headers={"Retry-After": "1"},
        )
    except NoQueryModel as exc:
        return _error(422, f"query: {exc}", [{"field": "query", "message": str(exc)}])
    except Exception:  # noqa: BLE001
        log.exception("a search failed")
        return _error(500, "the search failed (see the server's log); the server goes on")
    answer["took_ms"] = (time.perf_counter() - arrived) * 1000.0
    return JSONResponse(answer)


def _request_body(raw: bytes, model):
    """A ``/search`` body validated by the request ``model``, or the error response refusing it.

    pydantic's parser keeps the last of repeated keys (``{"k": 5, "k": 500}`` asked for 500): they are
    refused first, as :func:`spladekit.io.read_json` does and as Elasticsearch does since 6.0, before
    validation would judge only the last value; a body Python's ``json`` cannot read (malformed,
    nested too deep) is left to pydantic's parser, whose 400 names line and column."""
    try:
        repeated = repeated_key(raw)
    except (ValueError, RecursionError):
        repeated = None
    if repeated is not None:
        message = f"'{repeated.rpartition('.')[2]}' appears more than once in one object (which value is meant?)"
        return _error(422, f"{repeated}: {message}", [{"field": repeated, "message": message}])
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        return _refusal(exc)


async def health(request: Request):
    """Liveness: the index and the encoder are loaded (no API key needed)."""
    batcher = request.app.state.batcher
    return {
        "status": "ok",
        "pid": os.getpid(),
        "waiting": batcher.waiting,
        "queue_size": request.app.state.config.queue_size,
        "batches": batcher.batches,
        "queries": batcher.queries,
        "abandoned": batcher.abandoned,
        "refused": batcher.refused,
        "refused_by_cause": dict(batcher.refused_by_cause),
        "seconds_per_query": batcher.seconds_per_query,
        "expected_seconds_per_query": batcher.expected_seconds_per_query,
    }


async def info(request: Request):
    """The index's settings record, the query encoder, the backends, the server's settings and version."""
    return request.app.state.service.info()


def _openapi(app: FastAPI, original, definitions: dict) -> dict:
    """The app's OpenAPI schema, with the schemas the request body refers to (``$defs``) where the
    OpenAPI page looks for them."""
    if app.openapi_schema is None:
        schema = original()
        schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions)
    return app.openapi_schema


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
    :func:`preload` left in this process, if any: the command's own (one worker), or the one a forked
    worker shares with the server (``share_index``: it loads its own encoder here, :meth:`Service.enter_worker`);
    spawned worker processes load their own."""
    service = _PRELOADED.pop() if _PRELOADED else None
    if service is not None and service.shared:
        service.enter_worker()
    return create_app(ServeConfig.model_validate(json.loads(os.environ[CONFIG_ENV])), service)
