"""Hugging Face ``datasets`` as training input (``data.format: hf``).

Where the data comes from (``data.path``):

- a local file: ``.parquet``, ``.jsonl`` / ``.json``, ``.csv``, ``.arrow`` (the ``datasets`` builder of
  that name reads it);
- a folder written by ``Dataset.save_to_disk`` (``datasets.load_from_disk``), or a folder of data
  files (``datasets.load_dataset(folder)``);
- otherwise a hub dataset id, with ``data.subset`` (configuration name) and ``data.split``, through
  ``datasets.load_dataset`` (a real download; nothing here is mocked).

Larger than memory: ``datasets`` keeps the table as memory-mapped Arrow files on disk, and
:class:`DatasetExamples` turns a row into a :class:`~spladekit.train.data.TrainingExample` only when
the sampler asks for it, so only the rows of the current batch are in Python memory. With
``data.streaming: true`` a hub dataset (or a folder of data files) is streamed (``IterableDataset``,
nothing downloaded up front) and written row by row into the local Arrow cache
(``Dataset.from_generator``), or only its first ``data.max_queries`` rows are taken.

Column conventions (those of sentence-transformers, arXiv 1908.10084 and its v3 trainer docs): unless
``data.columns`` maps them by name, a ``score``/``scores``/``label``/``labels`` column holds the
teacher signal, ``*_id`` columns are ids, and the other columns in order are the query (anchor), the
positive and the hard negatives (``negative_1 … negative_n``, or one column holding a list of texts):

- ``(query, positive)`` pairs: in-batch negatives only;
- ``(query, positive, negative_1, …, negative_n)``: hard negatives;
- plus a score column for MarginMSE / KL: a list of ``1 + n`` teacher scores (positive first), or
  the sentence-transformers MarginMSE label: ``n`` margins ``s(q, d⁺) − s(q, d⁻_i)`` (a number when
  ``n = 1``). ``data.score_kind`` says which (``auto``: by the length). Margins are stored as teacher
  scores ``0`` for the positive and ``−margin_i`` for negative ``i``; MarginMSE sees exactly those
  margins and KL is unchanged by the per-query shift, so both losses are those of the given scores.

Bad rows (an empty or missing text, a non-numeric score, a score list of the wrong length, an empty
list of hard negatives while ``data.num_negatives`` > 0) raise
:class:`~spladekit.errors.DataFormatError` naming the source, the row number (``dataset[row]``,
0-based) and the column; every row is checked once, in Arrow batches, before training starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spladekit.errors import DataFormatError, ResolutionError
from spladekit.train.examples import TrainingExample

SCORE_COLUMNS = ("score", "scores", "label", "labels")
BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}


@dataclass(frozen=True)
class Layout:
    """Which columns play which part: ``query``, ``positive``, ``negatives`` (in order), ``scores``
    (or None) and ``query_id`` (or None: the row number is the query id)."""

    query: str
    positive: str
    negatives: tuple[str, ...]
    scores: str | None
    query_id: str | None
    score_kind: str = "auto"


def resolve_layout(column_names: Sequence[str], columns, score_kind: str = "auto", source: str = "") -> Layout:
    """The :class:`Layout` of a dataset from its column names and the ``data.columns`` mapping.

    Args:
        column_names: the dataset's columns, in order.
        columns: a :class:`~spladekit.train.config.ColumnsConfig` (fields left None are inferred by
            the sentence-transformers conventions, see the module docstring).

    Raises:
        DataFormatError: a mapped column that the dataset lacks, or fewer than two text columns.
    """
    names = list(column_names)
    for field in ("query", "positive", "scores", "query_id"):
        value = getattr(columns, field)
        if value is not None and value not in names:
            raise DataFormatError(source, f"no column {value!r} (columns: {names})", field=f"data.columns.{field}")
    for value in columns.negatives or ():
        if value not in names:
            raise DataFormatError(source, f"no column {value!r} (columns: {names})", field="data.columns.negatives")
    scores = columns.scores or next((c for c in SCORE_COLUMNS if c in names), None)
    query_id = columns.query_id or next((c for c in ("query_id", "qid") if c in names), None)
    named = {columns.query, columns.positive, scores, query_id, *(columns.negatives or ())}
    free = [c for c in names if c not in named and not c.endswith("_id") and c not in SCORE_COLUMNS]
    query = columns.query or (free.pop(0) if free else None)
    positive = columns.positive or (free.pop(0) if free else None)
    if query is None or positive is None:
        raise DataFormatError(
            source, f"needs a query and a positive text column, found columns {names}", field="data.columns"
        )
    negatives = tuple(columns.negatives) if columns.negatives is not None else tuple(free)
    return Layout(query, positive, negatives, scores, query_id, score_kind)


def _texts(value, row: int, column: str, source: str) -> list[str]:
    """The text(s) of one cell (a string, or a list of strings for list-valued negative columns)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise DataFormatError(
                source, f"row {row} (dataset[{row}]): expected a non-empty text, got {item!r}", field=column
            )
    return list(items)


