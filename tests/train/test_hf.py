"""Hugging Face ``datasets`` as training input: each sentence-transformers column layout, saved to a
local file and read back, gives the same examples as the equivalent BEIR / triples TSV / naver files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from spladekit.errors import DataFormatError, ResolutionError  # noqa: E402
from spladekit.train.config import DataConfig  # noqa: E402
from spladekit.train.data import iter_triples, load_training_examples, read_beir_training, read_naver, split_validation  # noqa: E402
from tests.train_helpers import make_tiny_model, tiny_config  # noqa: E402

QUERIES = ["w1 w2", "w3 w4 w5", "w6", "w7 w8", "w9 w10 w11"]
POS = ["w1 w2 w20", "w3 w21 w5", "w6 w22 w23", "w7 w8 w24", "w9 w25"]
NEGS = [[f"w{30 + 3 * i + k} w{60 + i}" for k in range(3)] for i in range(5)]
SCORES = [
    [9.5, 3.0, 1.25, -2.0],
    [7.0, 6.5, 0.5, 0.0],
    [4.0, 1.0, 2.0, 3.0],
    [8.0, -1.0, -1.5, -3.0],
    [5.5, 5.0, 4.5, 4.0],
]


def _config(path, **more) -> DataConfig:
    return DataConfig(format="hf", path=str(path), **more)


def _texts(examples):
    return [(e.query, [t for _, t in e.positives], [t for _, t in e.negatives]) for e in examples]


def _by_text(example) -> dict[str, float]:
    docs = dict(example.positives + example.negatives)
    return {docs[d]: s for d, s in example.teacher.items()}


def test_pairs_equal_beir_training_qrels(tmp_path):
    """(anchor, positive) pairs ≡ a BEIR folder with train qrels (in-batch negatives only)."""
    path = tmp_path / "pairs.parquet"
    datasets.Dataset.from_dict({"anchor": QUERIES, "positive": POS}).to_parquet(str(path))
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(POS))
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(QUERIES))
    )
    (beir / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(5))
    )
    hf = load_training_examples(_config(path, cache_dir=str(tmp_path / "cache")))
    assert len(hf) == 5
    assert _texts(hf) == _texts(read_beir_training(beir, "train", "none"))
    assert [e.qid for e in hf] == ["0", "1", "2", "3", "4"] and hf[0].teacher is None


def test_triplets_equal_the_triples_tsv(tmp_path):
    """(query, positive, negative) rows in JSONL ≡ an MS MARCO-style triples TSV."""
    path = tmp_path / "triplets.jsonl"
    rows = [{"query": q, "positive": p, "negative": n[0]} for q, p, n in zip(QUERIES, POS, NEGS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tsv = tmp_path / "triples.tsv"
    tsv.write_text("".join(f"{q}\t{p}\t{n[0]}\n" for q, p, n in zip(QUERIES, POS, NEGS)))
    hf = load_training_examples(_config(path, cache_dir=str(tmp_path / "cache")))
    assert _texts(hf) == _texts(iter_triples(tsv))


def _naver(folder: Path, negatives: int = 3) -> Path:
    """The naver/splade layout of the same data: qrel.json, queries, collection, teacher scores (of the
    positive and the first ``negatives`` negatives)."""
    for sub in ("qrel", "train_queries", "full_collection"):
        (folder / sub).mkdir(parents=True)
    collection, qrel, scores = [], {}, {}
    for i in range(5):
        ids = [f"p{i}"] + [f"n{i}-{k}" for k in range(negatives)]
        collection += [f"{d}\t{t}" for d, t in zip(ids, [POS[i]] + NEGS[i][:negatives])]
        qrel[str(i)] = {f"p{i}": 1}
        scores[str(i)] = dict(zip(ids, SCORES[i][: 1 + negatives]))
    (folder / "full_collection" / "raw.tsv").write_text("\n".join(collection) + "\n")
    (folder / "train_queries" / "raw.tsv").write_text("".join(f"{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    (folder / "qrel" / "qrel.json").write_text(json.dumps(qrel))
    (folder / "scores.json").write_text(json.dumps(scores))
    return folder


def test_hard_negatives_with_teacher_scores_equal_naver(tmp_path):
    """(query_id, query, positive, negative_1..3, score=[4 scores]) saved with save_to_disk (arrow)
    ≡ the naver layout with teacher scores."""
    columns = {"query_id": [str(i) for i in range(5)], "query": QUERIES, "positive": POS}
    for k in range(3):
        columns[f"negative_{k + 1}"] = [n[k] for n in NEGS]
    columns["score"] = SCORES
    folder = tmp_path / "hard-negatives"
    datasets.Dataset.from_dict(columns).save_to_disk(str(folder))
    hf = load_training_examples(_config(folder))
    naver_folder = _naver(tmp_path / "naver")
    naver = read_naver(naver_folder, naver_folder / "scores.json")
    assert _texts(hf) == _texts(naver)
    assert [e.qid for e in hf] == [e.qid for e in naver]
    assert [_by_text(e) for e in hf] == [_by_text(e) for e in naver]


def test_margin_labels_give_the_naver_margins(tmp_path):
    """The sentence-transformers MarginMSE label (n margins s⁺ − s⁻_i) as an .arrow file gives the
    margins of the naver teacher scores exactly (differences of the same binary fractions)."""
    columns = {
        "query": QUERIES,
        "positive": POS,
        "negatives": NEGS,  # one list-valued negatives column
        "label": [[s[0] - s[k] for k in (1, 2, 3)] for s in SCORES],
    }
    path = tmp_path / "margins.arrow"
    table = datasets.Dataset.from_dict(columns)
    table.save_to_disk(str(tmp_path / "tmp-save"))
    arrow_file = next((tmp_path / "tmp-save").glob("*.arrow"))
    arrow_file.rename(path)
    hf = load_training_examples(_config(path, cache_dir=str(tmp_path / "cache")))
    naver_folder = _naver(tmp_path / "naver")
    naver = read_naver(naver_folder, naver_folder / "scores.json")
    assert _texts(hf) == _texts(naver)
    for a, b in zip(hf, naver):
        ta, tb = _by_text(a), _by_text(b)
        pos = a.positives[0][1]
        assert {t: ta[pos] - ta[t] for t in ta} == {t: tb[pos] - tb[t] for t in tb}
    # a scalar label with one negative is a margin too (sentence-transformers' MarginMSE layout)
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"query": "w1", "positive": "w1 w2", "negative": "w3", "label": 2.5}) + "\n")
    (example,) = load_training_examples(_config(one, cache_dir=str(tmp_path / "cache")))
    assert example.teacher == {"0+": 0.0, "0-1": -2.5}


def test_columns_mapped_by_config(tmp_path):
    path = tmp_path / "mapped.parquet"
    datasets.Dataset.from_dict(
        {"doc": POS, "extra": ["x"] * 5, "question": QUERIES, "hard": [n[1] for n in NEGS]}
    ).to_parquet(str(path))
    cfg = _config(
        path, cache_dir=str(tmp_path / "cache"), columns={"query": "question", "positive": "doc", "negatives": ["hard"]}
    )
    hf = load_training_examples(cfg)
    assert _texts(hf) == [(q, [p], [n[1]]) for q, p, n in zip(QUERIES, POS, NEGS)]
    with pytest.raises(DataFormatError, match="no column 'nope'"):
        load_training_examples(_config(path, cache_dir=str(tmp_path / "cache"), columns={"query": "nope"}))


@pytest.mark.parametrize(
    "row, change, words",
    [
        (3, {"positive": ""}, "row 3 (dataset[3]): expected a non-empty text"),
        (1, {"negative_2": None}, "row 1 (dataset[1]): expected a non-empty text"),
        (2, {"score": [1.0, 2.0]}, "row 2 (dataset[2]): 2 score(s) for 1 positive and 3 negative(s)"),
        (4, {"score": [1.0, float("nan"), 0.0, 0.0]}, "row 4 (dataset[4]): expected a finite number, got nan"),
    ],
)
def test_bad_rows_are_named(tmp_path, row, change, words):
    rows = [
        {"query": q, "positive": p, "negative_1": n[0], "negative_2": n[1], "negative_3": n[2], "score": s}
        for q, p, n, s in zip(QUERIES, POS, NEGS, SCORES)
    ]
    rows[row].update(change)
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    field = next(iter(change))
    with pytest.raises(
        DataFormatError,
        match=rf"bad.jsonl: field '{field}': "
        + words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        load_training_examples(_config(path, cache_dir=str(tmp_path / "cache")))


def test_an_empty_negatives_list_is_an_error_when_negatives_are_expected(tmp_path):
    """A list-valued negatives column with an empty list in one row used to pass the check (the
    row then trained on random negatives); and the failed run left OUT/config.yaml behind."""
    from spladekit.train import train

    rows = [{"query": q, "positive": p, "negatives": n} for q, p, n in zip(QUERIES, POS, NEGS)]
    rows[2]["negatives"] = []
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    words = r"bad.jsonl: field 'negatives': row 2 \(dataset\[2\]\): an empty list of hard negatives, but data.num_negatives is 2"
    with pytest.raises(DataFormatError, match=words):
        load_training_examples(_config(path, num_negatives=2, cache_dir=str(tmp_path / "cache")))
    # in-batch negatives only (num_negatives 0): the same rows are fine, row 2 without a hard negative
    plain = load_training_examples(_config(path, num_negatives=0, cache_dir=str(tmp_path / "cache")))
    assert _texts(plain)[2] == (QUERIES[2], [POS[2]], []) and _texts(plain)[1] == (QUERIES[1], [POS[1]], NEGS[1])
    # the check runs before anything is written: no OUT folder, no OUT/config.yaml
    model = make_tiny_model(tmp_path / "model")
    config = tiny_config(
        model,
        steps=1,
        data={"format": "hf", "path": str(path), "num_negatives": 1, "cache_dir": str(tmp_path / "cache")},
    )
    with pytest.raises(DataFormatError, match="row 2 .* an empty list of hard negatives, but data.num_negatives is 1"):
        train(config, tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out").exists()


def test_lazy_view_split_and_streaming(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    datasets.Dataset.from_dict({"query": QUERIES * 4, "positive": POS * 4}).to_parquet(str(folder / "train-0.parquet"))
    plain = load_training_examples(_config(folder, cache_dir=str(tmp_path / "c1")))
    assert len(plain) == 20 and not isinstance(plain, list)  # a view: rows converted on access
    train, val = split_validation(plain, 0.25, seed=0)
    assert len(train) + len(val) == 20 and len(val) == 5
    assert {e.qid for e in train}.isdisjoint({e.qid for e in val})
    assert sorted(int(e.qid) for e in list(train) + list(val)) == list(range(20))  # row numbers kept
    streamed = load_training_examples(_config(folder, streaming=True, cache_dir=str(tmp_path / "c2")))
    assert _texts(streamed) == _texts(plain)
    first = load_training_examples(_config(folder, streaming=True, max_queries=7, cache_dir=str(tmp_path / "c3")))
    assert _texts(first) == _texts(plain)[:7]


def test_missing_local_source_and_hub_id_offline(tmp_path):
    with pytest.raises(ResolutionError, match="no such file"):
        load_training_examples(_config(tmp_path / "none.parquet"))
    # a hub id is a real load_dataset call: offline it fails with a clear error (no mock)
    code = (
        "from spladekit.train.config import DataConfig\nfrom spladekit.train.data import load_training_examples\n"
        "from spladekit.errors import ResolutionError\n"
        "try:\n    load_training_examples(DataConfig(format='hf', path='spladekit-test/no-such-dataset'))\n"
        "except ResolutionError as exc:\n    print('RESOLUTION', exc)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "RESOLUTION data.path spladekit-test/no-such-dataset" in out.stdout, out.stdout + out.stderr


def test_training_on_a_dataset_with_margin_mse(tmp_path):
    """MarginMSE on a dataset (query, positive, negative_1, score = [s⁺, s⁻]) trains as on the naver
    layout of the same texts and teacher scores: the same loss at every step, bit for bit (the same
    examples in the same order, the same teacher margins s⁺ − s⁻ from the same numbers, the same seed);
    and the teacher's scores are what the loss uses (another s⁻ gives another loss from step 1)."""
    from spladekit.train import train

    model = make_tiny_model(tmp_path / "model")
    path = tmp_path / "hard.parquet"
    columns = {"query": QUERIES, "positive": POS, "negative_1": [n[0] for n in NEGS], "score": [s[:2] for s in SCORES]}
    datasets.Dataset.from_dict(columns).to_parquet(str(path))
    config = tiny_config(
        model,
        steps=3,
        loss__kind="margin_mse",
        data={"format": "hf", "path": str(path), "num_negatives": 1, "cache_dir": str(tmp_path / "cache")},
    )
    result = train(config, tmp_path / "out", show_progress=False)
    assert result.steps == 3 and result.model_dir.is_dir()
    naver = _naver(tmp_path / "naver", negatives=1)
    data = {"format": "naver", "path": str(naver), "teacher_scores": str(naver / "scores.json"), "num_negatives": 1}
    train(tiny_config(model, steps=3, loss__kind="margin_mse", data=data), tmp_path / "naver-out", show_progress=False)
    scores = json.loads((naver / "scores.json").read_text())
    for i in range(5):
        scores[str(i)][f"n{i}-0"] += 4.0  # every teacher margin 4 smaller
    (naver / "scores.json").write_text(json.dumps(scores))
    train(tiny_config(model, steps=3, loss__kind="margin_mse", data=data), tmp_path / "other-out", show_progress=False)

    def losses(out: Path) -> list[tuple]:
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        return [(r["step"], r["loss"], r["loss_rank"]) for r in rows if "split" not in r]

    assert [step for step, *_ in losses(tmp_path / "out")] == [1, 2, 3]
    assert losses(tmp_path / "out") == losses(tmp_path / "naver-out")
    assert losses(tmp_path / "other-out")[0][2] != losses(tmp_path / "out")[0][2]
