"""fastembed ``SparseTextEmbedding`` (its SPLADE++ class, ``SpladePP``): an ONNX graph of MLM logits
``[B, L, V]`` that fastembed pools itself.

Contract (fastembed 0.9 ``sparse/splade_pp.py`` and ``common/preprocessor_utils.py``):
fastembed feeds ``input_ids`` and ``attention_mask`` (and zero ``token_type_ids`` only if the graph
has that input: this one does not), takes the first output ``y [B, L, V]`` and computes
``w = max_t (log(1 + max(y, 0)) · mask_t)``; it tokenizes with ``tokenizer.json``, truncating at
``tokenizer_config.json``'s ``model_max_length`` (set here to the doc max length) and padding with
the pad token of ``special_tokens_map.json``/``config.json``.

What the graph outputs so that fastembed's rule gives spladekit's vector:

- ``relu`` activation: ``y = logits`` (the raw MLM logits), so fastembed computes SPLADE's
  log(1 + ReLU) and max pooling itself;
- ``log1p_relu``: ``y = log(1 + ReLU(logits)) ≥ 0``, so fastembed's ``log(1 + max(y, 0))`` is
  log(1 + log(1 + ReLU(logits))) (max and the non-decreasing activation commute);
- zeroed columns (``[PAD]``, and special tokens where the model says so): ``y = 0`` there, which
  fastembed turns into weight 0.

Head options, expressed in ``y`` so that fastembed's own pooling gives spladekit's vector:

- a per-position cap (``position_top_k = k``): each position's logits below its ``k``-th largest
  (``TopK``) are set to 0 in ``y`` (weight 0 after fastembed's ``log(1 + max(y, 0))``);
- a folded vocabulary: ``y`` is folded per position (the max of each term's columns), ``[B, L, V']``:
  the max over positions of a max over a term's columns is the max pooling of the folded vector, and
  fastembed's rule is non-decreasing in ``y``. Its indices are then term ids (``spladekit.json``'s
  ``fold`` names them).

Refused by name: sum pooling (fastembed always takes the max over positions), an inference-free
model (``query_embed`` would run the document encoder on queries), a slow tokenizer. A model is
loaded with ``SparseTextEmbedding("prithivida/Splade_PP_en_v1", specific_model_path=FOLDER)``
(fastembed has no custom-model registration for sparse models; the name picks the SPLADE++ class and
``specific_model_path`` the files, with no download).

Folder: ``model.onnx``, ``config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json`` (and the tokenizer's other files), ``HOW_TO_LOAD.md``, ``spladekit.json``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from spladekit.model.engines import common

ENGINE = "fastembed"
ONNX_FILE = "model.onnx"
MODEL_NAME = "prithivida/Splade_PP_en_v1"  # fastembed's SPLADE++ description; files come from specific_model_path
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "logits"


class FastembedLogits(nn.Module):
    """``(input_ids, attention_mask) [B, L] → y [B, L, V]`` float32 (module docstring)."""

    def __init__(self, model, activation: str, keep: torch.Tensor, position_top_k: int | None = None):
        super().__init__()
        self.model, self.activation, self.position_top_k = model, activation, position_top_k
        self.register_buffer("keep", keep.float().clone())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        head = self.model.head
        logits = nn.functional.linear(self.model.hidden_states(input_ids, attention_mask), head.weight, head.bias)
        kept = None
        if self.position_top_k is not None:
            k = self.position_top_k
            kept = logits >= torch.topk(logits, k, dim=-1).values[..., k - 1 :]
        if self.activation == "log1p_relu":
            logits = torch.log1p(torch.relu(logits))
        if kept is not None:
            logits = logits * kept.to(logits.dtype)  # a dropped logit: y = 0, weight 0
        y = logits * self.keep
        return y if self.model.fold is None else self.model.fold.apply(y, "max")


def export(
    encoder,
    out: str | Path,
    *,
    pooling: str | None = None,
    activation: str | None = None,
    max_length: int | None = None,
    opset: int = 17,
    **_ignored,
) -> Path:
    """Write the fastembed folder (module docstring) atomically; returns ``out``.

    Raises:
        ImportError: the onnx package is missing.
        UnsupportedModelError: sum pooling, an inference-free model, a slow tokenizer.
    """
    from spladekit.io import atomic_folder, read_json, write_json

    v = common.variant(encoder, ENGINE, pooling, activation)
    if v.pooling != "max":
        common.refuse(v, f"{v.pooling} pooling: fastembed's SpladePP always takes the max over positions")
    if v.inference_free:
        common.refuse(v, "an inference-free model: fastembed's query_embed would run the document encoder on queries")
    if getattr(encoder.tokenizer, "backend_tokenizer", None) is None:
        common.refuse(v, "a slow tokenizer: fastembed needs tokenizer.json")
    max_length = max_length or encoder.metadata.doc_max_length
    common.require_onnx(ENGINE)
    model = common.cpu_model(encoder)
    module = FastembedLogits(model, v.activation, v.keep(), v.position_top_k).eval()
    sample = common.sample_batch(encoder)
    args = (sample["input_ids"].long(), sample["attention_mask"].long())
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, OUTPUT)}
    with atomic_folder(out) as tmp:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                args,
                str(tmp / ONNX_FILE),
                input_names=list(INPUTS),
                output_names=[OUTPUT],
                dynamic_axes=axes,
                opset_version=opset,
                dynamo=False,
            )
        encoder.tokenizer.save_pretrained(tmp)
        model.mlm.config.save_pretrained(tmp)
        config = read_json(tmp / "tokenizer_config.json")
        config["model_max_length"] = int(max_length)  # fastembed truncates at min(model_max_length, max_length)
        config.pop("max_length", None)
        write_json(tmp / "tokenizer_config.json", config)
        tokens = {k: str(t) for k, t in encoder.tokenizer.special_tokens_map.items() if isinstance(t, str)}
        write_json(tmp / "special_tokens_map.json", tokens)
        record = {
            "file": ONNX_FILE,
            "inputs": list(INPUTS),
            "output": f"{OUTPUT} [B, L, V]",
            "opset": opset,
            "activation": v.activation,
            "pooling": "max (by fastembed)",
            "zeroed_columns": v.zero_ids,
            "model_max_length": max_length,
            "fastembed_model_name": MODEL_NAME,
            "position_top_k": v.position_top_k,
            "folded_terms": None if model.fold is None else model.fold.size,
            "graph": "raw MLM logits"
            if v.activation == "relu"
            else "log(1 + ReLU(logits)), fastembed adds the second log1p",
        }
        common.write_metadata(encoder, tmp, ENGINE, record)
        common.write_how_to(tmp, how_to(max_length, encoder.metadata.query_max_length))
    return Path(out)


def how_to(max_length: int, query_length: int) -> str:
    return f"""
# Loading this model with fastembed

```python
from fastembed import SparseTextEmbedding

model = SparseTextEmbedding("{MODEL_NAME}", specific_model_path="PATH/TO/THIS/FOLDER")
docs = list(model.embed(["a document", "another one"]))    # SparseEmbedding(indices, values)
query = next(model.query_embed("a query"))
```

The name selects fastembed's SPLADE++ class (`SpladePP`: log(1 + ReLU), × mask, max over positions);
`specific_model_path` gives the files (nothing is downloaded). `model.onnx` outputs `[B, L, V]` logits
and fastembed pools them. fastembed truncates every text, queries included, at {max_length} tokens
(`tokenizer_config.json` `model_max_length`); spladekit's own query length is {query_length}.
The vectors go to any engine as `indices`/`values` (e.g. Qdrant's sparse vectors, dot product).
"""
