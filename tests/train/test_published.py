"""Published teacher-score files, each written here in the layout its owners document, read to the same
training examples: naver/splade's pkl.gz with qrels and collections, sentence-transformers'
msmarco-hard-negatives (jsonl + scores[qid][pid] pickle), and the id-based margin-MSE columns."""

from __future__ import annotations

import gzip
import json
import pickle
import re
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.train.config import DataConfig  # noqa: E402
from spladekit.train.data import load_training_examples, read_naver  # noqa: E402

QUERIES = {101: "what is a protein", 202: "cancer risk factors", 303: "how vaccines work"}
PASSAGES = {
    1: "proteins are chains of amino acids",
    2: "a protein shake",
    3: "protein folding",
    4: "risk of cancer rises with age",
    5: "cancer cells",
    6: "vaccine trial",
    7: "vaccines train the immune system",
    8: "work from home",
    9: "a risk",
}
POSITIVE = {101: 1, 202: 4, 303: 7}
NEGATIVES = {101: [2, 3, 9], 202: [5, 9, 2], 303: [6, 8, 3]}
SCORES = {
    101: {1: 9.5, 2: 3.25, 3: 1.0, 9: -2.0},
    202: {4: 7.0, 5: 6.5, 9: 0.5, 2: -1.0},
    303: {7: 8.0, 6: 4.0, 8: -3.5, 3: 2.0},
}


