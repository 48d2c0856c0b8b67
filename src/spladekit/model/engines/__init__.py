"""Exports of a SPLADE model in the form each serving engine runs itself.

One writer per engine, each in its own module, each producing exactly that engine's contract:

=================  ==========================================  =============================================
``--format``       module                                      what is written
=================  ==========================================  =============================================
``elasticsearch``  :mod:`spladekit.model.engines.elastic`      ``model.pt`` (TorchScript, pooling inside,
                                                               allowlisted ops only), ``vocabulary.json``,
                                                               ``config.json`` (trained-model config)
``opensearch``     :mod:`spladekit.model.engines.opensearch`   ``model.zip`` (``model.pt`` + ``tokenizer.json``),
                                                               ``ml-commons_model_config.json``; doc-only:
                                                               ``query_tokenizer.zip`` (``idf.json``)
``fastembed``      :mod:`spladekit.model.engines.fastembed`    ``model.onnx`` (raw MLM logits ``[B, L, V]``),
                                                               tokenizer files, ``config.json``
``anserini``       :mod:`spladekit.model.engines.anserini`     ``model.onnx`` (``output_idx``/``output_weights``),
                                                               ``vocab.txt``
=================  ==========================================  =============================================

Every folder also holds ``HOW_TO_LOAD.md`` (the engine's documented register/import calls and the
index mapping and query body) and ``spladekit.json`` (the model's metadata with an ``extra.<engine>``
record). An export the model cannot satisfy (family, pooling, activation, vocabulary, doc-only) is
refused by name with :class:`spladekit.errors.UnsupportedModelError` before anything is written.
Details, and what is and is not verified against each engine: ``docs/engines.md``.
"""

from __future__ import annotations

from pathlib import Path

#: ``--format`` value → module of its writer (each has ``export(encoder, out, **options) -> Path``).
ENGINE_WRITERS = {
    "elasticsearch": "spladekit.model.engines.elastic",
    "opensearch": "spladekit.model.engines.opensearch",
    "fastembed": "spladekit.model.engines.fastembed",
    "anserini": "spladekit.model.engines.anserini",
}


def export_for_engine(engine: str, encoder, out: str | Path, **options) -> Path:
    """Write ``encoder`` as ``engine``'s folder ``out`` (atomically); returns ``out``.

    Raises:
        ValueError: unknown engine.
        UnsupportedModelError: the model cannot be given to that engine (named in the message).
    """
    import importlib

    if engine not in ENGINE_WRITERS:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_WRITERS)}")
    return importlib.import_module(ENGINE_WRITERS[engine]).export(encoder, out, **options)
