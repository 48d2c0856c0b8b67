"""Start-up time of the command line: ``spladekit --help`` against ``python -c pass``, one run.

Cases, each a fresh interpreter (``sys.executable``), run in turn (interleaved) ``--repeats`` times so
that load from other jobs on a shared machine falls on all alike:

    ``python -c pass``          the anchor: the interpreter's own start-up;
    ``python -c "import typer"`` what the CLI framework costs by itself;
    ``spladekit --help``        ``python -m spladekit --help`` (the console script's code path);
    ``spladekit index --help``  one command's help page;
    ``import torch``            for scale: what ``--help`` used to wait for.

Reported: median and minimum wall seconds, the median's ratio to the anchor's, and the peak resident
memory of each child (``ru_maxrss`` from ``wait4``, MiB, median). The target of issue 36 is ``spladekit --help`` ≤ 1 s on the
2-core CI machine; the script exits 1 when the median is over ``--limit`` (default 1.0 s).

Usage::

    PYTHONPATH=src python benchmarks/cli_startup.py
    PYTHONPATH=src python benchmarks/cli_startup.py --repeats 20 --out startup.json

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

CASES = {
    "python -c pass": ["-c", "pass"],
    'python -c "import typer"': ["-c", "import typer"],
    "spladekit --help": ["-m", "spladekit", "--help"],
    "spladekit index --help": ["-m", "spladekit", "index", "--help"],
    "import torch": ["-c", "import torch"],
}
ANCHOR = "python -c pass"


def run_once(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the child's peak resident memory (MiB, ``ru_maxrss`` from ``wait4``) of
    ``python ARGS``, output discarded.

    Raises:
        RuntimeError: the child exited non-zero (its stderr quoted).
    """
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {child.returncode}: {stderr.decode()[-500:]}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--limit", type=float, default=1.0, help="seconds the median of spladekit --help may take")
    parser.add_argument("--no-torch", action="store_true", help="skip the import torch case")
    parser.add_argument("--out", type=Path, help="also write the results as JSON")
    options = parser.parse_args()
    cases = {k: v for k, v in CASES.items() if not (options.no_torch and k == "import torch")}
    walls: dict[str, list[float]] = {name: [] for name in cases}
    rss: dict[str, list[float]] = {name: [] for name in cases}
    for args in cases.values():  # warm-up: the file cache holds the modules before timing
        run_once(args)
    for _ in range(options.repeats):
        for name, args in cases.items():
            wall, peak = run_once(args)
            walls[name].append(wall)
            rss[name].append(peak)
    anchor = statistics.median(walls[ANCHOR])
    rows = []
    for name in cases:
        median = statistics.median(walls[name])
        rows.append(
            {
                "case": name,
                "median_s": median,
                "min_s": min(walls[name]),
                "ratio": median / anchor,
                "peak_mib": statistics.median(rss[name]),
            }
        )
    print(
        f"CLI start-up, {date.today().isoformat()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {options.repeats} runs per case "
        f"(interleaved)\n"
    )
    print("| case | median s | min s | × python -c pass | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['case']} | {row['median_s']:.3f} | {row['min_s']:.3f} | {row['ratio']:.1f} | {row['peak_mib']:.0f} |"
        )
    if options.out:
        options.out.write_text(json.dumps(rows, indent=2) + "\n")
    help_median = next(r["median_s"] for r in rows if r["case"] == "spladekit --help")
    if help_median > options.limit:
        print(f"\nspladekit --help: median {help_median:.3f} s is over the {options.limit} s limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
