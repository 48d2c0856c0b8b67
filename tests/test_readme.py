"""The README's shell blocks run as a user would run them, and the documentation's links resolve.

The rule (stated at the end of the README): every fenced ``bash`` block of ``README.md`` carries,
on the line before it, one HTML comment:

    <!-- readme-test: run -->              this test runs the block
    <!-- readme-test: skip: REASON -->     it does not, and REASON says why (minutes of work, a GPU,
                                           a server left running, a network service)

The ``run`` blocks run in the order of the page, each by ``bash -euo pipefail``, all in one fresh
temporary folder (a later block may use what an earlier one wrote), with ``../shared`` a link to the
project's shared data and ``spladekit`` on ``PATH`` as this checkout's command line (``PYTHONPATH=src``),
offline (``HF_HUB_OFFLINE=1``). A block that fails, or runs past ``BLOCK_TIMEOUT_S``, fails the test with
its output. The links of the README, ``docs/*.md``, ``benchmarks/RESULTS.md`` and the run logs under
``benchmarks/runs/`` are checked too: a relative link names an existing file, and a ``#fragment`` names
a heading of the file it points to (GitHub's slug rule). Every ``RESULTS.md#…`` anywhere in the
repository, and every section of that page named in prose after its name, names one of its headings; the
page opens with a summary table whose rows carry a date and link each of its sections.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import shared_dir

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# A run block is meant to take seconds (the rule above); the limit leaves room for a loaded 2-core CI
# machine, where loading torch and splade-tiny alone takes 5-15 s.
BLOCK_TIMEOUT_S = 180

MARKER = re.compile(r"^<!--\s*readme-test:\s*(run|skip)\s*(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
SHELL_LANGS = {"bash", "sh", "shell", "console"}


def readme_blocks(text: str) -> list[dict]:
    """Every fenced block of a Markdown text: ``{"line", "lang", "code", "marker", "reason"}``.

    ``line`` is the 1-based line of the opening fence; ``marker`` is ``"run"``, ``"skip"`` or None
    (no marker comment on the line before the fence).
    """
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise AssertionError(f"README.md line {start + 1}: fenced block never closed")
        marker = reason = None
        if start > 0 and (mm := MARKER.match(lines[start - 1].strip())):
            marker, reason = mm.group(1), mm.group(2)
        blocks.append(
            {
                "line": start + 1,
                "lang": lang,
                "code": "\n".join(lines[start + 1 : j]) + "\n",
                "marker": marker,
                "reason": reason,
            }
        )
        i = j + 1
    return blocks


def shell_blocks() -> list[dict]:
    return [b for b in readme_blocks(README.read_text(encoding="utf-8")) if b["lang"] in SHELL_LANGS]


def test_every_shell_block_is_marked_run_or_skip_with_a_reason():
    blocks = shell_blocks()
    assert blocks, "README.md has no shell block"
    problems = [
        f"README.md line {b['line']}: no `<!-- readme-test: run -->` or `<!-- readme-test: skip: "
        f"REASON -->` on the line before this ```{b['lang']} block"
        for b in blocks
        if b["marker"] is None
    ]
    problems += [
        f"README.md line {b['line']}: a skip marker without its reason"
        for b in blocks
        if b["marker"] == "skip" and not b["reason"]
    ]
    assert not problems, "\n".join(problems)
    # The opening promise of the page: the two commands come first.
    first = blocks[0]
    assert first["code"].split()[:2] == ["make", "demo"] and "make test" in first["code"], first["code"]
    assert any(b["marker"] == "run" for b in blocks), "no README block is run by this test"
    # A marker must sit right before a fence: one elsewhere is a mistake that would silently skip nothing.
    lines = README.read_text(encoding="utf-8").splitlines()
    stray = [
        n + 1
        for n, line in enumerate(lines)
        if MARKER.match(line.strip()) and not (n + 1 < len(lines) and FENCE.match(lines[n + 1]))
    ]
    assert not stray, f"README.md lines {stray}: a readme-test marker not followed by a fenced block"


def test_readme_run_blocks(tmp_path):
    shared = shared_dir()
    if shared is None:
        pytest.skip("../shared (or $SPLADEKIT_SHARED) is not present: the README's commands use its model and data")
    blocks = [b for b in shell_blocks() if b["marker"] == "run"]
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "spladekit"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m spladekit "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        SPLADEKIT_SHARED=str(shared.resolve()),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        SPLADEKIT_CACHE=str(tmp_path / "cache"),
        NO_COLOR="1",
        COLUMNS="100",
    )
    report, not_run = [], []
    for b in blocks:
        missing = [tool for tool in ("curl",) if re.search(rf"\b{tool}\b", b["code"]) and shutil.which(tool) is None]
        if missing:  # said at the end (the test is then reported as skipped, with the blocks that did run)
            not_run.append(f"line {b['line']} ({', '.join(missing)} not installed)")
            continue
        started = time.monotonic()
        # Its own process group, so that a block's background process (a server) is ended with it.
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", b["code"]],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(
                f"README.md block at line {b['line']} ran past {BLOCK_TIMEOUT_S} s:\n{b['code']}\n"
                f"--- output ---\n{out[-4000:]}{err[-4000:]}"
            )
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # anything the block left running (its group only)
            except ProcessLookupError:
                pass
        seconds = time.monotonic() - started
        report.append(f"line {b['line']}: {seconds:.1f} s")
        assert proc.returncode == 0, (
            f"README.md block at line {b['line']} failed (exit {proc.returncode}):\n{b['code']}\n"
            f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"
        )
    started = time.monotonic()
    _run_python_snippet(work, env, tmp_path)
    report.append(f"the Python snippet: {time.monotonic() - started:.1f} s")
    ignored = _ignored_by_git([entry.name + ("/" if entry.is_dir() else "") for entry in work.iterdir()])
    if ignored is not None:  # a checkout (git present): what the blocks wrote, written in it, would stay untracked
        assert all(ignored.values()), f"written by the README's blocks but not ignored by git: {ignored}"
    print("README blocks run:", "; ".join(report))
    if not_run:
        pytest.skip(f"README blocks run: {'; '.join(report)}; not run: {'; '.join(not_run)}")


def python_snippet() -> str:
    """The README's one ``python`` block that runs spladekit alone (the one calling ``load_beir``; the
    harness block needs PyTerrier's topic frames and the hub)."""
    blocks = [
        b
        for b in readme_blocks(README.read_text(encoding="utf-8"))
        if b["lang"] == "python" and "load_beir(" in b["code"]
    ]
    assert len(blocks) == 1, [b["line"] for b in blocks]
    return blocks[0]["code"]


