"""Typed settings of a mining run (``spladekit mine``), saved as ``mine.yaml`` beside its output."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from spladekit.settings import Settings


class MineConfig(Settings):
    """Queries with positives → candidates → optional teacher scores → filters → training files.

    Inputs (``data``, ``format``):
        ``beir``: a BEIR folder, a dataset name, or an ``irds:`` id (:mod:`spladekit.data.irds`); the
            positives are the documents with grade > 0 in ``qrels/<split>.tsv``, the corpus is the folder's.
        ``hf``: a Hugging Face dataset of ``(query, positive)`` text pairs (a file, a ``save_to_disk``
            folder or a hub id; the first two columns, or ``query_column``/``positive_column``).
        ``tsv``: a ``query<TAB>positive`` text file.
        For ``hf`` and ``tsv`` the corpus is the positives plus ``corpus`` (a BEIR folder, a
        ``corpus.jsonl[.gz]`` or an ``id<TAB>text`` TSV), texts de-duplicated as
        sentence-transformers' ``mine_hard_negatives`` does; ids are those of ``corpus``, ``pos-<k>``
        for a positive it lacks, and ``q<k>`` for the k-th distinct query.

    Candidates (``candidates``): ``bm25`` (bm25s), ``model`` (a spladekit ``Index`` of ``model``,
    built on the fly, or the given ``index``; dot product) or ``run`` (a TREC run file).
    """

    data: str
    format: Literal["beir", "hf", "tsv"] = "beir"
    split: str = Field("train", description="beir: the qrels split; hf: the dataset split")
    subset: str | None = Field(None, description="hf: the dataset configuration on the hub")
    query_column: str | None = None
    positive_column: str | None = None
    corpus: str | None = Field(
        None, description="hf/tsv: more candidate documents (BEIR folder, corpus.jsonl, id<TAB>text)"
    )
    max_queries: int | None = Field(None, ge=1, description="mine only the first N queries")

    candidates: Literal["bm25", "model", "run"] = "bm25"
    model: str | None = Field(None, description="candidates=model: the spladekit model (and query encoder of index)")
    index: str | None = Field(None, description="candidates=model: an existing spladekit index folder")
    trust_remote_code: bool = Field(
        False,
        description="run the own code of the model folder (candidates=model) and of the "
        "teachers (spladekit.model.remote_code)",
    )
    run: str | None = Field(None, description="candidates=run: a TREC run file of the queries' ids")
    depth: int | None = Field(None, ge=1, description="candidates per query (default range_max + max positives + 1)")

    teachers: list[str] = Field(default_factory=list, description="cross-encoder folders or hub ids; scores averaged")
    activation: Literal["identity", "sigmoid", "model"] = Field(
        "identity",
        description="identity: raw logits (a sigmoid squashes MarginMSE's margins); model: the "
        "cross-encoder's own default",
    )
    teacher_batch_size: int = Field(32, ge=1)
    teacher_max_length: int | None = Field(None, ge=8)
    chunk_queries: int = Field(256, ge=1, description="queries per resumable teacher-scoring chunk")

    num_negatives: int = Field(3, ge=1)
    range_min: int = Field(0, ge=0)
    range_max: int | None = Field(None, ge=1)
    max_score: float | None = None
    min_score: float | None = None
    absolute_margin: float | None = Field(
        None, ge=0.0, description="a distance: negative, the threshold lies above the positive"
    )
    relative_margin: float | None = Field(
        None, ge=0.0, description="a fraction of |positive score|: negative, the threshold lies above the positive"
    )
    sampling: Literal["top", "random"] = "top"
    seed: int = Field(0, ge=0, description="random sampling: random.Random(seed)")
    device: str | None = None

    @model_validator(mode="after")
    def _check(self) -> MineConfig:
        if self.candidates == "run" and not self.run:
            raise ValueError("candidates 'run' needs run (a TREC run file)")
        if self.candidates == "model" and not (self.model or self.index):
            raise ValueError("candidates 'model' needs model (a spladekit model) or index (an index folder)")
        if self.format == "beir" and self.corpus:
            raise ValueError("corpus is for format hf/tsv; a BEIR folder brings its own corpus")
        if self.range_max is not None and self.range_max - self.range_min < self.num_negatives:
            raise ValueError(
                f"range_max={self.range_max} leaves fewer than num_negatives={self.num_negatives} "
                f"candidates after range_min={self.range_min}"
            )
        return self
