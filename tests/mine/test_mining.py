"""``spladekit mine``: teacher scores are sentence-transformers' CrossEncoder.predict, pair by pair; the
filters match a by-hand computation and sentence-transformers' own ``mine_hard_negatives``; the mined
dataset trains through ``spladekit train`` with MarginMSE and KL."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pytest.importorskip("sentence_transformers")

from spladekit.mine import FilterSettings, MineConfig, mine, select_negatives  # noqa: E402
from spladekit.mine.filters import default_range_max  # noqa: E402
from tests.mine_helpers import make_cross_encoder, make_dense_model, make_texts  # noqa: E402
from tests.train_helpers import make_tiny_model, tiny_config  # noqa: E402

# float32 logits of a 1-layer, 32-wide BERT: a batch padded to another length changes the sums by a few
# ulp per layer (~1e-6 relative); 1e-5 relative (at least 1e-5 absolute) leaves a tenfold margin.
REL = 1e-5


@pytest.fixture(scope="module")
def ce(tmp_path_factory) -> Path:
    return make_cross_encoder(tmp_path_factory.mktemp("ce") / "cross-encoder")


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("texts")
    pairs, corpus = make_texts()
    (folder / "pairs.tsv").write_text("".join(f"{q}\t{p}\n" for q, p in pairs))
    (folder / "corpus.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in corpus.items()))
    return folder, pairs, corpus


@pytest.fixture(scope="module")
def mined(ce, texts, tmp_path_factory) -> Path:
    folder, _, _ = texts
    out = tmp_path_factory.mktemp("mined") / "out"
    mine(
        MineConfig(
            data=str(folder / "pairs.tsv"),
            format="tsv",
            corpus=str(folder / "corpus.tsv"),
            teachers=[str(ce)],
            num_negatives=3,
            chunk_queries=3,
        ),
        out,
        show_progress=False,
    )
    return out


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(1.0, abs(b))


def test_teacher_scores_are_cross_encoder_predict_pair_by_pair(ce, mined):
    import torch
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(ce), device="cpu")  # the activation recorded in its saved config
    assert isinstance(model.activation_fn, torch.nn.Identity)
    rows = datasets.load_from_disk(str(mined / "dataset"))
    assert len(rows) == 9 and rows.column_names[:6] == [
        "query",
        "positive",
        "negative_1",
        "negative_2",
        "negative_3",
        "scores",
    ]
    for row in rows:
        docs = [row["positive"]] + [row[f"negative_{k}"] for k in (1, 2, 3)]
        for doc, score in zip(docs, row["scores"]):
            expected = float(model.predict([(row["query"], doc)], show_progress_bar=False)[0])  # one pair per call
            assert close(score, expected), (row["query"], doc, score, expected)
    # the naver pickle holds the same scores by id, and reads back (data.format: naver) to the same examples
    from spladekit.train.data import read_naver

    examples = {e.qid: e for e in read_naver(mined / "naver", "scores.pkl.gz")}
    for row in rows:
        e = examples[row["query_id"]]
        text_score = {t: e.teacher[d] for d, t in e.positives + e.negatives}
        docs = [row["positive"]] + [row[f"negative_{k}"] for k in (1, 2, 3)]
        assert [text_score[d] for d in docs] == row["scores"]  # the same floats, written twice
    stats = json.loads((mined / "stats.json").read_text())
    assert stats["rows"] == 9 and stats["removed"]["kept"] == 8 * 3


def test_resume_reads_finished_chunks(ce, texts, mined, tmp_path, monkeypatch):
    """A run stopped after scoring leaves its chunks in OUT/work; the next run reads each chunk whose
    digest (teachers, activation, pairs) matches instead of scoring it: a chunk edited by hand (scores
    + 1000, digest kept) shows in the output, and no cross-encoder is loaded at all."""
    from spladekit.mine import teacher, write

    folder, _, _ = texts
    out = tmp_path / "again"
    config = MineConfig(
        data=str(folder / "pairs.tsv"),
        format="tsv",
        corpus=str(folder / "corpus.tsv"),
        teachers=[str(ce)],
        num_negatives=3,
        chunk_queries=3,
    )

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(write, "write_dataset", stop)
        with pytest.raises(KeyboardInterrupt):
            mine(config, out, show_progress=False)
    chunks = sorted((out / "work").glob("teacher-*.json"))
    assert [c.name for c in chunks] == [
        "teacher-00000.json",
        "teacher-00001.json",
        "teacher-00002.json",
    ]  # 8 queries / 3
    first = json.loads(chunks[0].read_text())
    first["scores"] = [[s + 1000.0 for s in group] for group in first["scores"]]
    chunks[0].write_text(json.dumps(first))
    monkeypatch.setattr(teacher, "load_cross_encoder", lambda *a, **k: pytest.fail("a finished chunk was scored again"))
    mine(config, out, show_progress=False)
    assert not (out / "work").exists()
    again = datasets.load_from_disk(str(out / "dataset"))
    reference = datasets.load_from_disk(str(mined / "dataset"))
    for a, b in zip(again, reference):
        shift = 1000.0 if a["query_id"] in ("q0", "q1", "q2") else 0.0
        assert [x - shift for x in a["scores"]] == pytest.approx(b["scores"], abs=1e-9)


def test_filters_by_hand():
    cands = [
        ("p1", 9.0),
        ("a", 8.0),
        ("b", 7.2),
        ("s", 6.5),
        ("c", 6.0),
        ("d", 5.5),
        ("e", 3.0),
        ("f", -1.0),
        ("g", -2.5),
    ]
    settings = FilterSettings(num_negatives=2, range_min=1, range_max=4, absolute_margin=0.5, min_score=-2.0)
    got = select_negatives(cands, [9.0, 7.0], settings, 4, excluded={"p1", "p2"}, same_as_query={"s"})
    # lowest positive 7.0: absolute margin drops s + 0.5 > 7.0 → a (8.0), b (7.2); min_score drops g;
    # survivors c 6.0, d 5.5, e 3.0, f -1.0; range_min 1 skips c; window [d, e, f]; top 2 → d, e
    assert got.negatives == [("d", 5.5), ("e", 3.0)] and got.complete
    assert got.removed == {
        "positive": 1,
        "query_text": 1,
        "absolute_margin": 2,
        "relative_margin": 0,
        "max_score": 0,
        "min_score": 1,
        "range_min": 1,
        "range_max": 0,
        "not_sampled": 1,
    }
    # relative margin with a negative positive score p = -2, r = 0.25: threshold p - |p|·r = -2.5 drops x, y
    # (the sign-unsafe p·(1 - r) = -1.5 would have kept y: sentence-transformers #3819)
    neg = select_negatives(
        [("x", -1.0), ("y", -2.4), ("z", -2.6), ("w", -4.0)],
        [-2.0],
        FilterSettings(num_negatives=2, relative_margin=0.25),
        10,
    )
    assert neg.negatives == [("z", -2.6), ("w", -4.0)] and neg.removed["relative_margin"] == 2
    top = select_negatives([("a", 1.0), ("b", 5.0), ("c", 3.0)], [], FilterSettings(num_negatives=2, max_score=4.0), 10)
    assert top.negatives == [("c", 3.0), ("a", 1.0)] and top.removed["max_score"] == 1  # re-sorted by score
    # random: picks = random.Random(7).sample(range(5), 2) over the window, then sorted by score
    window = [("a", 5.0), ("b", 4.0), ("c", 3.0), ("d", 2.0), ("e", 1.0)]
    picks = random.Random(7).sample(range(5), k=2)
    want = sorted((window[i] for i in picks), key=lambda x: -x[1])
    got = select_negatives(window, [], FilterSettings(num_negatives=2, sampling="random"), 10, rng=random.Random(7))
    assert got.negatives == want
    short = select_negatives(
        [("a", 1.0)], [], FilterSettings(num_negatives=2, sampling="random"), 10, rng=random.Random(0)
    )
    assert short.negatives == [("a", 1.0)] and not short.complete
    # sentence-transformers' default range_max: range_min + 10·n + max positives when a filter may remove
    assert default_range_max(FilterSettings(num_negatives=3, range_min=1, relative_margin=0.1), 2, True) == 33
    assert default_range_max(FilterSettings(num_negatives=3, min_score=0.0), 1, False) == 4


@pytest.mark.parametrize("sampling", ["top", "random"])
def test_equals_sentence_transformers_mine_hard_negatives(ce, texts, tmp_path, sampling):
    """The candidates of a dense SentenceTransformer (its cosine top-k computed here with numpy) handed
    to ``spladekit mine`` as a run give the negatives and scores of ``mine_hard_negatives`` with the
    same cross-encoder and settings.

    Differences that do not change the result here (and why): sentence-transformers ranks by torch's
    float32 cosine and spladekit by the run's float64 numpy cosine (the same candidate set unless two
    cosines tie within ~1e-7 at the cut, which random embeddings of 40 documents do not); both rank
    the candidates by the cross-encoder's score once it is given; the cross-encoder scores pairs in
    different batches (padding), hence the float tolerance on scores, while texts must be equal."""
    import sentence_transformers
    import torch
    from packaging.version import Version
    from sentence_transformers import CrossEncoder
    from sentence_transformers.util import mine_hard_negatives

    folder, pairs, corpus = texts
    dense = make_dense_model(tmp_path / "dense")
    queries = list(dict.fromkeys(q for q, _ in pairs))
    q = dense.encode(queries, convert_to_numpy=True).astype(np.float64)
    d = dense.encode(list(corpus.values()), convert_to_numpy=True).astype(np.float64)
    cosine = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    doc_ids = list(corpus)
    settings = dict(num_negatives=3, range_min=1, relative_margin=0.05)
    # sentence-transformers' candidate_count: range_max + max_positives, and one more from 6.3 on
    extra = 1 if Version(sentence_transformers.__version__) >= Version("6.3") else 0
    depth = default_range_max(FilterSettings(**settings), 2, True) + 2 + extra
    with open(tmp_path / "dense.run", "w") as run:
        for i, row in enumerate(cosine):
            for rank, j in enumerate(np.argsort(-row, kind="stable")[:depth], 1):
                run.write(f"q{i} Q0 {doc_ids[j]} {rank} {row[j]:.17g} dense\n")
    out = tmp_path / "out"
    mine(
        MineConfig(
            data=str(folder / "pairs.tsv"),
            format="tsv",
            corpus=str(folder / "corpus.tsv"),
            candidates="run",
            run=str(tmp_path / "dense.run"),
            teachers=[str(ce)],
            sampling=sampling,
            seed=5,
            **settings,
        ),
        out,
        show_progress=False,
    )
    ours = datasets.load_from_disk(str(out / "dataset"))

    random.seed(5)  # sentence-transformers samples with the global random module, spladekit with Random(seed)
    theirs = mine_hard_negatives(
        datasets.Dataset.from_dict({"query": [p[0] for p in pairs], "positive": [p[1] for p in pairs]}),
        dense,
        corpus=list(corpus.values()),
        cross_encoder=CrossEncoder(str(ce), device="cpu"),
        sampling_strategy=sampling,
        output_format="n-tuple",
        output_scores=True,
        verbose=False,
        **settings,
    )
    assert len(theirs) > 0 and len(ours) == len(theirs)
    columns = ["query", "positive", "negative_1", "negative_2", "negative_3"]
    assert [[r[c] for c in columns] for r in ours] == [[r[c] for c in columns] for r in theirs]
    for a, b in zip(ours["scores"], theirs["scores"]):
        assert all(close(x, y) for x, y in zip(a, b)), (a, b)
    assert torch.is_tensor(torch.tensor(ours["scores"]))


@pytest.mark.filterwarnings("ignore:dense collapse")  # a tiny random student without regulariser: not the point here
@pytest.mark.parametrize("loss", ["margin_mse", "kl"])
def test_mined_dataset_trains(mined, tmp_path, loss):
    from typer.testing import CliRunner

    from spladekit.cli import app

    model = make_tiny_model(tmp_path / "student")
    cfg = tiny_config(
        model,
        steps=8,
        batch_size=9,
        lr=3e-3,
        data={"format": "hf", "path": str(mined / "dataset"), "num_negatives": 3},
        loss={"kind": loss, "scale_check": None},
        regularizer={"lambda_q": 0.0, "lambda_d": 0.0},
    )
    (tmp_path / "c.yaml").write_text(cfg.to_yaml())
    res = CliRunner().invoke(app, ["train", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "run"), "--no-progress"])
    assert res.exit_code == 0, res.output
    losses = [
        json.loads(line)["loss"]
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in line and '"step"' in line
    ]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
    # every step sees the same 9 rows with all their 3 negatives (batch = dataset): the loss must fall
    assert losses[-1] < losses[0], losses


def test_cli_mine_bm25_and_errors(tmp_path, shared):
    """BEIR train qrels (../shared's SciFact, 3 queries) mined by BM25 without a teacher."""
    from typer.testing import CliRunner

    from spladekit.cli import app

    scifact = shared / "data" / "beir" / "scifact"
    out = tmp_path / "m"
    res = CliRunner().invoke(
        app,
        [
            "mine",
            "--data",
            str(scifact),
            "--split",
            "train",
            "--max-queries",
            "3",
            "--out",
            str(out),
            "--num-negatives",
            "2",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("mined 3 queries:")
    rows = datasets.load_from_disk(str(out / "dataset"))
    assert (
        set(rows.column_names) >= {"query", "positive", "negative_1", "negative_2"}
        and "scores" not in rows.column_names
    )
    from spladekit.data.beir import load_beir
    from spladekit.index.bm25 import bm25_search

    data = load_beir(scifact, "train")
    ids = list(data.corpus)
    for row in rows:  # the negatives are BM25's best non-relevant documents, in rank order
        hits = bm25_search([data.queries[row["query_id"]]], list(data.corpus.values()), k=10)[0]  # the whole corpus
        expect = [ids[i] for i, _ in hits if data.qrels[row["query_id"]].get(ids[i], 0) <= 0][:2]
        assert [row["negative_1_id"], row["negative_2_id"]] == expect
    bad = CliRunner().invoke(app, ["mine", "--data", str(scifact), "--out", str(tmp_path / "x"), "--candidates", "run"])
    assert bad.exit_code == 2 and "run" in bad.output


def test_model_candidates_are_the_dot_product_top_k(texts, tmp_path):
    """candidates=model: an index built on the fly (and a given index) ranks by the SPLADE dot product:
    the negatives equal the best non-positive documents of q·d computed here from the encoder's vectors."""
    from spladekit.index.index import Index
    from spladekit.mine.inputs import read_mining_input
    from spladekit.model.encoder import SpladeEncoder

    folder, _, _ = texts
    model = make_tiny_model(tmp_path / "splade")
    base = dict(
        data=str(folder / "pairs.tsv"),
        format="tsv",
        corpus=str(folder / "corpus.tsv"),
        candidates="model",
        model=str(model),
        num_negatives=2,
    )
    data = read_mining_input(MineConfig(**base))
    encoder = SpladeEncoder.from_pretrained(str(model))
    doc_ids = list(data.corpus)
    scores = (
        encoder.encode_queries(list(data.queries.values())) @ encoder.encode_documents(list(data.corpus.values())).T
    ).toarray()
    expect = {}
    for qid, row in zip(data.queries, scores):
        order = sorted(range(len(doc_ids)), key=lambda j: (-row[j], doc_ids[j]))  # ties by id: spladekit's search rule
        expect[qid] = [doc_ids[j] for j in order if doc_ids[j] not in data.positives[qid]][:2]
    mine(MineConfig(**base), tmp_path / "fly", show_progress=False)
    Index.build(encoder, data.corpus, tmp_path / "index", distributed=False)
    mine(MineConfig(**{**base, "index": str(tmp_path / "index")}), tmp_path / "given", show_progress=False)
    for out in ("fly", "given"):
        rows = datasets.load_from_disk(str(tmp_path / out / "dataset"))
        got = {r["query_id"]: [r["negative_1_id"], r["negative_2_id"]] for r in rows}
        assert got == expect


def test_teachers_are_averaged(ce, texts, tmp_path):
    from sentence_transformers import CrossEncoder

    folder, _, _ = texts
    second = make_cross_encoder(tmp_path / "second", seed=9)
    out = tmp_path / "two"
    mine(
        MineConfig(
            data=str(folder / "pairs.tsv"),
            format="tsv",
            corpus=str(folder / "corpus.tsv"),
            teachers=[str(ce), str(second)],
            num_negatives=2,
            max_queries=3,
        ),
        out,
        show_progress=False,
    )
    models = [CrossEncoder(str(ce), device="cpu"), CrossEncoder(str(second), device="cpu")]
    for row in datasets.load_from_disk(str(out / "dataset")):
        for doc, score in zip([row["positive"], row["negative_1"], row["negative_2"]], row["scores"]):
            each = [float(m.predict([(row["query"], doc)], show_progress_bar=False)[0]) for m in models]
            assert close(score, (each[0] + each[1]) / 2)


def test_hf_pairs_equal_tsv_pairs(texts, tmp_path):
    """The same (query, positive) pairs as a Hugging Face dataset file and as a TSV mine the same rows (BM25)."""
    folder, pairs, _ = texts
    datasets.Dataset.from_dict({"anchor": [q for q, _ in pairs], "positive": [p for _, p in pairs]}).to_parquet(
        str(tmp_path / "p.parquet")
    )
    common = dict(corpus=str(folder / "corpus.tsv"), num_negatives=2)
    mine(MineConfig(data=str(folder / "pairs.tsv"), format="tsv", **common), tmp_path / "tsv", show_progress=False)
    mine(MineConfig(data=str(tmp_path / "p.parquet"), format="hf", **common), tmp_path / "hf", show_progress=False)
    a, b = (datasets.load_from_disk(str(tmp_path / x / "dataset")).to_list() for x in ("tsv", "hf"))
    assert a == b and len(a) == len(pairs)
    with pytest.raises(Exception, match="line 1"):
        (tmp_path / "bad.tsv").write_text("only one field\n")
        mine(MineConfig(data=str(tmp_path / "bad.tsv"), format="tsv", **common), tmp_path / "bad", show_progress=False)


def test_a_chunk_scored_under_other_settings_is_scored_again(ce, texts, mined, tmp_path, monkeypatch):
    """Chunks left by a run with another teacher max length, or by another teacher at the same path,
    are not reused (their digest covers the max length and the teacher's files): the output equals a
    fresh run's (the `mined` fixture's) within REL; the stale scores differ from it by whole units."""
    import shutil

    from spladekit.mine import write

    folder, _, _ = texts

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    def config(teacher, **extra):
        return MineConfig(
            data=str(folder / "pairs.tsv"),
            format="tsv",
            corpus=str(folder / "corpus.tsv"),
            teachers=[str(teacher)],
            num_negatives=3,
            chunk_queries=3,
            **extra,
        )

    reference = datasets.load_from_disk(str(mined / "dataset"))
    other = make_cross_encoder(tmp_path / "other", seed=7)  # another teacher, later copied over `ce`'s path
    moved = tmp_path / "teacher"
    shutil.copytree(ce, moved)
    for stale, teacher in ((config(moved, teacher_max_length=8), moved), (config(other), other)):
        out = tmp_path / f"out-{teacher.name}"
        with monkeypatch.context() as patch:
            patch.setattr(write, "write_dataset", stop)
            with pytest.raises(KeyboardInterrupt):
                mine(stale, out, show_progress=False)
        assert sorted(p.name for p in (out / "work").glob("teacher-*.json"))  # stale chunks left behind
        if teacher is other:  # the same path now holds `ce` again: its files differ from the chunks' teacher
            shutil.rmtree(other)
            shutil.copytree(ce, other)
        mine(config(teacher), out, show_progress=False)
        again = datasets.load_from_disk(str(out / "dataset"))
        for a, b in zip(
            again, reference, strict=True
        ):  # REL: the batch-padding bound above (MKL may differ by alignment)
            assert len(a["scores"]) == len(b["scores"]) and all(close(x, y) for x, y in zip(a["scores"], b["scores"]))


def test_a_teacher_that_is_no_cross_encoder_is_refused(texts, tmp_path):
    """A masked LM given as --teacher would load in CrossEncoder with a random classifier head; it is
    refused naming its config.json and architectures, before OUT is made."""
    from spladekit.errors import DataFormatError

    folder, _, _ = texts
    lm = make_tiny_model(tmp_path / "mlm")
    out = tmp_path / "out"
    with pytest.raises(DataFormatError, match=r"config\.json.*architectures.*BertForMaskedLM.*not a cross-encoder"):
        mine(
            MineConfig(
                data=str(folder / "pairs.tsv"),
                format="tsv",
                corpus=str(folder / "corpus.tsv"),
                teachers=[str(lm)],
                num_negatives=3,
            ),
            out,
            show_progress=False,
        )
    assert not out.exists()


def _mlm_as(folder: Path, architectures: list[str] | None, shards: bool = False) -> Path:
    """A masked-LM checkpoint (no classifier head) whose config.json says ``architectures`` (dropped when
    None) and one label (as a one-label cross-encoder's); ``shards``: saved in several safetensors files
    with an index."""
    from transformers import BertForMaskedLM

    make_tiny_model(folder)
    if shards:
        model = BertForMaskedLM.from_pretrained(str(folder))
        (folder / "model.safetensors").unlink()
        model.save_pretrained(str(folder), max_shard_size="20KB")
        assert (folder / "model.safetensors.index.json").is_file()
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures", None)
    if architectures is not None:
        config["architectures"] = architectures
    config["id2label"], config["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("case", ["no-architectures", "edited-architectures", "sharded"])
def test_a_checkpoint_without_the_classifier_head_is_refused(texts, tmp_path, case):
    """A masked LM whose config.json says nothing (or says *ForSequenceClassification) loads in
    CrossEncoder with a random classifier head: refused naming the weight file and the head's
    parameters (absent from the checkpoint's safetensors keys or its shard index); no dataset is written."""
    from safetensors import safe_open

    from spladekit.errors import DataFormatError

    folder, _, _ = texts
    lm = _mlm_as(
        tmp_path / "lm",
        None if case == "no-architectures" else ["BertForSequenceClassification"],
        shards=case == "sharded",
    )
    weights = "model.safetensors.index.json" if case == "sharded" else "model.safetensors"
    if case != "sharded":
        with safe_open(str(lm / weights), "pt") as f:  # the premise: the checkpoint has no classifier
            assert not any(k.startswith("classifier.") for k in f.keys())
    out = tmp_path / "out"
    with pytest.raises(
        DataFormatError,
        match=rf"{weights}: teacher .*classifier head \(classifier\.weight, classifier\.bias\) "
        r"is not in the checkpoint",
    ):
        mine(
            MineConfig(
                data=str(folder / "pairs.tsv"),
                format="tsv",
                corpus=str(folder / "corpus.tsv"),
                teachers=[str(lm)],
                num_negatives=3,
            ),
            out,
            show_progress=False,
        )
    assert not (out / "dataset").exists() and not (out / "naver").exists()


def test_a_teacher_with_several_labels_is_refused(texts, tmp_path):
    """A 3-label classifier's label-0 logit is no relevance score: refused naming its config.json and
    id2label, before OUT is made; a config saying ``num_labels: 3`` instead of id2label is refused once
    loaded (CrossEncoder.num_labels)."""
    from spladekit.errors import DataFormatError
    from spladekit.mine.teacher import load_cross_encoder

    folder, _, _ = texts
    three = make_cross_encoder(tmp_path / "three", num_labels=3)
    out = tmp_path / "out"
    with pytest.raises(
        DataFormatError, match=r"three/config\.json: field 'id2label': teacher .* has 3 labels; relevance needs one"
    ):
        mine(
            MineConfig(
                data=str(folder / "pairs.tsv"),
                format="tsv",
                corpus=str(folder / "corpus.tsv"),
                teachers=[str(three)],
                num_negatives=3,
            ),
            out,
            show_progress=False,
        )
    assert not out.exists()
    config = json.loads((three / "config.json").read_text())
    del config["id2label"], config["label2id"]
    config["num_labels"] = 3
    (three / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataFormatError, match=r"has 3 labels; relevance needs one score a pair"):
        load_cross_encoder(str(three), device="cpu")


def test_a_teacher_whose_vocab_changed_at_the_same_path_is_scored_again(ce, texts, tmp_path, monkeypatch):
    """Chunks scored before the teacher's vocab.txt changed (its weights, config.json and tokenizer.json
    absent or the same) are not reused: the resumed run equals a fresh run with the new vocabulary, which
    differs from the old scores (the word ids moved)."""
    import shutil

    from spladekit.mine import write

    folder, _, _ = texts
    teacher = tmp_path / "teacher"
    shutil.copytree(ce, teacher)
    (teacher / "tokenizer.json").unlink()  # the tokenizer is then built from vocab.txt, as a hub BERT teacher's
    shutil.copy(ce.parent / f"{ce.name}-base" / "vocab.txt", teacher / "vocab.txt")

    def config():
        return MineConfig(
            data=str(folder / "pairs.tsv"),
            format="tsv",
            corpus=str(folder / "corpus.tsv"),
            teachers=[str(teacher)],
            num_negatives=3,
            chunk_queries=3,
        )

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(write, "write_dataset", stop)
        with pytest.raises(KeyboardInterrupt):
            mine(config(), out, show_progress=False)
    old = {p.name: json.loads(p.read_text())["scores"] for p in (out / "work").glob("teacher-*.json")}
    vocab = (teacher / "vocab.txt").read_text().splitlines()
    (teacher / "vocab.txt").write_text("\n".join(vocab[:5] + vocab[5:][::-1]) + "\n")  # the words' ids reversed
    mine(config(), out, show_progress=False)
    fresh = tmp_path / "fresh"
    mine(config(), fresh, show_progress=False)
    again, reference = datasets.load_from_disk(str(out / "dataset")), datasets.load_from_disk(str(fresh / "dataset"))
    assert [r["scores"] for r in again] == [r["scores"] for r in reference]  # the same computation twice
    # the old chunks' first query: its positive's score first (as mine() lists a query's pairs), now another
    assert not close(old["teacher-00000.json"][0][0], reference[0]["scores"][0])


@pytest.mark.parametrize("case", ["no weights", "tokenizer past the embedding"])
def test_a_teacher_that_cannot_score_is_refused_in_one_line_before_out_is_made(ce, texts, tmp_path, case):
    """A teacher folder without weights (transformers' OSError), or whose tokenizer gives ids past its
    embedding's rows (an IndexError once a text holds such a token): `spladekit mine` ends with one
    `error:` line naming the file, and --out is not made (no work/ left behind)."""
    import os
    import shutil
    import subprocess
    import sys

    folder, pairs, _ = texts
    teacher = tmp_path / "teacher"
    shutil.copytree(ce, teacher)
    data = folder / "pairs.tsv"
    if case == "no weights":
        (teacher / "model.safetensors").unlink()
        expect = rf"^error: {teacher}: teacher .* has no weights \(none of model.safetensors, "
    else:
        tokenizer = json.loads((teacher / "tokenizer.json").read_text())
        vocab = tokenizer["model"]["vocab"]
        for i in range(50):  # ids 155..204; the embedding has 155 rows
            vocab[f"extra{i}"] = len(vocab)
        (teacher / "tokenizer.json").write_text(json.dumps(tokenizer))
        data = tmp_path / "pairs.tsv"
        data.write_text("".join(f"{q} extra40\t{p}\n" for q, p in pairs))
        expect = (
            rf"^error: {teacher}/tokenizer.json: field 'vocab': teacher .* has 205 token ids, its embedding 155 rows"
        )
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spladekit",
            "mine",
            "--format",
            "tsv",
            "--data",
            str(data),
            "--corpus",
            str(folder / "corpus.tsv"),
            "--teacher",
            str(teacher),
            "--out",
            str(out),
            "--num-negatives",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")),
    )
    errors = [line for line in done.stderr.splitlines() if not line.startswith("Loading weights")]
    assert done.returncode == 2 and len(errors) == 1 and re.match(expect, errors[0]), done.stderr[-2000:]
    assert not out.exists()


@pytest.mark.parametrize("option", ["--relative-margin", "--absolute-margin"])
def test_a_negative_margin_is_refused(texts, tmp_path, option):
    """A margin is a distance below the positive's score (sentence-transformers' definition); a negative one
    puts the threshold above the positive, keeping negatives that score higher than it."""
    from typer.testing import CliRunner

    from spladekit.cli import app

    folder, _, _ = texts
    done = CliRunner().invoke(
        app,
        ["mine", "--format", "tsv", "--data", str(folder / "pairs.tsv"), "--out", str(tmp_path / "o"), option, "-0.5"],
    )
    assert done.exit_code == 2 and option in done.stderr and "greater than or equal to 0" in done.stderr, done.output
    assert not (tmp_path / "o").exists()


def test_a_teacher_module_path_out_of_its_folder_is_refused(ce, texts, tmp_path):
    """modules.json pointing the Transformer module outside the teacher's folder: refused naming
    modules.json and the field, before --out is made."""
    import shutil

    from spladekit.errors import DataFormatError

    folder, _, _ = texts
    teacher = tmp_path / "teacher"
    shutil.copytree(ce, teacher)
    shutil.copytree(ce, tmp_path / "outside")
    (teacher / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "../outside",
                    "type": "sentence_transformers.cross_encoder.CrossEncoder.Transformer",
                }
            ]
        )
    )
    out = tmp_path / "out"
    with pytest.raises(DataFormatError, match=r"modules.json: field 'path': path '../outside' leaves the model folder"):
        mine(
            MineConfig(
                data=str(folder / "pairs.tsv"),
                format="tsv",
                corpus=str(folder / "corpus.tsv"),
                teachers=[str(teacher)],
                num_negatives=3,
            ),
            out,
            show_progress=False,
        )
    assert not out.exists()


