"""The service of one ``spladekit serve`` worker: the index, its query encoder and the batch function.

:class:`Service` loads the index (:meth:`spladekit.index.index.Index.open`, only read) and the query
encoder once per worker process, and answers one micro-batch of validated requests at a time
(:meth:`Service.run_batch`, called by :class:`spladekit.serve.batching.MicroBatcher`). The HTTP side
is :mod:`spladekit.serve.app`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spladekit.index.searcher import SearcherConfig
from spladekit.serve.config import ServeConfig
from spladekit.serve.schemas import request_model

log = logging.getLogger("spladekit.serve")


class Service:
    """The index, its query encoder and the batch function of one worker.

    Raises (at construction):
        DataFormatError: the index folder cannot be opened.
        ResolutionError / HeadNotFoundError: the query model cannot be loaded.
    """

    def __init__(self, config: ServeConfig, threads: int | None = None):
        """``threads``: torch/Seismic threads while loading and answering (None: ``config.worker_threads()``;
        1 in a server whose workers are forked from it, :meth:`share`)."""
        import threading

        import torch
        from tqdm import tqdm

        from spladekit.index.index import Index

        # transformers' "Loading weights" bar would give tqdm its default lock, a multiprocessing
        # semaphore that is never released in a worker process: at every stop of a server with
        # workers > 1, multiprocessing's resource tracker warned of "2 leaked semaphore objects";
        # a thread lock is all one process's bars need
        tqdm.set_lock(threading.RLock())
        self.config = config
        self.threads = threads or config.worker_threads()
        torch.set_num_threads(self.threads)
        self.index = Index.open(config.index)
        self.num_docs, self.vocab_size = self.index.docs.shape
        self.shared = False
        self._load_encoder()
        missing = {"seismic": _seismic_unavailable(self.index), "two_step": _two_step_unavailable(self.index)}
        self.unavailable = {name: why for name, why in missing.items() if why}
        self.backends = ("exact", *(name for name, why in missing.items() if not why))
        if "seismic" in self.backends:
            self.index.seismic()  # the stored index, loaded once here (never built by a request)
        if "two_step" in self.backends:
            self.index.pruned()  # the stored pruned copy, checked and loaded once here (never built by a request)
        self.vocabulary = _vocabulary(self.index, self.encoder)
        self.request_model = request_model(
            self.vocab_size,
            self.backends,
            config.max_k,
            config.max_query_chars,
            config.max_queries,
            unavailable=self.unavailable,
            max_knn=self.index.seismic().knn_len if "seismic" in self.backends else 0,
        )
        self.index.search(sp.csr_matrix((1, self.vocab_size), dtype=np.float32), k=1)

    def _load_encoder(self) -> None:
        self.encoder, self.encoder_kind = _query_encoder(
            self.index, self.config.model, self.config.max_batch, self.config.trust_remote_code
        )
        if self.encoder is not None:  # the first forward pass is slow (allocations, kernels): not a request's
            self.encoder.encode_queries(["warm up"])

    def share(self) -> None:
        """Make this service (loaded with ``threads=1``) the one that forked workers share: the query
        encoder is dropped (each worker loads its own in :meth:`enter_worker`: neither torch's OpenMP
        pool, once it has run, nor onnxruntime's threads work in a forked child: a child's first
        parallel operation hung) and the Python objects left are frozen out of the garbage
        collector (``gc.freeze``: its passes would write to their pages, copying them into each worker)."""
        import gc

        if self.threads != 1:
            raise RuntimeError("a shared service is loaded with threads=1 (torch's OpenMP pool does not survive fork)")
        self.encoder = None
        self.shared = True
        gc.collect()
        gc.freeze()

    def enter_worker(self) -> None:
        """In a worker forked from the server after :meth:`share`: this worker's thread count and its
        own query encoder (the index, Seismic shards included, stays the server's, shared)."""
        import torch

        self.threads = self.config.worker_threads()
        torch.set_num_threads(self.threads)
        self._load_encoder()
        self.shared = False

    def info(self) -> dict:
        from spladekit.version import __version__

        meta = self.index.metadata
        settings = self.config.model_dump(exclude={"api_key_file"})
        settings.update(api_key=self.config.api_key_file is not None, threads_per_worker=self.threads)
        encoder = None
        if self.encoder is not None:
            m = self.encoder.metadata
            encoder = {
                "kind": self.encoder_kind,
                "model": self.config.model or meta.get("model"),
                "query_max_length": m.query_max_length,
                "query_top_k": m.query_top_k,
                "query_pruning": getattr(m, "query_pruning", None),
            }
        return {
            "server": {"name": "spladekit", "version": __version__, "settings": settings},
            "index": {
                "num_docs": self.num_docs,
                "vocab_size": self.vocab_size,
                "model": meta.get("model"),
                "query_max_length": meta.get("query_max_length"),
                "doc_max_length": meta.get("doc_max_length"),
                "content_hash": meta.get("content_hash"),
                "metadata": meta,
            },
            "query_encoder": encoder,
            "backends": list(self.backends),
            "unavailable_backends": dict(self.unavailable),
        }

    # ------------------------------------------------------------------ one micro-batch
    def run_batch(self, requests: Sequence) -> list:
        """Answer a batch of validated requests: the texts of all of them encoded in one call, then
        one :meth:`Index.search` per group of requests with the same searcher configuration and ``k``.
        A group that fails gets its exception (the other groups are answered)."""
        answers: list = [None] * len(requests)
        vectors: list[sp.csr_matrix | None] = [None] * len(requests)
        texts = [(i, r.query) for i, r in enumerate(requests) if r.query is not None]
        if texts:
            try:
                if self.encoder is None:
                    raise NoQueryModel()
                encoded = self.encoder.encode_queries(
                    [t for _, ts in texts for t in ts], batch_size=max(1, self.config.max_batch)
                )
            except Exception as exc:  # noqa: BLE001  (given to the text requests; vector requests go on)
                encoded = exc
            start = 0
            for i, ts in texts:
                if isinstance(encoded, Exception):
                    answers[i] = encoded
                else:
                    vectors[i] = encoded[start : start + len(ts)]
                start += len(ts)
        for i, r in enumerate(requests):
            if r.vector is not None:
                vectors[i] = _csr(r.vector, self.vocab_size)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            if answers[i] is None:
                groups.setdefault((self._searcher(r), r.k), []).append(i)
        batch_queries = sum(r.size for r in requests)
        for (searcher, k), members in groups.items():
            try:
                stacked = sp.vstack([vectors[i] for i in members], format="csr")
                result = self.index.search(stacked, k=k, searcher=searcher)
                start = 0
                for i in members:
                    size = vectors[i].shape[0]
                    answers[i] = self._answer(requests[i], result.hits[start : start + size], vectors[i], batch_queries)
                    start += size
            except Exception as exc:  # noqa: BLE001
                log.exception("search of %d requests failed", len(members))
                for i in members:
                    answers[i] = exc
        return answers

    def _searcher(self, request) -> SearcherConfig:
        """The searcher configuration of a validated request: its ``backend`` with its parameters
        (Seismic: the request's ``seismic`` fields, this worker's threads; two-step: the request's
        ``two_step`` fields; never a build: the stored index or pruned copy as loaded)."""
        from spladekit.index.index import searcher_config
        from spladekit.index.seismic import SeismicSearchParams

        if request.backend == "two_step":  # the stored copy's rule; the request's candidates, else the default
            return searcher_config(
                "two_step", **(request.two_step.model_dump(exclude_none=True) if request.two_step is not None else {})
            )
        if request.backend != "seismic":
            return searcher_config(request.backend)
        asked = (
            request.seismic.model_dump(include={"query_cut", "heap_factor", "n_knn"})
            if request.seismic is not None
            else {}
        )
        return searcher_config("seismic", search=SeismicSearchParams(**asked, num_threads=self.threads))

    def _answer(self, request, hits: list[list[tuple[str, float]]], vectors: sp.csr_matrix, batch_queries: int) -> dict:
        results = []
        for row, row_hits in enumerate(hits):
            if request.fields == "ids":
                result = {"hits": [doc for doc, _ in row_hits]}
            else:
                result = {"hits": [{"id": doc, "score": score} for doc, score in row_hits]}
            if request.fields == "terms":
                result["terms"] = self._terms(vectors[row], request.top_terms or 10)
            results.append(result)
        return {"results": results, "k": request.k, "backend": request.backend, "batch_queries": batch_queries}

    def _terms(self, row: sp.csr_matrix, top: int) -> list[dict]:
        """The ``top`` heaviest terms of a 1-row vector (ties: lower column first)."""
        order = np.lexsort((row.indices, -row.data))[:top]
        return [
            {
                "term": self.vocabulary[int(row.indices[i])] if self.vocabulary else f"[{int(row.indices[i])}]",
                "weight": float(row.data[i]),
            }
            for i in order
        ]


class NoQueryModel(RuntimeError):
    """Text queries on a server without a query model."""

    def __init__(self):
        super().__init__(
            "this server has no query model (the index records none); send vectors, or start it with --model"
        )


def _csr(vectors, vocab_size: int) -> sp.csr_matrix:
    """Validated sparse vectors → ``[n, V]`` float32 CSR, columns sorted (unique by validation)."""
    indptr = np.cumsum([0] + [len(v.indices) for v in vectors])
    indices = np.fromiter((j for v in vectors for j in v.indices), dtype=np.int64, count=int(indptr[-1]))
    data = np.fromiter((w for v in vectors for w in v.values), dtype=np.float32, count=int(indptr[-1]))
    matrix = sp.csr_matrix((data, indices, indptr), shape=(len(vectors), vocab_size))
    matrix.sort_indices()
    return matrix


def _query_encoder(index, model: str | None, batch_size: int, trust_remote_code: bool = False):
    """``(encoder, kind)`` of the index's queries (:meth:`Index.query_encoder`: an exported ONNX folder
    runs in onnxruntime, any other model in torch); ``kind`` says which, and ``inference-free`` when the
    query side is a term-weight table. ``(None, None)`` when neither the index nor ``model`` names one."""
    from spladekit.model.onnx_export import OnnxSpladeEncoder

    if not (model or index.metadata.get("model")):
        return None, None
    encoder = index.query_encoder(model, batch_size=batch_size, trust_remote_code=trust_remote_code)
    kind = (
        "onnx"
        if isinstance(encoder, OnnxSpladeEncoder)
        else f"torch ({getattr(encoder.model, 'head_impl', 'its own modules')} head)"
    )
    if encoder.query_weights is not None:
        kind = f"inference-free (term weights; {kind} for documents)"
    return encoder, kind


def _seismic_unavailable(index) -> str | None:
    """Why Seismic search cannot be served from this folder (no stored index, pyseismic-lsr not
    installed, a stored index built over other vectors), or None when it can. Where an index is
    stored but cannot be used, the reason is also logged as a warning."""
    params = index.folder / "seismic" / "params.json"
    if not params.exists():
        return (
            "Seismic needs a Seismic index stored in the index folder (`spladekit search --backend seismic` builds it)"
        )
    from spladekit.errors import MissingExtraError
    from spladekit.index.seismic import import_seismic
    from spladekit.io import read_json

    try:
        import_seismic()
    except MissingExtraError as exc:
        reason = f"a Seismic index is stored, but {exc}"
    else:
        if read_json(params).get("content_hash") == index.metadata.get("content_hash"):
            return None
        reason = "the stored Seismic index was built over other vectors"
    log.warning("%s: %s; serving exact search only", index.folder, reason)
    return reason


def _two_step_unavailable(index) -> str | None:
    """Why two-step search cannot be served from this folder (no stored pruned copy), or None when it
    can (a stored copy that is not this index's is refused when it is loaded, naming the file)."""
    if (index.folder / "pruned" / "pruned.json").exists():
        return None
    return "two-step search needs a pruned copy stored in the index folder (`spladekit search --backend two_step` builds it)"


def _vocabulary(index, encoder) -> list[str] | None:
    from spladekit.index.layout import load_vocabulary

    vocab = load_vocabulary(index.folder)
    if vocab is None and encoder is not None:
        vocab = encoder.vocabulary
    return vocab
