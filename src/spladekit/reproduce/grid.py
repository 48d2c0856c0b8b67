"""The grid: plan the cells, run their stages, resume a half-finished grid.

Output folder layout (``OUT``)::

    OUT/config.yaml                       the grid config as run (every field)
    OUT/sittings.jsonl                    one line per invocation that ran cells (command, start, wall seconds)
    OUT/backbones/<backbone>/done.json    an inflated backbone, built once (model in .../model/)
    OUT/cells/<cell id>/cell.json         what defines the cell (backbone, treatment, seed, train config)
                        init/done.json    diagnosis before/after, rescaling factor (model in init/model/)
                        train/...         spladekit.train output; train/done.json when finished
                        eval/<set>/done.json     metrics of one evaluation set (+ run.trec, per_query.json)
                        result.json       the cell's summary, written last: the done-marker

Every marker is written atomically (:func:`spladekit.io.write_json`) and carries the fingerprint of
what produced it (a SHA-256 of the stage's inputs: its settings and every local file it reads, by
size and SHA-256); a stage writes ``started.json`` with the same
fingerprint before it begins, so a half-done stage (e.g. training with checkpoints) is resumed only
with the same inputs. On a rerun a stage whose marker exists with the
same fingerprint is skipped; a marker with another fingerprint means the config changed: the
training stages refuse to continue (:class:`StaleCellError`) unless ``force``; an evaluation with a
changed fingerprint is simply redone. A cell whose training diverged or collapsed
(:class:`~spladekit.train.monitor.TrainingDivergedError`, ``CollapseError``) is a result too: it is
recorded with ``status: "diverged"`` and not retried; any other error leaves the cell unfinished
(retried on the next run) and is reported at the end.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spladekit.errors import SpladekitError
from spladekit.io import atomic_write, write_json, write_yaml
from spladekit.reproduce.config import BackboneSpec, EvalDatasetSpec, ReproduceConfig, TreatmentSpec

DONE = "done.json"
STARTED = "started.json"
RESULT = "result.json"


class StaleCellError(SpladekitError, RuntimeError):
    """A finished stage in the output folder was produced by a different configuration."""


def fingerprint(obj: Any) -> str:
    """First 16 hex digits of the SHA-256 of ``obj`` as canonical JSON (sorted keys)."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    """One point of the grid: a backbone, a head treatment, a seed."""

    backbone: BackboneSpec
    treatment: TreatmentSpec
    seed: int

    @property
    def id(self) -> str:
        """Folder name and table key: ``<backbone>--<treatment>--s<seed>``."""
        return f"{self.backbone.name}--{self.treatment.name}--s{self.seed}"

    @property
    def arm(self) -> str:
        """The arm (cell without the seed): ``<backbone>/<treatment>``."""
        return f"{self.backbone.name}/{self.treatment.name}"


def plan_grid(config: ReproduceConfig) -> list[Cell]:
    """Every cell, in order backbone → treatment → seed (config order)."""
    return [Cell(b, t, s) for b in config.backbones for t in config.treatments_of(b) for s in config.seeds_of(t)]


# ------------------------------------------------------------------------------ stage fingerprints
def local_files(value: str | None, kind: str) -> tuple | None:
    """The files a stage reads for ``value`` (a ``kind`` ``"model"`` or ``"dataset"`` resolved as the
    stage resolves it, or a ``"file"``), each with its size and SHA-256
    (:func:`spladekit.data.resolve.fingerprint_files`); None when ``value`` names nothing on this
    machine (a hub id not fetched yet, an ``irds:`` id: named by the spec itself). The digests are
    computed again only when a file's size or modification time changed since the last call."""
    from spladekit.data.resolve import resolve_dataset, resolve_model
    from spladekit.errors import ResolutionError

    if not value or str(value).startswith("irds:"):
        return None
    try:
        found = {
            "model": lambda: resolve_model(value, allow_hub=False),
            "dataset": lambda: resolve_dataset(value, download=False),
            "file": lambda: value,
        }[kind]()
    except ResolutionError:
        return None
    path = Path(found)
    if not path.exists():
        return None
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return _digests(str(path), tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=256)
def _digests(path: str, stats: tuple) -> tuple:
    """:func:`local_files`'s digests of ``path``, cached by the files' sizes and modification times."""
    from spladekit.data.resolve import fingerprint_files

    return tuple(tuple(f) for f in fingerprint_files(path))


