"""Stage 6: runs → metrics (quality through ir_measures, efficiency from the vectors).

The names are imported on first use (PEP 562 ``__getattr__``): ``spladekit.evaluate.metrics`` alone
needs neither numpy nor scipy, and the command line's ``--help`` reads it.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "efficiency_stats": "spladekit.evaluate.efficiency",
    "flops": "spladekit.evaluate.efficiency",
    "compare_runs": "spladekit.evaluate.compare",
    "EvalConventions": "spladekit.evaluate.metrics",
    "evaluate": "spladekit.evaluate.metrics",
    "evaluate_per_query": "spladekit.evaluate.metrics",
}

__all__ = ["EvalConventions", "evaluate", "evaluate_per_query", "compare_runs", "efficiency_stats", "flops"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spladekit.evaluate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
