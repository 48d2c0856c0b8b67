"""The dry run: what a grid would do, with what can be found offline resolved and the rest marked.

Nothing is downloaded: models through the local search of ``resolve_model`` (folder, shared roots,
cache; not the hub, not the PyPI fallback), datasets through
``resolve_dataset(name, download=False)``, files through :func:`spladekit.reproduce.cells.resolve_file`.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.reproduce.config import ReproduceConfig
from spladekit.reproduce.grid import cell_status, check_extras, plan_grid

OFFLINE = "not available offline"


def _model(name: str) -> str:
    """A local model folder for ``name`` (folder, shared roots, cache), never the hub or PyPI."""
    from spladekit.data.resolve import model_candidates

    path = Path(name).expanduser()
    if path.is_dir():
        return str(path) if (path / "config.json").exists() else f"{OFFLINE} (no config.json in {path})"
    for candidate in model_candidates(name):
        if (candidate / "config.json").exists():
            return str(candidate)
    return OFFLINE


def _dataset(name: str) -> str:
    from spladekit.data.resolve import resolve_dataset
    from spladekit.errors import SpladekitError

    try:
        return str(resolve_dataset(name, download=False))
    except SpladekitError:
        return OFFLINE


def _file(name: str) -> str:
    from spladekit.errors import SpladekitError
    from spladekit.reproduce.cells import resolve_file

    try:
        return str(resolve_file(name))
    except SpladekitError:
        return OFFLINE


def _train_data(train: dict) -> list[tuple[str, str]]:
    """(what, resolved) pairs for the training data named in a partial TrainConfig."""
    data = train.get("data") or {}
    fmt, path = data.get("format", "beir"), data.get("path", "scifact")
    rows = [(f"train data ({fmt}) {path}", _dataset(path) if fmt == "beir" else _file(path))]
    for key in ("teacher_scores", "queries"):
        if data.get(key):
            rows.append((f"train data {key} {data[key]}", _file(data[key])))
    if data.get("negatives") == "model" and data.get("negatives_model"):
        rows.append((f"negatives model {data['negatives_model']}", _model(data["negatives_model"])))
    return rows


def resolve_offline(config: ReproduceConfig) -> list[tuple[str, str]]:
    """Every external input of the grid as ``(what, local path or "not available offline")``."""
    rows = []
    for backbone in config.backbones:
        rows.append((f"backbone {backbone.name}: {backbone.path}", _model(backbone.path)))
    for treatment in config.treatments:
        spec = treatment.rescale
        if spec is not None and spec.mode in ("match_norm", "joint") and isinstance(spec.reference, str):
            rows.append((f"reference of {treatment.name}: {spec.reference}", _model(spec.reference)))
        if spec is not None and isinstance(spec.activity, str):
            rows.append((f"activity reference of {treatment.name}: {spec.activity}", _model(spec.activity)))
    rows.append((f"diagnosis texts: {config.diagnosis.dataset}", _dataset(config.diagnosis.dataset)))
    rows += _train_data(config.train)
    for role, dataset in config.evaluation.datasets():
        rows.append((f"{role} {dataset.name}: corpus {dataset.path}", _dataset(dataset.path)))
        for key in ("qrels", "queries"):
            value = getattr(dataset, key)
            if value:
                rows.append((f"{role} {dataset.name}: {key} {value}", _file(value)))
    return rows


def _treatment_text(treatment) -> str:
    parts = [_rescale_text(treatment.rescale)]
    head = treatment.head
    if head is not None and head.position_top_k is not None:
        parts.append(
            f"each position's {head.position_top_k} largest logits pooled" if head.position_top_k else "no cap"
        )
    if head is not None and head.fold_vocabulary is not None:
        parts.append("vocabulary folded" if head.fold_vocabulary else "vocabulary not folded")
    return "; ".join(p for p in parts if p) or "head unchanged"


def _rescale_text(spec) -> str:
    if spec is None:
        return ""
    activity = spec.activity_statistic.replace("_", " ")
    text = ""
    if spec.mode == "factor":
        text = f"rescale ×{spec.factor:g}"
    elif spec.mode == "match_norm":
        text = f"rescale to match the mean decoder-row norm of {spec.reference}"
    elif spec.mode == "target_logit":
        text = f"rescale so that logit {spec.statistic} = {spec.target:g}"
    elif spec.mode == "joint":
        goal = (
            spec.reference if spec.target is None or spec.activity is None else f"{spec.target:g} and {spec.activity}"
        )
        text = f"rescale and shift so that the logit std and the {activity} match {goal}"
    if spec.shift is not None:
        text += f"{'; ' if text else ''}shift every logit by {spec.shift:g}"
    elif spec.activity is not None and spec.mode != "joint":
        text += f"{'; ' if text else ''}shift so that the {activity} match {spec.activity}"
    return text


def describe_plan(config: ReproduceConfig, out: str | Path) -> str:
    """The dry-run text: inputs (resolved offline), stages, and every cell with its status in ``out``."""
    cells = plan_grid(config)
    lines = [
        f"reproduce grid {config.name!r}: {len(cells)} cells = "
        f"{len(config.backbones)} backbone(s) × treatments × seeds {config.seeds}"
        + (f" (+ a factor sweep on {config.sweep.backbone})" if config.sweep else "")
        + f" → {out}"
    ]
    if config.description:
        lines.append(f"  {config.description.strip()}")
    lines.append("")
    lines.append("inputs (resolved offline, nothing downloaded):")
    resolved = resolve_offline(config)
    width = min(60, max(len(what) for what, _ in resolved))
    missing = 0
    for what, where in resolved:
        missing += where.startswith(OFFLINE)
        lines.append(f"  {what.ljust(width)}  {where}")
    lines.append("")
    lines += _stages_text(config)
    lines.append("")
    lines.append("treatments:")
    for treatment in config.treatments:
        lines.append(f"  {treatment.name}: {_treatment_text(treatment)}")
    if config.sweep is not None:
        lines.append("")
        lines.append(
            f"factor sweep on {config.sweep.backbone} (net head scale at initialisation = emulation × treatment factor):"
        )
        for scale, treatment in config.sweep_points():
            lines.append(f"  ×{scale:g}: {treatment.name} ({_treatment_text(treatment)})")
    lines.append("")
    lines.append("cells:")
    for cell in cells:
        inflation = cell.backbone.inflation_text()
        lines.append(f"  {cell.id}{f' ({inflation})' if inflation else ''}: {cell_status(config, cell, out)}")
    if missing:
        lines.append("")
        lines.append(
            f"{missing} input(s) not available offline: the grid needs them (hub or download) before it can run."
        )
    return "\n".join(lines)


def _stages_text(config: ReproduceConfig) -> list[str]:
    """The dry run's stages of each cell (diagnose, rescale, train, evaluate), and a missing extra if any."""
    train = config.train
    lines = []
    lines.append("stages of each cell:")
    lines.append(f"  1. diagnose the MLM head on {config.diagnosis.num_texts} texts of {config.diagnosis.dataset}")
    lines.append("  2. rescale the head (per treatment, below)")
    steps, batch = train.get("steps", "default"), train.get("batch_size", "default")
    loss = (train.get("loss") or {}).get("kind", "default")
    lines.append(f"  3. train: {steps} steps × batch {batch}, loss {loss}")
    sets = ", ".join(
        f"{d.name} ({d.metric}, {role.replace('_', '-')}"
        + (f", corpus reduced to {d.max_docs} docs" if d.max_docs else "")
        + (f", top-{d.query_top_k}/{d.doc_top_k} terms per query/doc" if d.query_top_k or d.doc_top_k else "")
        + ")"
        for role, d in config.evaluation.datasets()
    )
    lines.append(f"  4. evaluate ({config.evaluation.backend}): {sets}")
    from spladekit.errors import MissingExtraError

    try:
        check_extras(config)
    except MissingExtraError as exc:
        lines.append(f"     {exc}: the grid refuses to start without it")
    return lines
