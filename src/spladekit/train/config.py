"""Typed training configuration (pydantic, unknown keys are errors), read from YAML.

One :class:`TrainConfig` describes a whole run; it is saved as ``config.yaml`` next to every
checkpoint and the final model. ``--set a.b=value`` overrides use dotted paths (:func:`apply_overrides`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from spladekit.errors import DataFormatError, validation_problems
from spladekit.io import read_yaml
from spladekit.model.calibrate.spec import HeadSpec, RescaleSpec
from spladekit.model.metadata import INFERENCE_FREE
from spladekit.overrides import apply_overrides
from spladekit.settings import Settings


class ModelConfig(Settings):
    """The backbone: a masked-LM folder or hub id, the SPLADE head, and the max lengths (tokens)."""

    path: str = "rasyosef/splade-tiny"
    head_impl: Literal["plain", "fused"] | None = None
    query_max_length: int = Field(64, ge=4)
    doc_max_length: int = Field(256, ge=4)
    suppress_pad: bool = Field(True, description="set the decoder bias of [PAD] to -1e4 at initialisation")
    query_encoder: Literal["splade", "inference-free"] = Field(
        "splade",
        description="inference-free: queries are a bag of their tokens with one weight per vocabulary entry "
        "(IDF of the training documents at initialisation; spladekit.model.inference_free); no query regulariser",
    )
    train_query_weights: bool = Field(
        True, description="inference-free: train the query term weights jointly (else keep the IDF)"
    )
    allow_random_head: bool = Field(
        False, description="start from a checkpoint without MLM-head weights (a random head) instead of refusing it"
    )
    pooling: Literal["max", "sum"] | None = Field(
        None,
        description="SPLADE pooling over positions (max: SPLADE v2, sum: SPLADE v1); None: the start model's "
        "(spladekit.json or sentence-transformers' SpladePooling; max for a plain masked LM)",
    )
    activation: Literal["relu", "log1p_relu"] | None = Field(
        None,
        description="relu: log(1 + ReLU(x)); log1p_relu: log(1 + log(1 + ReLU(x))) (OpenSearch v3); None: the start model's",
    )
    trust_remote_code: bool = Field(
        False,
        description="run the model folder's own code (transformers auto_map classes; "
        "spladekit.model.remote_code); only for a folder whose code you trust",
    )


class TrainRescaleConfig(RescaleSpec):
    """MLM-head rescaling (and shift) at initialisation: the one
    :class:`~spladekit.model.calibrate.spec.RescaleSpec` (arXiv 2606.18811 §3) plus ``sample_texts``, the
    number of training documents ``target_logit``, ``joint`` and an ``activity`` target calibrate on."""

    sample_texts: int = Field(256, ge=1)


class ColumnsConfig(Settings):
    """Which dataset columns are the query, the positive, the hard negatives and the teacher scores
    (``data.format: hf``). A field left None follows the sentence-transformers conventions
    (:mod:`spladekit.train.hf`): score column ``score``/``label``, ``*_id`` columns are ids, the other
    columns in order are query, positive, negatives."""

    query: str | None = None
    positive: str | None = None
    negatives: list[str] | None = None
    scores: str | None = None
    query_id: str | None = None


class DataConfig(Settings):
    """Training data.

    Formats:
        ``beir``: a BEIR folder (or name) and its ``qrels/<split>.tsv``; hard negatives mined by
            ``negatives`` (``bm25`` through bm25s, ``model`` with the spladekit model
            ``negatives_model``, or ``none`` for in-batch negatives only); with ``teacher_scores``, the
            miner's documents that have a score, or with ``negatives: teacher`` every scored document.
        ``naver``: the naver/splade layout: ``triplets/raw.tsv`` (query, positive, negative text), or,
            with ``teacher_scores``, ``qrel/qrel.json`` + queries + ``full_collection/raw.tsv``.
        ``triples``: an MS MARCO-style ``query<TAB>positive<TAB>negative`` TSV file.
        ``hf``: a Hugging Face ``datasets`` dataset (local parquet/JSONL/CSV/arrow file, a
            ``save_to_disk`` folder, or a hub id with ``subset``/``split``), columns mapped by
            ``columns`` (:mod:`spladekit.train.hf`).
        ``st-hard-negatives``, ``st-margin-mse``: sentence-transformers' published MS MARCO files
            with ``teacher_scores``, ``corpus`` and ``queries`` (:mod:`spladekit.train.published`).
    """

    format: Literal["beir", "naver", "triples", "hf", "st-hard-negatives", "st-margin-mse"] = "beir"
    path: str = "scifact"
    split: str = "train"
    negatives: Literal["bm25", "model", "none", "teacher"] = "bm25"
    negatives_model: str | None = None
    mining_depth: int = Field(30, ge=1, description="negatives are sampled from the top-k of the miner")
    num_negatives: int = Field(1, ge=0, description="hard negatives per query in each batch")
    teacher_scores: str | None = Field(None, description="JSON {qid: {docid: score}} (naver layout / beir)")
    queries: str | None = Field(
        None, description="naver layout: id<TAB>text queries file (default: train_queries/raw.tsv)"
    )
    corpus: str | None = Field(
        None, description="st-hard-negatives/st-margin-mse: the passages (id<TAB>text or a dataset file)"
    )
    negative_systems: list[str] | None = Field(
        None, description="st-hard-negatives: the 'neg' systems to use (None: all)"
    )
    validation_fraction: float = Field(0.0, ge=0.0, lt=1.0, description="share of training queries held out")
    max_queries: int | None = Field(None, ge=1, description="use only the first N training queries (smoke runs)")
    subset: str | None = Field(None, description="hf: the dataset configuration (subset) name on the hub")
    columns: ColumnsConfig = ColumnsConfig()
    score_kind: Literal["auto", "scores", "margins"] = Field(
        "auto", description="hf: the score column holds 1+n teacher scores, or n margins s(q,d+) - s(q,d-_i)"
    )
    streaming: bool = Field(False, description="hf hub ids: stream instead of downloading up front")
    cache_dir: str | None = Field(None, description="hf: the datasets cache folder (default: datasets' own)")


class LossConfig(Settings):
    """Ranking loss: ``infonce`` (contrastive), ``margin_mse`` or ``kl`` (distillation).

    For distillation the first step compares the teacher's score scale with the student's and warns
    (:func:`spladekit.train.monitor.score_scale_check`); it never rescales anything itself."""

    kind: Literal["infonce", "margin_mse", "kl"] = "infonce"
    temperature: float = Field(1.0, gt=0.0)
    in_batch_negatives: bool = True
    scale_check: float | None = Field(
        4.0,
        gt=1.0,
        description="MarginMSE/KL: warn at the first step when the "
        "student's and the teacher's score spreads differ by more than this factor "
        "(None: no check)",
    )


class DfFlopsConfig(Settings):
    """DF-FLOPS (Porco et al., arXiv 2505.15070; :mod:`spladekit.train.regularizers`): each term's
    FLOPS share is scaled by ``a(DF_j/|C|) = 1 / (1 + (x^(log_α 2) − 1)^β)`` of its document
    frequency among ``sample_docs`` training documents encoded by the model, re-estimated every
    ``refresh_every`` steps (:class:`spladekit.train.term_weights.DocumentFrequencyEstimate`).
    ``alpha`` and ``beta`` have no default: they set which terms count as frequent, a choice per
    corpus and latency target."""

    alpha: float = Field(gt=0.0, lt=1.0, description="the document-frequency share at which a term's weight is 1/2")
    beta: float = Field(gt=0.0, description="steepness of the weight around alpha (larger: closer to a step)")
    refresh_every: int = Field(
        100, ge=1, description="steps between estimates (the paper re-estimates every 100 steps)"
    )
    sample_docs: int = Field(
        1000,
        ge=1,
        description="training documents encoded per estimate; a share p estimated "
        "from n documents has standard error sqrt(p(1-p)/n), at most 0.016 at n = 1000",
    )
    encode_batch_size: int = Field(
        32,
        ge=1,
        description="documents encoded at once for an estimate (eval mode, no gradient, at model.doc_max_length)",
    )


class RegularizerConfig(Settings):
    """Sparsity regulariser with weights λ_q, λ_d and quadratic warm-up over ``warmup_steps``
    (λ_t = λ·min(1, t/T)²); formulas and sources in :mod:`spladekit.train.regularizers`.

    Kinds: ``flops``, ``l1``; ``flops_l0`` (FLOPS over the vectors with more than ``threshold``
    active terms: sentence-transformers' ``FlopsLoss(threshold)``); ``idf_flops`` (each term's FLOPS
    share divided by its IDF among the training documents, Geng et al.); ``df_flops`` (scaled by a
    function of the term's document frequency under the model, ``df``). ``anti_zero`` adds naver/splade's
    ``1/(Σ w)²`` per side with that weight (no warm-up; 0: off).
    """

    kind: Literal["flops", "l1", "flops_l0", "idf_flops", "df_flops"] = "flops"
    lambda_q: float = Field(1e-3, ge=0.0)
    lambda_d: float = Field(1e-3, ge=0.0)
    warmup_steps: int = Field(0, ge=0)
    threshold: float | None = Field(
        None, ge=0.0, description="flops_l0: vectors with at most this many active terms are not penalised"
    )
    df: DfFlopsConfig | None = Field(None, description="df_flops: {alpha, beta, refresh_every, sample_docs}")
    anti_zero: float = Field(
        0.0,
        ge=0.0,
        description="weight of the anti-zero term 1/(sum of a side's weights)^2 "
        "(naver/splade adds it with weight 1); 0: off",
    )

    @model_validator(mode="after")
    def _check(self) -> RegularizerConfig:
        if (self.kind == "flops_l0") != (self.threshold is not None):
            raise ValueError(
                "regularizer.threshold goes with kind flops_l0, and kind flops_l0 needs it"
                if self.threshold is None
                else f"regularizer.threshold applies to kind flops_l0 only, not {self.kind}"
            )
        if (self.kind == "df_flops") != (self.df is not None):
            raise ValueError(
                "kind df_flops needs regularizer.df: {alpha, beta} (refresh_every, sample_docs optional)"
                if self.df is None
                else f"regularizer.df applies to kind df_flops only, not {self.kind}"
            )
        return self


class MonitorConfig(Settings):
    """Stability alarms: dense collapse when the mean active terms exceed ``dense_fraction``·V after
    the regulariser warm-up; zero collapse when every vector of a side is all-zero."""

    dense_fraction: float = Field(0.5, gt=0.0, le=1.0)
    stop_on_collapse: bool = False
    logit_sample: int = Field(2, ge=0, description="documents whose token logits are summarised per step")


class DevConfig(Settings):
    """Retrieval evaluation on a dev set every ``eval_every`` steps (:mod:`spladekit.train.dev`).

    ``data`` is a BEIR folder or name read with ``split`` (a test split is refused); without it the
    training queries held out by ``data.validation_fraction`` are searched against the training
    corpus. ``metric`` (one of ``measures``) picks the best checkpoint (saved as ``model/``, the final
    one as ``last/``); ``patience`` stops training after that many evaluations without improvement.
    """

    data: str | None = Field(None, description="BEIR folder/name of the dev set (None: held-out training queries)")
    split: str = "dev"
    measures: list[str] = Field(default_factory=lambda: ["nDCG@10", "MRR@10"])
    metric: str = Field("nDCG@10", description="the measure that selects the best checkpoint (higher is better)")
    k: int = Field(100, ge=10, description="documents retrieved per dev query")
    max_queries: int | None = Field(None, ge=1, description="evaluate only the first N dev queries")
    max_docs: int | None = Field(
        None,
        ge=1,
        description="search only the judged documents plus the first "
        "others up to N (a CPU-sized proxy for checkpoint selection)",
    )
    batch_size: int = Field(32, ge=1, description="encoding batch size of the dev evaluation")
    patience: int | None = Field(None, ge=1, description="early stopping: dev evaluations without improvement")

    @model_validator(mode="after")
    def _check(self) -> DevConfig:
        if self.metric not in self.measures:
            raise ValueError(f"dev.metric {self.metric!r} must be one of dev.measures {self.measures}")
        from spladekit.train.dev import check_not_test

        check_not_test(self.split)
        return self


class CachedConfig(Settings):
    """Gradient caching (Gao et al. 2021; :mod:`spladekit.train.cached`): each process encodes its share
    of the batch ``mini_batch_size`` queries (with their documents) at a time, first without a graph,
    then again per mini-batch to back-propagate the loss gradient cached at the SPLADE vectors. The
    loss, in-batch negatives and FLOPS term stay those of the whole ``batch_size``; memory is that of
    one mini-batch plus the batch's vectors, time one extra forward."""

    mini_batch_size: int = Field(
        ge=1, description="queries per encoding pass and process (their documents come with them)"
    )


class TrainConfig(Settings):
    """A SPLADE training run.

    ``batch_size`` is the *global* batch (queries per optimiser step, over all processes and
    accumulation steps); it must divide by ``world_size × grad_accum``. ``grad_accum`` micro-batches
    and ``cached.mini_batch_size`` both bound what is encoded at once; either way the loss is that of
    the whole batch (a gradient cache, :mod:`spladekit.train.cached`).
    """

    model: ModelConfig = ModelConfig()
    rescale: TrainRescaleConfig = TrainRescaleConfig()
    head: HeadSpec = Field(
        HeadSpec(),
        description="the SPLADE head's options: position_top_k (a cap on each position's "
        "expansion), fold_vocabulary (byte-level BPE case and word-start variants as one term)",
    )
    data: DataConfig = DataConfig()
    loss: LossConfig = LossConfig()
    regularizer: RegularizerConfig = RegularizerConfig()
    monitor: MonitorConfig = MonitorConfig()
    steps: int = Field(600, ge=1)
    batch_size: int = Field(32, ge=1)
    grad_accum: int = Field(1, ge=1)
    cached: CachedConfig | None = Field(None, description="gradient caching: {mini_batch_size: N} (None: off)")
    lr: float = Field(5e-5, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warm-up, then linear decay to 0")
    max_grad_norm: float | None = Field(1.0, gt=0.0)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1 - 1024,
        description="random seed (rank r of a distributed run uses seed + r; numpy and torch take seeds below 2**32)",
    )
    log_every: int = Field(1, ge=1)
    checkpoint_every: int = Field(0, ge=0, description="0: only the final model")
    keep_checkpoints: int = Field(2, ge=1)
    validate_every: int = Field(0, ge=0, description="held-out loss every N steps (0: at the end only)")
    eval_every: int = Field(
        0,
        ge=0,
        description="dev-set retrieval (nDCG@10, MRR@10) every N steps and at the "
        "end; model/ is then the best checkpoint, last/ the final one (0: off)",
    )
    dev: DevConfig = DevConfig()
    resume: bool = True
    curves: bool = Field(True, description="draw training_curves.png at the end")
    device: str | None = None

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of grad_accum {self.grad_accum}")
        if self.eval_every and self.dev.data is None and self.data.validation_fraction <= 0:
            raise ValueError(
                "eval_every needs a dev set: dev.data (a BEIR folder and dev.split) or "
                "data.validation_fraction > 0 (held-out training queries)"
            )
        if self.loss.kind != "infonce" and self.data.num_negatives < 1:
            raise ValueError(f"loss {self.loss.kind!r} needs data.num_negatives >= 1")
        if self.regularizer.kind == "idf_flops" and self.model.query_encoder == INFERENCE_FREE:
            raise ValueError(
                "regularizer.kind idf_flops with model.query_encoder inference-free: the query weights carry "
                "the IDF already (Geng et al.'s score sum_j idf_j q_j d_j), and FLOPS on the documents is "
                "then their IDF-aware FLOPS: use kind flops (idf_flops would count the IDF twice)"
            )
        if self.head.fold_vocabulary and self.regularizer.kind == "idf_flops":
            raise ValueError(
                "regularizer.kind idf_flops with head.fold_vocabulary: the IDF is per vocabulary entry, "
                "the vectors per folded term"
            )
        if self.head.fold_vocabulary and self.model.query_encoder == INFERENCE_FREE:
            raise ValueError(
                "head.fold_vocabulary with model.query_encoder inference-free: the query weights are per "
                "vocabulary entry, the vectors per folded term"
            )
        return self

    def to_yaml(self) -> str:
        """The config as YAML text (every field, defaults included; what :func:`spladekit.io.write_yaml`
        writes as a run's ``config.yaml``)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or start from the defaults) and apply overrides.

    Raises:
        DataFormatError: unreadable YAML, or a validation error (unknown key, bad value), naming the field.
    """
    data: dict = {}
    if path is not None:
        path = Path(path)
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise DataFormatError(path, "expected a mapping at the top level")
    try:
        apply_overrides(data, overrides or [])
    except ValueError as exc:  # not key=value, a path through a value, not a YAML value
        raise DataFormatError("<overrides>", str(exc)) from None
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        field, message = validation_problems(exc)[0]
        raise DataFormatError(
            path or "<overrides>", f"{message} ({len(exc.errors())} error(s))", field=field or None
        ) from exc
