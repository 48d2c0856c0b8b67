"""Ids read from files, by one rule: a string or an integer, compared as the string without surrounding
white space (``10``, ``"10"`` and ``" 10"`` are the id ``"10"``).

The rule of every reader here: BEIR's ``_id`` and the ``id<TAB>text`` and qrels columns are stripped
strings; score files (naver's and sentence-transformers' pickles with ``int`` keys, JSON objects with
string keys) and the id columns of datasets follow it too, so their ids meet the corpus's. Two raw
ids of one table that become one id are refused (:func:`unique_ids`), naming both and the file:
merged, one of their values would be dropped in silence.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from spladekit.errors import DataFormatError

V = TypeVar("V")


def normalise_id(raw: Any, path: str | Path, field: str | None = None, line: int | None = None) -> str:
    """``raw`` (a string or an integer, numpy's included) as an id: its string without surrounding white space.

    Raises:
        DataFormatError: naming ``path`` and ``field``: a boolean, a float or any other type, or an id
            that is empty once stripped.
    """
    if isinstance(raw, str):
        text = raw.strip()
    elif isinstance(raw, numbers.Integral) and not isinstance(raw, bool) and type(raw).__name__ != "bool_":
        text = str(int(raw))
    else:
        raise DataFormatError(
            path, f"an id is a string or an integer, got {type(raw).__name__} {raw!r}", line=line, field=field
        )
    if not text:
        raise DataFormatError(path, f"empty id {raw!r}", line=line, field=field)
    return text


def unique_ids(
    items: Iterable[tuple[Any, V]], path: str | Path, what: str = "", field: str | None = None
) -> dict[str, V]:
    """``{normalise_id(raw): value}`` of ``(raw id, value)`` pairs, in their order.

    Args:
        what: the kind of id for the messages (``"query"``, ``"document"``).
        field: where the ids sit in the file (``qid`` for the documents of one query), for the messages.

    Raises:
        DataFormatError: an id :func:`normalise_id` refuses, or two raw ids that are one id (naming
            both, e.g. ``1`` and ``'1'``).
    """
    out: dict[str, V] = {}
    raw_of: dict[str, Any] = {}
    for raw, value in items:
        key = normalise_id(raw, path, field)
        if key in out:
            kind = f"{what} ids" if what else "ids"
            raise DataFormatError(
                path,
                f"{kind} {raw_of[key]!r} and {raw!r} are one id {key!r} (ids are compared as "
                "strings without surrounding white space): which one is meant?",
                field=f"{field}.{key}" if field else key,
            )
        out[key] = value
        raw_of[key] = raw
    return out