def _teacher(value, n_neg: int, kind: str, row: int, column: str, source: str) -> list[float]:
    """Teacher scores ``[positive, negative_1, …]`` from a score cell (scores or margins, see the module docstring)."""
    from spladekit.data.numbers import finite_number

    values = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        values = [finite_number(v, source, column) for v in values]
    except DataFormatError as exc:  # the row named as every message of this reader names it
        raise DataFormatError(source, f"row {row} (dataset[{row}]): {exc.message}", field=column) from None
    if kind == "auto":
        kind = "scores" if len(values) == n_neg + 1 else "margins" if len(values) == n_neg else "?"
    if kind == "scores" and len(values) == n_neg + 1:
        return values
    if kind == "margins" and len(values) == n_neg:
        return [0.0] + [-m for m in values]
    raise DataFormatError(
        source,
        f"row {row} (dataset[{row}]): {len(values)} score(s) for 1 positive and {n_neg} "
        f"negative(s); expected {n_neg + 1} teacher scores or {n_neg} margins "
        f"(data.score_kind={kind!r})",
        field=column,
    )


def row_example(record: dict, row: int, layout: Layout, source: str = "", num_negatives: int = 0) -> TrainingExample:
    """One row as a :class:`TrainingExample`: query id = the ``query_id`` column or the row number;
    document ids ``"<row>+"`` (positive) and ``"<row>-<k>"`` (k-th negative, 1-based).

    Args:
        num_negatives: hard negatives a batch takes per query (``data.num_negatives``); when > 0, a
            row whose negative columns hold no text at all (an empty list) is an error.

    Raises:
        DataFormatError: a bad cell (naming the row and the column), or no hard negative in a row
            of a dataset with negative columns while ``num_negatives`` > 0.
    """
    query = _texts(record.get(layout.query), row, layout.query, source)
    if len(query) != 1:
        raise DataFormatError(source, f"row {row} (dataset[{row}]): one query text expected", field=layout.query)
    positive = _texts(record.get(layout.positive), row, layout.positive, source)
    if len(positive) != 1:
        raise DataFormatError(source, f"row {row} (dataset[{row}]): one positive text expected", field=layout.positive)
    negatives: list[str] = []
    for column in layout.negatives:
        negatives.extend(_texts(record.get(column), row, column, source))
    if num_negatives > 0 and layout.negatives and not negatives:
        raise DataFormatError(
            source,
            f"row {row} (dataset[{row}]): an empty list of hard negatives, but data.num_negatives is {num_negatives}",
            field=",".join(layout.negatives),
        )
    pos = [(f"{row}+", positive[0])]
    negs = [(f"{row}-{k}", text) for k, text in enumerate(negatives, 1)]
    teacher = None
    if layout.scores is not None:
        scores = _teacher(record.get(layout.scores), len(negs), layout.score_kind, row, layout.scores, source)
        teacher = {doc_id: s for (doc_id, _), s in zip(pos + negs, scores)}
    qid = str(record[layout.query_id]) if layout.query_id is not None else str(row)
    return TrainingExample(qid, query[0], pos, negs, teacher)