def naver(folder: Path) -> Path:
    """naver/splade: ``qrel/qrel.json``, ``train_queries/raw.tsv``, ``full_collection/raw.tsv`` (id<TAB>text)
    and the teacher pickle ``{qid: {pid: score}}`` gzipped (int keys, as the published MS MARCO file)."""
    for sub in ("qrel", "train_queries", "full_collection"):
        (folder / sub).mkdir(parents=True)
    (folder / "qrel" / "qrel.json").write_text(json.dumps({str(q): {str(p): 1} for q, p in POSITIVE.items()}))
    (folder / "train_queries" / "raw.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()))
    (folder / "full_collection" / "raw.tsv").write_text("".join(f"{p}\t{t}\n" for p, t in PASSAGES.items()))
    with gzip.open(folder / "cross-encoder-scores.pkl.gz", "wb") as f:
        pickle.dump(SCORES, f)
    return folder


def st_hard_negatives(folder: Path) -> dict:
    """sentence-transformers' msmarco-hard-negatives: jsonl.gz lines {"qid", "pos", "neg": {system: [pid]}},
    the pickle scores[qid][pid], MS MARCO's collection.tsv and queries.train.tsv."""
    folder.mkdir(parents=True)
    with gzip.open(folder / "msmarco-hard-negatives.jsonl.gz", "wt") as f:
        for q, negs in NEGATIVES.items():  # two systems whose lists overlap (the union is kept, in order)
            f.write(
                json.dumps(
                    {"qid": q, "pos": [POSITIVE[q]], "neg": {"bm25": negs[:2], "msmarco-MiniLM-L-6-v3": negs[1:]}}
                )
                + "\n"
            )
    with gzip.open(folder / "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz", "wb") as f:
        pickle.dump(SCORES, f)
    (folder / "collection.tsv").write_text("".join(f"{p}\t{t}\n" for p, t in PASSAGES.items()))
    (folder / "queries.train.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()))
    return dict(
        format="st-hard-negatives",
        path=str(folder / "msmarco-hard-negatives.jsonl.gz"),
        teacher_scores=str(folder / "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz"),
        corpus=str(folder / "collection.tsv"),
        queries=str(folder / "queries.train.tsv"),
    )


def st_margin_mse(folder: Path) -> dict:
    """sentence-transformers/msmarco ``bert-ensemble-margin-mse`` (query_id, positive_id, negative_id, score =
    s(q, d+) - s(q, d-), ids as strings) with its ``corpus`` (passage_id, passage) and ``queries`` (query_id, query)."""
    folder.mkdir(parents=True)
    rows = [
        {
            "query_id": str(q),
            "positive_id": str(POSITIVE[q]),
            "negative_id": str(n),
            "score": SCORES[q][POSITIVE[q]] - SCORES[q][n],
        }
        for q in NEGATIVES
        for n in NEGATIVES[q]
    ]
    datasets.Dataset.from_list(rows).to_parquet(str(folder / "margin.parquet"))
    datasets.Dataset.from_dict(
        {"passage_id": [str(p) for p in PASSAGES], "passage": list(PASSAGES.values())}
    ).to_parquet(str(folder / "corpus.parquet"))
    datasets.Dataset.from_dict({"query_id": [str(q) for q in QUERIES], "query": list(QUERIES.values())}).to_parquet(
        str(folder / "queries.parquet")
    )
    return dict(
        format="st-margin-mse",
        path=str(folder / "margin.parquet"),
        corpus=str(folder / "corpus.parquet"),
        queries=str(folder / "queries.parquet"),
    )


def by_text(example) -> tuple:
    docs = dict(example.positives + example.negatives)
    return (
        example.query,
        sorted(t for _, t in example.positives),
        sorted(t for _, t in example.negatives),
        {docs[d]: s for d, s in example.teacher.items()},
    )


def test_naver_pickle_and_st_hard_negatives_read_to_the_same_examples(tmp_path):
    ours = read_naver(naver(tmp_path / "naver"), "cross-encoder-scores.pkl.gz")
    st = load_training_examples(DataConfig(**st_hard_negatives(tmp_path / "st")))
    expected = [
        (
            QUERIES[q],
            [PASSAGES[POSITIVE[q]]],
            sorted(PASSAGES[n] for n in NEGATIVES[q]),
            {PASSAGES[p]: s for p, s in SCORES[q].items()},
        )
        for q in QUERIES
    ]
    assert [by_text(e) for e in ours] == expected
    assert [by_text(e) for e in st] == expected
    assert [e.qid for e in st] == ["101", "202", "303"]
    # st negatives keep the systems' order, without repeats: bm25 [2, 3] then MiniLM [3, 9]
    assert [d for d, _ in st[0].negatives] == ["2", "3", "9"]
    only_bm25 = load_training_examples(DataConfig(**st_hard_negatives(tmp_path / "st2"), negative_systems=["bm25"]))
    assert [d for d, _ in only_bm25[0].negatives] == ["2", "3"]


def test_st_lines_without_a_positive_are_counted_not_silently_dropped(tmp_path):
    config = st_hard_negatives(tmp_path / "st")
    path = Path(config["path"])
    lines = gzip.decompress(path.read_bytes()).decode().splitlines(keepends=True)
    empty = json.dumps({"qid": 202, "pos": [], "neg": {"bm25": [5], "msmarco-MiniLM-L-6-v3": [9]}}) + "\n"
    path.write_bytes(gzip.compress("".join(lines[:1] + [empty] + lines[1:] + [empty]).encode()))
    with pytest.warns(UserWarning, match=r"2 line\(s\) without a positive skipped .*lines 2, 5; 3 read"):
        examples = load_training_examples(DataConfig(**config))
    assert [e.qid for e in examples] == ["101", "202", "303"]


def test_margin_mse_ids_resolve_to_the_same_margins(tmp_path):
    margins = load_training_examples(DataConfig(**st_margin_mse(tmp_path / "mm")))
    reference = read_naver(naver(tmp_path / "naver"), "cross-encoder-scores.pkl.gz")
    want = sorted(
        (e.query, e.positives[0][1], text, e.teacher[e.positives[0][0]] - e.teacher[d])
        for e in reference
        for d, text in e.negatives
    )
    got = sorted(
        (e.query, e.positives[0][1], e.negatives[0][1], e.teacher[e.positives[0][0]] - e.teacher[e.negatives[0][0]])
        for e in margins
    )
    assert got == want  # a margin m is stored as teacher scores 0 and -m: 0 - (-m) = m exactly


def test_shared_naver_toy_pickle_equals_its_json(shared):
    """The real naver/splade toy files: scores/toy.pkl.gz reads to the scores of scores/toy.json (the
    toy's query files repeat an id, so its full read_naver is refused: tests/data/test_readers.py)."""
    from spladekit.train.data import read_score_file

    toy = shared / "data" / "splade_toy" / "scores"
    from_pickle, from_json = read_score_file(toy / "toy.pkl.gz"), read_score_file(toy / "toy.json")
    assert len(from_pickle) == 9 and from_pickle == from_json


def test_bad_ids_name_file_and_line(tmp_path):
    config = st_hard_negatives(tmp_path / "st")
    path = Path(config["path"])
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    lines[1] = json.dumps({"qid": 202, "pos": [4], "neg": {"bm25": [77]}})
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(DataFormatError, match=r"msmarco-hard-negatives.jsonl.gz, line 2: field 'neg': passage id '77'"):
        load_training_examples(DataConfig(**config))
    lines[1] = json.dumps({"qid": 999, "pos": [4], "neg": {"bm25": [5]}})
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(DataFormatError, match=r"line 2: field 'qid': query id '999'"):
        load_training_examples(DataConfig(**config))
    lines[1] = json.dumps({"qid": 202, "pos": [4], "neg": {"bm25": [1]}})  # (202, 1) has no teacher score
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(DataFormatError, match=r"line 2: field 'neg': no teacher score for \(qid 202, pid 1\)"):
        load_training_examples(DataConfig(**config))
    mm = st_margin_mse(tmp_path / "mm")
    jsonl = tmp_path / "mm" / "margin.jsonl"
    jsonl.write_text(
        json.dumps({"query_id": "101", "positive_id": "1", "negative_id": "2", "score": 6.25})
        + "\n"
        + json.dumps({"query_id": "101", "positive_id": "1", "negative_id": "404", "score": 1.0})
        + "\n"
    )
    with pytest.raises(DataFormatError, match=r"margin.jsonl, line 2: field 'negative_id': passage id '404'"):
        load_training_examples(DataConfig(**{**mm, "path": str(jsonl)}))
    datasets.Dataset.from_list([{"query_id": "5", "positive_id": "1", "negative_id": "2", "score": 1.0}]).to_parquet(
        mm["path"]
    )
    with pytest.raises(DataFormatError, match=r"row 0: query id '5'"):
        load_training_examples(DataConfig(**mm))
    with gzip.open(tmp_path / "bad.pkl.gz", "wb") as f:
        pickle.dump({1: {2: "high"}}, f)
    with pytest.raises(DataFormatError, match=r"field '1.2': expected a finite number"):
        read_naver(naver(tmp_path / "n2"), str(tmp_path / "bad.pkl.gz"))


# ------------------------------------------------------------------------------------------ hostile pickles
class _WritesMarker:
    """Unpickled by ``pickle.load``, this object runs ``os.system`` (its ``__reduce__``): writes ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def _pickle(path: Path, obj, protocol: int = pickle.HIGHEST_PROTOCOL) -> Path:
    with gzip.open(path, "wb") if path.name.endswith(".gz") else open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return path


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_a_score_pickle_that_would_run_code_is_refused_naming_the_global(tmp_path, protocol):
    import os

    from spladekit.train.data import read_score_file

    marker = tmp_path / "marker"
    path = _pickle(tmp_path / "scores.pkl.gz", {1: {2: _WritesMarker(marker)}}, protocol)
    with pytest.raises(DataFormatError, match=rf"scores.pkl.gz: refused: the pickle names the global {os.name}.system"):
        read_score_file(path)
    assert not marker.exists()
    pickle.loads(gzip.decompress(path.read_bytes()))  # the judge: a plain pickle.load of the same file runs it
    assert marker.exists()


def test_a_pickle_naming_a_missing_module_is_refused_by_name(tmp_path):
    from spladekit.train.published import read_score_pickle

    # protocol 2's GLOBAL opcode naming a module that does not exist: plain pickle raises ModuleNotFoundError
    path = tmp_path / "scores.pkl"
    path.write_bytes(b"\x80\x02}q\x00K\x01}q\x01K\x02cnot_a_module_here\nThing\nq\x02)\x81q\x03ss.")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(path.read_bytes())
    with pytest.raises(DataFormatError, match=r"names the global not_a_module_here.Thing"):
        read_score_pickle(path)


def test_only_numeric_numpy_scalars_pass(tmp_path):
    """np.float32 and np.float64 scores (any protocol) read as the same float64 values; a numpy object
    dtype (a scalar that would wrap any object) is refused, so are numpy arrays."""
    import numpy as np

    from spladekit.train.published import read_score_pickle

    scores = {1: {2: np.float32(0.1), 3: np.float64(0.1), 4: np.int64(-3), 5: 2}}
    for protocol in (0, 2, 5):
        got = read_score_pickle(_pickle(tmp_path / f"p{protocol}.pkl", scores, protocol))
        assert got == {"1": {"2": float(np.float32(0.1)), "3": 0.1, "4": -3.0, "5": 2.0}}
        assert type(got["1"]["2"]) is float
    with pytest.raises(DataFormatError, match=r"names the global numpy.dtype\('O8'\)"):
        read_score_pickle(_pickle(tmp_path / "object.pkl", {1: {2: np.dtype("O")}}))
    with pytest.raises(DataFormatError, match=r"names the global numpy"):
        read_score_pickle(_pickle(tmp_path / "array.pkl", {1: {2: np.ones(3)}}))


def test_containers_older_protocols_build_by_call_are_read(tmp_path):
    """defaultdict / OrderedDict of the published scripts, and sets of protocol 2, need globals: those pass."""
    from collections import OrderedDict, defaultdict

    from spladekit.train.published import read_score_pickle

    scores = defaultdict(dict, {7: OrderedDict([(8, 1.5), (9, -0.25)])})
    for protocol in (0, 2, 5):
        assert read_score_pickle(_pickle(tmp_path / f"d{protocol}.pkl", scores, protocol)) == {
            "7": {"8": 1.5, "9": -0.25}
        }
    with pytest.raises(DataFormatError, match=r"expected a dict \{pid: score\}, got set"):
        read_score_pickle(_pickle(tmp_path / "set.pkl", {1: {2, 3}}, 2))


def test_a_shared_inner_mapping_is_refused(tmp_path):
    """A pickle reference repeats one small mapping under every query: queries × documents scores from a
    small file (the pickle form of a billion-laughs file); score files never share."""
    from spladekit.train.published import read_score_pickle

    inner = {d: 1.0 for d in range(100)}
    path = _pickle(tmp_path / "shared.pkl", {q: inner for q in range(100)})
    with pytest.raises(DataFormatError, match=r"queries '0' and '1' share one mapping"):
        read_score_pickle(path)


@pytest.mark.parametrize("kind", ["pickle", "json"])
@pytest.mark.parametrize("table", ["queries", "documents"])
def test_two_raw_ids_that_are_one_are_refused_naming_both(tmp_path, kind, table):
    """qids 1 and "1", pids "10", " 10" and 10: one id by the one rule (a string without surrounding white
    space), so the file cannot say which score is meant: refused naming both raw ids and the file."""
    from spladekit.train.data import read_score_file

    if table == "queries":
        scores = {1: {2: 1.0}, "1": {3: 2.0}} if kind == "pickle" else {"1": {"2": 1.0}, " 1": {"3": 2.0}}
        (first, second), field = ((1, "'1'") if kind == "pickle" else ("'1'", "' 1'")), "1"
    else:
        scores = {5: {"10": 1.0, " 10": 2.0, 10: 3.0}} if kind == "pickle" else {"5": {"10": 1.0, " 10": 2.0}}
        first, second, field = "'10'", "' 10'", "5.10"
    path = tmp_path / ("scores.pkl" if kind == "pickle" else "scores.json")
    _pickle(path, scores) if kind == "pickle" else path.write_text(json.dumps(scores))
    with pytest.raises(
        DataFormatError,
        match=rf"scores.{'pkl' if kind == 'pickle' else 'json'}: field '{re.escape(field)}': "
        rf"(query|document) ids {re.escape(str(first))} and {re.escape(second)} are one id",
    ):
        read_score_file(path)


def test_ids_are_read_by_one_rule_in_json_and_pickles(tmp_path):
    from spladekit.train.data import read_score_file

    json_path = tmp_path / "scores.json"
    json_path.write_text(json.dumps({" 1": {"10 ": 0.5, "x": 1}}))
    pickled = read_score_file(_pickle(tmp_path / "scores.pkl", {1: {10: 0.5, " x": 1}}))
    assert read_score_file(json_path) == pickled == {"1": {"10": 0.5, "x": 1.0}}
    for bad, why in (
        ({1.0: {2: 1.0}}, "an id is a string or an integer, got float 1.0"),
        ({True: {2: 1.0}}, "got bool True"),
        ({"  ": {2: 1.0}}, "empty id"),
    ):
        with pytest.raises(DataFormatError, match=re.escape(why)):
            read_score_file(_pickle(tmp_path / "bad.pkl", bad))


def test_numbers_beyond_float_range_name_file_and_field(tmp_path):
    """A 400-digit integer (Python's float() raises OverflowError) in a pickle and as a margin-MSE score."""
    from spladekit.train.published import read_score_pickle

    huge = 10**400
    with pytest.raises(DataFormatError, match=r"field '1.2': expected a finite number, got an integer of 401 digits"):
        read_score_pickle(_pickle(tmp_path / "huge.pkl", {1: {2: huge}}))
    mm = st_margin_mse(tmp_path / "mm")
    jsonl = tmp_path / "mm" / "margin.jsonl"
    jsonl.write_text(
        json.dumps({"query_id": "101", "positive_id": "1", "negative_id": "2", "score": 6.25})
        + "\n"
        + '{"query_id": "101", "positive_id": "1", "negative_id": "3", "score": '
        + "9" * 400
        + "}\n"
    )
    with pytest.raises(
        DataFormatError,
        match=r"margin.jsonl, line 2: field 'score': expected a finite number, got an "
        "integer of 400 digits",
    ):
        load_training_examples(DataConfig(**{**mm, "path": str(jsonl)}))


def test_a_beir_corpus_is_read_as_title_and_text(tmp_path):
    """data.corpus given as a BEIR corpus.jsonl (_id, title, text): each passage is BEIR's title + " " + text
    (the encoded text of every BEIR reader here), not the first string column (the titles)."""
    config = st_hard_negatives(tmp_path / "st")
    titles = {p: f"title {p}" for p in PASSAGES}
    corpus = tmp_path / "st" / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": str(p), "title": titles[p], "text": t}) + "\n" for p, t in PASSAGES.items())
    )
    examples = load_training_examples(DataConfig(**{**config, "corpus": str(corpus)}))
    assert {d: t for e in examples for d, t in e.positives + e.negatives} == {
        str(p): f"title {p} {PASSAGES[p]}" for q in QUERIES for p in [POSITIVE[q], *NEGATIVES[q]]
    }
    # the same rule for a dataset with title and text columns; a dataset with two unnamed text columns is refused
    parquet = tmp_path / "st" / "corpus.parquet"
    datasets.Dataset.from_dict(
        {"_id": [str(p) for p in PASSAGES], "title": list(titles.values()), "text": list(PASSAGES.values())}
    ).to_parquet(str(parquet))
    assert load_training_examples(DataConfig(**{**config, "corpus": str(parquet)}))[0].positives == [
        ("1", f"title 1 {PASSAGES[1]}")
    ]
    datasets.Dataset.from_dict(
        {
            "pid": list(PASSAGES),
            "passage_id": [str(p) for p in PASSAGES],
            "head": list(titles.values()),
            "body2": list(PASSAGES.values()),
        }
    ).to_parquet(str(parquet))
    with pytest.raises(DataFormatError, match=r"which column is the text\? string columns \['head', 'body2'\]"):
        load_training_examples(DataConfig(**{**config, "corpus": str(parquet)}))


def test_spladekit_train_on_a_hostile_pickle_ends_in_one_line_before_out(tmp_path):
    """`spladekit train` with data.teacher_scores a pickle that would run a command: one `error:` line, the
    last, naming the file and the global, exit 2, the command never runs and --out is not made."""
    import os
    import subprocess
    import sys

    import yaml

    config = st_hard_negatives(tmp_path / "st")
    marker = tmp_path / "marker"
    _pickle(Path(config["teacher_scores"]), {101: {1: _WritesMarker(marker)}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data": config, "steps": 1}))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "spladekit", "train", str(tmp_path / "c.yaml"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")),
    )
    lines = done.stderr.strip().splitlines()  # the run's progress lines (reading the data), then the error
    errors = [line for line in lines if line.startswith("error:")]
    assert done.returncode == 2 and errors == lines[-1:] and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert errors[0].startswith(
        f"error: {config['teacher_scores']}: refused: the pickle names the global {os.name}.system"
    )
    assert not out.exists() and not marker.exists()
