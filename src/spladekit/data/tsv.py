"""``id<TAB>text`` files (MS MARCO collections and topics, naver/splade ``raw.tsv``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

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

    Raises:
        DataFormatError: a line without a tab, an empty id, a repeated id, or an empty file.
    """
    path = Path(path)
    rows = {key: text for _, key, text in iter_tsv(path)}
    if not rows:
        raise DataFormatError(path, "file is empty")
    return rows
