"""Index.build records the encoder's model, so the README's Python path (build, then search texts) works
(a fresh user found index.json's model null and search refusing text queries)."""

from __future__ import annotations

import json

from spladekit import Index, SpladeEncoder, load_beir


def test_index_built_from_an_encoder_searches_texts_with_that_model(tiny_bert_dir, tiny_beir, tmp_path):
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert_dir), head_impl="plain")
    ds = load_beir(str(tiny_beir), split="test")
    index = Index.build(encoder, ds.corpus, tmp_path / "idx")
    record = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert record["model"] == str(tiny_bert_dir.resolve()) and record["model_revision"].startswith("sha256:")
    result = index.search(ds.queries, k=5)
    # the same query vectors as the encoder's own, searched exactly: the run equals a by-hand dot product
    q = encoder.encode_queries(list(ds.queries.values()))
    d = encoder.encode_documents(list(ds.corpus.values()))
    scores = (q @ d.T).toarray()
    doc_ids = list(ds.corpus)
    for row, qid in enumerate(ds.queries):
        best = max(range(len(doc_ids)), key=lambda j: (scores[row, j], -j))  # ties: the lower row (ids sorted)
        top = max(result.run[qid].items(), key=lambda kv: kv[1])
        assert abs(top[1] - scores[row, best]) <= 1e-5 * max(1.0, abs(scores[row, best]))  # float32 sums, reordered
