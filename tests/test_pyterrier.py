"""spladekit.pyterrier: PyTerrier transformers judged by PyTerrier itself, by PISA (pyterrier-pisa),
by scoring by hand, and on SciFact by ``pt.Experiment`` against spladekit's own evaluation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

pt = pytest.importorskip("pyterrier")

from spladekit.pyterrier import SpladeKit, TextLoader, token_names, toks_to_rows  # noqa: E402
from tests.harness_helpers import scifact_part  # noqa: E402

DOCS = pd.DataFrame(
    {
        "docno": ["d1", "d2", "d3", "d4", "d5"],
        "text": [
            "protein expression in mouse cells",
            "cancer risk in patients with high blood levels",
            "vaccine trial results and response",
            "gene expression and dna rna activity",
            "brain activity in human study",
        ],
    }
)
TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["protein expression", "cancer risk", "vaccine response"]})


@pytest.fixture(scope="module")
def kit(tiny_bert_dir):
    return SpladeKit(str(tiny_bert_dir), device="cpu", doc_max_length=128)


def test_encoders_write_the_pyt_splade_column_layout(kit):
    """``toks`` / ``query_toks``: {token string: weight} of exactly the active terms of each vector."""
    assert "[spladekit:6]" in token_names(kit.encoder)
    encoder = kit.encoder
    docs = kit.doc_encoder()(DOCS)
    queries = kit.query_encoder(scale=100)(TOPICS)
    doc_vectors = encoder.encode_documents(DOCS["text"].tolist())
    query_vectors = encoder.encode_queries(TOPICS["query"].tolist())

    def tokens(j):  # an id the tokenizer does not name is "[spladekit:ID]" (this vocabulary lists "a" twice)
        return encoder.tokenizer.convert_ids_to_tokens(j) or f"[spladekit:{j}]"

    for row, toks in enumerate(docs["toks"]):
        vec = doc_vectors[row]
        assert toks == {tokens(int(j)): float(w) for j, w in zip(vec.indices, vec.data)}
    for row, toks in enumerate(queries["query_toks"]):
        vec = query_vectors[row]  # scale 100: each weight times 100 (float64 product of the float32 weight)
        assert toks == {tokens(int(j)): float(w) * 100 for j, w in zip(vec.indices, vec.data)}
    assert list(docs.columns) == ["docno", "text", "toks"] and list(queries.columns) == ["qid", "query", "query_toks"]


def test_splade_into_pisa_pipelines(kit, tmp_path):
    """``doc_encoder >> PisaIndex.toks_indexer`` and ``query_encoder >> pisa.quantized()`` run, and
    PISA scores what its documented quantisation says: documents ``⌊100·w⌋`` (PisaToksIndexer),
    each query term repeated ``⌊100·q⌋`` times (its pretokenised queries), so the score is
    ``Σ ⌊100·q_t⌋·⌊100·d_t⌋``, an integer (exact in float32 below 2^24) — over the lower-case tokens
    only: PISA's query term processor lower-cases, so ``[CLS]``-style tokens never match."""
    pisa = pytest.importorskip("pyterrier_pisa")
    index = pisa.PisaIndex(str(tmp_path / "pisa"), stemmer="none", stops="none")
    (kit.doc_encoder() >> index.toks_indexer()).index(DOCS.to_dict("records"))
    results = (kit.query_encoder() >> index.quantized(num_results=10))(TOPICS)
    docs = dict(zip(DOCS["docno"], kit.doc_encoder()(DOCS)["toks"]))
    queries = dict(zip(TOPICS["qid"], kit.query_encoder()(TOPICS)["query_toks"]))
    assert len(results) == len(TOPICS) * len(DOCS)
    for qid, docno, score in zip(results["qid"], results["docno"], results["score"]):
        q, d = queries[qid], docs[docno]
        by_hand = sum(math.floor(100 * w) * math.floor(100 * d[t]) for t, w in q.items() if t in d and t == t.lower())
        assert by_hand < 2**24 and score == by_hand


def _by_hand_run(kit, docs: pd.DataFrame, topics: pd.DataFrame, k: int) -> dict:
    """Exact search by hand: dense dot products of the encoder's vectors, ranked by score then docno."""
    d = kit.encoder.encode_documents(docs["text"].tolist()).toarray().astype(np.float64)
    q = kit.encoder.encode_queries(topics["query"].tolist()).toarray().astype(np.float64)
    run = {}
    for i, qid in enumerate(topics["qid"]):
        scores = d @ q[i]
        ranked = sorted(((-s, docno) for s, docno in zip(scores, docs["docno"]) if s > 0))[:k]
        run[qid] = [(docno, -s) for s, docno in ranked]
    return run


