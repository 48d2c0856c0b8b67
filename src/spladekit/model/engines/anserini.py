"""Anserini / Pyserini ONNX query encoders (``io.anserini.encoder.sparse.*``): an ONNX graph from one
query's ids to its active terms, and the WordPiece vocabulary, under the names an encoder class reads.

Contract (read from the classes in Anserini 0.25.0's fat jar, ``javap -c``):
``SpladePlusPlusEnsembleDistilEncoder`` tokenizes with DJL's ``BertFullTokenizer`` (lower-casing
WordPiece over ``splade-pp-ed-vocab.txt``), prepends ``[CLS]``, appends ``[SEP]``, truncates at
512 ids, feeds ``input_ids``, ``token_type_ids`` (zeros), ``attention_mask`` (ones) ``[1, L]``
int64, and reads ``output_idx`` (int64 1-D) and ``output_weights`` (float 1-D); it skips ids 0,
101 and 102 (bert-base-uncased's ``[PAD]``, ``[CLS]``, ``[SEP]``) and turns each weight into
``round(w / 5 · 256)`` repetitions of the token (``SparseEncoder(5, 256, ...)``). Both files come
from ``~/.cache/anserini/encoders/`` (``user.home``), downloaded only when missing:
``splade-pp-ed-optimized.onnx`` and ``splade-pp-ed-vocab.txt``.

The graph is :class:`spladekit.model.onnx_export.SpladeGraph` (the model's pooling and
activation, ``[PAD]``/special columns zeroed as its metadata says) followed by the non-zero
entries of the one row. Opset 17 (≤ 20, Anserini 0.25's onnxruntime 1.x).

A per-position cap (``position_top_k``) is in the graph (:class:`SpladeGraph`'s threshold pass).
Refused by name: a folded vocabulary (Anserini reads ``output_idx`` as ids of ``vocab.txt``, the
tokenizer's WordPiece vocabulary; a folded vector's columns are terms), a tokenizer that is not WordPiece or does not lower-case (DJL's tokenizer is
lower-casing WordPiece), a vocabulary without ``[CLS]``/``[SEP]``/``[UNK]``, one where id 0, 101 or
102 is a real term (Anserini drops those ids), an inference-free model (Anserini encodes queries
with the model; a doc-only model's queries are a table look-up). Queries longer than the model's
positions are not truncated to them (Anserini truncates at 512): keep them shorter.

Folder: ``splade-pp-ed-optimized.onnx``, ``splade-pp-ed-vocab.txt`` (the names the class reads),
``HOW_TO_LOAD.md``, ``spladekit.json``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from torch import nn

from spladekit.model.engines import common
from spladekit.model.onnx_export import SpladeGraph

ENGINE = "anserini"
ENCODER_CLASS = "io.anserini.encoder.sparse.SpladePlusPlusEnsembleDistilEncoder"
ONNX_FILE, VOCAB_FILE = "splade-pp-ed-optimized.onnx", "splade-pp-ed-vocab.txt"
INPUTS = ("input_ids", "token_type_ids", "attention_mask")
OUTPUTS = ("output_idx", "output_weights")
SKIPPED_IDS = {0: "[PAD]", 101: "[CLS]", 102: "[SEP]"}
WEIGHT_RANGE, QUANT_RANGE = 5, 256


class _WithTokenTypes(nn.Module):
    """The model as :class:`SpladeGraph` reads it, with the token types of the current call passed to
    a backbone that takes them (Anserini feeds them; an unused graph input would be dropped by the
    exporter, and onnxruntime then refuses Anserini's feed)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model
        self.token_type_ids = None

    @property
    def head(self):
        return self.inner.head

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def position_top_k(self):
        return self.inner.position_top_k

    @property
    def fold(self):
        return self.inner.fold

    def hidden_states(self, input_ids, attention_mask):
        return common.hidden_states(self.inner, input_ids, attention_mask, self.token_type_ids)


class AnseriniGraph(nn.Module):
    """``(input_ids, token_type_ids, attention_mask) [1, L] → (output_idx [n] int64, output_weights [n])``."""

    def __init__(self, model, pad_token_id, pooling: str, activation: str, zero_ids):
        super().__init__()
        self.typed = _WithTokenTypes(model)
        self.takes_types = common.backbone_accepts(model, "token_type_ids")
        self.graph = SpladeGraph(self.typed, pad_token_id, pooling, activation, zero_ids=zero_ids)

    def forward(self, input_ids, token_type_ids, attention_mask):
        if self.takes_types:
            self.typed.token_type_ids = token_type_ids
        else:  # DistilBERT: no token types; kept as a graph input (× 0: Anserini feeds zeros)
            attention_mask = attention_mask + token_type_ids * 0
        weights = self.graph(input_ids, attention_mask)[0]  # [V]
        idx = torch.nonzero(weights > 0).reshape(-1)
        return idx, weights[idx]


def quantized(weight: float) -> int:
    """Anserini's term count of a query weight: ``Math.round(w / 5 · 256)`` (half up)."""
    import math

    return int(math.floor(weight / WEIGHT_RANGE * QUANT_RANGE + 0.5))


def check_vocabulary(encoder, v: common.Variant) -> list[str]:
    """Tokens in id order, or a refusal (module docstring)."""
    tok = encoder.tokenizer
    backend = getattr(tok, "backend_tokenizer", None)
    data = json.loads(backend.to_str()) if backend is not None else {}
    if data.get("model", {}).get("type") != "WordPiece":
        common.refuse(
            v,
            f"the tokenizer of this {v.family} model is not WordPiece (Anserini tokenizes with DJL's "
            "BertFullTokenizer)",
        )
    normalizer = data.get("normalizer") or {}
    if not (normalizer.get("lowercase") or getattr(tok, "do_lower_case", False)):
        common.refuse(v, "a cased WordPiece tokenizer: Anserini's BertFullTokenizer lower-cases every query")
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    if len(tokens) != v.vocab_size or any(vocab[t] != j for j, t in enumerate(tokens)):
        common.refuse(v, f"the tokenizer names {len(tokens)} ids, not the decoder's {v.vocab_size} columns 0..V-1")
    for needed in ("[CLS]", "[SEP]", "[UNK]"):
        if needed not in vocab:
            common.refuse(
                v, f"the vocabulary has no {needed} (Anserini adds [CLS]/[SEP] and maps unknown words to [UNK])"
            )
    for j, name in SKIPPED_IDS.items():
        if j < len(tokens) and tokens[j] != name:
            common.refuse(v, f"id {j} is {tokens[j]!r}, but Anserini drops id {j} as {name}: that term would be lost")
    return tokens


def export(
    encoder, out: str | Path, *, pooling: str | None = None, activation: str | None = None, opset: int = 17, **_ignored
) -> Path:
    """Write the Anserini folder (module docstring) atomically; returns ``out``.

    Raises:
        ImportError: the onnx package is missing.
        UnsupportedModelError: a refusal of the module docstring.
        ValueError: an opset above 20.
    """
    from spladekit.io import atomic_folder, atomic_write

    v = common.variant(encoder, ENGINE, pooling, activation)
    if v.inference_free:
        common.refuse(
            v, "an inference-free model: Anserini's encoder runs the model on queries, whose side here is a table"
        )
    if v.folded:
        common.refuse(
            v,
            "a folded vocabulary: Anserini reads output_idx as ids of vocab.txt (the tokenizer's WordPiece "
            "vocabulary), and a folded vector's columns are terms",
        )
    if opset > 20:
        raise ValueError(f"opset {opset}: Anserini 0.25's onnxruntime reads at most opset 20")
    tokens = check_vocabulary(encoder, v)
    common.require_onnx(ENGINE)
    model = common.cpu_model(encoder)
    graph = AnseriniGraph(model, encoder.tokenizer.pad_token_id, v.pooling, v.activation, v.zero_ids).eval()
    ids = encoder.tokenize(["spladekit anserini export"], max_length=16)["input_ids"].long()
    args = (ids, torch.zeros_like(ids), torch.ones_like(ids))
    axes = {name: {1: "sequence"} for name in INPUTS} | {name: {0: "terms"} for name in OUTPUTS}
    with atomic_folder(out) as tmp:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                args,
                str(tmp / ONNX_FILE),
                input_names=list(INPUTS),
                output_names=list(OUTPUTS),
                dynamic_axes=axes,
                opset_version=opset,
                dynamo=False,
            )
        with atomic_write(tmp / VOCAB_FILE) as fh:
            fh.write("".join(t + "\n" for t in tokens))
        record = {
            "file": ONNX_FILE,
            "vocab": VOCAB_FILE,
            "encoder_class": ENCODER_CLASS,
            "inputs": list(INPUTS),
            "outputs": list(OUTPUTS),
            "opset": opset,
            "pooling": v.pooling,
            "activation": v.activation,
            "position_top_k": v.position_top_k,
            "zeroed_columns": v.zero_ids,
            "quantization": f"round(w / {WEIGHT_RANGE} * {QUANT_RANGE})",
        }
        common.write_metadata(encoder, tmp, ENGINE, record)
        common.write_how_to(tmp, HOW_TO)
    return Path(out)


HOW_TO = f"""
# Using this model as an Anserini / Pyserini query encoder

Anserini's `{ENCODER_CLASS.rsplit(".", 1)[1]}` reads `{ONNX_FILE}` and `{VOCAB_FILE}` from
`~/.cache/anserini/encoders/` and downloads them only when they are missing. Copy both files there
(this replaces a cached SPLADE++ ED model):

```sh
mkdir -p ~/.cache/anserini/encoders && cp {ONNX_FILE} {VOCAB_FILE} ~/.cache/anserini/encoders/
```

then search an impact index of documents encoded by the same model (`spladekit export --format anserini`):

```sh
java -cp anserini-0.25.0-fatjar.jar io.anserini.search.SearchCollection -index INDEX -topics topics.tsv \\
  -topicReader TsvString -output run.txt -impact -pretokenized -encoder SpladePlusPlusEnsembleDistil
```

The encoder lower-cases, adds [CLS]/[SEP], skips ids 0/101/102 and repeats each term
round(w / {WEIGHT_RANGE} x {QUANT_RANGE}) times in the Lucene query; documents must be quantised the same way.
"""
