"""Stage 1: data in and out: BEIR folders, TREC qrels and runs, TSV, and where to find them."""

from spladekit.data.beir import BeirDataset, load_beir, read_corpus, read_queries
from spladekit.data.trec import read_qrels, read_run, write_run
from spladekit.data.tsv import read_tsv

__all__ = [
    "BeirDataset",
    "load_beir",
    "read_corpus",
    "read_queries",
    "read_qrels",
    "read_run",
    "write_run",
    "read_tsv",
]
