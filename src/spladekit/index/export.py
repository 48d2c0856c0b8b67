"""Export an index folder to a serving engine's format, and import such files back.

An export is a folder: the exported file(s) plus ``export.json``
(:class:`spladekit.index.formats.ExportManifest`: format, scale, model id and revision, options).
An import reads it back into an index folder (vectors + ids + vocabulary), so
``index → export → import`` can be compared with the original (exact for float formats, within
``1/(2·scale)`` per weight for quantised ones).

Formats:

==================  =====================  ===========================================
name                file                   content
==================  =====================  ===========================================
anserini            ``docs.jsonl``         ``JsonVectorCollection``, integer impacts
anserini-queries    ``queries.tsv``        pre-encoded queries, tokens repeated (empty
                                           queries left out and listed in ``export.json``)
seismic             ``docs.jsonl``         Seismic JSONL, float weights
qdrant              ``points.jsonl``       Qdrant points with sparse vectors (``--idf``: integer
                                           impacts, for the collection's IDF modifier)
                    ``collection.json``    collection definition (``modifier: idf`` with ``--idf``)
milvus              ``rows.jsonl``         Milvus rows, ``SPARSE_FLOAT_VECTOR`` field
pgvector            ``docs.tsv``           COPY text rows ``id, doc_id, sparsevec`` (1-based)
                    ``schema.sql``         table (and optional HNSW index) definition
elastic             ``bulk.ndjson``        ``_bulk`` body for ``rank_features`` / ``sparse_vector``
                    ``mapping.json``       index mapping
ciff                ``index.ciff``         CIFF postings, integer impacts (PISA ``ciff2pisa``,
                                           BMP ``ciff2bmp``; :mod:`~spladekit.index.formats.ciff`)
==================  =====================  ===========================================
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.errors import DataFormatError, RepeatedIdError
from spladekit.index.formats import (
    ExportManifest,
    anserini,
    check_scale,
    ciff,
    elastic,
    milvus,
    pgvector,
    qdrant,
    quantise,
    seismic_jsonl,
)
from spladekit.index.index import load_index
from spladekit.index.layout import DEFAULT_BUDGET, DocIds, load_vocabulary
from spladekit.io import atomic_write, scratch_folder, staged_files, write_json

FORMATS = ("anserini", "anserini-queries", "seismic", "qdrant", "milvus", "pgvector", "elastic", "ciff")
FILES = {
    "anserini": "docs.jsonl",
    "anserini-queries": "queries.tsv",
    "seismic": "docs.jsonl",
    "qdrant": "points.jsonl",
    "milvus": "rows.jsonl",
    "pgvector": "docs.tsv",
    "elastic": "bulk.ndjson",
    "ciff": "index.ciff",
}
EXTRA_FILES = {"elastic": ["mapping.json"], "pgvector": ["schema.sql"], "qdrant": [qdrant.COLLECTION_FILE]}
QUANTISED = ("anserini", "anserini-queries", "ciff")  # and qdrant with idf (:func:`quantised`)
#: The options only some formats use: name → (default, the formats using it, command-line option).
FORMAT_OPTIONS = {
    "scale": (100.0, QUANTISED, "--scale"),
    "query_top_k": (None, ("anserini-queries",), "--query-top-k"),
    "keys": ("token", ("elastic",), "--keys"),
    "field_type": ("rank_features", ("elastic",), "--field-type"),
    "field": ("splade", ("elastic",), None),
    "index_name": ("splade", ("elastic",), None),
    "hnsw": (False, ("pgvector",), "--hnsw"),
    "table": (pgvector.DEFAULT_TABLE, ("pgvector",), "--table"),
    "idf": (False, ("qdrant",), "--idf"),
}


def quantised(fmt: str, idf: bool = False) -> bool:
    """Whether format ``fmt`` writes integer impacts (``scale`` applies): :data:`QUANTISED`, and
    ``qdrant`` with the IDF modifier (:mod:`spladekit.index.formats.qdrant`)."""
    return fmt in QUANTISED or (fmt == "qdrant" and bool(idf))


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def check_options(fmt: str, **options) -> None:
    """Refuse an option that format ``fmt`` does not use (:data:`FORMAT_OPTIONS`) but that is set
    to a value other than its default, instead of ignoring it; check the values of those it uses.
    Runs before anything is written. ``options`` holds a ``None`` for an option not given.

    Raises:
        ValueError: an option for other formats (naming it, its command-line spelling and the
            formats it is for), or a bad value (see :func:`~spladekit.index.formats.check_scale`,
            :func:`~spladekit.index.formats.anserini.check_query_top_k`,
            :func:`~spladekit.index.formats.elastic.check_keys`,
            :func:`~spladekit.index.formats.elastic.mapping`,
            :func:`~spladekit.index.formats.pgvector.check_table`).
    """
    for name, value in options.items():
        default, formats, flag = FORMAT_OPTIONS[name]
        if name == "scale" and quantised(fmt, options.get("idf")):
            continue
        if fmt not in formats and value is not None and value != default:
            spelled = f"{name} ({flag})" if flag else name
            names = ", ".join(formats[:-1]) + " and " + formats[-1] if len(formats) > 1 else formats[0]
            raise ValueError(f"{spelled} applies to {names} only, not to format {fmt!r}; drop it")
    if quantised(fmt, options.get("idf")):
        check_scale(options.get("scale", 100.0))
    if fmt == "anserini-queries":
        anserini.check_query_top_k(options.get("query_top_k"))
    if fmt == "elastic":
        elastic.check_keys(options.get("keys", "token"))
        elastic.mapping(options.get("field", "splade"), options.get("field_type", "rank_features"))
    if fmt == "pgvector":
        pgvector.check_table(options.get("table", pgvector.DEFAULT_TABLE))


def export_vectors(
    fmt: str,
    out: str | Path,
    matrix: sp.spmatrix,
    ids: Sequence[str],
    vocabulary: Sequence[str] | None,
    *,
    scale: float = 100.0,
    model: str | None = None,
    model_revision: str | None = None,
    keys: str = "token",
    field_type: str = "rank_features",
    field: str = "splade",
    index_name: str = "splade",
    query_top_k: int | None = None,
    hnsw: bool = False,
    table: str = pgvector.DEFAULT_TABLE,
    idf: bool = False,
) -> ExportManifest:
    """Write ``[N, V]`` vectors with their ids in format ``fmt`` into the folder ``out``.

    ``scale`` applies to the quantised formats (``anserini``, ``anserini-queries``, ``ciff``, and
    ``qdrant`` with ``idf``: the collection's IDF modifier, integer impacts; :mod:`.formats.qdrant`) only;
    ``query_top_k`` to ``anserini-queries`` (prune each query to its heaviest terms, ≤ 1,024:
    :func:`spladekit.index.formats.anserini.write_preencoded_queries`); ``hnsw`` and ``table`` to
    ``pgvector``; ``keys``, ``field_type``, ``field`` and ``index_name`` to ``elastic``. Any of them
    set to another value than its default for a format that does not use it is an error
    (:func:`check_options`), not ignored. Queries left out (empty after quantisation) or pruned are
    listed in ``export.json`` (``options.empty_queries`` / ``options.pruned_queries``) and reported
    on stderr.

    Raises:
        ValueError: unknown format, an option of other formats or a bad option value (before the
            folder is made), missing vocabulary for a token-keyed format, bad lengths, a query
            over Lucene's clause limit, or a vector over pgvector's non-zero limit.
    """
    _check_format(fmt)
    check_options(
        fmt,
        scale=scale,
        query_top_k=query_top_k,
        keys=keys,
        field_type=field_type,
        field=field,
        index_name=index_name,
        hnsw=hnsw,
        table=table,
        idf=idf,
    )  # before the folder is made
    needs_vocab = fmt not in ("qdrant", "milvus", "pgvector") and not (fmt == "elastic" and keys == "id")
    if needs_vocab and vocabulary is None:
        raise ValueError(f"format {fmt!r} writes tokens and needs the vocabulary (vocab.json in the index folder)")
    with staged_files(out) as folder:  # all files or none: a failure (e.g. a vector over a limit) leaves nothing
        return _write_export(
            fmt,
            Path(out),
            folder,
            matrix,
            ids,
            vocabulary,
            scale=scale,
            model=model,
            model_revision=model_revision,
            keys=keys,
            field_type=field_type,
            field=field,
            index_name=index_name,
            query_top_k=query_top_k,
            hnsw=hnsw,
            table=table,
            idf=idf,
        )


def rounded_to_zero(matrix: sp.spmatrix, scale: float, target: Path) -> int:
    """How many stored weights of ``matrix`` round to impact 0 at ``scale`` (below ``1 / (2 · scale)``:
    left out of a quantised export), reported on stderr when some do; counted in blocks of 2^24
    entries (a memory-mapped index is read once, not copied).

    Raises:
        ValueError: every weight rounds to 0 (the export would hold nothing), naming the scale that keeps the largest.
    """
    data = sp.csr_matrix(matrix).data
    zero, largest = 0, 0.0
    for start in range(0, data.size, 1 << 24):
        part = np.asarray(data[start : start + (1 << 24)])
        zero += int(np.count_nonzero(quantise(part, scale) == 0))
        largest = max(largest, float(np.abs(part).max()))
    if data.size and zero == data.size:
        raise ValueError(
            f"every one of the {data.size} weights rounds to impact 0 at scale {scale:g} (the largest is {largest:g}): "
            f"{target.name} would hold nothing; a scale above {0.5 / largest:g} keeps the largest"
        )
    if zero:
        print(
            f"spladekit export: {zero} of {data.size} weights ({100 * zero / data.size:.1f}%) are below {0.5 / scale:g}, round to "
            f"impact 0 at scale {scale:g} and are left out of {target} (counted in export.json; a larger --scale keeps them)",
            file=sys.stderr,
        )
    return zero


def _write_anserini_queries(target: Path, named: Path, matrix, ids, vocabulary, scale, query_top_k) -> tuple[int, dict]:
    """Anserini's pre-encoded queries written to ``target``: ``(count, export.json's options)``; the queries left
    out (no term after quantisation) and those pruned to ``query_top_k`` terms are said on stderr, naming ``named``."""
    written = anserini.write_preencoded_queries(target, matrix, ids, vocabulary, scale=scale, query_top_k=query_top_k)
    options = {"empty_queries": written.empty, "query_top_k": query_top_k, "pruned_queries": written.pruned}
    if written.empty:
        print(
            f"spladekit export: {len(written.empty)} queries with no term after quantisation (scale {scale:g}) left out of "
            f"{named} (Anserini cannot read an empty query; they match nothing): {', '.join(written.empty[:10])}"
            f"{' …' if len(written.empty) > 10 else ''} (listed in export.json)",
            file=sys.stderr,
        )
    if written.pruned:
        print(
            f"spladekit export: {len(written.pruned)} queries pruned to their {query_top_k} heaviest terms (listed in export.json)",
            file=sys.stderr,
        )
    return written.count, options


def _write_export(
    fmt,
    out: Path,
    folder: Path,
    matrix,
    ids,
    vocabulary,
    *,
    scale,
    model,
    model_revision,
    keys,
    field_type,
    field,
    index_name,
    query_top_k,
    hnsw,
    table,
    idf=False,
) -> ExportManifest:
    """The body of :func:`export_vectors`: write the files into ``folder`` (staged; ``out`` is named in messages)."""
    target = folder / FILES[fmt]
    options: dict = {}
    rounded = rounded_to_zero(matrix, scale, out / FILES[fmt]) if quantised(fmt, idf) else 0
    if fmt == "anserini":
        count = anserini.write_json_vector_collection(target, matrix, ids, vocabulary, scale=scale)
    elif fmt == "anserini-queries":
        count, options = _write_anserini_queries(target, out / FILES[fmt], matrix, ids, vocabulary, scale, query_top_k)
    elif fmt == "seismic":
        count = seismic_jsonl.write_seismic_jsonl(target, matrix, ids, vocabulary)
    elif fmt == "qdrant":
        count = qdrant.write_points(target, matrix, ids, scale=scale if idf else None)
        write_json(folder / qdrant.COLLECTION_FILE, qdrant.collection_config(qdrant.DEFAULT_VECTOR_NAME, idf))
        options = {"vector_name": qdrant.DEFAULT_VECTOR_NAME, "modifier": qdrant.IDF if idf else None}
    elif fmt == "milvus":
        count = milvus.write_rows(target, matrix, ids)
        options = {
            "field": milvus.DEFAULT_FIELD,
            "index_type": "SPARSE_INVERTED_INDEX",
            "metric_type": "IP",
            "drop_ratio_search": 0.0,
        }
    elif fmt == "ciff":
        docs = sp.csr_matrix(matrix)
        count = ciff.write_ciff(target, docs, docs.T.tocsr(), ids, vocabulary, scale=scale)["num_docs"]
    elif fmt == "pgvector":
        count = pgvector.write_copy(target, matrix, ids, hnsw=hnsw)
        with atomic_write(folder / "schema.sql") as sql:
            sql.write(pgvector.schema_sql(table, matrix.shape[1], hnsw=hnsw))
        options = {"table": table, "hnsw": hnsw, "index_base": 1}
    else:
        count = elastic.write_bulk(target, matrix, ids, vocabulary, index_name=index_name, field=field, keys=keys)
        write_json(folder / "mapping.json", elastic.mapping(field, field_type))
        options = {
            "keys": keys,
            "field": field,
            "field_type": field_type,
            "index_name": index_name,
            "key_escaping": "'%' -> '%25', '.' -> '%2E'",
        }
    if rounded:
        options["weights_rounded_to_zero"] = rounded
    files = [FILES[fmt]] + EXTRA_FILES.get(fmt, [])
    manifest = ExportManifest(
        format=fmt,
        files=files,
        scale=scale if quantised(fmt, idf) else None,
        model=model,
        model_revision=model_revision,
        vocab_size=int(matrix.shape[1]),
        count=count,
        options=options,
    )
    manifest.save(folder)
    return manifest


def export_index(index: str | Path, fmt: str, out: str | Path, **kwargs) -> ExportManifest:
    """Export an index folder (see :func:`export_vectors` for the options)."""
    matrix, ids, meta = load_index(index)
    vocabulary = load_vocabulary(index)
    return export_vectors(
        fmt, out, matrix, ids, vocabulary, model=meta.get("model"), model_revision=meta.get("model_revision"), **kwargs
    )


def resolve_import(fmt: str, path: str | Path, scale: float | None, options: dict) -> tuple[Path, float, dict]:
    """The file to read, the scale and the options of an import (module :func:`import_vectors`):
    an export folder's ``export.json`` gives its file, its scale and its options unless given."""
    _check_format(fmt)
    if fmt not in QUANTISED:
        check_options(fmt, scale=scale)
    path = Path(path)
    manifest = None
    if path.is_dir():
        manifest = ExportManifest.load(path)
        if manifest.format != fmt:
            raise ValueError(f"{path} holds a {manifest.format!r} export, not {fmt!r}")
        path = path / FILES[fmt]
        options = {**manifest.options, **options}
    if scale is None:
        scale = manifest.scale if manifest is not None and manifest.scale is not None else 100.0
    try:
        scale = check_scale(scale)
    except ValueError as exc:
        where = f" (from {path.parent / 'export.json'})" if manifest is not None and manifest.scale == scale else ""
        raise ValueError(f"{exc}{where}") from None
    return path, scale, options


