"""Numbers read from files, by one check: every score, grade or margin of an outside file is a finite
float (:func:`finite_number`), whatever type its reader gave (JSON's ``int``/``float``, a pickle's
numpy scalars, a dataset's Arrow numbers).
"""

from __future__ import annotations

import math
import numbers

from spladekit.errors import DataFormatError


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
        shown = f"an integer of {len(str(value))} digits" if isinstance(value, int) and len(str(value)) >= 30 else repr(value)
        raise DataFormatError(path, f"expected a finite number, got {shown}", line=line, field=field)
    return number
