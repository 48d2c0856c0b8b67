"""Training checkpoints: ``out/checkpoints/step-NNNNNNN`` written atomically, found and restored (with
every process's RNG state). Moved out of :mod:`spladekit.train.loop`, which uses them.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import torch

import spladekit.train.distributed as D
from spladekit.io import replace_folder, write_yaml
from spladekit.train.cached import rng_state as _rng_state
from spladekit.train.cached import set_rng_state as _set_rng_state
from spladekit.train.config import TrainConfig

CHECKPOINTS = "checkpoints"


# ------------------------------------------------------------------------------------ checkpoints
def _checkpoints(out: Path) -> list[Path]:
    folder = out / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / "trainer.pt").exists()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def latest_checkpoint(out: str | Path) -> Path | None:
    """The newest complete checkpoint folder under ``out/checkpoints`` (None when there is none)."""
    found = _checkpoints(Path(out))
    return found[-1] if found else None


def save_checkpoint(out: Path, step: int, model, tokenizer, optimizer, scheduler, scaler, config: TrainConfig,
                    info: D.DistInfo, device: torch.device) -> Path:
    """Write ``out/checkpoints/step-NNNNNNN`` atomically (temporary folder renamed into place).

    Holds: ``trainer.pt`` (model, optimizer, scheduler, scaler state, step), ``rng-<rank>.pt`` for
    every process, ``model/`` (a loadable model folder) and ``config.yaml``. Keeps the newest
    ``config.keep_checkpoints`` checkpoints.
    """
    folder = out / CHECKPOINTS
    final = folder / f"step-{step:07d}"
    tmp = folder / f".tmp-step-{step:07d}"
    if info.is_main:
        if tmp.exists():  # a killed run's partial checkpoint of this step: said, then rewritten
            warnings.warn(f"{tmp}: a partial checkpoint of step {step} left by a run that did not finish (killed?); "
                          "it is removed and written again now", RuntimeWarning, stacklevel=2)
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    try:
        D.barrier()
        torch.save({"torch": _rng_state(device)}, tmp / f"rng-{info.rank}.pt")
        D.barrier()
        if info.is_main:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "scaler": scaler.state_dict() if scaler is not None else None, "step": step}, tmp / "trainer.pt")
            model.mlm.save_pretrained(tmp / "model")
            tokenizer.save_pretrained(tmp / "model")
            write_yaml(tmp / "config.yaml", config.model_dump(mode="json"))
            replace_folder(tmp, final)
    except BaseException:  # SIGTERM's SystemExit, a full disk: no partial checkpoint is left
        if info.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if info.is_main:
        for old in _checkpoints(out)[: -config.keep_checkpoints]:
            shutil.rmtree(old)
    D.barrier()
    return final


def load_checkpoint(path: Path, model, optimizer, scheduler, scaler, info: D.DistInfo, device: torch.device) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns its step."""
    state = torch.load(path / "trainer.pt", map_location=device, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    rng_file = path / f"rng-{info.rank}.pt"
    if rng_file.exists():
        rng = torch.load(rng_file, weights_only=False)["torch"]
        if rng[1] is not None and device.type != "cuda":
            rng = (rng[0], None)
        _set_rng_state(rng, device)
    return int(state["step"])
