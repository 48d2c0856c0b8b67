"""``id<TAB>text`` files (MS MARCO collections and topics, naver/splade ``raw.tsv``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from spladekit.errors import DataFormatError
from spladekit.io import iter_lines


def iter_tsv(path: str | Path) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line number, id, text)`` of ``id<TAB>text`` lines (file order, blank lines skipped).

    The id is stripped of surrounding white space; the text is everything after the first tab.

    Raises:
        DataFormatError: a line without a tab, an empty id, or a repeated id (naming file and line).
    """
    seen: set[str] = set()
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        if "\t" not in line:
            raise DataFormatError(path, "expected 'id<TAB>text'", line=number)
        key, text = line.split("\t", 1)
        key = key.strip()
        if not key:
            raise DataFormatError(path, "empty id", line=number)
        if key in seen:
            raise DataFormatError(path, f"duplicate id {key!r}", line=number)
        seen.add(key)
        yield number, key, text


def read_tsv(path: str | Path) -> dict[str, str]:
    """Read ``id<TAB>text`` lines into ``{id: text}`` (file order).

    Texts that are empty or white space only are kept, with a warning (:func:`warn_empty_texts`).

    Raises:
        DataFormatError: a line without a tab, an empty id, a repeated id, or an empty file.
    """
    path = Path(path)
    rows: dict[str, str] = {}
    empty: list[tuple[int, str]] = []
    for number, key, text in iter_tsv(path):
        rows[key] = text
        if not text.strip():
            empty.append((number, key))
    if not rows:
        raise DataFormatError(path, "file is empty")
    warn_empty_texts(path, empty)
    return rows


def warn_empty_texts(path: str | Path, empty: Sequence[tuple[int, str]], shown: int = 5) -> None:
    """Warn (``UserWarning``) that ``path`` holds texts that are empty or white space only, naming
    how many and the first ``shown`` ids with their 1-based lines; nothing when ``empty`` is empty.

    Such a text has no term of its own: a SPLADE model encodes only its special tokens (``[CLS]``,
    ``[SEP]``: a few terms that do not depend on the text), an inference-free query side nothing
    at all. Searched as a query, it retrieves nothing or documents unrelated to any question.

    Args:
        empty: ``(line, id)`` of each empty text, in file order.
    """
    if not empty:
        return
    named = ", ".join(f"{key!r} (line {line})" for line, key in empty[:shown])
    warnings.warn(
        f"{path}: {len(empty)} empty text(s), ids {named}{' …' if len(empty) > shown else ''}: an empty "
        "text has no term of its own (its SPLADE vector holds only the special tokens' terms, or none), "
        "so as a query it retrieves nothing related to it",
        stacklevel=3,
    )
