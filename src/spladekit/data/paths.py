"""Paths that an input file names inside its own folder (a module's folder in ``modules.json``, an
export's graph in ``spladekit.json``), by one rule: none leaves the folder (:func:`path_inside`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def path_inside(root: str | Path, relative: Any, named_in: str | Path, field: str | None = None) -> Path:
    """``root / relative`` resolved, for a path that an input file names inside its folder (a module's
    folder in ``modules.json``, an export's graph in ``spladekit.json``): the one rule that no such path
    leaves its folder, whether by ``..``, an absolute path or a link out.

    Raises:
        DataFormatError: naming ``named_in`` (the file that says the path) and ``field``: not a string,
            or a path outside ``root``.
    """
    from spladekit.errors import DataFormatError

    if not isinstance(relative, str):
        raise DataFormatError(named_in, f"expected a relative path, got {relative!r}", field=field)
    base = Path(root).resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise DataFormatError(named_in, f"path {relative!r} leaves the model folder {root}", field=field)
    return target
