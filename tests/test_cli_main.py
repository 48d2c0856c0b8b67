"""The main job's commands on a tiny model and a tiny BEIR folder."""

import json

from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.data.trec import read_run

runner = CliRunner()


def test_evaluate_writes_metrics_and_run(tiny_bert_dir, tiny_beir, tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(app, ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--split", "test", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("nDCG@10", "MRR@10", "R@100", "R@1000", "num_queries", "avg_query_terms", "avg_doc_terms", "flops"):
        assert key in metrics
    assert metrics["num_queries"] == 3
    run = read_run(out / "run.trec")
    assert set(run) == {"q1", "q2", "q3"}
    # evaluating the written run again gives the same numbers (same tie-break in file and evaluation)
    again = runner.invoke(app, ["evaluate", "--run", str(out / "run.trec"), "--qrels", str(tiny_beir / "qrels" / "test.tsv")])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["nDCG@10"] == metrics["nDCG@10"]


def test_index_then_search(tiny_bert_dir, tiny_beir, tmp_path):
    index = tmp_path / "index"
    r1 = runner.invoke(app, ["index", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(index)])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(app, ["search", "--index", str(index), "--data", str(tiny_beir), "--out", str(tmp_path / "run.trec")])
    assert r2.exit_code == 0, r2.output
    assert set(read_run(tmp_path / "run.trec")) == {"q1", "q2", "q3"}


def test_bad_corpus_line_is_reported_with_file_and_line(tiny_bert_dir, tiny_beir, tmp_path):
    with open(tiny_beir / "corpus.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")
    result = runner.invoke(app, ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "corpus.jsonl, line 7" in result.output