def check_manifest(source: str | Path, vocab_size: int, count: int | None = None) -> None:
    """Refuse an export folder whose ``export.json`` contradicts what is imported (a file cut at a
    line boundary parses cleanly, so the record count is the only witness of the lost vectors).

    Args:
        source: what the import was given (a file: nothing to check; an export folder: its manifest).
        vocab_size: V of the vocabulary the vectors are read with.
        count: vectors read (None: only ``vocab_size`` is checked). A manifest ``count`` of 0 (not
            recorded) is not checked.

    Raises:
        DataFormatError: ``vocab_size`` or ``count`` differ from the manifest's (naming export.json and the field).
    """
    source = Path(source)
    if not source.is_dir():
        return
    manifest = ExportManifest.load(source)
    where = source / "export.json"
    if manifest.vocab_size is not None and int(manifest.vocab_size) != int(vocab_size):
        raise DataFormatError(
            where,
            f"the export has {manifest.vocab_size} columns, the vocabulary given has {vocab_size}",
            field="vocab_size",
        )
    if count is not None and manifest.count and int(manifest.count) != int(count):
        raise DataFormatError(
            where,
            f"announces {manifest.count} vectors, but {count} were read from "
            f"{source / FILES[manifest.format]} (a file cut short or added to?)",
            field="count",
        )