def test_indexer_and_retriever_against_search_by_hand(kit, tmp_path):
    """The indexer writes a spladekit index of the documents' vectors; the retriever returns the exact
    top k (scores float32 sums of at most V products: relative error ≤ V·2^-24 ≈ 1e-4 here, V < 200)."""
    index = kit.indexer(tmp_path / "idx").index(DOCS.to_dict("records"))
    vectors = kit.encoder.encode_documents(DOCS["text"].tolist())
    rows = {doc_id: row for row, doc_id in enumerate(index.doc_ids)}
    assert sorted(rows) == sorted(DOCS["docno"])
    assert np.array_equal(index.docs.toarray()[[rows[d] for d in DOCS["docno"]]], vectors.toarray())
    results = kit.retriever(tmp_path / "idx", k=3)(TOPICS)
    assert list(results.columns) == ["qid", "query", "docno", "score", "rank"]
    by_hand = _by_hand_run(kit, DOCS, TOPICS, 3)
    for qid, group in results.groupby("qid", sort=False):
        assert list(group["rank"]) == list(range(len(group)))
        assert list(group["docno"]) == [docno for docno, _ in by_hand[qid]]
        np.testing.assert_allclose(group["score"], [s for _, s in by_hand[qid]], rtol=1e-4)


def test_retriever_takes_query_toks_from_a_query_encoder(kit, tmp_path):
    """``query_encoder >> retriever`` (vectors through the ``query_toks`` column, round trip exact: a
    float32 weight is a float64 exactly) equals the retriever encoding the text itself."""
    kit.indexer(tmp_path / "idx").index(DOCS.to_dict("records"))
    direct = kit.retriever(tmp_path / "idx", k=5)(TOPICS)
    piped = (kit.query_encoder() >> kit.retriever(tmp_path / "idx", k=5))(TOPICS)
    pd.testing.assert_frame_equal(direct, piped.drop(columns=["query_toks"]))


def test_retriever_searches_by_the_searcher_configuration(kit, tmp_path):
    """``searcher=SeismicConfig(...)``: the retriever's rows are :meth:`Index.search`'s with that
    configuration, each score the document's dot product up to Seismic's float16 storage (the bound of
    ``tests/index/test_seismic.py``); a configuration the index cannot honour (``n_knn`` above the
    graph's ``nknn``, 0 by default) is refused before any model loads or query is encoded."""
    pytest.importorskip("seismic", reason="pyseismic-lsr not installed")
    from spladekit.index.seismic import SeismicSearchParams
    from spladekit.index.seismic_store import SeismicConfig
    from tests.index.test_seismic import f16_score_tolerance

    index = kit.indexer(tmp_path / "idx").index(DOCS.to_dict("records"))
    searcher = SeismicConfig(search=SeismicSearchParams(query_cut=50, heap_factor=1.0))
    results = kit.retriever(tmp_path / "idx", k=5, searcher=searcher)(TOPICS)
    queries = kit.encoder.encode_queries(TOPICS["query"].tolist())
    hits = index.search(queries, k=5, searcher=searcher, query_ids=list(TOPICS["qid"])).hits
    docs = {docno: row for row, docno in enumerate(DOCS["docno"])}
    dense = kit.encoder.encode_documents(DOCS["text"].tolist()).toarray().astype(np.float64)
    for (qid, group), want in zip(results.groupby("qid", sort=False), hits):
        assert [(d, s) for d, s in zip(group["docno"], group["score"])] == want and want
        q = queries[list(TOPICS["qid"]).index(qid)].toarray().ravel().astype(np.float64)
        for docno, score in want:
            exact = float(dense[docs[docno]] @ q)
            assert abs(score - exact) <= f16_score_tolerance(q, exact), (qid, docno, score, exact)
    unloaded = SpladeKit("/nonexistent/model")
    with pytest.raises(ValueError, match="--n-knn 3 asks for more neighbours"):
        unloaded.retriever(tmp_path / "idx", searcher=SeismicConfig(search=SeismicSearchParams(n_knn=3)))(TOPICS)
    assert unloaded._encoder is None


def test_text_loader(tmp_path, tiny_beir):
    results = pd.DataFrame({"qid": ["q1", "q1"], "docno": ["d3", "d1"], "score": [2.0, 1.0]})
    loaded = TextLoader(tiny_beir)(results)  # a BEIR folder: title + " " + text
    assert list(loaded["text"]) == [
        "Vaccine vaccine trial results and response",
        "Protein protein expression in mouse cells",
    ]
    with pytest.raises(KeyError, match="'d9'"):
        TextLoader({"d1": "x"})(pd.DataFrame({"qid": ["q"], "docno": ["d9"]}))


