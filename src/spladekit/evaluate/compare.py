"""Compare two runs on the same qrels: per-measure deltas with paired significance tests.

For each measure, the per-query values of run A and run B over the *judged* queries (a judged
query missing from a run scores 0, see :mod:`spladekit.evaluate.metrics`) give paired differences
``d_q = B_q − A_q``; ``delta = mean(d)``. Two paired tests of H0 "no difference":

- the paired t-test (Student 1908; ``scipy.stats.ttest_rel``), two-sided;
- the paired randomisation (permutation) test (Fisher 1935; Smucker, Allan & Carterette, CIKM 2007,
  "A comparison of statistical significance tests for information retrieval evaluation"): under
  H0 the sign of each ``d_q`` is exchangeable; with ``P`` random sign flips ``s ∈ {±1}^n``,

      p = (1 + #{|mean(s · d)| ≥ |mean(d)|}) / (1 + P),

  two-sided, with a fixed seed so the p-value is reproducible.

When every difference is 0 both p-values are 1.0 (t reported as 0.0); when every difference is the
same non-zero value the t-test p-value is 0.0 (t infinite, reported as None); with fewer than 2
judged queries the t-test gives ``None``. Never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from spladekit.data.trec import Qrels, Run
from spladekit.evaluate.metrics import DEFAULT_MEASURES, EvalConventions, as_conventions, evaluate_per_query

DEFAULT_PERMUTATIONS = 10_000


@dataclass
class MeasureComparison:
    """Run B against run A on one measure, over ``n`` judged queries.

    Attributes:
        measure: the measure name.
        mean_a, mean_b: means over judged queries.
        delta: ``mean_b − mean_a``.
        n: number of paired queries.
        wins, losses, ties: queries where B > A, B < A, B = A.
        t_statistic: paired t statistic (0.0 when all differences are 0, None when undefined).
        p_ttest: two-sided p-value of the paired t-test (None when n < 2).
        p_randomisation: two-sided p-value of the paired randomisation test.
        permutations: number of random sign flips used.
        seed: random seed of the randomisation test.
    """

    measure: str
    mean_a: float
    mean_b: float
    delta: float
    n: int
    wins: int
    losses: int
    ties: int
    t_statistic: float | None
    p_ttest: float | None
    p_randomisation: float
    permutations: int
    seed: int


def paired_ttest(a: np.ndarray, b: np.ndarray) -> tuple[float | None, float | None]:
    """Two-sided paired t-test of ``b − a`` (``scipy.stats.ttest_rel``), without NaN.

    Returns:
        ``(t, p)``; ``(0.0, 1.0)`` when every difference is 0; ``(None, 0.0)`` when every difference
        is the same non-zero value (infinite t); ``(None, None)`` when ``n < 2``.
    """
    from scipy.stats import ttest_rel

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 2:
        return None, None
    diff = b - a
    if np.ptp(diff) <= 1e-12:  # constant up to float rounding (metric values are sums of fractions)
        # Constant differences: zero variance. All zero → no evidence at all (p = 1); a constant
        # non-zero shift → the t statistic is infinite (reported as None, JSON has no infinity), p = 0.
        return (0.0, 1.0) if abs(diff[0]) <= 1e-12 else (None, 0.0)
    result = ttest_rel(b, a)
    return float(result.statistic), float(result.pvalue)


def randomisation_test(
    a: np.ndarray, b: np.ndarray, permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0, block: int = 1000
) -> float:
    """Two-sided paired randomisation test (random sign flips of ``d = b − a``).

    ``p = (1 + #{|mean(s·d)| ≥ |mean(d)|}) / (1 + permutations)`` (the +1 counts the observed
    assignment, so p > 0). Memory: ``block × n`` float64 at a time.

    Raises:
        ValueError: ``permutations`` < 1 or arrays of different lengths.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values of different lengths: {a.shape} vs {b.shape}")
    if permutations < 1:
        raise ValueError(f"permutations must be ≥ 1, got {permutations}")
    diff = b - a
    if diff.size == 0 or not np.any(diff):
        return 1.0
    observed = abs(diff.mean())
    # A small tolerance so that sign patterns giving the same |mean| up to rounding count as ≥.
    threshold = observed - 1e-12 * max(1.0, observed)
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < permutations:
        size = min(block, permutations - done)
        signs = rng.integers(0, 2, size=(size, diff.size), dtype=np.int8) * 2 - 1
        extreme += int(np.count_nonzero(np.abs(signs @ diff) / diff.size >= threshold))
        done += size
    return (1 + extreme) / (1 + permutations)