def _run_python_snippet(work: Path, env: dict, scratch: Path) -> None:
    """The README's Python snippet run as a script in ``work`` on the ``mydata`` collection the shell blocks
    wrote (instead of SciFact: minutes of encoding); the line it prints equals, at its 4 decimals, what
    ``spladekit evaluate`` gives for the run that ``spladekit search`` wrote of the same model and documents."""
    code = python_snippet()
    assert code.count('load_beir("scifact"') == 1, code
    script = scratch / "snippet.py"
    script.write_text(code.replace('load_beir("scifact"', 'load_beir("mydata"'), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )
    assert done.returncode == 0, f"the README's Python snippet failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    printed = re.fullmatch(
        r"nDCG@10 (\d\.\d{4})  MRR@10 (\d\.\d{4})  R@1000 (\d\.\d{4})", done.stdout.strip().splitlines()[-1]
    )
    assert printed, f"the snippet's last line is not its result: {done.stdout[-2000:]!r}"
    measures = ["nDCG@10", "MRR@10", "R@1000"]
    cli = subprocess.run(
        [
            "spladekit",
            "evaluate",
            "--run",
            "mydata.trec",
            "--qrels",
            "mydata/qrels/test.tsv",
            *[a for m in measures for a in ("-m", m)],
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert list(printed.groups()) == [f"{expected[m]:.4f}" for m in measures], (printed.group(0), expected)


def _ignored_by_git(paths: list[str]) -> dict[str, bool] | None:
    """``{path: ignored}`` by this checkout's ``.gitignore`` (``git check-ignore --no-index``; paths relative
    to the checkout, a folder ending with ``/``), or None without git or outside a checkout."""
    if (
        shutil.which("git") is None
        or subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode
    ):
        return None
    return {
        path: subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", "--", path]).returncode == 0
        for path in paths
    }


def test_the_python_snippet_ends_by_printing_its_result():
    """Run as a script, a bare expression at the end prints nothing (the interpreter's echo is interactive only)."""
    import ast

    last = ast.parse(python_snippet()).body[-1]
    assert (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and getattr(last.value.func, "id", None) == "print"
    ), ast.unparse(last)


def test_the_readmes_outputs_are_ignored_by_git():
    """Every ``--out`` of the README's shell blocks (the skipped ones too) and the snippet's index folder lie
    where git ignores them (under outputs/, or the mydata files), so that following the README in the
    checkout leaves nothing untracked."""
    outs = [m.group(1) for b in shell_blocks() for m in re.finditer(r"--out[ =](\S+)", b["code"])]
    outs += re.findall(r"Index\.build\([^)]*?\"([^\"]+)\"", python_snippet())
    assert len(outs) >= 8, outs
    ignored = _ignored_by_git(outs)
    if ignored is None:
        pytest.skip("git or the checkout's .git is not here: .gitignore cannot be asked")
    assert all(ignored.values()), {path: flag for path, flag in ignored.items() if not flag}


# ---- every spladekit command line of the README names a command and options that exist ----------------


def spladekit_calls(code: str) -> list[tuple[str, list[str]]]:
    """``(command, [--options])`` of each ``spladekit COMMAND ...`` call in a shell block.

    Continuation lines are joined, comments (`` #`` to the end of a line) dropped, and a line is cut at
    ``&&``, ``;``, ``|`` and ``&``; ``torchrun ... -m spladekit`` counts as a call too.
    """
    code = re.sub(r"\\\n", " ", code)
    calls = []
    for line in code.splitlines():
        line = re.split(r"\s#", " " + line, maxsplit=1)[0]
        for part in re.split(r"&&|;|\||&", line):
            words = part.split()
            for k, w in enumerate(words):
                if w == "spladekit" and k + 1 < len(words) and not words[k + 1].startswith("-"):
                    calls.append((words[k + 1], [o.split("=")[0] for o in words[k + 2 :] if o.startswith("--")]))
                    break
    return calls


def test_readme_command_lines_name_real_commands_and_options():
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        COLUMNS="400",
        NO_COLOR="1",
        TERM="dumb",
    )
    helps: dict[str, str] = {}
    problems = []
    for b in shell_blocks():
        for command, options in spladekit_calls(b["code"]):
            if command not in helps:
                done = subprocess.run(
                    [sys.executable, "-m", "spladekit", command, "--help"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                helps[command] = done.stdout if done.returncode == 0 else ""
            if not helps[command]:
                problems.append(f"README.md line {b['line']}: `spladekit {command}` is not a command")
                continue
            problems += [
                f"README.md line {b['line']}: `spladekit {command}` has no option {o}"
                for o in options
                if not re.search(re.escape(o) + r"(?![\w-])", helps[command])
            ]
    assert helps, "no spladekit command line in the README"
    assert not problems, "\n".join(problems)


def test_spladekit_calls_parser():
    code = "spladekit index --model m --data d --out o   # --backend x\nA=1 spladekit search --index i \\\n  --k=10 && spladekit evaluate --run r\n"
    assert spladekit_calls(code) == [
        ("index", ["--model", "--data", "--out"]),
        ("search", ["--index", "--k"]),
        ("evaluate", ["--run"]),
    ]


# ---- links of the documentation pages ---------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters of any script, digits, _
    return text.replace(" ", "-")


def headings(path: Path) -> list[tuple[int, str, str]]:
    """``(level, text, anchor)`` of each heading outside fenced blocks; a repeated slug gets ``-1``, ``-2``..."""
    seen: dict[str, int] = {}
    found, in_fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        m = None if in_fence else HEADING.match(line)
        if m:
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.append((len(m.group(1)), m.group(2), slug if n == 0 else f"{slug}-{n}"))
    return found


def anchors(path: Path) -> set[str]:
    return {anchor for _, _, anchor in headings(path)}


def doc_pages() -> list[Path]:
    pages = [README, ROOT / "benchmarks" / "RESULTS.md"]
    pages += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "benchmarks" / "runs").glob("*.md"))
    return [p for p in pages if p.exists()]


def test_documentation_links_resolve():
    problems = []
    for page in doc_pages():
        in_fence = False
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                in_fence = not in_fence
            if in_fence:
                continue
            for target in LINK.findall(line):
                problem = link_problem(page, target)
                if problem:
                    problems.append(f"{page.relative_to(ROOT)}:{n}: ({target}) {problem}")
    assert not problems, "\n".join(problems)


def link_problem(page: Path, target: str) -> str | None:
    """Why a relative link of ``page`` does not resolve (no such file; no such heading), or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
        return None
    file_part, _, fragment = target.partition("#")
    dest = (page.parent / file_part).resolve() if file_part else page
    if not dest.exists():
        return "names no file"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"no heading '#{fragment}' in {dest.relative_to(ROOT)}"
    return None


def test_github_slug_rule():
    # GitHub's rule applied by hand: lower case, punctuation other than - and _ dropped, spaces to hyphens.
    assert github_slug("`spladekit serve` (`benchmarks/serve.py`)") == "spladekit-serve-benchmarksservepy"
    assert github_slug("The head's product against one core's peak") == "the-heads-product-against-one-cores-peak"
    assert (
        github_slug("Retrieval: exact search against PISA, BMP and Seismic")
        == "retrieval-exact-search-against-pisa-bmp-and-seismic"
    )


# ---- the results page: every reference into it resolves, its summary links every section --------------

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
# A link into the page, in any text file: ``RESULTS.md#…``.
RESULTS_ANCHOR = re.compile(r"RESULTS\.md#([\w-]+)")
# A section named in prose: the page's name, then a comma or an opening bracket, then the name in double or
# single quotes or double backticks (the examples in test_results_references_parser).
RESULTS_NAMED = re.compile(r"RESULTS(?:\.md)?`{0,2}(?:,\s*|\s+\()(?:\"|'|``)([^\"'`]+)(?:\"|'|``)")
TEXT_SUFFIXES = {".md", ".py", ".sh", ".toml", ".txt", ".cfg", ".yml", ".yaml", ".rst", ".ini"}
SKIPPED_DIRS = {"__pycache__", "node_modules", "build", "dist"}
SUMMARY_HEADING = "Summary"
# A short heading: one line of the rendered page, an anchor a reader can type.
MAX_HEADING_CHARS = 100


def repo_text_files() -> list[Path]:
    """The repository's text files (README, docs, sources, tests, benchmarks, scripts), hidden folders skipped."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")
        )
        found += [Path(folder) / f for f in sorted(files) if Path(f).suffix in TEXT_SUFFIXES or f == "Makefile"]
    return found