def _qdrant_scale(scale: float, options: dict) -> float:
    """What a Qdrant export's values are divided by: its scale when ``export.json`` records the IDF
    modifier (integer impacts), else 1 (float weights)."""
    return scale if options.get("modifier") == qdrant.IDF else 1.0


def import_rows(
    fmt: str, path: Path, vocabulary: Sequence[str], scale: float, options: dict
) -> Iterator[tuple[str, tuple]]:
    """The rows of a row-major format's file, one at a time: ``(doc id, (column ids int64 [n],
    weights float32 [n]))`` in file order, entries normalised (the ``*_rows`` generator of the
    format's module; ``path``, ``scale`` and ``options`` as :func:`resolve_import` resolves them).

    Raises:
        ValueError: ``fmt`` is ``ciff`` (term-major: :func:`spladekit.index.formats.ciff.read_ciff`).
        DataFormatError: as the format's reader, while iterating (naming the file and line).
    """
    if fmt in ("anserini", "anserini-queries"):
        reader = anserini.collection_rows if fmt == "anserini" else anserini.query_rows
        return reader(path, vocabulary, scale=scale)
    if fmt == "seismic":
        return seismic_jsonl.seismic_rows(path, vocabulary)
    if fmt == "qdrant":
        return qdrant.point_rows(
            path,
            len(vocabulary),
            vector_name=options.get("vector_name", qdrant.DEFAULT_VECTOR_NAME),
            scale=_qdrant_scale(scale, options),
        )
    if fmt == "milvus":
        return milvus.field_rows(path, len(vocabulary), field=options.get("field", milvus.DEFAULT_FIELD))
    if fmt == "pgvector":
        return pgvector.copy_rows(path, len(vocabulary))
    if fmt == "elastic":
        return elastic.bulk_rows(
            path, vocabulary, field=options.get("field", "splade"), keys=options.get("keys", "token")
        )
    raise ValueError(f"format {fmt!r} is not read row by row")


