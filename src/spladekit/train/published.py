"""Published teacher-score files as training input.

- naver/splade's ``pkl.gz`` (a gzipped pickle ``{qid: {pid: score}}``, e.g. its
  ``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``) with its qrels and collections:
  ``data.format: naver`` with ``data.teacher_scores`` naming the pickle (:func:`read_score_pickle`,
  used by :func:`spladekit.train.data.read_score_file`);
- sentence-transformers' ``msmarco-hard-negatives`` (hub dataset of that name, its README):
  ``msmarco-hard-negatives.jsonl.gz`` lines ``{"qid": 867436, "pos": [5238393], "neg": {"bm25": [...], ...}}``
  and the pickle ``scores[qid][pid] -> cross_encoder_score``: ``data.format: st-hard-negatives``
  (:func:`read_st_hard_negatives`; ``data.path`` the jsonl, ``data.teacher_scores`` the pickle,
  ``data.corpus`` / ``data.queries`` the MS MARCO ``collection.tsv`` / ``queries.train.tsv``,
  ``data.negative_systems`` the ``neg`` keys to use, default all, in file order);
- the id-based columns of sentence-transformers' MS MARCO margin-MSE sets (hub
  ``sentence-transformers/msmarco``, subset ``bert-ensemble-margin-mse``: ``query_id, positive_id,
  negative_id, score`` with ``score = s(q, d⁺) − s(q, d⁻)``; texts in its ``corpus`` (``passage_id,
  passage``) and ``queries`` (``query_id, query``) subsets): ``data.format: st-margin-mse``
  (:func:`read_st_margin_mse`); a margin is stored as teacher scores ``0`` (positive) and
  ``−score`` (negative), as :mod:`spladekit.train.hf` stores margins;
- ir_datasets training triples (``data.format: triples``, ``data.path: irds:msmarco-passage/train/triples-small``):
  :func:`read_irds_docpairs`.

Ids follow :mod:`spladekit.data.ids` (the pickles hold ``int`` keys, the TSV files strings: ``10``
and ``"10"`` are one id, and two raw ids of one table that are one id are refused), every score
:func:`spladekit.data.numbers.finite_number`. A pickle is read by :mod:`spladekit.data.pickles` (plain data only: no code
runs). A bad line, an id missing from the corpus or queries, or a pair without a teacher score raises
:class:`~spladekit.errors.DataFormatError` naming the file and the line (or row).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from spladekit.data.ids import normalise_id, unique_ids
from spladekit.data.numbers import finite_number
from spladekit.errors import DataFormatError
from spladekit.train.examples import TrainingExample


def read_score_pickle(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a (gzipped, when the name ends in ``.gz``) pickle ``{qid: {pid: score}}`` of plain data
    (:func:`spladekit.data.pickles.load_plain_pickle`: no code runs, whatever the file holds); ids by
    :func:`spladekit.data.ids.unique_ids`, scores by :func:`spladekit.data.numbers.finite_number`.

    Raises:
        DataFormatError: missing; a global that is not plain data (named); not a pickle; not a nested
            mapping; one inner mapping under two queries; two ids that are one (naming both); a
            score that is not a finite number (naming ``qid.pid``).
    """
    from spladekit.data.pickles import load_plain_pickle

    path = Path(path)
    data = load_plain_pickle(path)
    if not isinstance(data, dict):
        raise DataFormatError(path, f"expected a dict {{qid: {{pid: score}}}}, got {type(data).__name__}")
    out: dict[str, dict[str, float]] = {}
    seen: dict[int, object] = {}
    for qid, docs in unique_ids(data.items(), path, "query").items():
        if not isinstance(docs, dict):
            raise DataFormatError(path, f"expected a dict {{pid: score}}, got {type(docs).__name__}", field=qid)
        if id(docs) in seen:  # a pickle reference: a small file would read as queries × documents scores
            raise DataFormatError(
                path,
                f"queries {seen[id(docs)]!r} and {qid!r} share one mapping of scores (a "
                "pickle reference, not a score file)",
                field=qid,
            )
        seen[id(docs)] = qid
        out[qid] = {
            pid: finite_number(s, path, f"{qid}.{pid}")
            for pid, s in unique_ids(docs.items(), path, "document", qid).items()
        }
    return out