def test_hostile_query_toks_are_refused_by_row_and_token():
    names = ["[PAD]", "a", "b"]
    assert toks_to_rows([{"a": 1.5}, {}], names).toarray().tolist() == [[0, 1.5, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="row 1: query_toks token 'zz' is not in"):
        toks_to_rows([{"a": 1.0}, {"zz": 1.0}], names)
    with pytest.raises(ValueError, match="row 0: query_toks weight of 'b' must be a finite number"):
        toks_to_rows([{"b": float("nan")}], names)
    with pytest.raises(ValueError, match="weight of 'b'"):
        toks_to_rows([{"b": "1e400"}], names)
    with pytest.raises(ValueError, match="row 0: query_toks must be a"):
        toks_to_rows(["a b"], names)
    # finite as a Python number, not as the float32 the rows hold (inf), or past float range (OverflowError)
    for huge in (1e39, np.float64(-1e39), 10**400):
        with pytest.raises(ValueError, match="row 0: query_toks weight of 'b' must be a finite number"):
            toks_to_rows([{"b": huge}], names)


def test_two_columns_of_one_name_are_refused():
    class Twice:
        vocabulary = ["[PAD]", "a", "a"]

    with pytest.raises(ValueError, match="names two columns 'a'"):
        token_names(Twice())


def test_no_model_loads_until_a_transformer_runs():
    kit = SpladeKit("/nonexistent/model")
    kit.query_encoder(), kit.doc_encoder(), kit.retriever("/nonexistent/index")  # nothing loaded yet
    assert kit._encoder is None


# ------------------------------------------------------------------------------------- SciFact
@pytest.mark.slow
def test_pt_experiment_on_scifact_gives_spladekit_evaluate_numbers(shared, splade_tiny, tmp_path, record_property):
    """``pt.Experiment([bm25, splade], topics, qrels, ["nDCG@10", "R@100"])`` on SciFact's 300 test queries
    over a part of its corpus (every judged document and a sample of the others): the spladekit row equals
    the metrics of ``spladekit evaluate`` (:func:`spladekit.evaluate.systems.run_evaluation`, whose index the
    retriever searches) — the same run evaluated by the same library (ir_measures over pytrec_eval),
    so the means differ at most by the order of summing 300 values in [0, 1]: ≤ 300·2^-53 < 1e-12."""
    pisa = pytest.importorskip("pyterrier_pisa")
    from spladekit.data.beir import load_beir
    from spladekit.evaluate.systems import EvalConfig, run_evaluation

    data = scifact_part(shared / "data" / "beir" / "scifact", tmp_path / "scifact-part")
    # documents cut at 64 tokens (the setting of both systems) to keep their encoding short
    config = EvalConfig(model=str(splade_tiny), data=str(data), doc_max_length=64, index=str(tmp_path / "idx"))
    metrics = run_evaluation(config, tmp_path / "eval", show_progress=False).metrics
    dataset = load_beir(data, "test")
    topics = pd.DataFrame({"qid": list(dataset.queries), "query": list(dataset.queries.values())})
    qrels = pd.DataFrame(
        [(q, d, g) for q, docs in dataset.qrels.items() for d, g in docs.items()], columns=["qid", "docno", "label"]
    )
    bm25_index = pisa.PisaIndex(str(tmp_path / "pisa"), text_field="text")
    bm25_index.index({"docno": d, "text": t} for d, t in dataset.corpus.items())
    splade = SpladeKit(str(splade_tiny), doc_max_length=64, device="cpu").retriever(tmp_path / "idx", k=config.k)
    from pyterrier.measures import R, nDCG  # PyTerrier takes ir_measures objects (its strings are TREC names)

    table = pt.Experiment(
        [bm25_index.bm25(num_results=1000), splade], topics, qrels, [nDCG @ 10, R @ 100], names=["bm25", "spladekit"]
    )
    row = table.set_index("name").loc["spladekit"]
    for measure in ("nDCG@10", "R@100"):  # the numbers compared, in a --junitxml report
        record_property(f"pt_{measure}", float(row[measure]))
        record_property(f"spladekit_{measure}", float(metrics[measure]))
    record_property("pt_bm25_nDCG@10", float(table.set_index("name").loc["bm25", "nDCG@10"]))
    assert metrics["num_queries"] == len(topics) == 300
    assert row["nDCG@10"] == pytest.approx(metrics["nDCG@10"], abs=1e-12)
    assert row["R@100"] == pytest.approx(metrics["R@100"], abs=1e-12)
    assert table.set_index("name").loc["bm25", "nDCG@10"] > 0.5  # PISA's BM25 on SciFact (BEIR reports 0.665)
