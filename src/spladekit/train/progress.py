"""What a training run shows while it runs: :class:`Progress`, a trainer callback."""

from __future__ import annotations

from tqdm.auto import tqdm

from spladekit.train.callbacks import Callback


class Progress(Callback):
    """A bar over the training steps (main process) with the last loss and active terms, and the last
    dev score."""

    def __init__(self):
        self.bar = None

    def on_train_begin(self, trainer) -> None:
        self.bar = tqdm(total=trainer.end - trainer.start, desc="training", unit="step", disable=not trainer.info.is_main)

    def on_step_end(self, trainer, step: int) -> None:
        self.bar.update(1)

    def on_log(self, trainer, record: dict) -> None:
        self.bar.set_postfix(loss=f"{record['loss']:.3f}", q=f"{record['active_q']:.0f}", d=f"{record['active_d']:.0f}")

    def on_evaluate(self, trainer, record: dict) -> None:
        metric = trainer.config.dev.metric
        if record.get("split") == "dev" and self.bar is not None and metric in record:
            self.bar.set_postfix(**{metric: f"{record[metric]:.4f}"})

    def on_train_end(self, trainer) -> None:
        if self.bar is not None:
            self.bar.close()
