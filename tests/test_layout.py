"""The layout of ``src/spladekit``: no import circle, no stage importing a later stage (the length of functions:
``tests/test_code_shape.py``).

The brief's rules (``Design and style``): data flows one way, text → tokens → hidden states → head
logits → sparse vectors → index → run → metrics; one module per stage, no module importing a later
stage, no import circles (also through imports inside functions). The imports are read from the
sources (``ast``), not by importing them, so an import inside a function counts as much as one at
the top of a module; ``importlib.import_module("spladekit....")`` with a literal name counts too.

How an import becomes an edge of the graph (nodes: modules; a package is its ``__init__``):

- ``import a.b.c`` → ``a.b.c``;
- ``from a.b import x`` → ``a.b`` (the names of ``a.b``'s ``__init__`` are read, its re-exports
  included), and also ``a.b.x`` when that is a module: ``from spladekit.model import triton_head``
  depends on ``spladekit.model``'s ``__init__`` and what it imports; ``import spladekit.model.triton_head``
  only on the module;
- a package's lazy re-exports (the ``_EXPORTS`` table its ``__getattr__`` imports from, PEP 562)
  are edges of that package: they are imports, run on first use;
- the parent packages that Python runs before any submodule (``import a.b.c`` runs ``a`` and
  ``a.b`` first) are *not* edges: counted, every package would be in a circle with each of its
  submodules that imports a sibling. That is why a package ``__init__`` here stays light: it
  re-exports lazily (``spladekit``, ``spladekit.evaluate``) or only its own stage's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "spladekit"

# Stages in the order the data flows (the brief: text → tokens → hidden states → head logits → sparse
# vectors → index → run → metrics), then what consumes them. A module may import its own stage and
# earlier ones, never a later one. The longest matching prefix names a module's stage.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    # cross-cutting helpers every stage shares (errors, atomic folders and JSON, settings records,
    # the distributed set-up, PNG plots, the version): no stage of their own, below all
    (
        "foundation",
        (
            "spladekit.errors",
            "spladekit.io",
            "spladekit.settings",
            "spladekit.overrides",
            "spladekit.distributed",
            "spladekit.plots",
            "spladekit.version",
        ),
    ),
    ("data", ("spladekit.data",)),  # text in: corpora, queries, qrels, runs on disk
    ("model", ("spladekit.model",)),  # tokens → hidden states → head logits → sparse vectors
    ("index", ("spladekit.index",)),  # sparse vectors → index → run
    ("evaluate", ("spladekit.evaluate",)),  # run → metrics
    # a saved model's card and its upload: read the folder's and the run's records (files only); every
    # stage that saves a model (train, the CLI's inference-free, rescale and export-model) calls it
    ("publish", ("spladekit.publish",)),
    ("train", ("spladekit.train",)),  # a model from data, judged by the stages above (dev evaluation)
    (
        "mine",
        ("spladekit.mine",),
    ),  # training data from an index's candidates and teachers (reads train's dataset opener)
    ("serve", ("spladekit.serve",)),  # an index and its query model behind HTTP
    ("demo", ("spladekit.demo", "spladekit.reproduce")),  # jobs made of the above (demo, reproduction grids)
    # adapters to the harnesses researchers evaluate in (PyTerrier transformers, an MTEB model): like the
    # command line they string the stages together for an outside library; no stage imports them
    ("harness", ("spladekit.pyterrier", "spladekit.mteb")),
    # the command line and the package's facade (``spladekit/__init__`` re-exports from every stage)
    ("cli", ("spladekit.cli", "spladekit.__main__", "spladekit")),
]


def _modules() -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is a package)}`` of every module under ``src/spladekit``."""
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, modules: dict) -> dict[str, int]:
    """``{imported spladekit module: line}`` of one module (edges as in this file's docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if is_package else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in modules:  # ``import a.b.C`` of a name: its module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            add(source, node.lineno)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    add(f"{source}.{alias.name}", node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.split(".")[0] == PACKAGE
        ):
            add(node.args[0].value, node.lineno)
    if is_package:  # lazy re-exports: ``_EXPORTS = {"name": "spladekit.module", ...}``
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets)
                and isinstance(node.value, ast.Dict)
            ):
                for value in node.value.values:
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        add(value.value, value.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {name: _imports(name, path, is_package, modules) for name, (path, is_package) in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def stage(module: str) -> int:
    """Position of ``module``'s stage in :data:`STAGES` (the longest prefix that matches; ``spladekit``
    alone matches only the package itself).

    Raises:
        KeyError: no stage names the module (a new top-level module must be given its place).
    """
    best, rank = -1, None
    for position, (_name, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            # ``spladekit`` itself names only the package's __init__, not everything below it
            below = module.startswith(prefix + ".") and prefix != PACKAGE
            if (module == prefix or below) and len(prefix) > best:
                best, rank = len(prefix), position
    if rank is None:
        raise KeyError(f"{module}: no stage in tests/test_layout.py STAGES names it")
    return rank


def _where(graph, a: str, b: str) -> str:
    return f"{a} → {b} (line {graph[a][b]})"


def test_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    described = []
    for component in found:
        members = set(component)
        edges = [_where(graph, a, b) for a in component for b in graph[a] if b in members]
        described.append(f"{component}: " + "; ".join(edges))
    assert not found, "import circles:\n" + "\n".join(described)


def test_no_stage_imports_a_later_stage():
    graph = import_graph()
    upward = [
        f"{_where(graph, a, b)}: stage {STAGES[stage(a)][0]} imports the later stage {STAGES[stage(b)][0]}"
        for a in graph
        for b in graph[a]
        if stage(b) > stage(a)
    ]
    assert not upward, "\n".join(upward)


# ---------------------------------------------------------------- the checker itself can fail


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, dict[str, int]]:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        return import_graph()
    finally:
        SRC = saved


def test_checker_finds_a_circle_through_a_function_and_a_package_reexport(tmp_path):
    graph = _graph_of(
        tmp_path,
        {
            "spladekit/__init__.py": "",
            "spladekit/model/__init__.py": "from spladekit.model.a import f\n",
            "spladekit/model/a.py": "def f():\n    from spladekit.model.b import g\n",
            "spladekit/model/b.py": "from spladekit.model import c\n",  # reads the package: its re-export of a
            "spladekit/model/c.py": "",
            "spladekit/model/d.py": "import spladekit.model.c\n",  # the module only: no edge to the package
            "spladekit/lazy/__init__.py": '_EXPORTS = {"x": "spladekit.model.d"}\n',
        },
    )
    assert graph["spladekit.model.b"] == {"spladekit.model": 1, "spladekit.model.c": 1}
    assert graph["spladekit.model.d"] == {"spladekit.model.c": 1}
    assert graph["spladekit.lazy"] == {"spladekit.model.d": 1}
    assert cycles(graph) == [["spladekit.model", "spladekit.model.a", "spladekit.model.b"]]


def test_checker_finds_an_upward_import():
    assert stage("spladekit.train.dev") > stage("spladekit.evaluate.metrics") > stage("spladekit.index.layout")
    assert stage("spladekit.serve.app") > stage("spladekit.train.dev")  # dev → serve is upward
    assert stage("spladekit.model.calibrate.outputs") == stage("spladekit.model")
    assert stage("spladekit") == stage("spladekit.cli.app")  # the facade, not the foundation
    with pytest.raises(KeyError, match="spladekit.newroom"):
        stage("spladekit.newroom")  # a new module must be given its place


# the moves that removed the circles kept the old import paths (re-exports from modules that close no circle)
MOVED = {
    "spladekit.model.encoder": (
        "spladekit.model.metadata",
        ["METADATA_FILE", "EncoderMetadata", "check_top_k", "damaged_weights_error"],
    ),
    "spladekit.train.data": ("spladekit.train.examples", ["TrainingExample"]),
    "spladekit.index": ("spladekit.index.merge", ["merge_shards"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_import_paths_give_the_moved_objects(old):
    import importlib

    new, names = MOVED[old]
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"


# ---------------------------------------------------------------- the layout page and the names

LAYOUT_PAGE = Path(__file__).resolve().parents[1] / "docs" / "layout.md"
PLACE_NAMES = {"api", "run", "runner", "loop", "pipeline", "shard", "utils", "helpers"}  # docs/layout.md, conventions


def page_entries(text: str) -> list[str]:
    """The paths listed in the ``src/spladekit/`` section of the layout page: the ``- `PATH`: ...`` items
    (a module ``a/b.py``, or a package by its folder ``a/``), in page order."""
    import re

    section = text.split("\n## `src/spladekit/`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([^`]+)`", section, flags=re.MULTILINE)


def tree_entries(root: Path) -> set[str]:
    """Every module of ``root`` (``src/spladekit``) as the page names it: ``a/b.py``, a package's
    ``__init__.py`` as ``a/`` (the package's own as ``__init__.py``)."""
    found = set()
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).as_posix()
        if path.name == "__init__.py" and path.parent != root:
            relative = relative.removesuffix("__init__.py")
        found.add(relative)
    return found


