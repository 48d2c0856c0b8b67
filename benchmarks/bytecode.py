"""What the set-up's byte-compile step saves each new process: start-up with the venv's bytecode
against the same start-up compiling every module from source, one run.

Where ``PYTHONDONTWRITEBYTECODE`` is set (our machines set it) Python never writes ``.pyc`` files, so
a venv installed with ``pip --no-compile`` is compiled again by every process that imports torch and
transformers: each server worker, CLI command and test subprocess. The ``Makefile`` now runs
``compileall`` once after installing. Cases, each a fresh interpreter, interleaved ``--repeats`` times:

    ``import torch, transformers``   the two libraries every model path imports;
    ``load the query encoder``       ``SpladeEncoder.from_pretrained`` (splade-tiny of ../shared) and
                                     one query encoded: a server worker's start.

each run twice: *with bytecode* (the venv as set up) and *from source* (the anchor: ``PYTHONPYCACHEPREFIX``
pointed at an empty temporary folder and ``PYTHONDONTWRITEBYTECODE=1``, so no ``.pyc`` is found or
written: what a venv without bytecode costs). Reported: median and minimum wall seconds and the
ratio of the medians (with / from source).

Usage::

    PYTHONPATH=src python benchmarks/bytecode.py [--repeats 5] [--model PATH]

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENCODE = (
    "from spladekit.model.encoder import SpladeEncoder; "
    "SpladeEncoder.from_pretrained({model!r}).encode_queries(['warm up'])"
)


def run_once(code: str, env: dict) -> float:
    """Wall seconds of ``python -c CODE`` in ``env``.

    Raises:
        RuntimeError: the child exited non-zero (its stderr quoted).
    """
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{code} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=str(ROOT.parent / "shared" / "models" / "splade-tiny"))
    options = parser.parse_args()
    cases = {
        "import torch, transformers": "import torch, transformers",
        "load the query encoder": ENCODE.format(model=options.model),
    }
    with tempfile.TemporaryDirectory(prefix="spladekit-no-bytecode-") as empty:
        base = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        envs = {
            "with bytecode": base,
            "from source": dict(base, PYTHONPYCACHEPREFIX=empty, PYTHONDONTWRITEBYTECODE="1"),
        }
        walls = {(case, env): [] for case in cases for env in envs}
        for code in cases.values():  # warm-up: the file cache holds the sources and the bytecode
            for env in envs.values():
                run_once(code, env)
        for _ in range(options.repeats):
            for case, code in cases.items():
                for name, env in envs.items():
                    walls[case, name].append(run_once(code, env))
    load = os.getloadavg()[0]
    print(
        f"Process start-up with and without bytecode, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}, Python "
        f"{platform.python_version()}, {options.repeats} runs per case (interleaved)\n"
    )
    print("| case | from source: median s (min) | with bytecode: median s (min) | ratio |")
    print("|---|---:|---:|---:|")
    for case in cases:
        src, pyc = walls[case, "from source"], walls[case, "with bytecode"]
        print(
            f"| {case} | {statistics.median(src):.2f} ({min(src):.2f}) | {statistics.median(pyc):.2f} ({min(pyc):.2f}) | "
            f"**{statistics.median(pyc) / statistics.median(src):.2f}** |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