def test_a_teacher_with_its_own_code_is_refused(ce, texts, tmp_path):
    """A cross-encoder whose config.json maps its class to the folder's own code (auto_map): refused
    naming config.json before anything is imported from it or --out is made."""
    import shutil

    from spladekit.errors import UnsupportedModelError

    folder, _, _ = texts
    teacher, marker = tmp_path / "teacher", tmp_path / "marker"
    shutil.copytree(ce, teacher)
    (teacher / "modeling_evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    config = json.loads((teacher / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.Evil"}
    (teacher / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    with pytest.raises(
        UnsupportedModelError,
        match=r"config.json: field 'auto_map.AutoModelForSequenceClassification': "
        r".*'Evil' .*modeling_evil.py .*--trust-remote-code",
    ):
        mine(
            MineConfig(
                data=str(folder / "pairs.tsv"),
                format="tsv",
                corpus=str(folder / "corpus.tsv"),
                teachers=[str(teacher)],
                num_negatives=3,
            ),
            out,
            show_progress=False,
        )
    assert not out.exists() and not marker.exists()


def test_a_teacher_with_its_own_code_runs_when_trusted(ce, texts, mined, tmp_path):
    """The same teacher with trust_remote_code: its modeling file runs (the marker) and, being BERT's
    classifier under another name, it scores as the plain teacher does (the dataset of ``mined``). In
    another process: transformers registers the folder's class for BERT configs in the process that loads it."""
    import os
    import shutil
    import subprocess
    import sys

    folder, _, _ = texts
    teacher, marker, out = tmp_path / "teacher", tmp_path / "marker", tmp_path / "out"
    shutil.copytree(ce, teacher)
    (teacher / "modeling_evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "from transformers import BertForSequenceClassification as Evil\n"
    )
    config = json.loads((teacher / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.Evil"}
    (teacher / "config.json").write_text(json.dumps(config))
    script = (
        "from spladekit.mine import MineConfig, mine\n"
        f"mine(MineConfig(data={str(folder / 'pairs.tsv')!r}, format='tsv', corpus={str(folder / 'corpus.tsv')!r}, "
        f"teachers=[{str(teacher)!r}], num_negatives=3, chunk_queries=3, trust_remote_code=True), {str(out)!r}, "
        "show_progress=False)\n"
    )
    env = dict(
        os.environ,
        HF_MODULES_CACHE=str(tmp_path / "modules"),
        PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"),
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.exists()
    rows, reference = datasets.load_from_disk(str(out / "dataset")), datasets.load_from_disk(str(mined / "dataset"))
    assert [r["query"] for r in rows] == [r["query"] for r in reference]
    for row, ref in zip(rows, reference):
        assert [row[f"negative_{k}"] for k in (1, 2, 3)] == [ref[f"negative_{k}"] for k in (1, 2, 3)]
        assert all(close(a, b) for a, b in zip(row["scores"], ref["scores"])), (row["scores"], ref["scores"])
