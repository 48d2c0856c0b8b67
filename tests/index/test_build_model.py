"""Index.build records the encoder's model, so the README's Python path (build, then search texts) works
(a fresh user found index.json's model null and search refusing text queries)."""

from __future__ import annotations

import json

import pytest

from spladekit import Index, SpladeEncoder, load_beir
from spladekit.errors import ResolutionError


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


def test_an_index_built_with_an_encoder_searches_texts_with_it_without_loading_the_model_again(
    tiny_bert_dir, tiny_beir, tmp_path, monkeypatch
):
    """Loads of the model counted through ``SpladeEncoder.from_pretrained`` (the real loader, wrapped):
    build then search loads it once; a reopened folder loads the recorded model once; an index whose
    ``index.json`` names another query model does not search with the build's encoder."""
    loads = []
    real = SpladeEncoder.from_pretrained.__func__

    def counted(cls, *args, **kwargs):
        loads.append(args[0] if args else kwargs.get("model"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(SpladeEncoder, "from_pretrained", classmethod(counted))
    encoder = SpladeEncoder.from_pretrained(str(tiny_bert_dir), head_impl="plain")
    ds = load_beir(str(tiny_beir), split="test")
    index = Index.build(encoder, ds.corpus, tmp_path / "idx")
    built = index.search(ds.queries, k=5)
    assert len(loads) == 1 and index.query_encoder() is encoder
    reopened = Index.open(tmp_path / "idx")
    again = reopened.search(ds.queries, k=5)
    assert len(loads) == 2 and again.run == built.run  # the recorded model, loaded once: the same run
    other = Index.build(encoder, ds.corpus, tmp_path / "other", metadata={"model": str(tmp_path / "another-model")})
    with pytest.raises(
        ResolutionError, match="another-model"
    ):  # index.json names another model: that one is loaded, not the build's encoder
        other.search(ds.queries, k=5)
    assert len(loads) == 3
