"""Time to the first output line and the longest silence of a command, as a user at a terminal sees them.

The command runs under a pseudo-terminal (:func:`pty.openpty`, 80 columns), so progress bars draw as they do for a
user (tqdm redraws with ``\\r``); every chunk the command writes is time-stamped when read. Reported per
command:

- ``first_output_s``: seconds from the start to the first visible character;
- ``longest_silence_s``: the longest time between two consecutive writes (the start counts as a write,
  so the time to the first output is one of the silences), and what was printed just before it;
- ``wall_s`` and the exit code; the machine's load average before and after.

The target of the first-hour work: no command silent for more than ``--limit`` seconds (default 10) on an
idle machine; the script exits 1 when one is. On a loaded machine every silence stretches with the load,
so the load is printed beside each row and a row over the limit there says little about an idle machine.

Usage::

    PYTHONPATH=src python benchmarks/first_output.py --name diagnose -- \\
        spladekit diagnose ../shared/models/splade-tiny --data scifact --out /tmp/diag
    PYTHONPATH=src python benchmarks/first_output.py --json out.json --name train -- spladekit train configs/demo.yaml --out /tmp/run

Prints one markdown row per command (``--name`` and the command after ``--``; several ``--name`` /
command pairs are not supported: run the script once per command).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time


def watch(command: list[str]) -> dict:
    """Run ``command`` under a pseudo-terminal; return its writes' timing (see the module docstring)."""
    parent, child = pty.openpty()
    # a new pseudo-terminal is 0 columns wide, and tqdm then draws empty bars: give it a user's 80 x 24
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.monotonic()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    last, first, longest, before, tail = start, None, 0.0, "", ""
    while True:
        ready, _, _ = select.select([parent], [], [], 0.5)
        if not ready:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(parent, 65536).decode("utf-8", "replace")
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        now = time.monotonic()
        if first is None and chunk.strip():
            first = now - start
        if now - last > longest:
            longest, before = now - last, tail
        last = now
        tail = (tail + chunk)[-160:]
    code = process.wait()
    end = time.monotonic()
    if end - last > longest:  # a silence before the exit counts too
        longest, before = end - last, tail
    os.close(parent)
    return {
        "command": command,
        "exit_code": code,
        "wall_s": round(end - start, 2),
        "first_output_s": None if first is None else round(first, 2),
        "longest_silence_s": round(longest, 2),
        "printed_before_it": last_line(before),
    }


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (``\r`` ends a line, as a terminal draws it), escapes removed."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    lines = [line.strip() for line in text.replace("\r", "\n").split("\n") if line.strip()]
    return lines[-1][-100:] if lines else "(the start)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--limit", type=float, default=10.0, help="seconds of silence allowed (default 10)")
    parser.add_argument("--json", help="append the record to this JSON-lines file")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    load_before = os.getloadavg()
    record = watch(command)
    record.update(
        name=args.name,
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in os.getloadavg()],
        cores=os.cpu_count(),
        python=platform.python_version(),
        limit_s=args.limit,
    )
    print(
        "| command | exit | wall s | first output s | longest silence s | printed before it | load 1-min before/after |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.name} | {record['exit_code']} | {record['wall_s']} | {record['first_output_s']} | "
        f"{record['longest_silence_s']} | `{record['printed_before_it']}` | "
        f"{record['load_before'][0]} / {record['load_after'][0]} |"
    )
    if args.json:
        with open(args.json, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    return 1 if record["longest_silence_s"] > args.limit or record["exit_code"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
