"""Run fusion: RRF and normalised score fusion, every value worked out by hand in the comments."""

import json
import math

import pytest

from spladekit.index.fusion import FusionConfig, fuse, normalize, ranks, reciprocal_rank_fusion, score_fusion
from spladekit.index.index import Index
from spladekit.model.encoder import SpladeEncoder

# run A ranks a, b, c; run B ranks c, d, a (scores on very different scales, as SPLADE vs BM25)
A = {"q1": {"a": 30.0, "b": 20.0, "c": 10.0}}
B = {"q1": {"c": 9.0, "d": 5.0, "a": 1.0}, "q2": {"x": 2.0}}


def test_ranks_follow_score_then_doc_id():
    assert ranks({"b": 1.0, "a": 1.0, "c": 2.0}) == {"c": 1, "a": 2, "b": 3}


def test_rrf_values_by_hand():
    fused = reciprocal_rank_fusion([A, B], k=60)
    # a: 1/(60+1) + 1/(60+3); b: 1/62; c: 1/63 + 1/61; d: 1/62
    expected = {"a": 1 / 61 + 1 / 63, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62}
    assert set(fused["q1"]) == set(expected)
    for doc, value in expected.items():
        # the same float operations in the same order as the implementation (w·1/(k+r) summed run by run)
        assert fused["q1"][doc] == pytest.approx(value, rel=1e-15)
    # a and c tie exactly (same two terms), as do b and d: the order is then doc id ascending
    assert list(fused["q1"]) == ["a", "c", "b", "d"]
    assert fused["q2"] == {"x": pytest.approx(1 / 61, rel=1e-15)}  # a query of one run only


def test_weighted_rrf_and_depth():
    fused = reciprocal_rank_fusion([A, B], k=1, weights=[2.0, 1.0], depth=2)
    # a: 2/2 + 1/4 = 1.25; c: 2/4 + 1/2 = 1.0; b: 2/3 ≈ 0.667; d: 1/3
    assert fused["q1"] == {"a": pytest.approx(1.25), "c": pytest.approx(1.0)}


def test_min_max_normalisation_and_fusion():
    assert normalize({"a": 30.0, "b": 20.0, "c": 10.0}) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert normalize({"a": 3.0, "b": 3.0}) == {"a": 1.0, "b": 1.0}  # degenerate: all 1
    fused = score_fusion([A, B], norm="min-max")
    # A: a 1, b .5, c 0; B: c 1, d .5, a 0  ->  a 1, b .5, c 1, d .5
    assert fused["q1"] == {"a": 1.0, "c": 1.0, "b": 0.5, "d": 0.5}
    assert list(fused["q1"]) == ["a", "c", "b", "d"]
    weighted = score_fusion([A, B], norm="min-max", weights=[0.3, 0.7])
    # a .3, b .15, c .7, d .35
    assert weighted["q1"] == {
        "c": pytest.approx(0.7),
        "d": pytest.approx(0.35),
        "a": pytest.approx(0.3),
        "b": pytest.approx(0.15),
    }
    assert list(weighted["q1"]) == ["c", "d", "a", "b"]


def test_z_score_normalisation():
    # mean 20, population std sqrt(200/3)
    std = math.sqrt(((30 - 20) ** 2 + 0 + (10 - 20) ** 2) / 3)
    z = normalize({"a": 30.0, "b": 20.0, "c": 10.0}, "z-score")
    assert z == pytest.approx({"a": 10 / std, "b": 0.0, "c": -10 / std})
    assert normalize({"a": 4.0}, "z-score") == {"a": 0.0}
    fused = score_fusion([A, B], norm="z-score")
    # B: mean 5, std sqrt((16+0+16)/3); c +4/sB, d 0, a -4/sB
    s_b = math.sqrt(32 / 3)
    assert fused["q1"] == pytest.approx({"a": 10 / std - 4 / s_b, "b": 0.0, "c": -10 / std + 4 / s_b, "d": 0.0})


