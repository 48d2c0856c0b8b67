"""The documentation site (mkdocs.yml): ``mkdocs build --strict`` passes, every public name is documented
on it, and ``SpladeEncoder``'s entry holds its signature and each public method.

Public, as docs/api/index.md says: every name in the ``__all__`` of a module of spladekit that declares
one (the package, its subpackages, the harness adapters). The names are read from the modules as
Python sees them (the lazily exported ones included); what the site shows is read from the built HTML,
and the docstrings from griffe, the reader the site's generator uses. The build runs in this process,
once for the module (one xdist worker), into a temporary folder.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import re
from html.parser import HTMLParser
from pathlib import Path

import griffe
import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

pytestmark = pytest.mark.xdist_group("docs-site")  # one build per module, on one worker


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict:
    """Build the site with ``--strict`` into a temporary folder: ``{"dir", "warnings", "error"}``."""
    out = tmp_path_factory.mktemp("site")
    warnings = _Warnings()
    mkdocs_log = logging.getLogger("mkdocs")
    mkdocs_log.addHandler(warnings)
    error = None
    try:
        build(load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(out)))
    except Abort as exc:
        error = str(exc)
    finally:
        mkdocs_log.removeHandler(warnings)
    return {"dir": out, "warnings": warnings.messages, "error": error}


def test_strict_build_passes(site):
    assert site["error"] is None, f"{site['error']}\n" + "\n".join(site["warnings"])
    assert not site["warnings"]
    for page in [
        "index.html",
        "api/index.html",
        "api/model/index.html",
        "benchmarks/RESULTS/index.html",
        "training/index.html",
    ]:
        assert (site["dir"] / page).is_file(), page


def test_links_to_benchmarks_and_readme_point_into_the_site(site):
    """The guides' ``../benchmarks/`` links and the README's ``docs/`` links (the home page) are rewritten
    to pages of the site, which exist (mkdocs checked the Markdown; this checks the HTML)."""
    hrefs = {page: re.findall(r'href="([^"#]*)[^"]*"', page.read_text()) for page in site["dir"].rglob("*.html")}
    home = hrefs[site["dir"] / "index.html"]
    assert any(href.startswith("demo/") for href in home) and not any("docs/" in href for href in home)
    assert any(href == "../benchmarks/RESULTS/" for href in hrefs[site["dir"] / "serving/index.html"])
    for page, links in hrefs.items():
        for href in links:
            if href and not re.match(r"[a-z]+:|/", href) and not href.endswith((".css", ".js", ".png", ".xml", ".ico")):
                assert (page.parent / href / "index.html").is_file() or (page.parent / href).is_file(), (page, href)


def declared_modules() -> list[str]:
    """Every module of spladekit whose source assigns ``__all__`` at its top level."""
    names = []
    for path in sorted((SRC / "spladekit").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            for node in tree.body
        ):
            parts = path.relative_to(SRC).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def public_names() -> list[tuple[str, str]]:
    """``(module, name)`` for every name in the ``__all__`` of a module of :func:`declared_modules`."""
    return [(module, name) for module in declared_modules() for name in importlib.import_module(module).__all__]


def canonical(module: str, name: str) -> str:
    """Where ``module.name`` is defined: ``defining_module.qualname`` for a class or function; for another
    value, the module (among the submodules the package imports) whose own source assigns it."""
    obj = getattr(importlib.import_module(module), name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    for path in (
        sorted((SRC / Path(*module.split("."))).rglob("*.py")) if (SRC / Path(*module.split("."))).is_dir() else []
    ):
        tree = ast.parse(path.read_text())
        if any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)
            for node in tree.body
        ):
            return ".".join(path.relative_to(SRC).with_suffix("").parts) + f".{name}"
    return f"{module}.{name}"


class _Entries(HTMLParser):
    """The mkdocstrings entries of a page: each heading's id → the text of its signature block."""

    def __init__(self):
        super().__init__()
        self.ids: dict[str, str] = {}
        self._last: str | None = None
        self._depth = 0  # > 0 inside a signature block

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if "doc-heading" in classes and attrs.get("id"):
            self._last = attrs["id"]
            self.ids[self._last] = ""
        elif tag == "div" and "doc-signature" in classes and self._last:
            self._depth = 1
        elif tag == "div" and self._depth:
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1
            if not self._depth:
                self._last = None

    def handle_data(self, data):
        if self._depth and self._last:
            self.ids[self._last] += data


