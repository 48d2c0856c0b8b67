"""Anserini impact formats: ``JsonVectorCollection`` documents and pre-encoded queries.

Documents (one JSON object a line, Anserini's ``JsonVectorCollection``)::

    {"id": "d1", "contents": "text", "vector": {"token": 31, "##ing": 5}}

Queries (Anserini's pre-encoded query TSV; ``-impact -pretokenized`` search)::

    qid<TAB>tok tok tok ...        each token repeated by its integer weight

Two limits of Anserini 0.25.0 (Lucene 9.9.1), both checked with the real engine in
``tests/index/formats/test_engines.py``:

* **Empty queries.** ``-topicReader TsvString`` trims each line and then reads the second field,
  so a line ``qid<TAB>`` makes it fail the *whole* run (``Error: Unable to load topic reader
  "TsvString"``) while the JVM exits 0. A query with no term left after quantisation is therefore
  **left out** of the file; :class:`QueryFile` lists those ids (the export records them in
  ``export.json`` and reports them on stderr). Such a query matches nothing on any backend.
* **Clause limit.** Each distinct query token becomes one clause of a Lucene ``BooleanQuery``,
  and Lucene refuses more than :data:`MAX_CLAUSES` (``IndexSearcher.maxClauseCount``, 1,024)
  with ``TooManyClauses``, again with exit status 0 and the query missing from the run. A query
  with more distinct terms is an error naming it, unless ``query_top_k`` (≤ 1,024) is given: each
  query then keeps its ``query_top_k`` largest integer impacts (ties: lower vocabulary id), and
  the pruned query ids are listed. The score of a pruned query is the exact dot product of the
  pruned query, never a silent partial result.

:func:`index_collection` and :func:`search_collection` run Anserini's ``IndexCollection`` and
``SearchCollection`` and raise :class:`AnseriniError` when its output reports an error, since its
exit status does not.

Weights are integers ``⌊w · scale + 1/2⌋`` (:func:`spladekit.index.formats.quantise`); Anserini
indexes them as term frequencies and scores ``Σ_j q_j · d_j`` with its impact similarity
(Mackenzie et al., 2021, "Wacky Weights in Learned Sparse Representations"). Pre-encoded query
files write tokens in ascending vocabulary id, each token's repeats together, which is the order
of the published SPLADE-v3 files, so an imported file re-exports byte for byte.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.data.tsv import iter_tsv
from spladekit.errors import SpladekitError
from spladekit.index.formats import (
    collect_rows,
    iter_rows,
    lookup_tokens,
    normalise_entries,
    quantise,
    read_token_vectors,
    rows_to_csr,
    token_index,
    token_vector_rows,
    write_token_vectors,
)
from spladekit.io import atomic_write

MAX_CLAUSES = 1024  # Lucene 9 IndexSearcher.getMaxClauseCount() default (Anserini 0.25 does not raise it)
ANSERINI_VERSION = "0.25.0"


class AnseriniError(SpladekitError, RuntimeError):
    """Anserini reported an error in its output (its JVM exits 0 all the same)."""


@dataclass
class QueryFile:
    """What :func:`write_preencoded_queries` wrote.

    Attributes:
        count: query lines written.
        empty: ids of queries left out because no term survived quantisation (see module docstring).
        pruned: ids of queries cut to their ``query_top_k`` heaviest terms.
    """

    count: int
    empty: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)


def prune_top_k(idx: np.ndarray, impacts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the ``k`` largest ``impacts`` (ties: lower column id), returned in ascending column id."""
    if idx.size <= k:
        return idx, impacts
    keep = np.sort(np.lexsort((idx, -impacts))[:k])
    return idx[keep], impacts[keep]


def write_json_vector_collection(
    path: str | Path,
    matrix: sp.spmatrix,
    doc_ids: Sequence[str],
    vocabulary: Sequence[str],
    scale: float = 100.0,
    contents: Sequence[str] | None = None,
) -> int:
    """Write ``[D, V]`` vectors as an Anserini ``JsonVectorCollection`` JSONL file (atomically).

    Args:
        path: output ``.jsonl`` file.
        matrix: ``[D, V]`` float weights.
        doc_ids: D ids.
        vocabulary: V token strings (keys of ``vector``).
        scale: quantisation scale (integer impact = ``⌊w · scale + 1/2⌋``; zeros dropped).
        contents: optional D texts for ``contents`` (default ``""``).

    Returns:
        The number of documents written.

    Raises:
        ValueError: lengths disagree.
    """
    return write_token_vectors(
        path, matrix, doc_ids, vocabulary, contents, "contents", lambda val: [int(n) for n in quantise(val, scale)]
    )