def test_fuse_dispatch_and_bad_options():
    assert fuse([A, B], method="rrf") == reciprocal_rank_fusion([A, B])
    assert fuse([A, B], FusionConfig(method="score", norm="z-score")) == score_fusion([A, B], "z-score")
    with pytest.raises(ValueError, match="2 runs"):
        fuse([A, B], weights=[1.0])
    with pytest.raises(ValueError):
        FusionConfig(method="borda")
    with pytest.raises(ValueError, match="≥ 0"):
        FusionConfig(weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="at least two runs, got 0"):
        fuse([])
    with pytest.raises(ValueError, match="normalisation"):
        normalize({"a": 1.0}, "max")


def test_fuse_cli(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.data.trec import read_run, write_run

    write_run(A, tmp_path / "a.trec")
    write_run(B, tmp_path / "b.trec")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\tc\t1\n", encoding="utf-8")
    out = tmp_path / "fused.trec"
    result = CliRunner().invoke(
        app,
        [
            "fuse",
            str(tmp_path / "a.trec"),
            str(tmp_path / "b.trec"),
            "--out",
            str(out),
            "--method",
            "rrf",
            "--qrels",
            str(qrels),
        ],
    )
    assert result.exit_code == 0, result.output
    fused = read_run(out)
    # a at ranks 1 and 3: 0.0 + 1/61 + 1/63, the same float operations here; the file keeps every digit (repr)
    assert fused["q1"]["a"] == 0.0 + 1 / 61 + 1 / 63
    settings = json.loads((tmp_path / "fused.trec.config.json").read_text())
    assert settings["fusion"]["rrf_k"] == 60 and settings["runs"] == [
        str(tmp_path / "a.trec"),
        str(tmp_path / "b.trec"),
    ]
    assert "norm" not in settings["fusion"]  # score fusion's setting: RRF does not read it
    saved = json.loads((tmp_path / "fused.trec.metrics.json").read_text())
    assert saved["MRR@10"] == pytest.approx(0.5) and saved["qrels"] == str(qrels)
    # c is the only relevant document, ranked 2nd after a (tie broken by doc id): MRR@10 = 1/2
    assert json.loads(result.stdout.split("\nconventions")[0])["MRR@10"] == pytest.approx(0.5)
    chosen = CliRunner().invoke(
        app,
        [
            "fuse",
            str(tmp_path / "a.trec"),
            str(tmp_path / "b.trec"),
            "--out",
            str(out),
            "--qrels",
            str(qrels),
            "-m",
            "MRR@10",
            "-m",
            "R@2",
        ],
    )  # -m as in evaluate and compare
    assert chosen.exit_code == 0, chosen.output
    saved = json.loads((tmp_path / "fused.trec.metrics.json").read_text())
    assert {k for k in saved if "@" in k} == {"MRR@10", "R@2"} and saved["R@2"] == 1.0  # c at rank 2
    bad = CliRunner().invoke(
        app,
        [
            "fuse",
            str(tmp_path / "a.trec"),
            str(tmp_path / "b.trec"),
            "--out",
            str(tmp_path / "x.trec"),
            "--weight",
            "1",
            "--weight",
            "2",
            "--weight",
            "3",
        ],
    )
    assert bad.exit_code == 2 and "3 fusion weights for 2 runs" in bad.output


def test_one_run_or_all_zero_weights_are_refused():
    """One run has nothing to fuse with; all-zero weights give every document the fused score 0
    (a ranking by document id alone). Both used to go through."""
    for one in ([A], [B]):
        with pytest.raises(ValueError, match="at least two runs, got 1"):
            fuse(one)
    with pytest.raises(ValueError, match=r"weights are all 0 \(\[0.0, 0.0\]\)"):
        FusionConfig(weights=[0.0, 0.0])
    for method in (reciprocal_rank_fusion, score_fusion):  # the functions check too, without a FusionConfig
        with pytest.raises(ValueError, match="weights are all 0"):
            method([A, B], weights=[0.0, 0.0])
        with pytest.raises(ValueError, match="at least two runs, got 1"):
            method([A])
    assert fuse([A, B], weights=[0.0, 1.0]) == reciprocal_rank_fusion([B, A], weights=[1.0, 0.0])  # one zero is fine


@pytest.mark.parametrize(
    "args, lines",
    [
        (["{a}"], ["error: fusion needs at least two runs, got 1"]),
        (["{a}", "{sub}/../a.trec"], ["error: {sub}/../a.trec: the same run file as {a}, given twice"]),
        (["{a}", "{b}", "--weight", "0", "--weight", "0"], ["error: --weight: fusion weights are all 0 ([0.0, 0.0])"]),
        (["{a}", "{b}", "--method", "borda"], ["error: --method: Input should be 'rrf' or 'score'"]),
        (["{a}", "{b}", "--rrf-k", "inf"], ["error: --rrf-k: Input should be a finite number"]),  # every score 0
        # a copy of A: document a scores 1 in both, 1e308 + 1e308 = inf
        (
            ["{a}", "{a2}", "--method", "score", "--weight", "1e308", "--weight", "1e308"],
            ["error: query 'q1': a fused score overflowed"],
        ),
        (["{a}", "{out}"], ["error: {out}: a run to fuse is also the --out"]),
        (["{a}", "{b}", "-m", "nDCG@10"], ["error: --measure goes with --qrels"]),
        # two bad options: one line each, naming the option (no pydantic dump)
        (
            ["{a}", "{b}", "--rrf-k", "0", "--depth", "0"],
            [
                "error: --rrf-k: Input should be greater than 0",
                "error: --depth: Input should be greater than or equal to 1",
            ],
        ),
    ],
)
def test_fuse_cli_refuses_bad_runs_and_options_naming_them(tmp_path, args, lines):
    from typer.testing import CliRunner

    from spladekit.cli import app
    from spladekit.data.trec import write_run

    write_run(A, tmp_path / "a.trec")
    write_run(B, tmp_path / "b.trec")
    (tmp_path / "sub").mkdir()
    out = tmp_path / "fused.trec"
    write_run(A, tmp_path / "a2.trec")
    names = {
        "a": tmp_path / "a.trec",
        "a2": tmp_path / "a2.trec",
        "b": tmp_path / "b.trec",
        "sub": tmp_path / "sub",
        "out": out,
    }
    result = CliRunner().invoke(app, ["fuse", *(a.format(**names) for a in args), "--out", str(out)])
    assert result.exit_code == 2, result.output
    printed = result.output.splitlines()
    assert len(printed) == len(lines), result.output  # one line per problem
    assert all(p.startswith(line.format(**names)) for p, line in zip(printed, lines)), result.output
    assert "validation error" not in result.output and "pydantic" not in result.output
    assert not out.exists() and not (tmp_path / "fused.trec.config.json").exists()


def test_demo_rows_without_training(tiny_bert_dir, tiny_beir, tmp_path, capsys):
    """The demo's new rows: inference-free on the same document vectors, RRF and min-max fusion of
    the SPLADE and BM25 runs, each evaluated with the conventions of the other rows."""

    from spladekit.demo import run_demo
    from spladekit.evaluate.metrics import evaluate

    results = run_demo(str(tiny_bert_dir), str(tiny_beir), tmp_path / "demo", train=False)
    by_name = {r.name: r for r in results}
    splade, bm25 = results[0], by_name["bm25"]
    free = by_name["inference-free (IDF queries, same docs)"]
    rrf = by_name[f"fused RRF ({splade.name} + bm25)"]
    minmax = by_name[f"fused min-max ({splade.name} + bm25)"]
    assert rrf.run == reciprocal_rank_fusion([splade.run, bm25.run])
    assert minmax.run == score_fusion([splade.run, bm25.run], "min-max")
    assert rrf.metrics["nDCG@10"] == evaluate(rrf.run, load_qrels(tiny_beir))["nDCG@10"]
    assert free.index_folder == splade.index_folder  # the same index folder: documents encoded once
    kept = Index.open(tmp_path / "demo" / "index")  # it outlives the demo, for `spladekit search|serve --index`
    assert splade.index_folder == kept.folder and kept.docs.shape[0] == len(json_lines(tiny_beir / "corpus.jsonl"))
    recorded = json.loads((tmp_path / "demo" / splade.name / "config.json").read_text())["search"]["index"]
    assert recorded == [str(kept.folder)]  # the settings record names a folder that exists
    assert kept.metadata["model"] == str(tiny_bert_dir.resolve())  # what `spladekit serve --index` loads for texts
    import hashlib  # the weights' hash: part of the build's fingerprint, so other weights never resume these chunks

    weights = next(p for p in (tiny_bert_dir / "model.safetensors", tiny_bert_dir / "pytorch_model.bin") if p.exists())
    assert kept.metadata["model_revision"] == "sha256:" + hashlib.sha256(weights.read_bytes()).hexdigest()
    # by the recorded model, without naming it; == holds by construction: the same weights through the
    # same encoder code on the same machine ("a query" is far below either max length)
    again = kept.search(["a query"], k=3).run
    assert (
        again
        == Index.open(kept.folder).search(["a query"], k=3, encoder=SpladeEncoder.from_pretrained(tiny_bert_dir)).run
    )
    assert splade.metrics["query_ms"] > 0 and free.metrics["query_ms"] > 0
    assert (
        free.metrics["nDCG@10"] == evaluate(free.run, load_qrels(tiny_beir))["nDCG@10"]
    )  # the printed number is its run's
    printed = capsys.readouterr().out
    assert "| inference-free (IDF queries, same docs) |" in printed and "query ms" in printed
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary[rrf.name]["fusion"]["rrf_k"] == 60
    assert (tmp_path / "demo" / "fused_rrf" / "run.trec").exists()
    _check_delta_plot(
        tmp_path / "demo",
        results,
        [splade.name, "bm25", "inference_free", "fused_rrf", "fused_minmax"],
        [("bm25", splade.name), ("bm25", "fused_rrf"), ("bm25", "fused_minmax")],
        [
            ("BM25", splade.name),
            ("BM25", f"fused RRF ({splade.name} + BM25)"),
            ("BM25", f"fused min-max ({splade.name} + BM25)"),
        ],
    )


def _check_delta_plot(out, results, folders, pairs, labels):
    """``per_query_ndcg10.png`` draws, for each pair of output folders (A, B), the per-query nDCG@10
    differences B − A of the ``per_query.json`` files the demo wrote there (subtracted here), one panel a
    pair; ``folders`` are the systems' folders in the order of ``results`` (the layout docs/demo.md gives)."""
    import matplotlib.image

    from spladekit.demo import delta_pairs

    written = {
        folder: json.loads((out / folder / "per_query.json").read_text())["nDCG@10"]
        for pair in pairs
        for folder in pair
    }
    expected = [
        (label_a, label_b, {q: written[b][q] - written[a][q] for q in written[a]})
        for (a, b), (label_a, label_b) in zip(pairs, labels)
    ]
    assert all(set(written[a]) == set(written[b]) for a, b in pairs)  # every judged query on both sides
    assert delta_pairs(results, folders) == expected
    image = matplotlib.image.imread(out / "per_query_ndcg10.png")  # 120 dpi; panels of 3.2 in stacked, 9 in wide
    assert image.shape[0] > 2.5 * 120 * len(pairs) and image.shape[1] > 7 * 120, image.shape


def json_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_qrels(folder):
    from spladekit.data.trec import read_qrels

    return read_qrels(folder / "qrels" / "test.tsv")
