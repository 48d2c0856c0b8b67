"""Stage 5: sparse vectors → posting lists → ranked results (exact search, BM25 baseline)."""

from spladekit.index.exact import exact_search, results_to_run

__all__ = ["exact_search", "results_to_run"]
