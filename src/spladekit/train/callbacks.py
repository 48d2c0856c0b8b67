"""The parts of a training run beside the step: :class:`Callback` and the trainer's own callbacks.

A callback is called by :class:`spladekit.train.trainer.Trainer` at fixed points of a run and reads
(or changes) the trainer's state: ``config``, ``out``, ``info``, ``model``, ``log``, ``step``,
``start``, ``end``, ``batch``, ``tensors``, ``alarms``, ``pending_stats``, ``stop_requested`` …
(see the trainer's docstring). Every hook does nothing by default; a callback overrides the ones it
needs. The hooks, in the order of a run:

- ``on_setup(trainer)``: the device is known, nothing is read yet;
- ``on_phase_begin(trainer, phase)`` / ``on_phase_end(trainer, phase, seconds)``: around each
  phase that is not a training step: ``"data"``, ``"model"``, ``"dev set"``, ``"validation"``,
  ``"dev"``, ``"final model"``, ``"curves"``;
- ``on_train_begin(trainer)``: set-up and resume done, before the step-0 evaluations;
- ``on_step_begin(trainer, step)``: before the batch of ``step`` is drawn (a regulariser refreshing
  statistics on a schedule does it here);
- ``on_step_end(trainer, step)``: after the optimiser step (``trainer.batch``/``trainer.tensors``
  hold the step's batch and detached vectors; what goes into ``trainer.pending_stats`` joins the
  next training record);
- ``on_log(trainer, record)``: a training record, before it is written to ``metrics.jsonl``;
- ``on_evaluate(trainer, record)``: a validation or dev record, before it is written;
- ``on_train_end(trainer)``: main process, the final models saved (``trainer.model_dir``,
  ``trainer.last_dir``; None when the run stopped before its end).

Example::

    from spladekit.train.callbacks import Callback

    class EveryTenSteps(Callback):
        def on_step_begin(self, trainer, step):
            if step % 10 == 1:
                print("step", step, "of", trainer.end)

    # train(config, "out", callbacks=[EveryTenSteps()])
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import torch
from tqdm.auto import tqdm

from spladekit.io import read_json, write_json
from spladekit.train.dev import DEV_SPLIT, BestTracker
from spladekit.train.monitor import CollapseError, check_alarms, score_scale_check
from spladekit.train.step import sample_document_frequencies

MODEL_DIR = "model"
LAST_DIR = "last"
BEST_FILE = "best.json"


class Callback:
    """A part of a training run called at the trainer's hooks (see the module docstring)."""

    def on_setup(self, trainer) -> None:
        """Before anything is read."""

    def on_phase_begin(self, trainer, phase: str) -> None:
        """Before a phase that is not a training step."""

    def on_phase_end(self, trainer, phase: str, seconds: float) -> None:
        """After that phase, ``seconds`` later."""

    def on_train_begin(self, trainer) -> None:
        """After set-up and resume, before the step-0 evaluations."""

    def on_step_begin(self, trainer, step: int) -> None:
        """Before the batch of ``step`` is drawn."""

    def on_step_end(self, trainer, step: int) -> None:
        """After the optimiser step of ``step``."""

    def on_log(self, trainer, record: dict) -> None:
        """A training record, before it is written."""

    def on_evaluate(self, trainer, record: dict) -> None:
        """A validation or dev record, before it is written."""

    def on_train_end(self, trainer) -> None:
        """Main process: after the final models are saved."""


class DevSelection(Callback):
    """The best model by ``dev.metric`` (:class:`~spladekit.train.dev.BestTracker`: higher is better,
    ties keep the earlier step). Each dev record that improves on the best is marked ``"best": True``,
    its model saved as ``model/`` (training record ``selected``: the best's summary) and the summary
    as ``best.json`` (metric, value, step); after ``patience`` dev evaluations in a row without
    improvement the trainer is asked to stop (``trainer.stop_requested``).

    On resume the selection restarts from the kept history (``metrics.jsonl`` up to the checkpoint);
    a best model saved after the resumed checkpoint, or one ``best.json`` does not vouch for, is
    removed (:func:`forget_lost_best`).
    """

    def __init__(self, metric: str, patience: int | None = None):
        self.metric, self.patience = metric, patience
        self.tracker = BestTracker(metric, patience)

    def on_train_begin(self, trainer) -> None:
        self.tracker = BestTracker(self.metric, self.patience, trainer.log.records if trainer.start > 0 else ())
        if trainer.info.is_main:
            forget_lost_best(trainer.out, self.tracker, trainer.start)
        trainer.best = self.tracker.summary()

    def on_evaluate(self, trainer, record: dict) -> None:
        if record.get("split") != DEV_SPLIT:
            return
        if self.tracker.update(record):
            record["best"] = True
            trainer.save_model(trainer.out / MODEL_DIR, record["step"], selected=self.tracker.summary())
            write_json(trainer.out / BEST_FILE, self.tracker.summary())
        trainer.best = self.tracker.summary()
        trainer.stop_requested = self.tracker.should_stop


