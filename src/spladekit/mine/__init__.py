"""Hard-negative mining with teacher scores (``spladekit mine``); it searches indexes, so it comes after
:mod:`spladekit.index` in the data flow. See :mod:`spladekit.mine.mining`."""

from spladekit.mine.config import MineConfig
from spladekit.mine.filters import FilterSettings, select_negatives
from spladekit.mine.mining import MineResult, mine

__all__ = ["MineConfig", "MineResult", "FilterSettings", "mine", "select_negatives"]
