"""spladekit: any masked-language-model encoder as a stable SPLADE sparse retriever.

Data flow (one module per stage)::

    data (readers, resolve) → model (heads, pooling, encoder) → index (exact search, BM25)
    → evaluate (metrics, efficiency) ;  pipeline strings them together ; cli calls pipeline.
"""

from spladekit.data.beir import load_beir
from spladekit.data.trec import read_qrels, read_run, write_run
from spladekit.evaluate.efficiency import efficiency_stats, flops
from spladekit.evaluate.compare import compare_runs
from spladekit.evaluate.metrics import EvalConventions, evaluate
from spladekit.index.exact import exact_search
from spladekit.index.index import Index, ShardedIndex, open_index
from spladekit.index.export import export_index, import_vectors
from spladekit.index.io import load_index, save_index
from spladekit.index.shard import IndexConfig, build_index
from spladekit.model.calibrate import calibrated_factor, diagnose_mlm_head, rescale_mlm_head
from spladekit.model.encoder import SpladeEncoder
from spladekit.model.heads import find_mlm_head
from spladekit.model.splade import SpladeModel
from spladekit.train.regularizers import flops_regularizer, l1_regularizer
from spladekit.reproduce import describe_plan, load_reproduce_config, run_grid, write_report
from spladekit.index.fusion import FusionConfig, fuse
from spladekit.model.inference_free import make_inference_free
from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx

__version__ = "0.1.0"

__all__ = [
    "SpladeEncoder",
    "SpladeModel",
    "find_mlm_head",
    "diagnose_mlm_head",
    "rescale_mlm_head",
    "calibrated_factor",
    "load_beir",
    "read_qrels",
    "read_run",
    "write_run",
    "exact_search",
    "Index",
    "ShardedIndex",
    "open_index",
    "IndexConfig",
    "build_index",
    "save_index",
    "load_index",
    "export_index",
    "import_vectors",
    "evaluate",
    "EvalConventions",
    "compare_runs",
    "efficiency_stats",
    "flops",
    "flops_regularizer",
    "l1_regularizer",
    "load_reproduce_config",
    "run_grid",
    "write_report",
    "describe_plan",
    "fuse",
    "FusionConfig",
    "make_inference_free",
    "export_onnx",
    "OnnxSpladeEncoder",
]
