"""The SPLADE training step and the model it trains (:class:`spladekit.train.trainer.Trainer` runs them).

One optimiser step on a global batch of ``B`` queries (each with a positive and ``n`` hard
negatives, see :mod:`spladekit.train.data`):

1. every process encodes its ``B / world`` queries and their documents, in ``grad_accum``
   micro-batches, each cut every ``cached.mini_batch_size`` examples when set;
2. the vectors are gathered over processes with their gradient and the loss is computed on the
   global batch (:mod:`spladekit.train.distributed`):

       L = L_rank(q, d) + λ_q(t)·R(q) + λ_d(t)·R(d) + μ·(AZ(q) + AZ(d))

   with ``L_rank`` InfoNCE / MarginMSE / KL (:mod:`spladekit.train.losses`), ``R`` the regulariser
   the config's ``regularizer.kind`` names (FLOPS, L1, FLOPS with an ℓ0 mask, IDF-aware FLOPS,
   DF-FLOPS: :class:`spladekit.train.regularizers.SparsityPenalty`), ``λ(t)`` its quadratic warm-up
   and ``μ·AZ`` the anti-zero term (``regularizer.anti_zero`` = μ; no ``AZ(q)`` for an
   inference-free query side, whose weights are a lookup table);
3. with more than one micro-batch, the gradient cache of Gao et al. 2021 (:mod:`spladekit.train.cached`):
   encode without a graph, the loss gradient at the vectors once on the whole batch, then re-encode
   each micro-batch (RNG replayed: same dropout) and back-propagate it. So the loss, the in-batch
   negatives and the FLOPS term are those of the global batch, whatever the number of processes,
   accumulation steps and mini-batches;
4. gradients are averaged over processes, clipped, and AdamW with linear warm-up/decay steps
   (:meth:`spladekit.train.trainer.Trainer.optimizer_step`).

The SPLADE activation runs in float32 under bf16/fp16 autocast (:mod:`spladekit.model.pooling`).
"""

from __future__ import annotations

import contextlib

import torch

import spladekit.train.distributed as D
from spladekit.train.cached import cached_step, mini_batch_bounds
from spladekit.train.config import TrainConfig
from spladekit.train.data import Batch, TrainingExample, global_batch
from spladekit.train.examples import training_documents
from spladekit.train.head_setup import apply_rescale, head_options, suppress_pad_column
from spladekit.train.losses import info_nce, kl_distillation, margin_mse
from spladekit.train.monitor import TrainingDivergedError
from spladekit.train.regularizers import SparsityPenalty


# ------------------------------------------------------------------------------------ model
def check_max_lengths(config: TrainConfig, hf_config) -> None:
    """Lower ``model.query_max_length``/``model.doc_max_length`` above the model's positions to them
    (a ``UserWarning`` naming the field; the saved model records the lowered value), as
    :meth:`spladekit.model.encoder.SpladeEncoder.check_max_length` does when encoding: a text longer
    than the positions would otherwise fail in transformers with a tensor-size error at some step."""
    import warnings

    from spladekit.model.metadata import max_positions

    limit = max_positions(hf_config)
    for name in ("query_max_length", "doc_max_length"):
        value = getattr(config.model, name)
        if limit is not None and value > limit:
            warnings.warn(
                f"model.{name} {value} exceeds the model's {limit} positions (its position embeddings); "
                f"texts are truncated to {limit} tokens",
                UserWarning,
                stacklevel=3,
            )
            setattr(config.model, name, limit)