#: text columns of id-based datasets, by name, in order of preference (sentence-transformers' ``corpus``
#: and ``queries`` subsets name theirs ``passage`` and ``query``)
TEXT_COLUMNS = ("text", "passage", "query", "document", "contents", "body")


def read_id_texts(path: str | Path) -> dict[str, str]:
    """``{id: text}`` of the texts of an id-based training format, ids by :func:`spladekit.data.ids.unique_ids`:

    - an ``id<TAB>text`` TSV (MS MARCO's ``collection.tsv``, ``queries.train.tsv``);
    - a BEIR ``corpus.jsonl`` / ``queries.jsonl`` (lines with ``_id`` and ``text``), read as BEIR reads
      it: ``title + " " + text`` (:func:`spladekit.data.beir.read_corpus`, the project's one rule);
    - a dataset file or ``save_to_disk`` folder with an id column (``id``/``_id``/``*_id``) and a text
      column chosen by name: ``text`` (with ``title`` before it when there is one, BEIR's rule), else
      the first of :data:`TEXT_COLUMNS` present, else the only other string column.

    Raises:
        DataFormatError: a bad line or row (naming it), two ids that are one, no id or text column, or
            several string columns none of which is named as a text.
    """
    from spladekit.data.beir import document_text, read_corpus

    path = Path(path)
    if not path.exists():
        raise DataFormatError(path, "missing")
    if path.is_file() and path.name.endswith((".tsv", ".tsv.gz", ".txt")):
        from spladekit.data.tsv import read_tsv

        return read_tsv(path)
    if path.is_file() and path.name.endswith((".jsonl", ".jsonl.gz")) and _is_beir_jsonl(path):
        return read_corpus(path)
    dataset = _open(path)
    names = dataset.column_names
    id_column = next((c for c in names if c in ("id", "_id") or c.endswith("_id")), None)
    strings = [
        c for c in names if c != id_column and getattr(dataset.features[c], "dtype", None) in ("string", "large_string")
    ]
    text_column = next((c for c in TEXT_COLUMNS if c in strings), strings[0] if len(strings) == 1 else None)
    if id_column is None or not strings:
        raise DataFormatError(path, f"needs an id column (*_id) and a text column, found {names}")
    if text_column is None:
        raise DataFormatError(
            path,
            f"which column is the text? string columns {strings}, none named {' or '.join(TEXT_COLUMNS)}",
            field=", ".join(strings),
        )
    titles = dataset["title"] if text_column == "text" and "title" in strings else None
    rows = []
    for row, (key, text) in enumerate(zip(dataset[id_column], dataset[text_column])):
        if not isinstance(text, str):
            raise DataFormatError(path, f"row {row}: expected a text, got {text!r}", field=text_column)
        rows.append((key, document_text(titles[row], text) if titles is not None else text))
    return unique_ids(rows, path, field=id_column)


def _is_beir_jsonl(path: Path) -> bool:
    """Whether the first line of a JSON Lines file is a BEIR record (an object with ``_id`` and ``text``)."""
    from spladekit.io import read_jsonl

    first = next(iter(read_jsonl(path)), (None, None))[1]
    return isinstance(first, dict) and "_id" in first and "text" in first


def _open(path: Path):
    from types import SimpleNamespace

    from spladekit.train.hf import open_dataset

    return open_dataset(
        SimpleNamespace(path=str(path), split="train", subset=None, cache_dir=None, streaming=False, max_queries=None)
    )


def _need(path: str | None, field: str, fmt: str) -> Path:
    if not path:
        raise DataFormatError("<config>", f"data.format {fmt!r} needs {field}", field=field)
    return Path(path)


