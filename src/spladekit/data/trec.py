"""TREC-format qrels and runs, and BEIR's TSV qrels.

- TREC qrels: ``qid 0|Q0 docid grade`` (whitespace separated), Voorhees & Harman, "TREC" (2005).
- BEIR qrels: TSV ``query-id<TAB>corpus-id<TAB>score`` with an optional header line.
- TREC run: ``qid Q0 docid rank score tag``.

Runs and qrels are plain dicts: run ``{qid: {docid: score}}``, qrels ``{qid: {docid: grade}}``.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

from spladekit.errors import DataFormatError
from spladekit.io import atomic_write, iter_lines

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

# trec_eval (through pytrec_eval / ir_measures) holds one 8-byte entry per grade value up to the largest
# grade, and a grade past the int32 range breaks its gains (nDCG@10 = 0.0 for every query; the readings:
# benchmarks/runs/2026-12-07-source-notes.md). Real qrels grade 0-4; 2**20 costs 8 MB.
GRADE_MIN, GRADE_MAX = -(2**31), 2**20


def _grade(path: Path, number: int, token: str) -> int:
    try:
        if "_" in token:  # Python's float() reads "1_0" as 10
            raise ValueError(token)
        value = float(token)
    except ValueError as exc:
        raise DataFormatError(path, f"grade {token!r} is not a number", line=number, field="grade") from exc
    if not math.isfinite(value) or value != int(value):
        raise DataFormatError(path, f"grade {token!r} is not an integer", line=number, field="grade")
    if not GRADE_MIN <= value <= GRADE_MAX:  # see GRADE_MAX
        raise DataFormatError(
            path,
            f"grade {token!r} is outside [{GRADE_MIN}, {GRADE_MAX}]: trec_eval (pytrec_eval, "
            "ir_measures) allocates memory for every grade value up to the largest",
            line=number,
            field="grade",
        )
    return int(value)


def read_qrels(path: str | Path) -> Qrels:
    """Read qrels in TREC (4 columns) or BEIR TSV (3 columns, optional header) format.

    Returns:
        ``{query_id: {doc_id: grade}}``. Grade 0 means judged non-relevant and is kept.

    Raises:
        DataFormatError: wrong column count, a line whose column count differs from the file's
            first judgment line (a line cut off mid-way in a TREC file reads as a BEIR line with the
            document ``Q0``), a non-integer grade or one outside [-2**31, 2**20] (GRADE_MAX), a repeated
            (query, doc) pair with a different grade, or an empty file.
    """
    path = Path(path)
    qrels: Qrels = {}
    seen_any = False
    columns = None  # the file's format, set by its first judgment line
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        parts = [p.strip() for p in parts]
        if number == 1 and len(parts) == 3 and parts[2].lower() in {"score", "relevance", "grade", "label"}:
            continue  # BEIR header
        if len(parts) in (3, 4):
            if columns is None:
                columns = len(parts)
            elif len(parts) != columns:
                raise DataFormatError(
                    path,
                    f"{len(parts)} columns, but the file's first judgment has {columns} "
                    f"({'TREC' if columns == 4 else 'BEIR'}): a cut or mixed line",
                    line=number,
                )
        if len(parts) == 4:
            qid, _, docid, grade_token = parts
        elif len(parts) == 3:
            qid, docid, grade_token = parts
        else:
            raise DataFormatError(path, f"expected 3 (BEIR) or 4 (TREC) columns, got {len(parts)}", line=number)
        if not qid or not docid:
            raise DataFormatError(path, "empty query or document id", line=number)
        grade = _grade(path, number, grade_token)
        seen_any = True
        previous = qrels.setdefault(qid, {}).get(docid)
        if previous is not None and previous != grade:
            raise DataFormatError(
                path, f"({qid}, {docid}) judged twice with grades {previous} and {grade}", line=number
            )
        qrels[qid][docid] = grade
    if not seen_any:
        raise DataFormatError(path, "no judgments: file is empty")
    return qrels


def read_run(path: str | Path, dedupe: bool = False) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``) into ``{qid: {docid: score}}``.

    The rank column is not used: evaluation orders by score, ties by document id
    (:func:`sorted_ranking`), the same rule :func:`write_run` uses, so a run written by spladekit
    reads back in its file order.

    Args:
        path: the run file (``.gz`` allowed).
        dedupe: a document listed twice for one query is an error by default; with ``dedupe=True``
            its highest score is kept (the first line on equal scores) and a ``UserWarning`` gives
            the number of dropped lines. A duplicate would otherwise count its relevance twice
            (nDCG above 1).

    Raises:
        DataFormatError: wrong column count, a non-numeric or non-finite score, a document listed
            twice for a query (unless ``dedupe``), or a file without any result line.
    """
    path = Path(path)
    run: Run = {}
    dropped = 0
    first_duplicate = None
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise DataFormatError(
                path, f"expected 6 columns (qid Q0 docid rank score tag), got {len(parts)}", line=number
            )
        qid, _, docid, _, score_token, _ = parts
        try:
            if "_" in score_token:  # Python's float() reads "1_0" as 10; C's strtod (trec_eval) reads 1
                raise ValueError(score_token)
            score = float(score_token)
        except ValueError as exc:
            raise DataFormatError(path, f"score {score_token!r} is not a number", line=number, field="score") from exc
        if not math.isfinite(score):
            raise DataFormatError(path, f"score {score_token!r} is not finite", line=number, field="score")
        ranking = run.setdefault(qid, {})
        if docid in ranking:
            if not dedupe:
                raise DataFormatError(
                    path,
                    f"document {docid!r} appears twice for query {qid!r} (use dedupe to keep its best score)",
                    line=number,
                )
            dropped += 1
            first_duplicate = first_duplicate or number
            ranking[docid] = max(ranking[docid], score)
            continue
        ranking[docid] = score
    if not run:
        raise DataFormatError(path, "no results: file is empty")
    if dropped:
        warnings.warn(
            f"{path}: {dropped} duplicate (query, document) lines dropped, the first at line {first_duplicate}; "
            "the best score of each document was kept",
            stacklevel=2,
        )
    return run


