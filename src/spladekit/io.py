"""Small file helpers shared by every stage: atomic writes of files and folders, and the one
reading layer for JSON, JSON Lines and YAML (every malformed file is a
:class:`~spladekit.errors.DataFormatError` naming the file and line).

Writes go to a temporary file in the destination folder and are renamed over the target, so an
interrupted run never leaves a half-written file behind (``os.replace`` is atomic on POSIX).
Folders (:func:`atomic_folder`) are written in a temporary sibling and swapped in with two renames,
keeping the old folder as a backup until the new one is in place (:func:`recover_folder`).
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def default_mode(directory: bool = False) -> int:
    """The mode a new file (``0o666``) or folder (``0o777``) gets under the process umask.

    ``tempfile.mkstemp``/``mkdtemp`` create 0600/0700 entries; outputs renamed from them are given
    this mode instead, so they are as readable as any other file the user writes.
    """
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success rename it to ``path``.

    Args:
        path: the final file. Its parent folder is created.
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        encoding: text encoding; ignored for binary mode.

    Raises:
        OutputPathError: ``path`` is an existing folder, a parent of it is a file, or the file
            system refuses the write (checked before the body runs, so no work is lost to it);
            ``path`` is then untouched.
        Whatever the body raises; the temporary file is then removed and ``path`` is untouched.
    """
    from spladekit.errors import OutputPathError

    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{path}: is a folder; give a file path for this output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        warn_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputPathError(f"{path}: cannot write here ({exc.strerror or exc}; is a parent folder a file?)") from exc
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, default_mode())  # mkstemp creates 0600; give the usual umask mode
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise OutputPathError(f"{path}: cannot replace it ({exc.strerror or exc})") from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _temporary_prefix(path: Path) -> str:
    """Name prefix of the temporary siblings of ``path`` this process writes: ``.NAME.PID-`` (then
    ``tempfile``'s random part and ``.tmp``), so a later run can tell a live writer's from a dead one's."""
    return f".{path.name}.{os.getpid()}-"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


_WARNED_STALE: set[str] = set()


def warn_stale_temporaries(path: str | Path) -> list[Path]:
    """Warn (``RuntimeWarning``, once per process each) naming every temporary sibling of ``path``
    (``.NAME.*.tmp``, file or folder, as :func:`atomic_write` and :func:`atomic_folder` write them)
    that no running process is writing: what a killed run (``SIGKILL``, a power cut) leaves behind,
    and theirs (``..NAME.*.tmp``: an atomic folder inside one, e.g. an export's graph in
    ``export-model``'s stage). Such leftovers are never used nor deleted here: a folder may hold the
    only copy of a long computation's partial output, so the user decides; an empty folder holds
    nothing and is removed (a run killed before it wrote anything). Siblings of a live process (its
    PID is in the name) are skipped; older names without a PID count as left over. Returns the ones named.
    """
    path, stale = Path(path), []
    own, nested = f".{path.name}.", f"..{path.name}."
    try:
        candidates = sorted(
            {*path.parent.glob(f"{glob.escape(own)}*.tmp"), *path.parent.glob(f"{glob.escape(nested)}*.tmp")}
        )
    except OSError:
        return stale
    for item in candidates:
        writer = item.name[len(own if item.name.startswith(own) else nested) :].split("-", 1)[0]
        if writer.isdigit() and (int(writer) == os.getpid() or _process_alive(int(writer))):
            continue
        try:
            if item.is_dir() and not any(item.iterdir()):
                item.rmdir()  # empty: nothing of anyone's is lost
                continue
        except OSError:
            pass  # named below like any other
        stale.append(item)
        if str(item) in _WARNED_STALE:
            continue
        _WARNED_STALE.add(str(item))
        import warnings

        kind = "folder" if item.is_dir() else "file"
        who = f"process {writer}, no longer running" if writer.isdigit() else "an earlier version"
        warnings.warn(
            f"{item}: a temporary {kind} left by a run that did not finish ({who}; killed?) while "
            f"writing {path}; it is not used and is left as it is: look inside or remove it "
            f"(rm -r '{item}') once no run is writing {path}",
            RuntimeWarning,
            stacklevel=3,
        )
    return stale


def ensure_folder(path: str | Path) -> Path:
    """Create the output folder ``path`` (and its parents) unless it exists.

    Raises:
        OutputPathError: ``path`` (or a parent) is an existing file, or the folder cannot be made.
    """
    from spladekit.errors import OutputPathError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{path}: is a file; give a folder path for this output")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(
            f"{path}: cannot create the folder ({exc.strerror or exc}; is a parent folder a file?)"
        ) from exc
    return path


