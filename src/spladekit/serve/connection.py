"""The HTTP connection guard of ``spladekit serve``: uvicorn's HTTP protocol with bounds on a request's head.

Why a protocol subclass and not middleware: an ASGI application sees a request only once its head
(request line and headers) has been parsed whole, and uvicorn bounds neither the head's size nor its
time (with httptools, its parser here). :class:`NoDelayHTTPProtocol` therefore counts the bytes of
an incomplete head (431 past :data:`MAX_HEAD_BYTES`), times it (408 past ``head_timeout_s``, as
nginx's ``client_header_timeout``: a connection opened with nothing sent, or a head sent a byte at a
time, would otherwise hold one of ``max_connections`` as long as its client wished), keeps answers in
the requests' order under pipelining, closes refused connections lingering (as nginx does), sets
``TCP_NODELAY`` on every connection (uvicorn's own listening socket with ``workers`` > 1 lacks it),
counts the open connections of the worker (:func:`open_connections`) and stamps when each head was
parsed (:data:`ARRIVED`, from which the latency limit and ``took_ms`` count).

Its settings come through uvicorn's configuration (:func:`server_config`: ``head_timeout_s``).
``spladekit serve`` runs it as ``server_config(..., http="spladekit.serve.connection:NoDelayHTTPProtocol")``.

The protocol overrides methods of uvicorn's ``HttpToolsProtocol`` and reads its state (``cycle``,
``pipeline``, ``url``, ``headers``, ``scope``, ``transport``, ``config``): it is bound to the uvicorn
versions it is tested on (``pyproject.toml``), and ``tests/serve/test_connection.py`` fails when
those methods of uvicorn change.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools missing: uvicorn parses with h11, which bounds a head itself
    HttpToolsProtocol = None


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

HEAD_TIMEOUT_S = 10.0
"""Seconds a request's head may take when the configuration names none (:func:`server_config`)."""


def server_config(app, head_timeout_s: float = HEAD_TIMEOUT_S, **kwargs) -> uvicorn.Config:
    """uvicorn's configuration carrying the settings of :class:`NoDelayHTTPProtocol` (its
    ``head_timeout_s`` attribute, which the protocol reads from the configuration it is given).

    Args:
        app: what ``uvicorn.Config`` takes (an import string with ``factory=True`` here).
        head_timeout_s: seconds a request's head (request line and headers) may take, from the
            connection's opening or the head's first byte (:attr:`ServeConfig.head_timeout_s
            <spladekit.serve.config.ServeConfig.head_timeout_s>`).
        kwargs: the rest of ``uvicorn.Config``'s arguments.
    """
    config = uvicorn.Config(app, **kwargs)
    config.head_timeout_s = head_timeout_s
    return config


class NoDelayHTTPProtocol(AutoHTTPProtocol):
    """uvicorn's HTTP protocol with ``TCP_NODELAY`` set on every connection and bounds on a request's
    head (module docstring); ``head_timeout_s`` from its configuration (:func:`server_config`).

    With ``workers`` > 1 uvicorn binds the listening socket itself with protocol number 0, and
    asyncio sets ``TCP_NODELAY`` only on sockets whose protocol is TCP; without it a response
    written in two parts (head, body) waits for the client's delayed ACK (Nagle's algorithm)."""

    open_connections = 0
    """Client connections open in this process (one worker per process): the batcher's ``open_connections``."""

    _head_bytes = 0  # bytes received since the request began, while its head is not complete
    _in_head = True

    _head_timer = None

    @property
    def head_timeout_s(self) -> float:
        """Seconds a request's head may take (the configuration's ``head_timeout_s``)."""
        return getattr(self.config, "head_timeout_s", HEAD_TIMEOUT_S)

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        NoDelayHTTPProtocol.open_connections += 1
        super().connection_made(transport)
        if BOUNDS_HEAD:
            self._arm_head_timer()

    # Bounds on a request's head (request line + headers), in size and in time (module docstring).
    # Past MAX_HEAD_BYTES the request gets 431 and the connection is closed (h11, uvicorn's other
    # parser, bounds the size itself). A head must be whole within head_timeout_s of the connection's
    # opening (first request) or of its first byte (later requests on the connection, after uvicorn's
    # keep-alive wait): else 408 and the connection closed; a connection that sent nothing is closed
    # without an answer (an unasked 408 would be read as the answer to a request the client sends
    # later). Pipelined requests (the next head sent before the answer to the one before): answers go
    # out in the requests' order, so a 431 for the next head waits for the pending answer, and the next
    # head's clock starts when that answer is written; a head that begins inside a read after the
    # previous request's body counts only what the parser has taken of it in that read (data_received).
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
            self._refuse(
                b"408 Request Timeout",
                f"headers: the request's head was not received within {self.head_timeout_s:g} s "
                f"({self._head_bytes} bytes came)",
                "not received in time",
            )

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
                    self._refuse(
                        b"431 Request Header Fields Too Large",
                        f"headers: the request's head exceeds {MAX_HEAD_BYTES} bytes",
                        f"over {MAX_HEAD_BYTES} bytes",
                    )

        def _refuse(self, status: bytes, error: str, problem: str) -> None:
            """Answer ``status`` (431 or 408) for an incomplete head, then a lingering close (as
            nginx's): the write side is shut (FIN after the answer) and what the client still sends
            is read and dropped for up to LINGER_S before the connection is closed; closing at once
            with unread data made the kernel send a reset, which could destroy the answer before the
            client read it."""
            self._refused_head = True
            self._cancel_head_timer()
            body = json.dumps({"error": error, "problems": [{"field": "headers", "message": problem}]}).encode()
            answer = (
                b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
            )
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


def open_connections() -> int:
    """Open client connections of this worker (:class:`NoDelayHTTPProtocol`'s count; the protocol
    every ``spladekit serve`` worker runs)."""
    return NoDelayHTTPProtocol.open_connections