def load_model(config: TrainConfig, texts=None):
    """The masked-LM of ``config.model.path`` (resolved, read by :func:`spladekit.model.encoder.load_model_folder`),
    rescaled if configured, as a SpladeModel with ``config.model.pooling``/``activation`` (None: the
    start model's, which training then keeps and saves).

    Args:
        texts: sample documents for ``rescale.mode="target_logit"``.

    Returns:
        ``(SpladeModel, tokenizer, rescale_record)``.

    Raises:
        HeadNotFoundError: the checkpoint has no MLM-head weights and not ``model.allow_random_head``
            (:func:`spladekit.model.encoder.load_masked_lm`).
        ResolutionError: no weights or tokenizer.
    """
    from spladekit.data.resolve import resolve_model
    from spladekit.model.encoder import load_model_folder
    from spladekit.model.splade import SpladeModel

    location = resolve_model(config.model.path)
    mlm, tokenizer, folder = load_model_folder(
        location, allow_random_head=config.model.allow_random_head, trust_remote_code=config.model.trust_remote_code
    )
    check_max_lengths(config, mlm.config)
    meta = folder.metadata()  # the start model's pooling and activation, unless the config sets them
    pooling, activation = config.model.pooling or meta.pooling, config.model.activation or meta.activation
    model = SpladeModel(
        mlm,
        config.model.head_impl,
        pooling=pooling,
        activation=activation,
        **head_options(config, folder, tokenizer, int(mlm.config.vocab_size)),
    )
    record = apply_rescale(model, config.rescale, tokenizer, texts)
    if config.model.suppress_pad:
        suppress_pad_column(mlm, tokenizer)
    return model, tokenizer, record


def attach_query_weights(model, tokenizer, examples: list[TrainingExample], config: TrainConfig) -> None:
    """Give ``model`` an inference-free query side (``model.query_weights``), trainable unless
    ``config.model.train_query_weights`` is false. θ starts from the start model's own query side when
    it has one (a spladekit inference-free folder, a sentence-transformers ``Router`` with a
    ``SparseStaticEmbedding``, an OpenSearch doc-only ``idf.json``: fine-tuning continues it), else
    from the IDF of the distinct documents (by id) of ``examples``, positives and hard negatives
    (:func:`spladekit.model.inference_free.idf_weights`). ``model.query_weights.init`` says which."""
    from spladekit.data.resolve import resolve_model
    from spladekit.model.folders import read_model_folder
    from spladekit.model.inference_free import QueryTermWeights, idf_weights

    folder = read_model_folder(resolve_model(config.model.path), config.model.trust_remote_code)
    weights = (
        folder.load_query_weights(tokenizer, model.vocab_size) if folder.metadata().query_encoder != "splade" else None
    )
    init = f"the start model's query weights ({folder.layout})"
    if weights is None:
        weights = idf_weights(tokenizer, training_documents(examples), model.vocab_size)
        init = "idf of the training documents"
    model.query_weights = QueryTermWeights(weights, trainable=config.model.train_query_weights)
    model.query_weights.init = init


def _optimizer(model, config: TrainConfig):
    from transformers import get_linear_schedule_with_warmup

    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=config.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, config.warmup_steps, config.steps)
    return optimizer, scheduler


# ------------------------------------------------------------------------------------ the step
def ranking_loss(
    q: torch.Tensor, d: torch.Tensor, teacher: torch.Tensor | None, group: int, config: TrainConfig
) -> torch.Tensor:
    """The ranking loss ``config.loss.kind`` of a batch (:mod:`spladekit.train.losses`).

    Args:
        q: ``[B, V]``; d: ``[B·G, V]``; teacher: ``[B, G]`` or None; group: G.
    """
    kind = config.loss.kind
    if kind == "infonce":
        return info_nce(q, d, config.loss.temperature, config.loss.in_batch_negatives)
    if kind == "margin_mse":
        return margin_mse(q, d, teacher)
    return kl_distillation(q, d, teacher, config.loss.temperature)


