"""Pruning SPLADE vectors at encoding: a typed rule that keeps each vector's heaviest terms.

A :class:`PruningRule` acts on one row (one text's vector) at a time, on its stored entries (the
active terms, weights > 0), and never changes a kept weight; the other rows of the matrix do not
change a row's result. The four kinds (OpenSearch's names of the same rules in brackets):

- ``top_k`` (value ``k``, an integer ≥ 1): the ``k`` largest weights; sentence-transformers'
  ``max_active_dims`` (``top_k``).
- ``mass`` (value ``α``, 0 < α ≤ 1): the fewest largest weights whose sum reaches ``α`` of the
  row's L1 mass, ``min m : S_m ≥ α·S_n`` with ``S_m`` the sum of the ``m`` largest weights
  (``alpha_mass``, see below).
- ``max_ratio`` (value ``r``, 0 ≤ r ≤ 1): the weights ``w ≥ r · max(w)`` (``max_ratio``).
- ``threshold`` (value ``t`` ≥ 0): the weights ``w ≥ t`` (``abs_value``).

Order and ties: a row's terms are ranked by weight, descending, then by term id, ascending: among
equal weights the lower vocabulary id comes first and is kept first. This decides ``top_k`` and
``mass`` at their boundary; ``max_ratio`` and ``threshold`` compare each weight on its own, so equal
weights are kept or dropped together.

Arithmetic: ``mass`` sums the float32 weights in float64, one after the other in that order, row by
row; the row's mass ``S_n`` is the last of those sums (so ``α = 1`` keeps every term, by
construction). ``max_ratio`` compares ``w ≥ r·max(w)`` and ``threshold`` ``w ≥ t`` in float64.

OpenSearch's ``alpha_mass`` keeps the longest prefix whose sum stays ``≤ α·S_n``: it empties a row
whose heaviest term alone exceeds ``α`` of the mass. The ``mass`` rule here keeps the shortest prefix
that reaches ``α·S_n``: at most one term more than OpenSearch's, and a non-empty row stays non-empty.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import ValidationError, model_validator

from spladekit.settings import Settings

KINDS = ("top_k", "mass", "max_ratio", "threshold")
#: the range of each kind's value, for messages
RANGES = {
    "top_k": "an integer >= 1",
    "mass": "a share 0 < alpha <= 1",
    "max_ratio": "a share 0 <= r <= 1",
    "threshold": "a weight >= 0",
}


class PruningRule(Settings):
    """Which terms of each vector to keep (module docstring); recorded as ``{"kind": ..., "value": ...}``.

    Attributes:
        kind: ``top_k``, ``mass``, ``max_ratio`` or ``threshold``.
        value: ``k`` (an integer ≥ 1), ``α`` (0 < α ≤ 1), ``r`` (0 ≤ r ≤ 1) or ``t`` (≥ 0, finite).

    Example::

        rule = PruningRule(kind="mass", value=0.9)
        pruned = prune(vectors, rule)          # vectors: float32 scipy.sparse.csr_matrix
        PruningRule.parse("top_k=64")          # the command-line form
    """

    kind: Literal["top_k", "mass", "max_ratio", "threshold"]
    value: int | float

    @model_validator(mode="after")
    def _check_value(self) -> PruningRule:
        v = self.value
        try:
            float(v)  # an integer past float range (a 400-digit JSON number) is no weight and no count
        except OverflowError:
            raise ValueError(
                f"a {self.kind} rule's value must be {RANGES[self.kind]}, got an integer of {len(str(v))} digits"
            ) from None
        ok = {
            "top_k": lambda: float(v).is_integer() and v >= 1,
            "mass": lambda: 0 < v <= 1,
            "max_ratio": lambda: 0 <= v <= 1,
            "threshold": lambda: v >= 0,
        }[self.kind]()
        if not ok:
            raise ValueError(f"a {self.kind} rule's value must be {RANGES[self.kind]}, got {v!r}")
        if self.kind == "top_k" and not isinstance(v, int):
            object.__setattr__(self, "value", int(v))  # 64.0 -> 64 (no re-validation loop)
        return self

    @classmethod
    def parse(cls, text: str) -> PruningRule:
        """The rule written ``KIND=VALUE`` (``top_k=64``, ``mass=0.9``, ``max_ratio=0.1``, ``threshold=0.05``).

        Raises:
            ValueError: not that form, an unknown kind, or a value out of its range (naming both).
        """
        kind, sep, value = str(text).partition("=")
        kind = kind.strip()
        if not sep or kind not in KINDS:
            raise ValueError(
                f"pruning rule {text!r}: expected KIND=VALUE with KIND one of {', '.join(KINDS)}, "
                "e.g. top_k=64, mass=0.9, max_ratio=0.1, threshold=0.05"
            )
        try:
            number: int | float = (
                int(value) if kind == "top_k" and value.strip().lstrip("+").isdigit() else float(value)
            )
        except ValueError:
            raise ValueError(f"pruning rule {text!r}: {value!r} is not a number") from None
        return _validated({"kind": kind, "value": number}, repr(text))

    def record(self) -> dict:
        """``{"kind": ..., "value": ...}``: what ``spladekit.json`` and ``index.json`` hold."""
        return {"kind": self.kind, "value": self.value}

    def __str__(self) -> str:
        return f"{self.kind}={self.value}"


def of_record(rule) -> PruningRule | None:
    """A :class:`PruningRule` from any of its forms: None, a rule, its record (a dict) or its ``KIND=VALUE`` text.

    Raises:
        ValueError: a dict or text that is not a valid rule (one line: kind, value and range);
            a value of another type.
    """
    if rule is None or isinstance(rule, PruningRule):
        return rule
    if isinstance(rule, str):
        return PruningRule.parse(rule)
    if not isinstance(rule, dict):
        raise ValueError(
            f"a pruning rule is a PruningRule, a {{kind, value}} mapping or KIND=VALUE text, got {type(rule).__name__}"
        )
    return _validated(rule, repr(rule))


def _validated(record: dict, shown: str) -> PruningRule:
    """``PruningRule`` of ``record``, its first problem a one-line ``ValueError`` naming ``shown``."""
    try:
        return PruningRule.model_validate(record)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = str(error["loc"][0]) if error["loc"] else ""  # "value", not pydantic's "value.int" of the union
        raise ValueError(
            f"pruning rule {shown}: {where + ': ' if where else ''}{error['msg'].removeprefix('Value error, ')}"
        ) from None


def record_of(rule) -> dict | None:
    """The record (``{"kind", "value"}``) of a rule in any form :func:`of_record` takes; None for None.

    Raises:
        ValueError: see :func:`of_record`.
    """
    rule = of_record(rule)
    return None if rule is None else rule.record()


def record_problem(value) -> str | None:
    """What a stored rule (a ``spladekit.json`` or ``index.json`` value) must be, or None when ``value``
    is null or a valid record (the reader's ``DataFormatError`` names the file and field)."""
    shape = 'null or a pruning rule {"kind": ..., "value": ...}'
    if value is not None and not isinstance(value, dict):
        return shape
    try:
        of_record(value)
    except ValueError as exc:
        return f"{shape} ({exc})"
    return None


def prune(matrix: sp.spmatrix, rule) -> sp.csr_matrix:
    """The rows of ``matrix`` with only the terms ``rule`` keeps (module docstring).

    Args:
        matrix: ``[N, V]`` sparse vectors (any scipy sparse format; a CSR matrix is read as it is).
        rule: a :class:`PruningRule` in any form :func:`of_record` takes; None returns ``matrix`` as CSR.

    Returns:
        ``[N, V]`` CSR matrix of ``matrix``'s dtype, column ids ascending in each row; explicit zeros
        are dropped (they are no active term).

    Raises:
        ValueError: the rule is not valid, or ``matrix`` holds a negative, NaN or infinite weight
            (naming the row and column).
    """
    rule = of_record(rule)
    matrix = sp.csr_matrix(matrix)
    if rule is None:
        return matrix
    matrix = matrix.copy()
    matrix.sum_duplicates()  # canonical: one entry per term, ids ascending
    _check_weights(matrix)
    matrix.eliminate_zeros()
    keep = _kept(matrix, rule)
    kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))  # entries kept before each position
    indptr = kept_before[matrix.indptr].astype(matrix.indptr.dtype)
    return sp.csr_matrix((matrix.data[keep], matrix.indices[keep], indptr), shape=matrix.shape)


