"""Stage 7: the paper's comparison as one grid (backbone × head treatment × seed).

:func:`run_grid` runs (and resumes) the cells, :func:`write_report` writes tables and plots,
:func:`describe_plan` is the dry run. ``spladekit reproduce CONFIG.yaml`` on the command line.
"""

from spladekit.reproduce.config import ReproduceConfig, load_reproduce_config
from spladekit.reproduce.grid import Cell, GridOutcome, StaleCellError, cell_status, plan_grid, run_grid
from spladekit.reproduce.plan import describe_plan
from spladekit.reproduce.report import write_report

__all__ = [
    "ReproduceConfig",
    "load_reproduce_config",
    "Cell",
    "GridOutcome",
    "StaleCellError",
    "cell_status",
    "plan_grid",
    "run_grid",
    "describe_plan",
    "write_report",
]
