"""OpenSearch ML Commons (DJL, ``SPARSE_ENCODING``): a zip of TorchScript + ``tokenizer.json`` and the
register JSON; doc-only models also get the ``SPARSE_TOKENIZE`` query side.

Contract (opensearch-py-ml 1.3 ``SparseEncodingModel``/``NeuralSparseModel``):
DJL calls the module with one dict ``{"input_ids": [B, L], "attention_mask": [B, L]}`` (int64) and
reads ``{"output": [B, V]}``, whose non-zeros it decodes per token (or as ``TOKEN_ID``). The model
pools; it is traced with eager attention, as opensearch-py-ml does (``_attn_implementation="eager"``).
The pooling is :class:`spladekit.model.engines.torchscript.SpladePooling` (max or sum, relu or
log1p_relu, ``[PAD]``/special columns zeroed as the model's metadata says); DJL tokenizes with
``tokenizer.json``, whose truncation is set to the model's doc max length (as opensearch-py-ml's
``_fill_null_truncation_field`` does).

A per-position cap (``position_top_k``) is traced into the pooling (``torch.topk``; DJL runs any
TorchScript op). Refused by name: a folded vocabulary (ML Commons decodes output column ``j`` as the
token with id ``j``; a folded vector's columns are terms), a slow tokenizer.

Doc-only (inference-free) models: the query side is a table, so the folder also holds
``query_tokenizer.zip`` (``tokenizer.json`` + ``idf.json``, every vocabulary token with its query
weight, zeros included: ML Commons gives a token missing from ``idf.json`` the weight 1) with its
own register JSON (``function_name: SPARSE_TOKENIZE``).

Folder::

    model.zip                         model.pt + tokenizer.json
    ml-commons_model_config.json      register body: name, version, model_format TORCH_SCRIPT,
                                      function_name SPARSE_ENCODING, size in bytes, sha256
    query_tokenizer.zip, query_tokenizer_config.json    doc-only models only (SPARSE_TOKENIZE)
    HOW_TO_LOAD.md, spladekit.json
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch
from torch import nn

from spladekit.data.resolve import sha256_file
from spladekit.model.engines import common
from spladekit.model.engines import torchscript as ts

ENGINE = "opensearch"
ZIP_FILE, PT_FILE, CONFIG_FILE = "model.zip", "model.pt", "ml-commons_model_config.json"
QUERY_ZIP, QUERY_CONFIG = "query_tokenizer.zip", "query_tokenizer_config.json"
OUTPUT_KEY = "output"


class OpenSearchSplade(nn.Module):
    """``{"input_ids", "attention_mask"} → {"output": [B, V]}`` (module docstring)."""

    def __init__(self, model, pooling: ts.SpladePooling):
        super().__init__()
        self.model, self.pooling = model, pooling

    def forward(self, input: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:  # noqa: A002 (DJL's name)
        mask = input["attention_mask"]
        head = self.model.head
        logits = nn.functional.linear(
            common.hidden_states(self.model, input["input_ids"], mask), head.weight, head.bias
        )
        return {OUTPUT_KEY: self.pooling(logits, mask).squeeze(1)}


def register_config(name: str, zip_path: Path, function_name: str, description: str) -> dict:
    """The ML Commons register body (opensearch-py-ml's ``make_model_config_json`` fields)."""
    return {
        "name": name,
        "version": "1.0.0",
        "model_format": "TORCH_SCRIPT",
        "function_name": function_name,
        "description": description,
        "model_content_size_in_bytes": zip_path.stat().st_size,
        "model_content_hash_value": sha256_file(zip_path),
    }


def tokenizer_json(encoder, max_length: int) -> str:
    """``tokenizer.json`` with truncation at ``max_length`` (DJL truncates by it)."""
    backend = getattr(encoder.tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("OpenSearch needs a fast tokenizer (tokenizer.json)")
    data = json.loads(backend.to_str())
    data["truncation"] = {"direction": "Right", "max_length": int(max_length), "strategy": "LongestFirst", "stride": 0}
    return json.dumps(data, ensure_ascii=False)


def export(
    encoder,
    out: str | Path,
    *,
    pooling: str | None = None,
    activation: str | None = None,
    max_length: int | None = None,
    name: str | None = None,
    index_mapping: dict | None = None,
    **_ignored,
) -> Path:
    """Write the OpenSearch folder (module docstring) atomically; returns ``out``.

    Args:
        max_length: DJL's truncation (default: the model's doc max length).
        name: the registered model name (default: the model folder's name).
        index_mapping: the index mapping shown in ``HOW_TO_LOAD.md`` (the CLI passes
            ``spladekit.index.formats.elastic.mapping("splade", "rank_features")``).

    Raises:
        UnsupportedModelError: a slow tokenizer (no ``tokenizer.json``).
    """
    from spladekit.io import atomic_folder, write_json

    v = common.variant(encoder, ENGINE, pooling, activation)
    if getattr(encoder.tokenizer, "backend_tokenizer", None) is None:
        common.refuse(v, "a slow tokenizer: DJL needs tokenizer.json")
    if v.folded:
        common.refuse(
            v,
            "a folded vocabulary: ML Commons decodes output column j as the token with id j, and a folded "
            "vector's columns are terms",
        )
    max_length = max_length or encoder.metadata.doc_max_length
    name = name or Path(str(encoder.metadata.source or "spladekit-model")).name
    model = common.cpu_model(encoder, attention="eager")  # DJL has no SDPA
    module = OpenSearchSplade(model, ts.SpladePooling(v.pooling, v.activation, v.keep(), v.position_top_k)).eval()
    sample = common.sample_batch(encoder)
    traced = ts.trace(
        module,
        ({"input_ids": sample["input_ids"].long(), "attention_mask": sample["attention_mask"].long()},),
        strict=False,
    )
    tok = tokenizer_json(encoder, max_length)
    with atomic_folder(out) as tmp:
        torch.jit.save(traced, str(tmp / PT_FILE))
        with zipfile.ZipFile(tmp / ZIP_FILE, "w") as archive:
            archive.write(tmp / PT_FILE, arcname=PT_FILE)
            archive.writestr("tokenizer.json", tok)
        (tmp / PT_FILE).unlink()
        write_json(
            tmp / CONFIG_FILE,
            register_config(
                name,
                tmp / ZIP_FILE,
                "SPARSE_ENCODING",
                f"SPLADE document/query encoder exported by spladekit ({v.pooling} pooling, {v.activation})",
            ),
        )
        record = {
            "file": ZIP_FILE,
            "inputs": ["input_ids", "attention_mask"],
            "output": f"{OUTPUT_KEY} [B, V]",
            "pooling": v.pooling,
            "activation": v.activation,
            "zeroed_columns": v.zero_ids,
            "attention": "eager",
            "position_top_k": v.position_top_k,
            "max_length": max_length,
            "traced_with_torch": torch.__version__,
        }
        if v.inference_free:
            _write_query_side(encoder, tmp, name)
            record["query_side"] = QUERY_ZIP
        common.write_metadata(encoder, tmp, ENGINE, record)
        common.write_how_to(tmp, how_to(v.inference_free, index_mapping))
    return Path(out)


def _write_query_side(encoder, folder: Path, name: str) -> None:
    """The query side of a doc-only model into ``folder``: ``QUERY_ZIP`` (the query tokenizer and ``idf.json``,
    each vocabulary entry's weight) and its registration config ``QUERY_CONFIG``."""
    from spladekit.io import write_json

    weights = encoder.query_weights.detach().float().cpu().tolist()
    vocab = encoder.vocabulary
    idf = {vocab[j]: float(w) for j, w in enumerate(weights) if j < len(vocab)}
    with zipfile.ZipFile(folder / QUERY_ZIP, "w") as archive:
        archive.writestr("tokenizer.json", tokenizer_json(encoder, encoder.metadata.query_max_length))
        archive.writestr("idf.json", json.dumps(idf, ensure_ascii=False))
    write_json(
        folder / QUERY_CONFIG,
        register_config(
            name + "-query-tokenizer",
            folder / QUERY_ZIP,
            "SPARSE_TOKENIZE",
            "query side of a doc-only SPLADE model (idf.json weights)",
        ),
    )


def how_to(doc_only: bool, index_mapping: dict | None = None) -> str:
    body = (
        json.dumps(index_mapping, indent=2)
        if index_mapping is not None
        else '(the body of spladekit.index.formats.elastic.mapping("splade", "rank_features"))'
    )
    query_side = (
        """
The query side of this doc-only model is `query_tokenizer.zip` (`idf.json`): register it the same way with
`query_tokenizer_config.json` (`"function_name": "SPARSE_TOKENIZE"`) and use its model id in the query.
"""
        if doc_only
        else ""
    )
    return f"""
# Loading this model into OpenSearch (ML Commons, neural sparse search)

`model.zip` holds `model.pt` (TorchScript: `{{"input_ids", "attention_mask"}} -> {{"output": [B, V]}}`, pooling inside,
eager attention) and `tokenizer.json`; `ml-commons_model_config.json` is the register body (its
`model_content_hash_value` is the zip's SHA-256). Serve the zip at a URL the cluster can reach, then:

```
POST /_plugins/_ml/models/_register
{{ ...ml-commons_model_config.json..., "url": "https://.../model.zip" }}
GET  /_plugins/_ml/tasks/<task_id>          # gives model_id
POST /_plugins/_ml/models/<model_id>/_deploy
```

or with opensearch-py-ml: `MLCommonClient(client).register_model(model_path="model.zip",
model_config_path="ml-commons_model_config.json", deploy_model=True)` (it uploads the zip in chunks).
{query_side}
Index mapping (`PUT /my-index`):

```json
{body}
```

Ingest pipeline: `{{"processors": [{{"sparse_encoding": {{"model_id": "<model_id>", "field_map": {{"text": "splade"}}}}}}]}}`.
Query: `{{"query": {{"neural_sparse": {{"splade": {{"query_text": "what causes cancer", "model_id": "<model_id>"}}}}}}}}`.
"""
