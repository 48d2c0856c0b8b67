"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml): the README as its home page and
the benchmark results as its pages.

The README and the guides in ``docs/`` link each other and ``benchmarks/RESULTS.md`` by their paths in
the repository (``docs/demo.md``, ``../benchmarks/RESULTS.md``), which work where the repository is read
as files. The site publishes the README as ``index.md``, and ``benchmarks/RESULTS.md`` and the dated
logs of ``benchmarks/runs/`` under ``benchmarks/`` with an index of the logs (``run-logs.md``), and
points those links at these pages, so that every link lands on a page of the site and
``mkdocs build --strict`` checks each one, anchors included.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
README_LINKS = [(re.compile(r"\]\(docs/"), "]("), (re.compile(r"\]\(benchmarks/runs/\)"), "](benchmarks/run-logs.md)")]
# GitHub needs ``\|`` for a pipe in code inside a table cell; Python-Markdown's tables take ``|`` there as it is
TABLE_PIPE = re.compile(r"\\\|(?=[^`\n]*`[^\n]*\|\s*$)", re.M)
OUT_OF_DOCS = re.compile(r"\]\(\.\./benchmarks/")  # a guide's link to the results, as the repository reads it
RUNS_FOLDER = re.compile(r"\]\(runs/\)")  # RESULTS.md's link to the folder of its logs
INTO_DOCS = re.compile(r"\]\(\.\./docs/")  # RESULTS.md's link into docs/ (a guide, a plot), as the repository reads it


def _runs_index(runs: list[Path]) -> str:
    lines = ["# Benchmark run logs", "", "The dated logs behind [the current figures](RESULTS.md), newest first.", ""]
    lines += [f"- [{path.stem}](runs/{path.name})" for path in sorted(runs, reverse=True)]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config) -> Files:
    """Add the README as ``index.md``, ``benchmarks/RESULTS.md``, each ``benchmarks/runs/*.md`` and their
    index to the site's files."""
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / "README.md")))
    runs = sorted((BENCHMARKS / "runs").glob("*.md"))
    files.append(File.generated(config, "benchmarks/RESULTS.md", abs_src_path=str(BENCHMARKS / "RESULTS.md")))
    for path in runs:
        log = File.generated(
            config, f"benchmarks/runs/{path.name}", abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV
        )
        files.append(log)
    files.append(File.generated(config, "benchmarks/run-logs.md", content=_runs_index(runs)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Point the README's and the guides' links at the published pages, RESULTS.md's ``runs/`` at its
    index and its ``../docs/`` at the guides' folder (the site's top); the README's escaped pipes in a
    table's code become plain ones."""
    uri = page.file.src_uri
    if uri == "index.md":
        for pattern, replacement in README_LINKS:
            markdown = pattern.sub(replacement, markdown)
        return TABLE_PIPE.sub("|", markdown)
    if uri == "benchmarks/RESULTS.md":
        return INTO_DOCS.sub("](../", RUNS_FOLDER.sub("](run-logs.md)", markdown))
    if uri.startswith("benchmarks/"):
        return markdown
    return OUT_OF_DOCS.sub("](" + "../" * uri.count("/") + "benchmarks/", markdown)
