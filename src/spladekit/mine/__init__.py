"""Hard-negative mining with teacher scores (``spladekit mine``); it searches indexes, so it comes after
:mod:`spladekit.index` in the data flow. See :mod:`spladekit.mine.api`."""

from spladekit.mine.api import MineResult, mine
from spladekit.mine.config import MineConfig
from spladekit.mine.filters import FilterSettings, select_negatives

__all__ = ["MineConfig", "MineResult", "FilterSettings", "mine", "select_negatives"]