def check_output_folder(
    out: str | Path, kind: str, markers: tuple[str, ...], inputs: dict[str, Any] | None = None, option: str = "--out"
) -> Path:
    """Refuse an output folder a command would replace or write into wrongly, before any work.

    The one rule of every command writing a folder (index, import, export, inference-free, rescale,
    export-model, train): ``out`` may be a new path, an empty folder, or a folder already holding
    this kind of output (one of ``markers`` in it, e.g. ``index.json`` for an index), which the
    command then replaces or adds to as it documents. Anything else is left untouched.

    Args:
        out: the output folder.
        kind: what the command writes, for the messages ("spladekit index").
        markers: file or folder names of which one marks ``out`` as this kind of output.
        inputs: option name → path the command reads (``{"--model": ..., "--data": ...}``); values
            that are not existing local paths (hub ids, dataset names, None) are skipped.
        option: the option naming ``out``, for the messages.

    Raises:
        OutputPathError: ``out`` (resolved) is, contains or lies inside an input; a parent of ``out``
            is a file; ``out`` is a file; or ``out`` is a non-empty folder holding none of ``markers``.
    """
    from spladekit.errors import OutputPathError

    out = Path(out)
    target = out.resolve()
    for name, value in (inputs or {}).items():
        if value is None or not Path(value).exists():
            continue
        source = Path(value).resolve()
        if target == source or source in target.parents or target in source.parents:
            relation = "is" if target == source else "lies inside" if source in target.parents else "contains"
            raise OutputPathError(
                f"{option} {out} {relation} the input {name} {value}; writing there would destroy the input "
                "(choose another output folder)"
            )
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputPathError(f"{out}: its parent {parent} is a file, not a folder")
            break
    if out.exists():
        if not out.is_dir():
            raise OutputPathError(f"{out}: is a file; this output ({kind}) is a folder (the file is left as it is)")
        if any(out.iterdir()) and not any((out / name).exists() for name in markers):
            raise OutputPathError(
                f"{out}: an existing folder that is not a {kind} (no {' or '.join(markers)} in it); "
                "it is left as it is: choose a new or empty folder, or remove it first"
            )
    return out


def _give_default_modes(folder: Path) -> None:
    """Give every file and folder under ``folder`` the usual umask mode (:func:`default_mode`):
    libraries writing through ``tempfile.mkstemp`` (e.g. a model's weights) leave 0600 files."""
    files, folders = default_mode(), default_mode(directory=True)
    for root, dirs, names in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), folders)
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, files | (os.stat(path).st_mode & 0o111 & folders))  # keep execute bits


def _backup_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def recover_folder(path: str | Path) -> Path:
    """Finish or undo an interrupted :func:`atomic_folder` swap of ``path``.

    A crash between the two renames leaves ``path`` missing and its previous version at
    ``.NAME.old``: that version is put back. When ``path`` exists, a left-over backup is removed
    (the swap had completed). Returns ``path``.
    """
    path = Path(path)
    backup = _backup_of(path)
    if backup.exists():
        if path.exists():
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(backup, path)
    return path


def replace_folder(source: str | Path, path: str | Path) -> Path:
    """Put the complete folder ``source`` in place of ``path`` (same file system): ``path → .NAME.old``,
    ``source → path``, remove the backup. A crash in between leaves the old folder at ``.NAME.old``,
    which :func:`recover_folder` puts back."""
    source, path = Path(source), Path(path)
    recover_folder(path)
    if path.exists():
        backup = _backup_of(path)
        os.replace(path, backup)
        os.replace(source, path)
        shutil.rmtree(backup, ignore_errors=True)
    else:
        os.replace(source, path)
    return path


def _sibling_folder(path: Path) -> Path:
    """A new temporary folder beside ``path`` (same file system, so renames are atomic).

    Raises:
        OutputPathError: ``path`` is an existing file (left untouched) or the parent cannot be made.
    """
    from spladekit.errors import OutputPathError

    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{path}: is a file; this output is a folder (the file is left as it is)")
    ensure_folder(path.parent)
    warn_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent))
    os.chmod(tmp, default_mode(directory=True))
    return tmp


