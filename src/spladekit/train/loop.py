"""The SPLADE training step and loop: ``train(config, out) -> TrainResult``.

One optimiser step on a global batch of ``B`` queries (each with a positive and ``n`` hard
negatives, see :mod:`spladekit.train.data`):

1. every process encodes its ``B / world`` queries and their documents, in ``grad_accum``
   micro-batches, each cut every ``cached.mini_batch_size`` examples when set;
2. the vectors are gathered over processes with their gradient and the loss is computed on the
   global batch (:mod:`spladekit.train.distributed`):

       L = L_rank(q, d) + λ_q(t)·R(q) + λ_d(t)·R(d)

   with ``L_rank`` InfoNCE / MarginMSE / KL (:mod:`spladekit.train.losses`), ``R`` the FLOPS or L1
   regulariser and ``λ(t)`` its quadratic warm-up (:mod:`spladekit.train.regularizers`);
3. with more than one micro-batch, the gradient cache of Gao et al. 2021 (:mod:`spladekit.train.cached`):
   encode without a graph, the loss gradient at the vectors once on the whole batch, then re-encode
   each micro-batch (RNG replayed: same dropout) and back-propagate it. So the loss, the in-batch
   negatives and the FLOPS term are those of the global batch, whatever the number of processes,
   accumulation steps and mini-batches;
4. gradients are averaged over processes, clipped, and AdamW with linear warm-up/decay steps.

The SPLADE activation runs in float32 under bf16/fp16 autocast (:mod:`spladekit.model.pooling`).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from spladekit.io import atomic_folder, write_json, write_yaml
import spladekit.train.distributed as D
from spladekit.train.cached import cached_step, mini_batch_bounds
from spladekit.train.config import TrainConfig
from spladekit.train.data import (Batch, TrainingExample, check_distillation, global_batch, load_training_examples,
                                  short_negatives_hint, split_validation)
from spladekit.train.dev import BestTracker, evaluate_dev, load_dev_set
from spladekit.train.losses import info_nce, kl_distillation, margin_mse
from spladekit.train.monitor import (
    CollapseError,
    TrainingDivergedError,
    batch_statistics,
    check_alarms,
    head_statistics,
    logit_statistics,
    score_scale_check,
)
from spladekit.train.regularizers import REGULARIZERS, QuadraticWarmup

# moved to rooms of their own (whole functions and classes; their old import path stays): the MLM
# head's set-up, the checkpoints (with the RNG state they hold), the metrics log
from spladekit.train.head_setup import PAD_BIAS, apply_rescale, head_options, suppress_pad_column  # noqa: F401
from spladekit.train.checkpoints import (CHECKPOINTS, _checkpoints, _rng_state, _set_rng_state,  # noqa: F401
                                         latest_checkpoint, load_checkpoint, save_checkpoint)
from spladekit.train.metrics_log import METRICS_FILE, _Log  # noqa: F401

MODEL_DIR = "model"
LAST_DIR = "last"
BEST_FILE = "best.json"


@dataclass
class TrainResult:
    """What :func:`train` produced.

    Attributes:
        model_dir: the final model folder (loads in spladekit, ``AutoModelForMaskedLM`` and
            sentence-transformers ``SparseEncoder``); None when stopped early by ``stop_after``.
        metrics_path: the JSONL metrics log (one record per logged step; validation records have
            ``"split": "validation"``).
        last_metrics: the last training record.
        steps: the last optimiser step done.
        alarms: every alarm message raised during the run.
        validation: the last validation record, if any.
        curves: the PNG of the training curves.
        best: with ``eval_every``: ``{"metric", "value", "step"}`` of the best dev evaluation, whose
            model is ``model_dir``; None otherwise.
        last_dir: with ``eval_every``: the final model (``last/``); None otherwise.
        dev: the last dev-set record, if any.
        early_stopped: True when ``dev.patience`` stopped the run before ``steps``.
    """

    model_dir: Path | None
    metrics_path: Path
    last_metrics: dict
    steps: int
    alarms: list[str] = field(default_factory=list)
    validation: dict | None = None
    curves: Path | None = None
    best: dict | None = None
    last_dir: Path | None = None
    dev: dict | None = None
    early_stopped: bool = False


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
            warnings.warn(f"model.{name} {value} exceeds the model's {limit} positions (its position embeddings); "
                          f"texts are truncated to {limit} tokens", UserWarning, stacklevel=3)
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
    mlm, tokenizer, folder = load_model_folder(location, allow_random_head=config.model.allow_random_head)
    check_max_lengths(config, mlm.config)
    meta = folder.metadata()  # the start model's pooling and activation, unless the config sets them
    pooling, activation = config.model.pooling or meta.pooling, config.model.activation or meta.activation
    model = SpladeModel(mlm, config.model.head_impl, pooling=pooling, activation=activation,
                        **head_options(config, folder, tokenizer, int(mlm.config.vocab_size)))
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

    folder = read_model_folder(resolve_model(config.model.path))
    weights = folder.load_query_weights(tokenizer, model.vocab_size) if folder.metadata().query_encoder != "splade" else None
    init = f"the start model's query weights ({folder.layout})"
    if weights is None:
        documents: dict[str, str] = {}
        for example in examples:
            for doc_id, text in list(example.positives) + list(example.negatives):
                documents.setdefault(doc_id, text)
        weights = idf_weights(tokenizer, list(documents.values()), model.vocab_size)
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
def compute_loss(q: torch.Tensor, d: torch.Tensor, teacher: torch.Tensor | None, group: int, config: TrainConfig,
                 lambda_q: float, lambda_d: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss of a (global) batch and its parts.

    Args:
        q: ``[B, V]``; d: ``[B·G, V]``; teacher: ``[B, G]`` or None; group: G.

    Returns:
        ``(total, parts)`` with ``parts`` = ``loss_rank``, ``loss_reg_q`` (= λ_q·R(q)), ``loss_reg_d``,
        whose sum is ``total``, plus the raw ``reg_q``, ``reg_d``.
    """
    kind = config.loss.kind
    if kind == "infonce":
        rank = info_nce(q, d, config.loss.temperature, config.loss.in_batch_negatives)
    elif kind == "margin_mse":
        rank = margin_mse(q, d, teacher)
    else:
        rank = kl_distillation(q, d, teacher, config.loss.temperature)
    reg = REGULARIZERS[config.regularizer.kind]
    reg_q, reg_d = reg(q), reg(d)
    loss_q, loss_d = lambda_q * reg_q, lambda_d * reg_d
    total = rank + loss_q + loss_d
    parts = {k: float(v.detach()) for k, v in
             (("loss_rank", rank), ("loss_reg_q", loss_q), ("loss_reg_d", loss_d), ("reg_q", reg_q), ("reg_d", reg_d))}
    return total, parts


