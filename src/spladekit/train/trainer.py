"""The SPLADE trainer: ``train(config, out) -> TrainResult`` over one :class:`Trainer` made of parts.

The trainer holds a run's state and its steps: set-up (data, model, optimiser, resume), the
optimiser step of :mod:`spladekit.train.step`, the metrics log, the evaluations (held-out ranking
loss; dev retrieval with ``eval_every``) and the finish (final model, curves, ``result.json``).
Everything else is a :class:`~spladekit.train.callbacks.Callback` called at its hooks: dev
selection with the best checkpoint and early stopping, collapse alarms, model cards, progress lines
(:mod:`spladekit.train.callbacks`, :mod:`spladekit.train.progress`).

The run is deterministic given the config, the thread count and the process count: a run resumed
from a checkpoint (model, optimiser, scheduler, scaler and every process's RNG state) computes what
the uninterrupted run computed, bit for bit on one process; the callbacks draw no random numbers.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

import spladekit.train.distributed as D
from spladekit.io import atomic_folder, write_json, write_yaml
from spladekit.train.callbacks import (
    LAST_DIR,
    MODEL_DIR,
    Alarms,
    Callback,
    DevSelection,
    DocumentFrequencyRefresh,
    ModelCards,
)
from spladekit.train.checkpoints import (
    RESULT_FILE,
    RUN_RECORD,
    check_run_folder,
    finished_result,
    latest_checkpoint,
    load_checkpoint,
    run_record,
    save_checkpoint,
)
from spladekit.train.config import TrainConfig
from spladekit.train.data import (
    TrainingExample,
    check_distillation,
    global_batch,
    load_training_examples,
    short_negatives_hint,
    split_validation,
)
from spladekit.train.dev import DEV_SPLIT, evaluate_dev, load_dev_set
from spladekit.train.examples import training_documents
from spladekit.train.metrics_log import METRICS_FILE, _Log
from spladekit.train.monitor import TrainingDivergedError, batch_statistics, head_statistics, logit_statistics
from spladekit.train.regularizers import QuadraticWarmup, SparsityPenalty
from spladekit.train.step import _device, _Encoder, _optimizer, attach_query_weights, load_model, train_step, validate
from spladekit.train.term_weights import DocumentFrequencyEstimate, training_idf


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
        already_done: True when ``out`` held this run finished (same settings and inputs): nothing was
            computed, the fields are read from its ``result.json``.
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
    already_done: bool = False

    def summary(self) -> str:
        """One line: the steps done, the best dev score and its step, where the best and last models are."""
        if self.model_dir is None:
            return f"trained {self.steps} steps; stopped before the end: no final model (the checkpoints resume it)"
        stopped = " (stopped early: dev.patience)" if self.early_stopped else ""
        if self.best is None:
            return f"trained {self.steps} steps{stopped}; final model: {self.model_dir}"
        best = self.best
        return (
            f"trained {self.steps} steps{stopped}; best dev {best['metric']} {best['value']:.4f} at step "
            f"{best['step']}: {self.model_dir}; last model (step {self.steps}): {self.last_dir}"
        )


class Trainer:
    """One SPLADE training run as :func:`train` describes it, in parts: :meth:`setup`,
    :meth:`run_step`, :meth:`write_log`, :meth:`evaluate`, :meth:`finish` (:meth:`fit` runs them
    in order), and :meth:`save_model`, the one way the run writes a model folder.

    Args:
        config: the run's :class:`TrainConfig`.
        out: output folder.
        examples: training examples to use instead of reading ``config.data``.
        callbacks: the run's :class:`~spladekit.train.callbacks.Callback` s, called in this order
            (:func:`default_callbacks` gives the usual ones).
        stop_after: stop (as if interrupted) after this step, without the final model.
        show_progress: progress bars inside evaluations.

    State the callbacks read: ``config``, ``out``, ``info`` (rank, world size), ``device``,
    ``model``, ``tokenizer``, ``log`` (the metrics log, ``log.records`` its kept records),
    ``train_examples``, ``val_examples``, ``dev_set``; ``start`` (the resumed step, 0 for a fresh
    run), ``end`` (the last step to run), ``step`` (the step being run); ``batch``, ``tensors``,
    ``parts`` of the last step; ``alarms``, ``last`` (the last training record), ``validation``,
    ``dev`` (the last such records), ``best``; ``model_dir``, ``last_dir`` at the end;
    ``penalty`` (the run's :class:`~spladekit.train.regularizers.SparsityPenalty`), ``df_estimate``
    (DF-FLOPS' :class:`~spladekit.train.term_weights.DocumentFrequencyEstimate`, else None);
    ``run_record`` (what the run is made from, ``out/inputs.json``) and ``finished`` (the
    ``result.json`` of this very run found finished in ``out``, else None). State they
    set: ``pending_stats`` (joins the next training record), ``stop_requested`` (read after each
    in-loop dev evaluation; rank 0's decision holds on every process), ``best``.

    Example::

        trainer = Trainer(config, "outputs/run", callbacks=default_callbacks(config))
        result = trainer.fit()   # what train(config, "outputs/run") does
    """

    def __init__(
        self,
        config: TrainConfig,
        out: str | Path,
        *,
        examples: Sequence[TrainingExample] | None = None,
        callbacks: Sequence[Callback] = (),
        stop_after: int | None = None,
        show_progress: bool = False,
    ):
        self.config, self.out, self.examples = config, Path(out), examples
        self.callbacks, self.stop_after, self.show_progress = list(callbacks), stop_after, show_progress
        self.info = self.device = self.model = self.tokenizer = self.encoder = self.log = None
        self.optimizer = self.scheduler = self.scaler = self.rescale_record = self.dev_set = None
        self.train_examples: Sequence[TrainingExample] = ()
        self.val_examples: Sequence[TrainingExample] = ()
        self.start = self.step = self.end = 0
        self.batch = self.tensors = None
        self.parts: dict = {}
        self.alarms: list[str] = []
        self.pending_stats: dict = {}
        self.last: dict = {}
        self.validation = self.dev = self.best = None
        self.run_record = self.finished = None
        self.stop_requested = self.should_stop = False
        self.model_dir = self.last_dir = self.curves = None
        self.params: list[torch.nn.Parameter] = []
        self.warm_q = self.warm_d = None
        self.penalty: SparsityPenalty | None = None
        self.df_estimate: DocumentFrequencyEstimate | None = None
        if config.regularizer.kind == "df_flops" and not any(
            isinstance(c, DocumentFrequencyRefresh) for c in self.callbacks
        ):
            self.callbacks.insert(0, DocumentFrequencyRefresh())  # DF-FLOPS cannot run without its estimates

    # ------------------------------------------------------------------------------------ the run
    def fit(self) -> TrainResult:
        """Set up, evaluate the starting point (a fresh run), run the steps, finish.

        Raises:
            see :func:`train`.
        """
        self.info = D.init_distributed()
        try:
            self.setup()
            if self.finished is not None:  # out holds this very run finished: nothing is computed again
                return TrainResult(**finished_result(self.out, self.finished))
            self.callback("on_train_begin")
            if self.start == 0:  # the starting point: the untrained model can be the best one
                self.evaluate(0, validation=bool(self.config.validate_every), dev=True)
            for step in range(self.start + 1, self.end + 1):
                self.run_step(step)
                if self.should_stop:
                    self.end = step
                    break
            return self.finish()
        finally:
            self.info.close()

    def callback(self, hook: str, *args) -> None:
        """Call ``hook`` of every callback, in order, with the trainer and ``args``."""
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Wrap a phase that is not a training step in ``on_phase_begin``/``on_phase_end``."""
        self.callback("on_phase_begin", name)
        began = time.perf_counter()
        yield
        self.callback("on_phase_end", name, time.perf_counter() - began)

    # ------------------------------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Device, training data (read and checked before ``out`` is made: bad data leaves nothing
        behind), the run record checked against ``out``'s (:meth:`check_inputs`; a finished run of
        the same record stops the set-up here, ``finished`` set), ``out/inputs.json`` and
        ``out/config.yaml``, model and optimiser, resume, and the dev set (main process).

        Raises:
            RunChangedError: ``out`` holds a run of other settings or inputs (left as it is).
        """
        config, info = self.config, self.info
        self.device = _device(config, info)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.callback("on_setup")
        given = self.examples is not None
        with self.phase("data"):
            if self.examples is None:
                self.examples = load_training_examples(config.data)
            self.train_examples, self.val_examples = split_validation(
                self.examples, config.data.validation_fraction, config.seed
            )
            if config.loss.kind != "infonce":
                check_distillation(
                    self.train_examples,
                    config.data.num_negatives,
                    str(config.data.path),
                    short_negatives_hint(config.data),
                )
        self.finished = self.check_inputs(given)
        if self.finished is not None:
            return
        if info.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_json(self.out / RUN_RECORD, self.run_record)
            write_yaml(self.out / "config.yaml", config.model_dump(mode="json"))
        with self.phase("model"):
            self._setup_model()
        self._resume()
        if config.eval_every and info.is_main:
            with self.phase("dev set"):
                self.dev_set = load_dev_set(config.dev, config.data, self.val_examples, self.train_examples)

    def check_inputs(self, examples_given: bool) -> dict | None:
        """Fingerprint what the run reads (:func:`~spladekit.train.checkpoints.run_record`: the
        settings less bookkeeping, the size and SHA-256 of every input file, or a digest of the
        given examples) into ``run_record``, and check it against the run ``out`` holds
        (:func:`~spladekit.train.checkpoints.check_run_folder`): the ``result.json`` of this very run
        finished there, or None (nothing to resume, or a checkpoint of this run to resume).

        Raises:
            RunChangedError: ``out`` holds a run of other settings or inputs, named; nothing in ``out`` changes.
        """
        self.run_record = run_record(self.config, self.examples if examples_given else None)
        return check_run_folder(self.out, self.config, self.run_record)

    def _setup_model(self) -> None:
        """The model (rescaled, inference-free side attached), optimiser, scheduler, scaler and the
        regularisers' warm-ups, seeded as the exact-resume guarantee needs."""
        from spladekit.model.metadata import INFERENCE_FREE

        config, info = self.config, self.info
        torch.manual_seed(config.seed)
        rescale_texts = [e.positives[0][1] for e in self.train_examples[: config.rescale.sample_texts]]
        requested = config.model_dump(mode="json")
        model, self.tokenizer, self.rescale_record = load_model(config, rescale_texts)
        if info.is_main and config.model_dump(mode="json") != requested:  # max lengths lowered to the positions
            write_yaml(self.out / "config.yaml", config.model_dump(mode="json"))
        if config.model.query_encoder == INFERENCE_FREE:
            attach_query_weights(model, self.tokenizer, self.train_examples, config)
        model.to(self.device).train()
        D.broadcast_parameters(model)
        torch.manual_seed(config.seed + info.rank)
        self.model = model
        self.optimizer, self.scheduler = _optimizer(model, config)
        self.scaler = torch.amp.GradScaler(self.device.type) if config.precision == "fp16" else None
        self.encoder = _Encoder(model, self.tokenizer, config, self.device)
        self.params = [p for p in model.parameters() if p.requires_grad]
        reg = config.regularizer
        lambda_q = 0.0 if model.query_weights is not None else reg.lambda_q  # inference-free: no query regulariser
        self.warm_q, self.warm_d = (
            QuadraticWarmup(lambda_q, reg.warmup_steps),
            QuadraticWarmup(reg.lambda_d, reg.warmup_steps),
        )
        self._setup_regularizer()

    def _setup_regularizer(self) -> None:
        """The run's :class:`~spladekit.train.regularizers.SparsityPenalty`: for ``idf_flops`` the IDF of
        the distinct training documents (:func:`~spladekit.train.term_weights.training_idf`), for
        ``df_flops`` a :class:`~spladekit.train.term_weights.DocumentFrequencyEstimate` over
        ``regularizer.df.sample_docs`` of them drawn with ``config.seed`` (first estimated by
        :class:`~spladekit.train.callbacks.DocumentFrequencyRefresh` before the first update).

        Raises:
            ValueError: ``idf_flops`` on a model whose vectors are folded terms (the IDF is per vocabulary entry).
        """
        reg, model = self.config.regularizer, self.model
        idf = None
        if reg.kind in ("idf_flops", "df_flops"):
            documents = training_documents(self.train_examples)
        if reg.kind == "idf_flops":
            if model.output_size != model.vocab_size:
                raise ValueError(
                    "regularizer.kind idf_flops on a model with a folded vocabulary: the IDF is per "
                    "vocabulary entry, the vectors per folded term"
                )
            idf = training_idf(self.tokenizer, documents, model.vocab_size)
        if reg.kind == "df_flops":
            self.df_estimate = DocumentFrequencyEstimate(
                model.output_size, reg.df.alpha, reg.df.beta, reg.df.refresh_every
            )
            self.df_estimate.choose_sample(documents, reg.df.sample_docs, seed=self.config.seed)
        self.penalty = SparsityPenalty(reg, idf=idf, df=self.df_estimate)

    def _resume(self) -> None:
        """The newest checkpoint of ``out`` restored when ``config.resume``; the metrics log cut back to it."""
        config = self.config
        checkpoint = latest_checkpoint(self.out) if config.resume else None
        if checkpoint is not None:
            self.start = load_checkpoint(
                checkpoint,
                self.model,
                self.optimizer,
                self.scheduler,
                self.scaler,
                self.info,
                self.device,
                regularizer=self.df_estimate,
            )
        self.step = self.start
        self.end = config.steps if self.stop_after is None else min(config.steps, self.stop_after)
        self.log = _Log(self.out, self.start, self.info.is_main)
        if config.eval_every and self.start > 0:  # the last dev record of the kept history
            self.dev = next((r for r in reversed(self.log.records) if r.get("split") == DEV_SPLIT), None)

    # ------------------------------------------------------------------------------------ the step
    def run_step(self, step: int) -> None:
        """Step ``step``: one optimiser step on its global batch, its training record when due
        (every ``log_every`` steps and at the last one), then the evaluations and checkpoint due."""
        config = self.config
        self.step = step
        self.callback("on_step_begin", step)
        began = time.perf_counter()
        need_teacher = config.loss.kind != "infonce"
        self.batch = global_batch(
            self.train_examples, step - 1, config.batch_size, config.data.num_negatives, config.seed, need_teacher
        )
        lambdas = self.warm_q(step), self.warm_d(step)
        self.parts, self.tensors = train_step(
            self.encoder, self.batch, config, self.info, *lambdas, self.scaler, self.penalty
        )
        grad_norm = self.optimizer_step(step)
        self.callback("on_step_end", step)
        if step % config.log_every == 0 or step == self.end:
            self.write_log(step, lambdas, grad_norm, began)
        due_dev = bool(config.eval_every) and step % config.eval_every == 0
        self.evaluate(step, validation=bool(config.validate_every) and step % config.validate_every == 0, dev=due_dev)
        if due_dev:
            self.should_stop = D.broadcast_flag(bool(self.stop_requested), self.device)
        if config.checkpoint_every and step % config.checkpoint_every == 0:
            save_checkpoint(
                self.out,
                step,
                self.model,
                self.tokenizer,
                self.optimizer,
                self.scheduler,
                self.scaler,
                config,
                self.info,
                self.device,
                regularizer=self.df_estimate,
            )

    def optimizer_step(self, step: int) -> float:
        """Average the gradients over processes, clip them, step AdamW and the schedule; the norm before clipping.

        Raises:
            TrainingDivergedError: a non-finite gradient norm without a gradient scaler.
        """
        D.average_gradients(self.params)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.config.max_grad_norm or float("inf")))
        if not math.isfinite(grad_norm) and self.scaler is None:
            raise TrainingDivergedError(f"non-finite gradient norm at step {step}; last good checkpoint kept")
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def write_log(self, step: int, lambdas: tuple[float, float], grad_norm: float, began: float) -> None:
        """The training record of ``step``: loss parts, λ, learning rate, gradient norm, batch,
        head and logit statistics (:mod:`spladekit.train.monitor`), ``pending_stats``, the step's
        time; through ``on_log``, then into the metrics log."""
        record = {
            "step": step,
            **self.parts,
            "lambda_q": lambdas[0],
            "lambda_d": lambdas[1],
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": grad_norm,
        }
        record.update(batch_statistics(self.tensors["q"], self.tensors["d"], self.batch.group))
        record.update(self.pending_stats)
        self.pending_stats = {}
        record.update(head_statistics(self.model))
        sample = self.config.monitor.logit_sample
        if sample and self.info.is_main:
            tokens = self.tensors["doc_tokens"]
            record.update(logit_statistics(self.model, tokens["input_ids"][:sample], tokens["attention_mask"][:sample]))
        record["step_time_s"] = time.perf_counter() - began
        self.callback("on_log", record)
        self.log.write(record)
        self.last = record

    # ------------------------------------------------------------------------------------ evaluation
    def evaluate(self, step: int, validation: bool, dev: bool) -> None:
        """The evaluations of ``step`` asked for, on the main process: the held-out ranking loss and
        accuracy (:func:`spladekit.train.step.validate`, when there are held-out examples) and dev
        retrieval (:func:`spladekit.train.dev.evaluate_dev`, when there is a dev set). Each record
        goes through ``on_evaluate``, then into the metrics log."""
        if validation and self.val_examples and self.info.is_main:
            with self.phase("validation"):
                record = validate(self.encoder, self.val_examples, self.config, step)
            self.validation = self._evaluated(record)
        if dev and self.dev_set is not None:
            with self.phase("dev"):
                record = evaluate_dev(
                    self.model,
                    self.tokenizer,
                    self.config,
                    self.dev_set,
                    step,
                    self.device,
                    show_progress=self.show_progress,
                )
            self.dev = self._evaluated(record)

    def _evaluated(self, record: dict) -> dict:
        self.callback("on_evaluate", record)
        self.log.write(record)
        return record

    # ------------------------------------------------------------------------------------ finish
    def finish(self) -> TrainResult:
        """A run that reached its end (``steps``, or early stopping; not ``stop_after``): the final
        evaluations (unless done at that step), then, on the main process, the final model
        (``model/``, or ``last/`` beside the best ``model/`` with ``eval_every``) and the curves.
        ``on_train_end`` follows on the main process, whether the run reached its end or not; then
        ``result.json``, last: the mark of a finished run, which
        :func:`~spladekit.train.checkpoints.check_run_folder` returns as done (a run stopped before
        it, while writing its cards say, runs again)."""
        done, early_stopped = max(self.start, self.end), self.should_stop
        complete = self.stop_after is None or done >= self.config.steps or early_stopped
        if complete:
            self.evaluate(
                done,
                validation=self.validation is None or self.validation["step"] != done,
                dev=self.dev is None or self.dev["step"] != done,
            )
            if self.info.is_main:
                self._save_final(done, early_stopped)
        if self.info.is_main:
            self.callback("on_train_end")
            if complete:
                write_json(
                    self.out / RESULT_FILE,
                    {
                        "steps": done,
                        "last_metrics": self.last,
                        "validation": self.validation,
                        "alarms": self.alarms,
                        "dev": self.dev,
                        "best": self.best,
                        "early_stopped": early_stopped,
                    },
                )
        if complete:
            D.barrier()
        self.log.close()
        return TrainResult(
            self.model_dir,
            self.out / METRICS_FILE,
            self.last,
            done,
            self.alarms,
            self.validation,
            self.curves,
            best=self.best,
            last_dir=self.last_dir,
            dev=self.dev,
            early_stopped=early_stopped,
        )

    def _save_final(self, done: int, early_stopped: bool) -> None:
        """The final model and the curves (main process)."""
        with self.phase("final model"):
            if self.config.eval_every:
                self.last_dir = self.save_model(self.out / LAST_DIR, done, early_stopped=early_stopped)
                self.model_dir = self.out / MODEL_DIR
            else:
                self.model_dir = self.save_model(self.out / MODEL_DIR, done)
        self.curves = self._curves()

    def _curves(self) -> Path | None:
        """``training_curves.png`` from the metrics log when ``config.curves``."""
        if not (self.log.records and self.config.curves):
            return None
        from spladekit.plots import training_curves

        with self.phase("curves"):
            return training_curves(self.log.records, self.out / "training_curves.png", vocab_size=self.model.vocab_size)

    def save_model(self, folder: Path, step: int, **record) -> Path:
        """Write the model folder ``folder`` atomically by
        :meth:`spladekit.model.encoder.SpladeEncoder.save_pretrained` (masked-LM, tokenizer,
        sentence-transformers files, the inference-free query side, ``spladekit.json``,
        ``config.yaml``), recording ``{"training": {"steps": step, "config", "rescale", **record}}``
        in ``spladekit.json`` ``extra``. The model stays in its training mode and on its device."""
        from spladekit.model.encoder import EncoderMetadata, SpladeEncoder

        config, model = self.config, self.model
        training = {"steps": step, "config": config.model_dump(mode="json"), "rescale": self.rescale_record, **record}
        meta = EncoderMetadata(
            query_max_length=config.model.query_max_length,
            doc_max_length=config.model.doc_max_length,
            source=config.model.path,
            extra={"training": training},
        )
        query_weights = None
        if (
            model.query_weights is not None
        ):  # relu(θ) saved: the query side spladekit and sentence-transformers encode with
            query_weights = model.query_weights.saved_weights()
            init = getattr(model.query_weights, "init", "idf of the training documents")
            meta.extra["inference_free"] = {"init": init, "trained": config.model.train_query_weights}
            if init.startswith("idf"):
                meta.extra["inference_free"]["formula"] = "ln(1 + (N - df + 0.5) / (df + 0.5))"
        was_training = model.training
        try:  # the encoder puts the model in eval mode
            encoder = SpladeEncoder(model, self.tokenizer, meta, device=self.device, query_weights=query_weights)
            with atomic_folder(folder) as tmp:
                encoder.save_pretrained(tmp, config=config.model_dump(mode="json"))
        finally:
            model.train(was_training)
        return folder


