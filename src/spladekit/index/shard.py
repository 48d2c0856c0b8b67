"""Build an index folder from a model and a BEIR corpus, data-parallel under ``torchrun``.

Every process (rank ``r`` of ``W``) encodes a shard of the corpus; rank 0 merges the shards into
one index folder, written atomically by :func:`spladekit.index.io.save_index`. Sharding follows
the encoder's own batching: documents are ordered by length (longest first, stable, as
:meth:`SpladeEncoder.encode` does), cut into batches of ``batch_size``, and batch ``b`` goes to
rank ``b mod W``. Every batch therefore holds the same documents (and the same padding) whatever
``W`` is, so a merged index equals a one-process one up to float32 rounding (the same computation;
bit-identical only where the BLAS makes the same choices in every process, which none promises).

Run::

    torchrun --nproc_per_node 4 -m spladekit index --model M --data DIR --out INDEX

Processes meet through ``torch.distributed`` (gloo backend on CPU, NCCL is not needed: only a
barrier is used; shards travel through the file system next to ``--out``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.index.io import save_index


@dataclass
class IndexConfig:
    """What ``spladekit index`` was asked to do (saved in ``index.json`` under ``config``).

    Attributes:
        model: model folder or hub id.
        data: BEIR folder or dataset name.
        out: index folder.
        batch_size: documents per forward pass.
        doc_max_length: None: the model's saved value (``spladekit.json``) or 256.
        doc_top_k: keep the k largest weights per document (None: the model's saved value).
        head_impl: SPLADE head, ``"plain"`` / ``"fused"`` / None (default).
    """

    model: str
    data: str
    out: str
    batch_size: int = 32
    doc_max_length: int | None = None
    doc_top_k: int | None = None
    head_impl: str | None = None


def model_revision(location: str | Path) -> str | None:
    """A revision string for a resolved model: the hub snapshot's commit for hub-cache folders,
    else ``sha256:<hex>`` of its weights file for local folders, else None."""
    from spladekit.data.resolve import sha256_file

    path = Path(location)
    if path.parent.name == "snapshots":
        return path.name
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).exists():
            return "sha256:" + sha256_file(path / name)
    return None


def shard_batches(lengths: Sequence[int], batch_size: int, rank: int, world_size: int) -> list[np.ndarray]:
    """Row numbers of the batches rank ``rank`` of ``world_size`` encodes.

    Args:
        lengths: a length per text (characters; the encoder's ordering key).

    Returns:
        Batches ``b ≡ rank (mod world_size)`` of the longest-first stable order.
    """
    order = np.argsort([-n for n in lengths], kind="stable")
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    return batches[rank::world_size]


def encode_shard(encoder, texts: Sequence[str], batches: Sequence[np.ndarray], show_progress: bool = False) -> tuple[sp.csr_matrix, np.ndarray, int]:
    """Encode the given batches; returns ``(vectors [n, V], their row numbers [n], truncated count)``."""
    from tqdm.auto import tqdm

    blocks, rows, truncated = [], [], 0
    for batch in tqdm(batches, desc="documents", unit="batch", disable=not show_progress):
        blocks.append(encoder.encode_documents([texts[i] for i in batch], batch_size=max(1, len(batch))))
        truncated += encoder.last_truncated
        rows.append(np.asarray(batch, dtype=np.int64))
    if not blocks:
        return sp.csr_matrix((0, encoder.vocab_size), dtype=np.float32), np.zeros(0, np.int64), 0
    return sp.vstack(blocks, format="csr").astype(np.float32), np.concatenate(rows), truncated


def _save_shard(path: Path, vectors: sp.csr_matrix, rows: np.ndarray, truncated: int) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, data=vectors.data, indices=vectors.indices, indptr=vectors.indptr, shape=np.array(vectors.shape), rows=rows, truncated=np.array([truncated]))
    os.replace(tmp, path)


def merge_shards(paths: Sequence[Path], num_rows: int) -> tuple[sp.csr_matrix, int]:
    """Merge shard files into one ``[num_rows, V]`` matrix in corpus order.

    Raises:
        ValueError: the shards do not cover every row exactly once.
    """
    blocks, rows, truncated = [], [], 0
    for path in paths:
        with np.load(path) as f:
            blocks.append(sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"])))
            rows.append(f["rows"])
            truncated += int(f["truncated"][0])
    order = np.concatenate(rows)
    if order.size != num_rows or not np.array_equal(np.sort(order), np.arange(num_rows)):
        raise ValueError(f"shards cover {order.size} rows ({np.unique(order).size} distinct) of {num_rows}")
    stacked = sp.vstack(blocks, format="csr")
    inverse = np.empty_like(order)
    inverse[order] = np.arange(num_rows)
    return stacked[inverse].astype(np.float32), truncated


def _distributed() -> tuple[int, int, bool]:
    """``(rank, world_size, initialised_here)`` from torchrun's environment (gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, False
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), False
    dist.init_process_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size(), True


def build_index(config: IndexConfig, show_progress: bool = False) -> Path | None:
    """Encode ``config.data``'s corpus with ``config.model`` into the index folder ``config.out``.

    Runs as one process, or as every rank of a ``torchrun`` job (see the module docstring).
    ``index.json`` records the model id and revision, the max lengths and pruning the model's
    metadata gave (``spladekit.json``), the number of truncated documents, and ``config``;
    ``vocab.json`` the model's vocabulary.

    Returns:
        The index folder on rank 0; None on other ranks.

    Raises:
        ResolutionError: the model or data cannot be found.
        DataFormatError: malformed corpus.
        ValueError: ``batch_size`` < 1 (or a bad max length / top-k, see :class:`SpladeEncoder`).
        OutputPathError: ``out`` is an existing file (checked before encoding).
    """
    from spladekit.data.beir import _find, read_corpus
    from spladekit.data.resolve import resolve_dataset, resolve_model
    from spladekit.model.encoder import SpladeEncoder

    if config.batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {config.batch_size}")
    if Path(config.out).exists() and not Path(config.out).is_dir():
        from spladekit.errors import OutputPathError

        raise OutputPathError(f"{config.out}: is a file; an index is a folder (the file is left as it is)")
    rank, world, owns_group = _distributed()
    try:
        folder = resolve_dataset(config.data)
        corpus = read_corpus(_find(folder, "corpus"))
        doc_ids, texts = list(corpus), list(corpus.values())
        location = resolve_model(config.model)
        device = None  # SpladeEncoder's default: CUDA when available, else CPU
        if world > 1:
            import torch

            if torch.cuda.is_available():  # one GPU per rank (torchrun's LOCAL_RANK)
                device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}"
        encoder = SpladeEncoder.from_pretrained(
            location,
            doc_max_length=config.doc_max_length,
            doc_top_k=config.doc_top_k,
            batch_size=config.batch_size,
            head_impl=config.head_impl,
            device=device,
        )
        batches = shard_batches([len(t) for t in texts], config.batch_size, rank, world)
        vectors, rows, truncated = encode_shard(encoder, texts, batches, show_progress=show_progress and rank == 0)
        out = Path(config.out)
        shard_dir = out.with_name(f".{out.name}.shards")
        if world > 1:
            import torch.distributed as dist

            if rank == 0:
                shutil.rmtree(shard_dir, ignore_errors=True)
                shard_dir.mkdir(parents=True)
            dist.barrier()
            _save_shard(shard_dir / f"rank-{rank:05d}.npz", vectors, rows, truncated)
            dist.barrier()
            if rank != 0:
                dist.barrier()
                return None
            vectors, truncated = merge_shards([shard_dir / f"rank-{r:05d}.npz" for r in range(world)], len(texts))
        else:
            inverse = np.empty_like(rows)
            inverse[rows] = np.arange(rows.size)
            vectors = vectors[inverse]
        meta = dict(asdict(encoder.metadata))
        meta.update(
            model=config.model,
            model_revision=model_revision(location),
            data=str(folder),
            truncated_docs=truncated,
            world_size=world,
            config=asdict(config),
        )
        save_index(out, vectors, doc_ids, meta, vocabulary=encoder.vocabulary)
        if world > 1:
            shutil.rmtree(shard_dir, ignore_errors=True)
            dist.barrier()
        return out
    finally:
        if owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()