def entries(site_dir: Path) -> dict[str, tuple[Path, str]]:
    """Every documented object of the API pages: its anchor id → (page, signature text)."""
    found = {}
    for page in sorted((site_dir / "api").rglob("index.html")):
        parser = _Entries()
        parser.feed(page.read_text())
        found.update({anchor: (page, signature) for anchor, signature in parser.ids.items()})
    return found


def griffe_object(package: griffe.Module, path: str) -> griffe.Object:
    """The object at ``path`` (a module path, then members), through modules first: ``spladekit.evaluate``
    is a subpackage and a function re-exported by ``spladekit``."""
    obj, parts = package, path.split(".")[1:]
    while parts and parts[0] in getattr(obj, "modules", {}):
        obj = obj.modules[parts.pop(0)]
    for part in parts:
        obj = obj.members[part]
    return obj.final_target if obj.is_alias else obj


def test_definition_of_public_covers_the_packages():
    """The rule finds the package, its stage packages and the harness adapters (a rule that found
    nothing would let every later check pass)."""
    modules = set(declared_modules())
    assert {
        "spladekit",
        "spladekit.data",
        "spladekit.model",
        "spladekit.index",
        "spladekit.evaluate",
        "spladekit.train",
        "spladekit.mine",
        "spladekit.reproduce",
        "spladekit.pyterrier",
        "spladekit.mteb",
    } <= modules
    assert ("spladekit", "SpladeEncoder") in public_names() and len(public_names()) > 100


def test_every_public_name_is_documented(site):
    """Each public name has a docstring and an entry on an API page (under its public or its defining
    path); each public method or property a public class defines has a docstring and an entry too."""
    found = entries(site["dir"])
    package = griffe.load("spladekit", search_paths=[str(SRC)], resolve_aliases=False)
    names: dict[str, list[str]] = {}  # defining path -> the public paths of the object
    for module, name in public_names():
        names.setdefault(canonical(module, name), []).append(f"{module}.{name}")
    missing, undocumented = [], []
    for path, public in names.items():
        obj = griffe_object(package, path)
        if not (obj.docstring and obj.docstring.value.strip()):
            undocumented.append(path)
            continue
        anchor = next((anchor for anchor in [*public, path] if anchor in found), None)
        if anchor is None:
            missing.append(public[0])
        elif obj.is_class:
            for member in obj.members.values():
                if (
                    member.name.startswith("_")
                    or member.is_alias
                    or not (member.is_function or "property" in member.labels)
                ):
                    continue
                if not (member.docstring and member.docstring.value.strip()):
                    undocumented.append(member.path)
                elif f"{anchor}.{member.name}" not in found:
                    missing.append(f"{anchor}.{member.name}")
    assert not undocumented, f"public names without a docstring: {undocumented}"
    assert not missing, f"public names with no entry on the site (docs/api/*.md): {missing}"


def test_top_level_page_lists_every_name_of_spladekit(site):
    import spladekit

    page = (site["dir"] / "api/spladekit/index.html").read_text()
    listed = set(re.findall(r'<a class="autorefs autorefs-internal"[^>]*><code>(\w+)</code></a>', page))
    assert set(spladekit.__all__) <= listed, set(spladekit.__all__) - listed


