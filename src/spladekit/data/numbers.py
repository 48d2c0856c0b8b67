"""Numbers read from files and given as options, by one check each: every score, grade or margin of an
outside file is a finite float (:func:`finite_number`), whatever type its reader gave (JSON's
``int``/``float``, a pickle's numpy scalars, a dataset's Arrow numbers); every integer setting is an
integer in its range (:func:`check_int`); float32's largest value is :data:`FLOAT32_MAX`.
"""

from __future__ import annotations

import math
import numbers

from spladekit.errors import DataFormatError

FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32, ``float(numpy.finfo(numpy.float32).max)`` (written out: this module
imports no numpy); a weight beyond it becomes infinite in float32."""


def finite_number(value, path, field: str, line: int | None = None) -> float:
    """``value`` of a score or qrel file as a float: the one check of every number read from outside.

    Numbers are Python's ``int``/``float`` and numpy's number scalars (``np.float32`` scores read like
    ``np.float64`` ones).

    Raises:
        DataFormatError: naming ``path``, ``line`` and ``field``: a bool, a non-number, NaN, Infinity,
            or a number beyond float range (``1e400`` is read as Infinity; a 400-digit integer overflows).
    """
    number = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except (OverflowError, TypeError, ValueError):
            pass
    if number is None or not math.isfinite(number):
        shown = (
            f"an integer of {len(str(value))} digits"
            if isinstance(value, int) and len(str(value)) >= 30
            else repr(value)
        )
        raise DataFormatError(path, f"expected a finite number, got {shown}", line=line, field=field)
    return number


def check_int(value, name: str, low: int, high: int | None = None, note: str = ""):
    """``value`` when it is an integer (a bool is not) in ``[low, high]``.

    Args:
        value: the value to check.
        name: what the message calls it (a field, ``seismic n_postings``, ``--doc-top-k``).
        low: the least value allowed.
        high: the largest value allowed, or None (no upper bound).
        note: text after the range in the message (``" (special tokens included)"``).

    Raises:
        ValueError: ``"{name} must be an integer ≥ {low}{note}, got {value!r}"``, or ``in [low, high]``
            in place of ``≥ {low}`` when ``high`` is given.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        within = f"≥ {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {within}{note}, got {value!r}")
    return value
