"""``spladekit`` command line: thin typer commands over the Python API (no logic of their own).

Each submodule registers its commands on :data:`app`.
"""

from spladekit.cli.app import app
from spladekit.cli import core  # noqa: F401  (registers evaluate, demo)
from spladekit.cli import calibrate  # noqa: F401  (registers diagnose, rescale)
from spladekit.cli import evaluate  # noqa: F401  (registers compare)
from spladekit.cli import index  # noqa: F401  (registers index, encode, search, export, import)
from spladekit.cli import train  # noqa: F401  (registers train)
from spladekit.cli import reproduce  # noqa: F401  (registers reproduce)
from spladekit.cli import fuse  # noqa: F401  (registers fuse)
from spladekit.cli import export_model  # noqa: F401  (registers export-model)
from spladekit.cli import inference_free  # noqa: F401  (registers inference-free)
from spladekit.cli import serve  # noqa: F401  (registers serve)
from spladekit.cli import publish  # noqa: F401  (registers card, push)
from spladekit.cli import mine  # noqa: F401  (registers mine)


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
