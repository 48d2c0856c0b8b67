"""ONNX export with the SPLADE pooling inside the graph, without a ``[B, L, V]`` tensor, and an onnxruntime encoder.

The exported graph is the whole encoder, not just the transformer (exports that keep only the
transformer leave the pooling to every caller, and get it wrong: e.g. only the first position's
logits)::

    input_ids [B, L] int64, attention_mask [B, L] int64
      → backbone → MLM-head transform: hidden [B, L, H]
      → for each vocabulary tile [lo, hi) of ``vocab_tile`` columns (unrolled at export, V is fixed):
            logits [B, L, hi - lo] = hidden @ W[lo:hi]ᵀ
            max:  m[:, lo:hi] = max over real positions of logits, + b[lo:hi]    (padding: -inf)
            sum:  s[:, lo:hi] = Σ over real positions of act(logits + b[lo:hi])   (padding: × 0)
      → concatenation [B, V];  max: w = act(m)  (act is non-decreasing: max and act commute)
      → [PAD] column set to 0                                      (as SpladeEncoder.encode_dense)
      → folded vocabulary: [B, V'] (Gather per member rank, then Max, or Add for sum pooling)
      → weights [B, V] (or [B, V']) float32

A cap on each position's expansion (the model's ``position_top_k = k``, the threshold rule of
:mod:`spladekit.model.pooling`) adds a first pass over the tiles: each tile's ``k`` largest logits
(bias included) per position (``TopK``), then the ``k``-th largest of those, ``τ`` ``[B, L, 1]``; the
second pass pools the logits ``≥ τ`` (the bias is then added before the max). Two products per tile,
still one tile's logits alive at a time.

with ``act`` the SPLADE activation: ``"relu"``: log(1 + ReLU(x)) (SPLADE v2, Formal et al. 2021,
eq. 2), ``"log1p_relu"``: log(1 + log(1 + ReLU(x))) (sentence-transformers' ``SpladePooling``
names). Only one tile's ``[B, L, hi - lo]`` logits (and its masked copy) is alive at a time, so
the graph's working memory is O(B·L·vocab_tile + B·V) instead of the O(B·L·V) of a graph that
forms all logits (1 GB at 32 × 256 tokens with BERT's 30,522 columns). Adding the bias after the
max is exact in floating point (rounding is monotonic), as in
:func:`spladekit.model.pooling.plain_splade_head`. A row whose mask is all zero gives all zeros.

Batch size and sequence length are dynamic axes. Export uses torch's TorchScript-based exporter
(``torch.onnx.export(..., dynamo=False)``), which needs only the ``onnx`` package. Models whose
weights exceed ONNX's 2 GiB protobuf limit are not supported by this writer.

Quantisation (``quantize="int8"``): onnxruntime's dynamic quantisation
(``onnxruntime.quantization.quantize_dynamic``: int8 weights with one scale per output column on a
7-bit range (``reduce_range``, below), uint8 activations with one scale and zero point per tensor
computed at run time) of the encoder's
matrix products with a constant weight, except three kept float32 (:func:`float32_products`): the
MLM-head transform's dense layer and the feed-forward down-projection of the first and the last
transformer layer, where quantising moves the vectors most. The head's products are quantised the
same way (``quantize_head=True``, one scale per vocabulary column) or kept float32 (the default).
Attention's activation products (``Q Kᵀ``, ``P V``) stay float32 (onnxruntime's dynamic mode
quantises only products with a constant weight). Because the activation scales are per tensor, an
int8 vector depends slightly on the other texts of its batch (their range and padding).

Why 7-bit weights (``reduce_range=True``): on x86 CPUs without AVX-512 VNNI (AVX2 and plain AVX-512),
onnxruntime's uint8 × int8 product uses ``VPMADDUBSW``, which adds two products ``u8 · s8`` into a
signed 16-bit lane; 255 · 127 · 2 = 64,770 > 32,767, so full-range weights saturate there and the
vectors depend on the CPU (onnxruntime's quantisation documentation: "Reduce-range will quantize the
weights to 7-bits. It is designed for the U8S8 format on AVX2 and AVX512 (non-VNNI) machines to
mitigate saturation issues"). With 7-bit weights (|q| ≤ 64) 255 · 64 · 2 = 32,640 fits, so the
integer products are exact on every x86 CPU, VNNI or not (VNNI's ``VPDPBUSD`` accumulates in 32 bits).
Its effect on quality and speed: ``benchmarks/RESULTS.md``, int8 ONNX exports (the readings on a CPU
without VNNI: ``benchmarks/runs/2026-12-02-int8.md``).

The folder written by :func:`export_onnx`::

    model.onnx          the graph above
    tokenizer files     (``tokenizer.save_pretrained``)
    spladekit.json      query/doc max lengths, top-k, pruning rules (applied by :class:`OnnxSpladeEncoder`
                        to the graph's output, not by the graph), source, and under ``extra.onnx`` the file,
                        input/output names, opset, vocabulary size, max positions, pooling,
                        activation, vocabulary tile and quantisation
    query_weights.safetensors   only for an inference-free model: its query term weights (the
                        query side is a table look-up, no graph; the graph encodes documents)

:class:`OnnxSpladeEncoder` reads it back and encodes with onnxruntime (CPU by default) through
the same batching, truncation and sparse conversion as :class:`SpladeEncoder`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from spladekit.data.numbers import check_int
from spladekit.errors import require_extra
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder, override_metadata
from spladekit.model.inference_free import load_query_weights
from spladekit.model.metadata import INFERENCE_FREE

ONNX_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "weights"
DEFAULT_OPSET = 17
#: Opsets :func:`export_onnx` accepts: from 14 (``scaled_dot_product_attention``, the attention of every
#: supported family in transformers 5, exports from opset 14 on; 9–13 fail in torch.onnx) to the
#: newest opset torch.onnx knows.
MIN_OPSET = 14


def max_opset() -> int:
    """The newest ONNX opset torch.onnx can write (``torch.onnx._constants.ONNX_MAX_OPSET``; 20 if unknown)."""
    try:
        from torch.onnx._constants import ONNX_MAX_OPSET
    except ImportError:
        return 20
    return int(ONNX_MAX_OPSET)


#: Vocabulary columns per in-graph tile: 32 × 256 tokens × 512 columns × 4 bytes = 16 MiB of logits
#: (the memory the tile saves: ``benchmarks/runs/2026-12-07-source-notes.md``).
DEFAULT_VOCAB_TILE = 512
POOLINGS = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")
QUANTIZATIONS = ("int8",)


def splade_act(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The SPLADE activation (module docstring): ``relu`` log(1 + ReLU(x)), ``log1p_relu`` log(1 + log(1 + ReLU(x)))."""
    x = torch.log1p(torch.relu(x))
    return torch.log1p(x) if activation == "log1p_relu" else x


