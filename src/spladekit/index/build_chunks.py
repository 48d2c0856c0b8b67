"""The chunk files of a resumable :meth:`spladekit.index.index.Index.build` (``.NAME.build/chunk-NNNNNN.npz``)
and the corpus helpers of a build: what a killed build restarts from.

Moved out of :mod:`spladekit.index.index` (which uses them) to keep that module under the line limit.
"""

from __future__ import annotations

import json
from collections.abc import Sized
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import scipy.sparse as sp

from spladekit.io import atomic_write


# ----------------------------------------------------------------------------------- helpers
def _corpus_size(corpus) -> int | None:
    """Number of documents, for the progress bar: ``len`` of a sized corpus, the record count of a
    corpus file (one pass over its bytes); None for other iterables."""
    if isinstance(corpus, (str, Path)):
        from spladekit.data.beir import count_corpus

        return count_corpus(corpus)
    return len(corpus) if isinstance(corpus, Sized) else None


def _documents(corpus) -> Iterator[tuple[str, str]]:
    if isinstance(corpus, (str, Path)):
        from spladekit.data.beir import iter_corpus

        yield from iter_corpus(corpus)
    elif isinstance(corpus, Mapping):
        yield from corpus.items()
    else:
        for doc_id, text in corpus:
            yield str(doc_id), text


def _reports_batches(encoder) -> bool:
    """Whether ``encoder.encode`` takes ``on_batch`` (a :class:`SpladeEncoder` does; stand-ins need not)."""
    import inspect

    try:
        return "on_batch" in inspect.signature(encoder.encode).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def _chunks(items: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _chunk_digest(chunk: list[tuple[str, str]]) -> str:
    """SHA-256 of a chunk's ids and texts: a finished chunk is reused only for the same documents."""
    import hashlib

    return hashlib.sha256(json.dumps(chunk, ensure_ascii=False).encode("utf-8")).hexdigest()


def encoder_digest(encoder) -> str | None:
    """SHA-256 of what an encoder computes with: every tensor of its model's state (names, dtypes,
    bytes), its inference-free query weights, and its tokenizer's definition (a fast tokenizer's JSON
    less the per-call truncation and padding, else its vocabulary): a resumed build reuses chunks only from the same model, whatever
    folder it was loaded from. None for an encoder without a torch model (an ONNX one: its
    ``metadata`` names the export)."""
    import hashlib

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


def _stored_digest(path: Path) -> str | None:
    try:
        with np.load(path) as f:
            return str(f["digest"]) if "digest" in f.files else None
    except (OSError, ValueError):  # a damaged chunk file: encoded again
        return None


def _save_chunk(path: Path, vectors: sp.csr_matrix, ids: list[str], truncated: int, digest: str) -> None:
    with atomic_write(path, "wb", encoding=None) as handle:
        np.savez(handle, data=vectors.data, indices=vectors.indices, indptr=vectors.indptr, shape=np.array(vectors.shape),
                 ids=np.array(ids, dtype=str), truncated=np.array(truncated), digest=np.array(digest))


class _ChunkIds:
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


def _load_chunk(path: Path) -> sp.csr_matrix:
    with np.load(path) as f:
        return sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(int(n) for n in f["shape"]))
