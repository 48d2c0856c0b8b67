"""Training checkpoints: ``out/checkpoints/step-NNNNNNN`` written atomically, found and restored (with
every process's RNG state), and the record of what the run in ``out`` was made from (``inputs.json``:
its settings and a fingerprint of every file it reads), checked before a run resumes or is redone.
Used by :class:`spladekit.train.trainer.Trainer`.

Checkpoints hold only tensors, numbers, strings and containers of them, read back with
``torch.load(weights_only=True)`` (torch's unpickler of tensors and plain data: a checkpoint file
replaced by a hostile pickle cannot run code).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import torch

import spladekit.train.distributed as D
from spladekit.errors import DataFormatError, SpladekitError
from spladekit.io import read_json, replace_folder, write_yaml
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


def save_checkpoint(
    out: Path,
    step: int,
    model,
    tokenizer,
    optimizer,
    scheduler,
    scaler,
    config: TrainConfig,
    info: D.DistInfo,
    device: torch.device,
    regularizer=None,
) -> Path:
    """Write ``out/checkpoints/step-NNNNNNN`` atomically (temporary folder renamed into place).

    Holds: ``trainer.pt`` (model, optimizer, scheduler, scaler state, step, and ``regularizer``: the
    ``state_dict()`` of the regulariser's statistics when given, e.g. DF-FLOPS'
    :class:`~spladekit.train.term_weights.DocumentFrequencyEstimate`: tensors and numbers),
    ``rng-<rank>.pt`` for every process, ``model/`` (a loadable model folder) and ``config.yaml``.
    Keeps the newest ``config.keep_checkpoints`` checkpoints.
    """
    folder = out / CHECKPOINTS
    final = folder / f"step-{step:07d}"
    tmp = folder / f".tmp-step-{step:07d}"
    if info.is_main:
        if tmp.exists():  # a killed run's partial checkpoint of this step: said, then rewritten
            warnings.warn(
                f"{tmp}: a partial checkpoint of step {step} left by a run that did not finish (killed?); "
                "it is removed and written again now",
                RuntimeWarning,
                stacklevel=2,
            )
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    try:
        D.barrier()
        torch.save({"torch": _rng_state(device)}, tmp / f"rng-{info.rank}.pt")
        D.barrier()
        if info.is_main:
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None,
                    "step": step,
                    "regularizer": regularizer.state_dict() if regularizer is not None else None,
                },
                tmp / "trainer.pt",
            )
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


def _load_plain(path: Path, device=None) -> dict:
    """A checkpoint file read by torch's ``weights_only`` unpickler (tensors and plain data only).

    Raises:
        DataFormatError: naming the file: it is not such a file (a pickle of other objects, cut, corrupt).
    """
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # pickle.UnpicklingError (a global outside torch's list), RuntimeError (not a zip)
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise DataFormatError(
            path, f"not a spladekit checkpoint file readable as tensors and plain data ({first})"
        ) from None


def load_checkpoint(
    path: Path, model, optimizer, scheduler, scaler, info: D.DistInfo, device: torch.device, regularizer=None
) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns its step.

    ``regularizer``: an object with ``load_state_dict`` given the saved ``regularizer`` state (an
    empty one when the checkpoint has none: a DF estimate is then made again before the next update).

    Raises:
        DataFormatError: ``trainer.pt`` or ``rng-<rank>.pt`` holds anything but tensors and plain data, or a
            regulariser state the run cannot take (a wrong shape, counts out of range), named.
    """
    state = _load_plain(path / "trainer.pt", device)
    if regularizer is not None:
        try:
            regularizer.load_state_dict(state.get("regularizer") or {})
        except (ValueError, TypeError, KeyError) as exc:
            raise DataFormatError(path / "trainer.pt", f"regularizer state: {exc}") from None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    rng_file = path / f"rng-{info.rank}.pt"
    if rng_file.exists():
        rng = _load_plain(rng_file)["torch"]
        if rng[1] is not None and device.type != "cuda":
            rng = (rng[0], None)
        _set_rng_state(rng, device)
    return int(state["step"])


# ------------------------------------------------------------------------------------ what a run was made from
RUN_RECORD = "inputs.json"
RESULT_FILE = "result.json"
#: settings that change how a run is kept, shown or placed, or what it may run, not what it computes: a
#: rerun may change them (a model folder's own code is fingerprinted with its files; loading it again
#: without ``model.trust_remote_code`` is refused by the loader)
BOOKKEEPING = (
    "resume",
    "device",
    "checkpoint_every",
    "keep_checkpoints",
    "log_every",
    "curves",
    "model.trust_remote_code",
)


class RunChangedError(SpladekitError, ValueError):
    """``out`` holds a training made from other settings or other input files (it is left as it is)."""


def _local_path(value: str, base: str | None = None) -> Path | str:
    path = Path(value).expanduser()
    if path.exists():
        return path
    if base and (Path(base) / value).exists():  # the naver layout's files relative to data.path
        return Path(base) / value
    return str(value)


def _model_path(value: str) -> Path | str:
    from spladekit.data.resolve import resolve_model

    found = resolve_model(value)  # the folder load_model reads (a hub id is fetched there, as it would be next)
    return Path(found) if Path(found).is_dir() else found


def _dataset_path(value: str) -> Path | str:
    from spladekit.data.resolve import resolve_dataset
    from spladekit.errors import ResolutionError

    if Path(value).is_dir() or str(value).startswith("irds:"):
        return _local_path(value)  # an ir_datasets id names a versioned dataset of its registry
    try:
        return resolve_dataset(value, download=False)
    except ResolutionError:
        return str(value)  # read later by its own reader, which names what is missing


