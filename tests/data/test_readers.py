"""Readers of BEIR, TREC and TSV files: bad input gives a clear error naming file and line; BOM and
CRLF are tolerated; round trips (hypothesis); the real files in ../shared have the documented counts."""

from __future__ import annotations

import gzip
import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spladekit.data.beir import count_corpus, load_beir, read_corpus, read_queries
from spladekit.data.trec import read_qrels, read_run, write_run
from spladekit.data.tsv import read_tsv
from spladekit.errors import DataFormatError
from spladekit.io import iter_lines, write_json

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _jsonl(records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


CORPUS = [{"_id": "d1", "title": "T", "text": "first doc"}, {"_id": "d2", "text": "second — ünïcode"}]


# ---------------------------------------------------------------------------------------- tolerated
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
@pytest.mark.parametrize("gz", [False, True])
def test_bom_and_crlf_read_like_plain_lf(tmp_path, bom, newline, gz):
    body = _jsonl(CORPUS).encode("utf-8").replace(b"\n", newline)
    path = tmp_path / ("corpus.jsonl.gz" if gz else "corpus.jsonl")
    data = bom + body
    path.write_bytes(gzip.compress(data) if gz else data)
    assert read_corpus(path) == {"d1": "T first doc", "d2": "second — ünïcode"}

    qrels = tmp_path / "q.tsv"
    qrels.write_bytes(bom + b"query-id\tcorpus-id\tscore" + newline + b"q1\td1\t2" + newline + b"q1\td2\t0")
    assert read_qrels(qrels) == {"q1": {"d1": 2, "d2": 0}}

    tsv = tmp_path / "t.tsv"
    tsv.write_bytes(bom + b"1\tone" + newline + b"2\ttwo  " + newline)
    assert read_tsv(tsv) == {"1": "one", "2": "two  "}

    run = tmp_path / "run.trec"
    run.write_bytes(bom + b"q1 Q0 d1 1 2.5 x" + newline + b"q1 Q0 d2 2 1.5 x" + newline)
    assert read_run(run) == {"q1": {"d1": 2.5, "d2": 1.5}}


def test_lone_carriage_return_stays_inside_a_line(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_bytes(b"1\tone\rstill one\n2\ttwo\n")
    assert read_tsv(path) == {"1": "one\rstill one", "2": "two"}


# ---------------------------------------------------------------------------------------- invalid UTF-8
@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_the_right_line(tmp_path, gz):
    # The bad byte sits far beyond the first decoding block (8 KiB) so a block decoder would misreport it.
    lines = [json.dumps({"_id": f"d{i}", "text": "x" * 40}).encode() for i in range(3000)]
    bad = 2500
    lines[bad - 1] = b'{"_id": "bad", "text": "caf\xe9"}'
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / ("corpus.jsonl.gz" if gz else "corpus.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(DataFormatError, match="invalid UTF-8") as info:
        read_corpus(path)
    assert info.value.line == bad
    assert str(path) in str(info.value) and f"line {bad}" in str(info.value)


def test_corrupt_gzip_is_a_data_format_error(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(b"this is not gzip data at all")
    with pytest.raises(DataFormatError, match="corrupt"):
        read_corpus(path)


# ---------------------------------------------------------------------------------------- corpus / queries
@pytest.mark.parametrize(
    "bad_line, message, field",
    [
        ("{not json", "not valid JSON", None),
        ('["a list"]', "expected a JSON object", None),
        ('{"text": "no id"}', "missing", "_id"),
        ('{"_id": "d9"}', "missing", "text"),
        ('{"_id": "  ", "text": "empty id"}', "empty id", "_id"),
        ('{"_id": "d9", "text": ["a"]}', "expected a string", "text"),
        ('{"_id": "d9", "title": 3, "text": "t"}', "expected a string", "title"),
        ('{"_id": "d1", "text": "again"}', "duplicate document id", "_id"),
    ],
)
def test_bad_corpus_lines(tmp_path, bad_line, message, field):
    path = tmp_path / "corpus.jsonl"
    path.write_text(_jsonl(CORPUS) + "\n" + bad_line + "\n", encoding="utf-8")  # a blank line 3 is skipped
    with pytest.raises(DataFormatError, match=message) as info:
        read_corpus(path)
    assert info.value.line == 4 and info.value.field == field and info.value.path == path


def test_duplicate_query_id_and_empty_files(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(_jsonl([{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}]), encoding="utf-8")
    with pytest.raises(DataFormatError, match="duplicate query id") as info:
        read_queries(queries)
    assert info.value.line == 2
    for name, reader in [("c.jsonl", read_corpus), ("q.tsv", read_qrels), ("t.tsv", read_tsv), ("r.trec", read_run)]:
        empty = tmp_path / name
        empty.write_text("\n  \n", encoding="utf-8")
        with pytest.raises(DataFormatError, match="empty") as info:
            reader(empty)
        assert info.value.path == empty


# ---------------------------------------------------------------------------------------- qrels
@pytest.mark.parametrize(
    "line, message",
    [
        ("q1\td1\thigh", "is not a number"),
        ("q1\td1\t1_0", "is not a number"),
        ("q1\td1\t1.5", "is not an integer"),
        ("q1\td1\tnan", "is not an integer"),
        ("q1\td1\tinf", "is not an integer"),
        ("q1\td1", "expected 3 .BEIR. or 4 .TREC. columns"),
        ("q1\td1\t1\t2\t3", "expected 3 .BEIR. or 4 .TREC. columns"),
        ("q1\td2\t1", r"judged twice with grades 0 and 1"),
    ],
)
def test_bad_qrels_lines(tmp_path, line, message):
    path = tmp_path / "qrels.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td2\t0\n{line}\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=message) as info:
        read_qrels(path)
    assert info.value.line == 3


def test_qrels_formats_and_grades(tmp_path):
    trec = tmp_path / "qrels.txt"
    trec.write_text("1 0 a 3\n1 Q0 b 0\n2 0 a -1\n2 0 a -1\n", encoding="utf-8")  # identical repeat is fine
    assert read_qrels(trec) == {"1": {"a": 3, "b": 0}, "2": {"a": -1}}
    header_only = tmp_path / "h.tsv"
    header_only.write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="empty"):
        read_qrels(header_only)


def test_qrels_line_cut_off_or_mixed_is_an_error(tmp_path):
    # a TREC line cut after its document id reads as 3 columns: document "Q0" with grade = the doc id
    cut = tmp_path / "qrels.txt"
    cut.write_text("1 0 a 3\n1 Q0 882377", encoding="utf-8")
    with pytest.raises(DataFormatError, match="3 columns, but the file's first judgment has 4 .TREC.") as info:
        read_qrels(cut)
    assert info.value.line == 2
    mixed = tmp_path / "qrels.tsv"
    mixed.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t0\td2\t1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="4 columns, but the file's first judgment has 3 .BEIR.") as info:
        read_qrels(mixed)
    assert info.value.line == 3


def test_qrels_naming_unknown_queries_is_an_error(tiny_beir):
    with open(tiny_beir / "qrels" / "test.tsv", "a", encoding="utf-8") as f:
        f.write("q99\td1\t1\n")
    with pytest.raises(DataFormatError, match="not in queries.jsonl, e.g. 'q99'"):
        load_beir(tiny_beir)


# ---------------------------------------------------------------------------------------- runs
def test_run_duplicates_error_or_dedupe_with_warning(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q Q0 a 1 3.0 t\nq Q0 b 2 2.0 t\nq Q0 a 3 1.0 t\nq Q0 b 4 5.0 t\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="appears twice") as info:
        read_run(path)
    assert info.value.line == 3
    with pytest.warns(UserWarning, match="2 duplicate .* first at line 3"):
        assert read_run(path, dedupe=True) == {"q": {"a": 3.0, "b": 5.0}}


@pytest.mark.parametrize(
    "line, message",
    [
        ("q Q0 a 1 high t", "is not a number"),
        ("q Q0 a 1 1_0 t", "is not a number"),
        ("q Q0 a 1 nan t", "not finite"),
        ("q Q0 a 1 2.0", "expected 6 columns"),
    ],
)
def test_bad_run_lines(tmp_path, line, message):
    path = tmp_path / "run.trec"
    path.write_text("q Q0 z 1 9.0 t\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=message) as info:
        read_run(path)
    assert info.value.line == 2


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "run.trec"
    with pytest.raises(TypeError):
        write_run({"q1": {"a": 1.0, "b": 2.0}, "q2": {"c": "not a score"}}, target)  # fails on the 3rd line
    assert not target.exists() and os.listdir(tmp_path) == []
    write_run({"q": {"a": 1.0}}, target)
    before = target.read_bytes()
    with pytest.raises(TypeError):
        write_run({"q": {"a": 1.0}, "r": {"b": "x"}}, target)
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["run.trec"]
    with pytest.raises(TypeError):
        write_json(tmp_path / "m.json", {"x": object.__new__(type("NoJSON", (), {"__str__": None}))})
    assert sorted(os.listdir(tmp_path)) == ["run.trec"]


def test_iter_lines_numbers_skip_nothing(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"\xef\xbb\xbfa\r\n\r\nb\nc\r")
    assert list(iter_lines(path)) == [(1, "a"), (2, ""), (3, "b"), (4, "c")]


# ---------------------------------------------------------------------------------------- property-based
ids = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=8)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@SETTINGS
@given(st.dictionaries(ids, texts, min_size=1, max_size=6), st.booleans(), st.booleans())
def test_corpus_round_trip(tmp_path, docs, bom, crlf):
    body = _jsonl({"_id": k, "text": v} for k, v in docs.items()).encode("utf-8")
    if crlf:
        body = body.replace(b"\n", b"\r\n")
    path = tmp_path / "corpus.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body)
    assert read_corpus(path) == docs


tsv_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=30)
tsv_id = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="\t"),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given(st.dictionaries(tsv_id, tsv_text, min_size=1, max_size=6))
def test_tsv_round_trip(tmp_path, rows):
    path = tmp_path / "t.tsv"
    path.write_bytes("".join(f"{k}\t{v}\r\n" for k, v in rows.items()).encode("utf-8"))
    assert read_tsv(path) == rows


# ids of TREC/qrels lines contain no whitespace (columns are split with str.split)
word = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=6).filter(
    lambda s: not any(c.isspace() for c in s)
)


