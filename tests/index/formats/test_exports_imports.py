"""Exports/imports: Anserini (documents, pre-encoded queries), Seismic JSONL, Qdrant, Elasticsearch.

Expected values are computed by hand or from the stated rules; Seismic and Qdrant (local mode)
score the exported vectors as second tools.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from spladekit.errors import DataFormatError
from spladekit.index.export import export_vectors, import_vectors
from spladekit.index.formats import ExportManifest, anserini, elastic, normalise_entries, qdrant, quantise

VOCAB = ["[PAD]", "a", "b", "c.d", "e", "100%", "##f", "g", "%2E", "h"]


def random_matrix(rows: int, cols: int, density: float = 0.3, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    m = sp.random(rows, cols, density=density, format="csr", random_state=rng, dtype=np.float32)
    m.data = (m.data * 3).astype(np.float32)
    return m


# ------------------------------------------------------------------ shared rules
def test_normalise_sorts_and_sums_repeats():
    idx, val = normalise_entries([7, 2, 7, 5, 2], [0.5, 1.0, 0.25, 0.0, 2.0])
    assert idx.tolist() == [2, 7]  # 5 has weight 0: dropped
    assert val.tolist() == [3.0, 0.75]


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=50.0, allow_nan=False), st.sampled_from([1.0, 10.0, 100.0, 1000.0, 3.0]))
def test_quantisation_rule(w, scale):
    q = int(quantise(np.array([w], dtype=np.float32), scale)[0])
    w32 = float(np.float32(w))
    if w32 >= 1.0 / scale:
        assert q >= 1  # no term with weight ≥ 1/scale is dropped
    if q == 0:
        assert w32 < 0.5 / scale + 1e-12
    else:
        assert abs(q / scale - w32) <= 0.5 / scale + 1e-9


def test_quantisation_by_hand():
    assert quantise(np.array([0.004, 0.005, 0.0149, 0.015, 1.234]), 100).tolist() == [0, 1, 1, 2, 123]
    with pytest.raises(ValueError):
        quantise(np.array([1.0]), 0)


# ------------------------------------------------------------------ Anserini documents
def test_json_vector_collection_by_hand(tmp_path):
    m = sp.csr_matrix(np.array([[0, 0.123, 0, 0.004, 0.01, 0, 0, 0, 0, 0], [0] * 10], dtype=np.float32))
    manifest = export_vectors("anserini", tmp_path / "exp", m, ["d1", "d2"], VOCAB, scale=100)
    lines = (tmp_path / "exp" / "docs.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"id": "d1", "contents": "", "vector": {"a": 12, "e": 1}}  # c.d: 0.4 → 0, dropped
    assert json.loads(lines[1]) == {"id": "d2", "contents": "", "vector": {}}
    assert ExportManifest.load(tmp_path / "exp").scale == 100 == manifest.scale
    (tmp_path / "exp" / "export.json").write_text("{not json")  # a damaged manifest names the file
    with pytest.raises(DataFormatError, match=r"export.json, line 1: not valid JSON"):
        ExportManifest.load(tmp_path / "exp")
    (tmp_path / "exp" / "export.json").write_text("[1]")
    with pytest.raises(DataFormatError, match=r"export.json: expected a JSON object"):
        ExportManifest.load(tmp_path / "exp")


def test_json_vector_collection_round_trip(tmp_path):
    m = random_matrix(30, len(VOCAB)).tolil()
    m[3, 4] = 0.01  # exactly 1/scale: kept
    m[4, 2] = 0.0049  # < 1/(2 scale): dropped
    m = m.tocsr()
    ids = [f"doc.{i}" for i in range(30)]
    export_vectors("anserini", tmp_path / "exp", m, ids, VOCAB, scale=100)
    back, back_ids = import_vectors("anserini", tmp_path / "exp", VOCAB)  # scale read from export.json
    assert back_ids == ids
    diff = np.abs(back.toarray() - m.toarray())
    assert diff.max() <= 0.5 / 100 + 1e-6
    dense = m.toarray()
    assert np.all(back.toarray()[dense >= 0.01] > 0)
    assert back[3, 4] == pytest.approx(0.01) and back[4, 2] == 0


def test_json_vector_collection_repeated_key_and_errors(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "x", "vector": {"b": 5, "a": 2, "b": 3}}\n{"id": "y", "vector": {"zzz": 1}}\n')
    with pytest.raises(DataFormatError, match=r"line 2.*zzz"):
        anserini.read_json_vector_collection(path, VOCAB, scale=10)
    path.write_text('{"id": "x", "vector": {"b": 5, "a": 2, "b": 3}}\n')
    m, ids, _ = anserini.read_json_vector_collection(path, VOCAB, scale=10)
    assert m.indices.tolist() == [1, 2] and np.allclose(m.data, [0.2, 0.8])  # b: 5 + 3 summed
    path.write_text('{"id": "x"}\n')
    with pytest.raises(DataFormatError, match="vector"):
        anserini.read_json_vector_collection(path, VOCAB)
    path.write_text('{"id": "x", "vector": {}}\n5\n')  # a JSON line that is not an object
    with pytest.raises(DataFormatError, match=r"line 2: expected a JSON object, got int"):
        anserini.read_json_vector_collection(path, VOCAB)


# ------------------------------------------------------------------ Anserini queries
def test_preencoded_queries_by_hand(tmp_path):
    m = sp.csr_matrix(np.array([[0, 0, 0.024, 0, 0.011, 0, 0, 0, 0, 0], [0] * 10], dtype=np.float32))
    written = anserini.write_preencoded_queries(tmp_path / "q.tsv", m, ["q1", "q2"], VOCAB, scale=100)
    # q2 has no term: left out (Anserini's TsvString reader fails the whole run on "q2<TAB>")
    assert (tmp_path / "q.tsv").read_text() == "q1\tb b e\n"
    assert (written.count, written.empty, written.pruned) == (1, ["q2"], [])
    # interleaved, unsorted repeats are merged: b×2, a×1
    (tmp_path / "r.tsv").write_text("q9\tb a b\n")
    back, ids = anserini.read_preencoded_queries(tmp_path / "r.tsv", VOCAB, scale=1)
    assert ids == ["q9"] and back.indices.tolist() == [1, 2] and back.data.tolist() == [1.0, 2.0]


def test_preencoded_queries_round_trip(tmp_path, capsys):
    m = random_matrix(20, len(VOCAB), seed=3).tolil()
    m[7, :] = 0
    m[7, 1] = 0.009  # rounds to 0 at scale 50: an empty query
    m = m.tocsr()
    ids = [str(i) for i in range(20)]
    manifest = export_vectors("anserini-queries", tmp_path / "exp", m, ids, VOCAB, scale=50)
    assert manifest.count == 19 and manifest.options["empty_queries"] == ["7"]
    assert ExportManifest.load(tmp_path / "exp").options["empty_queries"] == ["7"]
    err = capsys.readouterr().err
    assert "1 queries with no term" in err and "left out" in err and ": 7 (listed in export.json)" in err
    back, back_ids = import_vectors("anserini-queries", tmp_path / "exp", VOCAB)
    keep = [i for i in range(20) if i != 7]
    assert back_ids == [ids[i] for i in keep]
    assert np.abs(back.toarray() - m.toarray()[keep]).max() <= 0.5 / 50 + 1e-6


def test_preencoded_queries_clause_limit_and_top_k(tmp_path):
    vocab = [f"t{j}" for j in range(1100)]
    m = sp.csr_matrix((np.arange(1, 1101) / 100).astype(np.float32)[None, :])  # 1,100 terms, impacts 1…1100
    with pytest.raises(ValueError, match=r"query 'big' has 1100 distinct terms.*1024-clause limit.*query_top_k"):
        anserini.write_preencoded_queries(tmp_path / "q.tsv", m, ["big"], vocab, scale=100)
    assert not (tmp_path / "q.tsv").exists()  # nothing half-written
    written = anserini.write_preencoded_queries(tmp_path / "q.tsv", m, ["big"], vocab, scale=100, query_top_k=1024)
    assert written.pruned == ["big"]
    back, _ = anserini.read_preencoded_queries(tmp_path / "q.tsv", vocab, scale=100)
    # the 1,024 heaviest (the last columns: weights increase with the column id) are kept
    assert back.indices.tolist() == list(range(76, 1100))
    idx, val = anserini.prune_top_k(np.array([0, 1, 2, 3]), np.array([5, 7, 5, 1]), 2)
    assert idx.tolist() == [0, 1] and val.tolist() == [5, 7]  # tie 5/5: the lower column id wins
    with pytest.raises(ValueError, match="query_top_k"):
        anserini.write_preencoded_queries(tmp_path / "q.tsv", m, ["big"], vocab, query_top_k=2000)


def _shared_trec_files():
    from spladekit.data.resolve import shared_roots

    for root in shared_roots():
        files = sorted((root / "data" / "trec").glob("*.splade-v3.tsv.gz"))
        model = root / "models" / "splade-tiny"
        if len(files) == 2 and model.is_dir():
            return files, model
    pytest.skip("shared data (data/trec/*.splade-v3.tsv.gz, models/splade-tiny) not found; set SPLADEKIT_SHARED")


def test_real_splade_v3_queries_import_and_reexport_identically(tmp_path):
    files, model = _shared_trec_files()
    from spladekit.index.export import model_vocabulary

    vocab = model_vocabulary(model)  # bert-base-uncased vocabulary, as SPLADE-v3's
    for path in files:
        original = gzip.open(path, "rt", encoding="utf-8").read()
        m, ids = anserini.read_preencoded_queries(path, vocab, scale=1)
        assert len(ids) == original.count("\n") and m.nnz > 0
        first_line = original.split("\n", 1)[0].split("\t")[1].split(" ")
        first_token = first_line[0]
        assert m[0, vocab.index(first_token)] == first_line.count(first_token)
        anserini.write_preencoded_queries(tmp_path / "re.tsv", m, ids, vocab, scale=1)
        assert (tmp_path / "re.tsv").read_text(encoding="utf-8") == original


# ------------------------------------------------------------------ Seismic JSONL
def test_seismic_jsonl_round_trip_and_seismic_scores(tmp_path):
    seismic = pytest.importorskip("seismic", reason="pyseismic-lsr not installed")
    m = random_matrix(40, len(VOCAB), seed=5)
    ids = [f"d{i}" for i in range(40)]
    export_vectors("seismic", tmp_path / "exp", m, ids, VOCAB)
    back, back_ids = import_vectors("seismic", tmp_path / "exp", VOCAB)
    assert back_ids == ids and np.array_equal(back.toarray(), m.toarray())
    # Seismic builds from the exported file and scores the dot product over our tokens
    index = seismic.SeismicIndex.build(str(tmp_path / "exp" / "docs.jsonl"))
    S = seismic.get_seismic_string()
    q = np.zeros(len(VOCAB), np.float32)
    q[[2, 3, 8]] = [1.0, 0.5, 2.0]
    hits = index.search(
        "q", np.array([VOCAB[j] for j in (2, 3, 8)], dtype=S), q[[2, 3, 8]], k=40, query_cut=10, heap_factor=1.0
    )
    exact = m.toarray().astype(np.float64) @ q.astype(np.float64)
    # Seismic keeps document values as float16 (nearest: 2^-11 relative, 2^-25 absolute below 2^-14) and
    # the 3-term query as float32, summing in float32 (4 roundings of 2^-24): test_index_seismic.f16_score_tolerance
    assert hits
    for _, score, doc in hits:
        want = exact[ids.index(doc)]
        assert abs(score - want) <= (2.0**-11 + 4 * 2.0**-24) * want + 2.0**-25 * float(q.sum()), (doc, score, want)


# ------------------------------------------------------------------ Qdrant
def test_qdrant_vectors_sorted_unique_and_round_trip(tmp_path):
    unsorted = sp.csr_matrix(
        (np.array([1.0, 2.0, 0.5], np.float32), np.array([7, 2, 7]), np.array([0, 3])), shape=(1, 10)
    )
    assert qdrant.to_sparse_vectors(unsorted) == [{"indices": [2, 7], "values": [2.0, 1.5]}]
    idx, val = qdrant.from_sparse_vector([9, 1, 9], [1.0, 1.0, 0.25])
    assert idx.tolist() == [1, 9] and val.tolist() == [1.0, 1.25]
    m = random_matrix(25, len(VOCAB), seed=7)
    export_vectors("qdrant", tmp_path / "exp", m, [f"d{i}" for i in range(25)], None)
    back, ids = import_vectors("qdrant", tmp_path / "exp", VOCAB)
    assert ids == [f"d{i}" for i in range(25)] and np.array_equal(back.toarray(), m.toarray())


def test_qdrant_local_mode_scores_equal_exact_dot_products():
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client not installed")
    from spladekit.index.exact import exact_search

    docs = random_matrix(60, 40, density=0.15, seed=11).toarray()
    docs[59] = 0  # a document with no active term
    docs[:, 39] = 0  # a term no document has
    docs = sp.csr_matrix(docs)
    queries = random_matrix(6, 40, density=0.1, seed=12).toarray()
    queries[4] = 0  # empty query
    queries[5] = 0
    queries[5, 39] = 1.0  # a query whose only term no document has
    queries = sp.csr_matrix(queries)
    client = qdrant_client.QdrantClient(":memory:")
    qdrant.upload(client, "t", docs, [f"d{i}" for i in range(60)])
    got = qdrant.search(client, "t", queries, k=10)
    want = exact_search(queries, docs, k=10)
    assert got[4] == [] and got[5] == [] and want[4] == [] and want[5] == []
    for g, w in zip(got, want):
        assert [d for d, _ in g] == [d for d, _ in w]
        assert np.allclose([s for _, s in g], [s for _, s in w], rtol=1e-5)


# ------------------------------------------------------------------ Elasticsearch / OpenSearch
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab.%2E5")), min_size=1, max_size=12))
def test_escape_key_is_dot_free_and_reversible(token):
    key = elastic.escape_key(token)
    assert "." not in key and elastic.unescape_key(key) == token


def _es_score(body: dict, source: dict, field: str, mapping: dict) -> float:
    """Reference reading of the Elasticsearch DSL used here (linear rank_feature, bool.should sum),
    with the storage rule of Lucene's FeatureField (9 significant bits, truncated: stored_value)."""
    query = body["query"]
    if "match_none" in query:
        return 0.0
    stored = lambda key: float(elastic.stored_value(source[field][key])) if key in source[field] else 0.0  # noqa: E731
    if "sparse_vector" in query:
        assert query["sparse_vector"]["prune"] is False  # pruning would drop query tokens
        assert mapping["mappings"]["properties"][field]["index_options"] == {"prune": False}
        vec = query["sparse_vector"]["query_vector"]
        return sum(w * stored(k) for k, w in vec.items())
    total = 0.0
    for clause in query["bool"]["should"]:
        rf = clause["rank_feature"]
        assert rf["linear"] == {} and rf["field"].startswith(field + ".")
        key = rf["field"][len(field) + 1 :]
        assert "." not in key
        total += rf["boost"] * stored(key)
    return total


