"""What a training run says while it runs: :class:`Progress`, a trainer callback.

On stderr, main process only, in the order of the run:

- a header line naming the run (model, data, steps and batch, loss and regulariser, evaluations,
  device, output folder);
- a line before and after each set-up phase (reading the data and mining negatives, loading the
  model, the dev set), the second with what it found and its time; a line when a checkpoint is resumed;
- each evaluation: the held-out validation as one line (ranking loss, accuracy), the dev retrieval
  as a line before it, the corpus-encoding bar, and a line with its scores (``*`` marks a new best);
- a bar over the training steps. It closes before each evaluation and reopens after it, carrying the
  training time so far, so its rate and ETA count training steps only;
- a line for the final model and the curves, and the time spent training and evaluating.
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

from spladekit.train.callbacks import Callback


def describe_run(trainer) -> str:
    """The header line: what the run trains, on what, how long, with what, where."""
    config = trainer.config
    data = config.data
    source = "given examples" if trainer.examples is not None else f"{data.path} ({data.format})"
    if trainer.examples is None and data.format == "beir":
        source = f"{data.path} {data.split} (beir, {data.negatives} negatives)"
    reg = config.regularizer
    parts = [
        f"training {config.model.path} on {source} into {trainer.out}",
        f"{config.steps} steps × batch {config.batch_size}, lr {config.lr:g}, {config.loss.kind} loss, "
        f"{reg.kind} λ_q/λ_d {reg.lambda_q:g}/{reg.lambda_d:g}",
    ]
    if config.eval_every:
        parts.append(f"dev {config.dev.metric} every {config.eval_every} steps")
    world = trainer.info.world_size
    parts.append(f"{trainer.device}" + (f" × {world} processes" if world > 1 else ""))
    return "; ".join(parts)


def _data_line(trainer) -> str:
    data = trainer.config.data
    if trainer.examples is not None:
        return "splitting the given training examples"
    mining = {
        "bm25": f", mining BM25 negatives (top {data.mining_depth})",
        "model": f", mining negatives with {data.negatives_model}",
    }
    doing = mining.get(data.negatives, "") if data.format == "beir" else ""
    if data.teacher_scores:
        doing += f", reading the teacher scores {data.teacher_scores}"
    return f"reading the training data {data.path}{doing}"


class Progress(Callback):
    """The header, phase lines and training bar of the module docstring.

    Attributes:
        trained_s: seconds spent in training steps so far (evaluations and set-up excluded).
        evaluated_s: seconds spent in evaluations so far.
    """

    def __init__(self, stream=None):
        self.stream = stream  # None: sys.stderr when written
        self.enabled = True
        self.bar = None
        self.trained_s = self.evaluated_s = 0.0
        self._began: dict[str, float] = {}

    def say(self, line: str) -> None:
        """Write ``line`` above the bar."""
        if self.enabled:
            tqdm.write(line, file=self.stream or sys.stderr)

    def on_setup(self, trainer) -> None:
        self.enabled = trainer.info.is_main
        self.say(describe_run(trainer))

    def on_phase_begin(self, trainer, phase: str) -> None:
        self._close_bar()
        self._began[phase] = time.perf_counter()
        if phase == "data":
            self.say(_data_line(trainer))
        elif phase == "model":
            self.say(f"loading the model {trainer.config.model.path}")
        elif phase == "dev set":
            self.say("loading the dev set")
        elif phase == "dev":
            dev = trainer.dev_set
            self.say(f"dev evaluation at step {trainer.step}: {len(dev.queries)} queries, {len(dev.corpus)} documents")
        elif phase == "final model":
            self.say("saving the final model")

    def on_phase_end(self, trainer, phase: str, seconds: float) -> None:
        if phase == "data":
            self.say(
                f"  {len(trainer.train_examples)} training queries, {len(trainer.val_examples)} held out "
                f"({seconds:.1f} s)"
            )
        elif phase == "model":
            self.say(f"  {_model_line(trainer)} ({seconds:.1f} s)")
        elif phase == "dev set":
            dev = trainer.dev_set
            self.say(f"  dev set {dev.name}: {len(dev.queries)} queries, {len(dev.corpus)} documents ({seconds:.1f} s)")
        elif phase == "final model":
            where = trainer.last_dir or trainer.model_dir
            self.say(f"  final model (step {trainer.end}): {where} ({seconds:.1f} s)")
        elif phase == "curves":
            self.say(f"training curves: {trainer.out / 'training_curves.png'} ({seconds:.1f} s)")

    def on_train_begin(self, trainer) -> None:
        if trainer.start > 0:
            self.say(f"resumed from the checkpoint of step {trainer.start}; {trainer.end - trainer.start} steps to go")

    def on_step_begin(self, trainer, step: int) -> None:
        if self.bar is None and self.enabled:
            self.bar = tqdm(
                total=trainer.end, initial=step - 1, desc="training", unit="step", file=self.stream or sys.stderr
            )
            # elapsed: the training time of this run so far; average rate: its steps over that time
            self.bar.start_t -= self.trained_s
            self.bar.initial = trainer.start

    def on_step_end(self, trainer, step: int) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def on_log(self, trainer, record: dict) -> None:
        if self.bar is not None:
            self.bar.set_postfix(
                loss=f"{record['loss']:.3f}", q=f"{record['active_q']:.0f}", d=f"{record['active_d']:.0f}"
            )

    def on_evaluate(self, trainer, record: dict) -> None:
        seconds = time.perf_counter() - self._began.get(
            "dev" if record.get("split") == "dev" else "validation", time.perf_counter()
        )
        self.evaluated_s += seconds
        if record.get("split") == "dev":
            self.say(f"  {_dev_line(trainer, record)} ({seconds:.1f} s)")
        else:
            self.say(
                f"validation at step {record['step']}: ranking loss {record['val_loss_rank']:.4f}, "
                f"accuracy {record['val_accuracy']:.3f} on {record['val_queries']} queries ({seconds:.1f} s)"
            )

    def on_train_end(self, trainer) -> None:
        self._close_bar()
        self.say(
            f"done: {trainer.end - trainer.start} steps in {self.trained_s:.0f} s of training, "
            f"{self.evaluated_s:.0f} s of evaluation"
        )

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.trained_s = self.bar.format_dict["elapsed"]
            self.bar.close()
            self.bar = None


def _model_line(trainer) -> str:
    model = trainer.model
    line = f"{model.vocab_size} terms, {model.pooling} pooling, {model.activation} activation, {model.head_impl} head"
    record = trainer.rescale_record
    if record:
        line += f", MLM head rescaled ({record['mode']}, factor {record['factor']:.4g})"
    if model.query_weights is not None:
        line += f", inference-free query side ({getattr(model.query_weights, 'init', 'idf')})"
    return line


def _dev_line(trainer, record: dict) -> str:
    measures = ", ".join(f"{m} {record[m]:.4f}" for m in trainer.config.dev.measures if m in record)
    best = " *best*" if record.get("best") else ""
    return (
        f"dev at step {record['step']}: {measures}{best}; active terms q/d {record['avg_query_terms']:.1f}/"
        f"{record['avg_doc_terms']:.1f}"
    )