def default_callbacks(
    config: TrainConfig, show_progress: bool = True, extra: Sequence[Callback] = ()
) -> list[Callback]:
    """The callbacks of :func:`train`, in order: DF-FLOPS' refresh (with ``regularizer.kind: df_flops``;
    a :class:`Trainer` given none adds it itself), dev selection (with ``eval_every``), alarms, ``extra``,
    model cards, and with ``show_progress`` the progress lines and bar
    (:class:`~spladekit.train.progress.Progress`, last: it reports what the others decided)."""
    callbacks: list[Callback] = [DocumentFrequencyRefresh()] if config.regularizer.kind == "df_flops" else []
    callbacks += [DevSelection(config.dev.metric, config.dev.patience)] if config.eval_every else []
    callbacks += [Alarms(), *extra, ModelCards()]
    if show_progress:
        from spladekit.train.progress import Progress

        callbacks.append(Progress())
    return callbacks


def train(
    config: TrainConfig,
    out: str | Path,
    *,
    examples: Sequence[TrainingExample] | None = None,
    stop_after: int | None = None,
    show_progress: bool = True,
    callbacks: Sequence[Callback] = (),
) -> TrainResult:
    """Train a SPLADE model as ``config`` says; write everything into ``out``.

    Outputs: ``inputs.json``, ``config.yaml``, ``metrics.jsonl`` (and ``tensorboard/`` when installed),
    ``checkpoints/step-N/`` every ``checkpoint_every`` steps, ``training_curves.png``, ``result.json``
    and the final model folder ``model/`` (with ``README.md``). With ``eval_every``
    (:mod:`spladekit.train.dev`): dev-set retrieval records (``"split": "dev"``) in ``metrics.jsonl``
    at step 0, every ``eval_every`` steps and at the end; ``model/`` is then the best checkpoint by
    ``dev.metric`` (``best.json``: metric, value, step), ``last/`` the final model, and
    ``dev.patience`` may stop the run early. An existing checkpoint in ``out`` is resumed when
    ``config.resume``; a best model saved after that checkpoint (its dev record is dropped with the
    rest of the lost steps) is removed, and the selection restarts from the resumed step's history.
    Only a run made from the same settings and input files is resumed (``inputs.json``,
    :func:`spladekit.train.checkpoints.check_run_folder`); a finished one is returned as it is
    (``already_done``).

    Args:
        config: the run's :class:`TrainConfig`.
        out: output folder.
        examples: training examples to use instead of reading ``config.data`` (tests, demos).
        stop_after: stop (as if interrupted) after this step, without the final model.
        show_progress: a header line, a line per phase and evaluation, and a bar over the training
            steps, on stderr (main process).
        callbacks: more :class:`~spladekit.train.callbacks.Callback` s, called after dev selection and
            the alarms.

    Raises:
        TrainingDivergedError: NaN/inf loss or gradient (the last good checkpoint is kept).
        CollapseError: a collapse alarm with ``monitor.stop_on_collapse``.
        DataFormatError: malformed training data.
        ValueError: a dev set from a test split.
        RunChangedError: ``out`` holds a run of other settings or inputs (left as it is).

    Example (a config from YAML: ``train(load_config("configs/demo.yaml"), "outputs/demo-train")``)::

        >>> import tempfile
        >>> from spladekit.train import TrainConfig, train
        >>> from spladekit.train.examples import TrainingExample
        >>> config = TrainConfig.model_validate({"model": {"path": "rasyosef/splade-tiny", "query_max_length": 16,
        ...                                                "doc_max_length": 32}, "steps": 1, "batch_size": 2})
        >>> examples = [TrainingExample(f"q{i}", "what do proteins do", [(f"p{i}", "proteins do the work of cells")],
        ...                             [(f"n{i}", "the moon orbits the earth")]) for i in range(2)]
        >>> result = train(config, tempfile.mkdtemp(), examples=examples, show_progress=False)
        >>> result.steps, (result.model_dir / "spladekit.json").exists()
        (1, True)
    """
    trainer = Trainer(
        config,
        out,
        examples=examples,
        callbacks=default_callbacks(config, show_progress, callbacks),
        stop_after=stop_after,
        show_progress=show_progress,
    )
    return trainer.fit()