def test_feature_field_storage_rule_by_hand():
    # 0.1f = 0x3DCCCCCD; clearing the low 15 bits gives 0x3DCC8000 = 0.0998535156 (Lucene stores that)
    assert (
        float(elastic.stored_value(0.1))
        == np.float32(np.uint32(0x3DCC8000).view(np.float32))
        == pytest.approx(0.0998535156)
    )
    assert float(elastic.stored_value(1.5)) == 1.5  # 9 significant bits hold 1.5 exactly
    w = np.random.default_rng(0).uniform(1e-3, 10, 10_000).astype(np.float32)
    rel = (w - elastic.stored_value(w)) / w
    assert rel.min() >= 0 and rel.max() < 2.0**-8 and rel.max() > 2.0**-9  # truncation, bound 2⁻⁸ reached


@pytest.mark.parametrize("keys", ["token", "id"])
@pytest.mark.parametrize("field_type", ["rank_features", "sparse_vector"])
def test_elastic_bulk_round_trip_and_query_scores_dot_product(tmp_path, keys, field_type):
    m = random_matrix(15, len(VOCAB), seed=13).tolil()
    m[0, 3] = 1.5  # "c.d" has a dot
    m[0, 8] = 0.5  # "%2E" must not collide with "."-escapes
    m = m.tocsr()
    ids = [f"d{i}" for i in range(15)]
    export_vectors("elastic", tmp_path / "exp", m, ids, VOCAB, keys=keys, field_type=field_type)
    assert (
        json.loads((tmp_path / "exp" / "mapping.json").read_text())["mappings"]["properties"]["splade"]["type"]
        == field_type
    )
    back, back_ids = import_vectors("elastic", tmp_path / "exp", VOCAB)
    assert back_ids == ids and np.array_equal(back.toarray(), m.toarray())
    lines = (tmp_path / "exp" / "bulk.ndjson").read_text().splitlines()
    sources = [json.loads(line) for line in lines[1::2]]
    assert all("." not in key for s in sources for key in s["splade"])
    q = random_matrix(1, len(VOCAB), density=0.5, seed=14)
    body = elastic.query_body(q, VOCAB, field_type=field_type, keys=keys)
    mapping = json.loads((tmp_path / "exp" / "mapping.json").read_text())
    scores = np.array([_es_score(body, s, "splade", mapping) for s in sources])
    stored = m.copy()
    stored.data = elastic.stored_value(stored.data)
    assert np.allclose(scores, (stored @ q.T).toarray().ravel(), rtol=1e-6)
    # against the exact dot product: every stored d_j is within (1 − 2⁻⁸, 1] of d_j, weights are positive
    exact = (m @ q.T).toarray().ravel()
    assert np.all(scores <= exact * (1 + 1e-6)) and np.all(scores >= exact * (1 - 2.0**-8) - 1e-6)
    assert elastic.query_body(sp.csr_matrix((1, len(VOCAB))), VOCAB)["query"] == {"match_none": {}}