def _check_weights(matrix: sp.csr_matrix) -> None:
    bad = np.flatnonzero(~np.isfinite(matrix.data) | (matrix.data < 0))
    if bad.size:
        row = int(np.searchsorted(matrix.indptr, bad[0], side="right") - 1)
        raise ValueError(
            f"a pruning rule ranks SPLADE weights (finite, >= 0); row {row} has "
            f"{float(matrix.data[bad[0]])!r} at column {int(matrix.indices[bad[0]])}"
        )


def _kept(matrix: sp.csr_matrix, rule: PruningRule) -> np.ndarray:
    """``[nnz]`` bool: which stored entries (all > 0) the rule keeps."""
    data = matrix.data.astype(np.float64)
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    if rule.kind == "threshold":
        return data >= float(rule.value)
    if rule.kind == "max_ratio":
        if not matrix.nnz:
            return np.zeros(0, dtype=bool)
        starts = matrix.indptr[:-1][np.diff(matrix.indptr) > 0]
        row_max = np.zeros(matrix.shape[0])
        row_max[rows[starts]] = np.maximum.reduceat(data, starts)
        return data >= float(rule.value) * row_max[rows]
    order = np.lexsort((matrix.indices, -data, rows))  # by row, weight descending, then id ascending
    keep = np.zeros(matrix.nnz, dtype=bool)
    if rule.kind == "top_k":
        rank = np.arange(matrix.nnz) - matrix.indptr[rows[order]]  # rank of each sorted entry in its row
        keep[order[rank < rule.value]] = True
        return keep
    if rule.value == 1:  # every term (module docstring)
        keep[:] = True
        return keep
    for r in np.flatnonzero(np.diff(matrix.indptr)):
        chosen = order[matrix.indptr[r] : matrix.indptr[r + 1]]
        running = np.cumsum(data[chosen])  # float64, one addition after the other
        before = np.concatenate(([0.0], running[:-1]))  # the sum of the heavier terms
        keep[chosen[before < float(rule.value) * running[-1]]] = True
    return keep