def check_pooling(pooling: str, activation: str) -> None:
    """Raise ``ValueError`` for a pooling or activation this graph does not know."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown SPLADE pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown SPLADE activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")


class SpladeGraph(torch.nn.Module):
    """The module that is traced: ``(input_ids [B, L], attention_mask [B, L]) → [B, V]`` float32.

    Args:
        model: a :class:`~spladekit.model.splade.SpladeModel` (its head implementation is not
            used: the graph computes the head tile by tile, module docstring).
        pad_token_id: the vocabulary column zeroed in the output (None: none).
        pooling: ``"max"`` or ``"sum"`` over the real positions.
        activation: ``"relu"`` or ``"log1p_relu"``.
        vocab_tile: vocabulary columns per tile (≥ 1).
        zero_ids: further vocabulary columns zeroed in the output (the special tokens of a model whose
            metadata sets ``zero_special_tokens``, OpenSearch's doc-only layout; ids outside the
            vocabulary are ignored).

    Raises:
        ValueError: unknown pooling or activation, or a tile < 1.
    """

    def __init__(
        self,
        model,
        pad_token_id: int | None,
        pooling: str = "max",
        activation: str = "relu",
        vocab_tile: int = DEFAULT_VOCAB_TILE,
        zero_ids: Sequence[int] = (),
    ):
        super().__init__()
        check_pooling(pooling, activation)
        check_int(vocab_tile, "vocab_tile", 1)
        self.model = model
        self.pooling, self.activation, self.vocab_tile = pooling, activation, vocab_tile
        keep = torch.ones(model.vocab_size)
        if pad_token_id is not None and 0 <= pad_token_id < model.vocab_size:
            keep[pad_token_id] = 0.0
        for column in zero_ids:
            if 0 <= column < model.vocab_size:
                keep[column] = 0.0
        self.register_buffer("keep", keep, persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.model.head
        weight, bias = head.weight, head.bias
        hidden = self.model.hidden_states(input_ids, attention_mask)  # [B, L, H]
        real = attention_mask.to(torch.bool).unsqueeze(-1)  # [B, L, 1]
        k = getattr(self.model, "position_top_k", None)
        if k is not None and k < weight.shape[0]:
            pooled = self._capped(hidden, real, weight, bias, k)
        else:
            pooled = self._uncapped(hidden, real, weight, bias)
        pooled = pooled * self.keep
        fold = getattr(self.model, "fold", None)
        return pooled if fold is None else fold.apply(pooled, self.pooling)

    def _capped(self, hidden, real, weight, bias, k: int) -> torch.Tensor:
        """``[B, V]`` pooling of each position's ``k`` largest logits (:mod:`spladekit.model.pooling`'s
        threshold rule): a first pass over the tiles keeps each tile's ``k`` largest per position, their
        ``k``-th largest over all tiles is ``τ``; a second pass pools the logits ``≥ τ``."""
        vocab = weight.shape[0]
        spans = [(lo, min(vocab, lo + self.vocab_tile)) for lo in range(0, vocab, self.vocab_tile)]
        best = [
            torch.topk(
                F.linear(hidden, weight[lo:hi], None if bias is None else bias[lo:hi]), min(k, hi - lo), dim=-1
            ).values
            for lo, hi in spans
        ]
        threshold = torch.topk(torch.cat(best, dim=-1), k, dim=-1).values[..., k - 1 :]  # τ [B, L, 1]
        tiles = []
        for lo, hi in spans:
            logits = F.linear(hidden, weight[lo:hi], None if bias is None else bias[lo:hi])
            kept = (logits >= threshold) & real
            if self.pooling == "max":
                tiles.append(splade_act(logits.masked_fill(~kept, float("-inf")).amax(dim=1), self.activation))
            else:
                tiles.append((splade_act(logits, self.activation) * kept.to(logits.dtype)).sum(dim=1))
        return torch.cat(tiles, dim=1)

    def _uncapped(self, hidden, real, weight, bias) -> torch.Tensor:
        """``[B, V]`` pooling of every logit, tile by tile (module docstring)."""
        tiles = []
        for lo in range(0, weight.shape[0], self.vocab_tile):
            hi = min(weight.shape[0], lo + self.vocab_tile)
            if self.pooling == "max":
                logits = F.linear(hidden, weight[lo:hi]).masked_fill(~real, float("-inf"))  # [B, L, Vt]
                pooled = logits.amax(dim=1)
                tiles.append(pooled if bias is None else pooled + bias[lo:hi])
            else:
                logits = F.linear(hidden, weight[lo:hi], None if bias is None else bias[lo:hi])
                tiles.append((splade_act(logits, self.activation) * real.to(logits.dtype)).sum(dim=1))
        pooled = torch.cat(tiles, dim=1)  # [B, V]
        if self.pooling == "max":
            pooled = splade_act(pooled, self.activation)  # -inf (no real token) → 0
        return pooled


def _head_matmuls(model_path: Path, n_tiles: int) -> list[str]:
    """Names of the head's products in an exported graph: the MatMul/Gemm nodes of
    :class:`SpladeGraph`'s own forward, which the TorchScript exporter names at the top scope
    (``/MatMul_7``; the encoder's carry their module path, ``/bert/encoder/.../MatMul``), one per tile.

    Raises:
        RuntimeError: their number is not the number of tiles (an exporter that names nodes otherwise).
    """
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    names = [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.name.count("/") == 1]
    if len(names) != n_tiles:
        raise RuntimeError(f"expected {n_tiles} head products in the exported graph, found {len(names)}: {names[:4]}")
    return names


def _weight_width(node, weights: dict) -> tuple[int, int] | None:
    """``(K, N)`` of a MatMul/Gemm node's constant weight (``x [.., K] @ W → [.., N]``), None when its
    second input is not a constant (an activation product such as attention's ``Q Kᵀ``)."""
    if len(node.input) < 2 or node.input[1] not in weights:
        return None
    dims = list(weights[node.input[1]].dims)
    if len(dims) != 2:
        return None
    trans_b = any(a.name == "transB" and a.i for a in node.attribute) if node.op_type == "Gemm" else False
    return (dims[1], dims[0]) if trans_b else (dims[0], dims[1])


def float32_products(model_path: Path, n_tiles: int) -> list[str]:
    """The encoder products that ``quantize="int8"`` keeps float32 (the rest of the encoder is int8):

    - the **MLM-head transform's** products: the weight products reached by walking back from the
      head's input (the tensor the vocabulary tiles multiply) through non-product nodes (its
      activation, LayerNorm), i.e. the dense layer right before the decoder;
    - the **feed-forward down-projection of the first and of the last transformer layer**: the
      products with a constant weight of shape ``[K, N]`` with ``K > N`` (intermediate → hidden; BERT's
      ``output.dense``, DistilBERT's ``lin2``, ModernBERT's ``Wo``), the first and last in graph order.

    Why these: quantising one product at a time (splade-tiny, 300 SciFact documents, onnxruntime 1.32)
    moves the vectors most at the transform (1 − mean cosine to float32 3.5e-4), then the first and
    last layer's down-projections (1.6e-4, 7.8e-5), whose inputs (after GELU, after the last LayerNorm)
    have the widest ranges for one per-tensor activation scale; every other product ≤ 5.8e-5
    (benchmarks/RESULTS.md, "int8"). They are 1 + 2 of a model's products: the rest of the body and the
    head (with ``quantize_head``) are int8.

    Raises:
        RuntimeError: the head's products or the transform cannot be found (an exporter that names or
            wires nodes otherwise).
    """
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    weights = {t.name: t for t in graph.initializer}
    head = set(_head_matmuls(model_path, n_tiles))
    producer = {out: node for node in graph.node for out in node.output}
    products = [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.name not in head]
    transform: list[str] = []
    seen: set[str] = set()
    stack = [n.input[0] for n in graph.node if n.name in head]
    while stack:
        tensor = stack.pop()
        node = producer.get(tensor)
        if node is None or tensor in seen:
            continue
        seen.add(tensor)
        if node.op_type in ("MatMul", "Gemm") and _weight_width(node, weights) is not None:
            transform.append(node.name)
        else:
            stack.extend(i for i in node.input if i not in weights)
    if not transform:
        raise RuntimeError("no weight product found before the head's products in the exported graph")
    down = [
        n.name
        for n in products
        if n.name not in transform and (kn := _weight_width(n, weights)) is not None and kn[0] > kn[1]
    ]
    keep = sorted(set(transform) | set(down[:1] + down[-1:]))
    return keep


def quantize_graph(source: Path, target: Path, n_tiles: int, quantize_head: bool) -> None:
    """onnxruntime dynamic int8 quantisation of ``source`` into ``target`` (module docstring): every
    MatMul/Gemm with a constant weight, int8 weights with one scale per output column (``per_channel``)
    on a 7-bit range (``reduce_range``: no ``VPMADDUBSW`` saturation on CPUs without VNNI, module docstring),
    uint8 activations with one scale and zero point per tensor computed at run time, except the
    products of :func:`float32_products` and, unless ``quantize_head``, the head's.

    Raises:
        ImportError: onnxruntime (with its quantization tools) is missing.
    """
    quantization = require_extra("onnxruntime.quantization", "int8 quantisation", "onnxruntime", "onnx")
    QuantType, quantize_dynamic = quantization.QuantType, quantization.quantize_dynamic
    exclude = float32_products(source, n_tiles) + ([] if quantize_head else _head_matmuls(source, n_tiles))
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        op_types_to_quantize=["MatMul", "Gemm"],
        nodes_to_exclude=exclude,
    )


def export_onnx(
    encoder: SpladeEncoder,
    out: str | Path,
    opset: int = DEFAULT_OPSET,
    *,
    pooling: str | None = None,
    activation: str | None = None,
    vocab_tile: int = DEFAULT_VOCAB_TILE,
    quantize: str | None = None,
    quantize_head: bool = False,
) -> Path:
    """Write ``encoder`` as an ONNX folder (layout in the module docstring), atomically.

    Args:
        encoder: the model to export (moved to the CPU for tracing; its own device is unchanged).
        out: the folder to write (replaced if it exists).
        opset: ONNX opset version.
        pooling: the SPLADE pooling, ``"max"`` or ``"sum"``; None reads it from the encoder's metadata
            (its ``pooling`` field; ``"max"`` where it has none).
        activation: the SPLADE activation, ``"relu"`` or ``"log1p_relu"``; None reads it from the
            encoder's metadata (its ``activation`` field; ``"relu"`` where it has none).
        vocab_tile: vocabulary columns per in-graph tile (the graph's memory is O(B·L·vocab_tile)).
        quantize: None (float32) or ``"int8"`` (dynamic quantisation, module docstring).
        quantize_head: with ``quantize``, also quantise the head's products (else they stay float32).

    Returns:
        ``out``.

    Raises:
        MissingExtraError: the ``onnx`` package, or with ``quantize`` onnxruntime, is missing
            (``pip install 'spladekit[onnx]'``; checked before any work).
        OutputPathError: ``out`` is an existing file.
        ValueError: unknown pooling, activation or quantisation, a tile < 1, ``quantize_head``
            without ``quantize``, or an opset outside :data:`MIN_OPSET` … :func:`max_opset`.
    """
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= max_opset():
        raise ValueError(f"opset {opset!r} is not supported: choose {MIN_OPSET} to {max_opset()}")
    import copy

    from spladekit.io import atomic_folder, ensure_folder

    require_extra("onnx", "ONNX export", "the onnx package", "onnx")  # torch.onnx.export needs it
    pooling = pooling or getattr(encoder.metadata, "pooling", "max")
    activation = activation or getattr(encoder.metadata, "activation", "relu")
    check_pooling(pooling, activation)
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"unknown quantisation {quantize!r}; choose one of {', '.join(QUANTIZATIONS)} (or none)")
    if quantize_head and not quantize:
        raise ValueError("quantize_head needs quantize='int8' (the head alone is not quantised)")
    if quantize:  # before the export, not after it
        require_extra("onnxruntime.quantization", "int8 quantisation", "onnxruntime", "onnx")
    out = Path(out)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError
    with atomic_folder(out) as tmp:  # a failed export leaves no half-written folder
        model = copy.deepcopy(encoder.model).cpu().float().eval()
        zero_special = bool(getattr(encoder.metadata, "zero_special_tokens", False))
        zero_ids = list(getattr(encoder.tokenizer, "all_special_ids", []) or []) if zero_special else []
        graph = SpladeGraph(
            model, getattr(encoder.tokenizer, "pad_token_id", None), pooling, activation, vocab_tile, zero_ids
        ).eval()
        traced = tmp / (ONNX_FILE + ".float32" if quantize else ONNX_FILE)
        _trace(encoder, graph, traced, opset)
        n_tiles = -(-model.vocab_size // vocab_tile)
        cap = (
            model.position_top_k
            if model.position_top_k is not None and model.position_top_k < model.vocab_size
            else None
        )
        if quantize:  # a capped graph forms each tile's logits twice (the threshold pass, then the pooling)
            quantize_graph(traced, tmp / ONNX_FILE, n_tiles * (2 if cap else 1), quantize_head)
            traced.unlink()
        encoder.tokenizer.save_pretrained(tmp)
        meta = _export_metadata(
            encoder,
            model,
            dict(
                opset=opset,
                pooling=pooling,
                activation=activation,
                vocab_tile=vocab_tile,
                quantize=quantize,
                quantize_head=quantize_head,
            ),
        )
        if encoder.query_weights is not None:  # an inference-free query side needs no graph: its table travels along
            from spladekit.model.inference_free import save_query_weights

            save_query_weights(tmp, encoder.query_weights)
            meta.query_encoder = INFERENCE_FREE
        meta.save(tmp)
    return out


def _trace(encoder: SpladeEncoder, graph: torch.nn.Module, traced: Path, opset: int) -> None:
    """``graph`` exported by torch.onnx's tracer to ``traced``, with a dynamic batch and sequence."""
    # two texts of different lengths, so the traced example has padding
    sample = encoder.tokenize(["spladekit onnx export", "a"], max_length=16)
    args = (sample["input_ids"].long(), sample["attention_mask"].long())
    axes = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        OUTPUT_NAME: {0: "batch"},
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
        torch.onnx.export(
            graph,
            args,
            str(traced),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )


def _export_metadata(encoder: SpladeEncoder, model, options: dict) -> EncoderMetadata:
    """The export's ``spladekit.json``: the model's metadata fields (its head options included) and the
    ``extra.onnx`` record of :func:`export_onnx` (module docstring)."""
    fields = [
        k
        for k in (
            "query_max_length",
            "doc_max_length",
            "query_top_k",
            "doc_top_k",
            "source",
            "pooling",
            "activation",
            "zero_special_tokens",
            "position_top_k",
            "fold",
            "query_pruning",
            "doc_pruning",
        )
        if k in EncoderMetadata.__dataclass_fields__
    ]
    meta = EncoderMetadata(**{k: getattr(encoder.metadata, k) for k in fields})
    pooling, activation, quantize = options["pooling"], options["activation"], options["quantize"]
    n_tiles = -(-model.vocab_size // options["vocab_tile"])
    cap = model.position_top_k if model.position_top_k is not None and model.position_top_k < model.vocab_size else None
    zero_special = bool(getattr(encoder.metadata, "zero_special_tokens", False))
    meta.extra = dict(
        encoder.metadata.extra,
        onnx={
            "file": ONNX_FILE,
            "inputs": list(INPUT_NAMES),
            "output": OUTPUT_NAME,
            "opset": options["opset"],
            "vocab_size": encoder.vocab_size,
            "head_rows": model.vocab_size,
            "max_positions": encoder.max_positions,
            "pooling": pooling,
            "activation": activation,
            "vocab_tile": options["vocab_tile"],
            "quantize": quantize,
            "quantize_head": bool(quantize and options["quantize_head"]),
            "weight_bits": 7 if quantize else None,  # reduce_range (module docstring)
            "position_top_k": model.position_top_k,
            "folded_terms": None if model.fold is None else model.fold.size,
            "graph": f"{pooling} over non-padding positions of {activation} activation of the logits"
            + (f" (each position's {cap} largest)" if cap else "")
            + f", {n_tiles} vocabulary tiles; "
            + ("special-token columns zeroed" if zero_special else "[PAD] column zeroed")
            + (f"; folded into {model.fold.size} terms" if model.fold is not None else ""),
        },
    )
    return meta


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
        DataFormatError: the folder's ``spladekit.json`` has no ONNX record, or one whose graph file
            lies outside the folder.
    """

    def __init__(
        self,
        folder: str | Path,
        batch_size: int = 32,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int | None = None,
    ):
        from transformers import AutoTokenizer

        from spladekit.data.paths import path_inside
        from spladekit.errors import DataFormatError

        ort = require_extra("onnxruntime", "ONNX inference", "onnxruntime", "onnx")
        folder = Path(folder)
        self.metadata = EncoderMetadata.load(folder)
        record = self.metadata.extra.get("onnx")
        if not record:
            raise DataFormatError(
                folder / "spladekit.json", "no ONNX record; not a folder written by export-model", field="extra.onnx"
            )
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        graph = path_inside(
            folder,
            record.get("file") if isinstance(record, dict) else None,
            folder / "spladekit.json",
            "extra.onnx.file",
        )
        try:
            self.session = ort.InferenceSession(str(graph), options, providers=list(providers))
        except Exception as exc:  # onnxruntime's own error types (InvalidProtobuf, NoSuchFile, Fail, ...)
            from spladekit.errors import DataFormatError

            raise DataFormatError(
                graph,
                f"onnxruntime cannot load the graph ({type(exc).__name__}: "
                f"{(str(exc).splitlines() or [''])[0][:300]}); the file is missing, damaged or "
                "truncated (export it again)",
            ) from exc
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

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        query_top_k: int | None = None,
        doc_top_k: int | None = None,
        batch_size: int = 32,
        device=None,
        dtype: torch.dtype | None = None,
        head_impl: str | None = None,
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int | None = None,
        query_pruning=None,
        doc_pruning=None,
    ) -> OnnxSpladeEncoder:
        """Open an ONNX export folder (:func:`export_onnx`) with :meth:`SpladeEncoder.from_pretrained`'s
        arguments (what the inherited method would take, so code written for either class runs): the
        lengths, top-k and pruning rules left as None come from the export's ``spladekit.json``;
        ``providers`` and ``threads`` as for the constructor.

        Raises:
            ValueError: ``dtype``, ``head_impl`` or a non-CPU ``device``: they choose how torch runs
                the model, which an export does not (its dtype is fixed at export; other hardware:
                ``providers``).
            ResolutionError: ``name_or_path`` is not a local folder (exports are not fetched from a hub).
            DataFormatError: the folder is not an ONNX export (a torch model folder is loaded with
                :meth:`SpladeEncoder.from_pretrained`, naming it).
            ImportError: onnxruntime is missing.
        """
        from spladekit.errors import DataFormatError, ResolutionError

        for name, value in (("dtype", dtype), ("head_impl", head_impl)):
            if value is not None:
                raise ValueError(
                    f"OnnxSpladeEncoder.from_pretrained: {name}={value!r} is for torch models; an ONNX export "
                    "runs its graph as exported (load a torch model folder with SpladeEncoder.from_pretrained)"
                )
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(
                f"OnnxSpladeEncoder.from_pretrained: device={device!r}: onnxruntime chooses hardware by "
                "providers=, e.g. ('CUDAExecutionProvider', 'CPUExecutionProvider')"
            )
        folder = Path(name_or_path)
        if not folder.is_dir():
            raise ResolutionError(
                f"{folder}: no such folder; OnnxSpladeEncoder opens a local folder written by "
                "`spladekit export-model --format onnx`"
            )
        if not EncoderMetadata.load(folder).extra.get("onnx"):
            raise DataFormatError(
                folder / "spladekit.json",
                "no ONNX record: not an ONNX export (a torch model folder? load it with SpladeEncoder.from_pretrained)",
                field="extra.onnx",
            )
        encoder = cls(folder, batch_size=batch_size, providers=providers, threads=threads)
        override_metadata(
            encoder.metadata,
            query_max_length=query_max_length,
            doc_max_length=doc_max_length,
            query_top_k=query_top_k,
            doc_top_k=doc_top_k,
            query_pruning=query_pruning,
            doc_pruning=doc_pruning,
        )
        encoder.metadata.query_max_length = encoder.check_max_length(encoder.metadata.query_max_length)
        encoder.metadata.doc_max_length = encoder.check_max_length(encoder.metadata.doc_max_length)
        return encoder

    @property
    def vocab_size(self) -> int:
        """V, the vocabulary size, from the exported folder's record."""
        return int(self.record["vocab_size"])

    @property
    def max_positions(self) -> int | None:
        """The model's maximum positions from the exported folder's record; None when not recorded."""
        return self.record.get("max_positions")

    def _weights(self, batch) -> torch.Tensor:
        """One session run on a tokenized batch: ``[B, V]`` float32 (``[PAD]`` column zeroed inside the graph)."""
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
