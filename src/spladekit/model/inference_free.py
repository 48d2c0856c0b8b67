"""Inference-free (document-only) SPLADE: the query side is a bag of its tokens, one weight per term.

Documents keep the full SPLADE encoder; a query costs a tokenisation and a table look-up::

    q_j = relu(θ_j) · 1[token j occurs in the query]          (θ ∈ R^V, one weight per vocabulary entry)

the form of sentence-transformers' ``SparseStaticEmbedding`` query module and of OpenSearch's
"doc-only" sparse models (Geng et al., "Towards Competitive Search Relevance For Inference-Free
Learned Sparse Retrievers", arXiv 2411.04403, who also initialise θ from IDF). Query tokens are
taken **without** special tokens (``add_special_tokens=False``, as ``SparseStaticEmbedding``
tokenises), truncated to the query max length; a token counts once however often it occurs.
θ of every special token (``tokenizer.all_special_ids``) is 0, so ``[UNK]`` and friends carry no weight.

θ starts from the corpus IDF (:func:`idf_weights`), the BM25 form that is positive for every df::

    idf_j = ln(1 + (N - df_j + 0.5) / (df_j + 0.5))            (Robertson & Zaragoza 2009, eq. 3.2 with
                                                               Lucene's +1 inside the log)

with ``N`` the number of documents and ``df_j`` the number of documents whose tokens (same
tokenizer, no special tokens) contain ``j``. θ may then be trained jointly with the document encoder
(``model.query_encoder: inference-free`` in the training config); there is no query regulariser
then (the query vector's support is fixed by the text). ``relu`` keeps q ≥ 0 during training as
in the encoded vectors (which keep only weights > 0); the saved weights are ``relu(θ)``, so the
saved model, spladekit's encoder and sentence-transformers give the same query vectors.

Files (next to the masked-LM model): ``query_weights.safetensors`` (tensor ``weight`` ``[V]``,
float32) and ``spladekit.json`` with ``query_encoder: "inference-free"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from spladekit.model.metadata import INFERENCE_FREE

QUERY_WEIGHTS_FILE = "query_weights.safetensors"


def _token_ids(tokenizer, texts: Sequence[str], max_length: int | None = None, batch: int = 1024) -> list[list[int]]:
    """Token ids of each text without special tokens (truncated to ``max_length`` when given)."""
    ids: list[list[int]] = []
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {"truncation": False}
    for start in range(0, len(texts), batch):
        chunk = [t if isinstance(t, str) else str(t) for t in texts[start : start + batch]]
        ids.extend(tokenizer(chunk, add_special_tokens=False, verbose=False, **kwargs)["input_ids"])
    return ids


def document_frequencies(tokenizer, documents: Sequence[str], vocab_size: int) -> np.ndarray:
    """``df[j]``: number of ``documents`` containing token ``j`` (no special tokens, no truncation).

    Returns:
        ``[vocab_size]`` int64.

    Raises:
        ValueError: a token id ≥ ``vocab_size``.
    """
    df = np.zeros(vocab_size, dtype=np.int64)
    for ids in _token_ids(tokenizer, documents):
        unique = np.unique(np.asarray(ids, dtype=np.int64))
        if unique.size and unique[-1] >= vocab_size:
            raise ValueError(f"token id {int(unique[-1])} outside the vocabulary of {vocab_size}")
        df[unique] += 1
    return df


def idf_weights(tokenizer, documents: Sequence[str], vocab_size: int) -> torch.Tensor:
    """``[V]`` float32 IDF weights ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (module docstring),
    0 for special tokens.

    Raises:
        ValueError: no documents.
    """
    if len(documents) == 0:
        raise ValueError("IDF needs at least one document")
    df = document_frequencies(tokenizer, documents, vocab_size).astype(np.float64)
    n = float(len(documents))
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    weights = torch.from_numpy(idf.astype(np.float32))
    _zero_special(weights, tokenizer)
    return weights


def _zero_special(weights: torch.Tensor, tokenizer) -> None:
    with torch.no_grad():
        for j in getattr(tokenizer, "all_special_ids", []) or []:
            if 0 <= j < weights.shape[0]:
                weights[j] = 0.0


class QueryTermWeights(nn.Module):
    """The trainable query side: ``(input_ids [B, L], attention_mask [B, L]) → [B, V]`` float32,
    ``q_bj = relu(θ_j) · 1[j ∈ {input_ids_bt : mask_bt = 1}]``.

    ``input_ids`` must be tokenised without special tokens (:meth:`tokenize`).

    Args:
        weight: initial θ ``[V]`` (e.g. :func:`idf_weights`).
        trainable: whether θ receives gradients.
    """

    def __init__(self, weight: torch.Tensor, trainable: bool = True):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone().float(), requires_grad=trainable)

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    @staticmethod
    def tokenize(tokenizer, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        """Padded tensors of the query tokens without special tokens (the inference-free convention)."""
        batch = tokenizer(
            list(texts),
            add_special_tokens=False,
            max_length=max_length,
            truncation=True,
            padding=True,
            return_tensors="pt",
        )
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        presence = torch.zeros(input_ids.shape[0], self.vocab_size, device=input_ids.device, dtype=torch.float32)
        # scatter_add then clamp: deterministic (plain scatter with repeated ids is not), and a
        # padding position adds 0 to its column
        presence.scatter_add_(1, input_ids.long(), attention_mask.to(torch.float32)).clamp_(max=1.0)
        return presence * torch.relu(self.weight)

    def saved_weights(self) -> torch.Tensor:
        """``relu(θ)``, what is saved and what encoding uses."""
        return torch.relu(self.weight.detach()).float().cpu()


def encode_bag(
    tokenizer, texts: Sequence[str], weights: torch.Tensor | np.ndarray, max_length: int, top_k: int | None = None
) -> tuple[sp.csr_matrix, int]:
    """Inference-free query vectors as CSR ``[len(texts), V]`` float32 (no model forward).

    Row ``i`` has ``weights[j]`` at every distinct token ``j`` of ``texts[i]`` (no special tokens,
    truncated to ``max_length``) whose weight is > 0; with ``top_k`` the k largest (ties: lower id).

    Returns:
        ``(matrix, number of texts longer than max_length tokens)``.
    """
    from spladekit.model.metadata import check_top_k

    check_top_k(top_k)
    w = weights.detach().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights)
    w = w.astype(np.float32)
    full = _token_ids(tokenizer, texts)
    truncated = sum(len(ids) > max_length for ids in full)
    indptr, indices, data = [0], [], []
    for ids in full:
        unique = np.unique(np.asarray(ids[:max_length], dtype=np.int64))
        values = w[unique]
        keep = values > 0
        unique, values = unique[keep], values[keep]
        if top_k is not None and unique.size > top_k:
            kept = np.sort(np.lexsort((unique, -values))[:top_k])  # positions, so ids stay ascending
            unique, values = unique[kept], values[kept]
        indices.append(unique)
        data.append(values)
        indptr.append(indptr[-1] + unique.size)
    matrix = sp.csr_matrix(
        (
            np.concatenate(data) if data else np.zeros(0, np.float32),
            np.concatenate(indices) if indices else np.zeros(0, np.int64),
            np.asarray(indptr),
        ),
        shape=(len(full), w.shape[0]),
        dtype=np.float32,
    )
    return matrix, truncated


def save_query_weights(folder: str | Path, weights: torch.Tensor) -> Path:
    """Write ``folder/query_weights.safetensors`` (tensor ``weight``, ``[V]`` float32)."""
    from safetensors.torch import save_file

    path = Path(folder) / QUERY_WEIGHTS_FILE
    save_file({"weight": weights.detach().float().cpu().contiguous()}, str(path))
    return path


def load_query_weights(folder: str | Path, vocab_size: int) -> torch.Tensor:
    """Read ``folder/query_weights.safetensors``.

    Raises:
        DataFormatError: the file is missing, has no ``weight`` tensor, or its shape is not ``[V]``.
    """
    from spladekit.errors import DataFormatError

    path = Path(folder) / QUERY_WEIGHTS_FILE
    if not path.exists():
        raise DataFormatError(
            Path(folder) / "spladekit.json",
            f"query_encoder is {INFERENCE_FREE!r} but {QUERY_WEIGHTS_FILE} is missing",
            field="query_encoder",
        )
    return read_weight_file(path, vocab_size)


def read_weight_file(path: str | Path, vocab_size: int) -> torch.Tensor:
    """The ``[V]`` float32 tensor ``weight`` of a safetensors file (or a torch ``.bin``, read with
    ``weights_only=True``), as spladekit and sentence-transformers' ``SparseStaticEmbedding`` save it.

    Raises:
        DataFormatError: no ``weight`` tensor, a shape other than ``[V]``, NaN or infinite values, a
            file that cannot be read (damaged or truncated).
    """
    from spladekit.errors import DataFormatError
    from spladekit.model.metadata import damaged_weights_error

    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors = load_file(str(path))
        else:
            tensors = torch.load(str(path), map_location="cpu", weights_only=True)
    except (MemoryError, FileNotFoundError):
        raise
    except Exception as exc:  # safetensors' / torch's errors on a damaged or truncated file
        raise damaged_weights_error(path, exc) from exc
    weight = tensors.get("weight") if isinstance(tensors, dict) else None
    if weight is None or tuple(weight.shape) != (vocab_size,):
        shape = None if weight is None else tuple(weight.shape)
        raise DataFormatError(path, f"expected a tensor 'weight' of shape ({vocab_size},), got {shape}", field="weight")
    if not bool(torch.isfinite(weight).all()):
        raise DataFormatError(path, "query weights contain NaN or infinite values", field="weight")
    return weight.float()


def make_inference_free(encoder, documents: Sequence[str]):
    """Give ``encoder`` an inference-free query side initialised from the IDF of ``documents``
    (its document side is unchanged; save it with :meth:`SpladeEncoder.save_pretrained`, or with
    :func:`spladekit.cli.inference_free.build_inference_free` for the sentence-transformers files as well).

    Args:
        encoder: a :class:`~spladekit.model.encoder.SpladeEncoder` (changed in place).
        documents: the corpus whose IDF initialises θ.

    Returns:
        ``encoder``.

    Raises:
        ValueError: no documents, or a model with a folded vocabulary (its vectors' columns are terms,
            the query side's weights are per vocabulary entry).
    """
    from spladekit.model.remote_code import require_masked_lm

    require_masked_lm(encoder)  # a model run by its own modules would ignore query_weights
    if getattr(encoder.model, "fold", None) is not None:
        raise ValueError(
            "an inference-free query side with a folded vocabulary: the query weights are per vocabulary "
            "entry, the document vectors per folded term"
        )
    encoder.query_weights = idf_weights(encoder.tokenizer, documents, encoder.vocab_size)
    encoder.metadata.query_encoder = INFERENCE_FREE
    encoder.metadata.extra["inference_free"] = {
        "init": "idf",
        "idf_documents": len(documents),
        "trained": False,
        "formula": "ln(1 + (N - df + 0.5) / (df + 0.5))",
    }
    return encoder
