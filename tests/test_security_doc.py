"""docs/security.md, the threat model of spladekit's inputs, kept true to the sources: every module that
reads a file is named there, every module it names and every test it cites exists, the README links it,
and no unsafe loader is called anywhere in ``src/`` (the calls are read from the sources with ``ast``, not
by importing them)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "security.md"

#: calls that read a file (or a model folder, a dataset) given from outside: a module calling one is a reader
READERS = {
    "read_json",
    "read_jsonl",
    "read_yaml",
    "iter_lines",
    "open_text",
    "open_binary",
    "read_text",
    "read_bytes",
    "open",
    "load",
    "safe_open",
    "load_file",
    "load_plain_pickle",
    "load_from_disk",
    "load_dataset",
    "from_pretrained",
    "InferenceSession",
    "loads",
    "safe_load",
    "load_irds",
    "memmap",
    "read_tsv",
    "read_corpus",
    "load_beir",
    "read_qrels",
    "read_run",
}


def _called(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and ast.unparse(func.value) == "tl":
                continue  # triton's tl.load reads GPU memory, not a file
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def _modules():
    for path in sorted((SRC / "spladekit").rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_every_reader_module_is_named_in_the_threat_model():
    text = DOC.read_text(encoding="utf-8")
    readers = [
        name
        for name, tree in _modules()
        if _called(tree) & READERS and not name.startswith("spladekit/cli/") or name == "spladekit/cli/export_model.py"
    ]
    assert len(readers) > 40  # the heuristic finds the readers (not an empty set by a typo)
    missing = [name for name in readers if f"`{name}`" not in text]
    assert missing == [], f"reader modules not named in docs/security.md: {missing}"


def test_every_module_the_threat_model_names_exists():
    named = set(re.findall(r"`(spladekit/[\w/]+\.py)`", DOC.read_text(encoding="utf-8")))
    assert len(named) > 40
    assert sorted(name for name in named if not (SRC / name).is_file()) == []


def test_every_test_the_threat_model_cites_exists():
    cited = re.findall(r"`(tests/(?:\w+/)*test_\w+\.py)::(test_\w+)`", DOC.read_text(encoding="utf-8"))
    assert len(cited) > 30
    for file, name in cited:
        source = (ROOT / file).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, flags=re.M), (
            f"{file}::{name} cited in docs/security.md does not exist"
        )


def test_the_readme_links_the_threat_model():
    assert "(docs/security.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def _keyword(call: ast.Call, name: str):
    found = [k.value for k in call.keywords if k.arg == name]
    return found[0] if found else None


def test_no_unsafe_loader_in_the_sources():
    """pickle.load(s) only inside the plain-data unpickler; torch.load always with weights_only=True; no
    yaml.load without a safe loader, no unsafe_load/full_load, no torch.jit.load, no allow_pickle=True;
    trust_remote_code is False or the value the user gave (a name or an attribute passed on), a literal
    True only in spladekit/model/remote_code.py (the loader of a folder the folder reader accepted as
    trusted)."""
    found = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            if func in (
                "pickle.load",
                "pickle.loads",
                "pickle.Unpickler",
                "yaml.unsafe_load",
                "yaml.full_load",
                "torch.jit.load",
                "dill.load",
                "joblib.load",
            ):
                found.append((name, node.lineno, func))
            if func == "torch.load" and ast.unparse(_keyword(node, "weights_only") or ast.Constant(None)) != "True":
                found.append((name, node.lineno, "torch.load without weights_only=True"))
            loader = ast.unparse(_keyword(node, "Loader") or ast.Constant(None))
            if func == "yaml.load" and (
                loader == "None" or loader in ("yaml.Loader", "Loader") or "Unsafe" in loader or "Full" in loader
            ):
                found.append((name, node.lineno, f"yaml.load with Loader={loader}"))
            value = _keyword(node, "allow_pickle")
            if value is not None and ast.unparse(value) != "False":
                found.append((name, node.lineno, f"allow_pickle={ast.unparse(value)}"))
            value = _keyword(node, "trust_remote_code")
            if (
                isinstance(value, ast.Constant)
                and value.value is not False
                and name != "spladekit/model/remote_code.py"
            ):
                found.append((name, node.lineno, f"trust_remote_code={ast.unparse(value)}"))
            elif value is not None and not isinstance(value, (ast.Constant, ast.Name, ast.Attribute)):
                found.append((name, node.lineno, f"trust_remote_code={ast.unparse(value)} (not a value passed on)"))
    assert found == []
