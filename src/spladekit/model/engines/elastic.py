"""Elasticsearch (eland → ml-cpp ``pytorch_inference``, ``text_expansion`` task): TorchScript whose
output is already the SPLADE vector.

Contract (eland 9.2 ``transformers.py``, ml-cpp ``Main.cc``): ml-cpp calls the
module once per sequence with ``[1, L]`` int64 tensors, as many as the tokenization type has
arguments: ``bert`` (WordPiece) 4 (``input_ids, attention_mask, token_type_ids, position_ids``),
``roberta`` / ``xlm_roberta`` 2 (``input_ids, attention_mask``); it takes element 0 of a tuple
output, and Elasticsearch's text-expansion processor reads ``result[0][0]``, the entries ``> 0``,
as ``{token: weight}`` (tokens with ``.`` renamed ``__``). eland's own tracer traces the bare
masked LM, so ``result[0][0]`` is the raw logits of position 0 (elastic/eland#827): this writer puts the
SPLADE pooling inside, so the output is ``[B, 1, V]`` and ``result[0][0]`` is the vector.

Pooling and backbone are traced with SDPA attention (``aten::scaled_dot_product_attention`` is on
ml-cpp's list) and checked against the allowlist (:mod:`spladekit.model.engines.torchscript`).
``token_type_ids`` go to backbones that take them; ``position_ids`` are accepted and not used:
ml-cpp passes ``arange(L)``, the positions spladekit's encoder uses.

Refused by name: ModernBERT (no Elasticsearch tokenization for its tokenizer, and its rotary
embeddings use ``aten::sin``/``cos``, not allowlisted), a slow tokenizer (no ``tokenizer.json``),
a vocabulary whose size is not the decoder's V, an inference-free model (``text_expansion`` runs
the same model on queries), a per-position cap (``position_top_k``: a top-k needs ``aten::topk`` or
``aten::sort``, neither allowlisted), a folded vocabulary (Elasticsearch names output column ``j``
by ``vocabulary[j]``, the tokenizer's vocabulary; a folded vector's columns are terms).

Folder::

    model.pt          TorchScript, forward(args) → [B, 1, V] float32
    vocabulary.json   {"vocabulary": [token by id], "merges": [...] (BPE), "scores": [...] (unigram)}
    config.json       the trained-model config for PUT _ml/trained_models/<id> (text_expansion)
    HOW_TO_LOAD.md    eland's import and the index mapping / query body
    spladekit.json    the model's metadata, extra.elasticsearch = the export record
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from spladekit.model.engines import common
from spladekit.model.engines import torchscript as ts

ENGINE = "elasticsearch"
MODEL_FILE, VOCAB_FILE, CONFIG_FILE = "model.pt", "vocabulary.json", "config.json"
#: Elasticsearch tokenization type → the arguments ml-cpp passes.
ARGUMENTS = {
    "bert": ("input_ids", "attention_mask", "token_type_ids", "position_ids"),
    "roberta": ("input_ids", "attention_mask"),
    "xlm_roberta": ("input_ids", "attention_mask"),
}


class ElasticSplade4(nn.Module):
    """BERT-style argument list → ``[B, 1, V]`` (module docstring)."""

    def __init__(self, model, pooling: ts.SpladePooling):
        super().__init__()
        self.model, self.pooling = model, pooling

    def forward(self, input_ids, attention_mask, token_type_ids, position_ids):
        head = self.model.head
        hidden = common.hidden_states(self.model, input_ids, attention_mask, token_type_ids)
        logits = nn.functional.linear(hidden, head.weight, head.bias)
        return self.pooling(logits, attention_mask)


class ElasticSplade2(ElasticSplade4):
    """RoBERTa / XLM-R argument list → ``[B, 1, V]``."""

    def forward(self, input_ids, attention_mask):
        return super().forward(input_ids, attention_mask, None, None)


def tokenizer_json(tokenizer) -> dict:
    """The fast tokenizer's ``tokenizer.json`` as a dict (``{}`` for a slow tokenizer)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return json.loads(backend.to_str()) if backend is not None else {}


