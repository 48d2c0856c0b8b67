"""``spladekit index``: a model and a BEIR corpus → an index folder, data-parallel under ``torchrun``.

The work is :meth:`spladekit.index.index.Index.build` (streamed in chunks, resumable, chunk ``c``
encoded by rank ``c mod W``; a chunk holds the same documents whatever ``W`` is, so the folder
equals a one-process one up to float32 rounding: the same computation, bit-identical only where the
BLAS makes the same choices in every process, which none promises); this module resolves the model and data, places each rank on its
device and records the configuration.

Run::

    torchrun --nproc_per_node 4 -m spladekit index --model M --data DIR --out INDEX

Processes meet through :func:`spladekit.distributed.init_distributed` (gloo on CPU; only barriers
are used; chunks travel through the file system next to ``--out``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from spladekit.index.layout import model_record, model_revision  # noqa: F401  (moved there; Index.build uses it too)


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
        chunk_size: documents per chunk (unit of memory, resumption and parallelism).
        trust_remote_code: run the model folder's own code (:mod:`spladekit.model.remote_code`).
    """

    model: str
    data: str
    out: str
    batch_size: int = 32
    doc_max_length: int | None = None
    doc_top_k: int | None = None
    head_impl: str | None = None
    chunk_size: int = 10_000
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        """Refuse values the encoder would refuse, at construction: before a model loads or the
        temporary ``.OUT.build`` folder is made (a length holds the 2 special tokens).

        Raises:
            ValueError: naming the option (``--doc-max-length``, ``--doc-top-k``, ...) and the bound.
        """
        for name, value, least, note in (("doc_max_length", self.doc_max_length, 2, "special tokens included"),
                                         ("doc_top_k", self.doc_top_k, 1, "or left out: every weight kept"),
                                         ("batch_size", self.batch_size, 1, None), ("chunk_size", self.chunk_size, 1, None)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                option = "--" + name.replace("_", "-")
                raise ValueError(f"{option} must be an integer ≥ {least}{f' ({note})' if note else ''}, got {value!r}")


def build_index(config: IndexConfig, show_progress: bool = False, memory_budget: int | None = None) -> Path | None:
    """Encode ``config.data``'s corpus with ``config.model`` into the index folder ``config.out``.

    Runs as one process, or as every rank of a ``torchrun`` job (see the module docstring); a killed
    run started again with the same configuration resumes (finished chunks are not encoded again).
    ``index.json`` records the model id and revision, the max lengths and pruning the model's
    metadata gave (``spladekit.json``), the number of truncated documents, and ``config``;
    ``vocab.json`` the model's vocabulary. ``memory_budget``: bytes of working memory of the folder's
    write (:mod:`spladekit.index.writer`; None: its default); not recorded, since the folder is the
    same byte for byte at any budget (a resumed build may use another).

    Returns:
        The index folder on rank 0; None on other ranks.

    Raises:
        ResolutionError: the model or data cannot be found.
        DataFormatError: malformed corpus.
        ValueError: ``batch_size`` or ``chunk_size`` < 1 (or a bad max length / top-k, see :class:`SpladeEncoder`).
        OutputPathError: ``out`` is an existing file (checked before encoding).
    """
    from spladekit.data.beir import find_file
    from spladekit.data.resolve import resolve_dataset, resolve_model
    from spladekit.distributed import init_distributed
    from spladekit.index.index import Index
    from spladekit.model.encoder import SpladeEncoder

    if memory_budget is not None:
        from spladekit.index.writer import check_budget

        check_budget(memory_budget)  # before the model loads
    for name in ("batch_size", "chunk_size"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be ≥ 1, got {getattr(config, name)}")
    if Path(config.out).exists() and not Path(config.out).is_dir():
        from spladekit.errors import OutputPathError

        raise OutputPathError(f"{config.out}: is a file; an index is a folder (the file is left as it is)")
    dist = init_distributed()
    try:
        folder = resolve_dataset(config.data)
        corpus = find_file(folder, "corpus")
        location = resolve_model(config.model)
        encoder = SpladeEncoder.from_pretrained(
            location,
            doc_max_length=config.doc_max_length,
            doc_top_k=config.doc_top_k,
            batch_size=config.batch_size,
            head_impl=config.head_impl,
            trust_remote_code=config.trust_remote_code,
            device=dist.device(),  # one GPU per rank under torchrun; else SpladeEncoder's default
        )
        metadata = dict(model_record(config.model, location), data=str(folder), config=asdict(config))
        budget = {} if memory_budget is None else {"memory_budget": memory_budget}
        index = Index.build(encoder, corpus, config.out, chunk_size=config.chunk_size, metadata=metadata, show_progress=show_progress, **budget)
        return None if index is None else index.folder
    finally:
        dist.close()
