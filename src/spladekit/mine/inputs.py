"""The queries to mine for, their positives, and the candidate corpus (see :class:`~spladekit.mine.config.MineConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spladekit.errors import DataFormatError


@dataclass
class MiningInput:
    """What mining starts from.

    Attributes:
        queries: ``{qid: text}`` in input order (distinct queries).
        positives: ``{qid: [doc_id, ...]}`` (input order, no repeats, at least one each).
        corpus: ``{doc_id: text}`` (every positive included).
        source: the input's name, for messages.
    """

    queries: dict[str, str]
    positives: dict[str, list[str]]
    corpus: dict[str, str]
    source: str


def read_mining_input(config) -> MiningInput:
    """Read the input of a :class:`~spladekit.mine.config.MineConfig`.

    Raises:
        DataFormatError: a malformed file (naming file and line / row and column); no query with a positive.
        ResolutionError: the dataset cannot be found.
    """
    if config.format == "beir":
        from spladekit.data.beir import load_beir

        dataset = load_beir(config.data, config.split)
        positives = {q: [d for d, g in dataset.qrels[q].items() if g > 0] for q in dataset.queries}
        qrels_path = dataset.path / "qrels" / f"{config.split}.tsv"
        for qid, docs in positives.items():
            missing = [d for d in docs if d not in dataset.corpus]
            if missing:
                raise DataFormatError(qrels_path, f"document {missing[0]!r} is not in the corpus", field=qid)
        positives = {q: d for q, d in positives.items() if d}
        if config.max_queries is not None:
            positives = dict(list(positives.items())[: config.max_queries])
        if not positives:
            raise DataFormatError(qrels_path, "no query with a relevant document (grade > 0)")
        return MiningInput({q: dataset.queries[q] for q in positives}, positives, dataset.corpus, str(config.data))
    pairs = _read_pairs(config)
    return _from_pairs(
        pairs, _read_corpus(config.corpus) if config.corpus else {}, str(config.data), config.max_queries
    )


def _read_pairs(config) -> list[tuple[str, str]]:
    """``(query text, positive text)`` pairs of a ``tsv`` or ``hf`` input."""
    if config.format == "tsv":
        from spladekit.io import iter_lines

        pairs = []
        for number, line in iter_lines(config.data):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not all(p.strip() for p in parts):
                raise DataFormatError(config.data, "expected 'query<TAB>positive' (two non-empty fields)", line=number)
            pairs.append((parts[0], parts[1]))
        if not pairs:
            raise DataFormatError(config.data, "file is empty")
        return pairs
    from types import SimpleNamespace

    from spladekit.train.hf import open_dataset

    dataset = open_dataset(
        SimpleNamespace(
            path=config.data,
            split=config.split,
            subset=config.subset,
            cache_dir=None,
            streaming=False,
            max_queries=None,
        )
    )
    names = dataset.column_names
    query = config.query_column or names[0]
    positive = config.positive_column or (names[1] if len(names) > 1 else None)
    for column in (query, positive):
        if column not in names:
            raise DataFormatError(config.data, f"no column {column!r} (columns: {names})", field=column)
    pairs = []
    for row, (q, p) in enumerate(zip(dataset[query], dataset[positive])):
        for column, value in ((query, q), (positive, p)):
            if not isinstance(value, str) or not value.strip():
                raise DataFormatError(
                    config.data, f"row {row} (dataset[{row}]): expected a non-empty text, got {value!r}", field=column
                )
        pairs.append((q, p))
    return pairs


def _read_corpus(path: str) -> dict[str, str]:
    from spladekit.data.beir import read_corpus

    p = Path(path)
    if p.is_dir() or p.name.endswith((".jsonl", ".jsonl.gz")):
        return read_corpus(p)
    from spladekit.data.tsv import read_tsv

    return read_tsv(p)


def _from_pairs(
    pairs: list[tuple[str, str]], corpus: dict[str, str], source: str, max_queries: int | None
) -> MiningInput:
    """Text pairs → ids, as sentence-transformers de-duplicates: one query per distinct text, one
    document per distinct text (a positive found in ``corpus`` takes that document's id)."""
    by_text: dict[str, str] = {}
    for doc_id, text in corpus.items():
        by_text.setdefault(text, doc_id)
    corpus = dict(corpus)
    queries: dict[str, str] = {}
    query_ids: dict[str, str] = {}
    positives: dict[str, list[str]] = {}
    for query, positive in pairs:
        if query not in query_ids:
            if max_queries is not None and len(query_ids) >= max_queries:
                continue
            query_ids[query] = f"q{len(query_ids)}"
            queries[query_ids[query]] = query
        qid = query_ids[query]
        if positive not in by_text:
            doc_id, k = f"pos-{len(by_text)}", len(by_text)
            while doc_id in corpus:  # never reuse an id of the given corpus
                k += 1
                doc_id = f"pos-{k}"
            by_text[positive] = doc_id
            corpus[doc_id] = positive
        docs = positives.setdefault(qid, [])
        if by_text[positive] not in docs:
            docs.append(by_text[positive])
    return MiningInput(queries, positives, corpus, source)