def import_vectors(
    fmt: str, path: str | Path, vocabulary: Sequence[str], scale: float | None = None, **options
) -> tuple[sp.csr_matrix, list[str]]:
    """Read vectors written in format ``fmt`` (a file, or an export folder with ``export.json``)
    into memory (to write an index folder, :func:`import_to_index` streams the file instead).

    ``scale`` defaults to the manifest's (quantised formats), or 100 without a manifest; key mode
    and field of Elasticsearch files likewise come from the manifest unless given. A ``scale`` other
    than 100 for a float format is an error (:func:`check_options`), not ignored.

    Returns:
        ``([N, V] float32, ids)``, rows normalised (sorted columns, repeats summed).

    Raises:
        DataFormatError: malformed input (naming file and line), or no vector at all.
        ValueError: unknown format, ``scale`` given for a float format, the manifest names another
            format, or ``scale`` (given or from the manifest) is not a finite number > 0.
    """
    given = path
    path, scale, options = resolve_import(fmt, path, scale, options)
    check_manifest(given, len(vocabulary))
    if fmt == "anserini":
        matrix, ids, _ = anserini.read_json_vector_collection(path, vocabulary, scale=scale)
    elif fmt == "anserini-queries":
        matrix, ids = anserini.read_preencoded_queries(path, vocabulary, scale=scale)
    elif fmt == "seismic":
        matrix, ids = seismic_jsonl.read_seismic_jsonl(path, vocabulary)
    elif fmt == "qdrant":
        matrix, ids = qdrant.read_points(
            path,
            len(vocabulary),
            vector_name=options.get("vector_name", qdrant.DEFAULT_VECTOR_NAME),
            scale=_qdrant_scale(scale, options),
        )
    elif fmt == "milvus":
        matrix, ids = milvus.read_rows(path, len(vocabulary), field=options.get("field", milvus.DEFAULT_FIELD))
    elif fmt == "pgvector":
        matrix, ids = pgvector.read_copy(path, len(vocabulary))
    elif fmt == "ciff":
        matrix, ids = ciff.read_ciff(path, vocabulary, scale=scale)
    else:
        matrix, ids = elastic.read_bulk(
            path, vocabulary, field=options.get("field", "splade"), keys=options.get("keys", "token")
        )
    if matrix.shape[0] == 0:
        raise DataFormatError(path, "no vectors: the file is empty")
    check_manifest(given, len(vocabulary), matrix.shape[0])
    return matrix, ids