def input_files(config: TrainConfig, examples_given: bool = False) -> dict[str, Path | str]:
    """What a training run reads, by setting: a local file or folder, or the name of a dataset or model
    read from elsewhere (a hub dataset id, an ``irds:`` id). ``examples_given``: the training examples
    come from the caller (the ``data.*`` files are not read).

    Raises:
        ResolutionError: ``model.path`` cannot be found (as loading it would say).
    """
    data = config.data
    found: dict[str, Path | str] = {"model.path": _model_path(config.model.path)}
    if not examples_given:
        found["data.path"] = _dataset_path(data.path) if data.format == "beir" else _local_path(data.path)
        base = data.path if data.format == "naver" else None
        for name in ("teacher_scores", "queries", "corpus"):
            if getattr(data, name):
                found[f"data.{name}"] = _local_path(getattr(data, name), base)
        if data.format == "beir" and data.negatives == "model" and data.negatives_model:
            found["data.negatives_model"] = _model_path(data.negatives_model)
    if config.eval_every and config.dev.data:
        found["dev.data"] = _dataset_path(config.dev.data)
    return found


def _examples_digest(examples) -> str:
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.qid, e.query, e.positives, e.negatives, e.teacher], sort_keys=True).encode())
    return digest.hexdigest()


def run_record(config: TrainConfig, examples=None) -> dict:
    """What a run computes from: its settings (less :data:`BOOKKEEPING`) and the size and SHA-256 of
    every file it reads (:func:`input_files`, :func:`spladekit.data.resolve.fingerprint_files`), or a
    digest of the ``examples`` a caller gives. Written to ``out/inputs.json`` when a run starts."""
    from spladekit.data.resolve import fingerprint_files

    settings = config.model_dump(mode="json")
    for name in BOOKKEEPING:
        *parents, last = name.split(".")
        node = settings
        for part in parents:
            node = node.get(part, {})
        node.pop(last, None)
    inputs: dict = {
        name: fingerprint_files(p) if isinstance(p, Path) else p
        for name, p in input_files(config, examples is not None).items()
    }
    if examples is not None:
        inputs["examples"] = _examples_digest(examples)
    return json.loads(json.dumps({"settings": settings, "inputs": inputs}))


def _flat(node, prefix: str = "") -> dict:
    if not isinstance(node, dict):
        return {prefix: node}
    return (
        {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
        if node
        else {prefix: {}}
    )


def _differences(stored: dict | None, record: dict) -> list[str]:
    """What differs between two run records, one phrase each (settings as ``field: old → new``)."""
    if not isinstance(stored, dict) or not {"settings", "inputs"} <= set(stored):
        return [f"no readable {RUN_RECORD} (a folder of another version, or of another command)"]
    old, new = _flat(stored["settings"]), _flat(record["settings"])
    found = [
        f"{k.rstrip('.')}: {old.get(k, '(unset)')!r} → {new.get(k, '(unset)')!r}"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ]
    for name in sorted(set(stored["inputs"]) | set(record["inputs"])):
        before, after = stored["inputs"].get(name), record["inputs"].get(name)
        if before == after:
            continue
        if isinstance(before, list) and isinstance(after, list):
            a, b = {f[0]: f[1:] for f in before}, {f[0]: f[1:] for f in after}
            files = [f for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
            found.append(
                f"{name}: its file{'s' if len(files) > 1 else ''} {', '.join(files[:3])}{' …' if len(files) > 3 else ''} changed"
            )
        else:
            found.append(
                f"{name}: another input ({before!r} → {after!r})"
                if name != "examples"
                else "the training examples changed"
            )
    return found


def check_run_folder(out: str | Path, config: TrainConfig, record: dict) -> dict | None:
    """Before a run writes into ``out``: what ``out`` holds of a run to resume or that is done.

    With ``config.resume`` and a checkpoint or a finished run (``result.json``) in ``out``, the run
    there must have been made from ``record`` (:func:`run_record`: the same settings, less
    bookkeeping, and the same input files); it is then resumed, or, when finished, its
    ``result.json`` is returned (nothing to do). Without ``resume``, or with nothing to resume, the
    run starts afresh (None).

    Raises:
        RunChangedError: ``out`` holds a run of other settings or inputs (naming what differs); nothing
            in ``out`` is changed.
    """
    out = Path(out)
    finished = (out / RESULT_FILE).is_file()
    if not config.resume or not (finished or latest_checkpoint(out) is not None):
        return None
    path = out / RUN_RECORD
    try:
        stored = read_json(path) if path.is_file() else None
    except DataFormatError:
        stored = None
    if stored != record:
        changes = _differences(stored, record)
        raise RunChangedError(
            f"{out}: holds a {'finished ' if finished else ''}training made from other settings or inputs ("
            + "; ".join(changes[:4])
            + (f"; {len(changes) - 4} more" if len(changes) > 4 else "")
            + "); it is left as "
            f"it is: give another output folder, or remove {out} to train there from the start (resume: false "
            "starts over in it)"
        )
    return read_json(out / RESULT_FILE) if finished else None


def finished_result(out: str | Path, stored: dict) -> dict:
    """The fields of :class:`spladekit.train.trainer.TrainResult` of the finished run in ``out`` (its ``result.json``)."""
    out = Path(out)
    return {
        "model_dir": out / "model",
        "metrics_path": out / "metrics.jsonl",
        "last_metrics": stored.get("last_metrics") or {},
        "steps": int(stored.get("steps", 0)),
        "alarms": list(stored.get("alarms") or []),
        "validation": stored.get("validation"),
        "best": stored.get("best"),
        "dev": stored.get("dev"),
        "curves": out / "training_curves.png" if (out / "training_curves.png").is_file() else None,
        "last_dir": out / "last" if (out / "last").is_dir() else None,
        "early_stopped": bool(stored.get("early_stopped")),
        "already_done": True,
    }
