"""ONNX export with the SPLADE pooling inside the graph, and an onnxruntime encoder.

The exported graph is the whole encoder, not just the transformer (exports that keep only the
transformer leave the pooling to every caller, and get it wrong: e.g. only the first position's
logits)::

    input_ids [B, L] int64, attention_mask [B, L] int64
      → backbone → MLM-head transform → decoder: logits [B, L, V]
      → w_j = log(1 + ReLU(max_{t: mask_t = 1} logit_tj))        (SPLADE v2, Formal et al. 2021, eq. 2)
      → [PAD] column set to 0                                      (as SpladeEncoder.encode_dense)
      → weights [B, V] float32

Batch size and sequence length are dynamic axes. The pooling is
:func:`spladekit.model.pooling.splade_max_pool`, traced as is (masked fill with -inf, max over
positions, clamp at 0, log1p), so a row whose mask is all zero gives all zeros here as in torch.

Export uses torch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``), which
needs only the ``onnx`` package (the dynamo exporter would also need ``onnxscript``). Models
whose weights exceed ONNX's 2 GiB protobuf limit are not supported by this writer.

The folder written by :func:`export_onnx`::

    model.onnx          the graph above
    tokenizer files     (``tokenizer.save_pretrained``)
    spladekit.json      query/doc max lengths, top-k, source, and under ``extra.onnx`` the file,
                        input/output names, opset, vocabulary size and max positions
    query_weights.safetensors   only for an inference-free model: its query term weights (the
                        query side is a table look-up, no graph; the graph encodes documents)

:class:`OnnxSpladeEncoder` reads it back and encodes with onnxruntime (CPU by default) through
the same batching, truncation and sparse conversion as :class:`SpladeEncoder`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.inference_free import INFERENCE_FREE, load_query_weights
from spladekit.model.pooling import splade_max_pool

ONNX_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "weights"
DEFAULT_OPSET = 17


class SpladeGraph(torch.nn.Module):
    """The module that is traced: ``(input_ids [B, L], attention_mask [B, L]) → [B, V]`` float32.

    Args:
        model: a :class:`~spladekit.model.splade.SpladeModel` (its head implementation is not
            used: the graph always computes the plain head, full logits then max pooling).
        pad_token_id: the vocabulary column zeroed in the output (None: none).
    """

    def __init__(self, model, pad_token_id: int | None):
        super().__init__()
        self.model = model
        keep = torch.ones(model.vocab_size)
        if pad_token_id is not None and 0 <= pad_token_id < model.vocab_size:
            keep[pad_token_id] = 0.0
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.model.head
        hidden = self.model.hidden_states(input_ids, attention_mask)
        logits = F.linear(hidden, head.weight, head.bias)
        return splade_max_pool(logits, attention_mask) * self.keep


def export_onnx(encoder: SpladeEncoder, out: str | Path, opset: int = DEFAULT_OPSET) -> Path:
    """Write ``encoder`` as an ONNX folder (layout in the module docstring), atomically.

    Args:
        encoder: the model to export (moved to the CPU for tracing; its own device is unchanged).
        out: the folder to write (replaced if it exists).
        opset: ONNX opset version.

    Returns:
        ``out``.

    Raises:
        ImportError: the ``onnx`` package is missing (``pip install 'spladekit[onnx]'``).
        OutputPathError: ``out`` is an existing file.
    """
    import copy

    from spladekit.io import atomic_folder, ensure_folder

    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
    except ImportError as exc:
        raise ImportError("ONNX export needs the onnx package: pip install 'spladekit[onnx]'") from exc
    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError
    with atomic_folder(out) as tmp:  # a failed export leaves no half-written folder
        model = copy.deepcopy(encoder.model).cpu().float().eval()
        graph = SpladeGraph(model, getattr(encoder.tokenizer, "pad_token_id", None)).eval()
        # two texts of different lengths, so the traced example has padding
        sample = encoder.tokenize(["spladekit onnx export", "a"], max_length=16)
        args = (sample["input_ids"].long(), sample["attention_mask"].long())
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                OUTPUT_NAME: {0: "batch"}}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
            torch.onnx.export(graph, args, str(tmp / ONNX_FILE), input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                              dynamic_axes=axes, opset_version=opset, dynamo=False)
        encoder.tokenizer.save_pretrained(tmp)
        meta = EncoderMetadata(**{k: getattr(encoder.metadata, k) for k in
                                  ("query_max_length", "doc_max_length", "query_top_k", "doc_top_k", "source")})
        meta.extra = dict(encoder.metadata.extra, onnx={
            "file": ONNX_FILE, "inputs": list(INPUT_NAMES), "output": OUTPUT_NAME, "opset": opset,
            "vocab_size": encoder.vocab_size, "max_positions": encoder.max_positions,
            "pooling": "max over non-padding positions of log1p(relu(logits)); [PAD] column zeroed",
        })
        if encoder.query_weights is not None:  # an inference-free query side needs no graph: its table travels along
            from spladekit.model.inference_free import save_query_weights

            save_query_weights(tmp, encoder.query_weights)
            meta.query_encoder = INFERENCE_FREE
        meta.save(tmp)
    return out


class OnnxSpladeEncoder(SpladeEncoder):
    """:class:`SpladeEncoder` whose forward pass is an onnxruntime session on an exported folder.

    Everything but the forward pass (length ordering, truncation count, top-k, CSR conversion,
    ``encode_queries``/``encode_documents``, ``decode``) is :class:`SpladeEncoder`'s own.

    Args:
        folder: a folder written by :func:`export_onnx`.
        batch_size: texts per session run.
        providers: onnxruntime execution providers (default: CPU only).
        threads: intra-op threads (None: onnxruntime's default).

    Raises:
        ImportError: onnxruntime is missing.
        DataFormatError: the folder's ``spladekit.json`` has no ONNX record.
    """

    def __init__(self, folder: str | Path, batch_size: int = 32, providers: Sequence[str] = ("CPUExecutionProvider",),
                 threads: int | None = None):
        from transformers import AutoTokenizer

        from spladekit.errors import DataFormatError

        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ImportError("ONNX inference needs onnxruntime: pip install 'spladekit[onnx]'") from exc
        folder = Path(folder)
        self.metadata = EncoderMetadata.load(folder)
        record = self.metadata.extra.get("onnx")
        if not record:
            raise DataFormatError(folder / "spladekit.json", "no ONNX record; not a folder written by export-model",
                                  field="extra.onnx")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(folder / record["file"]), options, providers=list(providers))
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.record = record
        self.device = torch.device("cpu")
        self.batch_size = batch_size
        self._vocab = None
        self.last_truncated = 0
        self._lowered: set[int] = set()
        self.query_weights = None
        if self.metadata.query_encoder == INFERENCE_FREE:
            self.query_weights = load_query_weights(folder, self.vocab_size)

    @property
    def vocab_size(self) -> int:
        return int(self.record["vocab_size"])

    @property
    def max_positions(self) -> int | None:
        return self.record.get("max_positions")

    def encode_dense(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """One session run: ``[len(texts), V]`` float32 (``[PAD]`` column zeroed inside the graph)."""
        batch = self.tokenize(texts, max_length)
        feeds = {name: batch[name].numpy().astype(np.int64) for name in self.record["inputs"]}
        (weights,) = self.session.run([self.record["output"]], feeds)
        return torch.from_numpy(weights)


CHECK_TEXTS = ("what causes cancer in mice?", "protein", "")


def check_export(encoder: SpladeEncoder, folder: str | Path, texts: Sequence[str] = CHECK_TEXTS) -> float:
    """Max ``|w_onnx - w_torch|`` over ``texts`` encoded as one padded batch, with onnxruntime on
    ``folder`` and with ``encoder`` (a quick check of a fresh export; the tests bound it).

    Raises:
        ImportError: onnxruntime is missing.
    """
    onnx_encoder = OnnxSpladeEncoder(folder)
    length = encoder.metadata.query_max_length
    expected = encoder.encode_dense(list(texts), length)
    return float((onnx_encoder.encode_dense(list(texts), length) - expected).abs().max())
