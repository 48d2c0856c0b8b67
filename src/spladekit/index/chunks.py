"""The chunk journal of a resumable index build: the folder ``.NAME.build/`` beside the index folder
``NAME``, holding ``build.json`` (the fingerprint of the build's settings and model) and one
``chunk-NNNNNN.npz`` per encoded chunk (its CSR vectors, ids, truncation count and the SHA-256 of its
documents), each written atomically (temporary file, then rename). A killed build started again with
the same settings finds every finished chunk there and encodes only the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spladekit.io import atomic_write, read_json, write_json

log = logging.getLogger(__name__)


def chunk_digest(chunk: list[tuple[str, str]]) -> str:
    """SHA-256 of a chunk's ids and texts: a finished chunk is reused only for the same documents."""
    return hashlib.sha256(json.dumps(chunk, ensure_ascii=False).encode("utf-8")).hexdigest()


def encoder_digest(encoder) -> str | None:
    """SHA-256 of what an encoder computes with: every tensor of its model's state (names, dtypes,
    shapes, bytes), its inference-free query weights, and its tokenizer's definition (a fast
    tokenizer's JSON less the per-call truncation and padding, else its vocabulary): a resumed build
    reuses chunks only from the same model, whatever folder it was loaded from. None for an encoder
    without a torch model (an ONNX one: its ``metadata`` names the export)."""
    import torch

    model = getattr(encoder, "model", None)
    if not isinstance(model, torch.nn.Module):
        return None
    digest = hashlib.sha256()
    tensors = sorted(model.state_dict().items())
    weights = getattr(encoder, "query_weights", None)
    if isinstance(weights, torch.Tensor):
        tensors.append(("query_weights", weights))
    for name, tensor in tensors:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    tokenizer = getattr(encoder, "tokenizer", None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # less the truncation and padding of the last call (set per call by the encoder)
        spec = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
    else:
        spec = sorted(tokenizer.get_vocab().items()) if tokenizer is not None else None
    digest.update(json.dumps(spec, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()


def resume_build_folder(work: Path, fingerprint: dict, what: str) -> None:
    """Keep the build folder ``work`` when its ``build.json`` holds ``fingerprint`` (JSON-ready) or is
    absent (then it is written); when it holds another, delete ``work`` with a warning that it was
    ``left by {what}`` and start it anew. Creates ``work`` (its parent must exist).

    Raises:
        OSError: the folder cannot be written.
    """
    if (work / "build.json").exists() and read_json(work / "build.json") != fingerprint:
        log.warning("%s: left by %s; starting over", work, what)
        shutil.rmtree(work)
    work.mkdir(exist_ok=True)
    if not (work / "build.json").exists():
        write_json(work / "build.json", fingerprint)


class ChunkJournal:
    """The ``.NAME.build/`` folder of the build of the index folder ``out``.

    Attributes:
        folder: the journal's folder.
    """

    def __init__(self, out: Path):
        self.folder = out.with_name(f".{out.name}.build")

    def start(self, fingerprint: dict) -> None:
        """Keep the journal when it was left by a build of the same ``fingerprint`` (JSON-ready);
        else start it anew (a warning when another build's was there)."""
        path = self.folder / "build.json"
        stored = read_json(path) if path.exists() else None
        if stored != fingerprint:
            if stored is not None:
                log.warning("%s: left by a build with other settings; starting over", self.folder)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(parents=True)
            write_json(path, fingerprint)

    def path(self, number: int) -> Path:
        """The file of chunk ``number``."""
        return self.folder / f"chunk-{number:06d}.npz"

    def holds(self, number: int, digest: str) -> bool:
        """Whether chunk ``number`` is stored for the documents of ``digest`` (:func:`chunk_digest`);
        a chunk stored for other documents is logged and will be encoded again, a damaged one too."""
        path = self.path(number)
        if not path.exists():
            return False
        try:
            with np.load(path) as f:
                stored = str(f["digest"]) if "digest" in f.files else None
        except (OSError, ValueError):  # a damaged chunk file: encoded again
            stored = None
        if stored == digest:
            return True
        log.warning("%s: holds other documents than chunk %d of this corpus; encoding it again", path, number)
        return False

    def save(self, number: int, vectors: sp.csr_matrix, ids: list[str], truncated: int, digest: str) -> None:
        """Store chunk ``number`` atomically: its ``[n, V]`` vectors, ``n`` ids, documents truncated, digest."""
        with atomic_write(self.path(number), "wb", encoding=None) as handle:
            np.savez(
                handle,
                data=vectors.data,
                indices=vectors.indices,
                indptr=vectors.indptr,
                shape=np.array(vectors.shape),
                ids=np.array(ids, dtype=str),
                truncated=np.array(truncated),
                digest=np.array(digest),
            )

    def paths(self, count: int) -> list[Path]:
        """The files of chunks ``0 … count - 1``.

        Raises:
            RuntimeError: one is missing (a process of the build failed), naming the first three.
        """
        paths = [self.path(number) for number in range(count)]
        missing = [p.name for p in paths if not p.exists()]
        if missing:
            raise RuntimeError(f"{self.folder}: chunks {missing[:3]} were not written (a process failed?)")
        return paths

    def remove(self) -> None:
        """Delete the journal (the index folder is written)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def load_chunk(path: Path) -> sp.csr_matrix:
    """The ``[n, V]`` vectors of a chunk file."""
    with np.load(path) as f:
        return sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(int(n) for n in f["shape"]))


def chunk_truncated(path: Path) -> int:
    """The number of documents of a chunk file that were truncated when encoded."""
    with np.load(path) as f:
        return int(f["truncated"])


class ChunkIds:
    """The document ids of a build's chunk files, in order, read one chunk at a time (sized and
    iterable, for :func:`spladekit.index.writer.write_index`)."""

    def __init__(self, paths: list[Path], count: int):
        self.paths, self.count = paths, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        for path in self.paths:
            with np.load(path) as f:
                yield from (str(d) for d in f["ids"])
