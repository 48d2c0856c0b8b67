"""The shape of the code under ``src/spladekit``: functions that read at once, docstrings and comments that
state the contract, and a runnable example for each public entry point.

The brief's rules (``Design and style``):

- no function body past 60 lines (the docstring aside: from the first statement after it to the end of
  the last one, blank and comment lines inside included; a nested function counts in its parent's body
  and on its own);
- no date, measurement note or tracker issue number in a docstring or a comment: those go to
  ``benchmarks/RESULTS.md`` and its dated logs under ``benchmarks/runs/`` (a path to such a log is a
  pointer, not a date, and may be named); another project's tracker may be named as ``owner/repo#N`` or
  by its address;
- an ``Example::`` block with ``>>>`` lines in the docstring of each public entry point
  (:data:`ENTRY_POINTS`); every docstring under ``src/`` that holds ``>>>`` lines is run as a doctest
  (the examples build tiny inputs in a temporary folder or load ``splade-tiny`` through the project's
  model lookup, :func:`spladekit.data.resolve.resolve_model`, which finds it in ``../shared``).

Each check reads the sources (``ast``, ``tokenize``) and names ``file:line``.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "spladekit"
MAX_BODY_LINES = 60

# The public entry points (the brief's list): name → the module that defines it.
ENTRY_POINTS = {
    "SpladeEncoder": "spladekit.model.encoder",
    "Index": "spladekit.index.index",
    "evaluate": "spladekit.evaluate.metrics",
    "fuse": "spladekit.index.fusion",
    "diagnose_mlm_head": "spladekit.model.calibrate.diagnose",
    "rescale_mlm_head": "spladekit.model.calibrate.rescale",
    "train": "spladekit.train.trainer",
    "mine": "spladekit.mine.mining",
}


# ------------------------------------------------------------------------------------- function length


def long_functions(path: Path, limit: int = MAX_BODY_LINES) -> list[tuple[str, int, int]]:
    """``(qualified name, line of the def, body lines)`` of each function of ``path`` whose body,
    docstring aside, spans more than ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                body = child.body[1:] if ast.get_docstring(child, clean=False) is not None else child.body
                if body:
                    lines = body[-1].end_lineno - body[0].lineno + 1
                    if lines > limit:
                        found.append((name, child.lineno, lines))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def test_no_function_body_past_the_limit():
    too_long = [
        f"{_relative(path)}:{line} {name}: {lines} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line, lines in long_functions(path)
    ]
    assert not too_long, f"function bodies over {MAX_BODY_LINES} lines (split them by what they do):\n" + "\n".join(
        too_long
    )


def test_the_length_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY_LINES))
    source = (
        f'def fits():\n    """Doc\n\n    string."""\n{body}\n\n'  # the docstring is not counted
        f"class C:\n    def too_long(self):\n        y = 0\n" + body.replace("    ", "        ") + "\n"
        "        def inner():\n            return 1\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    assert [(name, lines) for name, _, lines in long_functions(path)] == [("C.too_long", MAX_BODY_LINES + 3)]


# ------------------------------------------------------------------------------ notes in docs, comments

MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
YEAR = r"(?:19|20)\d\d"
NOTE_PATTERNS: dict[str, list[re.Pattern]] = {
    "a date": [
        re.compile(p)
        for p in (
            rf"\b{YEAR}-[01]\d-[0-3]\d\b",  # ISO
            rf"\b\d{{1,2}} {MONTHS}\.? {YEAR}\b",  # 2 December 2026
            rf"\b{MONTHS}\.? (?:\d{{1,2}}, )?{YEAR}\b",  # December 2026, Dec 2, 2026
        )
    ],
    "an issue number": [
        re.compile(p, re.IGNORECASE)
        for p in (
            r"\b(?:issues?|PR|pull request|ticket)s? ?#?\d+\b",  # issue 35, issues 22, PR #7
            r"#\d+\b",  # #35, project#35 (owner/repo#N and addresses are removed first: they can be followed)
        )
    ],
    "a measurement": [
        re.compile(p, re.IGNORECASE)
        for p in (
            r"\d(?:\.\d+)? ?(?:ms|µs|us|ns)\b",  # a time figure
            r"\d[\d.,]* ?(?:documents|docs|queries|texts|passages|tokens|requests|answers)/s\b",  # a rate
            r"\d(?:\.\d+)? ?[×x] ?(?:faster|slower|scaling|speed-?up)\b",  # a speed-up
            r"\b(?:peak|RSS)\b[^.;]{0,40}?\d(?:\.\d+)? ?[KMGT]i?B\b",  # a memory peak
            r"\d(?:\.\d+)? ?[KMGT]i?B (?:peak|RSS)\b",
            r"\b(?:Xeon|EPYC|vCPU|Ryzen)\b",  # the machine a figure was read on
            r"\bmeasured\b[^.;:]{0,40}?\d",  # "measured here +0.8 GB", "measured on the 2-core ..."
            r"\btook \d",  # "took 0.90 s"
        )
    ],
}
FOLLOWABLE = re.compile(r"https?://\S+|\b[\w.-]+/[\w.-]+#\d+\b")  # an address, owner/repo#N
LOG_PATH = re.compile(r"\bruns/\d{4}-\d\d-\d\d-[\w.-]+\.md\b")  # a dated log's file name: a pointer


def _docstrings_and_comments(source: str):
    """``(line, text)`` of every comment and every string statement (docstrings of modules, classes and
    functions, and the attribute docstrings griffe reads) of ``source``."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def notes(path: Path) -> list[tuple[int, str, str]]:
    """``(line, kind, matched text)`` of each date, issue number or measurement note in the docstrings
    and comments of ``path`` (the line of a docstring's match: its first line plus the newlines before
    the match, exact where the docstring has no escaped newlines)."""
    found = []
    for line, text in _docstrings_and_comments(path.read_text(encoding="utf-8")):
        text = LOG_PATH.sub("runs/LOG.md", FOLLOWABLE.sub("LINK", text))  # same lengths not needed: lines kept
        for kind, patterns in NOTE_PATTERNS.items():
            for pattern in patterns:
                for match in pattern.finditer(text):
                    found.append((line + text.count("\n", 0, match.start()), kind, match.group(0)))
    return sorted(set(found))


def test_no_dates_measurements_or_issue_numbers_in_docstrings_or_comments():
    bad = [
        f"{_relative(path)}:{line}: {kind}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, kind, text in notes(path)
    ]
    assert not bad, (
        "dates, measurements or issue numbers in docstrings or comments (the contract stays; the "
        "figures go to benchmarks/RESULTS.md or a dated log under benchmarks/runs/):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("# measured here +0.8 GB of memory", "a measurement"),
        ('"""Whole calls took 3.87 ms per query."""', "a measurement"),
        ('"""Read on an AMD EPYC."""', "a measurement"),
        ('"""4.2 vs 26 documents/s beside a busy process."""', "a measurement"),
        ("# peak RSS growth 100 MiB", "a measurement"),
        ('"""See issue 22."""', "an issue number"),
        ("# the fix of #35", "an issue number"),
        ('"""eland#827"""', "an issue number"),
        ('"""Rerun on 2 December 2026."""', "a date"),
        ("# rerun on 2026-12-07", "a date"),
        ('"""As of December 2026."""', "a date"),
    ],
)
def test_the_notes_check_finds(tmp_path, text, kind):
    path = tmp_path / "m.py"
    path.write_text(f"x = 1\n{text}\n")
    assert {(line, found_kind) for line, found_kind, _ in notes(path)} == {(2, kind)}