def plain_heading(text: str) -> str:
    """A heading or a section's name as prose quotes it: no backticks, one space between words, lower case."""
    return " ".join(text.replace("`", "").split()).lower()


def results_references(text: str) -> tuple[list[str], list[str]]:
    """The anchors of ``RESULTS.md#…`` links in ``text`` and the section names quoted after the page's name."""
    return RESULTS_ANCHOR.findall(text), [" ".join(n.split()) for n in RESULTS_NAMED.findall(text)]


def test_results_references_parser():
    page = "RESULTS" + ".md"
    text = (
        f'see [the page](../benchmarks/{page}#int8-onnx-exports) and ``benchmarks/{page}``, "Seismic by\n'
        f'shards"; `benchmarks/{page}` ("The 8.8M row"), ``{page}`` (``spladekit serve``), {page}, \'int8\'. '
        f"Not a name: {page} (lines 1-97), [{page}]({page})."
    )
    assert results_references(text) == (
        ["int8-onnx-exports"],
        ["Seismic by shards", "The 8.8M row", "spladekit serve", "int8"],
    )


def test_every_reference_into_the_results_page_resolves():
    """Each ``RESULTS.md#…`` anywhere in the repository names a heading of the page (GitHub's slug rule);
    each section named in prose after the page's name (see ``RESULTS_NAMED``) begins one of its headings."""
    page_anchors = anchors(RESULTS)
    page_headings = [plain_heading(text) for _, text, _ in headings(RESULTS)]
    problems, seen = [], 0
    for path in repo_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        if "RESULTS" not in text:
            continue
        found, named = results_references(text)
        seen += len(found) + len(named)
        where = path.relative_to(ROOT)
        problems += [f"{where}: no heading '#{a}' in benchmarks/RESULTS.md" for a in found if a not in page_anchors]
        problems += [
            f'{where}: no heading of benchmarks/RESULTS.md begins with "{n}"'
            for n in named
            if not any(h.startswith(plain_heading(n)) for h in page_headings)
        ]
    assert seen, "no reference into benchmarks/RESULTS.md found: the scan is broken"
    assert not problems, "\n".join(problems)


