"""A part of BEIR SciFact for the harness tests (PyTerrier, MTEB): every judged document and a sample of
the others, all 300 judged test queries, written as a BEIR folder."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def scifact_part(scifact: Path, out: Path, every: int = 12) -> Path:
    """A BEIR folder of SciFact's test split: every judged document and each ``every``-th other one
    (about 800 documents, so that the test encodes them in seconds), all 300 judged queries."""
    qrels = (scifact / "qrels" / "test.tsv").read_text().splitlines()
    judged = {line.split("\t")[1] for line in qrels[1:]}
    (out / "qrels").mkdir(parents=True)
    with (
        gzip.open(scifact / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines,
        open(out / "corpus.jsonl", "w") as kept,
    ):
        for number, line in enumerate(lines):
            if json.loads(line)["_id"] in judged or number % every == 0:
                kept.write(line)
    (out / "queries.jsonl").write_text((scifact / "queries.jsonl").read_text())
    (out / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return out
