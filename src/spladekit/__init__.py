"""spladekit: any masked-language-model encoder as a stable SPLADE sparse retriever.

Data flow (one module per stage)::

    data (readers, resolve) → model (heads, pooling, encoder) → index (exact search, BM25)
    → evaluate (metrics, efficiency, the evaluation of systems) ; train, mine, serve and cli use them.

The names below are imported on first use (PEP 562 ``__getattr__``), so that ``import spladekit``
(and with it the command line's ``--help``) does not wait for torch and transformers.
"""

from __future__ import annotations

import importlib

# ``evaluate`` is both a subpackage and the function exported here: once any module imports the
# subpackage, the import system binds ``spladekit.evaluate`` to it and ``__getattr__`` is never asked.
# Importing the function now (spladekit.evaluate.metrics: no numpy, no torch) rebinds the name after the
# subpackage's first load, as the eager imports of this module always did.
from spladekit.evaluate.metrics import EvalConventions, evaluate  # noqa: E402
from spladekit.version import __version__  # noqa: E402,F401

# public name -> the module that defines it (imported when the name is first read)
_EXPORTS = {
    "load_beir": "spladekit.data.beir",
    "read_qrels": "spladekit.data.trec",
    "read_run": "spladekit.data.trec",
    "write_run": "spladekit.data.trec",
    "efficiency_stats": "spladekit.evaluate.efficiency",
    "flops": "spladekit.evaluate.efficiency",
    "compare_runs": "spladekit.evaluate.compare",
    "exact_search": "spladekit.index.exact",
    "Index": "spladekit.index.index",
    "ShardedIndex": "spladekit.index.index",
    "open_index": "spladekit.index.index",
    "export_index": "spladekit.index.export",
    "import_vectors": "spladekit.index.export",
    "load_index": "spladekit.index.index",
    "save_index": "spladekit.index.writer",
    "IndexConfig": "spladekit.index.builder",
    "build_index": "spladekit.index.builder",
    "calibrated_factor": "spladekit.model.calibrate",
    "diagnose_mlm_head": "spladekit.model.calibrate",
    "rescale_mlm_head": "spladekit.model.calibrate",
    "SpladeEncoder": "spladekit.model.encoder",
    "find_mlm_head": "spladekit.model.heads",
    "SpladeModel": "spladekit.model.splade",
    "flops_regularizer": "spladekit.train.regularizers",
    "l1_regularizer": "spladekit.train.regularizers",
    "describe_plan": "spladekit.reproduce",
    "load_reproduce_config": "spladekit.reproduce",
    "run_grid": "spladekit.reproduce",
    "write_report": "spladekit.reproduce",
    "FusionConfig": "spladekit.index.fusion",
    "fuse": "spladekit.index.fusion",
    "make_inference_free": "spladekit.model.inference_free",
    "OnnxSpladeEncoder": "spladekit.model.onnx_export",
    "export_onnx": "spladekit.model.onnx_export",
}

__all__ = ["EvalConventions", "evaluate", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spladekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
