"""Every command that needs an optional extra refuses before any work when it is missing: one line naming
the package and the install line, before the model's files or the data are opened, timed against the
import of torch that a model load starts with.

The extra is made missing by the real import machinery, not a mock of spladekit: a ``sitecustomize``
on ``PYTHONPATH`` sets ``sys.modules[NAME] = None`` for each blocked module, so that ``import NAME``
raises ``ModuleNotFoundError`` and ``importlib.util.find_spec(NAME)`` is None, as when the package is not
installed. The same ``sitecustomize`` installs an audit hook (``sys.addaudithook``, event ``open``) that
records every file opened under the model and data folders, and reports at exit whether torch was
imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = textwrap.dedent(
    """
    import atexit, json, os, sys

    for _name in filter(None, os.environ["BLOCK_MODULES"].split(",")):
        sys.modules[_name] = None  # as if not installed
    _watched = tuple(os.path.realpath(p) + os.sep for p in os.environ["WATCH_PATHS"].split(os.pathsep))
    _opened = []

    def _hook(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path.startswith(_watched):
                _opened.append(path)

    def _report():
        with open(os.environ["REPORT_FILE"], "w") as handle:
            json.dump({"opened": _opened, "torch": "torch" in sys.modules}, handle)

    sys.addaudithook(_hook)
    atexit.register(_report)
    """
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny model folder and a BEIR folder, whose files must stay unopened."""
    from tests.train_helpers import make_tiny_model

    root = tmp_path_factory.mktemp("extras")
    model = make_tiny_model(root / "model")
    data = root / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "w1 w2"}) + "\n")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "w1"}) + "\n")
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (root / "block").mkdir()
    (root / "block" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"root": root, "model": model, "data": data}


def _run(folders, blocked: str, args: list[str], name: str) -> tuple[subprocess.CompletedProcess, dict, float]:
    root = folders["root"]
    report = root / f"{name}.json"
    env = dict(
        os.environ,
        BLOCK_MODULES=blocked,
        WATCH_PATHS=os.pathsep.join([str(folders["model"]), str(folders["data"])]),
        REPORT_FILE=str(report),
        PYTHONPATH=os.pathsep.join([str(root / "block"), str(ROOT / "src")]),
        NO_COLOR="1",
        HF_HUB_OFFLINE="1",
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "spladekit", *args], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    return done, json.loads(report.read_text()), time.perf_counter() - started


def _torch_import_seconds() -> float:
    """A fresh interpreter importing torch (the first step of every model load), the faster of two runs."""
    times = []
    for _ in range(2):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=300)
        times.append(time.perf_counter() - started)
    return min(times)


# (case id, blocked modules, the extra of the install line, what the line names, the command's arguments)
CASES = [
    ("export-model onnx", "onnx", "onnx", "ONNX export", ["export-model", "--model", "{model}", "--out", "out/onnx"]),
    (
        "export-model onnxruntime",
        "onnxruntime",
        "onnx",
        "needs onnxruntime",
        ["export-model", "--model", "{model}", "--out", "out/onnx2"],
    ),
    (
        "export-model fastembed",
        "onnx",
        "onnx",
        "fastembed export",
        ["export-model", "--model", "{model}", "--out", "out/fe", "--format", "fastembed"],
    ),
    (
        "export-model anserini",
        "onnx",
        "onnx",
        "anserini export",
        ["export-model", "--model", "{model}", "--out", "out/an", "--format", "anserini"],
    ),
    (
        "evaluate irds",
        "ir_datasets",
        "irds",
        "irds:beir/scifact/test needs ir_datasets",
        ["evaluate", "--model", "{model}", "--data", "irds:beir/scifact/test", "--out", "out/eval"],
    ),
    (
        "index irds",
        "ir_datasets",
        "irds",
        "irds:beir/scifact needs ir_datasets",
        ["index", "--model", "{model}", "--data", "irds:beir/scifact", "--out", "out/index"],
    ),
    (
        "demo irds",
        "ir_datasets",
        "irds",
        "irds:beir/scifact needs ir_datasets",
        ["demo", "--model", "{model}", "--data", "irds:beir/scifact", "--no-train", "--out", "out/demo"],
    ),
    (
        "mine datasets",
        "datasets",
        "mine",
        "spladekit mine needs datasets",
        ["mine", "--data", "{data}", "--out", "out/mine", "--model", "{model}", "--candidates", "model"],
    ),
    (
        "mine teacher",
        "sentence_transformers",
        "mine",
        "with a --teacher needs sentence-transformers",
        ["mine", "--data", "{data}", "--out", "out/mine2", "--teacher", "{model}"],
    ),
    (
        "search seismic",
        "seismic",
        "seismic",
        "Seismic search needs pyseismic-lsr",
        [
            "search",
            "--index",
            "{data}",
            "--data",
            "{data}",
            "--split",
            "train",
            "--out",
            "out/run.trec",
            "--backend",
            "seismic",
        ],
    ),
]


def test_a_missing_extra_is_refused_before_the_model_or_data_is_opened(folders):
    results = {}
    for case, blocked, extra, names, args in CASES:
        args = [a.format(model=folders["model"], data=folders["data"]) for a in args]
        done, report, seconds = _run(folders, blocked, args, re.sub(r"\W", "_", case))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (case, done.stdout, done.stderr)
        assert names in lines[0] and "which is not installed" in lines[0] and f"[{extra}]'" in lines[0], (case, lines)
        assert report["opened"] == [], (case, report["opened"])  # no file of the model or the data was read
        assert not (folders["root"] / args[args.index("--out") + 1]).exists(), case
        results[case] = (seconds, report["torch"])
    import_seconds = _torch_import_seconds()
    for case, (seconds, torch_imported) in results.items():
        if not torch_imported:  # said before torch loads: faster than importing it
            assert seconds < import_seconds, (case, seconds, import_seconds, results)
    # export-model, evaluate, index, demo and mine refuse before torch (search checks after opening its index modules)
    assert [case for case, (_, torch_imported) in results.items() if torch_imported] in ([], ["search seismic"]), (
        results
    )
    print(
        "refusal seconds:",
        {case: round(s, 2) for case, (s, _) in results.items()},
        f"import torch: {import_seconds:.2f} s",
    )


def test_the_extras_table_names_the_packages_of_pyproject():
    """:data:`spladekit.errors.EXTRA_MODULES` names, for each extra, packages that pyproject.toml's extra installs."""
    from spladekit.errors import EXTRA_MODULES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        assert extra in extras, extra
        declared = {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower() for requirement in extras[extra]}
        assert {package.lower() for package in modules.values()} <= declared, (extra, modules, declared)


def test_check_extra_finds_an_installed_module_and_refuses_a_missing_one(monkeypatch):
    from spladekit.errors import MissingExtraError, check_extra

    pytest.importorskip("onnx")
    check_extra("onnx", "ONNX export", ("onnx",))  # installed: nothing raised
    monkeypatch.setitem(sys.modules, "onnx", None)  # the import system's own "not installed" mark
    with pytest.raises(
        MissingExtraError, match=r"ONNX export needs onnx, which is not installed: pip install .*\[onnx\]"
    ):
        check_extra("onnx", "ONNX export")
    monkeypatch.delitem(sys.modules, "google.protobuf", raising=False)  # a dotted module whose parent is missing
    monkeypatch.setitem(sys.modules, "google", None)
    with pytest.raises(MissingExtraError, match="needs protobuf"):
        check_extra("ciff", "CIFF export")
