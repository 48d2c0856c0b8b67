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


def training_documents(examples) -> list[str]:
    """The texts of the distinct documents (by id, first text kept) of ``examples``, positives and hard
    negatives, in order of first appearance: what the IDF of an inference-free query side, IDF-aware
    FLOPS and DF-FLOPS' sample are computed from."""
    documents: dict[str, str] = {}
    for example in examples:
        for doc_id, text in list(example.positives) + list(example.negatives):
            documents.setdefault(doc_id, text)
    return list(documents.values())
