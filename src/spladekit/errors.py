"""Exceptions raised by spladekit.

Every input error names the file and, where it applies, the line (1-based) and the field, so a user
can open the file at the right place.
"""

from __future__ import annotations

from pathlib import Path


class SpladekitError(Exception):
    """Base class of every error spladekit raises on purpose."""


class DataFormatError(SpladekitError, ValueError):
    """A data file is malformed.

    Attributes:
        path: the file.
        line: 1-based line number, or ``None`` when the problem is the whole file.
        field: the JSON field or column at fault, when one is.
    """

    def __init__(self, path: str | Path, message: str, line: int | None = None, field: str | None = None):
        self.path = Path(path)
        self.line = line
        self.field = field
        self.message = message
        where = str(self.path) + (f", line {line}" if line is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")

    def __reduce__(self):  # pickled with its own arguments (a multiprocessing or torch.distributed worker's error)
        return type(self), (self.path, self.message, self.line, self.field)


class OutputPathError(SpladekitError, OSError):
    """An output cannot be written where it was asked: the path is a folder (or a file where a
    folder is needed), or the file system refuses the write. The message names the path."""


class ResolutionError(SpladekitError, FileNotFoundError):
    """A dataset or model could not be found locally, in a cache, or downloaded."""


class HeadNotFoundError(SpladekitError, TypeError):
    """The model is not a masked-language model of a supported family."""


def install_line(extra: str, package_file: str | None = None) -> str:
    """The pip line that adds the optional dependencies ``extra``: ``pip install -e 'CHECKOUT[extra]'``
    when spladekit runs from a source checkout (the README's editable install; ``.`` when the
    checkout is the working directory), else ``pip install 'spladekit[extra]'``.

    Args:
        package_file: this module's path (default: ``__file__``): the checkout is two folders above
            the package (``src/spladekit``) and holds ``pyproject.toml``.
    """
    from pathlib import Path

    root = Path(package_file or __file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "src" / "spladekit").is_dir():
        where = "." if Path.cwd().resolve() == root else str(root)
        return f"pip install -e '{where}[{extra}]'"
    return f"pip install 'spladekit[{extra}]'"


class EngineFailure(SpladekitError, RuntimeError):
    """A library spladekit calls failed inside its own code (a Rust panic of pyseismic-lsr, which
    Python would otherwise see as a ``BaseException`` that no ``except Exception`` catches); the
    message says what was asked and how to avoid it."""


class MissingExtraError(SpladekitError, ImportError):
    """An optional package a feature needs is not installed. The message names the feature, the
    package and the install line (:func:`install_line`). Attributes: ``package``, ``extra``."""

    def __init__(self, feature: str, package: str, extra: str):
        self.feature, self.package, self.extra = feature, package, extra
        super().__init__(f"{feature} needs {package}, which is not installed: {install_line(extra)}")

    def __reduce__(self):
        return type(self), (self.feature, self.package, self.extra)


def require_extra(module: str, feature: str, package: str, extra: str):
    """Import ``module`` (dotted) for ``feature`` and return it: the one way an optional package is
    asked for, so that every feature missing one says the same install line.

    Raises:
        MissingExtraError: ``module`` cannot be imported (``package``, :func:`install_line`).
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(feature, package, extra) from exc


class CardMismatchError(SpladekitError, ValueError):
    """A model card edited by hand describes another model than the one it would sit beside (its
    record line, :mod:`spladekit.publish.card_record`, differs from the model's facts). Attributes:
    ``path`` (the card), ``differences`` (one ``"FACT: X in the card, Y in this model"`` each)."""

    def __init__(self, path, differences: list[str], remedy: str):
        self.path, self.differences, self.remedy = path, list(differences), remedy
        super().__init__(
            f"{path}: edited by hand, and it describes another model ({'; '.join(self.differences)}); {remedy}"
        )

    def __reduce__(self):
        return type(self), (self.path, self.differences, self.remedy)


#: The modules each extra of pyproject.toml's ``[project.optional-dependencies]`` gives to a command
#: (``{extra: {module: package}}``; those a command does not import, e.g. the tests' httpx, left out).
EXTRA_MODULES = {
    "onnx": {"onnx": "onnx", "onnxruntime": "onnxruntime"},
    "serve": {"fastapi": "fastapi", "uvicorn": "uvicorn"},
    "seismic": {"seismic": "pyseismic-lsr"},
    "ciff": {"google.protobuf": "protobuf"},
    "mine": {"sentence_transformers": "sentence-transformers", "datasets": "datasets"},
    "datasets": {"datasets": "datasets"},
    "irds": {"ir_datasets": "ir_datasets"},
    "bmp": {"bmp": "bmp"},
}


def check_extra(extra: str, feature: str, modules=None) -> None:
    """Refuse ``feature`` before any work when a module of ``extra`` (:data:`EXTRA_MODULES`; only
    ``modules`` of it when given) is not installed: what a command calls first, so that a missing extra
    is said before a model loads or data is read. The modules are looked up
    (:func:`importlib.util.find_spec`), not imported: milliseconds, where importing them can take
    seconds; a module that is found but fails to import is reported by :func:`require_extra` where it
    is used.

    Raises:
        MissingExtraError: naming the missing packages and :func:`install_line`.
        KeyError: ``extra`` or a module not in :data:`EXTRA_MODULES` (a programming error).
    """
    import importlib.util

    wanted = EXTRA_MODULES[extra]
    missing = []
    for module in modules or wanted:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a missing parent package (google of google.protobuf), or __spec__ None
            found = False
        if not found:
            missing.append(wanted[module])
    if missing:
        raise MissingExtraError(feature, " and ".join(missing), extra)


class RepeatedIdError(SpladekitError, ValueError):
    """A document id given twice. Attributes: ``doc_id``, and ``first`` < ``second``, the 0-based
    positions of its two occurrences in input order (a reader of a file turns them into lines)."""

    def __init__(self, doc_id: str, first: int, second: int):
        self.doc_id, self.first, self.second = doc_id, first, second
        super().__init__(
            f"document ids repeat: {doc_id!r} is given twice (documents {first + 1} and {second + 1}, "
            "counted from 1 in input order)"
        )

    def __reduce__(self):
        return type(self), (self.doc_id, self.first, self.second)


def validation_problems(exc) -> list[tuple[str, str]]:
    """Each error of a pydantic ``ValidationError`` as ``(field, message)``, in pydantic's order.

    ``field`` is the dotted location (``"data.num_negatives"``, ``"weights.0"``; ``""`` for a
    check of the whole model); ``message`` is pydantic's, without its ``"Value error, "`` prefix
    (the text a validator raised). The one formatting of validation errors: callers add the file
    (:class:`DataFormatError`) or the command-line option (:func:`spladekit.cli.app.options_error`).
    """
    return [
        (".".join(str(part) for part in error["loc"]), error["msg"].removeprefix("Value error, "))
        for error in exc.errors()
    ]


class UnsupportedModelError(DataFormatError):
    """A model folder describes something spladekit cannot compute exactly (mean/CLS pooling, a
    ``SparseAutoEncoder``, a ``Router`` with two full encoders, prompts, an unknown module...).
    Raised before any weights are loaded; the message names the file, the module and the field."""
