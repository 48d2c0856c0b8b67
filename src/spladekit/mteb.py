"""A spladekit model for MTEB, evaluated as a sparse encoder; and a retrieval task of a local BEIR folder.

``pip install 'spladekit[mteb]'``. :class:`SpladeMTEB` follows mteb's encoder protocol the way its
own ``SparseEncoderWrapper`` does for sentence-transformers ``SparseEncoder`` models (``model_type``
``sparse``, dot-product similarity): for retrieval tasks ``encode`` returns a ``torch`` sparse COO
tensor ``[N, V]`` (float32; queries through :meth:`SpladeEncoder.encode_queries`, documents through
:meth:`~SpladeEncoder.encode_documents`, with the model's head: the fused head unless asked
otherwise), for the other tasks the same vectors dense. ``similarity`` is ``Σ_t q_t·d_t`` in
float32, the terms of each query added in ascending column order, as spladekit's exact search adds
them (:func:`spladekit.index.exact.search_postings`), so mteb ranks by the scores spladekit would.

Importing this module imports mteb but not torch's model code; a model loads when first encoding.

Example (the public benchmarks, where the Hugging Face hub is reachable)::

    import mteb
    from spladekit.mteb import SpladeMTEB

    model = SpladeMTEB("naver/splade-v3")
    results = mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact", "NFCorpus"]))

Offline, :func:`beir_task` makes an mteb retrieval task of a BEIR folder on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spladekit.errors import require_extra

mteb = require_extra("mteb", "spladekit.mteb", "mteb", "mteb")

from mteb.models.abs_encoder import AbsEncoder  # noqa: E402
from mteb.models.model_meta import ModelMeta, ScoringFunction  # noqa: E402

__all__ = ["SpladeMTEB", "beir_task"]


class SpladeMTEB(AbsEncoder):
    """A spladekit encoder as an mteb sparse encoder (module docstring).

    Args:
        model_name: a model folder or hub id (:meth:`SpladeEncoder.from_pretrained`), or a loaded
            :class:`~spladekit.model.encoder.SpladeEncoder`.
        revision: recorded in the model's mteb metadata (the folder or id is loaded as it is).
        device: torch device (default: CUDA when available).
        trust_remote_code: run the custom code of a model folder.
        **options: further :meth:`SpladeEncoder.from_pretrained` arguments (``query_max_length``,
            ``doc_max_length``, ``head_impl``, ``batch_size``, ...).
    """

    def __init__(
        self,
        model_name,
        revision: str | None = None,
        *,
        device: str | None = None,
        trust_remote_code: bool = False,
        **options: Any,
    ):
        self._source = model_name
        self._options = dict(options, device=device)
        if trust_remote_code:
            self._options["trust_remote_code"] = True
        self.model = None if isinstance(model_name, (str, Path)) else model_name
        name = (
            str(model_name)
            if isinstance(model_name, (str, Path))
            else (model_name.metadata.source or "spladekit-model")
        )
        self.mteb_model_meta = ModelMeta.create_empty(
            overwrites=dict(
                name=name,
                revision=revision,
                loader=type(self),
                model_type=["sparse"],
                similarity_fn_name=ScoringFunction.DOT_PRODUCT,
                framework=["PyTorch"],
                use_instructions=False,
            )
        )

    @property
    def encoder(self):
        """The :class:`~spladekit.model.encoder.SpladeEncoder` (loaded on first use)."""
        if self.model is None:
            from spladekit.model.encoder import SpladeEncoder

            self.model = SpladeEncoder.from_pretrained(self._source, **self._options)
        return self.model

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs):
        """The vectors of every text of ``inputs`` (mteb's ``DataLoader`` of ``{"text": [...]}``
        batches): documents when ``prompt_type`` is ``document``, else queries (mteb gives other
        tasks' texts as queries too: one side of a symmetric model). Retrieval tasks get a sparse COO
        tensor, the others a dense float32 array (``[N, V]`` either way)."""
        from mteb.types import PromptType

        texts = [text for batch in inputs for text in batch["text"]]
        options = {"batch_size": kwargs["batch_size"]} if kwargs.get("batch_size") else {}
        if kwargs.get("show_progress_bar"):
            options["show_progress"] = True
        side = self.encoder.encode_documents if prompt_type == PromptType.document else self.encoder.encode_queries
        vectors = side(texts, **options)
        if _sparse_task(task_metadata):
            return _to_torch(vectors)
        return vectors.toarray()

    def similarity(self, embeddings1, embeddings2):
        """``[N1, N2]`` dot products (float32, a ``torch`` tensor) of two sets of vectors (sparse
        tensors, arrays or CSR matrices; a ``[V]`` vector counts as one row)."""
        import torch

        left, right = _to_csr(embeddings1), _to_csr(embeddings2)
        return torch.from_numpy((left @ right.T.tocsr()).toarray())

    def similarity_pairwise(self, embeddings1, embeddings2):
        """``[N]`` dot products of the pairs of rows ``i`` (float32, a ``torch`` tensor)."""
        import numpy as np
        import torch

        left, right = _to_csr(embeddings1), _to_csr(embeddings2)
        if left.shape != right.shape:
            raise ValueError(f"pairs of rows need matrices of one shape, got {left.shape} and {right.shape}")
        return torch.from_numpy(np.asarray(left.multiply(right).sum(axis=1), dtype=np.float32).ravel())


def _sparse_task(task_metadata) -> bool:
    """Whether mteb's evaluator of the task takes sparse tensors: retrieval, not reranking (the rule
    of mteb's own sparse-encoder wrapper)."""
    return getattr(task_metadata, "simplified_task_type", None) == "retrieval" and "Reranking" not in task_metadata.type


def _to_torch(matrix):
    """A ``[N, V]`` CSR matrix as a coalesced float32 ``torch`` sparse COO tensor."""
    import numpy as np
    import torch

    coo = matrix.tocoo()
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data.astype(np.float32))
    return torch.sparse_coo_tensor(indices, values, size=matrix.shape, check_invariants=True).coalesce()