def test_splade_encoder_page_holds_signature_and_methods(site):
    """``SpladeEncoder``'s entry: its constructor's signature, and an entry with its signature for each
    public method and property the class defines (read from the class itself, not from griffe)."""
    from spladekit.model import SpladeEncoder

    found = entries(site["dir"])
    anchor = "spladekit.model.SpladeEncoder"
    page, signature = found[anchor]
    assert page == site["dir"] / "api/model/index.html"
    parameters = list(inspect.signature(SpladeEncoder).parameters)
    assert parameters and re.sub(r"\s+", "", signature).startswith("SpladeEncoder(")
    for parameter in parameters:
        assert re.search(rf"\b{parameter}\b", signature), (parameter, signature)
    methods = [
        name
        for name, value in vars(SpladeEncoder).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property)))
    ]
    assert {"from_pretrained", "save_pretrained", "encode", "encode_queries", "encode_documents", "decode"} <= set(
        methods
    )
    for name in methods:
        assert f"{anchor}.{name}" in found, name
        value = inspect.getattr_static(SpladeEncoder, name)
        if isinstance(value, property):
            continue
        method_signature = found[f"{anchor}.{name}"][1]
        assert method_signature.strip().startswith(f"{name}("), (name, method_signature)
        for parameter in inspect.signature(getattr(SpladeEncoder, name)).parameters:
            if parameter not in {"self", "cls"}:
                assert re.search(rf"\b{parameter}\b", method_signature), (name, parameter, method_signature)


def _script(name: str):
    """A module of ``scripts/`` (the site's griffe extension and mkdocs hooks), imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_griffe_extension_reads_roles_and_literal_blocks():
    """Expected Markdown written by hand: a role becomes an optional cross-reference to the path Python
    would resolve from the docstring's object; a literal block becomes a fenced block."""
    markdown = _script("docs_griffe").markdown
    files = {
        "__init__.py": "from pkg.other import Thing\ndef f():\n    '''Doc.'''\n",
        "other.py": "class Thing:\n    def go(self): ...\n",
    }
    with griffe.temporary_visited_package("pkg", files) as pkg:
        text = markdown(pkg["f"], "a :class:`Thing`, :meth:`Thing.go`, :func:`~pkg.other.Thing.go` and :mod:`os.path`")
    ref = '<autoref identifier="{}" optional><code>{}</code></autoref>'
    assert text == (
        f"a {ref.format('pkg.other.Thing', 'Thing')}, {ref.format('pkg.other.Thing.go', 'Thing.go')}, "
        f"{ref.format('pkg.other.Thing.go', 'go')} and {ref.format('os.path', 'os.path')}"
    )
    assert (
        markdown(None, "Example::\n\n    x = 1\n\n    y = 2\n\nAfter.")
        == "Example:\n\n```python\nx = 1\n\ny = 2\n```\n\nAfter."
    )
    assert markdown(None, "Layout::\n\n    a/\n      b.json") == "Layout:\n\n```text\na/\n  b.json\n```"
    assert markdown(None, "Ends with a colon: and ``code::``") == "Ends with a colon: and ``code::``"


def test_hooks_rewrite_repository_links():
    """The README's ``docs/`` links lose the prefix; a guide's ``../benchmarks/`` link loses its ``../``
    at the top of the site and keeps one per folder below it; RESULTS.md's ``runs/`` names its index and
    its ``../docs/`` the site's top."""
    hooks = _script("docs_hooks")

    class Page:
        def __init__(self, uri):
            self.file = type("F", (), {"src_uri": uri})()

    assert (
        hooks.on_page_markdown("[a](docs/demo.md#x) [b](benchmarks/runs/)", Page("index.md"), None, None)
        == "[a](demo.md#x) [b](benchmarks/run-logs.md)"
    )
    page = "RESULTS" + ".md"  # not written whole: test_readme checks every anchor of that page named in the repository
    assert (
        hooks.on_page_markdown(f"[r](../benchmarks/{page}#h)", Page("serving.md"), None, None)
        == f"[r](benchmarks/{page}#h)"
    )
    assert (
        hooks.on_page_markdown(f"[r](../benchmarks/{page})", Page("api/x.md"), None, None)
        == f"[r](../benchmarks/{page})"
    )
    assert hooks.on_page_markdown("[logs](runs/)", Page("benchmarks/RESULTS.md"), None, None) == "[logs](run-logs.md)"
    assert (
        hooks.on_page_markdown("![p](../docs/img/p.png)", Page("benchmarks/RESULTS.md"), None, None)
        == "![p](../img/p.png)"
    )
    row = "| [e](docs/engines.md) | `--format a\\|b\\|c` |"
    assert hooks.on_page_markdown(row, Page("index.md"), None, None) == "| [e](engines.md) | `--format a|b|c` |"
