"""Stage 5: sparse vectors → index folders → ranked results (exact search, Seismic, BM25 baseline),
and exports to serving engines (:mod:`spladekit.index.formats`)."""

from spladekit.index.exact import exact_search, results_to_run
from spladekit.index.index import Index, ShardedIndex, load_index, open_index
from spladekit.index.layout import load_metadata, load_vocabulary
from spladekit.index.merge import merge_shards
from spladekit.index.writer import save_index

__all__ = [
    "Index",
    "ShardedIndex",
    "open_index",
    "exact_search",
    "results_to_run",
    "save_index",
    "load_index",
    "load_metadata",
    "load_vocabulary",
    "merge_shards",
]