def sorted_ranking(ranking: dict[str, float]) -> list[tuple[str, float]]:
    """Order one query's results: score descending, then document id ascending (the tie-break rule).

    This is the single ordering used by search output, run files and evaluation.
    """
    return sorted(ranking.items(), key=lambda item: (-item[1], item[0]))


def check_trec_id(value: str, path: str | Path, field: str) -> None:
    """Raise unless ``value`` can be a column of a whitespace-separated TREC file.

    Raises:
        DataFormatError: ``value`` is empty or holds white space (a space, a tab, a newline...),
            which would shift the columns of the line; names ``path`` and ``field``.
    """
    if not value or any(c.isspace() for c in value):
        raise DataFormatError(
            path, f"{value!r} is empty or contains white space: a TREC file cannot hold it (rename the id)", field=field
        )


#: The run tag (sixth column) of the runs spladekit writes for a single model (`search`, `evaluate`).
RUN_TAG = "spladekit"


def write_run(run: Run, path: str | Path, tag: str = RUN_TAG) -> None:
    """Write ``run`` as a TREC run file, atomically, ranks in :func:`sorted_ranking` order; each score
    in Python's shortest form that reads back as the same float64 (``repr``): with a fixed number of
    decimals, scores closer than the last one (fused RRF scores deep in a list) would read back as
    ties ranked by document id, another order than the rank column's and than the evaluation's.

    Raises:
        DataFormatError: a query id, document id or the tag is empty or contains white space, or a
            score is not finite (checked before anything is written; ``path`` is left untouched).
        OutputPathError: ``path`` cannot be written.
    """
    check_trec_id(tag, path, "tag")
    for qid, ranking in run.items():
        check_trec_id(str(qid), path, "query id")
        for docid, score in ranking.items():
            check_trec_id(str(docid), path, "document id")
            if not math.isfinite(score):
                raise DataFormatError(
                    path, f"score {score} of document {docid!r} for query {qid!r} is not finite: not written"
                )
    with atomic_write(path) as handle:
        for qid in run:
            for rank, (docid, score) in enumerate(sorted_ranking(run[qid]), start=1):
                handle.write(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")