class _Encoder:
    """Tokenise and encode micro-batches on one device, under autocast."""

    def __init__(self, model, tokenizer, config: TrainConfig, device: torch.device):
        self.model, self.tokenizer, self.config, self.device = model, tokenizer, config, device
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext

    def tokens(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        batch = self.tokenizer(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        return {"input_ids": batch["input_ids"].to(self.device), "attention_mask": batch["attention_mask"].to(self.device)}

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


def train_step(encoder: _Encoder, batch: Batch, config: TrainConfig, info: D.DistInfo, lambda_q: float, lambda_d: float,
               scaler=None) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Forward and backward of one global batch (gradients accumulate in the parameters).

    Returns:
        ``(parts, tensors)``: the loss parts (``loss`` = their sum) and the detached global
        vectors ``q``, ``d`` plus this process's first document tokens (for monitoring).

    Raises:
        TrainingDivergedError: the loss is NaN or infinite (no gradient is applied).
    """
    per_process = len(batch.queries) // info.world_size
    if per_process * info.world_size != len(batch.queries) or per_process % config.grad_accum:
        raise ValueError(f"batch_size {len(batch.queries)} must divide by world_size × grad_accum "
                         f"= {info.world_size} × {config.grad_accum}")
    local = batch.slice(info.rank * per_process, (info.rank + 1) * per_process)
    m, g = config.model, local.group
    mini = config.cached.mini_batch_size if config.cached is not None else None
    tokens = [(encoder.query_tokens(local.queries[lo:hi], m.query_max_length),
               encoder.tokens(local.docs[lo * g : hi * g], m.doc_max_length))
              for lo, hi in mini_batch_bounds(per_process, mini, config.grad_accum)]
    teacher = (torch.tensor(batch.teacher, dtype=torch.float32, device=encoder.device)
               if batch.teacher is not None else None)

    def loss_of(q_local, d_local):
        q_all, d_all = D.gather_with_grad(q_local), D.gather_with_grad(d_local)
        total, parts = compute_loss(q_all, d_all, teacher, batch.group, config, lambda_q, lambda_d)
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
                batch = global_batch(examples, index, batch_size, config.data.num_negatives, config.seed + 7919, need_teacher)
                q = encoder.query(encoder.query_tokens(batch.queries, config.model.query_max_length))
                d = encoder(encoder.tokens(batch.docs, config.model.doc_max_length))
                teacher = torch.tensor(batch.teacher, device=encoder.device) if batch.teacher is not None else None
                _, parts = compute_loss(q, d, teacher, batch.group, config, 0.0, 0.0)
                losses.append(parts["loss_rank"])
                scores = q @ d.T
                own = torch.arange(len(batch.queries), device=q.device) * batch.group
                correct += int((scores.argmax(1) == own).sum())
                total += len(batch.queries)
    finally:
        model.train(was_training)
    return {"step": step, "split": "validation", "val_loss_rank": sum(losses) / len(losses),
            "val_accuracy": correct / max(1, total), "val_queries": total}


# ------------------------------------------------------------------------------------ the loop
def _forget_lost_best(out: Path, tracker: BestTracker, start: int) -> None:
    """On resume: keep ``model/`` as the best only when ``best.json`` matches the tracker's best of the
    kept history; otherwise (a best saved after the resumed checkpoint, or a missing record) remove
    ``model/`` and ``best.json`` and restart the selection."""
    path = out / BEST_FILE
    saved = None
    if path.exists():
        from spladekit.io import read_json

        saved = read_json(path)
    if tracker.best is not None and saved == tracker.summary() and (out / MODEL_DIR).is_dir():
        return
    if start > 0 or saved is not None:
        tracker.best, tracker.since = None, 0
        path.unlink(missing_ok=True)
        if (out / MODEL_DIR).exists():
            shutil.rmtree(out / MODEL_DIR)


def _device(config: TrainConfig, info: D.DistInfo) -> torch.device:
    if config.device:
        return torch.device(config.device)
    if torch.cuda.is_available():  # one process per GPU under torchrun (the rule of DistInfo.device)
        return torch.device(info.device() or "cuda")
    return torch.device("cpu")


def save_final_model(folder: Path, model, tokenizer, config: TrainConfig, extra: dict) -> Path:
    """Write the final model folder atomically: the masked-LM and tokenizer (``AutoModelForMaskedLM``),
    ``spladekit.json`` (max lengths, training record) and the sentence-transformers module files."""
    from spladekit.model.encoder import EncoderMetadata, write_model_folder

    with atomic_folder(folder) as tmp:
        meta = EncoderMetadata(query_max_length=config.model.query_max_length, doc_max_length=config.model.doc_max_length,
                               source=config.model.path, extra=extra)
        weights = None
        if model.query_weights is not None:  # inference-free: relu(θ) saved, the query side spladekit and sentence-transformers encode with
            weights = model.query_weights.saved_weights()
            init = getattr(model.query_weights, "init", "idf of the training documents")
            meta.extra["inference_free"] = {"init": init, "trained": config.model.train_query_weights}
            if init.startswith("idf"):
                meta.extra["inference_free"]["formula"] = "ln(1 + (N - df + 0.5) / (df + 0.5))"
        write_model_folder(tmp, model, tokenizer, meta, weights)
        write_yaml(tmp / "config.yaml", config.model_dump(mode="json"))
    return folder


def train(config: TrainConfig, out: str | Path, *, examples: list[TrainingExample] | None = None,
          stop_after: int | None = None, show_progress: bool = True) -> TrainResult:
    """Train a SPLADE model as ``config`` says; write everything into ``out``.

    Outputs: ``config.yaml``, ``metrics.jsonl`` (and ``tensorboard/`` when installed),
    ``checkpoints/step-N/`` every ``checkpoint_every`` steps, ``training_curves.png`` and the final
    model folder ``model/``. With ``eval_every`` (:mod:`spladekit.train.dev`): dev-set retrieval
    records (``"split": "dev"``) in ``metrics.jsonl`` at step 0, every ``eval_every`` steps and at the
    end; ``model/`` is then the best checkpoint by ``dev.metric`` (``best.json``: metric, value,
    step), ``last/`` the final model, and ``dev.patience`` may stop the run early. An existing
    checkpoint in ``out`` is resumed when ``config.resume``; a best model saved after that checkpoint
    (its dev record is dropped with the rest of the lost steps) is removed, and the selection restarts
    from the resumed step's history.

    Args:
        config: the run's :class:`TrainConfig`.
        out: output folder.
        examples: training examples to use instead of reading ``config.data`` (tests, demos).
        stop_after: stop (as if interrupted) after this step, without the final model.
        show_progress: tqdm bar on the main process.

    Raises:
        TrainingDivergedError: NaN/inf loss or gradient (the last good checkpoint is kept).
        CollapseError: a collapse alarm with ``monitor.stop_on_collapse``.
        DataFormatError: malformed training data.
        ValueError: a dev set from a test split.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    info = D.init_distributed()
    device = _device(config, info)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        if examples is None:  # read and checked before OUT is made: bad data leaves nothing behind
            examples = load_training_examples(config.data)
        train_examples, val_examples = split_validation(examples, config.data.validation_fraction, config.seed)
        if config.loss.kind != "infonce":
            check_distillation(train_examples, config.data.num_negatives, str(config.data.path),
                               short_negatives_hint(config.data))
        if info.is_main:
            out.mkdir(parents=True, exist_ok=True)
            write_yaml(out / "config.yaml", config.model_dump(mode="json"))
        torch.manual_seed(config.seed)
        rescale_texts = [e.positives[0][1] for e in train_examples[: config.rescale.sample_texts]]
        requested = config.model_dump(mode="json")
        model, tokenizer, rescale_record = load_model(config, rescale_texts)
        if info.is_main and config.model_dump(mode="json") != requested:  # max lengths lowered to the positions
            write_yaml(out / "config.yaml", config.model_dump(mode="json"))
        if config.model.query_encoder == "inference-free":
            attach_query_weights(model, tokenizer, train_examples, config)
        model.to(device).train()
        D.broadcast_parameters(model)
        torch.manual_seed(config.seed + info.rank)
        optimizer, scheduler = _optimizer(model, config)
        scaler = torch.amp.GradScaler(device.type) if config.precision == "fp16" else None
        start = 0
        checkpoint = latest_checkpoint(out) if config.resume else None
        if checkpoint is not None:
            start = load_checkpoint(checkpoint, model, optimizer, scheduler, scaler, info, device)
        log = _Log(out, start, info.is_main)
        encoder = _Encoder(model, tokenizer, config, device)
        reg = config.regularizer
        lambda_q = 0.0 if model.query_weights is not None else reg.lambda_q  # inference-free: no query regulariser
        warm_q, warm_d = QuadraticWarmup(lambda_q, reg.warmup_steps), QuadraticWarmup(reg.lambda_d, reg.warmup_steps)
        need_teacher = config.loss.kind != "infonce"
        params = [p for p in model.parameters() if p.requires_grad]
        alarms: list[str] = []
        scale_stats: dict = {}  # the first step's teacher/student score scales, logged with the first record
        last: dict = {}
        validation = None
        end = config.steps if stop_after is None else min(config.steps, stop_after)
        if val_examples and config.validate_every and start == 0 and info.is_main:
            validation = validate(encoder, val_examples, config, 0)  # the starting point
            log.write(validation)

        def training_record(step: int, **more) -> dict:
            return {"training": {"steps": step, "config": config.model_dump(mode="json"), "rescale": rescale_record, **more}}

        dev_set = tracker = dev = None
        early_stopped = False
        if config.eval_every:
            tracker = BestTracker(config.dev.metric, config.dev.patience, log.records if start > 0 else ())
            if start > 0:  # the last dev record of the kept history
                dev = next((r for r in reversed(log.records) if r.get("split") == "dev"), None)
            if info.is_main:
                dev_set = load_dev_set(config.dev, config.data, val_examples, train_examples)
                _forget_lost_best(out, tracker, start)

        def dev_eval(step: int) -> dict:
            record = evaluate_dev(model, tokenizer, config, dev_set, step, device)
            if tracker.update(record):
                record["best"] = True
                save_final_model(out / MODEL_DIR, model, tokenizer, config, training_record(step, selected=tracker.summary()))
                write_json(out / BEST_FILE, tracker.summary())
            log.write(record)
            return record

        if dev_set is not None and start == 0:
            dev = dev_eval(0)  # the starting point: the untrained model can be the best one
        bar = tqdm(range(start + 1, end + 1), desc="training", disable=not (show_progress and info.is_main), unit="step")
        for step in bar:
            began = time.perf_counter()
            batch = global_batch(train_examples, step - 1, config.batch_size, config.data.num_negatives, config.seed, need_teacher)
            lam_q, lam_d = warm_q(step), warm_d(step)
            parts, tensors = train_step(encoder, batch, config, info, lam_q, lam_d, scaler)
            if step == start + 1 and batch.teacher is not None and config.loss.scale_check is not None:
                teacher = torch.tensor(batch.teacher, dtype=torch.float32)  # the teacher's scale against the student's
                scale_stats, message = score_scale_check(tensors["q"].cpu(), tensors["d"].cpu(), teacher, config.loss.scale_check)
                if message and info.is_main:
                    alarms.append(message)
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
            D.average_gradients(params)
            if scaler is not None:
                scaler.unscale_(optimizer)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm or float("inf")))
            if not math.isfinite(grad_norm) and scaler is None:
                raise TrainingDivergedError(f"non-finite gradient norm at step {step}; last good checkpoint kept")
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if step % config.log_every == 0 or step == end:
                record = {"step": step, **parts, "lambda_q": lam_q, "lambda_d": lam_d, "lr": scheduler.get_last_lr()[0],
                          "grad_norm": grad_norm}
                record.update(batch_statistics(tensors["q"], tensors["d"], batch.group))
                record.update(scale_stats)
                scale_stats = {}
                record.update(head_statistics(model))
                sample = config.monitor.logit_sample
                if sample and info.is_main:
                    toks = tensors["doc_tokens"]
                    record.update(logit_statistics(model, toks["input_ids"][:sample], toks["attention_mask"][:sample]))
                record["step_time_s"] = time.perf_counter() - began
                fired = check_alarms(record, model.vocab_size, step, reg.warmup_steps, config.monitor.dense_fraction)
                if fired:
                    record["alarms"] = fired
                    alarms.extend(fired)
                    for message in fired:
                        if info.is_main:
                            warnings.warn(message, RuntimeWarning, stacklevel=2)
                    if config.monitor.stop_on_collapse:
                        log.write(record)
                        raise CollapseError(fired[0])
                log.write(record)
                last = record
                bar.set_postfix(loss=f"{parts['loss']:.3f}", q=f"{record['active_q']:.0f}", d=f"{record['active_d']:.0f}")
            if val_examples and config.validate_every and step % config.validate_every == 0 and info.is_main:
                validation = validate(encoder, val_examples, config, step)
                log.write(validation)
            if config.eval_every and step % config.eval_every == 0:
                if info.is_main:
                    dev = dev_eval(step)
                    bar.set_postfix(**{config.dev.metric: f"{dev[config.dev.metric]:.4f}"})
                early_stopped = D.broadcast_flag(bool(tracker.should_stop), device)
            if config.checkpoint_every and step % config.checkpoint_every == 0:
                save_checkpoint(out, step, model, tokenizer, optimizer, scheduler, scaler, config, info, device)
            if early_stopped:
                end = step
                break
        done = max(start, end)
        model_dir = curves = last_dir = None
        if stop_after is None or done >= config.steps or early_stopped:
            if val_examples and info.is_main and (validation is None or validation["step"] != done):
                validation = validate(encoder, val_examples, config, done)
                log.write(validation)
            if dev_set is not None and (dev is None or dev["step"] != done):
                dev = dev_eval(done)
            if info.is_main:
                if config.eval_every:
                    last_dir = save_final_model(out / LAST_DIR, model, tokenizer, config,
                                                training_record(done, early_stopped=early_stopped))
                    model_dir = out / MODEL_DIR
                else:
                    model_dir = save_final_model(out / MODEL_DIR, model, tokenizer, config, training_record(done))
                from spladekit.plots import training_curves

                records = log.records
                if records and config.curves:
                    curves = training_curves(records, out / "training_curves.png", vocab_size=model.vocab_size)
                write_json(out / "result.json", {"steps": done, "last_metrics": last, "validation": validation, "alarms": alarms,
                                                 "dev": dev, "best": tracker.summary() if tracker else None,
                                                 "early_stopped": early_stopped})
                from spladekit.publish.card import write_model_cards

                write_model_cards([model_dir, last_dir])  # README.md beside each saved model (an existing one kept)
            D.barrier()
        log.close()
        return TrainResult(model_dir, out / METRICS_FILE, last, done, alarms, validation, curves,
                           best=tracker.summary() if tracker else None, last_dir=last_dir, dev=dev,
                           early_stopped=early_stopped)
    finally:
        info.close()
