"""The queue-wait deadline of :class:`spladekit.serve.batching.MicroBatcher` (``max_queue_wait_s``):
a request that has waited past it when its batch is formed is answered ``Overloaded`` and not
computed; one whose expected wait already exceeds it is refused on arrival; the answered requests'
latency stays within the deadline plus one batch.

The batch function is real code that sleeps a known time (0.1 s per batch of 2), so the queue drains
at a known rate and the times can be checked against the deadline. The clock is ``time.monotonic``,
the event loop's own (``asyncio`` loops' ``time()`` is ``time.monotonic()``).
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time

import pytest

from spladekit.serve.batching import MicroBatcher, Overloaded

BATCH_S = 0.1  # each batch sleeps this long
MAX_BATCH = 2
MAX_WAIT_S = 0.005
DEADLINE_S = 0.35  # about 3.5 batches: some jobs of a burst of 20 are computed, the later ones are not
HANDOFF_S = 0.1
"""Slack for one hand-off between the event loop and the batch thread. The batcher checks a job's
wait when it forms the batch, on the loop; ``run_batch`` then starts in the executor's thread, and
its answer reaches the waiting coroutine through ``call_soon_threadsafe``: each a thread wake-up,
microseconds on an idle machine, up to tens of ms on a loaded 2-core one (the scheduler's time
slices). 0.1 s covers that several times over and is still far below what the checks tell apart:
without the deadline the 20th job of the burst starts about 0.9 s after it was queued (10 batches of
0.1 s), over 0.5 s past ``DEADLINE_S + HANDOFF_S`` (the control run asserts it)."""


def _sleeping_batch(record: list):
    def run_batch(payloads):
        began = time.monotonic()
        time.sleep(BATCH_S)
        record.append((began, time.monotonic(), list(payloads)))
        return [p * 10 for p in payloads]

    return run_batch


async def _burst(batcher: MicroBatcher, n: int, first: int = 0) -> list[tuple[int, float, float, object]]:
    """``n`` one-query jobs submitted at once: ``(payload, submitted, done, answer or exception)`` each,
    ``submitted`` read before :meth:`submit` (so at or before the batcher's own queueing time) and
    ``done`` when its answer or refusal arrived."""

    async def one(i):
        submitted = time.monotonic()
        try:
            answer = await batcher.submit(i, 1, 30)
        except Overloaded as exc:
            answer = exc
        return i, submitted, time.monotonic(), answer

    return await asyncio.gather(*(one(i) for i in range(first, first + n)))


async def _burst_after_warmup(pairs: int, **knobs):
    """A batcher of sleeping batches (``knobs``: its deadline or latency limit), ``pairs`` warm-up
    batches of two one-query jobs (so the per-query estimate exists), then a burst of 20 jobs:
    ``(jobs, record of the burst's batches, batcher)``."""
    record: list = []
    batcher = MicroBatcher(_sleeping_batch(record), max_batch=MAX_BATCH, max_wait_s=MAX_WAIT_S, queue_size=100, **knobs)
    batcher.start()
    try:
        for w in range(pairs):
            assert await asyncio.gather(batcher.submit(-2 * w - 1, 1, 30), batcher.submit(-2 * w - 2, 1, 30)) == [
                -20 * w - 10,
                -20 * w - 20,
            ]
        record.clear()
        jobs = await _burst(batcher, 20)
    finally:
        await batcher.stop()
    return jobs, record, batcher


def _check_deadline_held(jobs, record):
    """The relations the deadline guarantees, for jobs submitted while no refusal on arrival could
    happen: each job is computed (answer = 10 × payload) or refused with cause ``queue_wait``; no
    refused job was computed; refused jobs had waited past the deadline; computed ones started
    within it and were answered within the deadline plus one batch."""
    computed = {p: (began, ended) for began, ended, payloads in record for p in payloads}
    answered = [(i, s, d) for i, s, d, a in jobs if not isinstance(a, Overloaded)]
    refused = [(i, s, d, a) for i, s, d, a in jobs if isinstance(a, Overloaded)]
    assert all(a == 10 * i for i, s, d, a in jobs if not isinstance(a, Overloaded))
    ids = {j[0] for j in jobs}
    assert {i for i, _, _ in answered} == {
        p for p in computed if p in ids
    }  # what was computed was answered, nothing else
    longest_batch = max(ended - began for began, ended, _ in record)
    for i, submitted, done in answered:
        began, _ = computed[i]
        # its batch was formed when it had waited ≤ DEADLINE_S (checked by the batcher on the loop's clock,
        # queued at or after `submitted`); the batch thread started one hand-off later
        assert began - submitted <= DEADLINE_S + HANDOFF_S, (i, began - submitted)
        # ≤ the deadline (which includes any MAX_WAIT_S for company: the check comes after collecting)
        # + its batch + the two hand-offs (to the thread, back to the loop)
        assert done - submitted <= DEADLINE_S + longest_batch + 2 * HANDOFF_S, (i, done - submitted)
    for i, submitted, done, exc in refused:
        assert exc.cause == "queue_wait" and exc.retry_after >= 1, exc
        assert f"over the queue-wait limit of {1000 * DEADLINE_S:g} ms (not computed)" in str(exc)
        # exact by construction: refused when (now − queued) > DEADLINE_S, with queued ≥ submitted and done ≥ now
        assert done - submitted > DEADLINE_S, (i, done - submitted)
    return [i for i, _, _ in answered], [i for i, _, _, _ in refused]


def test_jobs_past_the_queue_wait_deadline_are_refused_not_computed():
    # control: without a deadline every job is computed, the last ones long after DEADLINE_S + HANDOFF_S
    jobs, record, _ = asyncio.run(_burst_after_warmup(0, max_queue_wait_s=None))
    assert not any(isinstance(a, Overloaded) for *_, a in jobs)
    starts = {p: began for began, _, payloads in record for p in payloads}
    assert max(starts[i] - s for i, s, _, _ in jobs) > DEADLINE_S + HANDOFF_S + 0.3

    jobs, record, batcher = asyncio.run(_burst_after_warmup(0, max_queue_wait_s=DEADLINE_S))
    answered, refused = _check_deadline_held(jobs, record)
    assert answered and refused, (answered, refused)
    # batches are formed first come first served: the answered jobs are the first ones of the burst
    assert answered == list(range(len(answered))) and refused == list(range(len(answered), 20))
    # all 20 were queued before the first batch ended, when no seconds-per-query estimate existed yet:
    # none could be refused on arrival; every refusal is the deadline's, and counted
    assert batcher.refused_by_cause == {"queue_full": 0, "expected_wait": 0, "queue_wait": len(refused), "latency": 0}
    assert batcher.queries == len(answered)


def test_jobs_refused_on_arrival_when_the_queued_work_exceeds_the_deadline():
    """After a first batch the batcher knows its seconds per query ``s``; of a burst submitted at once
    (no batch runs meanwhile: the submissions all run before the batching loop's next turn), job
    ``m`` is refused on arrival when the ``m`` queries queued before it × ``s`` exceed the deadline.
    The admitted ones then obey the deadline as in the test above."""

    async def main():
        record: list = []
        batcher = MicroBatcher(
            _sleeping_batch(record),
            max_batch=MAX_BATCH,
            max_wait_s=MAX_WAIT_S,
            queue_size=100,
            max_queue_wait_s=DEADLINE_S,
        )
        batcher.start()
        try:
            assert await batcher.submit(-1, 1, 30) == -10  # one batch: the estimate exists
            s = batcher.seconds_per_query
            jobs = await _burst(batcher, 20)
        finally:
            await batcher.stop()
        return s, jobs, record, batcher

    s, jobs, record, batcher = asyncio.run(main())
    assert BATCH_S <= s < 10 * BATCH_S  # one query per batch, the sleep and a little more
    # the batcher's own test, the same float arithmetic: `queued queries * s > max_queue_wait_s`
    admitted = next(m for m in itertools.count() if m * s > DEADLINE_S)
    on_arrival = [
        (i, submitted, done, a)
        for i, submitted, done, a in jobs
        if isinstance(a, Overloaded) and a.cause == "expected_wait"
    ]
    assert [i for i, *_ in on_arrival] == list(range(admitted, 20))
    for i, submitted, done, exc in on_arrival:
        assert done - submitted < BATCH_S, (i, done - submitted)  # at once: no batch ran meanwhile
        assert exc.retry_after >= 1 and f"over the queue-wait limit of {1000 * DEADLINE_S:g} ms" in str(exc)
    _check_deadline_held([j for j in jobs if j[0] < admitted], record)
    assert batcher.refused_by_cause["expected_wait"] == 20 - admitted


@pytest.mark.parametrize(
    "deadline, wait, problem",
    [
        (0.002, 0.002, "must be finite and exceed max_wait_s"),
        (float("nan"), 0.002, "must be finite"),
        (float("inf"), 0.002, "must be finite"),
    ],
)
def test_a_deadline_not_above_the_batch_wait_is_refused(deadline, wait, problem):
    with pytest.raises(ValueError, match=f"max_queue_wait_s .*{problem}"):
        MicroBatcher(lambda p: p, max_wait_s=wait, max_queue_wait_s=deadline)


def test_the_serve_option_is_checked_naming_it(tmp_path):
    from pydantic import ValidationError

    from spladekit.serve.config import ServeConfig

    assert ServeConfig(index="x").max_queue_wait_ms is None  # off unless asked
    with pytest.raises(ValidationError, match="max_queue_wait_ms"):
        ServeConfig(index="x", max_queue_wait_ms=0)
    # refused before any index or model is read (the folder does not exist)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "serve",
            "--index",
            str(tmp_path / "none"),
            "--max-wait-ms",
            "5",
            "--max-queue-wait-ms",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--max-queue-wait-ms: " in done.stderr and "must exceed max_wait_ms (5)" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("knob", ["max_queue_wait_s", "max_latency_s"])
@pytest.mark.parametrize("spent", [0.0, 0.15, 0.25])
def test_a_lone_request_is_not_refused_for_the_batchers_own_wait_for_company(knob, spent):
    """One request at a time, having spent ``spent`` s in the server before it was queued, a limit of
    0.3 s and a wait for company of 0.2 s: nothing is ahead of it and no other comes, so it is computed.
    The batcher used to wait the whole 0.2 s for company and then refuse the request for having waited
    0.3 s or more ("waited 300 ms ..., over the queue-wait limit of 300 ms") whenever it had spent over
    0.1 s in the server: on a loaded 2-core machine the server test's first request spent over 15 ms of
    a 20 ms deadline and every request of it was refused. Each one waits at most ``0.3 − spent`` for
    company: its answer comes before ``max_wait_s`` has passed, and well before when ``spent`` is near
    the limit (bounds with HANDOFF_S of slack for the thread hand-offs)."""

    async def main():
        batcher = MicroBatcher(
            lambda payloads: [p * 10 for p in payloads], max_batch=2, max_wait_s=0.2, queue_size=10, **{knob: 0.3}
        )
        batcher.start()
        try:
            began = time.monotonic()
            answer = await batcher.submit(7, 1, 5, waited_s=spent)
            return answer, time.monotonic() - began, batcher
        finally:
            await batcher.stop()

    answer, took, batcher = asyncio.run(main())
    assert answer == 70 and batcher.refused == 0 and batcher.queries == 1
    assert took <= min(0.2, 0.3 - spent) + HANDOFF_S, took  # the wait for company was cut to what the limit left


# ----------------------------------------------------------------------------------- latency limit
def test_expected_seconds_per_query_follow_rfc_6298():
    """S and D by hand (RFC 6298 §2.2–2.3, α = 1/8, β = 1/4; values exact in binary): first sample
    R = 0.125: S = 0.125, D = 0.0625, S + 4D = 0.375; then R = 0.25: D = 0.75·0.0625 + 0.25·0.125 =
    0.078125, S = 0.875·0.125 + 0.125·0.25 = 0.140625, S + 4D = 0.453125."""
    batcher = MicroBatcher(lambda p: p, max_latency_s=1.0)
    assert batcher.expected_seconds_per_query is None
    batcher._observe(0.125)
    assert batcher.expected_seconds_per_query == 0.375  # exact: binary fractions
    batcher._observe(0.25)
    assert batcher.expected_seconds_per_query == 0.453125


def test_oldest_jobs_that_would_exceed_the_latency_limit_are_refused_not_computed():
    """With S + 4D = 0.375 s per query and a limit of 1 s, three one-query jobs queued at 0, 0.125 and
    0.25 s, the batch formed at 0.5 s (by hand): all three: 0.5 + 3·0.375 = 1.625 > 1, the oldest
    refused; two: 0.375 + 0.75 = 1.125 > 1, the next refused; one: 0.25 + 0.375 = 0.625 ≤ 1, kept."""
    from spladekit.serve.batching import Job

    async def main():
        batcher = MicroBatcher(lambda p: p, max_latency_s=1.0)
        batcher._observe(0.125)
        loop = asyncio.get_running_loop()
        jobs = [Job(i, 1, loop.create_future(), queued) for i, queued in enumerate((0.0, 0.125, 0.25))]
        # taken youngest first: a request's queueing time counts its time in the server before the queue,
        # so the order taken is not its age; the oldest are refused whatever the order
        kept = batcher._fit_latency(jobs[::-1], 0.5)
        return jobs, kept, batcher

    jobs, kept, batcher = asyncio.run(main())
    assert kept == [jobs[2]] and not jobs[2].future.done()
    for job, waited, expected in ((jobs[0], 500, 1125), (jobs[1], 375, 750)):
        exc = job.future.exception()
        assert isinstance(exc, Overloaded) and exc.cause == "latency"
        assert (
            f"waited {waited} ms and its batch would take about {expected} ms more, over the latency limit of 1000 ms (not computed)"
            in str(exc)
        )
    assert batcher.refused_by_cause["latency"] == 2


def test_time_already_spent_in_the_server_counts_as_waiting():
    """``enqueue(..., waited_s)``: a job's clock starts when the server had its head (the wait for the
    event loop and its body before the handler). With S + 4D = 0.375 s per query (as above) and a 1 s
    limit, by hand: a one-query job that spent 0.5 s is admitted (0.5 + 0.375 = 0.875 ≤ 1) and its
    queued time is 0.5 s in the past; a second one that spent 0.325 s, with that query ahead of it, is
    refused on arrival (0.325 + 2 × 0.375 = 1.075 > 1; with no time spent it would be admitted: 0.75)."""

    async def main():
        batcher = MicroBatcher(lambda p: p, max_latency_s=1.0)
        batcher.start()
        try:
            batcher._observe(0.125)
            loop = asyncio.get_running_loop()
            now = loop.time()
            batcher.enqueue("a", 1, waited_s=0.5)
            queued = batcher._queue._queue[0].queued  # peeked, not taken: the loop has not run yet
            with pytest.raises(Overloaded) as refused:
                batcher.enqueue("b", 1, waited_s=0.325)  # one query (0.375 s) waits ahead of it
            return now, queued, refused.value
        finally:
            await batcher.stop()

    now, queued, refused = asyncio.run(main())
    assert abs((now - queued) - 0.5) < 0.01  # loop.time() read twice, microseconds apart
    assert refused.cause == "expected_wait" and "over the latency limit of 1000 ms" in str(refused)


def test_a_job_whose_caller_left_is_dropped_and_the_others_answered():
    """Three one-query jobs behind a batch of two that sleeps BATCH_S: the caller of job 2 leaves
    (its ``gone`` returns) while the first batch runs; it gets Abandoned, is counted in ``abandoned``
    and never computed; jobs 0, 1 and 3 are answered (10 × payload), and a ``gone`` that never returns
    changes nothing."""
    from spladekit.serve.batching import Abandoned

    async def main():
        record: list = []
        batcher = MicroBatcher(_sleeping_batch(record), max_batch=MAX_BATCH, max_wait_s=MAX_WAIT_S)
        batcher.start()
        left, never = asyncio.Event(), asyncio.Event()
        try:
            jobs = [
                asyncio.ensure_future(batcher.submit(i, 1, 30, gone=(left if i == 2 else never).wait)) for i in range(4)
            ]
            await asyncio.sleep(BATCH_S / 2)  # jobs 0 and 1 are computing, 2 and 3 wait
            left.set()
            answers = await asyncio.gather(*jobs, return_exceptions=True)
            return answers, record, batcher.abandoned
        finally:
            await batcher.stop()

    answers, record, abandoned = asyncio.run(main())
    assert isinstance(answers[2], Abandoned) and [answers[i] for i in (0, 1, 3)] == [0, 10, 30]
    assert abandoned == 1 and sorted(p for _, _, payloads in record for p in payloads) == [0, 1, 3]


LATENCY_S = 0.5


def test_answered_jobs_stay_within_the_latency_limit():
    """Four warm-up batches of 2 (the estimate from them: about 0.05 s per query plus four mean
    deviations), then a burst of 20 one-query jobs: every answered job was answered within the limit
    plus the two hand-offs (the sleeping batches take their expected time; the estimate is above
    it), every refused one was refused on arrival or at its batch's forming and never computed. The
    control without the limit answers the last of the burst long after it."""

    jobs, record, _ = asyncio.run(_burst_after_warmup(4, max_latency_s=None))
    assert not any(isinstance(a, Overloaded) for *_, a in jobs)
    assert max(done - submitted for _, submitted, done, _ in jobs) > LATENCY_S + 2 * HANDOFF_S + 0.3

    jobs, record, batcher = asyncio.run(_burst_after_warmup(4, max_latency_s=LATENCY_S))
    computed = {p for _, _, payloads in record for p in payloads}
    answered = [(i, s, d) for i, s, d, a in jobs if not isinstance(a, Overloaded)]
    refused = [(i, a) for i, s, d, a in jobs if isinstance(a, Overloaded)]
    assert answered and refused, (answered, refused)
    assert {i for i, _, _ in answered} == computed and all(
        a == 10 * i for i, _, _, a in jobs if not isinstance(a, Overloaded)
    )
    for i, submitted, done in answered:
        assert done - submitted <= LATENCY_S + 2 * HANDOFF_S, (i, done - submitted)
    for _i, exc in refused:
        assert exc.cause in (
            "expected_wait",
            "latency",
        ) and f"over the latency limit of {1000 * LATENCY_S:g} ms" in str(exc), exc
    assert sum(batcher.refused_by_cause.values()) == len(refused)


def test_a_latency_limit_not_above_the_batch_wait_is_refused():
    from pydantic import ValidationError

    from spladekit.serve.config import ServeConfig

    with pytest.raises(ValueError, match="max_latency_s .*must be finite and exceed max_wait_s"):
        MicroBatcher(lambda p: p, max_wait_s=0.002, max_latency_s=0.002)
    with pytest.raises(ValidationError, match="max_latency_ms"):
        ServeConfig(index="x", max_wait_ms=5, max_latency_ms=5)
    with pytest.raises(ValidationError, match="max_latency_ms .*must be below the request timeout"):
        ServeConfig(index="x", max_latency_ms=20_000, request_timeout_s=10)


# ----------------------------------------------------------------------------------- waiting for more requests only when more can come
def test_a_batch_holding_every_open_connections_request_is_not_held_back():
    """With ``max_wait_s`` = 1 s: one open connection and its request in the batch: computed at once
    (well under the wait); three open connections: the batch waits for company, and a request
    submitted 0.2 s later joins the same batch; an unknown count (0) waits as before."""

    async def main(connections, second_after):
        record: list = []
        batcher = MicroBatcher(
            _sleeping_batch(record), max_batch=8, max_wait_s=1.0, queue_size=10, open_connections=lambda: connections
        )
        batcher.start()
        try:
            began = time.monotonic()
            first = asyncio.ensure_future(batcher.submit(1, 1, 30))
            if second_after is not None:
                await asyncio.sleep(second_after)
                await batcher.submit(2, 1, 30)
            assert await first == 10
            return time.monotonic() - began, [payloads for _, _, payloads in record]
        finally:
            await batcher.stop()

    took, batches = asyncio.run(main(1, None))
    assert batches == [[1]] and took < BATCH_S + 0.5, took  # no 1 s wait for company
    took, batches = asyncio.run(main(3, 0.2))
    assert batches == [[1, 2]], batches  # the later request joined: the batch waited
    took, batches = asyncio.run(main(0, None))
    assert batches == [[1]] and took >= 0.99, (
        took
    )  # unknown: waited out max_wait_s (asyncio may fire a timer up to its clock resolution early)