class DatasetExamples(Sequence):
    """A read-only sequence of :class:`TrainingExample` over a ``datasets.Dataset`` (memory-mapped
    Arrow): row ``i`` is converted when it is indexed. Slicing gives a list; :meth:`subset` a view."""

    def __init__(self, dataset, layout: Layout, source: str = "", rows: Sequence[int] | None = None):
        self.dataset, self.layout, self.source = dataset, layout, source
        self.rows = list(rows) if rows is not None else None  # original row numbers of a subset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        row = self.rows[index] if self.rows is not None else index
        return row_example(self.dataset[index], row, self.layout, self.source)

    def qids(self) -> list[str]:
        """Every example's query id (read from the id column, without converting the rows)."""
        if self.layout.query_id is not None:
            return [str(v) for v in self.dataset[self.layout.query_id]]
        return [str(r) for r in (self.rows if self.rows is not None else range(len(self)))]

    def subset(self, indices: Sequence[int]) -> DatasetExamples:
        """The examples at ``indices`` (a lazy ``Dataset.select`` view, row numbers kept)."""
        rows = [self.rows[i] for i in indices] if self.rows is not None else list(indices)
        return DatasetExamples(self.dataset.select(list(indices)), self.layout, self.source, rows)

    def check(self, batch_size: int = 1024, num_negatives: int = 0) -> None:
        """Convert every row once (in Arrow batches) so a bad row fails before training.

        Args:
            num_negatives: ``data.num_negatives`` (see :func:`row_example`).

        Raises:
            DataFormatError: the first bad row, by number and column.
        """
        start = 0
        for batch in self.dataset.iter(batch_size=batch_size):
            columns = list(batch)
            size = len(batch[columns[0]]) if columns else 0
            for k in range(size):
                index = start + k
                row = self.rows[index] if self.rows is not None else index
                row_example({c: batch[c][k] for c in columns}, row, self.layout, self.source, num_negatives)
            start += size
        if start == 0:
            raise DataFormatError(self.source, "the dataset has no rows")


def open_dataset(config):
    """The ``datasets.Dataset`` that a :class:`~spladekit.train.config.DataConfig` with
    ``format: hf`` names (see the module docstring for the sources).

    Raises:
        ResolutionError: ``datasets`` is not installed, or the source cannot be found or downloaded.
        DataFormatError: a local file that ``datasets`` cannot read.
    """
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - the project installs it
        from spladekit.errors import install_line

        raise ResolutionError(f"data.format 'hf' needs the 'datasets' package: {install_line('datasets')}") from exc
    path = Path(str(config.path)).expanduser()
    split = config.split
    try:
        if path.is_file():
            builder = BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise DataFormatError(path, f"unknown data file type {path.suffix!r}; use one of {sorted(BUILDERS)}")
            return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=config.cache_dir)
        if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
            loaded = datasets.load_from_disk(str(path))
            return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
        if not path.is_dir() and (str(config.path).startswith((".", "/", "~")) or path.suffix.lower() in BUILDERS):
            raise ResolutionError(f"data.path {config.path}: no such file or folder")
        name = str(path) if path.is_dir() else str(config.path)  # a folder of data files, or a hub id
        if config.streaming:
            if config.max_queries is not None:
                stream = datasets.load_dataset(name, config.subset, split=split, streaming=True)
                return datasets.Dataset.from_list(list(stream.take(config.max_queries)))
            return datasets.Dataset.from_generator(
                _stream_rows,
                gen_kwargs={"name": name, "subset": config.subset, "split": split},
                cache_dir=config.cache_dir,
            )
        return datasets.load_dataset(name, config.subset, split=split, cache_dir=config.cache_dir)
    except (DataFormatError, ResolutionError):
        raise
    except FileNotFoundError as exc:
        raise ResolutionError(f"data.path {config.path}: {exc}") from exc
    except (datasets.exceptions.DatasetNotFoundError, ConnectionError, OSError) as exc:
        raise ResolutionError(f"data.path {config.path}: cannot load the dataset ({str(exc).splitlines()[0]})") from exc
    except ValueError as exc:  # e.g. an unknown split, or a file the builder cannot parse
        raise DataFormatError(str(config.path), f"cannot read it as a dataset ({str(exc).splitlines()[0]})") from exc


def _stream_rows(name: str, subset: str | None, split: str):
    """Rows of a streamed hub dataset (``Dataset.from_generator`` writes them to the Arrow cache)."""
    import datasets

    yield from datasets.load_dataset(name, subset, split=split, streaming=True)


def read_hf_dataset(config) -> DatasetExamples:
    """The training examples of a ``format: hf`` :class:`~spladekit.train.config.DataConfig`,
    checked row by row (see the module docstring).

    Raises:
        ResolutionError, DataFormatError: see :func:`open_dataset` and :meth:`DatasetExamples.check`.
    """
    dataset = open_dataset(config)
    source = str(config.path)
    layout = resolve_layout(dataset.column_names, config.columns, config.score_kind, source)
    examples = DatasetExamples(dataset, layout, source)
    if config.max_queries is not None and len(examples) > config.max_queries:
        examples = examples.subset(range(config.max_queries))
    examples.check(num_negatives=config.num_negatives)
    return examples
