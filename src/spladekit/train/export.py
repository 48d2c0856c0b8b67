"""sentence-transformers module files, so a spladekit model folder loads as a ``SparseEncoder``.

The layout is the one sentence-transformers (≥ 5) writes for SPLADE models: module 0, a fill-mask
``MLMTransformer`` whose files are the folder itself, then module 1, ``SpladePooling`` with max
pooling and ReLU (log1p saturation is applied by SpladePooling), i.e. the same function as
:func:`spladekit.model.pooling.splade_max_pool`. Written by hand (no sentence-transformers import),
with the module paths that sentence-transformers 5.x and 6.x both load.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.io import write_json

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
    {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": "sentence_transformers.sparse_encoder.models.SpladePooling"},
]


def write_sentence_transformers_files(folder: str | Path, max_seq_length: int = 256) -> list[Path]:
    """Write ``modules.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``
    and ``1_SpladePooling/config.json`` into a saved masked-LM model folder.

    Args:
        folder: a folder holding a ``*ForMaskedLM`` model and its tokenizer.
        max_seq_length: sentence-transformers' single maximum length (tokens) for queries and documents.

    Returns:
        The files written.
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
        folder / "1_SpladePooling" / "config.json": {
            "pooling_strategy": "max",
            "activation_function": "relu",
            "word_embedding_dimension": None,
        },
    }
    for path, content in files.items():
        write_json(path, content)
    return list(files)