# ------------------------------------------------------------------ index folder
def test_save_index_merges_repeats_and_loads_old_folders(tmp_path):
    from spladekit.index.index import load_index
    from spladekit.index.layout import content_hash, load_vocabulary
    from spladekit.index.writer import save_index

    raw = sp.csr_matrix(
        (np.array([1.0, 2.0, 0.5, 0.0], np.float32), np.array([4, 1, 4, 2]), np.array([0, 4])), shape=(1, 6)
    )
    save_index(tmp_path / "i", raw, ["d"], {"model": "m"}, vocabulary=list("abcdef"))
    m, ids, meta = load_index(tmp_path / "i")
    assert m.indices.tolist() == [1, 4] and m.data.tolist() == [2.0, 1.5] and meta["nnz"] == 2
    assert load_vocabulary(tmp_path / "i") == list("abcdef")
    with pytest.raises(ValueError, match="vocabulary"):
        save_index(tmp_path / "j", raw, ["d"], {}, vocabulary=["a"])
    # a folder written before vocab.json existed (no vocab.json, no vocab_hash) still loads
    (tmp_path / "i" / "vocab.json").unlink()
    meta = json.loads((tmp_path / "i" / "index.json").read_text())
    del meta["vocab_hash"]
    (tmp_path / "i" / "index.json").write_text(json.dumps(meta))
    assert load_vocabulary(tmp_path / "i") is None and load_index(tmp_path / "i")[2]["content_hash"] == content_hash(
        m, ids
    )
    # a tampered folder is refused (same array shapes, another value)
    np.save(tmp_path / "i" / "docs.data.npy", np.array([9.0, 1.5], np.float32))
    with pytest.raises(DataFormatError, match="content hash"):
        load_index(tmp_path / "i")


