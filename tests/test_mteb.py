"""spladekit.mteb: mteb evaluates a spladekit model as a sparse encoder; on a retrieval task of
SciFact in mteb's own format, mteb's nDCG@10 is spladekit's own."""

from __future__ import annotations

import json

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")

from spladekit.mteb import SpladeMTEB, beir_task  # noqa: E402
from tests.harness_helpers import scifact_part  # noqa: E402


def test_encode_gives_sparse_vectors_and_similarity_is_the_dot_product(tiny_bert_dir, tiny_beir):
    """Retrieval tasks get a sparse COO tensor of the encoder's own vectors (queries and documents
    each with their side); similarity is Σ q·d (checked against float64 dense products: float32 sums
    of ≤ V products, relative error ≤ V·2^-24 < 1e-5 here)."""
    import torch
    from mteb.types import PromptType
    from torch.utils.data import DataLoader

    model = SpladeMTEB(str(tiny_bert_dir), device="cpu", doc_max_length=128)
    task = beir_task(tiny_beir)
    docs = ["protein expression in mouse cells", "cancer risk in patients", ""]
    queries = ["protein", "cancer risk"]
    batches = DataLoader(
        [{"text": t} for t in docs], batch_size=2, collate_fn=lambda b: {"text": [x["text"] for x in b]}
    )
    d = model.encode(
        batches, task_metadata=task.metadata, hf_split="test", hf_subset="default", prompt_type=PromptType.document
    )
    q = model.encode(
        [{"text": queries}],
        task_metadata=task.metadata,
        hf_split="test",
        hf_subset="default",
        prompt_type=PromptType.query,
    )
    assert d.is_sparse and q.is_sparse and d.dtype == torch.float32
    assert np.array_equal(d.to_dense().numpy(), model.encoder.encode_documents(docs).toarray())
    assert np.array_equal(q.to_dense().numpy(), model.encoder.encode_queries(queries).toarray())
    by_hand = q.to_dense().double().numpy() @ d.to_dense().double().numpy().T
    np.testing.assert_allclose(model.similarity(q, d).numpy(), by_hand, rtol=1e-5)
    first_two = d.index_select(0, torch.tensor([0, 1]))
    np.testing.assert_allclose(model.similarity_pairwise(q, first_two).numpy(), np.diag(by_hand[:, :2]), rtol=1e-5)
    assert model.mteb_model_meta.model_type == ["sparse"]


def test_beir_task_is_the_folder(tiny_beir):
    """The task holds the folder's judged queries, its documents (title + " " + text) and its qrels."""
    task = beir_task(tiny_beir, name="tiny")
    task.load_data()
    data = task.dataset["default"]["test"]
    assert task.metadata.name == "tiny" and task.metadata.type == "Retrieval"
    assert data["queries"]["id"] == ["q1", "q2", "q3"]  # q4 has no judgment
    assert dict(zip(data["corpus"]["id"], data["corpus"]["text"]))["d1"] == "Protein protein expression in mouse cells"
    assert data["relevant_docs"] == {"q1": {"d1": 1, "d4": 1}, "q2": {"d2": 2}, "q3": {"d3": 1}}


@pytest.mark.slow
def test_mteb_ndcg_on_scifact_is_spladekit_evaluate_ndcg(shared, splade_tiny, tmp_path, record_property):
    """mteb.evaluate(SpladeMTEB, SciFact task) and ``spladekit evaluate`` (:func:`run_evaluation`) on
    the same folder, model and fused head: the same top-10 documents per query with the same float32
    scores (both add the products in column order), so the same nDCG@10 up to mteb's rounding to 5
    decimals (|Δ| ≤ 5e-6) and the order of summing 300 values (< 1e-12)."""
    from spladekit.data.trec import read_run
    from spladekit.evaluate.systems import EvalConfig, run_evaluation

    folder = scifact_part(shared / "data" / "beir" / "scifact", tmp_path / "scifact-part")
    options = dict(doc_max_length=64, head_impl="fused")
    config = EvalConfig(model=str(splade_tiny), data=str(folder), doc_max_length=64)
    ours = run_evaluation(config, tmp_path / "eval", show_progress=False).metrics
    model = SpladeMTEB(str(splade_tiny), device="cpu", **options)
    result = mteb.evaluate(
        model, beir_task(folder), cache=None, prediction_folder=tmp_path / "mteb", show_progress_bar=False
    )
    scores = result.task_results[0].scores["test"][0]
    for key, value in (
        ("mteb_ndcg_at_10", scores["ndcg_at_10"]),
        ("spladekit_nDCG@10", ours["nDCG@10"]),
        ("mteb_recall_at_100", scores["recall_at_100"]),
        ("spladekit_R@100", ours["R@100"]),
    ):
        record_property(key, float(value))  # the numbers compared, in a --junitxml report
    assert abs(scores["ndcg_at_10"] - ours["nDCG@10"]) <= 5e-6 + 1e-12
    assert abs(scores["recall_at_100"] - ours["R@100"]) <= 5e-6 + 1e-12
    predicted = json.loads(next((tmp_path / "mteb").glob("*predictions.json")).read_text())
    run = read_run(tmp_path / "eval" / "run.trec")
    runs = predicted["default"]["test"]  # mteb's layout: {subset: {split: {qid: {docid: score}}}}
    for qid, hits in run.items():
        top = sorted(hits.items(), key=lambda h: (-h[1], h[0]))[:10]
        theirs = sorted(runs[qid].items(), key=lambda h: (-h[1], h[0]))[:10]
        assert [d for d, _ in top] == [d for d, _ in theirs], qid
        assert [np.float32(s) for _, s in top] == [np.float32(s) for _, s in theirs], qid
