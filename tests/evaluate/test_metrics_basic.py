"""Metric values on hand-made qrels and runs, computed by hand from the definitions."""

import math

import pytest

from spladekit.evaluate.metrics import evaluate, evaluate_per_query


def test_hand_computed_values_and_missing_query_counts_zero():
    qrels = {"q1": {"d1": 1, "d2": 1, "d9": 0}, "q2": {"d5": 1}}
    run = {"q1": {"d3": 3.0, "d1": 2.0, "d2": 1.0}, "q3": {"d1": 1.0}}  # q2 missing, q3 unjudged
    m = evaluate(run, qrels, ["nDCG@10", "MRR@10", "R@1", "R@100"])
    ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert m["nDCG@10"] == pytest.approx(ndcg_q1 / 2)
    assert m["MRR@10"] == pytest.approx(0.5 / 2)
    assert m["R@1"] == pytest.approx(0.0)
    assert m["R@100"] == pytest.approx(1.0 / 2)
    assert m["num_queries"] == 2 and m["num_skipped"] == 1
    per_query = evaluate_per_query(run, qrels, ["MRR@10"])
    assert per_query == {"MRR@10": {"q1": pytest.approx(0.5), "q2": 0.0}}


def test_ties_use_doc_id_ascending():
    qrels = {"q": {"b": 1}}
    # a and b tie: spladekit's rule ranks "a" first, so the relevant "b" is at rank 2
    assert evaluate({"q": {"b": 1.0, "a": 1.0}}, qrels, ["MRR@10"])["MRR@10"] == pytest.approx(0.5)


def test_unknown_measure_is_an_error():
    with pytest.raises(ValueError, match="unknown measure"):
        evaluate({"q": {"d": 1.0}}, {"q": {"d": 1}}, ["Bogus@3"])