@pytest.mark.parametrize(
    "text",
    [
        '"""The texts measured; n_tokens: tokens kept (at most 1024)."""',  # a count, not a figure read
        '"""Working memory of a write, bytes (1 GiB)."""',  # a default
        '"""huggingface/sentence-transformers#3819: subtract |p|·r."""',  # another tracker, followable
        '"""https://github.com/elastic/eland/issues/827"""',
        '"""The cross-over: ``benchmarks/runs/2026-12-07-index-constants.md``."""',  # a pointer to a log
        '"""Paria et al., ICLR 2020, §3; RFC 6298."""',  # citations
        "# x = 1  # type: ignore[attr-defined]",
        '"""max_wait_s: seconds; 0.5 s by default."""',
    ],
)
def test_the_notes_check_leaves_alone(tmp_path, text):
    path = tmp_path / "m.py"
    path.write_text(f"x = 1\n{text}\n")
    assert notes(path) == []


# ---------------------------------------------------------------------------------------- examples

DOCTEST_LINE = re.compile(r"^\s*>>> ", re.MULTILINE)
EXAMPLE_BLOCK = re.compile(r"^\s*Example\b[^\n]*::\s*$", re.MULTILINE)  # "Example::", "Example (...)::"


def _doctest_modules() -> list[str]:
    """Every module under ``src/`` with a docstring holding ``>>>`` lines."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if ">>>" not in source:
            continue
        tree = ast.parse(source)
        nodes = [tree] + [
            n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        if any(DOCTEST_LINE.search(ast.get_docstring(n, clean=False) or "") for n in nodes):
            parts = path.relative_to(SRC).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _entry_docstring(name: str) -> str:
    return importlib.import_module(ENTRY_POINTS[name]).__dict__[name].__doc__ or ""


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_has_a_runnable_example(name):
    docstring = _entry_docstring(name)
    has_example = EXAMPLE_BLOCK.search(docstring) is not None and DOCTEST_LINE.search(docstring) is not None
    assert has_example, (
        f"{ENTRY_POINTS[name]}.{name}: its docstring needs an ``Example::`` block of ``>>>`` "
        "lines (run by tests/test_code_shape.py)"
    )


@pytest.mark.parametrize("module", _doctest_modules())
def test_docstring_examples_run(module, request, tmp_path, monkeypatch):
    """Every ``>>>`` example of ``module`` (its docstrings and its classes' and functions'), run by
    ``doctest``; temporary folders land in the test's own; splade-tiny from ``../shared``."""
    import tempfile

    source = importlib.util.find_spec(module).origin
    if "splade-tiny" in Path(source).read_text(encoding="utf-8"):
        request.getfixturevalue("splade_tiny")  # skips where ../shared is missing, as the real-data tests do
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    imported = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(imported, module) if t.examples]
    assert tests, f"{module}: no doctest found"
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, (
        f"{module}: {results.failed} of {results.attempted} examples failed:\n{report.getvalue()}"
    )


# --------------------------------------------------------------------------------------------- ruff


def _ruff(*args: str) -> subprocess.CompletedProcess:
    """``ruff ARGS`` over the repository with the configuration of ``pyproject.toml`` (``[tool.ruff]``).

    Raises:
        RuntimeError: ruff is not installed (the ``test`` extra installs it): not an expected failure.
    """
    if importlib.util.find_spec("ruff") is None:
        raise RuntimeError("ruff is not installed: pip install -e '.[test]' (make test does)")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_no_syntax_error_or_undefined_name():
    """The bug classes of ``ruff check``, held now: syntax errors (E9), undefined names (F821-F823), and
    comparisons and statements that cannot be meant (F63, F7)."""
    done = _ruff("check", "--select", "E9,F63,F7,F82", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_check_and_format_are_clean():
    for args in (("check", "--output-format", "concise", "."), ("format", "--check", ".")):
        done = _ruff(*args)
        assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