def read_json_vector_collection(
    path: str | Path, vocabulary: Sequence[str], scale: float = 100.0
) -> tuple[sp.csr_matrix, list[str], list[str]]:
    """Read a ``JsonVectorCollection`` file back into ``[D, V]`` weights ``impact / scale``.

    Repeated keys in a ``vector`` object are summed (module rule in :mod:`spladekit.index.formats`).

    Returns:
        ``(matrix [D, V] float32, doc ids, contents)``.

    Raises:
        DataFormatError: a line that is not valid JSON, a missing field, a non-numeric weight, or a token outside
            the vocabulary (naming the file and line).
    """
    rows, ids, texts = [], [], []
    for record, row in read_token_vectors(path, vocabulary, scale):
        rows.append(row)
        ids.append(str(record["id"]))
        texts.append(str(record.get("contents", "")))
    return rows_to_csr(rows, len(vocabulary)), ids, texts


def collection_rows(path: str | Path, vocabulary: Sequence[str], scale: float = 100.0):
    """The documents of a ``JsonVectorCollection`` file one at a time (``contents`` not kept):
    yields ``(doc id, (column ids int64, weights impact / scale float32))``, entries normalised.

    Raises:
        DataFormatError: as :func:`read_json_vector_collection` (naming the file and line).
    """
    return token_vector_rows(path, vocabulary, scale)


def check_query_top_k(query_top_k: int | None) -> int | None:
    """``query_top_k`` if it is None or an integer in 1 … :data:`MAX_CLAUSES` (Lucene's clause
    limit), else ValueError."""
    if query_top_k is not None and not (isinstance(query_top_k, int) and 1 <= query_top_k <= MAX_CLAUSES):
        raise ValueError(
            f"query_top_k must be an integer in 1…{MAX_CLAUSES} (Lucene's clause limit), got {query_top_k!r}"
        )
    return query_top_k


def write_preencoded_queries(
    path: str | Path,
    matrix: sp.spmatrix,
    query_ids: Sequence[str],
    vocabulary: Sequence[str],
    scale: float = 100.0,
    query_top_k: int | None = None,
) -> QueryFile:
    """Write ``[Q, V]`` query vectors in Anserini's pre-encoded format (atomically).

    Each line is ``qid<TAB>`` then the tokens in ascending vocabulary id, each repeated
    ``⌊w · scale + 1/2⌋`` times, separated by single spaces. A query whose every weight rounds to
    0 is left out (Anserini cannot read ``qid<TAB>``; module docstring) and listed in the result.

    Args:
        query_top_k: keep each query's ``query_top_k`` largest impacts (1 … :data:`MAX_CLAUSES`);
            default: no pruning, and a query with more than :data:`MAX_CLAUSES` distinct terms
            is an error.

    Returns:
        :class:`QueryFile` (lines written, ids left out, ids pruned).

    Raises:
        ValueError: lengths disagree, a token contains white space (it could not be read back),
            ``query_top_k`` outside 1 … 1,024, or a query with more than :data:`MAX_CLAUSES`
            distinct terms and no ``query_top_k`` (naming the query).
    """
    if matrix.shape[0] != len(query_ids) or matrix.shape[1] != len(vocabulary):
        raise ValueError(f"matrix {matrix.shape} vs {len(query_ids)} ids and {len(vocabulary)} tokens")
    check_query_top_k(query_top_k)
    result = QueryFile(count=0)
    with atomic_write(path) as out:
        for qid, (idx, val) in zip(query_ids, iter_rows(matrix)):
            impacts = quantise(val, scale)
            idx, impacts = idx[impacts > 0], impacts[impacts > 0]
            if idx.size == 0:
                result.empty.append(str(qid))
                continue
            if query_top_k is not None and idx.size > query_top_k:
                idx, impacts = prune_top_k(idx, impacts, query_top_k)
                result.pruned.append(str(qid))
            if idx.size > MAX_CLAUSES:
                raise ValueError(
                    f"query {qid!r} has {idx.size} distinct terms after quantisation, more than Lucene's "
                    f"{MAX_CLAUSES}-clause limit (Anserini would drop it from the run): prune it with "
                    f"query_top_k (--query-top-k) ≤ {MAX_CLAUSES}"
                )
            words = []
            for j, n in zip(idx, impacts):
                token = vocabulary[j]
                if any(c.isspace() for c in token) or not token:
                    raise ValueError(f"token {token!r} (id {j}) cannot be written in a space-separated query")
                words.extend([token] * int(n))
            out.write(f"{qid}\t{' '.join(words)}\n")
            result.count += 1
    return result


