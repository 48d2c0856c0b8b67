"""Shared fixtures: tiny random masked-LM models built in code, and the real files in ../shared;
and the suite's skip rule under CI.

The skip rule: with ``CI`` set to ``true`` (or ``1``/``yes``) in the environment, as CI machines set
it and ``.ci/run`` exports it, a test or module that skips fails instead, unless its reason is one of
:data:`ALLOWED_SKIPS` word for word. A missing engine, engine venv, Python package, Java or Anserini
jar, tool or ``../shared`` file is something the project's set-up provides, so on CI its skip is a
guard gone missing, not a pass. Only what no CI machine can have (a CUDA device) stays a skip. An
expected failure (``xfail``) is not a skip and is left alone. Without ``CI`` every skip stays a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from spladekit.data.resolve import shared_roots

#: skip reasons that stay skips under CI, each word for word as the test gives it, with why no CI
#: machine can meet it (tests/test_ci_skips.py checks that each is still given by some test)
ALLOWED_SKIPS = {
    "needs a CUDA device (run on the GPU machine)": "CI machines have no GPU; the GPU machine runs these tests",
}


def on_ci() -> bool:
    """True when the environment says this is a CI run (``CI`` = ``true``, ``1`` or ``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def skip_reason(report) -> str | None:
    """The reason of a skipped test or collection report (``Skipped: `` prefix removed); None when the
    report is not a skip (an ``xfail`` is reported as skipped too, with ``wasxfail``: not a skip)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def fail_disallowed_skip(report) -> None:
    """Under CI, turn ``report`` from skipped into failed when its reason is not in ALLOWED_SKIPS."""
    reason = skip_reason(report)
    if reason is None or not on_ci() or reason in ALLOWED_SKIPS:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI={os.environ['CI']}, where a skip fails the run: {reason}\n"
        "(set up what it needs, as `make test` does; a reason no CI machine can meet belongs in "
        "ALLOWED_SKIPS of tests/conftest.py)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    fail_disallowed_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield  # a module-level importorskip skips the whole module here
    fail_disallowed_skip(report)
    return report


WORDS = (
    "the a of and to in is for on with protein cell cells gene genes cancer risk study patients "
    "treatment effect effects increase decrease blood brain mouse mice human dna rna virus vaccine "
    "drug dose trial results high low level levels expression activity response model data"
).split()


def shared_dir() -> Path | None:
    """The shared data folder, or None when it is not beside the checkout."""
    for root in shared_roots():
        if (root / "README.md").exists() and (root / "data").is_dir():
            return root
    return None


@pytest.fixture(scope="session")
def shared() -> Path:
    root = shared_dir()
    if root is None:
        pytest.skip("../shared (or $SPLADEKIT_SHARED) is not present: real-data test skipped")
    return root


@pytest.fixture(scope="session")
def splade_tiny(shared) -> Path:
    path = shared / "models" / "splade-tiny"
    if not (path / "model.safetensors").exists():
        pytest.skip(f"{path} missing: real-checkpoint test skipped")
    return path


def write_vocab(folder: Path) -> Path:
    """A WordPiece vocabulary: special tokens, WORDS, and single letters (so any word tokenizes)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + list("abcdefghijklmnopqrstuvwxyz0123456789")
    tokens += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def make_tokenizer(folder: Path):
    from transformers import BertTokenizerFast

    # from_pretrained reads vocab.txt in transformers 4.x and 5.x alike (in 5.x the vocab_file
    # argument of the constructor is ignored, which left a 5-token vocabulary of special tokens)
    write_vocab(folder)
    return BertTokenizerFast.from_pretrained(str(folder), do_lower_case=True)


def make_tiny_bert(vocab_size: int, seed: int = 0):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return BertForMaskedLM(config).eval()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A saved tiny random BertForMaskedLM with a WordPiece tokenizer (session-wide, read-only)."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = make_tokenizer(folder)
    model = make_tiny_bert(len(tokenizer))
    with torch.no_grad():  # a positive decoder bias so that initial vectors are not all empty
        model.cls.predictions.decoder.bias.normal_(0.5, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture()
def tiny_beir(tmp_path) -> Path:
    """A small BEIR folder: 6 documents, 3 queries, test qrels."""
    import json

    folder = tmp_path / "tiny-beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [
        ("d1", "Protein", "protein expression in mouse cells"),
        ("d2", "", "cancer risk in patients with high blood levels"),
        ("d3", "Vaccine", "vaccine trial results and response"),
        ("d4", "", "gene expression and dna rna activity"),
        ("d5", "Brain", "brain activity in human study"),
        ("d6", "", "drug dose effect on treatment"),
    ]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc_id, title, text in docs:
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    queries = [("q1", "protein expression"), ("q2", "cancer risk"), ("q3", "vaccine response"), ("q4", "unjudged")]
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for qid, text in queries:
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td4\t1\nq2\td2\t2\nq3\td3\t1\n", encoding="utf-8"
    )
    return folder
