"""The record every training-data reader gives: :class:`TrainingExample` (a query, its positive documents,
its hard negatives, optional teacher scores).

A module of its own so that the readers (:mod:`spladekit.train.data`, :mod:`spladekit.train.hf`) and the
training loop share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrainingExample:
    """One training query.

    Attributes:
        qid: query id.
        query: query text.
        positives: ``[(doc_id, text)]`` relevant documents (at least one).
        negatives: ``[(doc_id, text)]`` hard negatives (may be empty).
        teacher: ``{doc_id: teacher score}`` for distillation, or None.
    """

    qid: str
    query: str
    positives: list[tuple[str, str]]
    negatives: list[tuple[str, str]] = field(default_factory=list)
    teacher: dict[str, float] | None = None
