"""The main job's commands on a tiny model and a tiny BEIR folder."""

import json
from pathlib import Path

from typer.testing import CliRunner

from spladekit.cli import app
from spladekit.data.trec import read_run

runner = CliRunner()


def test_evaluate_writes_metrics_and_run(tiny_bert_dir, tiny_beir, tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(
        app, ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--split", "test", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("nDCG@10", "MRR@10", "R@100", "R@1000", "num_queries", "avg_query_terms", "avg_doc_terms", "flops"):
        assert key in metrics
    assert metrics["num_queries"] == 3
    run = read_run(out / "run.trec")
    assert set(run) == {"q1", "q2", "q3"}
    # evaluating the written run again gives the same numbers (same tie-break in file and evaluation)
    again = runner.invoke(
        app, ["evaluate", "--run", str(out / "run.trec"), "--qrels", str(tiny_beir / "qrels" / "test.tsv")]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["nDCG@10"] == metrics["nDCG@10"]


def test_evaluate_chooses_its_measures_says_where_it_writes_and_tags_its_run_as_search_does(
    tiny_bert_dir, tiny_beir, tmp_path, monkeypatch
):
    """`evaluate -m` as `compare -m`; with --model and no --out it writes under outputs/ (ignored by git, as the
    other commands' defaults), printing the metrics as JSON on stdout and where they went on stderr; its run
    carries the tag of `search`'s run of the same index."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app, ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "-m", "nDCG@10", "--measure", "R@5"]
    )
    assert result.exit_code == 0, result.output
    out = tmp_path / "outputs" / "eval"
    printed, written = json.loads(result.stdout), json.loads((out / "metrics.json").read_text())
    measures = {k for k in written if "@" in k}
    assert measures == {"nDCG@10", "R@5"} and printed == {k: v for k, v in written.items() if k != "wall_time_s"}
    assert json.loads((out / "config.json").read_text())["measures"] == ["nDCG@10", "R@5"]
    assert (
        result.stderr.strip().splitlines()[-1]
        == f"wrote {Path('outputs/eval')}/ (metrics.json, per_query.json, run.trec, config.json)"
    )
    again = runner.invoke(
        app,
        [
            "evaluate",
            "--run",
            str(out / "run.trec"),
            "--qrels",
            str(tiny_beir / "qrels" / "test.tsv"),
            "-m",
            "R@5",
            "--out",
            str(tmp_path / "again"),
        ],
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["R@5"] == written["R@5"] and "nDCG@10" not in json.loads(again.stdout)
    assert again.stderr.strip().splitlines()[-1] == f"wrote {tmp_path / 'again'}/ (metrics.json, per_query.json)"
    index = tmp_path / "index"
    assert (
        runner.invoke(
            app, ["index", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(index)]
        ).exit_code
        == 0
    )
    searched = runner.invoke(
        app, ["search", "--index", str(index), "--data", str(tiny_beir), "--out", str(tmp_path / "s.trec")]
    )
    assert searched.exit_code == 0, searched.output
    tags = {
        line.split()[5] for path in (out / "run.trec", tmp_path / "s.trec") for line in path.read_text().splitlines()
    }
    assert tags == {"spladekit"}


def test_index_then_search(tiny_bert_dir, tiny_beir, tmp_path):
    index = tmp_path / "index"
    r1 = runner.invoke(app, ["index", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(index)])
    assert r1.exit_code == 0, r1.output
    r2 = runner.invoke(
        app, ["search", "--index", str(index), "--data", str(tiny_beir), "--out", str(tmp_path / "run.trec")]
    )
    assert r2.exit_code == 0, r2.output
    assert set(read_run(tmp_path / "run.trec")) == {"q1", "q2", "q3"}


def test_bad_corpus_line_is_reported_with_file_and_line(tiny_bert_dir, tiny_beir, tmp_path):
    with open(tiny_beir / "corpus.jsonl", "a", encoding="utf-8") as f:
        f.write("{not json\n")
    result = runner.invoke(
        app, ["evaluate", "--model", str(tiny_bert_dir), "--data", str(tiny_beir), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "corpus.jsonl, line 7" in result.output
