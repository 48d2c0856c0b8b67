"""BEIR dataset layout: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``.

Conventions (Thakur et al., 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of
Information Retrieval Models"):
- corpus lines: ``{"_id": str, "title": str (optional), "text": str}``; the document text that is
  encoded is ``title + " " + text`` (just ``text`` when the title is empty or missing);
- query lines: ``{"_id": str, "text": str}``;
- qrels: TSV with the header ``query-id<TAB>corpus-id<TAB>score``; the grade is an integer.

Reading rules (every reader of :mod:`spladekit.data`): a UTF-8 byte-order mark and Windows CRLF line
ends are tolerated; blank lines are skipped; ids are stripped of leading and trailing white space
(as in the qrels and TSV readers, so ``" d1"`` in a corpus and ``d1`` in the qrels name the same
document); anything else that is wrong (a line that is not JSON,
a missing or empty ``_id``, a missing ``text``, a repeated id, invalid UTF-8, an empty file) raises
:class:`~spladekit.errors.DataFormatError` naming the file and the 1-based line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from spladekit.data.trec import read_qrels
from spladekit.errors import DataFormatError


@dataclass
class BeirDataset:
    """A BEIR collection loaded in memory.

    Attributes:
        path: the dataset folder.
        corpus: ``{doc_id: document text}`` (title + " " + text), in file order.
        queries: ``{query_id: text}`` restricted to the queries judged in ``qrels`` (file order).
        qrels: ``{query_id: {doc_id: grade}}`` of ``split``.
        split: the qrels split that was read (e.g. ``"test"``).
    """

    path: Path
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    split: str
    name: str = field(default="")


def find_file(folder: Path, stem: str) -> Path:
    """``folder/STEM.jsonl`` or ``folder/STEM.jsonl.gz``, whichever exists.

    Raises:
        DataFormatError: neither exists.
    """
    folder = Path(folder)
    for candidate in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz"):
        if candidate.exists():
            return candidate
    raise DataFormatError(folder / f"{stem}.jsonl", f"missing: expected {stem}.jsonl or {stem}.jsonl.gz in {folder}")


def read_records(path: str | Path, required: tuple[str, ...]):
    """Yield ``(line_number, record)`` for each JSON object line of ``path`` (the reading rules above).

    Raises:
        DataFormatError: a line is not a JSON object, lacks or mistypes a ``required`` field, has an
            empty ``_id`` or one with white space inside; or the file holds no record.
    """
    from spladekit.io import read_jsonl

    path = Path(path)
    empty = True
    for number, record in read_jsonl(path):
        empty = False
        if not isinstance(record, dict):
            raise DataFormatError(path, "expected a JSON object", line=number)
        for key in required:
            if key not in record:
                raise DataFormatError(path, "missing", line=number, field=key)
            if not isinstance(record[key], (str, int)) or isinstance(record[key], bool):
                raise DataFormatError(
                    path, f"expected a string, got {type(record[key]).__name__}", line=number, field=key
                )
        if "_id" in required and not str(record["_id"]).strip():
            raise DataFormatError(path, "empty id", line=number, field="_id")
        if "_id" in required and any(c.isspace() for c in str(record["_id"]).strip()):
            # refused here, not when the run is written after hours of encoding (TREC runs and
            # qrels are white-space separated: such an id cannot be one of their columns)
            raise DataFormatError(
                path,
                f"id {str(record['_id']).strip()!r} contains white space, which a TREC run "
                "file cannot hold (rename the id)",
                line=number,
                field="_id",
            )
        yield number, record
    if empty:
        raise DataFormatError(path, "file is empty")


def iter_corpus(path: str | Path):
    """Stream a BEIR ``corpus.jsonl[.gz]`` (or a BEIR folder holding one) as ``(doc_id, title + " " + text)``
    pairs in file order, holding only the ids seen (for the duplicate check), never the texts.

    Raises:
        DataFormatError: a line is not JSON, lacks ``_id`` or ``text``, has a non-string title, or
            repeats an id.
    """
    path = Path(path)
    if path.is_dir():
        path = find_file(path, "corpus")
    seen: set[str] = set()
    for number, record in read_records(path, ("_id", "text")):
        doc_id = str(record["_id"]).strip()  # as read_qrels and read_tsv do with their ids
        if doc_id in seen:
            raise DataFormatError(path, f"duplicate document id {doc_id!r}", line=number, field="_id")
        seen.add(doc_id)
        title = record.get("title") or ""
        if not isinstance(title, str):
            raise DataFormatError(path, "expected a string", line=number, field="title")
        yield doc_id, document_text(title, str(record["text"]))


def document_text(title: str | None, text: str) -> str:
    """The text of a BEIR document: ``title + " " + text``, just ``text`` when the title is empty or missing."""
    return f"{title} {text}" if title and title.strip() else text


def count_corpus(path: str | Path) -> int | None:
    """Documents of a BEIR ``corpus.jsonl[.gz]`` (or BEIR folder), counted without parsing them
    (:func:`spladekit.io.count_records`), for a progress bar; None when it cannot be counted."""
    from spladekit.errors import DataFormatError
    from spladekit.io import count_records

    path = Path(path)
    try:
        return count_records(find_file(path, "corpus") if path.is_dir() else path)
    except DataFormatError:
        return None


def read_corpus(path: str | Path) -> dict[str, str]:
    """Read a BEIR ``corpus.jsonl[.gz]`` into ``{doc_id: title + " " + text}`` (see :func:`iter_corpus`).

    Raises:
        DataFormatError: a line is not JSON, lacks ``_id`` or ``text``, or repeats an id.
    """
    return dict(iter_corpus(path))


def load_corpus(path: str | Path) -> dict[str, str]:
    """The corpus of a BEIR folder (or dataset name), as :func:`read_corpus`; no qrels needed."""
    from spladekit.data.resolve import resolve_dataset

    return read_corpus(find_file(resolve_dataset(path), "corpus"))


def read_queries(path: str | Path) -> dict[str, str]:
    """Read a BEIR ``queries.jsonl[.gz]`` into ``{query_id: text}``.

    Queries whose text is empty or white space only are kept, with a warning
    (:func:`spladekit.data.tsv.warn_empty_texts`).

    Raises:
        DataFormatError: a line is not JSON, lacks ``_id`` or ``text``, or repeats an id.
    """
    from spladekit.data.tsv import warn_empty_texts

    path = Path(path)
    queries: dict[str, str] = {}
    empty: list[tuple[int, str]] = []
    for number, record in read_records(path, ("_id", "text")):
        query_id = str(record["_id"]).strip()
        if query_id in queries:
            raise DataFormatError(path, f"duplicate query id {query_id!r}", line=number, field="_id")
        queries[query_id] = str(record["text"])
        if not queries[query_id].strip():
            empty.append((number, query_id))
    warn_empty_texts(path, empty)
    return queries


def load_beir(path: str | Path, split: str = "test") -> BeirDataset:
    """Load a BEIR folder: corpus, the queries judged in ``qrels/<split>.tsv``, and those qrels.

    Args:
        path: a BEIR folder, or a dataset name resolved by :func:`spladekit.data.resolve.resolve_dataset`.
        split: qrels split name (``test``, ``dev``, ``train``).

    Raises:
        DataFormatError: a malformed file, or qrels naming a query absent from ``queries.jsonl``.
        ResolutionError: ``path`` is neither a folder nor a resolvable dataset name.
    """
    from spladekit.data.resolve import resolve_dataset

    folder = resolve_dataset(path)
    corpus = read_corpus(find_file(folder, "corpus"))
    queries_path = find_file(folder, "queries")
    all_queries = read_queries(queries_path)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        raise DataFormatError(qrels_path, f"missing: no qrels for split {split!r} in {folder / 'qrels'}")
    qrels = read_qrels(qrels_path)
    unknown = [qid for qid in qrels if qid not in all_queries]
    if unknown:
        raise DataFormatError(qrels_path, f"{len(unknown)} query ids not in {queries_path.name}, e.g. {unknown[0]!r}")
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    return BeirDataset(path=folder, corpus=corpus, queries=queries, qrels=qrels, split=split, name=folder.name)
