"""Pickles of plain data read without running code: the one unpickler for files from outside.

A pickle is a program: its ``GLOBAL``/``STACK_GLOBAL`` opcodes import any module attribute and its
``REDUCE`` opcode calls it, so ``pickle.load`` of a downloaded file runs whatever the file names
(``os.system`` included). :class:`PlainUnpickler` admits only the globals that plain data needs, by
name, before anything is imported: the containers that older protocols build by call (``set``,
``frozenset``, ``collections.OrderedDict``, ``collections.defaultdict``), the ``bytes`` of protocols
0–2 (``_codecs.encode(text, "latin1")``), and numpy's numeric scalars (``numpy.dtype`` of a number
kind with ``numpy.core.multiarray.scalar``, as ``np.float32(0.5)`` pickles). Everything else (an
object, a function, a class, a missing module) is refused naming the global, and nothing of it is
imported or called. Dicts, lists, tuples, strings, numbers, booleans and ``None`` need no global.

The standard library documents this pattern (``pickle`` docs, "Restricting Globals").
"""

from __future__ import annotations

import gzip
import pickle
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

from spladekit.errors import DataFormatError

#: numpy dtype codes of numbers (bool, signed and unsigned integers, floats) a score may be stored in
NUMERIC_DTYPES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"})


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle names a global outside :class:`PlainUnpickler`'s list (``module.name`` in ``args[0]``)."""


def _latin1_bytes(text, encoding="latin1"):
    """``_codecs.encode`` as protocols 0–2 use it for ``bytes``: only ``(str, "latin1")``."""
    if not isinstance(text, str) or encoding != "latin1":
        raise RefusedGlobal("_codecs.encode (other than a str in latin1)")
    return text.encode("latin1")


def _numeric_dtype(code, align=False, copy=True):
    """``numpy.dtype`` of a number kind only (the dtype of a pickled numpy scalar)."""
    import numpy as np

    if (
        not isinstance(code, str)
        or code not in NUMERIC_DTYPES
        or not isinstance(align, bool)
        or not isinstance(copy, bool)
    ):
        raise RefusedGlobal(f"numpy.dtype({code!r}) (only the dtypes of numbers are read)")
    return np.dtype(code, align, copy)


def _numeric_scalar(dtype, data=None):
    """``numpy.core.multiarray.scalar`` for a number dtype and its raw bytes only."""
    import numpy as np

    if (
        not isinstance(dtype, np.dtype)
        or dtype.kind not in "biuf"
        or dtype.names is not None
        or dtype.hasobject
        or not isinstance(data, bytes)
        or len(data) != dtype.itemsize
    ):
        raise RefusedGlobal(f"numpy scalar of dtype {dtype!r} (only numbers are read)")
    return np.frombuffer(data, dtype=dtype)[0]


ADMITTED = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "dict"): dict,
    ("builtins", "list"): list,  # a defaultdict's factory
    ("__builtin__", "set"): set,
    ("__builtin__", "frozenset"): frozenset,  # protocol 2 from Python 2
    ("__builtin__", "dict"): dict,
    ("__builtin__", "list"): list,
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "defaultdict"): defaultdict,
    ("_codecs", "encode"): _latin1_bytes,
    ("numpy", "dtype"): _numeric_dtype,
    ("numpy.core.multiarray", "scalar"): _numeric_scalar,
    ("numpy._core.multiarray", "scalar"): _numeric_scalar,
}


class PlainUnpickler(pickle.Unpickler):
    """An unpickler of plain data: ``find_class`` returns only :data:`ADMITTED` globals (see the module)."""

    def find_class(self, module: str, name: str):
        found = ADMITTED.get((module, name))
        if found is None:
            raise RefusedGlobal(f"{module}.{name}")
        return found


def load_plain_pickle(path: str | Path) -> Any:
    """The data of the (gzipped, when the name ends in ``.gz``) pickle ``path``, read by :class:`PlainUnpickler`.

    Raises:
        DataFormatError: missing; the pickle names a global that is not plain data (naming it: the
            file could run code, and nothing of it ran); or the file is not a readable pickle (cut,
            corrupt, not gzip).
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, "missing: pickle not found")
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            return PlainUnpickler(handle).load()
    except RefusedGlobal as exc:
        raise DataFormatError(
            path,
            f"refused: the pickle names the global {exc.args[0]}, which is not plain data "
            "(a pickle of {id: {id: number}} needs none; loading it could run code, nothing of it ran)",
        ) from None
    except (MemoryError, RecursionError) as exc:
        raise DataFormatError(path, f"not a readable pickle ({type(exc).__name__})") from None
    except Exception as exc:  # UnpicklingError, EOFError, gzip's OSError, a bad opcode's ValueError/KeyError/TypeError
        raise DataFormatError(path, f"not a readable pickle ({type(exc).__name__}: {exc})") from None
