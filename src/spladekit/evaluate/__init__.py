"""Stage 6: runs → metrics (quality through ir_measures, efficiency from the vectors)."""

from spladekit.evaluate.efficiency import efficiency_stats, flops
from spladekit.evaluate.metrics import evaluate, evaluate_per_query

__all__ = ["evaluate", "evaluate_per_query", "efficiency_stats", "flops"]