def _with_files(spec: dict, key: str, files: dict) -> dict:
    """``spec`` plus ``key: files`` (those found locally only: a spec of inputs named elsewhere is unchanged)."""
    found = {name: list(map(list, f)) for name, f in files.items() if f is not None}
    return {**spec, key: found} if found else spec


def backbone_spec(backbone: BackboneSpec) -> dict:
    """Inputs of the backbone stage (``emulate`` only when set, so grids run before it existed stay valid),
    with the files of a local backbone (:func:`local_files`)."""
    spec = {"path": backbone.path, "inflate": backbone.inflate}
    if backbone.emulate is not None:
        spec["emulate"] = backbone.emulate.model_dump()
    return _with_files(spec, "files", {"path": local_files(backbone.path, "model")})


def init_spec(config: ReproduceConfig, cell: Cell) -> dict:
    """Inputs of the init stage (diagnose, rescale), with the files of the diagnosis texts' dataset."""
    rescale = cell.treatment.rescale
    if rescale is not None:  # the shift's fields only off their defaults, so grids run before they existed stay valid
        new = {
            k
            for k in ("shift", "activity", "activity_statistic")
            if getattr(rescale, k) == type(rescale).model_fields[k].default
        }
        rescale = rescale.model_dump(exclude={"force"} | new)
    spec = {"backbone": backbone_spec(cell.backbone), "rescale": rescale, "diagnosis": config.diagnosis.model_dump()}
    if cell.treatment.head is not None:  # only when set, so grids run before head options existed stay valid
        spec["head"] = cell.treatment.head.model_dump()
    return _with_files(spec, "files", {"diagnosis.dataset": local_files(config.diagnosis.dataset, "dataset")})


def train_spec(config: ReproduceConfig, cell: Cell) -> dict:
    """Inputs of the training stage (the init stage's plus the training config and seed), with the
    files of its training and dev data (those :func:`spladekit.train.checkpoints.input_files` reads)."""
    train = config.train_dict("<init>", cell.seed)
    data, dev = train.get("data") or {}, train.get("dev") or {}
    files = {
        "data.path": local_files(data.get("path"), "dataset" if data.get("format", "beir") == "beir" else "file"),
        "dev.data": local_files(dev.get("data"), "dataset"),
    }
    files.update({f"data.{k}": local_files(data.get(k), "file") for k in ("teacher_scores", "queries", "corpus")})
    return _with_files({"init": init_spec(config, cell), "train": train}, "files", files)


#: Evaluation-set fields added after grids were already run: left out of the fingerprint when unset,
#: so that finished evaluations stay valid.
LATE_EVAL_FIELDS = ("query_top_k", "doc_top_k")


def eval_spec(config: ReproduceConfig, cell: Cell, dataset: EvalDatasetSpec, stage: str = "trained") -> dict:
    """Inputs of one evaluation (the model's stage plus the set and the encoding settings)."""
    ev = config.evaluation
    model = train_spec(config, cell) if stage == "trained" else init_spec(config, cell)
    unset = {key for key in LATE_EVAL_FIELDS if getattr(dataset, key) is None}
    encoding = {"k": ev.k, "query_max_length": ev.query_max_length, "doc_max_length": ev.doc_max_length}
    if ev.backend != "exact":  # added after grids were run: exact evaluations keep their fingerprints
        encoding["backend"] = ev.backend
    spec = {"model": model, "stage": stage, "dataset": dataset.model_dump(exclude=unset), "encoding": encoding}
    return _with_files(
        spec,
        "files",
        {
            "path": local_files(dataset.path, "dataset"),
            "qrels": local_files(dataset.qrels, "file"),
            "queries": local_files(dataset.queries, "file"),
        },
    )


# ------------------------------------------------------------------------------ the runner
class CellRunner(Protocol):
    """What the grid calls to do the work of a cell; :class:`spladekit.reproduce.cells.SpladekitRunner`
    is the real one (tests inject doubles to check the grid's own bookkeeping)."""

    def prepare_backbone(self, backbone: BackboneSpec, config: ReproduceConfig, folder: Path) -> dict:
        """Make the backbone's starting model (inflated when asked); return at least ``{"model": path}``."""

    def init_cell(self, cell: Cell, base_model: str, config: ReproduceConfig, folder: Path) -> dict:
        """Diagnose and rescale; return at least ``{"model": path}`` (plus diagnosis, factor)."""

    def train_cell(self, cell: Cell, init_model: str, config: ReproduceConfig, folder: Path) -> dict:
        """Train from ``init_model`` into ``folder``; return ``{"model": path, "summary": {...}}``."""

    def evaluate(self, model: str, dataset: EvalDatasetSpec, config: ReproduceConfig, folder: Path) -> dict:
        """Evaluate ``model`` on ``dataset``, write run/metrics into ``folder``; return the metrics."""