def _to_csr(embeddings):
    """Sparse or dense ``torch`` tensors, arrays and scipy matrices → float32 CSR, canonical (sorted
    columns: the order in which :meth:`SpladeMTEB.similarity` adds the products)."""
    import numpy as np
    import scipy.sparse as sp

    if sp.issparse(embeddings):
        matrix = sp.csr_matrix(embeddings, dtype=np.float32)
    elif hasattr(embeddings, "is_sparse") and embeddings.is_sparse:
        coo = embeddings.detach().cpu().coalesce()
        rows, cols = coo.indices().numpy()
        matrix = sp.csr_matrix((coo.values().float().numpy(), (rows, cols)), shape=tuple(coo.shape))
    else:
        dense = (
            embeddings.detach().cpu().float().numpy()
            if hasattr(embeddings, "detach")
            else np.asarray(embeddings, np.float32)
        )
        matrix = sp.csr_matrix(np.atleast_2d(dense).astype(np.float32))
    matrix.sum_duplicates()
    matrix.sort_indices()
    return matrix


def beir_task(folder: str | Path, split: str = "test", name: str | None = None):
    """An mteb retrieval task (``AbsTaskRetrieval``, mteb's own data format) of a BEIR folder on disk:
    ``corpus.jsonl[.gz]`` (``_id``, ``title``, ``text``), ``queries.jsonl`` and ``qrels/SPLIT.tsv``,
    read by spladekit's BEIR readers (:func:`spladekit.data.beir.load_beir`: ids normalised, each
    document's text ``title + " " + text``, the text spladekit encodes; mteb strips its ends); queries
    without judgments left out, as mteb's loader does.

    Args:
        name: the task's name (default: the folder's name).

    Raises:
        DataFormatError, ResolutionError: as :func:`spladekit.data.beir.load_beir`.
    """
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.tasks.retrieval.eng.sci_fact_retrieval import SciFact

    folder = Path(folder)
    data = _read_beir_split(folder, split)
    metadata = SciFact.metadata.model_copy(
        update=dict(  # a valid retrieval task's metadata, renamed
            name=name or folder.name,
            dataset={"path": str(folder), "revision": "local"},
            eval_splits=[split],
            description=f"the BEIR folder {folder} ({split} split), read from disk",
            reference=None,
            prompt=None,
        )
    )

    class LocalBeir(AbsTaskRetrieval):
        def load_data(self, num_proc=None, **kwargs) -> None:
            if not self.data_loaded:
                self.dataset = {"default": {split: data}}
                self.data_loaded = True

    LocalBeir.metadata = metadata
    return LocalBeir()


def _read_beir_split(folder: Path, split: str) -> dict:
    """mteb's ``RetrievalSplitData`` of a BEIR folder: corpus and queries as ``datasets.Dataset``, each
    document's text the one spladekit encodes (``title + " " + text``), its title column empty."""
    from datasets import Dataset

    from spladekit.data.beir import load_beir

    dataset = load_beir(folder, split)
    corpus = {"id": list(dataset.corpus), "title": [""] * len(dataset.corpus), "text": list(dataset.corpus.values())}
    queries = {"id": list(dataset.queries), "text": list(dataset.queries.values())}
    qrels = {qid: {doc: int(grade) for doc, grade in docs.items()} for qid, docs in dataset.qrels.items()}
    return {
        "corpus": Dataset.from_dict(corpus),
        "queries": Dataset.from_dict(queries),
        "relevant_docs": qrels,
        "top_ranked": None,
    }
