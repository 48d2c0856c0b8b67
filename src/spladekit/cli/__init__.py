"""``spladekit`` command line: thin typer commands over the Python API (no logic of their own).

Each submodule registers its commands on :data:`app`.
"""

from spladekit.cli import (
    calibrate,  # noqa: F401  (registers diagnose, rescale)
    core,  # noqa: F401  (registers evaluate, demo)
    evaluate,  # noqa: F401  (registers compare)
    export_model,  # noqa: F401  (registers export-model)
    fuse,  # noqa: F401  (registers fuse)
    index,  # noqa: F401  (registers index, encode, search, export, import)
    inference_free,  # noqa: F401  (registers inference-free)
    mine,  # noqa: F401  (registers mine)
    publish,  # noqa: F401  (registers card, push)
    reproduce,  # noqa: F401  (registers reproduce)
    serve,  # noqa: F401  (registers serve)
    train,  # noqa: F401  (registers train)
)
from spladekit.cli.app import app


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point.

    SIGTERM (``kill``, a job scheduler's stop) is turned into ``SystemExit(143)`` so that ``finally``
    blocks and context managers run: the temporary folders of atomic writes and an import's scratch
    rows beside ``--out`` are removed instead of left behind (Python's default SIGTERM action ends the
    process without unwinding). ``serve`` installs uvicorn's own handlers over it.
    """
    import signal
    import warnings

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    warnings.formatwarning = _format_warning
    app()


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning on the command line: ``warning: <message>`` (the library's source line that
    raised it, Python's default, tells a user nothing; the message names the file or field)."""
    return f"warning: {message}\n"


__all__ = ["app", "main"]