def summary_rows() -> list[str]:
    """The data rows of the table under the page's ``## Summary`` heading."""
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    if f"## {SUMMARY_HEADING}" not in lines:
        return []
    start = lines.index(f"## {SUMMARY_HEADING}")
    rows, table_started = [], False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            table_started = True
            rows.append(line)
        elif table_started or line.startswith("#"):
            break
    return rows[2:]  # header and |---| lines dropped


def test_results_page_summary_links_each_section():
    """One screen first: a summary row per benchmark, with a date and links that resolve; every section of the
    page linked from a row; headings short."""
    rows = summary_rows()
    assert rows, "benchmarks/RESULTS.md has no summary table under '## Summary'"
    problems, linked = [], set()
    for row in rows:
        targets = LINK.findall(row)
        if not targets:
            problems.append(f"summary row links nothing: {row[:80]}")
        if not re.search(r"\|\s*\d{4}-\d{2}-\d{2}\s*\|", row):
            problems.append(f"summary row has no date cell (YYYY-MM-DD): {row[:80]}")
        for target in targets:
            problem = link_problem(RESULTS, target)
            if problem:
                problems.append(f"summary row link ({target}) {problem}")
            elif target.startswith("#"):
                linked.add(target[1:])
    for level, text, anchor in headings(RESULTS):
        if len(text) > MAX_HEADING_CHARS:
            problems.append(f"heading of {len(text)} characters (at most {MAX_HEADING_CHARS}): {text[:60]}...")
        if level == 2 and text != SUMMARY_HEADING and anchor not in linked:
            problems.append(f"section '{text}' has no summary row linking '#{anchor}'")
    assert not problems, "\n".join(problems)
