"""How an index's queries are encoded (searching itself is :meth:`spladekit.index.index.Index.search`).

Query vectors come from the model recorded in the index, with the query max length and pruning
recorded there (which came from the model's ``spladekit.json``), so the same text gives the same
vector through the Python API, the CLI and the index.
"""

from __future__ import annotations


def query_encoder(meta: dict, model: str | None = None, batch_size: int = 32, head_impl: str | None = None):
    """The :class:`SpladeEncoder` an index's queries are encoded with (model and query settings
    from ``index.json`` unless ``model`` overrides the model). A folder written by ``export-model
    --onnx`` (``spladekit.json`` with an ``extra.onnx`` record) runs in onnxruntime
    (:class:`~spladekit.model.onnx_export.OnnxSpladeEncoder`), with the same query settings."""
    from pathlib import Path

    from spladekit.errors import DataFormatError
    from spladekit.model.encoder import EncoderMetadata, SpladeEncoder

    if model is None and not meta.get("model"):
        raise DataFormatError("index.json", "no model recorded in the index; pass the query model (--model)", field="model")
    source = model or meta["model"]
    if Path(source).is_dir() and EncoderMetadata.load(source).extra.get("onnx"):
        from spladekit.model.onnx_export import OnnxSpladeEncoder

        encoder = OnnxSpladeEncoder(source, batch_size=batch_size)
        for key in ("query_max_length", "query_top_k"):
            if meta.get(key) is not None:
                setattr(encoder.metadata, key, meta[key])
        return encoder
    return SpladeEncoder.from_pretrained(
        source,
        query_max_length=meta.get("query_max_length"),
        query_top_k=meta.get("query_top_k"),
        batch_size=batch_size,
        head_impl=head_impl,
    )
