"""Per-term statistics the IDF- and DF-aware regularisers need, estimated from the training documents.

- **IDF** (``idf_flops``, :func:`spladekit.train.regularizers.idf_flops_regularizer`): computed once
  from the tokens of the training documents (:func:`training_idf`), the BM25 form of
  :mod:`spladekit.model.inference_free` (Geng et al.'s query weights start from the same IDF).
- **Document frequency of the model's terms** (``df_flops``): how many of a fixed sample of training
  documents the *model* gives term ``j`` (weight > 0), re-estimated every ``refresh_every`` steps as
  training changes the model (:class:`DocumentFrequencyEstimate`; Porco et al., arXiv 2505.15070,
  re-estimate it periodically from document vectors).

Example::

    estimate = DocumentFrequencyEstimate(vocab_size, alpha=0.1, beta=5.0, refresh_every=100)
    estimate.choose_sample(documents, size=1000, seed=0)
    if estimate.due(step):
        vectors = encode(estimate.texts)                       # [n, V], the current model, no gradient
        estimate.refresh(active_term_counts(vectors), len(estimate.texts), step)
    loss = df_flops_regularizer(d, estimate.weights())
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from spladekit.train.regularizers import df_activation


def training_idf(tokenizer, documents: Sequence[str], vocab_size: int) -> torch.Tensor:
    """``[V]`` float32 ``idf_j = ln(1 + (N − df_j + 0.5) / (df_j + 0.5))``, > 0 for every term.

    ``df_j``: the documents whose tokens (no special tokens; :func:`spladekit.model.inference_free.
    document_frequencies`) contain ``j``. Special tokens (``tokenizer.all_special_ids``) get
    ``df = N``, the smallest IDF (the largest IDF-aware FLOPS cost): a SPLADE model should not use
    them as terms.

    Raises:
        ValueError: no documents; a token id ≥ ``vocab_size``.
    """
    from spladekit.model.inference_free import document_frequencies

    if len(documents) == 0:
        raise ValueError("IDF needs at least one training document")
    df = document_frequencies(tokenizer, documents, vocab_size).astype(np.float64)
    n = float(len(documents))
    special = [j for j in getattr(tokenizer, "all_special_ids", []) or [] if 0 <= j < vocab_size]
    df[special] = n
    return torch.from_numpy(np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32))


def active_term_counts(vectors) -> torch.Tensor:
    """``[V]`` int64: the number of rows (documents) with weight > 0 in each column.

    Args:
        vectors: ``[n, V]`` dense tensor or scipy sparse matrix.
    """
    if sp.issparse(vectors):
        return torch.from_numpy(np.asarray((sp.csr_matrix(vectors) > 0).sum(axis=0), dtype=np.int64).ravel())
    return (torch.as_tensor(vectors).detach() > 0).sum(dim=0).to(torch.int64).cpu()


class DocumentFrequencyEstimate:
    """The document frequencies DF-FLOPS weighs terms by, and when to re-estimate them.

    Args:
        vocab_size: V.
        alpha, beta: of :func:`~spladekit.train.regularizers.df_activation`.
        refresh_every: steps between estimates; one is due at step 0 and every multiple of it, and
            whenever none has been made (a resumed run without a saved estimate).

    Attributes:
        texts: the sample of training documents encoded for each estimate (:meth:`choose_sample`).
        counts: ``[V]`` int64 document frequencies of the last estimate (None before the first).
        num_docs: documents the last estimate counted over.
        step: the step of the last estimate (None before the first).
    """

    def __init__(self, vocab_size: int, alpha: float, beta: float, refresh_every: int):
        if refresh_every < 1:
            raise ValueError(f"refresh_every must be >= 1, got {refresh_every}")
        df_activation(torch.zeros(1), alpha, beta)  # α, β checked here
        self.vocab_size, self.alpha, self.beta, self.refresh_every = vocab_size, alpha, beta, refresh_every
        self.texts: list[str] = []
        self.counts: torch.Tensor | None = None
        self.num_docs = 0
        self.step: int | None = None
        self._weights: torch.Tensor | None = None

    def choose_sample(self, documents: Sequence[str], size: int, seed: int = 0) -> list[str]:
        """Fix the documents every estimate encodes: ``size`` of ``documents`` (all when fewer),
        drawn without replacement by ``numpy.random.default_rng(seed)``, in their input order."""
        if len(documents) == 0:
            raise ValueError("DF-FLOPS needs at least one training document to estimate document frequencies")
        if len(documents) <= size:
            self.texts = list(documents)
        else:
            chosen = np.sort(np.random.default_rng(seed).choice(len(documents), size=size, replace=False))
            self.texts = [documents[i] for i in chosen]
        return self.texts

    def due(self, step: int) -> bool:
        """Whether an estimate should be made of the model after ``step`` optimiser steps (the trainer
        asks before each update: ``step`` = the updates done so far, 0 before the first)."""
        return self.counts is None or (step % self.refresh_every == 0 and step != self.step)

    def refresh(self, counts: torch.Tensor, num_docs: int, step: int) -> None:
        """Store a new estimate: ``counts[j]`` of ``num_docs`` documents have term ``j`` (summed over
        processes by the caller under data parallelism).

        Raises:
            ValueError: ``counts`` not ``[V]``, negative or above ``num_docs``; ``num_docs`` < 1.
        """
        counts = torch.as_tensor(counts).detach().to(torch.int64).cpu()
        if counts.shape != (self.vocab_size,):
            raise ValueError(
                f"document-frequency counts must have shape [{self.vocab_size}], got {tuple(counts.shape)}"
            )
        if num_docs < 1 or bool(torch.any(counts < 0)) or bool(torch.any(counts > num_docs)):
            raise ValueError(f"document frequencies must lie in [0, num_docs = {num_docs}] (num_docs >= 1)")
        self.counts, self.num_docs, self.step = counts, int(num_docs), int(step)
        self._weights = df_activation(counts.double() / num_docs, self.alpha, self.beta)

    def weights(self) -> torch.Tensor:
        """``[V]`` float32 ``a_j = df_activation(DF_j / |C|)`` of the last estimate.

        Raises:
            RuntimeError: no estimate yet (:meth:`due` is true before the first step).
        """
        if self._weights is None:
            raise RuntimeError("DF-FLOPS before any document-frequency estimate: call refresh() when due(step)")
        return self._weights

    def summary(self) -> dict:
        """The last estimate in numbers for the metrics log: ``df_refresh_step`` (the optimiser steps
        the model had taken), ``df_sample_docs`` (n), ``df_active_mean`` (mean active terms of a
        sample document, ``Σ_j DF_j / n``), ``df_share_max`` (``max_j DF_j / n``) and
        ``df_terms_over_alpha`` (terms with ``DF_j / n ≥ α``: those weighed ≥ 1/2).

        Raises:
            RuntimeError: no estimate yet.
        """
        if self.counts is None:
            raise RuntimeError("no document-frequency estimate yet")
        n = self.num_docs
        return {
            "df_refresh_step": self.step,
            "df_sample_docs": n,
            "df_active_mean": float(self.counts.sum()) / n,
            "df_share_max": float(self.counts.max()) / n,
            "df_terms_over_alpha": int((self.counts.double() / n >= self.alpha).sum()),
        }

    def state_dict(self) -> dict:
        """What a checkpoint keeps so that a resumed run weighs terms as the interrupted one did."""
        return {"counts": self.counts, "num_docs": self.num_docs, "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (an empty one leaves the estimate due). The state is read from a
        checkpoint's ``trainer.pt``: its types are checked as :meth:`state_dict` writes them, so that
        nothing is rounded on the way in (float counts cast to integers, a fractional ``num_docs``).

        Raises:
            ValueError: not a mapping; ``counts`` not an int64 tensor; ``num_docs`` not an integer
                ≥ 1 or ``step`` not an integer ≥ 0 (booleans refused); see also :meth:`refresh`.
        """
        if not isinstance(state, dict):
            raise ValueError(f"expected a mapping of counts, num_docs and step, got {type(state).__name__}")
        counts = state.get("counts")
        if counts is None:
            return
        if not isinstance(counts, torch.Tensor) or counts.dtype != torch.int64:
            shown = counts.dtype if isinstance(counts, torch.Tensor) else type(counts).__name__
            raise ValueError(f"counts must be an int64 tensor of document counts, got {shown}")
        for key, least in (("num_docs", 1), ("step", 0)):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{key} must be an integer >= {least}, got {value!r}")
        self.refresh(counts, state["num_docs"], state["step"])
