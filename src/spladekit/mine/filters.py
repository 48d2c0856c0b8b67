"""False-negative filters and negative sampling, with the meaning of sentence-transformers'
``mine_hard_negatives`` (``sentence_transformers.util.hard_negatives``, v5-v6; read from its source).

Per query, from its ranked candidates ``[(doc_id, score)]`` (``score``: the teacher's when a teacher
scored them, else the retriever's) and the scores of its positives, in this order:

1. the positives themselves and any document whose text equals the query are removed;
2. ``absolute_margin`` m: removed when ``score + m > min(positive scores)``;
3. ``relative_margin`` r: removed when ``score > p - |p|·r`` with ``p = min(positive scores)``
   (huggingface/sentence-transformers#3819: subtract ``|p|·r``, which is sign-safe);
4. ``max_score``: removed when ``score > max_score``; 5. ``min_score``: removed when ``score < min_score``;
6. the survivors are sorted by score (descending; ties by candidate rank) and only ranks
   ``range_min ≤ rank < range_max`` of them are kept (the window);
7. ``top``: the first ``num_negatives`` of the window; ``random``: ``random.sample(range(max(n,
   len(window))), n)`` (a pick beyond the window is a missing negative, as sentence-transformers'
   ``-inf`` padding), then sorted by score.

Each removal is counted once, by the first rule that removes it (the order above), as
sentence-transformers counts its ``Skipped … due to …`` lines.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ConfigDict, model_validator

from spladekit.settings import Settings

#: the statistics keys, in the order the rules apply
STAT_KEYS = (
    "candidates",
    "positive",
    "query_text",
    "absolute_margin",
    "relative_margin",
    "max_score",
    "min_score",
    "range_min",
    "range_max",
    "not_sampled",
    "kept",
)


class FilterSettings(Settings):
    """The filter and sampling settings (sentence-transformers' names and meaning, see the module
    docstring); a frozen settings record (:class:`spladekit.settings.Settings`).

    Raises:
        ValueError (pydantic's ``ValidationError``): ``num_negatives`` < 1, ``range_min`` < 0, a window
            ``range_max - range_min`` narrower than ``num_negatives``, a ``sampling`` other than
            ``"top"`` or ``"random"``; an unknown field, a non-finite number.
    """

    model_config = ConfigDict(frozen=True)

    num_negatives: int = 3
    range_min: int = 0
    range_max: int | None = None
    max_score: float | None = None
    min_score: float | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = None
    sampling: str = "top"

    @model_validator(mode="after")
    def _consistent(self):
        if self.num_negatives < 1:
            raise ValueError(f"num_negatives must be at least 1, got {self.num_negatives}")
        if self.range_min < 0:
            raise ValueError(f"range_min must be non-negative, got {self.range_min}")
        if self.range_max is not None and self.range_max - self.range_min < self.num_negatives:
            raise ValueError(
                f"range_max={self.range_max} leaves {self.range_max - self.range_min} candidates after "
                f"range_min={self.range_min}, fewer than num_negatives={self.num_negatives}"
            )
        if self.sampling not in ("top", "random"):
            raise ValueError(f"sampling must be 'top' or 'random', got {self.sampling!r}")
        return self


def default_range_max(settings: FilterSettings, max_positives: int, teacher: bool) -> int:
    """sentence-transformers' default ``range_max``: ``range_min + 10·n + max_positives`` when a margin,
    ``max_score`` (or, with a cross-encoder, ``min_score``) may remove candidates, else
    ``range_min + n + max_positives``."""
    filtering = (
        settings.absolute_margin is not None
        or settings.relative_margin is not None
        or settings.max_score is not None
        or (teacher and settings.min_score is not None)
    )
    return settings.range_min + settings.num_negatives * (10 if filtering else 1) + max_positives


def default_depth(range_max: int, max_positives: int) -> int:
    """Candidates taken from the retriever per query: ``range_max + max_positives + 1``
    (sentence-transformers' ``candidate_count``: room for the positives and the query itself)."""
    return range_max + max_positives + 1


@dataclass
class Selection:
    """The negatives chosen for one query and what each rule removed."""

    negatives: list[tuple[str, float]]
    removed: dict[str, int] = field(default_factory=dict)
    complete: bool = True  # num_negatives negatives were found


def select_negatives(
    candidates: Sequence[tuple[str, float]],
    positive_scores: Sequence[float],
    settings: FilterSettings,
    range_max: int,
    excluded: set[str] = frozenset(),
    same_as_query: set[str] = frozenset(),
    rng: random.Random | None = None,
) -> Selection:
    """Apply the rules of the module docstring to one query.

    Args:
        candidates: ``[(doc_id, score)]`` in retriever rank order.
        positive_scores: the scores (same scale as ``candidates``) of the query's positives (at
            least one when a margin is set).
        range_max: the window end (see :func:`default_range_max`).
        excluded: the positives' ids; same_as_query: ids of documents whose text is the query's.
        rng: the generator of ``random`` sampling (``random.sample``).

    Raises:
        ValueError: a margin without positive scores.
    """
    removed = dict.fromkeys(STAT_KEYS[1:-1], 0)
    alive: list[tuple[int, str, float]] = []
    for rank, (doc_id, score) in enumerate(candidates):
        if doc_id in excluded:
            removed["positive"] += 1
        elif doc_id in same_as_query:
            removed["query_text"] += 1
        else:
            alive.append((rank, doc_id, float(score)))
    if settings.absolute_margin is not None or settings.relative_margin is not None:
        if not positive_scores:
            raise ValueError("a margin filter needs the scores of the positives")
        p = min(positive_scores)  # the hardest positive, as sentence-transformers does
        if settings.absolute_margin is not None:
            alive = _drop(alive, lambda s: s + settings.absolute_margin > p, removed, "absolute_margin")
        if settings.relative_margin is not None:
            threshold = p - abs(p) * settings.relative_margin
            alive = _drop(alive, lambda s: s > threshold, removed, "relative_margin")
    if settings.max_score is not None:
        alive = _drop(alive, lambda s: s > settings.max_score, removed, "max_score")
    if settings.min_score is not None:
        alive = _drop(alive, lambda s: s < settings.min_score, removed, "min_score")
    alive.sort(key=lambda item: (-item[2], item[0]))
    removed["range_min"] = min(settings.range_min, len(alive))
    removed["range_max"] = max(0, len(alive) - range_max)
    window = alive[settings.range_min : range_max]
    n = settings.num_negatives
    if settings.sampling == "top":
        chosen = window[:n]
    else:
        picks = (rng or random.Random(0)).sample(range(max(n, len(window))), k=n)
        chosen = sorted((window[i] for i in picks if i < len(window)), key=lambda item: (-item[2], item[0]))
    removed["not_sampled"] = len(window) - len(chosen)
    return Selection([(d, s) for _, d, s in chosen], removed, len(chosen) == n)


def _drop(alive, rule, removed: dict, key: str):
    kept = [item for item in alive if not rule(item[2])]
    removed[key] += len(alive) - len(kept)
    return kept