def is_divergence(exc: BaseException) -> bool:
    """True for training failures that are results (divergence, collapse), not bugs."""
    from spladekit.train.monitor import CollapseError, TrainingDivergedError  # here: only failures pay the import

    return isinstance(exc, (TrainingDivergedError, CollapseError))


def _read_marker(path: Path) -> dict | None:
    if not path.exists():
        return None
    from spladekit.errors import DataFormatError
    from spladekit.io import read_json

    try:
        return read_json(path)
    except DataFormatError:
        return None  # an unreadable marker is treated as absent (written atomically, so rare)


@dataclass
class GridOutcome:
    """What :func:`run_grid` did: cell ids by outcome, and the error text of failed cells."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


class _Stage:
    """Run-or-skip bookkeeping of one stage folder."""

    def __init__(self, folder: Path, spec: dict, name: str, cell: str, force: bool, strict: bool = True):
        self.folder, self.spec, self.name, self.cell = folder, spec, name, cell
        self.print = fingerprint(spec)
        marker = _read_marker(folder / DONE) or _read_marker(folder / STARTED)
        self.result = None
        if marker is not None and "result" not in marker and marker.get("fingerprint") == self.print:
            return  # started earlier with the same inputs: the runner resumes it (e.g. from a checkpoint)
        if marker is not None:
            if marker.get("fingerprint") == self.print:
                self.result = marker.get("result")
            elif strict and not force:
                raise StaleCellError(
                    f"{folder / DONE}: the {name} stage of cell {cell} was produced by a different configuration; "
                    "use another output folder, or rerun with --force to redo it"
                )
            else:
                shutil.rmtree(folder)

    def begin(self) -> None:
        """Mark the stage as started with these inputs (so a half-done stage is never resumed with others)."""
        write_json(self.folder / STARTED, {"fingerprint": self.print, "spec": self.spec})

    def finish(self, result: dict) -> dict:
        write_json(
            self.folder / DONE,
            {
                "fingerprint": self.print,
                "spec": self.spec,
                "result": result,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
            },
        )
        self.result = result
        return result


def write_config(config: ReproduceConfig, out: Path) -> None:
    """Save the grid config as run (``OUT/config.yaml``)."""
    write_yaml(out / "config.yaml", config.model_dump(mode="json"))


def run_cell(
    cell: Cell,
    config: ReproduceConfig,
    out: Path,
    runner: CellRunner,
    base_model: str,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Run (or resume) one cell's stages; write and return its ``result.json`` summary.

    Raises:
        StaleCellError: a finished stage came from another configuration and ``force`` is False.
        Whatever the runner raises, except divergence/collapse during training (recorded as a result).
    """
    folder = out / "cells" / cell.id
    folder.mkdir(parents=True, exist_ok=True)
    spec = train_spec(config, cell)
    summary = _read_marker(folder / RESULT)
    evals = config.evaluation.datasets()
    if summary is not None and summary.get("fingerprint") != fingerprint(spec) and not force:
        raise StaleCellError(
            f"{folder / RESULT}: cell {cell.id} was produced by a different configuration; "
            "use another output folder, or rerun with --force to redo it"
        )
    write_json(
        folder / "cell.json",
        {
            "id": cell.id,
            "arm": cell.arm,
            "backbone": cell.backbone.model_dump(),
            "treatment": cell.treatment.model_dump(),
            "seed": cell.seed,
            "spec": spec,
        },
    )

    init = _Stage(folder / "init", init_spec(config, cell), "init", cell.id, force)
    if init.result is None:
        log(f"[{cell.id}] diagnose{' and rescale' if cell.treatment.rescale else ''}")
        init.begin()
        init.finish(runner.init_cell(cell, base_model, config, folder / "init"))
    result: dict[str, Any] = {
        "id": cell.id,
        "arm": cell.arm,
        "backbone": cell.backbone.name,
        "treatment": cell.treatment.name,
        "seed": cell.seed,
        "fingerprint": fingerprint(spec),
        "init": init.result,
    }

    if config.evaluation.evaluate_init:
        result["eval_init"] = _evaluate_all(
            cell, config, folder / "eval_init", init.result["model"], runner, "init", log
        )

    trained = _train_stage(cell, config, folder, runner, spec, init.result["model"], force, log)
    result["train"] = trained.result
    if trained.result.get("status") == "diverged":
        result["status"] = "diverged"
        result["eval"] = {}
    else:
        result["status"] = "done"
        result["eval"] = _evaluate_all(cell, config, folder / "eval", trained.result["model"], runner, "trained", log)
    result["datasets"] = {d.name: role for role, d in evals}
    write_json(folder / RESULT, result)
    return result