def compute_loss(
    q: torch.Tensor,
    d: torch.Tensor,
    teacher: torch.Tensor | None,
    group: int,
    config: TrainConfig,
    lambda_q: float,
    lambda_d: float,
    penalty: SparsityPenalty | None = None,
    query_anti_zero: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss of a (global) batch and its parts:
    ``L_rank + λ_q·R(q) + λ_d·R(d) + μ·AZ(q) + μ·AZ(d)`` (module docstring).

    Args:
        q: ``[B, V]``; d: ``[B·G, V]``; teacher: ``[B, G]`` or None; group: G.
        penalty: the run's :class:`~spladekit.train.regularizers.SparsityPenalty` (None:
            ``SparsityPenalty(config.regularizer)``, enough for the kinds that need no statistics:
            ``flops``, ``l1``, ``flops_l0``).
        query_anti_zero: add ``μ·AZ(q)`` (False for an inference-free query side).

    Returns:
        ``(total, parts)`` with ``parts`` = ``loss_rank``, ``loss_reg_q`` (= λ_q·R(q)), ``loss_reg_d``
        and, when ``regularizer.anti_zero`` μ > 0, ``loss_anti_zero`` (= μ·AZ(q) + μ·AZ(d)), whose sum
        is ``total``, plus the raw ``reg_q``, ``reg_d``.

    Raises:
        ValueError: ``penalty`` None for ``idf_flops`` or ``df_flops`` (they need the training documents' statistics).
    """
    penalty = penalty if penalty is not None else SparsityPenalty(config.regularizer)
    rank = ranking_loss(q, d, teacher, group, config)
    reg_q, reg_d = penalty(q), penalty(d)
    loss_q, loss_d = lambda_q * reg_q, lambda_d * reg_d
    total = rank + loss_q + loss_d
    named = [("loss_rank", rank), ("loss_reg_q", loss_q), ("loss_reg_d", loss_d)]
    if config.regularizer.anti_zero:
        anti_zero = penalty.anti_zero(d) + (penalty.anti_zero(q) if query_anti_zero else 0.0)
        total = total + anti_zero
        named.append(("loss_anti_zero", anti_zero))
    parts = {k: float(v.detach()) for k, v in named + [("reg_q", reg_q), ("reg_d", reg_d)]}
    return total, parts


class _Encoder:
    """Tokenise and encode micro-batches on one device, under autocast."""

    def __init__(self, model, tokenizer, config: TrainConfig, device: torch.device):
        self.model, self.tokenizer, self.config, self.device = model, tokenizer, config, device
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext

    def tokens(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        batch = self.tokenizer(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        return {
            "input_ids": batch["input_ids"].to(self.device),
            "attention_mask": batch["attention_mask"].to(self.device),
        }

    def __call__(self, tokens: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.autocast():
            return self.model(tokens["input_ids"], tokens["attention_mask"]).float()

    # the query side: the model itself, or an inference-free bag of tokens (no special tokens)
    def query_tokens(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        if self.model.query_weights is None:
            return self.tokens(texts, max_length)
        batch = self.model.query_weights.tokenize(self.tokenizer, texts, max_length)
        return {k: v.to(self.device) for k, v in batch.items()}

    def query(self, tokens: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.model.query_weights is None:
            return self(tokens)
        return self.model.query_weights(tokens["input_ids"], tokens["attention_mask"])


def train_step(
    encoder: _Encoder,
    batch: Batch,
    config: TrainConfig,
    info: D.DistInfo,
    lambda_q: float,
    lambda_d: float,
    scaler=None,
    penalty: SparsityPenalty | None = None,
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Forward and backward of one global batch (gradients accumulate in the parameters).

    ``penalty``: the run's regulariser (:func:`compute_loss`); the anti-zero term leaves out an
    inference-free query side (``model.query_weights``).

    Returns:
        ``(parts, tensors)``: the loss parts (``loss`` = their sum) and the detached global
        vectors ``q``, ``d`` plus this process's first document tokens (for monitoring).

    Raises:
        TrainingDivergedError: the loss is NaN or infinite (no gradient is applied).
    """
    per_process = len(batch.queries) // info.world_size
    if per_process * info.world_size != len(batch.queries) or per_process % config.grad_accum:
        raise ValueError(
            f"batch_size {len(batch.queries)} must divide by world_size × grad_accum "
            f"= {info.world_size} × {config.grad_accum}"
        )
    local = batch.slice(info.rank * per_process, (info.rank + 1) * per_process)
    m, g = config.model, local.group
    mini = config.cached.mini_batch_size if config.cached is not None else None
    tokens = [
        (
            encoder.query_tokens(local.queries[lo:hi], m.query_max_length),
            encoder.tokens(local.docs[lo * g : hi * g], m.doc_max_length),
        )
        for lo, hi in mini_batch_bounds(per_process, mini, config.grad_accum)
    ]
    teacher = (
        torch.tensor(batch.teacher, dtype=torch.float32, device=encoder.device) if batch.teacher is not None else None
    )

    def loss_of(q_local, d_local):
        q_all, d_all = D.gather_with_grad(q_local), D.gather_with_grad(d_local)
        total, parts = compute_loss(
            q_all,
            d_all,
            teacher,
            batch.group,
            config,
            lambda_q,
            lambda_d,
            penalty,
            query_anti_zero=encoder.model.query_weights is None,
        )
        if not torch.isfinite(total):
            raise TrainingDivergedError(f"non-finite loss ({float(total.detach())}); parts: {parts}")
        return total, parts, q_all.detach(), d_all.detach()

    def backward(total):
        (scaler.scale(total) if scaler is not None else total).backward()

    if len(tokens) == 1:
        total, parts, q_all, d_all = loss_of(encoder.query(tokens[0][0]), encoder(tokens[0][1]))
        backward(total)
    else:  # gradient cache (spladekit.train.cached): the loss of the whole batch, one mini-batch graph at a time
        total, parts, q_all, d_all = cached_step(encoder.query, encoder, tokens, loss_of, backward, encoder.device)
    parts = {"loss": float(total.detach()), **parts}
    return parts, {"q": q_all, "d": d_all, "doc_tokens": tokens[0][1]}


# ------------------------------------------------------------------------------------ validation
@torch.no_grad()
def validate(encoder: _Encoder, examples: list[TrainingExample], config: TrainConfig, step: int) -> dict:
    """Held-out ranking loss and accuracy (share of queries whose positive outscores every other
    document of its validation batch), in eval mode, with deterministic batches."""
    model = encoder.model
    was_training = model.training
    model.eval()
    need_teacher = config.loss.kind != "infonce"
    batch_size = min(config.batch_size, len(examples))
    losses, correct, total = [], 0, 0
    try:
        with torch.random.fork_rng(devices=[encoder.device] if encoder.device.type == "cuda" else []):
            for index in range(max(1, len(examples) // batch_size)):
                batch = global_batch(
                    examples, index, batch_size, config.data.num_negatives, config.seed + 7919, need_teacher
                )
                q = encoder.query(encoder.query_tokens(batch.queries, config.model.query_max_length))
                d = encoder(encoder.tokens(batch.docs, config.model.doc_max_length))
                teacher = torch.tensor(batch.teacher, device=encoder.device) if batch.teacher is not None else None
                losses.append(float(ranking_loss(q, d, teacher, batch.group, config)))
                scores = q @ d.T
                own = torch.arange(len(batch.queries), device=q.device) * batch.group
                correct += int((scores.argmax(1) == own).sum())
                total += len(batch.queries)
    finally:
        model.train(was_training)
    return {
        "step": step,
        "split": "validation",
        "val_loss_rank": sum(losses) / len(losses),
        "val_accuracy": correct / max(1, total),
        "val_queries": total,
    }


@torch.no_grad()
def sample_document_frequencies(
    encoder: _Encoder, texts: list[str], config: TrainConfig, info: D.DistInfo
) -> tuple[torch.Tensor, int]:
    """How many of ``texts`` the model gives each term (weight > 0): DF-FLOPS' estimate
    (:class:`spladekit.train.term_weights.DocumentFrequencyEstimate`).

    The texts are encoded in eval mode (no dropout: no random numbers drawn, so the exact-resume
    guarantee holds), without gradient, at ``model.doc_max_length``, ``regularizer.df.encode_batch_size``
    at a time; with several processes each encodes ``texts[rank::world]`` and the counts are summed
    over processes (:func:`spladekit.train.distributed.all_reduce_sum`).

    Returns:
        ``([V'] int64 counts on the CPU, len(texts))``, ``V'`` the model's output columns.
    """
    model = encoder.model
    was_training = model.training
    shard = texts[info.rank :: info.world_size]
    size = config.regularizer.df.encode_batch_size if config.regularizer.df is not None else 32
    counts = torch.zeros(model.output_size, dtype=torch.int64, device=encoder.device)
    model.eval()
    try:
        for lo in range(0, len(shard), size):
            vectors = encoder(encoder.tokens(shard[lo : lo + size], config.model.doc_max_length))
            counts += (vectors > 0).sum(dim=0).to(torch.int64)
    finally:
        model.train(was_training)
    return D.all_reduce_sum(counts).cpu(), len(texts)


def _device(config: TrainConfig, info: D.DistInfo) -> torch.device:
    if config.device:
        return torch.device(config.device)
    if torch.cuda.is_available():  # one process per GPU under torchrun (the rule of DistInfo.device)
        return torch.device(info.device() or "cuda")
    return torch.device("cpu")