# ------------------------------------------------------------------ Milvus rows, pgvector COPY (no engine needed)
def test_pgvector_text_form_is_one_based_and_round_trips(tmp_path):
    from spladekit.index.formats import pgvector

    assert pgvector.sparsevec_text(np.array([0, 3]), np.array([0.5, 2.0], np.float32), 10) == "{1:0.5,4:2.0}/10"
    assert pgvector.sparsevec_text(np.array([], np.int64), np.array([], np.float32), 10) == "{}/10"
    idx, val, dim = pgvector.parse_sparsevec("{4:2,1:0.5,4:1}/10")  # unsorted, repeated: summed
    assert idx.tolist() == [0, 3] and val.tolist() == [0.5, 3.0] and dim == 10
    with pytest.raises(ValueError, match="outside 1…10"):
        pgvector.parse_sparsevec("{0:1}/10")  # 0 is not a valid (1-based) index
    for text in ["a\tb", "back\\slash", "new\nline", "cr\r", "plain"]:
        assert pgvector.copy_unescape(pgvector.copy_escape(text)) == text and "\t" not in pgvector.copy_escape(text)
    m = random_matrix(12, len(VOCAB), seed=21)
    ids = ["a\tb", "c\\d"] + [f"d{i}" for i in range(10)]
    manifest = export_vectors("pgvector", tmp_path / "exp", m, ids, None, table="docs")
    assert (
        manifest.files == ["docs.tsv", "schema.sql"]
        and "sparsevec(10)" in (tmp_path / "exp" / "schema.sql").read_text()
    )
    back, back_ids = import_vectors("pgvector", tmp_path / "exp", VOCAB)
    assert back_ids == ids and np.array_equal(back.toarray(), m.toarray())  # shortest float32 text is exact
    with pytest.raises(ValueError, match="plain identifier"):
        export_vectors("pgvector", tmp_path / "bad", m, ids, None, table="docs; DROP TABLE x")
    wide = sp.csr_matrix((np.ones(1001, np.float32), np.arange(1001), [0, 1001]), shape=(1, 2000))
    with pytest.raises(ValueError, match=r"document 'w' \(row 0\) has 1001 non-zeros.*at most 1000 in an HNSW index"):
        export_vectors("pgvector", tmp_path / "hnsw", wide, ["w"], None, hnsw=True)


