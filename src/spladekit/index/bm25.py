"""BM25 baseline through ``bm25s`` (Lù, 2024), with English stop words and the Snowball stemmer.

BM25 (Robertson & Zaragoza, 2009) with ``k1 = 0.9, b = 0.4`` (Anserini's defaults, which BEIR's
BM25 numbers use).
"""

from __future__ import annotations

from collections.abc import Sequence


def _stemmer():
    try:
        import Stemmer

        return Stemmer.Stemmer("english")
    except ImportError:  # pragma: no cover - PyStemmer is a dependency
        return None


def bm25_search(
    query_texts: Sequence[str], doc_texts: Sequence[str], k: int = 1000, k1: float = 0.9, b: float = 0.4
) -> list[list[tuple[int, float]]]:
    """Rank ``doc_texts`` for each query with BM25.

    Returns:
        Per query, ``(doc_index, score)`` pairs, score desc then index asc, scores > 0 only.
    """
    import bm25s
    import numpy as np

    stemmer = _stemmer()
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(
        bm25s.tokenize(list(doc_texts), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    query_tokens = bm25s.tokenize(
        list(query_texts), stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
    )
    results = []
    for tokens in query_tokens:
        scores = retriever.get_scores(tokens) if tokens else np.zeros(len(doc_texts))
        positive = np.flatnonzero(scores > 0)
        order = np.lexsort((positive, -scores[positive]))[:k]
        results.append([(int(positive[i]), float(scores[positive[i]])) for i in order])
    return results