def tokenization_type(encoder, v: common.Variant) -> str:
    """The Elasticsearch tokenization (``bert``/``roberta``/``xlm_roberta``) of the model's tokenizer.

    Raises:
        UnsupportedModelError: ModernBERT, a slow tokenizer, or a tokenizer model Elasticsearch lacks.
    """
    if v.family == "modernbert":
        common.refuse(
            v,
            "ModernBERT (and Ettin) have no Elasticsearch tokenization, and their rotary "
            "embeddings use aten::sin/aten::cos, which ml-cpp's allowlist refuses",
        )
    kind = tokenizer_json(encoder.tokenizer).get("model", {}).get("type")
    if kind == "WordPiece":
        return "bert"
    if kind == "BPE" and v.family == "roberta":
        return "roberta"
    if kind == "Unigram" and v.family == "xlm-roberta":
        return "xlm_roberta"
    common.refuse(
        v,
        f"the tokenizer ({kind or 'slow, no tokenizer.json'}) of a {v.family} model has no "
        "Elasticsearch tokenization (bert: WordPiece; roberta: BPE; xlm_roberta: Unigram)",
    )


def vocabulary_file(encoder, kind: str, v: common.Variant) -> dict:
    """``vocabulary.json`` as eland writes it: tokens in id order, BPE merges, unigram scores."""
    data = tokenizer_json(encoder.tokenizer)
    vocab = encoder.tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    if len(tokens) != v.vocab_size or any(vocab[t] != j for j, t in enumerate(tokens)):
        common.refuse(
            v,
            f"the tokenizer names {len(tokens)} ids, not the decoder's {v.vocab_size} columns "
            "0..V-1 (Elasticsearch maps output column j to vocabulary[j])",
        )
    out: dict = {"vocabulary": tokens}
    model = data.get("model", {})
    if kind == "roberta":
        out["merges"] = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    if kind == "xlm_roberta":
        out["scores"] = [float(score) for _, score in model.get("vocab", [])]
    return out


def trained_model_config(encoder, kind: str, max_length: int) -> dict:
    """The body of ``PUT _ml/trained_models/<id>`` (Elastic docs, "Create trained models API")."""
    settings = {"with_special_tokens": True, "max_sequence_length": max_length, "truncate": "first", "span": -1}
    if kind == "bert":
        normalizer = tokenizer_json(encoder.tokenizer).get("normalizer") or {}
        settings["do_lower_case"] = bool(
            getattr(encoder.tokenizer, "do_lower_case", False) or normalizer.get("lowercase")
        )
    if kind == "roberta":
        settings["add_prefix_space"] = False
    return {
        "description": f"SPLADE model exported by spladekit from {encoder.metadata.source or 'a local folder'}",
        "model_type": "pytorch",
        "inference_config": {"text_expansion": {"tokenization": {kind: settings}}},
        "input": {"field_names": ["text_field"]},
    }


def build_module(encoder, v: common.Variant, kind: str) -> tuple[nn.Module, tuple]:
    """The eager module and the traced example (one sequence, ``[1, L]``) for tokenization ``kind``."""
    model = common.cpu_model(encoder, attention="sdpa")
    pooling = ts.SpladePooling(v.pooling, v.activation, v.keep())
    batch = encoder.tokenize(["spladekit exports for elasticsearch"], max_length=16)
    ids, mask = batch["input_ids"].long(), batch["attention_mask"].long()
    if len(ARGUMENTS[kind]) == 4:
        example = (ids, mask, torch.zeros_like(ids), torch.arange(ids.shape[1]).unsqueeze(0))
        return ElasticSplade4(model, pooling).eval(), example
    return ElasticSplade2(model, pooling).eval(), (ids, mask)