def packed_ids(ids: Iterable[str], source: Path) -> DocIds:
    """Ids read one at a time, kept as their UTF-8 bytes end to end plus ``[N + 1]`` int64 offsets
    (:class:`spladekit.index.layout.DocIds`, ≈ ``N × (L + 16)`` bytes for ids of ``L`` bytes while
    growing) instead of N Python strings (≈ ``N × (L + 57)``). ``source`` is named by errors.

    Raises:
        ValueError: an id cannot be encoded as UTF-8 (a lone surrogate), naming its row and the id.
        DataFormatError: an id is empty or holds white space (a TREC run could not name it; the corpus
            reader refuses the same), naming ``source`` and the vector.
    """
    from array import array

    from spladekit.data.trec import check_trec_id

    utf8, lengths = bytearray(), array("q")
    for row, doc_id in enumerate(ids):
        check_trec_id(doc_id, source, f"document id of vector {row + 1}")  # a run could not name it
        try:
            encoded = doc_id.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"document id {row} ({doc_id!r}) cannot be written as UTF-8: {exc}") from None
        utf8 += encoded
        lengths.append(len(encoded))
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int64) if lengths else np.zeros(0, np.int64), out=offsets[1:])
    return DocIds(offsets, np.frombuffer(utf8, dtype=np.uint8), source)  # a view: the bytearray is not copied