@contextlib.contextmanager
def scratch_folder(path: str | Path) -> Iterator[Path]:
    """A new empty temporary folder beside ``path`` (its file system: scratch files of a large
    output, e.g. the rows of an import), removed with all it holds when the block ends, however it ends.

    Raises:
        OutputPathError: ``path`` is an existing file (left untouched) or the parent cannot be made.
    """
    tmp = _sibling_folder(Path(path))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Write a folder atomically: yields a temporary sibling folder; on success it becomes ``path``.

    The swap is ``path → .NAME.old``, ``tmp → path``, then the backup is removed; at every instant
    either the old or the new folder is complete on disk, and :func:`recover_folder` (called here
    first, and by readers that care) restores the old one after a crash between the renames.

    Raises:
        OutputPathError: ``path`` is an existing file (left untouched) or the parent cannot be made.
        Whatever the body raises; the temporary folder is then removed and ``path`` is untouched.
    """
    path = Path(path)
    tmp = _sibling_folder(path)
    recover_folder(path)
    try:
        yield tmp
        _give_default_modes(tmp)
        replace_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_files(path: str | Path) -> Iterator[Path]:
    """Write files into the folder ``path`` all or nothing: yields a temporary sibling folder; on
    success each file written there is renamed into ``path`` (made if needed; other files already in
    it are left alone, unlike :func:`atomic_folder`, which replaces the whole folder; a sub-folder
    replaces its namesake whole). Written files get the usual umask mode (:func:`default_mode`).

    Raises:
        OutputPathError: ``path`` is an existing file (left untouched) or the parent cannot be made.
        Whatever the body raises; the temporary folder is then removed and ``path`` is untouched.
    """
    path = Path(path)
    tmp = _sibling_folder(path)
    try:
        yield tmp
        _give_default_modes(tmp)
        ensure_folder(path)
        for item in sorted(tmp.iterdir()):
            if item.is_dir() and (path / item.name).is_dir():
                replace_folder(item, path / item.name)  # a sub-folder (e.g. 1_SpladePooling) replaces its old version
            else:
                os.replace(item, path / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_write(path) as handle:
        json.dump(obj, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")


class _RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _first_repeated_key(pairs: list[tuple[str, Any]], table: dict) -> str | None:
    """The first key given twice in ``pairs`` (``table`` = ``dict(pairs)``; None when all differ)."""
    if len(table) == len(pairs):
        return None
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None  # unreachable: the lengths differ


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` of :func:`read_json`: ``json`` keeps the last of repeated keys in silence,
    which makes a settings file say two things; refused instead (RFC 8259 §4: names SHOULD be unique).
    The hook runs for every corpus line (its cost: ``benchmarks/runs/2026-12-07-source-notes.md``)."""
    table = dict(pairs)
    key = _first_repeated_key(pairs, table)
    if key is not None:
        raise _RepeatedKey(key)
    return table


class _Repeated(dict):
    """An object of the document that repeats ``key`` (what :func:`repeated_key`'s parse returns for it)."""

    key = ""


def _mark_repeated_keys(pairs: list[tuple[str, Any]], found: list) -> dict:
    table = dict(pairs)
    key = _first_repeated_key(pairs, table)
    if key is not None:
        table = _Repeated(table)
        table.key = key
        found.append(table)
    return table


def repeated_key(text: str | bytes) -> str | None:
    """Where a key first appears twice within one object of the JSON document ``text`` (at any depth;
    objects in document order, outer before inner), as a dotted path of the keys and list positions
    leading to it (``"k"``, ``"vector.1.values"``, as pydantic names fields), or None when every
    object's keys are unique: the rule of :func:`read_json` for JSON that does not come from a file
    (a request body another parser reads keeping the last value in silence).

    Raises:
        json.JSONDecodeError: ``text`` is not JSON. RecursionError: nested deeper than Python's
            ``json`` parses.
    """
    found: list = []
    document = json.loads(text, object_pairs_hook=lambda pairs: _mark_repeated_keys(pairs, found))
    if not found:
        return None  # the usual case: no walk
    stack: list[tuple[Any, tuple]] = [(document, ())]
    while stack:  # depth first, in document order (children pushed in reverse)
        node, path = stack.pop()
        if isinstance(node, _Repeated):
            return ".".join(str(part) for part in (*path, node.key))
        if isinstance(node, dict):
            stack.extend((value, (*path, key)) for key, value in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((value, (*path, i)) for i, value in reversed(list(enumerate(node))))
    return None


def read_json(path: str | Path) -> Any:
    """Read a JSON file (the counterpart of :func:`write_json`).

    Raises:
        DataFormatError: the file cannot be read, is not valid JSON (naming file, line, column), or
            repeats a key within one object (naming the key as the field).
    """
    from spladekit.errors import DataFormatError

    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_refuse_repeated_keys)
    except _RepeatedKey as exc:
        raise DataFormatError(
            path, "the key appears more than once in one object (which value is meant?)", field=exc.key
        ) from exc
    except json.JSONDecodeError as exc:
        raise DataFormatError(path, f"not valid JSON ({exc.msg}, column {exc.colno})", line=exc.lineno) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"cannot read ({exc})") from exc


