"""Pruning rules at encoding (spladekit.model.pruning): each rule against a by-hand selection, in the
encoder, recorded in model and index metadata, refused by engine exports, and top-k against
sentence-transformers' ``max_active_dims`` on the same model and texts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spladekit.errors import DataFormatError, UnsupportedModelError
from spladekit.model.encoder import EncoderMetadata, SpladeEncoder
from spladekit.model.pruning import PruningRule, of_record, prune

TEXTS = [
    "protein expression in cells",
    "cancer",
    "the effect of drug dose on blood levels in human patients",
    "x",
    "gene expression and dna rna activity in mouse brain cells",
]


# ----------------------------------------------------------------------------------- by hand
def by_hand(items: list[tuple[int, float]], kind: str, value) -> set[int]:
    """The ids a rule keeps of one row's ``(id, weight)`` pairs, written out from the module's
    definitions with Python floats (double), one term at a time."""
    ranked = sorted(items, key=lambda t: (-t[1], t[0]))  # weight descending, then the lower id
    if kind == "top_k":
        return {i for i, _ in ranked[:value]}
    if kind == "max_ratio":
        top = max((w for _, w in items), default=0.0)
        return {i for i, w in items if w >= value * top}
    if kind == "threshold":
        return {i for i, w in items if w >= value}
    total = 0.0
    for _, w in ranked:
        total += w
    kept, heavier = set(), 0.0
    for i, w in ranked:
        if value < 1 and heavier >= value * total:
            break
        kept.add(i)
        heavier += w
    return kept


def rows_of(matrix: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    return [[(int(j), float(w)) for j, w in zip(matrix[r].indices, matrix[r].data)] for r in range(matrix.shape[0])]


def assert_selected(matrix: sp.csr_matrix, pruned: sp.csr_matrix, kind: str, value) -> None:
    assert pruned.shape == matrix.shape and pruned.dtype == matrix.dtype
    for r, items in enumerate(rows_of(matrix)):
        want = by_hand(items, kind, value)
        row = pruned[r]
        assert set(row.indices.tolist()) == want, (kind, value, r)
        assert (np.diff(row.indices) > 0).all()  # ids ascending
        weights = dict(items)
        assert all(float(w) == weights[int(j)] for j, w in zip(row.indices, row.data))  # kept weights unchanged


def tied_matrix(seed: int, rows: int = 40, cols: int = 30) -> sp.csr_matrix:
    """Random rows whose weights come from a few values (many ties), some rows empty."""
    rng = np.random.default_rng(seed)
    dense = rng.choice([0.25, 0.5, 1.0, 1.5, 2.0, 3.0], size=(rows, cols)).astype(np.float32)
    dense[rng.random((rows, cols)) < 0.6] = 0.0
    dense[rng.random(rows) < 0.1] = 0.0
    return sp.csr_matrix(dense)


def spread_matrix(seed: int, rows: int = 40, cols: int = 50) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.gamma(0.5, 1.0, size=(rows, cols)).astype(np.float32)
    dense[rng.random((rows, cols)) < 0.7] = 0.0
    return sp.csr_matrix(dense)


CASES = [
    ("top_k", 1),
    ("top_k", 3),
    ("top_k", 100),
    ("mass", 0.3),
    ("mass", 0.5),
    ("mass", 0.9),
    ("mass", 1.0),
    ("max_ratio", 0.0),
    ("max_ratio", 0.5),
    ("max_ratio", 1.0),
    ("threshold", 0.0),
    ("threshold", 1.0),
    ("threshold", 0.7),
]


@pytest.mark.parametrize("kind,value", CASES)
@pytest.mark.parametrize("make", [tied_matrix, spread_matrix])
def test_each_rule_keeps_the_by_hand_selection(kind, value, make):
    matrix = make(seed=len(kind) * 100 + int(value * 10))
    assert_selected(matrix, prune(matrix, PruningRule(kind=kind, value=value)), kind, value)


def test_worked_examples():
    # row 0: weights 4 (id 1), 2 (id 2), 1 (id 3), 1 (id 4); mass 8
    # row 2: 3 (id 0), 3 (id 1), 2 (id 5), 1 (id 3); mass 9
    m = sp.csr_matrix(np.array([[0, 4, 2, 1, 1, 0], [0] * 6, [3, 3, 0, 1, 0, 2]], dtype=np.float32))

    def kept(rule):
        return [sorted(prune(m, rule)[r].indices.tolist()) for r in range(3)]

    assert kept("top_k=2") == [[1, 2], [], [0, 1]]
    assert kept("top_k=1") == [[1], [], [0]]  # tie 3 = 3: the lower id
    assert kept("top_k=3") == [[1, 2, 3], [], [0, 1, 5]]  # tie 1 = 1 in row 0: id 3 before id 4
    # 0.75·8 = 6 is reached by 4 + 2; 0.75·9 = 6.75 needs 3 + 3 + 2 (OpenSearch's alpha_mass: 4, 2 | 3, 3)
    assert kept("mass=0.75") == [[1, 2], [], [0, 1, 5]]
    assert kept("mass=0.01") == [[1], [], [0]]  # never empties a non-empty row
    assert kept("max_ratio=0.5") == [[1, 2], [], [0, 1, 5]]  # w >= 2 and w >= 1.5
    assert kept("threshold=2") == [[1, 2], [], [0, 1, 5]]
    assert kept("threshold=2.5") == [[1], [], [0, 1]]


def test_a_row_does_not_depend_on_the_other_rows():
    matrix = spread_matrix(7, rows=30)
    for rule in ("top_k=4", "mass=0.6", "max_ratio=0.3", "threshold=0.5"):
        together = prune(matrix, rule)
        alone = sp.vstack([prune(matrix[r], rule) for r in range(matrix.shape[0])], format="csr")
        assert (together != alone).nnz == 0


def test_none_keeps_everything_and_duplicates_and_zeros_are_handled():
    matrix = spread_matrix(3)
    assert (prune(matrix, None) != matrix).nnz == 0
    # a non-canonical input: repeated entries summed first, explicit zeros are no active term
    coo = sp.coo_matrix(
        (np.array([1.0, 2.0, 0.0, 0.5], dtype=np.float32), (np.array([0, 0, 0, 0]), np.array([3, 3, 1, 2]))),
        shape=(1, 5),
    )
    out = prune(coo, "top_k=5")
    assert out.indices.tolist() == [2, 3] and out.data.tolist() == [0.5, 3.0]


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_hostile_weights_are_refused_naming_row_and_column(bad):
    dense = np.ones((3, 4), dtype=np.float32)
    dense[2, 1] = bad
    with pytest.raises(ValueError, match="row 2 .* column 1"):
        prune(sp.csr_matrix(dense), "top_k=2")


# ----------------------------------------------------------------------------------- the rule itself
@pytest.mark.parametrize(
    "text,record",
    [
        ("top_k=64", {"kind": "top_k", "value": 64}),
        ("mass=0.9", {"kind": "mass", "value": 0.9}),
        ("max_ratio=0", {"kind": "max_ratio", "value": 0.0}),
        ("threshold=0.05", {"kind": "threshold", "value": 0.05}),
    ],
)
def test_rule_text_and_record_round_trip(text, record):
    rule = PruningRule.parse(text)
    assert rule.record() == record
    assert of_record(rule.record()) == rule and of_record(str(rule)) == rule


@pytest.mark.parametrize(
    "bad",
    [
        "top_k=0",
        "top_k=2.5",
        "mass=0",
        "mass=1.01",
        "max_ratio=-0.1",
        "max_ratio=2",
        "threshold=-1",
        "threshold=nan",
        "mass=inf",
        "size=3",
        "top_k",
        "mass=abc",
    ],
)
def test_bad_rules_are_refused_in_one_line(bad):
    with pytest.raises(ValueError) as info:
        PruningRule.parse(bad)
    assert bad in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "record",
    [
        {"kind": "top_k", "value": True},
        {"kind": "top_k"},
        {"kind": "mass", "value": 0.5, "x": 1},
        {"kind": "mass", "value": "0.5x"},
        ["top_k", 3],
    ],
)
def test_bad_records_are_refused(record):
    with pytest.raises(ValueError):
        of_record(record)


# ----------------------------------------------------------------------------------- metadata
def test_model_metadata_records_the_rules_and_refuses_a_bad_one(tmp_path):
    meta = EncoderMetadata(query_pruning=PruningRule(kind="top_k", value=8), doc_pruning="mass=0.9")
    assert meta.query_pruning == {"kind": "top_k", "value": 8} and meta.doc_pruning == {"kind": "mass", "value": 0.9}
    meta.save(tmp_path)
    assert EncoderMetadata.load(tmp_path) == meta
    stored = json.loads((tmp_path / "spladekit.json").read_text())
    for bad in ({"kind": "mass", "value": 2}, "mass=0.9", {"kind": "prune"}):
        (tmp_path / "spladekit.json").write_text(json.dumps(dict(stored, doc_pruning=bad)))
        with pytest.raises(DataFormatError, match="doc_pruning") as info:
            EncoderMetadata.load(tmp_path)
        assert "spladekit.json" in str(info.value)


@pytest.mark.parametrize("kind", ["top_k", "threshold", "mass"])
def test_a_rule_value_past_float_range_is_refused_naming_the_field(tmp_path, kind):
    # JSON reads a 400-digit number as a Python int: float() of it raises OverflowError, which
    # pydantic does not turn into a validation error
    huge = "1" + "0" * 400
    (tmp_path / "spladekit.json").write_text(f'{{"doc_pruning": {{"kind": "{kind}", "value": {huge}}}}}')
    with pytest.raises(DataFormatError, match="doc_pruning") as info:
        EncoderMetadata.load(tmp_path)
    assert "spladekit.json" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="401 digits|finite"):
        PruningRule.parse(f"{kind}={huge}")


# ----------------------------------------------------------------------------------- the encoder
@pytest.fixture(scope="module")
def plain(tiny_bert_dir):
    return SpladeEncoder.from_pretrained(tiny_bert_dir, batch_size=2, head_impl="plain", device="cpu")


def test_encoder_applies_each_sides_rule_after_its_top_k(tiny_bert_dir, plain):
    pruned = SpladeEncoder.from_pretrained(
        tiny_bert_dir,
        batch_size=2,
        head_impl="plain",
        device="cpu",
        doc_top_k=40,
        query_pruning="max_ratio=0.6",
        doc_pruning=PruningRule(kind="mass", value=0.5),
    )
    assert pruned.metadata.doc_pruning == {"kind": "mass", "value": 0.5}
    # the same model, texts and batches: the same float32 vectors (one computation), then the rule
    full_d, full_q = plain.encode_documents(TEXTS), plain.encode_queries(TEXTS)
    want_d = prune(prune(full_d, "top_k=40"), "mass=0.5")
    assert (pruned.encode_documents(TEXTS) != want_d).nnz == 0
    assert (pruned.encode_queries(TEXTS) != prune(full_q, "max_ratio=0.6")).nnz == 0
    assert want_d.nnz < full_d.nnz / 2  # the rule did prune


def test_an_inference_free_query_side_is_pruned_too(plain):
    import torch

    from spladekit.model.inference_free import encode_bag

    weights = torch.rand(plain.vocab_size, generator=torch.Generator().manual_seed(0))
    encoder = SpladeEncoder(
        plain.model, plain.tokenizer, EncoderMetadata(query_pruning="top_k=2"), device="cpu", query_weights=weights
    )
    bag, _ = encode_bag(plain.tokenizer, TEXTS, weights, 64)
    got = encoder.encode_queries(TEXTS)
    assert (got != prune(bag, "top_k=2")).nnz == 0 and got.getnnz(axis=1).max() == 2


def test_saved_model_keeps_its_rules_and_writes_no_sentence_transformers_files(tiny_bert_dir, tmp_path):
    encoder = SpladeEncoder.from_pretrained(tiny_bert_dir, head_impl="plain", device="cpu", doc_pruning="threshold=0.4")
    encoder.save_pretrained(tmp_path / "m")
    meta = EncoderMetadata.load(tmp_path / "m")
    assert meta.doc_pruning == {"kind": "threshold", "value": 0.4} and meta.query_pruning is None
    assert "threshold=0.4" in meta.extra["sentence_transformers"]
    assert not (tmp_path / "m" / "modules.json").exists()  # SparseEncoder would give the unpruned vectors
    again = SpladeEncoder.from_pretrained(tmp_path / "m", head_impl="plain", device="cpu")
    assert again.metadata.doc_pruning == meta.doc_pruning


@pytest.mark.parametrize("engine", ["fastembed", "opensearch"])
def test_engine_exports_refuse_a_rule_by_name(tiny_bert_dir, tmp_path, engine):
    from spladekit.model.engines import export_for_engine

    encoder = SpladeEncoder.from_pretrained(tiny_bert_dir, head_impl="plain", device="cpu", query_pruning="top_k=8")
    with pytest.raises(UnsupportedModelError, match="query_pruning top_k=8"):
        export_for_engine(engine, encoder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------- sentence-transformers
@pytest.fixture(scope="module")
def st_folder(tiny_bert_dir, tmp_path_factory):
    """The tiny model with its [PAD] column switched off (as training's suppress_pad does), saved with
    sentence-transformers' module files: spladekit zeroes [PAD] in its output, SparseEncoder does not."""
    import torch

    encoder = SpladeEncoder.from_pretrained(tiny_bert_dir, head_impl="plain", device="cpu")
    with torch.no_grad():
        encoder.model.mlm.cls.predictions.decoder.bias[encoder.tokenizer.pad_token_id] = -1e4
    folder = tmp_path_factory.mktemp("st") / "m"
    encoder.save_pretrained(folder)
    return folder


def test_top_k_equals_sentence_transformers_max_active_dims(st_folder):
    from sentence_transformers import SparseEncoder

    k = 5
    model = SparseEncoder(str(st_folder), device="cpu")
    theirs_full = model.encode_document(TEXTS, convert_to_tensor=True).to_dense().numpy()
    theirs = model.encode_document(TEXTS, convert_to_tensor=True, max_active_dims=k).to_dense().numpy()
    assert (np.count_nonzero(theirs_full, axis=1) > k).all()
    # the rule on sentence-transformers' own vectors selects what max_active_dims selects: equal by construction
    np.testing.assert_array_equal(prune(sp.csr_matrix(theirs_full), f"top_k={k}").toarray(), theirs)

    # end to end: spladekit's encoder with the rule against SparseEncoder with max_active_dims. The full
    # vectors differ by float32 rounding only, at most `err` anywhere; where a row's k-th and (k+1)-th
    # largest weights are more than 2·err apart, both select the same k terms.
    ours_full = (
        SpladeEncoder.from_pretrained(st_folder, head_impl="plain", device="cpu").encode_documents(TEXTS).toarray()
    )
    err = float(np.abs(ours_full - theirs_full).max())
    assert err < 1e-4  # (their agreement itself: tests/model/test_folders.py, with a derived bound)
    ours = (
        SpladeEncoder.from_pretrained(st_folder, head_impl="plain", device="cpu", doc_pruning=f"top_k={k}")
        .encode_documents(TEXTS)
        .toarray()
    )
    checked = 0
    for r in range(len(TEXTS)):
        ranked = np.sort(theirs_full[r])[::-1]
        if ranked[k - 1] - ranked[k] > 2 * err:
            assert set(np.flatnonzero(ours[r])) == set(np.flatnonzero(theirs[r]))
            np.testing.assert_allclose(ours[r], theirs[r], rtol=0, atol=err)
            checked += 1
    assert checked >= len(TEXTS) - 1


# ----------------------------------------------------------------------------------- index
def test_index_config_refuses_a_bad_rule_naming_the_option():
    from spladekit.index.builder import IndexConfig

    with pytest.raises(ValueError, match="--doc-pruning: pruning rule 'mass=2'"):
        IndexConfig(model="m", data="d", out="o", doc_pruning="mass=2")


def test_index_records_the_rules_and_encodes_queries_with_them(tiny_bert_dir, tiny_beir, tmp_path, plain):
    from spladekit import load_beir
    from spladekit.index.builder import IndexConfig, build_index
    from spladekit.index.index import Index

    model = tmp_path / "model"
    SpladeEncoder.from_pretrained(
        tiny_bert_dir, head_impl="plain", device="cpu", query_pruning="top_k=3"
    ).save_pretrained(model)
    out = build_index(
        IndexConfig(
            model=str(model), data=str(tiny_beir), out=str(tmp_path / "idx"), doc_pruning="mass=0.4", head_impl="plain"
        )
    )
    record = json.loads((out / "index.json").read_text())
    assert record["doc_pruning"] == {"kind": "mass", "value": 0.4} and record["query_pruning"] == {
        "kind": "top_k",
        "value": 3,
    }
    assert record["config"]["doc_pruning"] == "mass=0.4"
    index = Index.open(out)
    corpus = load_beir(str(tiny_beir), split="test").corpus
    stored = index.docs[[index.doc_ids.index(doc_id) for doc_id in corpus]]
    # the index's one chunk is one batch of 32: the same batch gives the same float32 vectors
    want = prune(plain.encode_documents(list(corpus.values()), batch_size=32), "mass=0.4")
    assert (stored != want).nnz == 0
    result = index.search(["protein expression in cells"], k=3)
    assert result.settings.query_pruning == {"kind": "top_k", "value": 3}
    assert result.queries.getnnz(axis=1).tolist() == [3]


def test_a_hostile_index_json_rule_is_refused_naming_the_field(tmp_path):
    from spladekit.index.search import check_query_settings

    with pytest.raises(DataFormatError, match="query_pruning") as info:
        check_query_settings({"query_pruning": {"kind": "top_k", "value": -3}}, tmp_path / "index.json")
    assert "index.json" in str(info.value)


def test_an_onnx_export_carries_the_rules_and_its_encoder_applies_them(tiny_bert_dir, tmp_path):
    pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install 'spladekit[onnx]')")
    from spladekit.model.onnx_export import OnnxSpladeEncoder, export_onnx

    encoder = SpladeEncoder.from_pretrained(
        tiny_bert_dir, head_impl="plain", device="cpu", doc_pruning="top_k=4", query_pruning="threshold=0.5"
    )
    folder = export_onnx(encoder, tmp_path / "x")
    onnx = OnnxSpladeEncoder.from_pretrained(folder)
    assert (onnx.metadata.query_pruning, onnx.metadata.doc_pruning) == (
        encoder.metadata.query_pruning,
        encoder.metadata.doc_pruning,
    )
    docs = onnx.encode_documents(TEXTS)
    assert docs.getnnz(axis=1).max() == 4
    assert (docs != prune(docs, "top_k=4")).nnz == 0 and (onnx.encode_queries(TEXTS).data >= 0.5).all()
    again = OnnxSpladeEncoder.from_pretrained(folder, doc_pruning="mass=0.3")  # an argument replaces the folder's
    assert again.metadata.doc_pruning == {"kind": "mass", "value": 0.3}
