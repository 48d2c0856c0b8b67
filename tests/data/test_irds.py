"""``irds:`` dataset ids read by ir_datasets itself from a cache populated, in ir_datasets' layout,
with ../shared's SciFact; the result must equal spladekit's own BEIR reader on the same files."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("ir_datasets")


def populate(home: Path, scifact: Path, version: str | None = "v2") -> Path:
    """IR_DATASETS_HOME/beir/scifact/source.zip: the official BEIR zip's layout (``scifact/corpus.jsonl``,
    ``scifact/queries.jsonl``, ``scifact/qrels/{train,test}.tsv``; ir_datasets' downloads.json
    ``cache_path: scifact/source.zip``), plus irds_version.txt (its Migrator version for BEIR docs)."""
    folder = home / "beir" / "scifact"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "source.zip", "w") as zf:
        zf.writestr("scifact/corpus.jsonl", gzip.decompress((scifact / "corpus.jsonl.gz").read_bytes()))
        zf.write(scifact / "queries.jsonl", "scifact/queries.jsonl")
        for split in ("train", "test"):
            zf.write(scifact / "qrels" / f"{split}.tsv", f"scifact/qrels/{split}.tsv")
    if version is not None:
        (folder / "irds_version.txt").write_text(version)
    return folder


SCRIPT = """
import json, sys
from spladekit.data.beir import load_beir
from spladekit.errors import ResolutionError
scifact, action = sys.argv[1], sys.argv[2]
if action == "compare":
    out = {}
    for split in ("test", "train"):
        ours, theirs = load_beir(scifact, split), load_beir(f"irds:beir/scifact/{split}", split)
        out[split] = [theirs.corpus == ours.corpus, theirs.queries == ours.queries, theirs.qrels == ours.qrels,
                      len(ours.corpus), len(ours.queries)]
    print(json.dumps(out))
elif action == "no-qrels":  # beir/scifact without a split: ir_datasets gives its docs and queries, no qrels
    from pathlib import Path
    from spladekit.data.beir import find_file, load_corpus, read_queries
    from spladekit.data.resolve import resolve_dataset
    from spladekit.errors import DataFormatError
    folder = resolve_dataset("irds:beir/scifact")
    out = {"corpus": load_corpus("irds:beir/scifact") == load_corpus(scifact),
           "queries": read_queries(find_file(folder, "queries")) == read_queries(Path(scifact) / "queries.jsonl"),
           "files": sorted(p.name for p in folder.iterdir())}
    try:
        load_beir("irds:beir/scifact", "test")
        out["qrels_error"] = None
    except DataFormatError as exc:
        out["qrels_error"] = str(exc)
    print(json.dumps(out))
else:
    try:
        load_beir(action, "test")
        print(json.dumps({"error": None}))
    except ResolutionError as exc:
        print(json.dumps({"error": str(exc)}))
"""


def run_irds(tmp: Path, scifact: Path, action: str) -> dict:
    """A fresh process: ir_datasets fixes its dataset paths from IR_DATASETS_HOME when first imported."""
    env = dict(
        os.environ,
        IR_DATASETS_HOME=str(tmp / "irds-home"),
        SPLADEKIT_CACHE=str(tmp / "spladekit-cache"),
        SPLADEKIT_OFFLINE="1",
        PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(scifact), action], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture()
def env(tmp_path, shared):
    return tmp_path, shared / "data" / "beir" / "scifact"


def test_irds_scifact_equals_load_beir(env):
    tmp, scifact = env
    populate(tmp / "irds-home", scifact)
    result = run_irds(tmp, scifact, "compare")
    # corpus (text and order: title + " " + text both ways), queries and qrels equal for each split
    assert result == {"test": [True, True, True, 5183, 300], "train": [True, True, True, 5183, 809]}
    # a second read uses the written BEIR folder: ir_datasets' source may go now
    (tmp / "irds-home" / "beir" / "scifact" / "source.zip").unlink()
    assert run_irds(tmp, scifact, "irds:beir/scifact/test") == {"error": None}


def test_irds_without_qrels_gives_its_documents_and_queries(env):
    """Only the documents are required (``irds:msmarco-passage`` has nothing else): ``irds:beir/scifact``
    (no split: docs and queries, no qrels) is written without qrels and equals the BEIR files; asking
    it for a split's qrels names the missing file."""
    tmp, scifact = env
    populate(tmp / "irds-home", scifact)
    result = run_irds(tmp, scifact, "no-qrels")
    assert result["corpus"] and result["queries"]
    assert result["files"] == ["corpus.jsonl.gz", "irds.json", "queries.jsonl"]
    assert "qrels" in result["qrels_error"] and "missing" in result["qrels_error"]


