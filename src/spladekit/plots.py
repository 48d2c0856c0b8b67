"""Every PNG spladekit draws, in one place (matplotlib, Agg backend, no screen needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path: str | Path) -> Path:
    from spladekit.io import atomic_write

    path = Path(path)
    with atomic_write(path, "wb", encoding=None) as handle:
        fig.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def per_query_comparison(
    values: Mapping[str, Mapping[str, float]], measure: str, path: str | Path, title: str = ""
) -> Path:
    """Per-query values of several systems, queries sorted by the first system's value.

    Args:
        values: ``{system: {qid: value}}`` (same qids for every system).
        measure: axis label, e.g. ``"nDCG@10"``.
    """
    systems = list(values)
    first = values[systems[0]]
    qids = sorted(first, key=lambda q: (-first[q], q))
    fig, ax = plt.subplots(figsize=(9, 4))
    for system in systems:
        ax.plot(range(len(qids)), [values[system].get(q, 0.0) for q in qids], ".", ms=4, label=system, alpha=0.8)
    ax.set_xlabel(f"query (sorted by {systems[0]})")
    ax.set_ylabel(measure)
    ax.set_title(title or f"per-query {measure}")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)