def compare_runs(
    run_a: Run,
    run_b: Run,
    qrels: Qrels,
    measures: Sequence[str] = DEFAULT_MEASURES,
    conventions: EvalConventions | str | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> tuple[list[MeasureComparison], dict[str, dict[str, float]]]:
    """Compare ``run_b`` against ``run_a`` on every measure.

    Returns:
        ``(comparisons, deltas)``: one :class:`MeasureComparison` per measure, and the per-query
        differences ``{measure: {qid: B − A}}`` over the judged queries (for the delta plot).

    Warns:
        UserWarning: the runs hold results for different numbers of judged queries (:func:`judged_coverage`).

    Raises:
        ValueError: empty qrels or an unknown measure.
    """
    if not qrels:
        raise ValueError("qrels are empty: nothing to compare")
    conventions = as_conventions(conventions)
    covered = {name: judged_coverage(run, qrels) for name, run in (("A", run_a), ("B", run_b))}
    if covered["A"] != covered["B"]:
        import warnings

        warnings.warn(
            f"the runs answer different judged queries (A {covered['A']}, B {covered['B']} of {len(qrels)}): a judged "
            "query missing from a run counts 0 for it, so the deltas and tests measure coverage as well as ranking",
            stacklevel=2,
        )
    values_a = evaluate_per_query(run_a, qrels, measures, conventions)
    values_b = evaluate_per_query(run_b, qrels, measures, conventions)
    qids = list(qrels)
    comparisons, deltas = [], {}
    for name in measures:
        a = np.array([values_a[name][q] for q in qids])
        b = np.array([values_b[name][q] for q in qids])
        comparisons.append(compare_values(name, a, b, permutations, seed))
        deltas[name] = {q: float(d) for q, d in zip(qids, b - a)}
    return comparisons, deltas


def judged_coverage(run: Run, qrels: Qrels) -> int:
    """Judged queries (ids of ``qrels``) for which ``run`` holds at least one document."""
    return sum(1 for qid in qrels if run.get(qid))


def compare_values(
    measure: str, a: Sequence[float], b: Sequence[float], permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0
) -> MeasureComparison:
    """B against A on paired per-query values ``a[i]``, ``b[i]`` of one measure (same query at each
    ``i``): the means, wins/losses/ties and both paired tests of the module docstring.

    Raises:
        ValueError: no values, or ``a`` and ``b`` of different lengths.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need paired values of the same non-zero length, got {a.shape} and {b.shape}")
    t, p_t = paired_ttest(a, b)
    diff = b - a
    return MeasureComparison(
        measure=measure,
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        delta=float(diff.mean()),
        n=int(a.size),
        wins=int((diff > 0).sum()),
        losses=int((diff < 0).sum()),
        ties=int((diff == 0).sum()),
        t_statistic=t,
        p_ttest=p_t,
        p_randomisation=randomisation_test(a, b, permutations, seed),
        permutations=permutations,
        seed=seed,
    )


def comparison_table(comparisons: Sequence[MeasureComparison], name_a: str = "A", name_b: str = "B") -> str:
    """A Markdown table of :func:`compare_runs` output."""
    lines = [
        f"| measure | {name_a} | {name_b} | Δ (B−A) | wins/losses/ties | t | p (t-test) | p (randomisation) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        t = "-" if c.t_statistic is None else f"{c.t_statistic:.3f}"
        p = "-" if c.p_ttest is None else f"{c.p_ttest:.4f}"
        lines.append(
            f"| {c.measure} | {c.mean_a:.4f} | {c.mean_b:.4f} | {c.delta:+.4f} | {c.wins}/{c.losses}/{c.ties} "
            f"| {t} | {p} | {c.p_randomisation:.4f} |"
        )
    return "\n".join(lines)


def comparisons_to_dict(comparisons: Sequence[MeasureComparison]) -> dict[str, dict]:
    """``{measure: fields}`` for JSON output."""
    return {c.measure: asdict(c) for c in comparisons}
