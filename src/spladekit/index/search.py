"""How an index's queries are encoded (searching itself is :meth:`spladekit.index.index.Index.search`).

Query vectors come from the model recorded in the index, with the query max length, top-k and
pruning rule recorded there (which came from the model's ``spladekit.json``), so the same text gives the same
vector through the Python API, the CLI and the index.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.errors import DataFormatError


def check_query_settings(meta: dict, path: str | Path = "index.json") -> None:
    """Refuse ``index.json`` query settings that would encode queries other than the documents were:
    ``query_max_length`` (an integer ≥ 2: [CLS] and [SEP]) and ``query_top_k`` (an integer ≥ 1)
    when present and not null; ``query_pruning`` a pruning rule's record
    (:class:`spladekit.model.pruning.PruningRule`) when present and not null; ``pooling`` /
    ``activation`` when present must be ones spladekit computes
    (:data:`spladekit.model.pooling.POOLINGS` / ``ACTIVATIONS``).

    Raises:
        DataFormatError: naming ``path`` and the field.
    """
    from spladekit.model.pooling import ACTIVATIONS, POOLINGS

    for key, low in (("query_max_length", 2), ("query_top_k", 1)):
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise DataFormatError(path, f"must be an integer ≥ {low} or null, got {value!r}", field=key)
    from spladekit.model.pruning import record_problem

    problem = record_problem(meta.get("query_pruning"))
    if problem:
        raise DataFormatError(path, f"must be {problem}, got {meta.get('query_pruning')!r}", field="query_pruning")
    for key, allowed in (("pooling", POOLINGS), ("activation", ACTIVATIONS)):
        if key in meta and meta[key] not in allowed:
            raise DataFormatError(
                path, f"{meta[key]!r} is not a SPLADE {key} spladekit computes ({', '.join(allowed)})", field=key
            )


def query_encoder(
    meta: dict,
    model: str | None = None,
    batch_size: int = 32,
    head_impl: str | None = None,
    path: str | Path = "index.json",
    trust_remote_code: bool = False,
):
    """The :class:`SpladeEncoder` an index's queries are encoded with (model and query settings
    from ``index.json`` unless ``model`` overrides the model). A folder written by ``export-model
    --onnx`` (``spladekit.json`` with an ``extra.onnx`` record) runs in onnxruntime
    (:class:`~spladekit.model.onnx_export.OnnxSpladeEncoder`), with the same query settings.

    Args:
        path: the ``index.json`` ``meta`` was read from (named by errors).
        trust_remote_code: run the model folder's own code (never read from ``index.json``: the caller's choice).

    Raises:
        DataFormatError: no model recorded and none given; query settings out of range
            (:func:`check_query_settings`); the recorded model's pooling or activation is not the
            one ``index.json`` records (its documents were encoded otherwise).
    """
    check_query_settings(meta, path)
    if model is None and not meta.get("model"):
        raise DataFormatError(path, "no model recorded in the index; pass the query model (--model)", field="model")
    source = model or meta["model"]
    encoder = _load(meta, source, batch_size, head_impl, trust_remote_code)
    if model is None:  # the index's own model: its pooling must be the one the documents were encoded with
        for key in ("pooling", "activation"):
            have = getattr(encoder.metadata, key, None)
            if key in meta and have is not None and have != meta[key]:
                raise DataFormatError(
                    path,
                    f"{meta[key]!r}, but the model {source} computes {have!r}; queries would not "
                    "match the documents (pass --model to choose a query model)",
                    field=key,
                )
    return encoder


def _load(meta: dict, source: str, batch_size: int, head_impl: str | None, trust_remote_code: bool = False):
    from spladekit.model.encoder import EncoderMetadata, SpladeEncoder

    if Path(source).is_dir() and EncoderMetadata.load(source).extra.get("onnx"):
        from spladekit.model.onnx_export import OnnxSpladeEncoder

        encoder = OnnxSpladeEncoder(source, batch_size=batch_size)
        for key in ("query_max_length", "query_top_k", "query_pruning"):
            if meta.get(key) is not None:
                setattr(encoder.metadata, key, meta[key])
        return encoder
    return SpladeEncoder.from_pretrained(
        source,
        query_max_length=meta.get("query_max_length"),
        query_top_k=meta.get("query_top_k"),
        query_pruning=meta.get("query_pruning"),
        batch_size=batch_size,
        head_impl=head_impl,
        trust_remote_code=trust_remote_code,
    )