def read_preencoded_queries(
    path: str | Path, vocabulary: Sequence[str], scale: float = 100.0
) -> tuple[sp.csr_matrix, list[str]]:
    """Read an Anserini pre-encoded query file: weight of a token = its count / ``scale``.

    Tokens may come in any order; repeats anywhere on the line add up.

    Returns:
        ``(matrix [Q, V] float32, query ids)``.

    Raises:
        DataFormatError: a line without a tab, an empty or repeated query id
            (:func:`spladekit.data.tsv.iter_tsv`), or a token outside the vocabulary (naming the
            file and line).
    """
    return collect_rows(query_rows(path, vocabulary, scale), len(vocabulary))


def query_rows(path: str | Path, vocabulary: Sequence[str], scale: float = 100.0):
    """The queries of a pre-encoded query file one at a time: yields ``(query id, (column ids
    int64, weights count / scale float32))``. The ids seen are kept (a set) to refuse a repeat.

    Raises:
        DataFormatError: as :func:`read_preencoded_queries` (naming the file and line).
    """
    index = token_index(vocabulary)
    for number, qid, text in iter_tsv(path):
        cols = lookup_tokens(text.split(), index, path, number)
        yield qid, normalise_entries(cols, np.full(len(cols), 1.0 / scale))


ERROR_MARKERS = ("Exception", "Error:", "ERROR")


def _java(jar: str | Path, main: str, args: Sequence[str], java: str = "java", timeout: float | None = None) -> str:
    """Run ``java -cp jar main args…``; returns its combined output.

    Raises:
        AnseriniError: non-zero exit, or an output line naming an exception or error (Anserini's
            JVM exits 0 after ``TooManyClauses`` or an unreadable topic file).
        FileNotFoundError: no ``java`` executable.
    """
    cmd = [java, "-cp", str(jar), main, *map(str, args)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    bad = [line for line in proc.stdout.splitlines() if any(m in line for m in ERROR_MARKERS)]
    if proc.returncode != 0 or bad:
        detail = "\n".join(bad[:5]) or proc.stdout[-2000:]
        raise AnseriniError(f"{main} failed (exit {proc.returncode}):\n{detail}")
    return proc.stdout


def index_collection(jar: str | Path, input_dir: str | Path, index_dir: str | Path, threads: int = 1, **run) -> str:
    """Index a folder of ``JsonVectorCollection`` files (an ``anserini`` export) as integer impacts.

    Runs ``IndexCollection -collection JsonVectorCollection -generator DefaultLuceneDocumentGenerator
    -impact -pretokenized``. Anserini reads *every* file of its input folder, and the export's
    ``export.json`` makes it log an "Unexpected Exception"; so when the folder holds other files
    than ``*.jsonl``, Anserini is given a temporary folder of links to the ``*.jsonl`` files only.
    Documents without any term are counted "empty" and not indexed by Anserini (they match no
    query anyway). Returns Anserini's output.

    Raises:
        AnseriniError: Anserini reported an error (see :func:`_java`).
    """
    import tempfile

    input_dir = Path(input_dir)
    files = sorted(p for p in input_dir.iterdir() if not p.name.startswith("."))
    with tempfile.TemporaryDirectory(prefix="spladekit-anserini-") as staging:
        if any(p.suffix != ".jsonl" for p in files):
            for p in files:
                if p.suffix == ".jsonl":
                    (Path(staging) / p.name).symlink_to(p.resolve())
            input_dir = Path(staging)
        args = [
            "-collection",
            "JsonVectorCollection",
            "-input",
            input_dir,
            "-index",
            index_dir,
            "-generator",
            "DefaultLuceneDocumentGenerator",
            "-impact",
            "-pretokenized",
            "-threads",
            threads,
        ]
        return _java(jar, "io.anserini.index.IndexCollection", args, **run)


def search_collection(
    jar: str | Path,
    index_dir: str | Path,
    topics: str | Path,
    run_file: str | Path,
    hits: int = 1000,
    threads: int = 1,
    **run,
) -> str:
    """Search pre-encoded queries (``queries.tsv``) with ``-impact -pretokenized -topicReader TsvString``.

    The TREC run is written to ``run_file``; scores are ``Σ_j q_j · d_j`` over integer impacts.
    Returns Anserini's output.

    Raises:
        AnseriniError: Anserini reported an error, or wrote no run file.
    """
    args = [
        "-index",
        index_dir,
        "-topics",
        topics,
        "-topicReader",
        "TsvString",
        "-output",
        run_file,
        "-impact",
        "-pretokenized",
        "-hits",
        hits,
        "-threads",
        threads,
    ]
    output = _java(jar, "io.anserini.search.SearchCollection", args, **run)
    if not Path(run_file).exists():
        raise AnseriniError(f"SearchCollection wrote no run file {run_file}:\n{output[-2000:]}")
    return output