def read_st_hard_negatives(
    path: str | Path, scores: str | Path, corpus: str | Path, queries: str | Path, systems: list[str] | None = None
) -> list[TrainingExample]:
    """sentence-transformers' ``msmarco-hard-negatives`` (see the module docstring): one example per
    jsonl line with a positive; negatives: the ``neg`` lists of ``systems`` (all when None) in order,
    without repeats or positives; teacher: the pickle's scores of the positives and negatives. Lines
    whose ``pos`` is empty give no training pair: skipped with one ``UserWarning`` counting them.

    Raises:
        DataFormatError: a bad line; a qid/pid the queries/corpus lack; a system the line lacks; a
            pair without a score in the pickle (each naming the jsonl file and line).
    """
    from spladekit.io import read_jsonl

    path = Path(path)
    ce = read_score_pickle(scores)
    corpus_text, query_text = read_id_texts(corpus), read_id_texts(queries)
    examples, unpaired = [], []
    for number, record in read_jsonl(path):
        if (
            not isinstance(record, dict)
            or "qid" not in record
            or not isinstance(record.get("pos"), list)
            or not isinstance(record.get("neg"), dict)
        ):
            raise DataFormatError(path, 'expected {"qid": …, "pos": [pid, …], "neg": {system: [pid, …]}}', line=number)
        qid = normalise_id(record["qid"], path, "qid", number)
        if qid not in query_text:
            raise DataFormatError(path, f"query id {qid!r} is not in {Path(queries).name}", line=number, field="qid")
        positives = [normalise_id(p, path, "pos", number) for p in record["pos"]]
        negatives = _st_negatives(record["neg"], systems, positives, path, number)
        if not positives:
            unpaired.append(number)  # a query without a positive gives no training pair
            continue
        teacher = {}
        for field, pid in [("pos", p) for p in positives] + [("neg", n) for n in negatives]:
            if pid not in corpus_text:
                raise DataFormatError(
                    path, f"passage id {pid!r} is not in {Path(corpus).name}", line=number, field=field
                )
            if pid not in ce.get(qid, {}):
                raise DataFormatError(
                    path,
                    f"no teacher score for (qid {qid}, pid {pid}) in {Path(scores).name}",
                    line=number,
                    field=field,
                )
            teacher[pid] = ce[qid][pid]
        examples.append(
            TrainingExample(
                qid,
                query_text[qid],
                [(p, corpus_text[p]) for p in positives],
                [(n, corpus_text[n]) for n in negatives],
                teacher,
            )
        )
    if not examples:
        raise DataFormatError(path, "no line with a positive")
    if unpaired:
        shown = ", ".join(map(str, unpaired[:5])) + (" …" if len(unpaired) > 5 else "")
        warnings.warn(
            f"{path}: {len(unpaired)} line(s) without a positive skipped (no training pair), lines {shown}; "
            f"{len(examples)} read",
            stacklevel=2,
        )
    return examples


def _st_negatives(neg: dict, systems: list[str] | None, positives: list[str], path: Path, number: int) -> list[str]:
    """The negatives of one line: the ``neg`` lists of ``systems`` (all when None) in order, without repeats or
    positives.

    Raises:
        DataFormatError: a system the line lacks, or a list that is not one (naming the file and line).
    """
    names = systems if systems is not None else list(neg)
    negatives: list[str] = []
    for name in names:
        if name not in neg:
            raise DataFormatError(path, f"no negatives of system {name!r} (has {list(neg)})", line=number, field="neg")
        if not isinstance(neg[name], list):
            raise DataFormatError(path, "expected a list of passage ids", line=number, field=f"neg.{name}")
        for pid in neg[name]:
            pid = normalise_id(pid, path, f"neg.{name}", number)
            if pid not in positives and pid not in negatives:
                negatives.append(pid)
    return negatives


def _margin_rows(path: Path):
    """``(where, record)`` of a margin-MSE file: JSONL lines (``where`` = 1-based line) or dataset rows."""
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        from spladekit.io import read_jsonl

        for number, record in read_jsonl(path):
            yield {"line": number}, record
        return
    for row, record in enumerate(_open(path)):
        yield {"field": f"row {row}"}, record


