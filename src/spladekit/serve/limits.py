"""ASGI middleware of ``spladekit serve``: the limits on connections and on request bodies.

:class:`ConnectionLimit` (503 with ``Retry-After`` past ``max_connections`` per worker) and
:class:`BodyLimit` (413 past ``max_body_bytes``, 408 for a body not received in time); each refusal
has the JSON error body of every error of the server (:func:`error_response`). The bounds on a
request's *head* cannot be middleware (the application sees a request only once its head is whole):
they are in :mod:`spladekit.serve.connection`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi.responses import JSONResponse

from spladekit.serve.schemas import ErrorResponse


# ----------------------------------------------------------------------------------- the app
def error_response(status: int, message: str, problems: list | None = None, headers: dict | None = None):
    """A JSON response of :class:`~spladekit.serve.schemas.ErrorResponse` with ``status`` (and ``headers``)."""
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
            response = error_response(
                503,
                f"the server is at its limit of {self.max_connections} open connections per worker; retry later",
                headers={"Retry-After": "1", "Connection": "close"},
            )
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
                response = error_response(
                    408,
                    f"body: the request body was not received within {self.timeout_s:g} s "
                    f"({received} bytes came{f' of {int(declared)}' if declared else ''})",
                    headers={"Connection": "close"},
                )
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
        response = error_response(413, f"body: the request body exceeds the limit of {self.max_bytes} bytes")
        await response(scope, receive, send)
