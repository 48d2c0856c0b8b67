"""sentence-transformers module files, so a spladekit model folder loads as a ``SparseEncoder``.

The layout is the one sentence-transformers (≥ 5) writes for SPLADE models: module 0, a fill-mask
``MLMTransformer`` whose files are the folder itself, then module 1, ``SpladePooling`` with the
model's pooling (``pooling_strategy``: ``max``/``sum``) and activation (``activation_function``:
``relu``/``log1p_relu``; log1p saturation is applied by SpladePooling), i.e. the same function as
:func:`spladekit.model.pooling.splade_pool`. Written by hand (no sentence-transformers import),
with the module paths that sentence-transformers 5.x and 6.x both load.

An inference-free model (``query_encoder: inference-free``) gets the ``Router`` layout instead
(:func:`write_inference_free_sentence_transformers_files`): the plain layout would encode its queries
through the transformer, which is not the model.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.io import write_json

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
    {
        "idx": 1,
        "name": "1",
        "path": "1_SpladePooling",
        "type": "sentence_transformers.sparse_encoder.models.SpladePooling",
    },
]


def _pooling_config(pooling: str, activation: str) -> dict:
    """``SpladePooling``'s ``config.json`` (the 5.x key ``word_embedding_dimension``, which 6.x renames on load)."""
    from spladekit.model.pooling import check_pooling

    check_pooling(pooling, activation)
    return {"pooling_strategy": pooling, "activation_function": activation, "word_embedding_dimension": None}


def write_sentence_transformers_files(
    folder: str | Path, max_seq_length: int = 256, pooling: str = "max", activation: str = "relu"
) -> list[Path]:
    """Write ``modules.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``
    and ``1_SpladePooling/config.json`` into a saved masked-LM model folder.

    Args:
        folder: a folder holding a ``*ForMaskedLM`` model and its tokenizer.
        max_seq_length: sentence-transformers' single maximum length (tokens) for queries and documents.
        pooling, activation: the model's (:class:`spladekit.model.splade.SpladeModel` attributes).

    Returns:
        The files written.

    Raises:
        ValueError: unknown pooling or activation.
    """
    folder = Path(folder)
    files = {
        folder / "modules.json": MODULES,
        folder / "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        folder / "config_sentence_transformers.json": {
            "model_type": "SparseEncoder",
            "prompts": {"query": "", "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "dot",
        },
        folder / "1_SpladePooling" / "config.json": _pooling_config(pooling, activation),
    }
    for path, content in files.items():
        write_json(path, content)
    return list(files)


#: The inference-free layout (sentence-transformers ``Router``): the query route is a
#: ``SparseStaticEmbedding`` (its own folder: config, weight, tokenizer), the document route the
#: masked-LM at the folder root (module id ".") then ``SpladePooling``. Module paths and Router
#: parameters are the 5.x ones, which 6.x still loads (only 6.2 is tested here).
ROUTER_TYPES = {
    "query_0_SparseStaticEmbedding": "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding",
    ".": "sentence_transformers.sparse_encoder.models.MLMTransformer",
    "document_1_SpladePooling": "sentence_transformers.sparse_encoder.models.SpladePooling",
}


def write_inference_free_sentence_transformers_files(
    folder: str | Path,
    tokenizer,
    query_weights,
    max_seq_length: int = 256,
    pooling: str = "max",
    activation: str = "relu",
) -> list[Path] | None:
    """Write the sentence-transformers ``Router`` layout of an inference-free model into ``folder``
    (a saved masked-LM folder): queries through ``SparseStaticEmbedding`` with ``query_weights``,
    documents through ``MLMTransformer`` + ``SpladePooling`` (``encode_query`` / ``encode_document``).

    The masked-LM weights are not copied (the document route's module id is the folder itself);
    the query module's folder holds its ``[V]`` weight and a copy of the tokenizer files.

    Returns:
        The files written, or None when the layout cannot express the model: sentence-transformers
        sizes ``SparseStaticEmbedding`` by ``len(tokenizer.get_vocab())``, so a model whose decoder
        has another number of columns (a padded vocabulary) cannot load there.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    if len(tokenizer.get_vocab()) != int(query_weights.shape[0]):
        return None
    query_dir = folder / "query_0_SparseStaticEmbedding"
    query_dir.mkdir(parents=True, exist_ok=True)
    save_file({"weight": query_weights.detach().float().cpu().contiguous()}, str(query_dir / "model.safetensors"))
    tokenizer.save_pretrained(query_dir)
    files = {
        folder / "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Router"}],
        folder / "router_config.json": {
            "types": ROUTER_TYPES,
            "structure": {"query": ["query_0_SparseStaticEmbedding"], "document": [".", "document_1_SpladePooling"]},
            "parameters": {"default_route": "document", "allow_empty_key": True},
        },
        folder / "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        folder / "config_sentence_transformers.json": {
            "model_type": "SparseEncoder",
            "prompts": {"query": "", "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "dot",
        },
        query_dir / "config.json": {"frozen": False},
        folder / "document_1_SpladePooling" / "config.json": _pooling_config(pooling, activation),
    }
    for path, content in files.items():
        write_json(path, content)
    return list(files) + [query_dir / "model.safetensors"]
