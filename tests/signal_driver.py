"""Run the ``spladekit`` command line with a signal sent to its main thread at a chosen point.

    python signal_driver.py MODULE:QUALNAME N {before,after} [SIGNAL] -- ARGS...

The function or method ``QUALNAME`` of ``MODULE`` is wrapped: on its ``N``-th call (counted over
every thread) ``SIGNAL`` (``SIGTERM`` by default; ``SIGKILL`` ends the process on the spot) goes to
the process's main thread (``signal.pthread_kill``) before or after the real call, as ``kill`` does
from outside, but at a point of the run chosen exactly instead of by a clock. Called on another thread (a worker of :mod:`spladekit.model.cpu_pool`), the wrapper keeps that
thread busy in the real call for :data:`BUSY` seconds after signalling, so the main thread unwinds and
exits while the worker is still inside torch operations. Then ``spladekit.cli.main()`` runs with ARGS.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import time

BUSY = 2.0


def _wrap(owner, name: str, nth: int, when: str, signum: int) -> None:
    original = getattr(owner, name)
    calls = [0]
    lock = threading.Lock()
    main = threading.main_thread().ident

    def wrapper(*args, **kwargs):
        with lock:
            calls[0] += 1
            fire = calls[0] == nth
        if not fire:
            return original(*args, **kwargs)
        if when == "after":
            result = original(*args, **kwargs)
            signal.pthread_kill(main, signum)
            return result
        signal.pthread_kill(main, signum)
        if threading.get_ident() == main:
            return original(*args, **kwargs)  # not reached: the handler's SystemExit comes first
        until = time.monotonic() + BUSY
        result = original(*args, **kwargs)
        while time.monotonic() < until:
            original(*args, **kwargs)
        return result

    setattr(owner, name, wrapper)


def main(argv: list[str]) -> None:
    cut = argv.index("--")
    target, nth, when, *signal_name = argv[:cut]
    assert when in ("before", "after") and len(signal_name) <= 1, argv
    module, qualname = target.split(":")
    owner = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    _wrap(owner, name, int(nth), when, getattr(signal, signal_name[0] if signal_name else "SIGTERM"))
    sys.argv = ["spladekit", *argv[cut + 1 :]]
    from spladekit.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