def test_offline_says_what_is_missing_where(env):
    tmp, scifact = env
    message = run_irds(tmp, scifact, "irds:beir/scifact/test")["error"]
    assert message and "\n" not in message
    assert str(tmp / "irds-home" / "beir" / "scifact" / "source.zip") in message and "offline" in message


def test_stale_irds_version_is_refused_before_ir_datasets_deletes(env):
    """A built docstore (docs.pklz4) with irds_version.txt missing would be deleted and rebuilt from
    source.zip by ir_datasets' Migrator; without source.zip spladekit refuses first and deletes nothing."""
    tmp, scifact = env
    folder = populate(tmp / "irds-home", scifact, version=None)
    (folder / "source.zip").unlink()
    (folder / "docs.pklz4").mkdir()
    (folder / "docs.pklz4" / "data").write_text("built")
    message = run_irds(tmp, scifact, "irds:beir/scifact/test")["error"]
    assert "irds_version.txt is missing" in message and "nothing was deleted" in message
    assert (folder / "docs.pklz4" / "data").read_text() == "built"


def test_unknown_id(env):
    tmp, scifact = env
    assert "does not know" in run_irds(tmp, scifact, "irds:no-such/dataset")["error"]


TRIPLES_SCRIPT = """
import json, sys
from spladekit.train.config import DataConfig
from spladekit.train.data import load_training_examples
examples = load_training_examples(DataConfig(format="triples", path=sys.argv[1], max_queries=int(sys.argv[2])))
print(json.dumps([[e.qid, e.query, e.positives, e.negatives] for e in examples]))
"""


def test_irds_training_triples_equal_the_text_triples(tmp_path):
    """``irds:msmarco-passage/train/triples-small`` (docpairs qid, pid+, pid-) from a cache in ir_datasets'
    layout (``collection.tsv``, ``train/queries.tsv``, ``train/small.triples.qidpid.tsv``: its Cache files,
    and ``irds_version.txt`` v2) reads to the examples of the same triples as a text TSV."""
    from spladekit.train.data import iter_triples

    base = tmp_path / "irds-home" / "msmarco-passage"
    (base / "train").mkdir(parents=True)
    passages = {str(p): f"passage {p} about w{p} and w{p + 1}" for p in range(10)}
    queries = {"100": "what is w1", "200": "where is w5", "300": "who is w7"}
    triples = [("100", "1", "4"), ("200", "5", "0"), ("300", "7", "2"), ("100", "2", "9")]
    (base / "collection.tsv").write_text("".join(f"{p}\t{t}\n" for p, t in passages.items()))
    (base / "train" / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()))
    (base / "train" / "small.triples.qidpid.tsv").write_text("".join("\t".join(t) + "\n" for t in triples))
    (base / "irds_version.txt").write_text("v2")
    # IR_DATASETS_SKIP_DISK_FREE: ir_datasets checks the free disk against the real collection's docstore
    # (14.4 GB) before building it; this collection is ten lines (stop 39's CI failed on a fuller disk).
    env = dict(
        os.environ,
        IR_DATASETS_HOME=str(tmp_path / "irds-home"),
        SPLADEKIT_OFFLINE="1",
        IR_DATASETS_SKIP_DISK_FREE="true",
        PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", TRIPLES_SCRIPT, "irds:msmarco-passage/train/triples-small", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    tsv = tmp_path / "triples.tsv"
    tsv.write_text("".join(f"{queries[q]}\t{passages[p]}\t{passages[n]}\n" for q, p, n in triples))
    want = list(iter_triples(tsv))[:3]
    assert [(g[1], [d[1] for d in g[2]], [d[1] for d in g[3]]) for g in got] == [
        (e.query, [t for _, t in e.positives], [t for _, t in e.negatives]) for e in want
    ]
    assert [[g[0], g[2][0][0], g[3][0][0]] for g in got] == [list(t) for t in triples[:3]]  # ids kept; max_queries=3
