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

A request whose caller stopped waiting (its timeout passed, its client left) is skipped when its
batch is formed; one whose batch is already running is computed and its answer dropped.
"""

from __future__ import annotations

import asyncio
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


class Overloaded(Exception):
    """The queue is full. Attributes: ``retry_after`` (whole seconds, ≥ 1), the expected time to drain it."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server's queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class Job:
    """One request waiting for its batch.

    Attributes:
        payload: what ``run_batch`` needs of the request.
        size: its number of queries.
        future: resolved with ``run_batch``'s answer for it (or its exception).
    """

    payload: Any
    size: int
    future: asyncio.Future = field(repr=False)


class MicroBatcher:
    """Collect requests into batches for ``run_batch(payloads) -> answers`` (same order, same length).

    Args:
        run_batch: called in a worker thread with the payloads of one batch; returns one answer per
            payload, or an exception instance for a payload that failed (the others are answered).
        max_batch: queries per batch (≥ 1).
        max_wait_s: longest wait for more requests once the first is taken (≥ 0).
        queue_size: requests that may wait (≥ 1); one more is refused.

    Raises:
        ValueError: a knob outside its range.
    """

    def __init__(self, run_batch: Callable[[Sequence[Any]], list], max_batch: int = 32, max_wait_s: float = 0.002, queue_size: int = 256):
        if max_batch < 1 or queue_size < 1 or not (max_wait_s >= 0 and math.isfinite(max_wait_s)):
            raise ValueError(f"max_batch ({max_batch}) and queue_size ({queue_size}) must be ≥ 1, max_wait_s ({max_wait_s}) ≥ 0")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self._queue: asyncio.Queue[Job] | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spladekit-batch")
        self._seconds_per_query = 0.0  # moving average of compute time per query, for Retry-After
        self.batches = 0
        self.queries = 0
        self.refused = 0

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

    # ------------------------------------------------------------------ requests
    async def submit(self, payload: Any, size: int, timeout_s: float | None) -> Any:
        """Queue one request and wait for its answer.

        Raises:
            Overloaded: the queue holds ``queue_size`` requests.
            asyncio.TimeoutError: no answer within ``timeout_s`` (the request is then dropped).
            Whatever ``run_batch`` gave for this payload.
        """
        future = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(Job(payload, size, future))
        except asyncio.QueueFull:
            self.refused += 1
            drain = (self.waiting + self.max_batch) * self._seconds_per_query
            raise Overloaded(max(1, math.ceil(drain))) from None
        return await asyncio.wait_for(future, timeout_s)  # on timeout the future is cancelled: its batch skips it

    # ------------------------------------------------------------------ the loop
    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            size = batch[0].size
            deadline = loop.time() + self.max_wait_s
            while size < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), left)
                    except asyncio.TimeoutError:
                        break
                batch.append(job)
                size += job.size
            batch = [job for job in batch if not job.future.done()]  # timed out while waiting
            if not batch:
                continue
            began = time.perf_counter()
            try:
                answers = await loop.run_in_executor(self._executor, self.run_batch, [job.payload for job in batch])
            except Exception as exc:  # noqa: BLE001  (the batch fails, the loop and the server go on)
                answers = [exc] * len(batch)
            queries = sum(job.size for job in batch)
            per_query = (time.perf_counter() - began) / max(1, queries)
            self._seconds_per_query = per_query if self.batches == 0 else 0.8 * self._seconds_per_query + 0.2 * per_query
            self.batches += 1
            self.queries += queries
            for job, answer in zip(batch, answers):
                if job.future.done():
                    continue
                if isinstance(answer, BaseException):
                    job.future.set_exception(answer)
                else:
                    job.future.set_result(answer)