def streamed_import(
    fmt: str,
    path: Path,
    vocabulary: Sequence[str],
    scale: float,
    options: dict,
    spill: str | Path,
    memory_budget: int = DEFAULT_BUDGET,
) -> tuple[DocIds, Callable[[], Iterator[sp.csr_matrix]]]:
    """A row-major format's file as the writer's input, without holding its vectors: one pass reads
    every record (so every error naming a file and line is raised here, before the index folder is
    begun), keeps the ids (:func:`packed_ids`) and appends the rows to a
    :class:`spladekit.index.writer.RowSpill` in the empty folder ``spill`` (8 bytes per row and per
    entry on disk; the caller removes it); ``blocks()`` reads them back in canonical CSR blocks of at
    most ``memory_budget / 8 / 48`` entries.

    Args:
        path, scale, options: the file, scale and options as :func:`resolve_import` resolves them.

    Returns:
        ``(the N ids, blocks)``.

    Raises:
        DataFormatError: malformed input (naming file and line), or no vector at all.
        ValueError: ``fmt`` is ``ciff``.
    """
    from spladekit.index.writer import RowSpill

    if fmt == "ciff":
        raise ValueError("format 'ciff' is term-major: it is read whole (import_vectors)")
    rows = RowSpill(Path(spill), len(vocabulary))

    def ids():
        for doc_id, (columns, weights) in import_rows(fmt, path, vocabulary, scale, options):
            rows.add(columns, weights)
            yield doc_id

    try:
        doc_ids = packed_ids(ids(), path)
    finally:
        rows.close()
    if len(doc_ids) == 0:
        raise DataFormatError(path, "no vectors: the file is empty")
    return doc_ids, rows.blocks(memory_budget)


