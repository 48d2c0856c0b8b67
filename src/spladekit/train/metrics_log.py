"""The metrics log of a training run: ``metrics.jsonl`` (main process; cut back to the resumed step),
and TensorBoard when installed; :class:`spladekit.train.trainer.Trainer` writes it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from spladekit.io import atomic_write, read_jsonl

METRICS_FILE = "metrics.jsonl"


# ------------------------------------------------------------------------------------ logging
class _Log:
    """JSONL metrics (main process), TensorBoard when installed."""

    def __init__(self, out: Path, resumed_step: int, enabled: bool):
        self.path = out / METRICS_FILE
        self.enabled = enabled
        self.records: list[dict] = []
        self.tb = None
        if not enabled:
            return
        if self.path.exists():  # keep the history up to the resumed step, drop anything after it
            kept = [record for _, record in read_jsonl(self.path)]  # DataFormatError names a damaged line
            # resumed_step 0 = no checkpoint: a fresh start logs its step-0 records again, so keep none
            kept = [r for r in kept if r.get("step", 0) <= resumed_step] if resumed_step > 0 else []
            with atomic_write(self.path) as handle:
                for record in kept:
                    handle.write(json.dumps(record) + "\n")
            self.records = kept
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        except Exception:  # tensorboard not installed
            self.tb = None

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        self.records.append(record)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tb is not None:
            prefix = record.get("split", "train") + "/"
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step" and math.isfinite(value):
                    self.tb.add_scalar(prefix + key, value, record["step"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
