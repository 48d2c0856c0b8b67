"""Training inputs refused before the first step (found by a bad-input review): distillation groups that
cannot be completed with teacher scores, and max lengths above the model's positions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.train import train  # noqa: E402
from spladekit.train.data import check_distillation, global_batch  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402


def test_distillation_with_too_few_scored_negatives_is_refused_before_out(tmp_path):
    """3 hard negatives a query and num_negatives 4: global_batch would complete each group with another
    query's positive, which has no teacher score for it, and fail at a step; train refuses first, naming
    the data and the field, and writes nothing."""
    model = make_tiny_model(tmp_path / "m")
    examples = make_examples(n=8, negatives=3)
    config = tiny_config(model, loss__kind="margin_mse", data__num_negatives=4, data__path="mined/dataset")
    with pytest.raises(ValueError, match="teacher scores for every sampled document"):  # what the step would do
        global_batch(examples, 0, 4, 4, 0, need_teacher=True)
    out = tmp_path / "out"
    with pytest.raises(
        DataFormatError,
        match=r"mined/dataset: field 'data.num_negatives': query 'q\d+' has 3 hard "
        r"negatives, data.num_negatives is 4 \(8 queries have fewer\)",
    ):
        train(config, out, examples=examples, show_progress=False)
    assert not out.exists()
    check_distillation(examples, 3, "ok")  # 3 scored negatives each: nothing to say


def test_distillation_with_an_unscored_negative_is_refused(tmp_path):
    examples = make_examples(n=4, negatives=3)
    del examples[2].teacher[examples[2].negatives[1][0]]
    with pytest.raises(DataFormatError, match=r"scores.pkl: query 'q2' has no teacher score for document 'n2-1'"):
        check_distillation(examples, 2, "scores.pkl")
    examples[2].teacher = None
    with pytest.raises(DataFormatError, match="query 'q2' has no teacher score for document 'p2'"):
        check_distillation(examples, 2, "scores.pkl")


def test_infonce_pads_short_groups_as_before(tmp_path):
    """The check is for distillation only: InfoNCE completes short groups with random positives."""
    examples = make_examples(n=8, negatives=1)
    batch = global_batch(examples, 0, 4, 3, 0, need_teacher=False)
    assert batch.group == 4 and len(batch.docs) == 16


def test_doc_max_length_above_the_model_positions_is_lowered_to_them(tmp_path):
    """The tiny model has 64 positions (make_tiny_model); doc_max_length 65 with a text of over 64 tokens
    made transformers fail at the first step with a tensor-size error. Now the length is lowered to the
    positions with a warning naming the field (as encoding does), and config.yaml and the saved model
    record the length used."""
    import json

    import yaml

    model = make_tiny_model(tmp_path / "m")
    limit = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    examples = make_examples(n=8)
    examples[0].positives[0] = ("p0", " ".join([examples[0].positives[0][1]] * 20))  # > 64 tokens
    config = tiny_config(model, model__doc_max_length=limit + 1, steps=1)
    with pytest.warns(UserWarning, match=rf"model.doc_max_length {limit + 1} exceeds the model's {limit} positions"):
        result = train(config, tmp_path / "out", examples=examples, show_progress=False)
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["model"]["doc_max_length"] == limit
    assert json.loads((result.model_dir / "spladekit.json").read_text())["doc_max_length"] == limit


def _naver(folder: Path, scores: str, qrel: str = '{"1": {"10": 1}}', queries: str = "1\tquery\n") -> Path:
    """A naver/splade layout: qrel/qrel.json, scores/s.json (texts as given), documents 10-13, ``queries``."""
    for sub in ("qrel", "scores", "full_collection", "train_queries"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "qrel" / "qrel.json").write_text(qrel)
    (folder / "scores" / "s.json").write_text(scores)
    (folder / "full_collection" / "raw.tsv").write_text("".join(f"{d}\tdoc {d}\n" for d in range(10, 14)))
    (folder / "train_queries" / "raw.tsv").write_text(queries)
    return folder


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 400])
@pytest.mark.parametrize("where", ["scores", "qrel"])
def test_non_finite_scores_and_grades_are_refused_before_training(tmp_path, value, where):
    """Python's json reads NaN, Infinity and 1e400 as floats (and 10^400 as an int beyond float range): a
    NaN teacher score would poison the loss, a NaN grade silently drop a positive (NaN > 0 is false).
    Refused naming the file and qid.docid, before OUT is made."""
    import json
    import math

    good = '{"1": {"10": 2.5, "11": 0.5}}'
    bad = f'{{"1": {{"10": {value!s}, "11": 0.5}}}}'
    parsed = json.loads(bad)["1"]["10"]  # the premise: json takes it, beyond float range or non-finite
    assert parsed > sys.float_info.max if isinstance(parsed, int) else not math.isfinite(parsed)
    folder = _naver(
        tmp_path / "naver", bad if where == "scores" else good, bad if where == "qrel" else '{"1": {"10": 1}}'
    )
    name = "s.json" if where == "scores" else "qrel.json"
    model = make_tiny_model(tmp_path / "m")
    config = tiny_config(
        model,
        loss__kind="margin_mse",
        data__num_negatives=1,
        data__format="naver",
        data__path=str(folder),
        data__teacher_scores="scores/s.json",
    )
    out = tmp_path / "out"
    with pytest.raises(DataFormatError, match=rf"{name}: field '1\.10': expected a finite number"):
        train(config, out, show_progress=False)
    assert not out.exists()


def test_naver_queries_without_a_pair_are_skipped_with_a_warning(tmp_path):
    """Query 2 is scored but has no relevant document in qrel.json, queries 3 and 4 have relevant
    documents but no teacher scores: each group is named in a warning (count and ids), query 1 is read."""
    from spladekit.train.data import read_naver

    folder = _naver(
        tmp_path,
        '{"1": {"10": 2.0, "11": 1.0}, "2": {"12": 1.0}}',
        '{"1": {"10": 1}, "2": {"12": 0}, "3": {"13": 1}, "4": {"11": 2}}',
        "1\tq one\n2\tq two\n3\tq three\n4\tq four\n",
    )
    with pytest.warns(UserWarning) as caught:
        examples = read_naver(folder, folder / "scores" / "s.json")
    assert [e.qid for e in examples] == ["1"]
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "s.json: 1 queries scored in s.json without a relevant document in qrel.json skipped" in messages[0]
    assert "e.g. '2'; 1 queries read" in messages[0]
    assert "s.json: 2 queries with a relevant document in qrel.json but no entry in s.json skipped" in messages[1]
    assert "e.g. '3', '4'; 1 queries read" in messages[1]


def _beir(folder: Path) -> Path:
    """Four documents, two training queries (q1: d1 relevant, q2: d4 relevant)."""
    import json

    docs = {"d1": "apple banana fruit", "d2": "apple pie recipe", "d3": "car engine oil", "d4": "banana bread"}
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in (("q1", "apple banana"), ("q2", "banana bread")))
    )
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\n")
    return folder


@pytest.mark.parametrize(
    "scores, words",
    [
        ('{"q1": {"d1": 1.0}, "q9": {"d2": 0.5}}', r"t.json: field 'q9': query id 'q9' is not a query of .*train.tsv"),
        ('{"q1": {"d1": 1.0, "d7": 0.5}}', r"t.json: field 'q1.d7': document id 'd7' is not in the corpus"),
    ],
)
def test_beir_teacher_scores_with_unknown_ids_are_refused(tmp_path, scores, words):
    from spladekit.train.data import read_beir_training

    folder = _beir(tmp_path / "beir")
    (tmp_path / "t.json").write_text(scores)
    with pytest.raises(DataFormatError, match=words):
        read_beir_training(folder, "train", "none", teacher_scores=tmp_path / "t.json")


def test_beir_teacher_scores_outside_the_miner_are_counted_or_used(tmp_path):
    """BM25 top-1 of q1 ('apple banana') is d2 or d4 (both share a word): d3 (no shared word) is scored but
    never among the miner's documents. With data.negatives bm25 it is left out with a warning that counts
    it; with data.negatives teacher every scored non-relevant document is a negative, in the file's order;
    the refusal of a query short of negatives says why."""
    from spladekit.index.bm25 import bm25_search
    from spladekit.train.data import read_beir_training

    folder = _beir(tmp_path / "beir")
    teacher = tmp_path / "t.json"
    teacher.write_text('{"q1": {"d1": 3.0, "d3": 1.0, "d2": 2.0}, "q2": {"d4": 3.0, "d3": 0.5}}')
    docs = ["d1", "d2", "d3", "d4"]
    texts = ["apple banana fruit", "apple pie recipe", "car engine oil", "banana bread"]
    top = {
        q: [docs[i] for i, _ in bm25_search([text], texts, k=4)[0]]
        for q, text in (("q1", "apple banana"), ("q2", "banana bread"))
    }
    expect_bm25 = {"q1": [d for d in top["q1"] if d != "d1"][:1], "q2": [d for d in top["q2"] if d != "d4"][:1]}
    expect_bm25 = {
        q: [d for d in negs if d in ({"d3", "d2"} if q == "q1" else {"d3"})] for q, negs in expect_bm25.items()
    }
    assert "d3" not in expect_bm25["q1"] + expect_bm25["q2"]  # the premise: d3 is outside BM25's top-1
    left_out = (2 - len(expect_bm25["q1"])) + (1 - len(expect_bm25["q2"]))
    with pytest.warns(
        UserWarning,
        match=rf"t.json: {left_out} of the 3 scored non-relevant documents of 2 queries "
        r"\(\d queries affected\) are not among the bm25 miner's top-1",
    ):
        examples = read_beir_training(folder, "train", "bm25", depth=1, teacher_scores=teacher)
    assert {e.qid: [d for d, _ in e.negatives] for e in examples} == expect_bm25
    used = read_beir_training(folder, "train", "teacher", depth=1, teacher_scores=teacher)
    assert {e.qid: [d for d, _ in e.negatives] for e in used} == {"q1": ["d3", "d2"], "q2": ["d3"]}
    assert used[0].teacher == {"d1": 3.0, "d3": 1.0, "d2": 2.0}
    with pytest.raises(ValueError, match="data.negatives='teacher' needs data.teacher_scores"):
        read_beir_training(folder, "train", "teacher")

    model = make_tiny_model(tmp_path / "m")
    config = tiny_config(
        model,
        loss__kind="margin_mse",
        data__num_negatives=1,
        data__format="beir",
        data__path=str(folder),
        data__negatives="bm25",
        data__mining_depth=1,
        data__teacher_scores=str(teacher),
    )
    assert min(len(v) for v in expect_bm25.values()) == 0  # a query left with no negative
    with (
        pytest.warns(UserWarning),
        pytest.raises(
            DataFormatError,
            match=r"has 0 hard negatives.*the bm25 miner's "
            r"top-1 documents that have a teacher score.*data.negatives: teacher",
        ),
    ):
        train(config, tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out").exists()