@contextlib.contextmanager
def _removing_new_parents(path: str | Path) -> Iterator[None]:
    """Undo the parent folders of ``path`` that the block creates, if it fails: the folders above
    ``path`` missing when the block starts are removed again, deepest first, when it raises and they
    are still empty (so a failed run leaves no empty folder behind; a folder something else wrote
    into is kept). ``path`` itself is left to the atomic writers, which create it only on success."""
    path = Path(path).absolute()
    missing = [parent for parent in path.parents if not parent.exists()]  # deepest first
    try:
        yield
    except BaseException:
        for parent in missing:
            try:
                parent.rmdir()  # only an empty folder goes
            except OSError:
                break
        raise


def import_to_index(
    fmt: str,
    path: str | Path,
    vocabulary: Sequence[str],
    out: str | Path,
    scale: float | None = None,
    metadata: dict | None = None,
    memory_budget: int | None = None,
) -> Path:
    """Import a file of format ``fmt`` (a file, or an export folder; ``scale`` and options as
    :func:`import_vectors`) into the index folder ``out`` within ``memory_budget`` bytes of working
    memory (:mod:`spladekit.index.writer`; None: its default, 1 GiB), whatever the file's size.

    Row-major formats (all but ``ciff``) are streamed (:func:`streamed_import`): the file is parsed
    once, its rows go to scratch files beside ``out`` (8 bytes per row and per entry, removed at the
    end), and the writer reads them back block by block. Held in memory: the ids (``N × (L + 16)``
    bytes for ids of ``L`` UTF-8 bytes; ``anserini-queries`` also keeps a set of the ids to refuse a
    repeat, as :func:`spladekit.data.tsv.iter_tsv` does), one record, one block, and the writer's
    budget. The folder is the one :func:`spladekit.index.writer.save_index` writes from
    :func:`import_vectors`'s matrix, byte for byte (``tests/index/test_export.py``).

    ``ciff`` (postings lists, term-major) is transposed on disk
    (:func:`spladekit.index.formats.ciff.transposed_blocks`: sorted runs of postings, 12 bytes each
    beside ``out``, merged row range by row range); held besides the budget: the ids, ``[N]`` int64
    row counts and the protobuf message of one posting list. The folder equals the one written from
    :func:`import_vectors`'s matrix, byte for byte (``tests/index/formats/test_ciff.py``).

    Raises:
        DataFormatError: malformed input (naming file and line; nothing is left beside ``out``), or no
            vector at all.
        ValueError: as :func:`import_vectors`; a bad ``memory_budget`` (before the input is read),
            ids that repeat (naming one: the lines of both for row-major formats, a DataFormatError;
            the documents' numbers for ``ciff``), a weight that is not finite (naming its row).
        OutputPathError: ``out`` is an existing file (before the input is read).
    """
    from spladekit.index.writer import check_budget, write_index

    budget = DEFAULT_BUDGET if memory_budget is None else check_budget(memory_budget)  # before reading the input
    meta = dict(metadata or {})
    meta.update(imported_from=str(path), imported_format=fmt)
    source, scale, options = resolve_import(fmt, path, scale, {})
    check_manifest(path, len(vocabulary))
    if fmt == "ciff":  # term-major: transposed on disk (sorted runs, merged) within the budget
        with _removing_new_parents(out), scratch_folder(out) as spill:
            ids, count, blocks = ciff.transposed_blocks(source, vocabulary, spill, scale=scale, memory_budget=budget)
            if count == 0:
                raise DataFormatError(source, "no vectors: the file is empty")
            check_manifest(path, len(vocabulary), count)
            try:
                return write_index(out, blocks, ids, len(vocabulary), meta, vocabulary, budget)
            except RepeatedIdError as exc:  # positions are document records (docid order)
                raise DataFormatError(
                    source,
                    f"collection_docid {exc.doc_id!r} is given twice: document records {exc.first} and {exc.second}",
                    field="collection_docid",
                ) from None
    with _removing_new_parents(out), scratch_folder(out) as spill:  # beside the index folder (its file system)
        ids, blocks = streamed_import(fmt, source, vocabulary, scale, options, spill, budget)
        check_manifest(path, len(vocabulary), len(ids))  # before the folder is begun
        try:
            return write_index(out, blocks, ids, len(vocabulary), meta, vocabulary, budget)
        except RepeatedIdError as exc:  # the writer knows positions; the file's lines are found again
            first, second = record_line(fmt, source, exc.first), record_line(fmt, source, exc.second)
            raise DataFormatError(
                source,
                f"document id {exc.doc_id!r} is given twice: vector {exc.first + 1} "
                f"(line {first}) and vector {exc.second + 1} (line {second})",
                line=second,
                field="id",
            ) from None


