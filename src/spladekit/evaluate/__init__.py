"""Stage 6: runs → metrics (quality through ir_measures, efficiency from the vectors)."""

from spladekit.evaluate.efficiency import efficiency_stats, flops
from spladekit.evaluate.compare import compare_runs
from spladekit.evaluate.metrics import EvalConventions, evaluate, evaluate_per_query

__all__ = ["EvalConventions", "evaluate", "evaluate_per_query", "compare_runs", "efficiency_stats", "flops"]