@SETTINGS
@given(
    st.dictionaries(word, st.dictionaries(word, st.integers(-1, 3), min_size=1, max_size=5), min_size=1, max_size=4),
    st.booleans(),
)
def test_qrels_round_trip(tmp_path, qrels, beir):
    path = tmp_path / "qrels"
    if beir:
        lines = ["query-id\tcorpus-id\tscore"] + [
            f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()
        ]
    else:
        lines = [f"{q} 0 {d} {g}" for q, docs in qrels.items() for d, g in docs.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_qrels(path) == qrels


@SETTINGS
@given(
    st.dictionaries(
        word,
        st.dictionaries(word, st.integers(-1000, 1000).map(lambda x: x / 8), min_size=1, max_size=6),
        min_size=1,
        max_size=4,
    )
)
def test_run_round_trip_keeps_scores_and_order(tmp_path, run):
    from spladekit.data.trec import sorted_ranking

    path = tmp_path / "run.trec"
    write_run(run, path)
    assert read_run(path) == run  # multiples of 1/8 print exactly with 6 decimals
    lines = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    for qid, ranking in run.items():
        in_file = [(parts[2], int(parts[3])) for parts in lines if parts[0] == qid]
        assert [d for d, _ in in_file] == [d for d, _ in sorted_ranking(ranking)]
        assert [r for _, r in in_file] == list(range(1, len(ranking) + 1))


# ---------------------------------------------------------------------------------------- real files
def test_real_scifact_counts(shared):
    folder = shared / "data" / "beir" / "scifact"
    corpus = read_corpus(folder / "corpus.jsonl.gz")
    queries = read_queries(folder / "queries.jsonl")
    assert len(corpus) == 5183 and len(queries) == 1109
    for split, judgments, judged in [("test", 339, 300), ("train", 919, None)]:
        qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
        assert sum(len(d) for d in qrels.values()) == judgments
        assert set(qrels) <= set(queries)
        if judged is not None:
            assert len(qrels) == judged
    dataset = load_beir(folder, "test")
    assert len(dataset.queries) == 300 and len(dataset.corpus) == 5183


@pytest.mark.parametrize(
    "name, docs, judged, judgments",
    [
        ("cranfield", 1400, 225, 1612),
        ("cisi", 1460, 76, 3114),
        ("medline", 1033, 30, 696),
        ("cacm", 3204, 52, 796),
    ],
)
def test_real_classic_counts(shared, name, docs, judged, judgments):
    dataset = load_beir(shared / "data" / "classic" / name, "test")
    assert len(dataset.corpus) == docs
    assert len(dataset.qrels) == judged == len(dataset.queries)
    assert sum(len(d) for d in dataset.qrels.values()) == judgments
    all_queries = read_queries(shared / "data" / "classic" / name / "queries.jsonl")
    assert len(all_queries) >= judged
    if name == "cranfield":
        assert {g for d in dataset.qrels.values() for g in d.values()} <= {1, 2, 3, 4}


@pytest.mark.parametrize(
    "name, queries, judgments",
    [
        ("qrels.dl19-passage.txt", 43, 9260),
        ("qrels.dl20-passage.txt", 54, 11386),
        ("qrels.msmarco-passage.dev-subset.txt", 6980, 7437),
    ],
)
def test_real_trec_qrels(shared, name, queries, judgments):
    qrels = read_qrels(shared / "data" / "trec" / name)
    assert len(qrels) == queries and sum(len(d) for d in qrels.values()) == judgments
    grades = {g for d in qrels.values() for g in d.values()}
    assert grades <= ({0, 1, 2, 3} if "dl" in name else {0, 1})


def test_real_trec_topics_and_toy_tsv(shared):
    topics = read_tsv(shared / "data" / "trec" / "topics.dl19-passage.txt")
    qrels = read_qrels(shared / "data" / "trec" / "qrels.dl19-passage.txt")
    assert set(qrels) <= set(topics)
    toy = shared / "data" / "splade_toy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_tsv(toy / "full_collection" / "raw.tsv")) == 89  # mojibake is valid UTF-8: read as is
    # the toy query file repeats the id 1048876 with another text on line 7: an error, not a silent overwrite
    with pytest.raises(DataFormatError, match="duplicate id '1048876'") as info:
        read_tsv(toy / "dev_queries" / "raw.tsv")
    assert info.value.line == 7


@pytest.mark.parametrize("gz", [False, True])
def test_corpus_count_is_the_number_of_records_read(tmp_path, gz):
    # the progress bar's total: blank and whitespace-only lines are not records, CRLF ends are
    lines = [
        '{"_id": "a", "text": "x"}',
        "",
        "   ",
        '{"_id": "b", "text": "y"}',
        '{"_id": "c", "title": "t", "text": "z"}',
        "",
    ]
    raw = "\r\n".join(lines).encode()
    path = tmp_path / ("corpus.jsonl.gz" if gz else "corpus.jsonl")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    assert count_corpus(path) == len(read_corpus(path)) == 3
    assert count_corpus(tmp_path) == 3  # the BEIR folder
    assert count_corpus(tmp_path / "missing.jsonl") is None
