"""Comparing two runs: deltas, the paired t-test against its formula, the randomisation test against
exact enumeration, degenerate cases without NaN, the CLI and the delta plot."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from spladekit.data.trec import write_run
from spladekit.evaluate.compare import compare_runs, paired_ttest, randomisation_test
from spladekit.evaluate.metrics import evaluate


def test_ttest_matches_formula():
    a = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3])
    b = np.array([0.4, 0.5, 0.3, 0.8, 0.7, 0.6])
    d = b - a
    t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    p = 2 * stats.t.sf(abs(t), df=d.size - 1)
    got_t, got_p = paired_ttest(a, b)
    assert got_t == pytest.approx(t) and got_p == pytest.approx(p)


def test_randomisation_matches_exact_enumeration():
    d = np.array([0.3, -0.1, 0.25, 0.4, 0.05, -0.2, 0.15])
    a = np.zeros_like(d)
    observed = abs(d.mean())
    patterns = list(itertools.product([-1, 1], repeat=d.size))
    exact = sum(abs(np.dot(s, d) / d.size) >= observed - 1e-12 for s in patterns) / len(patterns)
    p = randomisation_test(a, d, permutations=20_000, seed=1)
    assert p == pytest.approx(exact, abs=0.01)  # Monte Carlo s.e. ≈ sqrt(p(1-p)/20000) < 0.004
    assert randomisation_test(a, d, permutations=2000, seed=5) == randomisation_test(a, d, permutations=2000, seed=5)


def test_degenerate_cases_give_no_nan():
    same = np.array([0.1, 0.5, 0.7])
    assert paired_ttest(same, same) == (0.0, 1.0)
    assert randomisation_test(same, same, permutations=100) == 1.0
    assert paired_ttest(same, same + 0.1) == (None, 0.0)  # constant shift: infinite t
    assert paired_ttest(np.array([0.1]), np.array([0.3])) == (None, None)
    assert 0 < randomisation_test(np.array([0.1]), np.array([0.3]), permutations=100) <= 1
    with pytest.raises(ValueError, match="permutations"):
        randomisation_test(same, same, permutations=0)


def _runs():
    qrels = {f"q{i}": {"rel": 1, "other": 0} for i in range(12)}
    run_a, run_b = {}, {}
    for i in range(12):
        # A finds the relevant document at rank 1 + i % 3; B at rank 1 on most queries, missing on q11
        run_a[f"q{i}"] = {f"x{j}": 10.0 - j for j in range(i % 3)} | {"rel": 5.0}
        run_b[f"q{i}"] = {"rel": 9.0, "x0": 1.0}
    del run_b["q11"]
    return qrels, run_a, run_b


def test_compare_runs_deltas_equal_the_difference_of_evaluations():
    qrels, run_a, run_b = _runs()
    measures = ["MRR@10", "nDCG@10"]
    with pytest.warns(UserWarning, match=r"different judged queries \(A 12, B 11 of 12\)"):  # q11 is missing in B
        comparisons, deltas = compare_runs(run_a, run_b, qrels, measures, permutations=2000, seed=0)
    ea, eb = evaluate(run_a, qrels, measures), evaluate(run_b, qrels, measures)
    for c in comparisons:
        assert c.mean_a == pytest.approx(ea[c.measure]) and c.mean_b == pytest.approx(eb[c.measure])
        assert c.delta == pytest.approx(eb[c.measure] - ea[c.measure])
        assert sum(deltas[c.measure].values()) / len(qrels) == pytest.approx(c.delta)
        assert c.n == 12 and c.wins + c.losses + c.ties == 12
    mrr = comparisons[0]
    assert deltas["MRR@10"]["q11"] == pytest.approx(-1 / 3)  # q11: A at rank 3, missing in B (counts 0)
    assert (mrr.wins, mrr.losses, mrr.ties) == (7, 1, 4)
    t, p = paired_ttest([0 for _ in range(12)], list(deltas["MRR@10"].values()))
    assert mrr.t_statistic == pytest.approx(t) and mrr.p_ttest == pytest.approx(p)
    assert 0 < mrr.p_randomisation <= 1


def test_cli_compare_writes_table_json_and_plots(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    qrels, run_a, run_b = _runs()
    qrels_path = tmp_path / "qrels.tsv"
    qrels_path.write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()),
        encoding="utf-8",
    )
    write_run(run_a, tmp_path / "a.trec")
    write_run(run_b, tmp_path / "b.trec")
    out = tmp_path / "cmp"
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(tmp_path / "a.trec"),
            str(tmp_path / "b.trec"),
            "--qrels",
            str(qrels_path),
            "-m",
            "MRR@10",
            "-m",
            "R@1",
            "--permutations",
            "500",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| MRR@10 |" in result.output and "p (randomisation)" in result.output
    saved = json.loads((out / "compare.json").read_text())
    assert saved["measures"]["R@1"]["delta"] == pytest.approx((11 - 4) / 12)  # B: 11 at rank 1; A: 4 (i % 3 == 0)
    assert saved["judged_queries"] == 12 and saved["judged_queries_answered"] == {"a": 12, "b": 11}
    assert (
        saved["measures"]["MRR@10"]["permutations"] == 500 and saved["conventions"]["name"] == "beir"
    )  # from the qrels path
    deltas = json.loads((out / "per_query_delta.json").read_text())
    assert set(deltas["R@1"]) == set(qrels)
    for name in ("delta_MRR@10.png", "delta_R@1.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = CliRunner().invoke(
        app,
        [
            "compare",
            str(tmp_path / "a.trec"),
            str(tmp_path / "nope.trec"),
            "--qrels",
            str(qrels_path),
            "--out",
            str(out),
        ],
    )
    assert missing.exit_code == 2 and "nope.trec" in missing.output


def test_run_labels_tell_runs_of_the_same_file_name_apart(tmp_path):
    from pathlib import Path

    from spladekit.cli.evaluate import run_labels

    # the demo writes before/run.trec and after/run.trec: the table showed "run.trec" twice
    assert run_labels(Path("out/demo/before/run.trec"), Path("out/demo/after/run.trec")) == (
        "before/run.trec",
        "after/run.trec",
    )
    assert run_labels(Path("a.trec"), Path("x/b.trec")) == ("a.trec", "b.trec")
    assert run_labels(Path("x/a.trec"), Path("x/a.trec")) == ("A: a.trec", "B: a.trec")
