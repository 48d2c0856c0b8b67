"""Shard folders of one corpus written as one index folder: :func:`merge_shards`.

Above both :mod:`spladekit.index.writer` (which writes the folder) and :class:`spladekit.index.index.Index`
(which opens the shards and the result), which it uses.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from spladekit.index.index import Index, check_compatible
from spladekit.index.layout import DEFAULT_BUDGET, load_vocabulary
from spladekit.index.writer import check_budget, matrix_blocks, write_index


class _ChainedIds:
    """The ids of several folders end to end (sized, iterable; for :func:`write_index`)."""

    def __init__(self, parts: Sequence[Sequence[str]]):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self) -> Iterator[str]:
        for part in self.parts:
            yield from part

    def __getitem__(self, i: int) -> str:
        for part in self.parts:
            if i < len(part):
                return part[i]
            i -= len(part)
        raise IndexError(i)


def merge_shards(
    folders: Sequence[str | Path], out: str | Path, memory_budget: int = DEFAULT_BUDGET, metadata: dict | None = None
):
    """Write the index folders ``folders`` (shards of one corpus: same model and vocabulary) as one
    folder ``out``: documents in shard order, within ``memory_budget`` (module docstring). Searching
    ``out`` gives the run of searching the shards together (:class:`ShardedIndex`).

    Args:
        metadata: ``index.json`` entries added to the first shard's (counts and hashes are recomputed;
            ``merged_from`` lists the shard folders).

    Returns:
        The open :class:`spladekit.index.index.Index` of ``out``.

    Raises:
        ValueError: no folder, shards of different models or vocabularies, or a document id in two
            shards (naming it).
        DataFormatError: a shard folder cannot be read.
    """
    shards = [Index.open(f) for f in folders]
    check_compatible(shards)
    budget = check_budget(memory_budget)

    def blocks():
        for shard in shards:
            yield from matrix_blocks(shard.docs, budget, assume_canonical=True)()

    first = shards[0]
    meta = {
        k: v
        for k, v in first.metadata.items()
        if k not in ("content_hash", "postings_hash", "nnz", "num_docs", "vocab_size")
    }
    meta.update(metadata or {})
    meta["merged_from"] = [str(s.folder) for s in shards]
    write_index(
        out,
        blocks,
        _ChainedIds([s.doc_ids for s in shards]),
        first.docs.shape[1],
        meta,
        load_vocabulary(first.folder),
        budget,
    )
    return Index.open(out)
