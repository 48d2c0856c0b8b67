"""Settings of ``spladekit serve`` (:class:`ServeConfig`, typed, shown by ``/info``) and its API key file.

Handed to each worker process as JSON in ``$SPLADEKIT_SERVE_CONFIG`` (:data:`CONFIG_ENV`).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CONFIG_ENV = "SPLADEKIT_SERVE_CONFIG"
"""Environment variable through which ``spladekit serve`` hands its :class:`ServeConfig` to the workers."""


class ServeConfig(BaseModel):
    """Settings of a server (``/info`` shows them; the API key itself never).

    Attributes:
        index: the index folder.
        model: query model overriding the one recorded in the index (None: the index's).
        host, port, workers: where to listen and how many worker processes.
        threads: torch/Seismic threads per worker (None: CPU cores // workers, at least 1).
        share_index: with ``workers`` > 1, the workers are forked from the server after it has loaded
            the index (Seismic shards included), so they share its memory (copy-on-write pages; Linux
            and other systems with ``fork``); each loads its own query encoder
            (:mod:`spladekit.serve.workers`). False: each worker is a fresh process that loads everything.
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
            connection that sent nothing is closed without an answer): :class:`~spladekit.serve.connection.NoDelayHTTPProtocol`.
        body_timeout_s: a request body not received whole by then gets 408 (connection closed).
        max_body_bytes: larger request bodies get 413.
        max_k, max_query_chars, max_queries: request limits (422 past them).
        max_connections: open connections (and requests in flight) per worker; 503 past it (:class:`~spladekit.serve.limits.ConnectionLimit`).
        api_key_file: file holding the key (first line); None: no key asked.
        trust_remote_code: run the query model folder's own code (:mod:`spladekit.model.remote_code`).
    """

    model_config = ConfigDict(extra="forbid")

    index: str
    model: str | None = None
    trust_remote_code: bool = False
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1)
    threads: int | None = Field(None, ge=1)
    share_index: bool = False
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
            raise ValueError(
                f"must exceed max_wait_ms ({wait:g}): a lone request waits that long for more requests before its batch is formed"
            )
        return value

    @model_validator(mode="after")
    def _deadline_below_request_timeout(self):
        for name in ("max_queue_wait_ms", "max_latency_ms"):
            value = getattr(self, name)
            if value is not None and value >= 1000 * self.request_timeout_s:
                raise ValueError(
                    f"{name} ({value:g}) must be below the request timeout "
                    f"({1000 * self.request_timeout_s:g} ms): a longer deadline never fires before the timeout answers 503"
                )
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