def record_line(fmt: str, path: Path, position: int) -> int | None:
    """The line of a row-major export file that holds vector ``position`` (0-based, file order), as
    the readers of :func:`import_rows` count them: each non-blank line is one vector, except in an
    ``elastic`` bulk file, where each vector is an action line and then its source line (the source
    line is returned). None past the end. One pass over the file (an error path only)."""
    from spladekit.io import iter_lines

    per = 2 if fmt == "elastic" else 1
    wanted, seen = position * per + per - 1, -1
    for number, line in iter_lines(path):
        if line.strip():
            seen += 1
            if seen == wanted:
                return number
    return None


def recorded_model(source: str | Path) -> tuple[str, str | None] | None:
    """``(model, model_revision)`` that an export folder's ``export.json`` names (what the vectors
    were encoded with), or None: ``source`` is a file (no manifest) or the manifest names no model.

    Raises:
        DataFormatError: ``source`` is a folder whose ``export.json`` is missing or malformed.
    """
    source = Path(source)
    if not source.is_dir():
        return None
    manifest = ExportManifest.load(source)
    return (str(manifest.model), manifest.model_revision) if manifest.model else None


def model_vocabulary(model: str | Path, trust_remote_code: bool = False) -> list[str]:
    """The names of a model's output columns: its folded terms when its ``spladekit.json`` folds the
    vocabulary (:mod:`spladekit.model.folding`), else the V token strings of its tokenizer (V from its
    config; a model run by its own sentence-transformers modules: its encoder's vocabulary).

    Columns the tokenizer does not name (padded vocabularies) are called ``[spladekit:ID]``.

    Raises:
        ResolutionError: the model cannot be found.
        DataFormatError: a saved fold that is malformed.
        UnsupportedModelError: the folder's own code, not trusted (``trust_remote_code``).
    """
    from transformers import AutoConfig, AutoTokenizer

    from spladekit.data.resolve import resolve_model
    from spladekit.model.encoder import saved_fold
    from spladekit.model.folders import read_model_folder
    from spladekit.model.remote_code import CUSTOM_LAYOUT

    folder = read_model_folder(
        resolve_model(model), trust_remote_code
    )  # the masked LM may be in a sentence-transformers module's folder
    if folder.layout == CUSTOM_LAYOUT:
        from spladekit.model.encoder import SpladeEncoder

        return list(SpladeEncoder.from_pretrained(model, trust_remote_code=trust_remote_code, device="cpu").vocabulary)
    size = AutoConfig.from_pretrained(folder.mlm_dir, trust_remote_code=trust_remote_code).vocab_size
    fold = saved_fold(folder.metadata(), folder.root, size)
    if fold is not None:
        return list(fold.terms)
    tokens = AutoTokenizer.from_pretrained(
        folder.tokenizer_dir, trust_remote_code=trust_remote_code
    ).convert_ids_to_tokens(list(range(size)))
    return [t if t is not None else f"[spladekit:{j}]" for j, t in enumerate(tokens)]
