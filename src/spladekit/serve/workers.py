"""Several worker processes on one port, each with its own accept queue (``SO_REUSEPORT``).

uvicorn's ``--workers N`` binds one listening socket in the supervisor and hands it to every
worker: they all accept from one queue, and whichever worker wakes first takes every connection
then waiting (asyncio accepts up to the backlog per wake-up). Keep-alive clients stay on the
worker that accepted them, so clients opened at once can all land on one worker, which computes while
the other idles (``benchmarks/runs/2026-12-02-serve.md``, run 3). Here every worker binds its own socket to the address with ``SO_REUSEPORT``
(Linux ≥ 3.9): the kernel spreads new connections over the workers' sockets by a hash of the
connection's addresses and ports. The supervisor holds one more socket bound to the address
(reserving it, after checking that nothing else holds it: a second server on the port fails at
once, naming the address) that never listens, so it is given no connections.

With ``--share-index`` the workers are forked from the server after it has loaded the index
(:func:`run_workers` with ``fork``), so the memory the index holds (the Seismic shards: pyseismic
reads them into memory, none of it mapped from the files) is shared by every worker instead of
loaded by each.

Limits: the spread is by hash, not by load (a few connections may still split unevenly); the
connections waiting in a worker's queue when that worker dies are reset; only processes of the
same user can bind the port alongside (the kernel's rule for ``SO_REUSEPORT``).
"""

from __future__ import annotations

import logging
import os
import socket


def _reuse_port_socket(family: int, address: tuple) -> socket.socket:
    """A socket bound to ``address`` with ``SO_REUSEPORT`` (asyncio makes it listen)."""
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


class ReservedAddress(socket.socket):
    """The supervisor's socket: bound with ``SO_REUSEPORT``, never listening. Handed to a worker
    process (pickled by multiprocessing's spawn), it becomes a new socket of the worker's own bound
    to the same address, not a copy of this one."""

    def __reduce__(self):
        return _reuse_port_socket, (self.family, self.getsockname()[:2])


def probe(host: str, port: int) -> int:
    """Check that ``host:port`` can be bound now (a plain socket, no ``SO_REUSEPORT``, closed at once):
    ``spladekit serve`` asks before loading its index and model, so that a port in use or a bad host
    is one clear error at once, not uvicorn's after the model loaded. Returns the port (a free one
    for 0).

    Raises:
        OSError: the address cannot be bound (in use, not local, not a host name), naming it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    try:
        sock.bind((host, port))
        return sock.getsockname()[1]
    except OSError as exc:
        raise OSError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from None
    finally:
        sock.close()


def reserve(host: str, port: int) -> ReservedAddress:
    """Bind ``host:port`` (port 0: a free one) for worker processes that bind it too.

    The address is first bound by a plain socket (no ``SO_REUSEPORT``), which fails while any
    socket holds it — another ``spladekit serve`` of the same user included, whose ``SO_REUSEPORT``
    sockets would otherwise let this one bind alongside and take a share of its connections (two
    servers, perhaps of two indexes, on one port). Between that probe and the reservation the
    address is free for an instant (a server started in that instant is not detected).

    Raises:
        OSError: the address cannot be bound (in use, not local, ...), naming it.
    """
    port = probe(host, port)
    sock = ReservedAddress(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from None
    return sock


STARTUP_FAILURE = 3
"""Exit status of a server that could not start (uvicorn's own for it)."""


def run_one(config) -> None:
    """Run ``config`` (a ``uvicorn.Config`` of one worker) in this process, as ``uvicorn.run`` does.
    Returns when the server stops (SIGINT / SIGTERM; uvicorn may re-raise the signal once it has shut down).

    Raises:
        SystemExit: :data:`STARTUP_FAILURE` when the server could not start (an address in use, the
            app failing to load).
    """
    import sys

    import uvicorn

    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def run_workers(config, fork: bool = False) -> None:
    """Run ``config`` (a ``uvicorn.Config`` with ``workers`` > 1) under uvicorn's supervisor, each
    worker on its own ``SO_REUSEPORT`` socket (:class:`ReservedAddress`). Returns when the
    supervisor stops (SIGINT / SIGTERM).

    ``fork``: the workers (and any replacement of one that died) are forked from this process
    instead of spawned, so they share what it has loaded (copy-on-write: the pages of the index's
    Seismic shards, which pyseismic holds in memory, exist once however many workers read them;
    ``spladekit serve --share-index``). What this process has loaded must be safe to fork:
    no threads whose work a child would need (:meth:`spladekit.serve.service.Service.share`).
    Each child then replaces its copy of the reserved socket with a socket of its own, bound with
    ``SO_REUSEPORT`` to the same address, before uvicorn makes it listen (:func:`_own_socket_after_fork`).

    Raises:
        OSError: the address cannot be bound.
        RuntimeError: ``fork`` on a system without ``fork``, or a uvicorn whose workers cannot be forked.
    """
    import multiprocessing

    import uvicorn._subprocess as uvicorn_subprocess
    from uvicorn.supervisors import Multiprocess

    if fork and (not hasattr(os, "fork") or not hasattr(uvicorn_subprocess, "spawn")):
        raise RuntimeError(
            "--share-index needs fork() (Linux, macOS) and uvicorn's multiprocessing context (uvicorn._subprocess.spawn)"
        )
    sock = reserve(config.host, config.port)
    host = f"[{config.host}]" if ":" in config.host else config.host
    # uvicorn prints its address only when it runs one process itself
    logging.getLogger("uvicorn.error").info(
        "Uvicorn running on http://%s:%d with %d workers%s (Press CTRL+C to quit)",
        host,
        sock.getsockname()[1],
        config.workers,
        " forked from this process (the index shared)" if fork else "",
    )
    spawned = uvicorn_subprocess.spawn
    if fork:  # uvicorn starts its workers through this context (spawn); only for this supervisor's run
        _FORKED_SOCKETS[:] = [sock]
        uvicorn_subprocess.spawn = multiprocessing.get_context("fork")
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        uvicorn_subprocess.spawn = spawned
        _FORKED_SOCKETS.clear()
        sock.close()


_FORKED_SOCKETS: list[socket.socket] = []
"""The reserved sockets of a supervisor forking its workers (:func:`run_workers` with ``fork``)."""


def _own_socket_after_fork() -> None:
    """In a forked child: each reserved socket's file descriptor made to refer to a new socket bound
    with ``SO_REUSEPORT`` to the same address (``dup2``), so that the worker listens on a socket of
    its own (its own accept queue) and not on the supervisor's, which every child shares by fork."""
    for sock in _FORKED_SOCKETS:
        own = _reuse_port_socket(sock.family, sock.getsockname()[:2])
        os.dup2(own.fileno(), sock.fileno())
        own.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_own_socket_after_fork)