def read_st_margin_mse(path: str | Path, corpus: str | Path, queries: str | Path) -> list[TrainingExample]:
    """sentence-transformers' id-based margin-MSE rows (``query_id, positive_id, negative_id, score``)
    resolved against ``corpus`` and ``queries`` (:func:`read_id_texts`): one example per row,
    teacher ``{positive_id: 0, negative_id: −score}``.

    Raises:
        DataFormatError: a missing column, an id the corpus/queries lack, positive = negative, a
            non-numeric score (naming the file and the line, or the row for parquet/arrow).
    """
    path = Path(path)
    corpus_text, query_text = read_id_texts(corpus), read_id_texts(queries)
    examples = []
    for where, record in _margin_rows(path):
        for column in ("query_id", "positive_id", "negative_id", "score"):
            if not isinstance(record, dict) or column not in record:
                raise DataFormatError(
                    path, f"missing column {column!r}", line=where.get("line"), field=where.get("field", column)
                )
        at = f"{where['field']}: " if "field" in where else ""
        qid, pos, neg = (
            normalise_id(record[c], path, f"{at}{c}", where.get("line"))
            for c in ("query_id", "positive_id", "negative_id")
        )
        if qid not in query_text:
            raise DataFormatError(
                path, f"{at}query id {qid!r} is not in {Path(queries).name}", line=where.get("line"), field="query_id"
            )
        for column, pid in (("positive_id", pos), ("negative_id", neg)):
            if pid not in corpus_text:
                raise DataFormatError(
                    path, f"{at}passage id {pid!r} is not in {Path(corpus).name}", line=where.get("line"), field=column
                )
        if pos == neg:
            raise DataFormatError(
                path, f"{at}the positive and the negative are the same passage {pos!r}", line=where.get("line")
            )
        value = finite_number(record["score"], path, f"{at}score", where.get("line"))
        examples.append(
            TrainingExample(
                qid, query_text[qid], [(pos, corpus_text[pos])], [(neg, corpus_text[neg])], {pos: 0.0, neg: -value}
            )
        )
    if not examples:
        raise DataFormatError(path, "no rows")
    return examples


def read_irds_docpairs(dataset_id: str, max_queries: int | None = None) -> list[TrainingExample]:
    """Training triples of an ir_datasets id with docpairs (``msmarco-passage/train/triples-small``:
    ``query_id, doc_id_a`` (positive), ``doc_id_b`` (negative)), texts from its queries and its docstore;
    one example per pair (ids kept), the first ``max_queries`` pairs when given.

    Raises:
        ResolutionError: see :func:`spladekit.data.irds.load_irds`.
        DataFormatError: a pair naming a query or document the dataset lacks (naming pair k, 1-based, as the line).
    """
    from itertools import islice

    from spladekit.data.irds import PREFIX, load_irds

    dataset, _ = load_irds(dataset_id, ("docs", "queries", "docpairs"))
    source = f"{PREFIX}{dataset_id}"
    queries = {q.query_id: q.text for q in dataset.queries_iter()}
    pairs = list(islice(dataset.docpairs_iter(), max_queries))
    store = dataset.docs_store()
    docs = store.get_many({d for p in pairs for d in (p.doc_id_a, p.doc_id_b)})
    examples = []
    for number, pair in enumerate(pairs, 1):
        if pair.query_id not in queries:
            raise DataFormatError(
                source, f"query id {pair.query_id!r} of docpair {number} is not in its queries", line=number
            )
        for field, doc_id in (("doc_id_a", pair.doc_id_a), ("doc_id_b", pair.doc_id_b)):
            if doc_id not in docs:
                raise DataFormatError(
                    source, f"document {doc_id!r} of docpair {number} is not in its documents", line=number, field=field
                )
        examples.append(
            TrainingExample(
                pair.query_id,
                queries[pair.query_id],
                [(pair.doc_id_a, docs[pair.doc_id_a].text)],
                [(pair.doc_id_b, docs[pair.doc_id_b].text)],
            )
        )
    if not examples:
        raise DataFormatError(source, "no docpairs")
    return examples


def load_published(config) -> list[TrainingExample]:
    """The examples of a ``data.format`` ``st-hard-negatives`` or ``st-margin-mse`` config."""
    fmt = config.format
    if fmt == "st-hard-negatives":
        return read_st_hard_negatives(
            config.path,
            _need(config.teacher_scores, "data.teacher_scores", fmt),
            _need(config.corpus, "data.corpus", fmt),
            _need(config.queries, "data.queries", fmt),
            config.negative_systems,
        )
    return read_st_margin_mse(
        config.path, _need(config.corpus, "data.corpus", fmt), _need(config.queries, "data.queries", fmt)
    )
