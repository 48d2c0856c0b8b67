"""Micro-batching of concurrent requests, with a bounded queue (one per worker process).

Requests are put on a queue of at most ``queue_size`` waiting requests; a full queue refuses at
once (:class:`Overloaded`, answered 503 with ``Retry-After``) instead of queueing without end. One
loop takes the first waiting request, then collects more until the batch holds ``max_batch``
queries or ``max_wait_s`` has passed since the first was taken (the two knobs of TorchServe's
``batch_size`` / ``max_batch_delay`` and Triton's ``max_queue_delay``), and hands the batch to
``run_batch`` in one worker thread (so the event loop keeps accepting and refusing requests while
a batch is computed). A batch may exceed ``max_batch`` by the last request's queries (requests are
never split). While a batch runs the next one collects, so under load batches fill up without
waiting.

Waiting for more requests only when more can come (``open_connections``, optional: the number of
open client connections of this worker). With HTTP/1.1 a connection holds at most one request at a
time, so once the batch holds a request of every open connection no other request can join it
before it is answered: the batch is handed on at once instead of waiting out ``max_wait_s``. A lone
client then pays no wait at all.

A request whose caller stopped waiting (its timeout passed, or its client left: ``submit``'s
``gone``; either cancels its future) is skipped when its batch is formed and counted in
``abandoned``; one whose batch is already running is computed and its answer dropped.

Queue-wait deadline (``max_queue_wait_s``, optional). The bounded queue bounds how many requests
wait, but their wait only as ``queue_size`` × the time per query, and that time grows when the
server slows down (under overload, refusing requests takes CPU from the batches). With a deadline, a
request that has waited in the queue (from :meth:`MicroBatcher.submit` to the moment its batch is
handed to ``run_batch``) longer than ``max_queue_wait_s`` is not computed but answered
:class:`Overloaded`; so an answered request spends at most ``max_queue_wait_s`` plus the time of the
one batch it is computed in inside the batcher, whatever the rate at which the queue drains. The
wait for more requests (``max_wait_s``) ends early enough that no member of the batch passes its
deadline (or the latency limit below) by it; the batch is then handed on without a second check, so
a lone request that spent most of its deadline in the server before it was queued is computed, not
refused for the batcher's own wait; that hand-off can still be late by the event loop's timer
lateness. The idea is deadline-based load shedding: CoDel bounds a packet's sojourn time in a queue
rather than the queue's length (Nichols & Jacobson, "Controlling Queue Delay", ACM Queue 10(5),
2012); gRPC drops a call whose deadline has passed instead of computing it. Requests are also
refused at admission when the work ahead of them already exceeds the deadline (the queries waiting ×
the smoothed seconds per query ``S`` of "Latency limit" below): such a request would be refused when
its batch is formed anyway. That estimate leaves out the batch running at the time (it errs towards
admitting); the check when a batch is formed is what guarantees the bound.

Latency limit (``max_latency_s``, optional). The deadline above bounds the wait, not the batch's own
compute time, which also grows under overload. With a latency limit, a request is computed only if
its wait so far plus its batch's expected compute time fits within ``max_latency_s``: when a batch
is formed, its oldest requests are answered :class:`Overloaded` (``latency``) until the oldest one
left fits (the others waited less), and a request is refused on arrival when the queries ahead of it
and its own, at the expected time per query, would not fit. The expected time per query is a
conservative estimate from the batches already computed, as TCP's retransmission timer estimates a
round trip (RFC 6298, §2: smoothed mean ``S ← (1 − α)·S + α·R`` and mean deviation
``D ← (1 − β)·D + β·|S − R|``, α = 1/8, β = 1/4, the estimate ``S + 4·D``; first sample ``S = R``,
``D = R/2``), here with ``R`` a batch's seconds per query. An estimate can still be exceeded by a
batch slower than all before it; before the first batch only requests that already waited past the
limit are refused.

Measurements of these choices: ``benchmarks/RESULTS.md`` (``spladekit serve``) and its logs.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

CAUSES = ("queue_full", "expected_wait", "queue_wait", "latency")
"""Why a request was refused for load (:attr:`Overloaded.cause`)."""

QUEUE_FULL = "the server's queue is full"


class Overloaded(Exception):
    """A request refused for load (answered 503 with ``Retry-After``).

    Attributes:
        retry_after: whole seconds (≥ 1), the expected time to drain the queue.
        cause: one of :data:`CAUSES`: ``queue_full`` (``queue_size`` requests were waiting),
            ``expected_wait`` (refused at admission: the work ahead of it exceeded
            ``max_queue_wait_s``), ``queue_wait`` (it had waited longer than ``max_queue_wait_s``
            when its batch was formed; not computed).
    """

    def __init__(self, retry_after: int, cause: str = "queue_full", message: str | None = None):
        if cause not in CAUSES:
            raise ValueError(f"cause ({cause!r}) must be one of {CAUSES}")
        super().__init__(f"{message or QUEUE_FULL}; retry after {retry_after} s")
        self.retry_after = retry_after
        self.cause = cause


class Abandoned(Exception):
    """A request whose caller left before its answer (``submit``'s ``gone``): nobody to answer."""


@dataclass
class Job:
    """One request waiting for its batch.

    Attributes:
        payload: what ``run_batch`` needs of the request.
        size: its number of queries.
        future: resolved with ``run_batch``'s answer for it (or its exception).
        queued: when it arrived (the event loop's clock, seconds): when it was queued, less the time
            it had already spent in the server (``enqueue``'s ``waited_s``).
    """

    payload: Any
    size: int
    future: asyncio.Future = field(repr=False)
    queued: float = 0.0


class MicroBatcher:
    """Collect requests into batches for ``run_batch(payloads) -> answers`` (same order, same length).

    Args:
        run_batch: called in a worker thread with the payloads of one batch; returns one answer per
            payload, or an exception instance for a payload that failed (the others are answered).
        max_batch: queries per batch (≥ 1).
        max_wait_s: longest wait for more requests once the first is taken (≥ 0).
        queue_size: requests that may wait (≥ 1); one more is refused.
        max_queue_wait_s: queue-wait deadline, seconds (None: none). A request that has waited
            longer when its batch is formed is answered :class:`Overloaded` (``queue_wait``) and not
            computed; one whose expected wait at admission already exceeds it is refused then
            (``expected_wait``). Must exceed ``max_wait_s`` (else every wait for more requests would be
            cut short by it).
        max_latency_s: latency limit, seconds (None: none): wait plus the batch's expected compute
            time (module docstring, "Latency limit"). Must exceed ``max_wait_s``.
        open_connections: returns the number of open client connections (None, or a count of 0:
            unknown, e.g. the app under another server than ``spladekit serve``'s protocol; always
            wait up to ``max_wait_s``); a batch holding as many requests as that is not held back for more.

    Raises:
        ValueError: a knob outside its range (named).
    """

    def __init__(
        self,
        run_batch: Callable[[Sequence[Any]], list],
        max_batch: int = 32,
        max_wait_s: float = 0.002,
        queue_size: int = 256,
        max_queue_wait_s: float | None = None,
        max_latency_s: float | None = None,
        open_connections: Callable[[], int] | None = None,
    ):
        if max_batch < 1 or queue_size < 1 or not (max_wait_s >= 0 and math.isfinite(max_wait_s)):
            raise ValueError(
                f"max_batch ({max_batch}) and queue_size ({queue_size}) must be ≥ 1, max_wait_s ({max_wait_s}) ≥ 0"
            )
        if max_queue_wait_s is not None and not (math.isfinite(max_queue_wait_s) and max_queue_wait_s > max_wait_s):
            raise ValueError(
                f"max_queue_wait_s ({max_queue_wait_s}) must be finite and exceed max_wait_s ({max_wait_s})"
            )
        if max_latency_s is not None and not (math.isfinite(max_latency_s) and max_latency_s > max_wait_s):
            raise ValueError(f"max_latency_s ({max_latency_s}) must be finite and exceed max_wait_s ({max_wait_s})")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.max_queue_wait_s = max_queue_wait_s
        self.max_latency_s = max_latency_s
        self.open_connections = open_connections
        self._mean_per_query: float | None = (
            None  # RFC 6298's S and D over batches' seconds per query (None: no batch yet)
        )
        self._deviation_per_query = 0.0
        self._queue: asyncio.Queue[Job] | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spladekit-batch")
        self._waiting_queries = 0  # queries of the requests in the queue
        self.batches = 0
        self.queries = 0
        self.abandoned = 0  # requests not computed because their caller stopped waiting
        self.refused_by_cause = dict.fromkeys(CAUSES, 0)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the batching loop on the running event loop."""
        self._queue = asyncio.Queue(maxsize=self.queue_size)
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop the loop; waiting requests are failed with ``RuntimeError``."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while self._queue is not None and not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(RuntimeError("the server is shutting down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def waiting(self) -> int:
        """Requests in the queue now."""
        return self._queue.qsize() if self._queue is not None else 0

    @property
    def refused(self) -> int:
        """Requests refused for load so far, all causes."""
        return sum(self.refused_by_cause.values())

    @property
    def seconds_per_query(self) -> float:
        """The smoothed mean ``S`` of a batch's compute time per query (seconds; RFC 6298, §2, see
        :meth:`_observe`; 0 before the first batch)."""
        return self._mean_per_query or 0.0

    @property
    def expected_seconds_per_query(self) -> float | None:
        """The conservative estimate of a batch's seconds per query, ``S + 4·D`` (RFC 6298, §2); None before the first batch."""
        if self._mean_per_query is None:
            return None
        return self._mean_per_query + 4.0 * self._deviation_per_query

    def _observe(self, per_query: float) -> None:
        """Update ``S`` and ``D`` with one batch's seconds per query (RFC 6298, §2.2–2.3: α = 1/8, β = 1/4)."""
        if self._mean_per_query is None:
            self._mean_per_query, self._deviation_per_query = per_query, per_query / 2.0
        else:
            self._deviation_per_query = 0.75 * self._deviation_per_query + 0.25 * abs(self._mean_per_query - per_query)
            self._mean_per_query = 0.875 * self._mean_per_query + 0.125 * per_query

    def _retry_after(self) -> int:
        """Whole seconds (≥ 1) to drain the queue and one more batch at the measured rate."""
        return max(1, math.ceil((self._waiting_queries + self.max_batch) * self.seconds_per_query))

    # ------------------------------------------------------------------ requests
    async def submit(
        self,
        payload: Any,
        size: int,
        timeout_s: float | None,
        waited_s: float = 0.0,
        gone: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        """Queue one request (:meth:`enqueue`, with ``waited_s``) and wait for its answer.

        ``gone``: a coroutine function whose coroutine returns when the request's caller has left
        (its client disconnected); the request is then dropped (not computed if its batch has not
        been formed) and :class:`Abandoned` raised. The watch cancels the request's future, not the
        caller's task, so no cancellation is left pending in the caller.

        Raises:
            Overloaded: refused on arrival (see :meth:`enqueue`), or it waited past the deadline or
                would have passed the latency limit (not computed).
            asyncio.TimeoutError: no answer within ``timeout_s`` (the request is then dropped).
            Abandoned: ``gone`` returned first.
            Whatever ``run_batch`` gave for this payload.
        """
        future = self.enqueue(payload, size, waited_s)
        watch = None
        if gone is not None:

            async def cancel_when_gone() -> None:
                await gone()
                future.cancel()

            watch = asyncio.get_running_loop().create_task(cancel_when_gone())
        try:
            async with asyncio.timeout(timeout_s):  # on timeout the future is cancelled: its batch skips it
                return await future
        except asyncio.CancelledError:
            if watch is not None and watch.done() and not watch.cancelled():
                raise Abandoned() from None
            raise  # this task itself was cancelled (the server is stopping)
        finally:
            if watch is not None:
                watch.cancel()

    def enqueue(self, payload: Any, size: int, waited_s: float = 0.0) -> asyncio.Future:
        """Queue one request of ``size`` queries; its answer (or exception) comes in the future
        returned. Cancelling the future before its batch is formed drops the request (``abandoned``).
        ``waited_s``: seconds the request already spent in the server before it came here (its head
        parsed, waiting for the event loop, its body read, validated); the deadline and the latency
        limit count it as waiting.

        Raises:
            Overloaded: the queue holds ``queue_size`` requests; or the work ahead of it exceeds the
                queue-wait deadline (``max_queue_wait_s``) or, with this request's, the latency limit
                (``max_latency_s``).
        """
        loop = asyncio.get_running_loop()
        waited_s = max(0.0, waited_s)
        spent = f" after {1000 * waited_s:.0f} ms in the server" if waited_s >= 0.0005 else ""
        if self.max_queue_wait_s is not None:
            ahead = self._waiting_queries * self.seconds_per_query
            if waited_s + ahead > self.max_queue_wait_s:
                self.refused_by_cause["expected_wait"] += 1
                raise Overloaded(
                    self._retry_after(),
                    "expected_wait",
                    f"the server is overloaded: {self._waiting_queries} queries wait, about {1000 * ahead:.0f} ms of work{spent}, "
                    f"over the queue-wait limit of {1000 * self.max_queue_wait_s:g} ms",
                )
        per = self.expected_seconds_per_query
        if (
            self.max_latency_s is not None
            and per is not None
            and waited_s + (self._waiting_queries + size) * per > self.max_latency_s
        ):
            self.refused_by_cause["expected_wait"] += 1
            raise Overloaded(
                self._retry_after(),
                "expected_wait",
                f"the server is overloaded: {self._waiting_queries} queries wait; with this request's about "
                f"{1000 * (self._waiting_queries + size) * per:.0f} ms of work{spent}, over the latency limit of {1000 * self.max_latency_s:g} ms",
            )
        future = loop.create_future()
        try:
            self._queue.put_nowait(Job(payload, size, future, loop.time() - waited_s))
        except asyncio.QueueFull:
            self.refused_by_cause["queue_full"] += 1
            raise Overloaded(self._retry_after()) from None
        self._waiting_queries += size
        return future

    # ------------------------------------------------------------------ the loop
    def _take(self, job: Job, now: float) -> bool:
        """Account for a job taken off the queue; False (and the job answered) when it is not to be
        computed: its caller left, or it waited past the deadline."""
        self._waiting_queries -= job.size
        if job.future.done():  # cancelled: its request timed out or its client left
            self.abandoned += 1
            return False
        return not self._expired(job, now)

    def _expired(self, job: Job, now: float) -> bool:
        """Whether the job waited past the deadline; if so it is answered Overloaded (``queue_wait``)."""
        if self.max_queue_wait_s is None or now - job.queued <= self.max_queue_wait_s:
            return False
        self.refused_by_cause["queue_wait"] += 1
        job.future.set_exception(
            Overloaded(
                self._retry_after(),
                "queue_wait",
                f"the server is overloaded: the request waited {1000 * (now - job.queued):.0f} ms in the queue, "
                f"over the queue-wait limit of {1000 * self.max_queue_wait_s:g} ms (not computed)",
            )
        )
        return True

    def _fit_latency(self, batch: list[Job], now: float) -> list[Job]:
        """The batch, oldest first (by queueing time, which counts the time spent in the server before
        the queue, so it can differ from the order taken), without its oldest requests whose wait plus
        the batch's expected compute time exceeds ``max_latency_s``; those are answered Overloaded
        (``latency``)."""
        batch = sorted(batch, key=lambda job: job.queued)
        per = self.expected_seconds_per_query
        size = sum(job.size for job in batch)
        while batch:
            expected = 0.0 if per is None else size * per
            waited = now - batch[0].queued
            if waited + expected <= self.max_latency_s:
                break
            job = batch.pop(0)
            size -= job.size
            self.refused_by_cause["latency"] += 1
            job.future.set_exception(
                Overloaded(
                    self._retry_after(),
                    "latency",
                    f"the server is overloaded: the request waited {1000 * waited:.0f} ms and its batch would take "
                    f"about {1000 * expected:.0f} ms more, over the latency limit of {1000 * self.max_latency_s:g} ms "
                    f"(not computed)",
                )
            )
        return batch

    def _gather_until(self, batch: list[Job], size: int, until: float) -> float:
        """When to stop waiting for more requests to join ``batch`` (``size`` queries): ``until``, or
        earlier so that waiting for more requests never makes a member miss the queue-wait deadline (the
        earliest member's queueing time + ``max_queue_wait_s``) or the latency limit (+ ``max_latency_s``
        − ``size`` × the expected seconds per query). Loop clock, seconds."""
        oldest = min(job.queued for job in batch)
        if self.max_queue_wait_s is not None:
            until = min(until, oldest + self.max_queue_wait_s)
        if self.max_latency_s is not None:
            until = min(until, oldest + self.max_latency_s - size * (self.expected_seconds_per_query or 0.0))
        return until

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            if not self._take(first, loop.time()):
                continue
            batch, size = [first], first.size
            deadline = self._gather_until(batch, size, loop.time() + self.max_wait_s)
            ended_by_timer = False
            while size < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    open_connections = self.open_connections() if self.open_connections is not None else 0
                    if 0 < open_connections <= len(batch):
                        break  # every open connection has its request in this batch: none can join it
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    try:
                        async with asyncio.timeout(left):
                            job = await self._queue.get()  # on timeout get() is cancelled; no job is lost
                    except TimeoutError:
                        ended_by_timer = True
                        break
                if self._take(job, loop.time()):
                    batch.append(job)
                    size += job.size
                    deadline = self._gather_until(batch, size, deadline)
            # the batch is formed: what timed out meanwhile is not computed; what waited past the deadline
            # or the latency limit meanwhile too, unless the wait was the batcher's own for more requests, which
            # ends by then (_gather_until): its timer's lateness is the event loop's, not the request's
            batch = [job for job in batch if not job.future.done()]
            if not ended_by_timer:
                now = loop.time()
                batch = [job for job in batch if not self._expired(job, now)]
                if self.max_latency_s is not None:
                    batch = self._fit_latency(batch, now)
            if not batch:
                continue
            began = time.perf_counter()
            try:
                answers = await loop.run_in_executor(self._executor, self.run_batch, [job.payload for job in batch])
            except Exception as exc:  # noqa: BLE001  (the batch fails, the loop and the server go on)
                answers = [exc] * len(batch)
            queries = sum(job.size for job in batch)
            per_query = (time.perf_counter() - began) / max(1, queries)
            self._observe(per_query)
            self.batches += 1
            self.queries += queries
            for job, answer in zip(batch, answers):
                if job.future.done():
                    continue
                if isinstance(answer, BaseException):
                    job.future.set_exception(answer)
                else:
                    job.future.set_result(answer)