def test_the_layout_page_names_every_module_and_only_those():
    listed = page_entries(LAYOUT_PAGE.read_text(encoding="utf-8"))
    tree = tree_entries(SRC / PACKAGE)
    twice = sorted({name for name in listed if listed.count(name) > 1})
    missing, stale = sorted(tree - set(listed)), sorted(set(listed) - tree)
    assert not (missing or stale or twice), (
        f"docs/layout.md: modules missing from the page: {missing}; listed but not in "
        f"src/spladekit: {stale}; listed twice: {twice}"
    )


def test_the_page_check_can_fail(tmp_path):
    (tmp_path / "a").mkdir()
    for name in ("__init__.py", "x.py", "a/__init__.py", "a/y.py"):
        (tmp_path / name).write_text("")
    assert tree_entries(tmp_path) == {"__init__.py", "x.py", "a/", "a/y.py"}
    page = "# L\n\n## `src/spladekit/`\n\n- `x.py`: one.\n- `a/`: the package.\n  - `not-an-entry`\n\n## Around\n\n- `z.py`: no\n"
    assert page_entries(page) == ["x.py", "a/"]


def test_no_module_is_named_for_its_place_in_the_program():
    tree = tree_entries(SRC / PACKAGE)
    named = sorted(name for name in tree if Path(name).stem in PLACE_NAMES)
    assert not named, f"modules named for their place, not what they hold: {named}"


