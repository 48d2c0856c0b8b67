"""``irds:<id>`` datasets (``irds:beir/scifact/test``, ``irds:msmarco-passage/dev/small``) read by
``ir_datasets`` itself (MacAvaney et al., SIGIR 2021), written once into the spladekit cache as a
BEIR folder (:mod:`spladekit.data.beir`), so every reader of BEIR folders takes them.

The folder ``<cache>/irds/<id with / as -->``: ``corpus.jsonl.gz`` (``_id``, ``title`` when the
documents have one, ``text``), ``queries.jsonl`` (the dataset's queries; their ``text`` field, else
``default_text()``), ``qrels/<last part of the id>.tsv`` (e.g. ``qrels/test.tsv``; give that name as
the split: ``--split small`` for ``msmarco-passage/dev/small``), and ``irds.json`` (the id, the
ir_datasets version and what was written), written atomically (a folder without ``irds.json`` is not
used). Only the documents are required: a dataset without queries or qrels (``irds:msmarco-passage``,
the passages to index; ``irds:beir/scifact``, no split) is written without them, and a reader that
needs them names the missing file.

Offline: ir_datasets reads a populated ``IR_DATASETS_HOME`` (``~/.ir_datasets`` by default) without
the network. Training triples ids (``irds:msmarco-passage/train/triples-small``: its docpairs) are
read by :func:`spladekit.train.published.read_irds_docpairs` (``data.format: triples``). Before reading, the files the dataset needs are found by walking its components: a
``Cache`` whose file exists, or a ``Migrator`` whose ``irds_version.txt`` holds its version and whose
files exist, needs nothing below it; otherwise each ``Download`` below it needs its file. ir_datasets'
rule for ``irds_version.txt``: when the file is missing or holds another version, the built files
(``docs.pklz4``) are deleted and rebuilt from the download; so a cache with built files but a stale
or missing ``irds_version.txt`` and no download is refused here, before ir_datasets deletes them.
With ``SPLADEKIT_OFFLINE=1`` (or ``HF_DATASETS_OFFLINE=1``) a missing file is an error at once;
otherwise ir_datasets may download it. Either way the error is one line saying what is missing where.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from spladekit.errors import ResolutionError

PREFIX = "irds:"


def is_irds(name: str | Path) -> bool:
    """Whether ``name`` is an ``irds:`` dataset id."""
    return str(name).startswith(PREFIX)


def check_irds(*names) -> None:
    """Before any work: refuse when one of ``names`` (dataset names or folders; None skipped) is an
    ``irds:`` id and ir_datasets is not installed (:func:`spladekit.errors.check_extra`, the install
    line of the ``irds`` extra).

    Raises:
        MissingExtraError: naming the first such id.
    """
    from spladekit.errors import check_extra

    for name in names:
        if name is not None and is_irds(name):
            check_extra("irds", str(name))
            return


def _offline() -> bool:
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("SPLADEKIT_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _walk(obj, found: dict, seen: set, depth: int = 0) -> None:
    """Collect the ``Download``s a component needs and the stale ``Migrator`` version files (module docstring)."""
    from ir_datasets.util import Cache, Migrator
    from ir_datasets.util.download import Download

    if depth > 30 or id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, Path)):
        return
    if type(obj).__name__ in ("Dataset", "Registry"):  # another dataset (or all of them): not a part of this one
        return
    seen.add(id(obj))
    if isinstance(obj, Download):
        found["downloads"].append(obj)
        return
    if isinstance(obj, Cache):
        if not Path(obj._path).exists():
            _walk(obj._streamer, found, seen, depth + 1)
        return
    if isinstance(obj, Migrator):
        state = vars(obj)
        version_file = Path(state["_version_file"])
        current = version_file.read_text().strip() if version_file.exists() else None
        built = [Path(f) for f in state["_affected_files"]]
        if current == state["_version"] and all(f.exists() for f in built):
            return
        if current != state["_version"] and any(f.exists() for f in built):
            found["stale"].append((version_file, current, state["_version"], [f for f in built if f.exists()]))
        _walk(state["_wrapped"], found, seen, depth + 1)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            _walk(item, found, seen, depth + 1)
        return
    if isinstance(obj, dict):
        for item in obj.values():
            _walk(item, found, seen, depth + 1)
        return
    if callable(obj) and getattr(obj, "__closure__", None):
        for cell in obj.__closure__:
            _walk(cell.cell_contents, found, seen, depth + 1)
    if type(obj).__module__.startswith("ir_datasets") and hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            _walk(item, found, seen, depth + 1)


def _provider(dataset, kind: str):
    """The component that gives ``kind`` as ir_datasets' ``Dataset.__getattr__`` picks it (the first
    constituent with ``<kind>_handler``, looked into when it is itself a Dataset), found without calling it."""
    for part in vars(dataset).get("_constituents", []):
        if hasattr(part, f"{kind}_handler"):
            return _provider(part, kind) if type(part).__name__ == "Dataset" else part
    return None


def missing_files(dataset, kinds=("docs", "queries", "qrels")) -> tuple[list[tuple[Path, str]], list[tuple]]:
    """``(missing, stale)``: ``[(file, source url)]`` that the ``kinds`` of ``dataset`` need and lack,
    and the stale ``irds_version.txt`` files ``[(version file, found, expected, built files)]`` (module docstring)."""
    found = {"downloads": [], "stale": []}
    # the components as stored (calling dataset.docs_handler() would run a Migrator and its deletions);
    # hasattr only looks the method up
    _walk([_provider(dataset, k) for k in kinds], found, set())
    missing = []
    for download in found["downloads"]:
        state = vars(download)
        local = [Path(m._path) for m in state["mirrors"] if hasattr(m, "_path")]
        path = Path(state["_cache_path"]) if state["_cache_path"] else (local[0] if local else None)
        if (path is not None and path.exists()) or any(p.exists() for p in local):
            continue
        url = next((getattr(m, "url", None) for m in state["mirrors"] if getattr(m, "url", None)), "no URL")
        missing.append((path or Path("<temporary file>"), url))
    return missing, found["stale"]


def _home() -> Path:
    return Path(os.environ.get("IR_DATASETS_HOME", Path.home() / ".ir_datasets"))


def load_irds(dataset_id: str, kinds=("docs", "queries", "qrels"), optional=()):
    """``ir_datasets.load(dataset_id)``, checked for what its ``kinds`` need (module docstring), and
    for what those of its ``optional`` kinds that the dataset has need.

    Raises:
        ResolutionError: ir_datasets is not installed, the id is unknown, the dataset lacks one of
            ``kinds``, or (offline, or when the built files would be deleted) a needed file is
            missing; one line naming it and where.
    """
    try:
        import ir_datasets
    except ImportError as exc:
        from spladekit.errors import install_line

        raise ResolutionError(f"{PREFIX}{dataset_id}: needs the ir_datasets package: {install_line('irds')}") from exc
    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError as exc:
        raise ResolutionError(f"{PREFIX}{dataset_id}: ir_datasets does not know this id") from exc
    if not all(getattr(dataset, f"has_{k}")() for k in kinds):
        raise ResolutionError(
            f"{PREFIX}{dataset_id}: needs {', '.join(kinds)}; ir_datasets gives "
            f"{[k for k in ('docs', 'queries', 'qrels', 'docpairs', 'scoreddocs') if getattr(dataset, f'has_{k}')()]}"
        )
    missing, stale = missing_files(dataset, (*kinds, *(k for k in optional if getattr(dataset, f"has_{k}")())))
    where = f"IR_DATASETS_HOME={_home()}"
    if stale and missing:
        version_file, found, expected, built = stale[0]
        raise ResolutionError(
            f"{PREFIX}{dataset_id}: {version_file} {'is missing' if found is None else f'holds {found!r}'} "
            f"(ir_datasets needs {expected!r}), so it would delete {built[0]} and rebuild it from "
            f"{missing[0][0]}, which is missing ({where}); nothing was deleted"
        )
    if missing and _offline():
        raise ResolutionError(
            f"{PREFIX}{dataset_id}: offline and missing "
            + "; ".join(f"{p} (from {u})" for p, u in missing)
            + f" ({where})"
        )
    return dataset, missing


def irds_folder(dataset_id: str, cache: Path) -> Path:
    """The BEIR folder of ``irds:<dataset_id>`` under ``cache`` (written on first use; module docstring).

    Raises:
        ResolutionError: see :func:`load_irds`; or ir_datasets failed while reading (the missing
            files named, when some are).
    """
    from spladekit.io import atomic_folder, write_json

    dataset_id = dataset_id.strip().strip("/")
    folder = Path(cache) / dataset_id.replace("/", "--")
    if (folder / "irds.json").exists():
        return folder
    dataset, missing = load_irds(dataset_id, ("docs",), optional=("queries", "qrels"))
    split = dataset_id.split("/")[-1]
    written = ["docs"] + [k for k in ("queries", "qrels") if getattr(dataset, f"has_{k}")()]
    try:
        with atomic_folder(folder) as tmp:
            with gzip.open(tmp / "corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as out:
                for doc in dataset.docs_iter():
                    record = {"_id": doc.doc_id}
                    if hasattr(doc, "title"):
                        record["title"] = doc.title
                    record["text"] = doc.text if hasattr(doc, "text") else doc.default_text()
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
            if "queries" in written:
                with open(tmp / "queries.jsonl", "w", encoding="utf-8") as out:
                    for query in dataset.queries_iter():
                        text = query.text if hasattr(query, "text") else query.default_text()
                        out.write(json.dumps({"_id": query.query_id, "text": text}, ensure_ascii=False) + "\n")
            if "qrels" in written:
                (tmp / "qrels").mkdir()
                with open(tmp / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as out:
                    out.write("query-id\tcorpus-id\tscore\n")
                    for qrel in dataset.qrels_iter():
                        out.write(f"{qrel.query_id}\t{qrel.doc_id}\t{int(qrel.relevance)}\n")
            import ir_datasets

            write_json(
                tmp / "irds.json",
                {"id": dataset_id, "ir_datasets": ir_datasets.__version__, "split": split, "written": written},
            )
    except ResolutionError:
        raise
    except Exception as exc:  # a download that failed, a corrupt cache file
        named = "; missing " + "; ".join(f"{p} (from {u})" for p, u in missing) if missing else ""
        raise ResolutionError(
            f"{PREFIX}{dataset_id}: ir_datasets failed: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}{named} (IR_DATASETS_HOME={_home()})"
        ) from exc
    return folder