def _train_stage(
    cell: Cell,
    config: ReproduceConfig,
    folder: Path,
    runner: CellRunner,
    spec: dict,
    model: str,
    force: bool,
    log: Callable[[str], None],
) -> _Stage:
    """The cell's training stage from the initial ``model``, run unless finished; a divergence or collapse is
    recorded as its result (``status``: ``diverged``), any other error raised."""
    trained = _Stage(folder / "train", spec, "train", cell.id, force)
    if trained.result is None:
        log(f"[{cell.id}] train")
        trained.begin()
        try:
            trained.finish({"status": "ok", **runner.train_cell(cell, model, config, folder / "train")})
        except Exception as exc:
            if not is_divergence(exc):
                raise
            log(f"[{cell.id}] training stopped: {type(exc).__name__}: {exc}")
            trained.finish({"status": "diverged", "error": f"{type(exc).__name__}: {exc}"})
    return trained


def _evaluate_all(
    cell: Cell,
    config: ReproduceConfig,
    folder: Path,
    model: str,
    runner: CellRunner,
    stage: str,
    log: Callable[[str], None],
) -> dict:
    metrics = {}
    for role, dataset in config.evaluation.datasets():
        ev = _Stage(
            folder / dataset.name, eval_spec(config, cell, dataset, stage), "eval", cell.id, False, strict=False
        )
        if ev.result is None:
            log(f"[{cell.id}] evaluate {'initial model ' if stage == 'init' else ''}on {dataset.name} ({role})")
            ev.begin()
            ev.finish(runner.evaluate(model, dataset, config, folder / dataset.name))
        metrics[dataset.name] = ev.result
    return metrics


def prepare_backbones(
    config: ReproduceConfig,
    out: Path,
    runner: CellRunner,
    backbones: list[BackboneSpec],
    force: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, str]:
    """Build (or find) each backbone's starting model; ``{backbone name: model path or id}``."""
    models = {}
    for backbone in backbones:
        stage = _Stage(out / "backbones" / backbone.name, backbone_spec(backbone), "backbone", backbone.name, force)
        if stage.result is None:
            inflation = backbone.inflation_text()
            log(f"[{backbone.name}] prepare backbone" + (f" ({inflation})" if inflation else ""))
            stage.begin()
            stage.finish(runner.prepare_backbone(backbone, config, stage.folder))
        models[backbone.name] = stage.result["model"]
    return models


def check_extras(config: ReproduceConfig) -> None:
    """Refuse a grid whose stages need an extra that is not installed: ``evaluation.backend: seismic``
    (pyseismic-lsr), ``train.data.format: hf`` (datasets), an ``irds:`` evaluation set, diagnosis set or
    training data (ir_datasets).

    Raises:
        MissingExtraError: the first one missing, with its install line.
    """
    from spladekit.data.irds import check_irds
    from spladekit.errors import check_extra

    if config.evaluation.backend == "seismic":
        from spladekit.index.seismic import import_seismic

        import_seismic()
    data = config.train.get("data") if isinstance(config.train.get("data"), dict) else {}
    if data.get("format") == "hf":
        check_extra("datasets", "the grid's training data (train.data.format: hf)")
    check_irds(config.diagnosis.dataset, data.get("path"), *(spec.path for _, spec in config.evaluation.datasets()))