class DocumentFrequencyRefresh(Callback):
    """DF-FLOPS' document frequencies re-estimated on their schedule (``regularizer.df.refresh_every``).

    Before each update (``on_step_begin``), when ``trainer.df_estimate`` is due for the model after
    the ``step − 1`` updates it has taken (:meth:`~spladekit.train.term_weights.DocumentFrequencyEstimate.due`:
    before the first update, then every ``refresh_every`` updates), the sample of training documents is
    encoded in eval mode without gradient (:func:`spladekit.train.step.sample_document_frequencies`,
    sharded over processes, counts summed) and the estimate refreshed; its summary
    (:meth:`~spladekit.train.term_weights.DocumentFrequencyEstimate.summary`) joins the next training
    record. Draws no random numbers. Does nothing in a run without DF-FLOPS.

    Attributes:
        refreshes: the estimates this callback made in this process.
    """

    def __init__(self):
        self.refreshes = 0

    def on_step_begin(self, trainer, step: int) -> None:
        estimate = getattr(trainer, "df_estimate", None)
        if estimate is None or not estimate.due(step - 1):
            return
        counts, num_docs = sample_document_frequencies(trainer.encoder, estimate.texts, trainer.config, trainer.info)
        estimate.refresh(counts, num_docs, step - 1)
        self.refreshes += 1
        trainer.pending_stats.update(estimate.summary())


def forget_lost_best(out: Path, tracker: BestTracker, start: int) -> None:
    """On resume: keep ``model/`` as the best only when ``best.json`` matches the tracker's best of the
    kept history; otherwise (a best saved after the resumed checkpoint, or a missing record) remove
    ``model/`` and ``best.json`` and restart the selection."""
    path = out / BEST_FILE
    saved = read_json(path) if path.exists() else None
    if tracker.best is not None and saved == tracker.summary() and (out / MODEL_DIR).is_dir():
        return
    if start > 0 or saved is not None:
        tracker.best, tracker.since = None, 0
        path.unlink(missing_ok=True)
        if (out / MODEL_DIR).exists():
            shutil.rmtree(out / MODEL_DIR)


class Alarms(Callback):
    """Collapse alarms and the teacher's score scale (:mod:`spladekit.train.monitor`).

    - Every training record goes through :func:`~spladekit.train.monitor.check_alarms`; alarms that
      fire are listed in the record (``"alarms"``) and in ``trainer.alarms``, the main process warns
      (``RuntimeWarning``), and with ``monitor.stop_on_collapse`` the record is written and
      :class:`~spladekit.train.monitor.CollapseError` raised.
    - On the first step of a distillation run (teacher scores, ``loss.scale_check`` set), the spread
      of the student's scores is compared with the teacher's
      (:func:`~spladekit.train.monitor.score_scale_check`): the statistics join the next training
      record, a message is an alarm of the main process.
    """

    def on_step_end(self, trainer, step: int) -> None:
        config, batch = trainer.config, trainer.batch
        if step != trainer.start + 1 or batch.teacher is None or config.loss.scale_check is None:
            return
        teacher = torch.tensor(batch.teacher, dtype=torch.float32)  # the teacher's scale against the student's
        stats, message = score_scale_check(
            trainer.tensors["q"].cpu(), trainer.tensors["d"].cpu(), teacher, config.loss.scale_check
        )
        trainer.pending_stats.update(stats)
        if message and trainer.info.is_main:
            trainer.alarms.append(message)
            _warn([message])

    def on_log(self, trainer, record: dict) -> None:
        config = trainer.config
        fired = check_alarms(
            record,
            trainer.model.vocab_size,
            record["step"],
            config.regularizer.warmup_steps,
            config.monitor.dense_fraction,
        )
        if not fired:
            return
        record["alarms"] = fired
        trainer.alarms.extend(fired)
        if trainer.info.is_main:
            _warn(fired)
        if config.monitor.stop_on_collapse:
            trainer.log.write(record)
            raise CollapseError(fired[0])


def _warn(messages: list[str]) -> None:
    """Each message as a ``RuntimeWarning``, written between the lines of an open progress bar."""
    with tqdm.external_write_mode(file=sys.stderr):
        for message in messages:
            warnings.warn(message, RuntimeWarning, stacklevel=3)


class ModelCards(Callback):
    """``README.md`` beside each saved model (``model/``, ``last/``) by
    :func:`spladekit.publish.card.write_model_cards` (an existing card is kept)."""

    def on_train_end(self, trainer) -> None:
        from spladekit.publish.card import write_model_cards

        write_model_cards([trainer.model_dir, trainer.last_dir])