def test_milvus_rows_round_trip_and_errors(tmp_path):
    from spladekit.index.formats import milvus

    m = random_matrix(15, len(VOCAB), seed=23)
    manifest = export_vectors("milvus", tmp_path / "exp", m, [f"d{i}" for i in range(15)], None)
    assert manifest.options["metric_type"] == "IP" and manifest.options["drop_ratio_search"] == 0.0
    first = json.loads((tmp_path / "exp" / "rows.jsonl").read_text().splitlines()[0])
    assert (
        first["id"] == 0
        and first["doc_id"] == "d0"
        and first["splade"]["indices"] == sorted(first["splade"]["indices"])
    )
    back, ids = import_vectors("milvus", tmp_path / "exp", VOCAB)
    assert ids == [f"d{i}" for i in range(15)] and np.array_equal(back.toarray(), m.toarray())
    (tmp_path / "bad.jsonl").write_text('{"id": 0, "doc_id": "x", "splade": {"indices": [99], "values": [1.0]}}\n')
    with pytest.raises(DataFormatError, match=r"line 1.*index 99"):
        milvus.read_rows(tmp_path / "bad.jsonl", len(VOCAB))


def test_cli_export_qdrant_idf_writes_the_modifier_and_integer_impacts(tmp_path):
    """``spladekit export --format qdrant --idf --scale 10``: ``collection.json`` says ``modifier: idf``,
    the points carry ``⌊10·w + ½⌋`` (by hand below; impacts of 0 left out), ``export.json`` the scale;
    without ``--idf`` the weights stay floats; ``--idf`` on another format is refused."""
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.index.writer import save_index

    matrix = sp.csr_matrix(np.array([[0, 1.54, 0.04, 0], [2.0, 0, 0.05, 0.26]], dtype=np.float32))
    folder = save_index(tmp_path / "idx", matrix, ["d1", "d2"], {"model": "m"}, vocabulary=["a", "b", "c", "d"])
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "export",
            "--index",
            str(folder),
            "--format",
            "qdrant",
            "--idf",
            "--scale",
            "10",
            "--out",
            str(tmp_path / "exp"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "exp" / "collection.json").read_text()) == {
        "sparse_vectors": {"splade": {"modifier": "idf"}}
    }
    points = [json.loads(line) for line in (tmp_path / "exp" / "points.jsonl").read_text().splitlines()]
    # 1.54·10 + ½ → 15; 0.04·10 + ½ → 0 (left out); 0.05·10 + ½ = 1.0 → 1 (float32 0.05 is above 0.05); 2.6 + ½ → 3
    assert [p["vector"]["splade"] for p in points] == [
        {"indices": [1], "values": [15]},
        {"indices": [0, 2, 3], "values": [20, 1, 3]},
    ]
    manifest = ExportManifest.load(tmp_path / "exp")
    assert manifest.scale == 10 and manifest.options["modifier"] == "idf"
    back, ids = import_vectors("qdrant", tmp_path / "exp", ["a", "b", "c", "d"])
    assert ids == ["d1", "d2"] and np.allclose(back.toarray(), [[0, 1.5, 0, 0], [2.0, 0, 0.1, 0.3]])
    plain = runner.invoke(
        app, ["export", "--index", str(folder), "--format", "qdrant", "--out", str(tmp_path / "plain")]
    )
    assert plain.exit_code == 0, plain.output
    assert json.loads((tmp_path / "plain" / "collection.json").read_text()) == {"sparse_vectors": {"splade": {}}}
    assert json.loads((tmp_path / "plain" / "points.jsonl").read_text().splitlines()[0])["vector"]["splade"][
        "values"
    ] == [float(np.float32(1.54)), float(np.float32(0.04))]
    refused = runner.invoke(
        app, ["export", "--index", str(folder), "--format", "milvus", "--idf", "--out", str(tmp_path / "m")]
    )
    assert refused.exit_code == 2 and "idf (--idf) applies to qdrant only, not to format 'milvus'" in refused.output
    assert not (tmp_path / "m").exists()