def export(
    encoder,
    out: str | Path,
    *,
    pooling: str | None = None,
    activation: str | None = None,
    max_length: int | None = None,
    index_mapping: dict | None = None,
    **_ignored,
) -> Path:
    """Write the Elasticsearch folder (module docstring) atomically; returns ``out``.

    Args:
        max_length: ``max_sequence_length`` of the tokenization (default: the model's doc max length).
        index_mapping: the index mapping shown in ``HOW_TO_LOAD.md`` (the CLI passes
            ``spladekit.index.formats.elastic.mapping("splade", "sparse_vector")``; the model stage
            does not import the index stage).

    Raises:
        UnsupportedModelError: a refusal of the module docstring.
        UnsupportedOpError: the traced graph uses an op ml-cpp refuses.
    """
    from spladekit.io import atomic_folder, write_json

    v = common.variant(encoder, ENGINE, pooling, activation)
    if v.inference_free:
        common.refuse(
            v,
            "an inference-free model (text_expansion encodes queries with the same model; "
            "Elasticsearch has no doc-only form)",
        )
    if v.position_top_k is not None:
        common.refuse(
            v,
            f"position_top_k={v.position_top_k}: a per-position top-k needs aten::topk or aten::sort, "
            "which ml-cpp's allowlist refuses",
        )
    if v.folded:
        common.refuse(
            v,
            "a folded vocabulary: Elasticsearch names output column j by vocabulary[j], the tokenizer's "
            "vocabulary, and a folded vector's columns are terms",
        )
    kind = tokenization_type(encoder, v)
    vocabulary = vocabulary_file(encoder, kind, v)
    max_length = max_length or encoder.metadata.doc_max_length
    module, example = build_module(encoder, v, kind)
    traced = ts.trace(module, example)
    with atomic_folder(out) as tmp:
        record = ts.save(traced, tmp / MODEL_FILE)
        write_json(tmp / VOCAB_FILE, vocabulary)
        config = trained_model_config(encoder, kind, max_length)
        write_json(tmp / CONFIG_FILE, config)
        record.update(
            file=MODEL_FILE,
            arguments=list(ARGUMENTS[kind]),
            tokenization=kind,
            output="[B, 1, V]",
            pooling=v.pooling,
            activation=v.activation,
            zeroed_columns=v.zero_ids,
            attention="sdpa",
        )
        common.write_metadata(encoder, tmp, ENGINE, record)
        common.write_how_to(tmp, how_to(kind, index_mapping))
    return Path(out)


def how_to(kind: str, index_mapping: dict | None = None) -> str:
    body = (
        json.dumps(index_mapping, indent=2)
        if index_mapping is not None
        else '(the body of spladekit.index.formats.elastic.mapping("splade", "sparse_vector"))'
    )
    return f"""
# Loading this model into Elasticsearch (9.2+; text_expansion)

`model.pt` is TorchScript with the SPLADE pooling inside (its output `[1, 1, V]`; Elasticsearch reads
`result[0][0]`), `vocabulary.json` the tokenizer's vocabulary, `config.json` the trained-model config
(tokenization `{kind}`, arguments {", ".join(ARGUMENTS[kind])}). Import with eland's Python API:

```python
from elasticsearch import Elasticsearch
from eland.ml.pytorch import PyTorchModel

es = Elasticsearch("https://localhost:9200", api_key="...")
ptm = PyTorchModel(es, "my-splade")
ptm.import_model(model_path="model.pt", config_path="config.json", vocab_path="vocabulary.json")
ptm.start()   # POST _ml/trained_models/my-splade/deployment/_start
```

Index mapping (`PUT /my-index`; `prune: false` keeps the exact dot product):

```json
{body}
```

Ingest pipeline (`PUT _ingest/pipeline/splade`):

```json
{{"processors": [{{"inference": {{"model_id": "my-splade", "input_output": [{{"input_field": "text", "output_field": "splade"}}]}}}}]}}
```

Query (`POST /my-index/_search`):

```json
{{"query": {{"sparse_vector": {{"field": "splade", "inference_id": "my-splade", "query": "what causes cancer", "prune": false}}}}}}
```

Elasticsearch renames `.` in output tokens to `__`; vectors indexed by `spladekit export --format elastic`
escape `.` as `%2E` instead, so do not mix the two in one index. Do not import the model folder itself with
`eland_import_hub_model --task-type text_expansion`: eland traces the bare masked LM, and Elasticsearch then
reads the raw logits of the first position (eland#827).
"""
