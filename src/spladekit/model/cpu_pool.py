"""Worker threads whose torch operations run single-threaded: the CPU fused head's work split.

torch's intra-op parallelism (OpenMP) opens one parallel region per operation, and every region
ends at a barrier that waits for all of its threads. On a machine shared with other processes the
operating system deschedules one of those threads now and then, and each region then waits for it:
with many small products per batch (the fused head's vocabulary chunks) two threads can do less work
per second than one beside a single busy process (the readings: ``benchmarks/runs/2026-12-07-source-notes.md``).

Here the parallelism is over work units instead: ``n`` Python threads (torch releases the GIL inside
its operations) take units one at a time from a shared iterator, and each unit is a sequence of
torch operations that run on its own thread only (the worker sets its intra-op thread count to 1,
a per-thread setting of OpenMP and MKL). A descheduled worker delays only the unit it holds; the
other workers take the rest. There is one wait per call (for the last unit), not one per operation.

torch keeps a process-wide default that threads created later start from; setting the workers to
one thread would change it, so the calling thread sets it back to its own value right after the
workers have started (:func:`_pool`). That reset (and any ``torch.set_num_threads`` of the caller
later) reaches the workers too, and MKL's thread-local count alone does not keep them at one thread
(``benchmarks/runs/2026-12-02-encode-cpu.md``, "What changed"). So every call's workers set their count
to 1 at the start and the caller puts its own back at the end (:func:`run_units`).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TypeVar

import torch

Unit = TypeVar("Unit")

_LOCK = threading.Lock()
_WORKERS: list[threading.Thread] = []
_TASKS: queue.SimpleQueue = queue.SimpleQueue()


def _worker(ready: threading.Barrier) -> None:
    torch.set_num_threads(1)  # this thread's OpenMP and MKL thread counts (thread-local in both)
    ready.wait()
    while True:
        task, future = _TASKS.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(task())
        except BaseException as error:  # handed to the caller, which raises it
            future.set_exception(error)


def _pool(size: int) -> None:
    """Start workers until there are ``size`` (never fewer; a call uses as many as it asks for)."""
    with _LOCK:
        missing = size - len(_WORKERS)
        if missing <= 0:
            return
        caller = torch.get_num_threads()
        ready = threading.Barrier(missing + 1)
        for _ in range(missing):
            thread = threading.Thread(target=_worker, args=(ready,), name=f"spladekit-cpu-{len(_WORKERS)}", daemon=True)
            thread.start()
            _WORKERS.append(thread)
        ready.wait()  # every new worker has set its own count to 1 (which also set the process default) ...
        torch.set_num_threads(caller)  # ... so put the default back to the caller's value


def _reset_after_fork() -> None:  # threads do not survive fork(): a child starts its own workers
    global _LOCK, _TASKS
    _LOCK = threading.Lock()
    _TASKS = queue.SimpleQueue()
    _WORKERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _settle(futures: list[Future]) -> None:
    """Wait until every future is done, through further interruptions (a second SIGTERM or Ctrl-C).

    Called when the caller is interrupted (the signal handler's ``SystemExit``, ``KeyboardInterrupt``)
    while workers still run units: the workers are daemon threads, and one that finishes a torch
    operation after the interpreter has begun to shut down is ended by CPython (``pthread_exit``)
    while it re-takes the GIL inside torch's C++ code, which aborts the process ("terminate called
    without an active exception", exit 134) instead of the signal's exit status. The units left are
    not started (the caller set ``failed``), so the wait is for at most one unit per worker.
    """
    from concurrent.futures import wait

    while True:
        try:
            wait(futures)
            return
        except BaseException:  # the first interruption is raised by the caller once settled
            continue


def run_units(work: Callable[[Unit], None], units: Iterable[Unit], threads: int) -> None:
    """Call ``work(unit)`` for every unit, on ``threads`` single-threaded workers taking units in turn.

    ``threads`` ≤ 1 (or a single unit) runs inline on the calling thread, with its own torch thread
    setting. ``work`` must write to places no other unit writes (there is no lock around it).

    Raises:
        whatever ``work`` raised (the first error; the remaining units are not started).
    """
    units = list(units)
    if threads <= 1 or len(units) <= 1:
        for unit in units:
            work(unit)
        return
    threads = min(threads, len(units))
    _pool(threads)
    source = iter(units)
    lock = threading.Lock()
    failed = threading.Event()
    # grad mode and inference mode are thread-local in torch: the workers take the caller's, so
    # that writing into outputs the caller made under torch.inference_mode() is allowed there too
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    caller = torch.get_num_threads()

    def drain() -> None:
        torch.set_num_threads(1)  # again: the caller's set_num_threads since the last call reached the workers too
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            _drain()

    def _drain() -> None:
        while not failed.is_set():
            with lock:
                unit = next(source, None)
            if unit is None:
                return
            try:
                work(unit)
            except BaseException:
                failed.set()
                raise

    futures = []
    for _ in range(threads):
        future: Future = Future()
        _TASKS.put((drain, future))
        futures.append(future)
    try:
        for future in futures:  # wait for all before raising: no worker may still write into the outputs
            future.exception()
    except BaseException:  # SIGTERM's SystemExit or Ctrl-C while waiting: see _settle
        failed.set()
        _settle(futures)
        raise
    torch.set_num_threads(caller)  # the workers' setting reached the caller's thread too: put its own back
    for future in futures:
        future.result()
