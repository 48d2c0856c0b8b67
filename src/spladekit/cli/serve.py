"""serve: an index behind HTTP (:mod:`spladekit.serve`)."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, options_error, trust_option


@app.command()
def serve(
    index: Path = typer.Option(..., help="index folder written by `spladekit index` (only read)"),
    model: str | None = typer.Option(
        None, help="query model (default: the one recorded in the index; an ONNX export folder runs in onnxruntime)"
    ),
    trust_remote_code: bool = trust_option(),
    host: str = typer.Option(
        "127.0.0.1", help="address to bind (default loopback only; anything else: put it behind a TLS reverse proxy)"
    ),
    port: int = typer.Option(8000),
    workers: int = typer.Option(1, help="worker processes (each maps the same index files)"),
    threads: int | None = typer.Option(None, help="torch/Seismic threads per worker (default: CPU cores / workers)"),
    max_batch: int = typer.Option(32, help="queries per micro-batch"),
    max_wait_ms: float = typer.Option(
        2.0,
        help="longest wait for more requests once a batch has its first (not waited when every open connection already has its request in the batch)",
    ),
    queue_size: int = typer.Option(256, help="requests waiting per worker; past it 503 with Retry-After"),
    max_queue_wait_ms: float | None = typer.Option(
        None,
        help="queue-wait deadline (default: none): a request that waited longer in the queue is answered 503 with "
        "Retry-After, not computed, so an answered one waits at most this plus one batch; set it from the "
        "queue's drain time at the measured capacity (queue size x workers / answers per second)",
    ),
    max_latency_ms: float | None = typer.Option(
        None,
        help="latency limit (default: none): a request is computed only if its wait plus its batch's expected compute "
        "time (estimated from the batches before) fits within it; else 503 with Retry-After, not computed",
    ),
    request_timeout_s: float = typer.Option(
        10.0, "--request-timeout", help="seconds before a waiting request gets 503"
    ),
    head_timeout_s: float = typer.Option(
        10.0,
        "--head-timeout",
        help="seconds to receive a request's head (request line and headers); then 408, connection closed",
    ),
    body_timeout_s: float = typer.Option(
        10.0, "--body-timeout", help="seconds to receive a request's body; then 408, connection closed"
    ),
    max_body_bytes: int = typer.Option(1 << 20, help="larger request bodies get 413"),
    max_k: int = typer.Option(1000, help="largest k a request may ask"),
    max_query_chars: int = typer.Option(2000, help="longest query text, characters"),
    max_queries: int = typer.Option(64, help="queries per request"),
    max_connections: int = typer.Option(1024, help="open connections per worker (503 past it)"),
    api_key_file: Path | None = typer.Option(
        None, help="file whose first line is the key requests must send as `Authorization: Bearer KEY`"
    ),
    access_log: bool = typer.Option(False, help="log every request"),
    share_index: bool = typer.Option(
        False,
        help="with --workers > 1: fork the workers from the server once it has loaded the index, "
        "so that they share its memory (the Seismic shards held once, not per worker); each loads its own query encoder",
    ),
):
    """Serve an index over HTTP: POST /search (texts or sparse vectors), GET /health, GET /info, /docs."""
    from pydantic import ValidationError

    try:
        from spladekit.serve.app import create_app  # noqa: F401  (FastAPI and uvicorn: refused here, before any work)
        from spladekit.serve.config import ServeConfig
    except ImportError as exc:
        from spladekit.errors import install_line

        fail(ImportError(f"serving needs FastAPI and uvicorn: {install_line('serve')} ({exc})"))
    try:
        config = ServeConfig(
            index=str(index.resolve()),
            model=model,
            trust_remote_code=trust_remote_code,
            host=host,
            port=port,
            workers=workers,
            threads=threads,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            queue_size=queue_size,
            max_queue_wait_ms=max_queue_wait_ms,
            max_latency_ms=max_latency_ms,
            request_timeout_s=request_timeout_s,
            head_timeout_s=head_timeout_s,
            body_timeout_s=body_timeout_s,
            max_body_bytes=max_body_bytes,
            max_k=max_k,
            max_query_chars=max_query_chars,
            max_queries=max_queries,
            max_connections=max_connections,
            api_key_file=str(api_key_file.resolve()) if api_key_file else None,
            access_log=access_log,
            share_index=share_index,
        )
    except ValidationError as exc:
        fail(
            options_error(
                exc,
                {
                    "request_timeout_s": "--request-timeout",
                    "head_timeout_s": "--head-timeout",
                    "body_timeout_s": "--body-timeout",
                },
            )
        )
    _run(config, _load(config))


def _load(config):
    """The :class:`~spladekit.serve.service.Service` of ``config``, loaded once here before uvicorn
    starts (a bad folder or model is one clear error, exit 2, not a traceback in every worker nor
    uvicorn restarting workers that die on it), after the key file and the address are checked;
    None when each worker loads its own (spawned workers)."""
    from spladekit.errors import SpladekitError
    from spladekit.serve.config import read_api_key

    try:
        if config.api_key_file:
            read_api_key(config.api_key_file)  # refused here, before any worker starts
        elif not _loopback(config.host):
            typer.secho(
                f"warning: serving on {config.host} without --api-key-file: anyone who reaches it may search",
                fg=typer.colors.YELLOW,
                err=True,
            )
        from spladekit.serve.service import Service
        from spladekit.serve.workers import probe

        probe(config.host, config.port)  # a port in use or a bad host: refused now, before the model loads
        shared = config.share_index and config.workers > 1
        if shared:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # a tokenizer's thread pool does not survive fork
        # one thread for a service its workers are forked from: torch's OpenMP pool, once it has run
        # with more, hangs a forked child's first parallel operation (Service.share)
        service = Service(config, threads=1 if shared else None)
    except (SpladekitError, ValueError, OSError) as exc:
        fail(exc)
    except Exception as exc:  # a library's own error on a damaged file (safetensors, onnxruntime, ...)
        fail(
            RuntimeError(
                f"could not load index {config.index} or its query encoder"
                f"{' ' + config.model if config.model else ''}: {type(exc).__name__}: {exc}"
            )
        )
    if config.workers == 1:
        return service  # uvicorn runs the app in this process: nothing loads twice
    if shared:
        service.share()
        return service  # every forked worker finds it (spladekit.serve.app.app_from_environment)
    return None


def _run(config, service) -> None:
    """Run uvicorn with ``config`` (one process, or ``workers`` processes each on its own
    ``SO_REUSEPORT`` socket: :mod:`spladekit.serve.workers`), ``service`` preloaded; exit 0 when it
    stops (SIGINT / SIGTERM), 2 when it cannot start."""
    from spladekit.serve.app import exit_quietly, preload
    from spladekit.serve.config import CONFIG_ENV
    from spladekit.serve.connection import server_config

    if service is not None:
        preload(service)
    os.environ[CONFIG_ENV] = json.dumps(config.model_dump())
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    server = server_config(
        "spladekit.serve.app:app_from_environment",
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers,
        http="spladekit.serve.connection:NoDelayHTTPProtocol",
        access_log=config.access_log,
        log_level="info",
        timeout_graceful_shutdown=5,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        head_timeout_s=config.head_timeout_s,
    )
    try:
        if config.workers == 1:
            from spladekit.serve.workers import run_one

            run_one(server)
        else:
            from spladekit.serve.workers import run_workers

            run_workers(server, fork=config.share_index)
    except (OSError, RuntimeError) as exc:  # RuntimeError: --share-index where workers cannot be forked
        fail(exc)
    except (SystemExit, KeyboardInterrupt):  # uvicorn re-raises the stopping signal once it has shut down
        pass  # a graceful stop: exit 0, as with workers > 1 (whose supervisor does not re-raise it)
    exit_quietly(0)


WORKER_HEALTHCHECK_S = 120
"""Seconds uvicorn's supervisor waits for a worker's answer to its health ping before killing it
(``timeout_worker_healthcheck``): a spawned worker imports torch and loads the model before it
answers, longer than uvicorn's default on a busy machine."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