def read_jsonl(
    path: str | Path, skip_blank: bool = True, object_pairs_hook=_refuse_repeated_keys
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` for each line of a JSON Lines file (``.gz`` read transparently).

    Raises:
        DataFormatError: a line is not valid JSON (naming file and line), repeats a key within one
            object (the default ``object_pairs_hook``, as :func:`read_json`; naming line and key), or the
            file cannot be read (see :func:`iter_lines`).
    """
    from spladekit.errors import DataFormatError

    path = Path(path)
    for number, line in iter_lines(path):
        if skip_blank and not line.strip():
            continue
        try:
            yield number, json.loads(line, object_pairs_hook=object_pairs_hook)
        except _RepeatedKey as exc:
            raise DataFormatError(
                path, "the key appears more than once in one object (which value is meant?)", line=number, field=exc.key
            ) from exc
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, f"not valid JSON ({exc.msg}, column {exc.colno})", line=number) from exc


def write_yaml(path: str | Path, obj: Any) -> None:
    """Write ``obj`` (plain data: dicts, lists, strings, numbers) as YAML, keys in their order,
    atomically (the counterpart of :func:`read_yaml`; settings records of runs)."""
    import yaml

    with atomic_write(path) as handle:
        yaml.safe_dump(obj, handle, sort_keys=False)


class _RepeatedYamlKey(ValueError):
    def __init__(self, key: str, line: int):
        super().__init__(key)
        self.key, self.line = key, line


def _unique_keys_loader():
    """``yaml.SafeLoader`` whose mappings refuse a repeated key (1-based line of the second one)."""
    import yaml

    class UniqueKeysLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    continue  # a complex key: SafeLoader's own checks apply
                if key in seen:
                    raise _RepeatedYamlKey(str(key), key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeysLoader


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file (an empty file reads as ``{}``).

    Raises:
        DataFormatError: the file cannot be read, is not valid YAML (naming file and line), or repeats
            a key within one mapping (YAML 1.2 §3.2.1.1: keys are unique; PyYAML keeps the last in silence).
    """
    import yaml

    from spladekit.errors import DataFormatError

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"cannot read ({exc})") from exc
    try:
        return yaml.load(text, Loader=_unique_keys_loader()) or {}
    except _RepeatedYamlKey as exc:
        raise DataFormatError(
            path, "the key appears more than once in one mapping (which value is meant?)", line=exc.line, field=exc.key
        ) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataFormatError(
            path,
            f"not valid YAML ({getattr(exc, 'problem', None) or exc})",
            line=mark.line + 1 if mark is not None else None,
        ) from exc


def count_records(path: str | Path) -> int | None:
    """Number of records :func:`read_jsonl` yields from a JSON Lines file when every line is valid
    JSON (its non-blank lines, by the same :func:`iter_lines` and the same blank test), for a
    progress bar's total. One pass over the file without parsing JSON. None when ``path`` is not a
    regular file (a pipe or FIFO can be read only once: the read proper must have it) or cannot be
    read to the end (the read proper then raises the error, naming the line).
    """
    from spladekit.errors import DataFormatError

    path = Path(path)
    if not path.is_file():
        return None
    try:
        return sum(1 for _, line in iter_lines(path) if line.strip())
    except DataFormatError:
        return None


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file, transparently decompressing ``.gz``.

    Invalid UTF-8 raises ``UnicodeDecodeError`` while reading (without a reliable line number:
    decoding happens in blocks; use :func:`iter_lines` to get one). A leading byte-order mark is
    removed (``utf-8-sig``).
    """
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline=None)
    return open(path, encoding="utf-8-sig", newline=None)


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently decompressing ``.gz``."""
    path = Path(path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


BOM = b"\xef\xbb\xbf"


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` pairs (1-based, line without its end-of-line characters).

    Tolerant reading, documented: a UTF-8 byte-order mark at the start of the file is dropped; lines
    end with ``\\n`` or ``\\r\\n`` (Windows CRLF files read exactly like LF files). A lone ``\\r`` is
    not a line break (it stays inside the line). Each line is decoded on its own, so an invalid
    UTF-8 byte is reported at the line that holds it.

    Raises:
        DataFormatError: invalid UTF-8 (naming the line), a corrupt ``.gz`` file, or an unreadable file.
    """
    from spladekit.errors import DataFormatError

    path = Path(path)
    try:
        handle = open_binary(path)
    except OSError as exc:
        raise DataFormatError(path, f"cannot open: {exc.strerror or exc}") from exc
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline()
            except (
                OSError,
                EOFError,
                zlib.error,
            ) as exc:  # gzip.BadGzipFile is an OSError; a bad deflate block is a zlib.error
                raise DataFormatError(
                    path, f"cannot read (corrupt or truncated file?): {exc}", line=number + 1
                ) from exc
            if not raw:
                return
            number += 1
            if number == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):  # CRLF, or a CR ending the last line of a CRLF file
                raw = raw[:-1]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFormatError(
                    path, f"invalid UTF-8 ({exc.reason}) at byte {exc.start} of the line", line=number
                ) from exc
            yield number, line