def test_no_two_classes_share_a_name():
    where: dict[str, list[str]] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(SRC).as_posix()}:{node.lineno}")
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, f"one name per thing: {shared}"


# ---------------------------------------------------------------- the tests mirror the source tree

TESTS = Path(__file__).resolve().parent
#: the test files about the whole repository, not one part of src/spladekit: they stay at tests/ top level
WHOLE_REPOSITORY_CHECKS = {
    "test_ci_skips.py": "the suite's skip rule under CI (conftest.py) and .ci/run",
    "test_code_shape.py": "function length, docstrings, doctests, ruff over the repository",
    "test_docs_site.py": "the documentation site (mkdocs.yml, docs/api/)",
    "test_layout.py": "this file: imports between stages, the layout page, the tests' places",
    "test_makefile.py": "the set-up steps of make demo and make test",
    "test_readme.py": "the README's commands and the documentation's links",
    "test_security_doc.py": "docs/security.md against the sources",
}


def misplaced_tests(tests: Path, package: Path, whole_repository: set[str]) -> list[str]:
    """The files under ``tests`` out of the mirrored layout (docs/layout.md, "Tests"), each with why.

    A test file's folder names a package of ``package`` (``tests/index/formats/`` → ``index/formats/``);
    at the top level a test file is ``test_<module>.py`` of a top-level module (``test_io.py``) or one of
    ``whole_repository``. Modules that are not tests (``conftest.py``, the helper modules) live at the top
    level only.
    """
    found = []
    for path in sorted(tests.rglob("*.py")):
        relative, folder = path.relative_to(tests), path.parent.relative_to(tests)
        if not path.name.startswith("test_"):
            if folder.parts:
                found.append(f"{relative.as_posix()}: a helper module lives at tests/ top level")
        elif folder.parts and not (package / folder / "__init__.py").is_file():
            found.append(f"{relative.as_posix()}: no package src/spladekit/{folder.as_posix()}/")
        elif not folder.parts and path.name not in whole_repository:
            if not (package / path.name.removeprefix("test_")).is_file():
                found.append(f"{relative.as_posix()}: no module src/spladekit/{path.name.removeprefix('test_')}")
    return found


def test_the_tests_mirror_the_source_tree():
    misplaced = misplaced_tests(TESTS, SRC / PACKAGE, set(WHOLE_REPOSITORY_CHECKS))
    assert not misplaced, "tests out of the mirrored layout (docs/layout.md, Tests):\n" + "\n".join(misplaced)


def test_each_whole_repository_check_exists():
    assert sorted(name for name in WHOLE_REPOSITORY_CHECKS if not (TESTS / name).is_file()) == []


def test_the_mirror_check_can_fail(tmp_path):
    package, tests = tmp_path / "spladekit", tmp_path / "tests"
    for name in ("__init__.py", "io.py", "index/__init__.py", "index/exact.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    good = (
        "conftest.py",
        "train_helpers.py",
        "test_io.py",
        "test_readme.py",
        "index/test_exact.py",
        "index/test_any_behaviour.py",
    )
    bad = ("test_stale.py", "train/test_loop.py", "index/exact_helpers.py", "index/formats/test_ciff.py")
    for name in good + bad:
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    assert [line.split(":")[0] for line in misplaced_tests(tests, package, {"test_readme.py"})] == sorted(bad)