def run_grid(
    config: ReproduceConfig,
    out: str | Path,
    runner: CellRunner | None = None,
    *,
    cells: list[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> GridOutcome:
    """Run every unfinished cell of the grid into ``out`` (resuming finished stages), then nothing else;
    see :func:`spladekit.reproduce.report.write_report` for the tables and plots.

    Args:
        config: the grid.
        out: output folder.
        runner: does the work (default: :class:`~spladekit.reproduce.cells.SpladekitRunner`).
        cells: run only these cell ids (default: all).
        force: redo stages whose marker came from another configuration instead of refusing.

    Raises:
        StaleCellError: see the module docstring (before anything is run for that cell).
        ValueError: ``cells`` names an unknown cell.
        MissingExtraError: an extra the grid needs is not installed (:func:`check_extras`; before any cell
            is run).
    """
    out = Path(out).resolve()  # paths recorded in the markers are absolute: resuming works from any folder
    if runner is None:
        from spladekit.reproduce.cells import SpladekitRunner

        runner = SpladekitRunner()
    plan = plan_grid(config)
    if cells is not None:
        unknown = sorted(set(cells) - {c.id for c in plan})
        if unknown:
            raise ValueError(f"unknown cell id(s) {unknown}; known: {[c.id for c in plan]}")
        plan = [c for c in plan if c.id in cells]
    out.mkdir(parents=True, exist_ok=True)
    write_config(config, out)
    outcome = GridOutcome()
    pending = []
    for cell in plan:
        summary = _read_marker(out / "cells" / cell.id / RESULT)
        if (
            summary is not None
            and summary.get("fingerprint") == fingerprint(train_spec(config, cell))
            and _evals_current(config, cell, out)
        ):
            outcome.skipped.append(cell.id)
            log(f"[{cell.id}] finished earlier: skipped")
        else:
            pending.append(cell)
    if not pending:
        return outcome
    check_extras(config)  # before hours of training, not at every cell's evaluation
    base = prepare_backbones(
        config, out, runner, list({c.backbone.name: c.backbone for c in pending}.values()), force, log
    )
    for cell in pending:
        try:
            result = run_cell(cell, config, out, runner, base[cell.backbone.name], force, log)
        except StaleCellError:
            raise
        except Exception as exc:  # record and go on with the other cells
            outcome.failed[cell.id] = f"{type(exc).__name__}: {exc}"
            write_json(
                out / "cells" / cell.id / "error.json",
                {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
            )
            log(f"[{cell.id}] FAILED: {type(exc).__name__}: {exc}")
            continue
        (outcome.diverged if result["status"] == "diverged" else outcome.done).append(cell.id)
    return outcome


SITTINGS = "sittings.jsonl"


def record_sitting(out: str | Path, record: dict) -> None:
    """Append one invocation's record (command, start, wall seconds, cell outcome) to ``OUT/sittings.jsonl``
    (rewritten whole, atomically: an interrupted write leaves the previous file)."""
    path = Path(out) / SITTINGS
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    with atomic_write(path) as handle:
        handle.write(old + json.dumps(record, sort_keys=True) + "\n")


def read_sittings(out: str | Path) -> list[dict]:
    """The records of ``OUT/sittings.jsonl``, oldest first (empty when none).

    Raises:
        DataFormatError: a line is not JSON (names the file and line).
    """
    from spladekit.io import read_jsonl

    path = Path(out) / SITTINGS
    if not path.exists():
        return []
    return [record for _, record in read_jsonl(path)]  # DataFormatError names file and line


def _evals_current(config: ReproduceConfig, cell: Cell, out: Path) -> bool:
    """Every evaluation of a finished cell exists with the current fingerprint."""
    folder = out / "cells" / cell.id
    trained = _read_marker(folder / "train" / DONE)
    if trained is None or (trained.get("result") or {}).get("status") == "diverged":
        return trained is not None
    stages = [("eval", "trained")] + ([("eval_init", "init")] if config.evaluation.evaluate_init else [])
    for sub, stage in stages:
        for _, dataset in config.evaluation.datasets():
            marker = _read_marker(folder / sub / dataset.name / DONE)
            if marker is None or marker.get("fingerprint") != fingerprint(eval_spec(config, cell, dataset, stage)):
                return False
    return True


def cell_status(config: ReproduceConfig, cell: Cell, out: str | Path) -> str:
    """``"done"``, ``"diverged"``, ``"stale"`` (produced by another config or other input files),
    ``"partial: <stages>"`` or ``"pending"``."""
    folder = Path(out) / "cells" / cell.id
    summary = _read_marker(folder / RESULT)
    if summary is not None:
        if summary.get("fingerprint") != fingerprint(train_spec(config, cell)):
            return "stale"
        if _evals_current(config, cell, Path(out)):
            return summary.get("status", "done")
    stages = [name for name in ("init", "train") if (folder / name / DONE).exists()]
    stages += [f"eval/{d.name}" for _, d in config.evaluation.datasets() if (folder / "eval" / d.name / DONE).exists()]
    return f"partial: {', '.join(stages)} done" if stages else "pending"
