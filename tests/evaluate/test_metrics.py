"""Evaluation conventions: hand-computed values, relevance levels, grade 0, query-id removal, ties,
recording in metrics.json, metric invariants (hypothesis), and the real TREC DL qrels against
ir_measures called directly with the track's conventions."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spladekit.data.trec import read_qrels, read_run, sorted_ranking, write_run
from spladekit.errors import DataFormatError
from spladekit.evaluate.metrics import EvalConventions, evaluate, evaluate_per_query, parse_measure, prepare_run

QRELS = {"q1": {"a": 3, "b": 1, "c": 2, "d": 0}}
RUN = {"q1": {"d": 4.0, "b": 3.0, "c": 2.0, "x": 1.0}}  # a (grade 3) is not retrieved
MEASURES = ["nDCG@10", "MRR@10", "MAP", "R@1000"]


def test_hand_computed_default_and_trec_dl_levels():
    default = evaluate(RUN, QRELS, MEASURES)
    # relevant (grade ≥ 1) = a, b, c; retrieved relevant: b at rank 2, c at rank 3
    assert default["MRR@10"] == pytest.approx(1 / 2)
    assert default["MAP"] == pytest.approx((1 / 2 + 2 / 3) / 3)
    assert default["R@1000"] == pytest.approx(2 / 3)
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert default["nDCG@10"] == pytest.approx(dcg / idcg)

    dl = evaluate(RUN, QRELS, MEASURES, "trec-dl")
    # relevant (grade ≥ 2) = a, c; c at rank 3; nDCG still uses every grade
    assert dl["MRR@10"] == pytest.approx(1 / 3)
    assert dl["MAP"] == pytest.approx((1 / 3) / 2)
    assert dl["R@1000"] == pytest.approx(1 / 2)
    assert dl["nDCG@10"] == pytest.approx(dcg / idcg)
    assert dl["conventions"]["measures"] == {
        "nDCG@10": "nDCG@10",
        "MRR@10": "RR(rel=2)@10",
        "MAP": "AP(rel=2)",
        "R@1000": "R(rel=2)@1000",
    }
    # per-measure selection: only MRR at level 2
    mixed = evaluate(RUN, QRELS, MEASURES, EvalConventions(relevance_levels={"MRR": 2}))
    assert mixed["MRR@10"] == pytest.approx(1 / 3) and mixed["R@1000"] == pytest.approx(2 / 3)
    # a level written in the name wins
    assert evaluate(RUN, QRELS, ["R(rel=1)@1000"], "trec-dl")["R(rel=1)@1000"] == pytest.approx(2 / 3)


def test_grade_zero_and_negative_are_judged_non_relevant():
    qrels_zero = {"q": {"a": 1, "z": 0}}
    qrels_neg = {"q": {"a": 1, "z": -1}}
    judged_above = {"q": {"z": 2.0, "a": 1.0}}
    unjudged_above = {"q": {"y": 2.0, "a": 1.0}}
    names = ["nDCG@10", "MRR@10", "MAP", "R@1", "P@2"]
    reference = evaluate(unjudged_above, {"q": {"a": 1}}, names)
    for qrels in (qrels_zero, qrels_neg):
        for run in (judged_above, unjudged_above):
            got = evaluate(run, qrels, names)
            assert {n: got[n] for n in names} == pytest.approx({n: reference[n] for n in names})
    assert reference["MRR@10"] == pytest.approx(0.5) and reference["nDCG@10"] == pytest.approx(1 / math.log2(3))


def test_averaging_counts_missing_and_unjudged_queries():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    run = {"q1": {"a": 1.0}, "q3": {"c": 1.0}, "q4": {"a": 1.0}, "q5": {}}
    per_query: dict = {}
    m = evaluate(run, qrels, ["MRR@10"], per_query=per_query)
    assert per_query == {"MRR@10": {"q1": 1.0, "q2": 0.0, "q3": 0.0}}
    assert m["MRR@10"] == pytest.approx(1 / 3)
    assert (m["num_queries"], m["num_skipped"], m["num_unretrieved"], m["num_without_relevant"]) == (3, 2, 1, 1)
    empty = evaluate({}, qrels, ["nDCG@10", "MRR@10"])
    assert empty["nDCG@10"] == 0.0 and empty["MRR@10"] == 0.0 and empty["num_unretrieved"] == 3
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate(run, {}, ["MRR@10"])


def test_remove_query_id_is_off_by_default_and_on_for_arguana_quora():
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"q1": 9.0, "a": 1.0}}
    assert evaluate(run, qrels, ["MRR@10"])["MRR@10"] == pytest.approx(0.5)
    for preset in ("arguana", "quora"):
        m = evaluate(run, qrels, ["MRR@10"], preset)
        assert m["MRR@10"] == pytest.approx(1.0) and m["removed_query_id_docs"] == 1
        assert m["conventions"]["remove_query_id"] is True and m["conventions"]["name"] == preset
    assert evaluate(run, qrels, ["MRR@10"])["removed_query_id_docs"] == 0
    assert EvalConventions.for_dataset("/data/beir/arguana").remove_query_id
    assert EvalConventions.for_dataset("cqadupstack-quora-like-QUORA").name == "quora"
    assert EvalConventions.for_dataset("scifact").name == "beir"
    assert EvalConventions.for_dataset("msmarco-dl19").name == "trec-dl"


def test_presets_and_validation():
    assert EvalConventions.preset("trec-dl").level_for("AP") == 2
    assert EvalConventions.preset("msmarco").level_for("RR") == 1
    c = EvalConventions(relevance_levels={"MAP": 3})
    assert c.level_for("AP") == 3 and c.level_for("MAP") == 3 and c.level_for("R") == 1
    assert EvalConventions.from_dict(json.loads(json.dumps(c.to_dict(["MAP"])))) == c
    with pytest.raises(ValueError, match="unknown evaluation preset"):
        EvalConventions.preset("nope")
    with pytest.raises(ValueError, match="must be ≥ 1"):
        EvalConventions(relevance_level=0)
    assert repr(parse_measure("MRR@10", "trec-dl")) == "RR(rel=2)@10"


def test_document_ids_that_match_nothing_judged_are_warned_about():
    qrels = {"q1": {"486": 1, "12": 0}, "q2": {"7": 2}}
    with pytest.warns(
        UserWarning, match=r"none of the documents the run retrieves for its 2 judged queries is judged.*'D486'"
    ):
        result = evaluate({"q1": {"D486": 3.0, "D12": 1.0}, "q2": {"D7": 2.0}}, qrels, ["nDCG@10"])
    assert result["nDCG@10"] == 0.0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one judged document retrieved (even non-relevant): no warning
        assert evaluate({"q1": {"D486": 3.0, "12": 1.0}, "q2": {"D7": 2.0}}, qrels, ["nDCG@10"])["nDCG@10"] == 0.0


def test_the_command_line_prints_a_warning_as_one_line_without_source(tmp_path):
    """``spladekit`` (the console entry point) prints ``warning: <message>``, not the library's source line."""
    import subprocess
    import sys
    from pathlib import Path as P

    (tmp_path / "run.trec").write_text("q1 Q0 D486 1 3.0 x\n")
    (tmp_path / "qrels.txt").write_text("q1 0 486 1\n")
    import os

    env = dict(os.environ, PYTHONPATH=str(P(__file__).resolve().parents[2] / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "evaluate",
            "--run",
            str(tmp_path / "run.trec"),
            "--qrels",
            str(tmp_path / "qrels.txt"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "none of the documents" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: none of the documents") and ".py:" not in proc.stderr, (
        proc.stderr
    )


def test_tie_break_is_the_same_in_run_files_and_evaluation(tmp_path):
    qrels = {"q": {"b": 1, "e": 2}, "r": {"a": 1}}
    run = {"q": {"e": 1.0, "d": 2.0, "b": 2.0, "a": 2.0, "c": 0.5}, "r": {"b": 1.0, "a": 1.0}}
    path = tmp_path / "run.trec"
    write_run(run, path)
    file_order = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, _, docid, rank, _, _ = line.split()
        file_order.setdefault(qid, []).append(docid)
    assert file_order == {"q": ["a", "b", "d", "e", "c"], "r": ["a", "b"]}
    ranked, _ = prepare_run(run)
    assert {q: [d for d, _ in sorted_ranking(docs)] for q, docs in ranked.items()} == file_order
    measures = ["nDCG@10", "MRR@10", "MAP", "R@3"]
    in_memory = evaluate(run, qrels, measures)
    read_back = evaluate(read_run(path), qrels, measures)
    # a run with strictly decreasing scores in file order: no tie left at all
    by_rank = {q: {d: float(100 - i) for i, d in enumerate(docs)} for q, docs in file_order.items()}
    no_ties = evaluate(by_rank, qrels, measures)
    for name in measures:
        assert in_memory[name] == read_back[name] == no_ties[name]
    assert in_memory["MRR@10"] == pytest.approx((1 / 2 + 1) / 2)


def test_scores_closer_than_a_millionth_keep_their_order_in_the_file(tmp_path):
    # fused RRF scores deep in a list: 1/(60+r) summed over runs differ by < 1e-6; at 6 decimals
    # they read back as ties ordered by document id (z before a became a before z)
    run = {"q": {"z": 1 / 1059 + 1 / 1060, "a": 1 / 1060 + 1 / 1060, "m": 0.5}}
    path = tmp_path / "fused.trec"
    write_run(run, path)
    assert read_run(path) == run  # repr round-trips every float64 exactly
    assert [line.split()[2] for line in path.read_text(encoding="utf-8").splitlines()] == ["m", "z", "a"]
    with pytest.raises(DataFormatError, match="not finite"):
        write_run({"q": {"a": float("inf")}}, tmp_path / "inf.trec")
    assert not (tmp_path / "inf.trec").exists()


def test_duplicate_lines_never_push_ndcg_above_one(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q Q0 a 1 3 t\nq Q0 a 2 2 t\nq Q0 a 3 1 t\n", encoding="utf-8")
    with pytest.warns(UserWarning):
        run = read_run(path, dedupe=True)
    m = evaluate(run, {"q": {"a": 3, "b": 0}}, ["nDCG@10"])
    assert m["nDCG@10"] == pytest.approx(1.0)


def test_cli_evaluate_run_records_conventions(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 a 3\nq1 0 b 1\nq1 0 c 2\nq1 0 d 0\n", encoding="utf-8")
    run = tmp_path / "run.trec"
    write_run(RUN, run)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--run",
            str(run),
            "--qrels",
            str(qrels),
            "--preset",
            "trec-dl",
            "--rel",
            "MRR=1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["MRR@10"] == pytest.approx(1 / 2)  # MRR at level 1 by --rel, recall at 2 by the preset
    assert metrics["R@1000"] == pytest.approx(1 / 2)
    assert metrics["conventions"]["name"] == "trec-dl+custom"
    assert metrics["conventions"]["measures"]["R@1000"] == "R(rel=2)@1000"
    per_query = json.loads((out / "per_query.json").read_text())
    assert per_query["MRR@10"] == {"q1": pytest.approx(0.5)}
    bad = CliRunner().invoke(app, ["evaluate", "--run", str(run), "--qrels", str(qrels), "--rel", "MRR=x"])
    assert bad.exit_code != 0
    # without --preset, the preset follows the qrels file name
    dl = tmp_path / "qrels.dl19-passage.txt"
    dl.write_bytes(qrels.read_bytes())
    result = CliRunner().invoke(app, ["evaluate", "--run", str(run), "--qrels", str(dl)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["conventions"]["name"] == "trec-dl" and printed["MRR@10"] == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------- invariants
@st.composite
def judged_query(draw):
    n_rel = draw(st.integers(1, 12))
    n_non = draw(st.integers(0, 12))
    grades = draw(st.lists(st.integers(1, 3), min_size=n_rel, max_size=n_rel))
    qrels = {f"r{i}": g for i, g in enumerate(grades)}
    qrels.update({f"n{i}": draw(st.sampled_from([0, -1])) for i in range(n_non)})
    unjudged = [f"u{i}" for i in range(draw(st.integers(0, 12)))]
    return qrels, unjudged


def _run_from_order(order):
    return {"q": {d: float(len(order) - i) for i, d in enumerate(order)}}


@settings(max_examples=50, deadline=None)
@given(judged_query(), st.randoms(use_true_random=False), st.sampled_from(["default", "trec-dl"]))
def test_perfect_run_scores_one(case, rnd, preset):
    qrels, unjudged = case
    relevant = sorted((d for d in qrels if qrels[d] > 0), key=lambda d: (-qrels[d], d))
    rest = [d for d in qrels if qrels[d] <= 0] + unjudged
    rnd.shuffle(rest)
    binary = ["MRR@10", "MAP", "R@1000", "P@1"]
    m = evaluate(_run_from_order(relevant + rest), {"q": qrels}, ["nDCG@10", "nDCG@1000"] + binary, preset)
    assert m["nDCG@10"] == pytest.approx(1.0) and m["nDCG@1000"] == pytest.approx(1.0)
    has_relevant_at_level = any(g >= EvalConventions.preset(preset).relevance_level for g in qrels.values())
    for name in binary:  # a query without any document at the level cannot score (trec_eval: 0)
        assert m[name] == pytest.approx(1.0 if has_relevant_at_level else 0.0), name


@settings(max_examples=50, deadline=None)
@given(judged_query(), st.randoms(use_true_random=False))
def test_permuting_non_relevant_below_relevant_changes_nothing(case, rnd):
    qrels, unjudged = case
    relevant = [d for d in qrels if qrels[d] > 0]
    rnd.shuffle(relevant)  # any order of the relevant documents on top
    rest = [d for d in qrels if qrels[d] <= 0] + unjudged
    other = rest[:]
    rnd.shuffle(other)
    names = ["nDCG@5", "nDCG@10", "MRR@10", "MAP", "R@5", "R@1000", "P@10"]
    a = evaluate(_run_from_order(relevant + rest), {"q": qrels}, names)
    b = evaluate(_run_from_order(relevant + other), {"q": qrels}, names)
    assert {n: a[n] for n in names} == {n: b[n] for n in names}


@settings(max_examples=50, deadline=None)
@given(judged_query(), st.randoms(use_true_random=False))
def test_measures_stay_in_unit_interval(case, rnd):
    qrels, unjudged = case
    docs = list(qrels) + unjudged
    rnd.shuffle(docs)
    run = {"q": {d: float(rnd.randint(0, 3)) for d in docs}}  # many ties
    m = evaluate(run, {"q": qrels}, ["nDCG@10", "MRR@10", "MAP", "R@1000"])
    assert all(0.0 <= m[n] <= 1.0 + 1e-12 for n in ["nDCG@10", "MRR@10", "MAP", "R@1000"])


# ---------------------------------------------------------------------------------------- real TREC DL
def _run_from_qrels(qrels, seed, unjudged_per_query=30, drop_every=0):
    rng = random.Random(seed)
    run = {}
    for n, (qid, docs) in enumerate(sorted(qrels.items())):
        if drop_every and n % drop_every == 0:
            continue
        ids = list(docs) + [f"u{rng.randrange(10**9)}" for _ in range(unjudged_per_query)]
        rng.shuffle(ids)
        scores = rng.sample(range(1, 10 * len(ids) + 1), len(ids))  # distinct scores
        run[qid] = {d: float(s) for d, s in zip(ids, scores)}
    return run


@pytest.mark.parametrize("name", ["qrels.dl19-passage.txt", "qrels.dl20-passage.txt"])
def test_trec_dl_matches_ir_measures_directly(shared, name):
    import ir_measures
    from ir_measures import AP, RR, R, nDCG

    qrels = read_qrels(shared / "data" / "trec" / name)
    direct_measures = [nDCG @ 10, AP(rel=2), R(rel=2) @ 1000, RR(rel=2) @ 10]
    ours_names = ["nDCG@10", "MAP", "R@1000", "MRR@10"]
    run = _run_from_qrels(qrels, seed=7)
    assert set(run) == set(qrels)
    direct = ir_measures.calc_aggregate(direct_measures, qrels, run)
    ours = evaluate(run, qrels, ours_names, "trec-dl")
    for ours_name, measure in zip(ours_names, direct_measures):
        assert ours[ours_name] == pytest.approx(direct[measure], abs=1e-12), ours_name
        assert ours["conventions"]["measures"][ours_name] == repr(measure)
    assert 0.0 < ours["nDCG@10"] < 1.0

    # queries missing from the run count 0: ours = (sum over retrieved queries) / (all judged queries)
    partial = _run_from_qrels(qrels, seed=8, drop_every=5)
    ours = evaluate(partial, qrels, ours_names, "trec-dl")
    for ours_name, measure in zip(ours_names, direct_measures):
        total = sum(m.value for m in ir_measures.iter_calc([measure], qrels, partial))
        assert ours[ours_name] == pytest.approx(total / len(qrels), abs=1e-12)
    assert ours["num_unretrieved"] == len(qrels) - len(partial)


def test_msmarco_dev_binary_mrr_matches_ir_measures(shared):
    import ir_measures
    from ir_measures import RR

    qrels = read_qrels(shared / "data" / "trec" / "qrels.msmarco-passage.dev-subset.txt")
    subset = {q: qrels[q] for q in sorted(qrels)[:500]}
    run = _run_from_qrels(subset, seed=3, unjudged_per_query=15)
    ours = evaluate(run, subset, ["MRR@10"], "msmarco")
    assert ours["MRR@10"] == pytest.approx(ir_measures.calc_aggregate([RR @ 10], subset, run)[RR @ 10], abs=1e-12)
    per_query = evaluate_per_query(run, subset, ["MRR@10"], "msmarco")["MRR@10"]
    assert set(per_query) == set(subset)


def test_model_evaluation_records_conventions_and_keeps_issue2_keys(tiny_bert_dir, tiny_beir, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(out), "--preset", "arguana"],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    for key in (
        "nDCG@10",
        "MRR@10",
        "R@100",
        "R@1000",
        "num_queries",
        "avg_query_terms",
        "avg_doc_terms",
        "flops",
        "truncated_docs",
        "truncated_queries",
        "num_skipped",
        "num_unretrieved",
        "removed_query_id_docs",
    ):
        assert key in metrics, key
    assert metrics["conventions"]["name"] == "arguana" and metrics["conventions"]["remove_query_id"] is True
    assert json.loads((out / "config.json").read_text())["conventions"]["name"] == "arguana"
    per_query = json.loads((out / "per_query.json").read_text())
    assert set(per_query["nDCG@10"]) == {"q1", "q2", "q3"}
    assert metrics["nDCG@10"] == pytest.approx(sum(per_query["nDCG@10"].values()) / 3)
    # the same run re-evaluated from its file gives the same numbers
    again = evaluate(read_run(out / "run.trec"), read_qrels(tiny_beir / "qrels" / "test.tsv"), conventions="arguana")
    assert again["nDCG@10"] == metrics["nDCG@10"]
    # without a preset, the conventions come from the dataset name ("tiny-beir" → beir)
    from spladekit.data.beir import load_beir
    from spladekit.evaluate.retrieval import conventions_for

    assert conventions_for(load_beir(tiny_beir), None).name == "beir"


def test_search_top_k_cut_among_ties_follows_the_same_rule():
    import numpy as np
    import scipy.sparse as sp

    from spladekit.index.exact import exact_search, results_to_run

    doc_ids = ["z", "y", "x", "w", "v"]
    docs = sp.csr_matrix(np.array([[1, 0], [1, 0], [1, 0], [2, 0], [1, 0]], dtype=np.float32))
    query = sp.csr_matrix(np.array([[1, 0]], dtype=np.float32))
    hits = exact_search(query, docs, k=3, doc_ids=doc_ids)
    assert [doc_ids[i] for i, _ in hits[0]] == ["w", "v", "x"]  # w (score 2), then ties by id: v, x
    full = results_to_run(exact_search(query, docs, k=5), ["q"], doc_ids)["q"]
    assert [d for d, _ in sorted_ranking(full)][:3] == ["w", "v", "x"]
    run = results_to_run(hits, ["q"], doc_ids)
    assert [d for d, _ in sorted_ranking(run["q"])] == ["w", "v", "x"]
    with pytest.raises(ValueError, match="document ids"):
        exact_search(query, docs, k=3, doc_ids=doc_ids[:2])


def test_grades_beyond_what_trec_eval_can_hold_are_refused(tmp_path):
    """trec_eval holds one entry per grade value up to the largest; a grade of 3e9 gave nDCG@10 = 0.0 for
    every query. The largest accepted grade still evaluates by the formula: ideal order d1 (gain G) then
    d2 (gain 1); the run puts d2 first, so nDCG@10 = (1 + G/log2 3) / (G + 1/log2 3)."""
    from spladekit.data.trec import GRADE_MAX, read_qrels
    from spladekit.errors import DataFormatError

    run = {"q": {"d1": 1.0, "d2": 2.0}}
    got = evaluate(run, {"q": {"d1": GRADE_MAX, "d2": 1}}, ["nDCG@10"])["nDCG@10"]
    G = GRADE_MAX
    assert got == pytest.approx((1 + G / math.log2(3)) / (G + 1 / math.log2(3)), rel=1e-12)
    with pytest.raises(ValueError, match="above"):
        evaluate(run, {"q": {"d1": GRADE_MAX + 1, "d2": 1}}, ["nDCG@10"])
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq\td1\t1\nq\td2\t3000000000\n")
    with pytest.raises(DataFormatError, match="outside") as info:
        read_qrels(path)
    assert (info.value.line, info.value.field) == (3, "grade")


def test_relevance_levels_name_measures_that_take_one():
    # "mrr" was stored as given and never matched the family "RR": the level was recorded, not applied
    c = EvalConventions(relevance_levels={"mrr": 2, "Recall": 3})
    assert c.relevance_levels == {"RR": 2, "R": 3}
    assert repr(parse_measure("MRR@10", c)) == "RR(rel=2)@10" and repr(parse_measure("R@100", c)) == "R(rel=3)@100"
    for name in ("nDCG", "Foo", "RR@10"):
        with pytest.raises(ValueError, match="not a measure taking one"):
            EvalConventions(relevance_levels={name: 2})


@pytest.mark.parametrize("name", ["nDCG@0", "P@0", "RR@0", "nDCG@1.5", "R@-3", "nDCG@"])
def test_cutoffs_must_be_integers_from_one(name):
    # pytrec_eval aborts the whole process on nDCG@0; RR@0 gave 0 for every query
    with pytest.raises(ValueError, match="integer ≥ 1"):
        parse_measure(name)


def test_preset_follows_the_qrels_file_and_dataset_folder_not_every_folder(tmp_path):
    beir = tmp_path / "dl19-baselines" / "scifact" / "qrels" / "test.tsv"
    assert EvalConventions.for_qrels(beir).name == "beir"
    assert EvalConventions.for_qrels(tmp_path / "quora_project" / "qrels.txt").name == "beir"
    assert EvalConventions.for_qrels(tmp_path / "x" / "qrels.dl19-passage.txt").name == "trec-dl"
    assert EvalConventions.for_qrels(tmp_path / "quora" / "qrels" / "dev.tsv").name == "quora"


def test_a_level_above_every_grade_is_warned_about():
    qrels = {"q1": {"a": 1, "b": 0}}
    run = {"q1": {"a": 2.0, "b": 1.0}}
    with pytest.warns(UserWarning, match=r"MRR@10 \(relevant: grade ≥ 2\).*highest grade is 1"):
        result = evaluate(run, qrels, ["MRR@10", "nDCG@10"], "trec-dl")
    assert result["MRR@10"] == 0.0 and result["nDCG@10"] == 1.0  # by hand: nothing reaches 2; a at rank 1
