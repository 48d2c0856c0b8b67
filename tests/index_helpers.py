"""Tiny model, tokenizer and BEIR folder for the index tests (built in code, no shared data)."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = (
    "the a of and to in is for on with cell cells protein gene genes cancer risk blood brain virus "
    "vaccine study studies patients mice human dna rna immune response effect effects increase "
    "decrease treatment disease heart lung liver kidney . , a.m. 100% e.g."
).split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = list("abcdefghijklmnopqrstuvwxyz0123456789")


def vocabulary() -> list[str]:
    """Special tokens, words, single characters and their ``##`` continuations (unique)."""
    tokens = SPECIAL + WORDS + LETTERS + ["##" + c for c in LETTERS] + ["##s", "##ing", "##ed"]
    seen, out = set(), []
    for t in tokens:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def make_model(folder: Path, max_lengths: dict | None = None, seed: int = 0) -> Path:
    """Save a tiny random ``BertForMaskedLM`` + WordPiece tokenizer (+ ``spladekit.json``) in ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    vocab = vocabulary()
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(models.WordPiece(ids, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    model = BertForMaskedLM(config).eval()
    with torch.no_grad():  # larger logits and a negative bias: sparse, text-dependent vectors
        model.cls.predictions.decoder.weight.mul_(20.0)
        model.cls.predictions.bias.fill_(-3.0)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    meta = {"query_max_length": 16, "doc_max_length": 32}
    meta.update(max_lengths or {})
    (folder / "spladekit.json").write_text(json.dumps(meta))
    return folder


DOCS = [
    "the protein increase in blood cells of mice",
    "vaccine response in human patients",
    "gene effects on brain and liver",
    "cancer risk study of lung disease",
    "dna and rna virus",
    "heart disease treatment with immune cells " * 6,
    "kidney",
    "the a of and",
    "studies of genes in cancer patients e.g. lung, liver",
    "immune response to the virus vaccine at 100% a.m.",
    "xyz",
]
QUERIES = {"q1": "protein in blood", "q2": "cancer risk", "q3": "vaccine virus", "q4": "zzzz"}


def make_beir(folder: Path, docs=DOCS, queries=QUERIES) -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td0\t1\n" for q in queries)
    )
    (folder / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()))
    return folder


def index_with_cli(model: Path, beir: Path, out: Path) -> None:
    """Build the index folder ``out`` of the BEIR folder ``beir`` with ``spladekit index`` (``--batch-size 4
    --head-impl plain``); assert that the command succeeded."""
    from typer.testing import CliRunner

    from spladekit.cli import app

    args = ["index", "--model", str(model), "--data", str(beir), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--batch-size", "4", "--head-impl", "plain"])
    assert result.exit_code == 0, result.output
