"""Plain sample text for measurements (MLM-head diagnosis, calibration): text files and BEIR samples."""

from __future__ import annotations

import random
from pathlib import Path

from spladekit.errors import DataFormatError
from spladekit.io import iter_lines


def read_text_lines(path: str | Path) -> list[str]:
    """One text per line (UTF-8, ``.gz`` allowed); blank lines are skipped.

    Raises:
        DataFormatError: invalid UTF-8 (naming the line) or no non-blank line.
        FileNotFoundError: no such file.
    """
    texts = [line.strip() for _, line in iter_lines(path) if line.strip()]
    if not texts:
        raise DataFormatError(path, "no text: expected one text per line")
    return texts


def sample_beir_texts(
    folder: str | Path, n_queries: int = 64, n_docs: int = 64, seed: int = 0
) -> tuple[list[str], list[str]]:
    """A seeded uniform sample of queries and documents of a BEIR folder (all of them when fewer).

    Documents are ``title + " " + text`` as in :func:`spladekit.data.beir.read_corpus`; every query
    of ``queries.jsonl`` is eligible (judged or not). The same seed gives the same sample.

    Args:
        folder: a BEIR folder or dataset name (resolved by :func:`spladekit.data.resolve.resolve_dataset`).

    Returns:
        ``(queries, documents)`` in file order.

    Raises:
        DataFormatError, ResolutionError: see the BEIR readers.
    """
    from spladekit.data.beir import find_file, read_corpus, read_queries
    from spladekit.data.resolve import resolve_dataset

    root = resolve_dataset(folder)
    queries = list(read_queries(find_file(root, "queries")).values())
    corpus = list(read_corpus(find_file(root, "corpus")).values())
    rng = random.Random(seed)

    def pick(items: list[str], n: int) -> list[str]:
        if n >= len(items):
            return items
        return [items[i] for i in sorted(rng.sample(range(len(items)), n))]

    return pick(queries, n_queries), pick(corpus, n_docs)
