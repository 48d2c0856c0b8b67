"""Typed configuration of a reproduction grid (pydantic, unknown keys are errors), read from YAML.

A grid is backbone × head treatment × seed (arXiv 2606.18811, the comparison of §4: no rescaling,
a constant factor, a calibrated factor). Each cell diagnoses the MLM head, rescales it (or not),
trains with :func:`spladekit.train.train`, then evaluates in-domain and out-of-domain sets with
:func:`spladekit.evaluate.retrieval.evaluate_splade`.

``train`` is a partial :class:`spladekit.train.TrainConfig` shared by all cells; the grid fills in
``model.path`` (the cell's initial model), ``seed`` and an empty ``rescale`` (rescaling is done by the
grid before training, so it is recorded once, in the cell's ``init/``).
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from spladekit.errors import DataFormatError, validation_problems
from spladekit.io import read_yaml
from spladekit.model.calibrate.spec import HeadSpec, RescaleSpec  # noqa: F401  (the one rescale specification)
from spladekit.overrides import apply_overrides
from spladekit.settings import Settings

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"name {value!r} must be letters, digits, '.', '_', '+' or '-' (it names a folder)")
    return value


class EmulationSpec(Settings):
    """Arguments of :func:`spladekit.model.calibrate.emulate.emulate_large_head`: how the backbone's
    MLM head is inflated to emulate a large-norm backbone (formulas in that module's docstring).

    Attributes:
        kind: ``"uniform"`` (decoder ``W ← c·W``: the control, undone exactly by ``F = 1/c``),
            ``"row_lognormal"`` (row ``j`` of ``W`` × ``c·exp(σ·z_j)``, ``z_j ~ N(0, 1)``) or
            ``"ln_gain"`` (the head transform's LayerNorm gain × ``c``; its bias and the decoder bias
            do not scale).
        factor: ``c`` (the median row factor for ``row_lognormal``).
        sigma: ``σ`` of ``row_lognormal``.
        seed: seed of ``row_lognormal``'s ``z`` (fixed per backbone, independent of the cell seeds).
    """

    kind: Literal["uniform", "row_lognormal", "ln_gain"]
    factor: float = Field(16.0, gt=0.0)
    sigma: float = Field(0.5, ge=0.0)
    seed: int = 0


class BackboneSpec(Settings):
    """One backbone of the grid.

    Attributes:
        name: label in tables and folder names.
        path: model folder or hub id (:func:`spladekit.data.resolve.resolve_model`).
        inflate: multiply the MLM-head decoder by this factor before anything else
            (``rescale_mlm_head(mode="factor")``), to emulate a backbone whose head has a large norm.
            The same damage as ``emulate: {kind: uniform}``, kept for grids run before emulations existed.
        emulate: inflate the head with :func:`~spladekit.model.calibrate.emulate.emulate_large_head`
            (see :class:`EmulationSpec`); not together with ``inflate``.
        treatments: names of the treatments run on this backbone (default: all of them).
    """

    name: str
    path: str
    inflate: float | None = Field(None, gt=0.0)
    emulate: EmulationSpec | None = None
    treatments: list[str] | None = None

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _one_inflation(self) -> BackboneSpec:
        if self.inflate is not None and self.emulate is not None:
            raise ValueError(f"backbone {self.name!r}: give inflate or emulate, not both")
        return self

    @property
    def nominal_scale(self) -> float:
        """The emulation's nominal factor ``c`` on the head (1.0 for an unchanged backbone)."""
        if self.emulate is not None:
            return self.emulate.factor
        return self.inflate if self.inflate is not None else 1.0

    def inflation_text(self) -> str:
        """How the head is inflated, in words ("" when it is not)."""
        if self.inflate is not None:
            return f"head inflated ×{self.inflate:g}"
        if self.emulate is None:
            return ""
        e = self.emulate
        return {
            "uniform": f"decoder ×{e.factor:g}",
            "row_lognormal": f"decoder rows ×{e.factor:g}·exp({e.sigma:g}·z), seed {e.seed}",
            "ln_gain": f"head LayerNorm gain ×{e.factor:g}",
        }[e.kind]


class TreatmentSpec(Settings):
    """A head treatment: ``rescale: null`` leaves the head as it is; otherwise a
    :class:`~spladekit.model.calibrate.spec.RescaleSpec` (a factor, a shift, or both; the grid turns
    ``force`` on for a backbone with ``inflate``, which is rescaled again on purpose; a ``force: true``
    given here is kept). ``head``: the head's options (:class:`~spladekit.model.calibrate.spec.HeadSpec`:
    ``position_top_k``, ``fold_vocabulary``), set on the cell's initial model, so training and
    evaluation follow them."""

    name: str
    rescale: RescaleSpec | None = None
    head: HeadSpec | None = None

    _name = field_validator("name")(_check_name)


def scale_label(value: float) -> str:
    """A folder-safe label of a scale: ``0.015625 → "1_64"``, ``4 → "4"``, ``0.3 → "0.3"``."""
    if 0 < value < 1 and abs(1 / value - round(1 / value)) < 1e-9:
        return f"1_{round(1 / value)}"
    return f"{value:g}"


class SweepSpec(Settings):
    """A factor sweep on one backbone: constant-factor treatments chosen so that the head's *net*
    scale at initialisation (emulation factor ``c`` × treatment factor ``F``, relative to the original
    head) takes each value of ``net_scales``, i.e. ``F = s / c``.

    A net scale that an existing treatment of the backbone already gives (``none``: ``s = c``; a
    ``factor`` treatment without bias scaling: ``s = c·F``) reuses that treatment's cells; the others
    become treatments named ``sweep-x<s>`` (``sweep-x1_64`` for 1/64) run on this backbone only.

    Attributes:
        backbone: name of the swept backbone.
        net_scales: the net scales (> 0).
        seeds: seeds of the generated cells (default: the grid's seeds).
    """

    backbone: str
    net_scales: list[float] = Field(min_length=2)
    seeds: list[int] | None = None

    @field_validator("net_scales")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        if any(not v > 0 for v in values):
            raise ValueError(f"net scales must be > 0, got {values}")
        if len(set(values)) != len(values):
            raise ValueError(f"duplicate net scales in {values}")
        return values


class DiagnosisSpec(Settings):
    """Sample text for :func:`diagnose_mlm_head` and for calibrated rescaling: the first
    ``num_texts`` documents of ``dataset``'s corpus (BEIR folder or name)."""

    dataset: str
    num_texts: int = Field(32, ge=1)
    max_length: int = Field(128, ge=4)
    max_tokens: int = Field(1024, ge=1)


class EvalDatasetSpec(Settings):
    """One evaluation set.

    Attributes:
        name: label in tables.
        path: BEIR folder or dataset name (:func:`spladekit.data.resolve.resolve_dataset`).
        split: qrels split (``qrels/<split>.tsv``).
        qrels: a TREC qrels file (``qid Q0 docid rel``) to use instead of ``qrels/<split>.tsv``.
        queries: an ``id<TAB>text`` topics file to use instead of ``queries.jsonl``.
        metric: the headline measure of this set (``nDCG@10``, ``MRR@10``...).
        measures: every measure computed (the metric is added when missing).
        max_docs: search a reduced corpus of this many documents (for CPU-sized runs): every
            document judged for a judged query is kept, then the first others in corpus order. The
            numbers are then *not* comparable with full-corpus results, only between arms.
        query_top_k, doc_top_k: keep only the k largest weights of each query / document vector
            (a matched-sparsity control: every arm evaluated at the same maximum active terms).
    """

    name: str
    path: str
    split: str = "test"
    qrels: str | None = None
    queries: str | None = None
    metric: str = "nDCG@10"
    measures: list[str] = Field(default_factory=lambda: ["nDCG@10", "MRR@10", "R@100"])
    max_docs: int | None = Field(None, ge=1)
    query_top_k: int | None = Field(None, ge=1)
    doc_top_k: int | None = Field(None, ge=1)

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _metric_measured(self) -> EvalDatasetSpec:
        if self.metric not in self.measures:
            self.measures = [self.metric, *self.measures]
        return self


class EvaluationSpec(Settings):
    """Evaluation of every trained model: encoding settings and the sets.

    ``query_max_length`` / ``doc_max_length`` / ``doc_top_k`` left as None use the trained model's
    saved values (``spladekit.json``).
    """

    in_domain: list[EvalDatasetSpec] = Field(default_factory=list)
    out_of_domain: list[EvalDatasetSpec] = Field(default_factory=list)
    batch_size: int = Field(32, ge=1)
    k: int = Field(1000, ge=1)
    query_max_length: int | None = Field(None, ge=4)
    doc_max_length: int | None = Field(None, ge=4)
    head_impl: Literal["plain", "fused"] | None = None
    backend: Literal["exact", "seismic"] = Field("exact", description="retrieval backend of the evaluation index")
    evaluate_init: bool = Field(False, description="also evaluate each cell's model before training")

    def datasets(self) -> list[tuple[str, EvalDatasetSpec]]:
        """``[(role, spec)]`` with role ``"in_domain"`` or ``"out_of_domain"``, in-domain first."""
        return [("in_domain", d) for d in self.in_domain] + [("out_of_domain", d) for d in self.out_of_domain]


class ReportSpec(Settings):
    """Options of the report (:mod:`spladekit.reproduce.report`).

    Attributes:
        matched_flops: the common FLOPS level of the matched-FLOPS comparison: a number, or an arm
            (``"backbone/treatment"``) whose mean FLOPS on the headline in-domain set is the level;
            default: the first arm of the grid.
        reference: an arm (``"backbone/treatment"``, e.g. the original head) that every other arm is
            also tested against; pairs of treatments of one backbone are always tested.
        permutations: random sign flips of the paired randomisation test.
    """

    matched_flops: float | str | None = None
    reference: str | None = None
    permutations: int = Field(10_000, ge=1)


class ReproduceConfig(Settings):
    """A whole reproduction grid; see the module docstring."""

    name: str
    description: str = ""
    output_dir: str = "outputs/reproduce"
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    backbones: list[BackboneSpec] = Field(min_length=1)
    treatments: list[TreatmentSpec] = Field(min_length=1)
    diagnosis: DiagnosisSpec
    train: dict[str, Any] = Field(default_factory=dict, description="partial spladekit.train.TrainConfig")
    evaluation: EvaluationSpec
    sweep: SweepSpec | None = None
    report: ReportSpec = Field(default_factory=ReportSpec)
    device: str | None = None

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _check(self) -> ReproduceConfig:
        for what, items in (
            ("backbone", self.backbones),
            ("treatment", self.treatments),
            ("dataset", [d for _, d in self.evaluation.datasets()]),
        ):
            names = [i.name for i in items]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {what} name(s): {', '.join(dupes)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"duplicate seeds in {self.seeds}")
        known = {t.name for t in self.treatments}
        for backbone in self.backbones:
            unknown = [t for t in backbone.treatments or [] if t not in known]
            if unknown:
                raise ValueError(f"backbone {backbone.name!r}: unknown treatment(s) {unknown}; known: {sorted(known)}")
        if not self.evaluation.datasets():
            raise ValueError("evaluation needs at least one in_domain or out_of_domain dataset")
        arms = {f"{b.name}/{t.name}" for b in self.backbones for t in self.treatments_of(b)}
        for key in ("matched_flops", "reference"):
            value = getattr(self.report, key)
            if isinstance(value, str) and value not in arms:
                raise ValueError(f"report.{key}: {value!r} is not an arm (backbone/treatment); known: {sorted(arms)}")
        if self.sweep is not None:
            by_name = {b.name: b for b in self.backbones}
            if self.sweep.backbone not in by_name:
                raise ValueError(f"sweep.backbone {self.sweep.backbone!r} is not a backbone; known: {sorted(by_name)}")
            clash = sorted(n for n in known if n.startswith("sweep-"))
            if clash:
                raise ValueError(f"treatment name(s) {clash}: names starting with 'sweep-' are reserved for the sweep")
        for key in ("seed", "rescale"):
            if key in self.train:
                raise ValueError(f"train.{key} is set by the grid (seeds / treatments); remove it from train")
        self.train_config(self.backbones[0].path, self.seeds[0])  # validates the train section
        return self

    def treatments_of(self, backbone: BackboneSpec) -> list[TreatmentSpec]:
        """The treatments run on ``backbone``, in config order, then the sweep's own (when swept)."""
        wanted = backbone.treatments
        own = [t for t in self.treatments if wanted is None or t.name in wanted]
        if self.sweep is None or self.sweep.backbone != backbone.name:
            return own
        names = {t.name for t in own}
        return own + [t for _, t in self.sweep_points() if t.name not in names]

    def seeds_of(self, treatment: TreatmentSpec) -> list[int]:
        """The seeds of a treatment: the sweep's for its generated treatments, else the grid's."""
        if self.sweep is not None and self.sweep.seeds is not None and treatment.name.startswith("sweep-"):
            return list(self.sweep.seeds)
        return list(self.seeds)

    def sweep_points(self) -> list[tuple[float, TreatmentSpec]]:
        """``[(net scale, treatment)]`` of the sweep in ``net_scales`` order (see :class:`SweepSpec`);
        empty without a sweep."""
        if self.sweep is None:
            return []
        backbone = next((b for b in self.backbones if b.name == self.sweep.backbone), None)
        if backbone is None:
            return []
        wanted = backbone.treatments
        existing = [t for t in self.treatments if wanted is None or t.name in wanted]
        points = []
        for scale in self.sweep.net_scales:
            factor = scale / backbone.nominal_scale
            same = next(
                (
                    t
                    for t in existing
                    if _factor_of(t) is not None and math.isclose(_factor_of(t), factor, rel_tol=1e-9)
                ),
                None,
            )
            points.append(
                (
                    scale,
                    same
                    or TreatmentSpec(
                        name=f"sweep-x{scale_label(scale)}", rescale=RescaleSpec(mode="factor", factor=factor)
                    ),
                )
            )
        return points

    def train_dict(self, model_path: str, seed: int) -> dict:
        """The cell's training config as a plain dict: ``train`` plus model path, seed, no rescale."""
        data = copy.deepcopy(self.train)
        data.setdefault("model", {})
        if not isinstance(data["model"], dict):
            raise ValueError("train.model must be a mapping")
        data["model"]["path"] = str(model_path)
        data["seed"] = seed
        if self.device is not None:
            data.setdefault("device", self.device)
        return data

    def train_config(self, model_path: str, seed: int):
        """The cell's :class:`spladekit.train.TrainConfig` (validated).

        Raises:
            ValueError: the ``train`` section is not a valid TrainConfig (names the field).
        """
        from spladekit.train.config import TrainConfig

        try:
            return TrainConfig.model_validate(self.train_dict(model_path, seed))
        except ValidationError as exc:
            field, message = validation_problems(exc)[0]
            raise ValueError(f"train.{field}: {message}") from None


def _factor_of(treatment: TreatmentSpec) -> float | None:
    """The constant factor a treatment applies to the decoder weight alone (1.0 for no rescaling);
    None when it is computed per model or scales the bias too."""
    spec = treatment.rescale
    if spec is None:
        return 1.0
    if spec.shift is not None or spec.activity is not None:  # a shift is not a factor on the decoder alone
        return None
    return spec.factor if spec.mode == "factor" and not spec.scale_bias else None


def load_reproduce_config(path: str | Path, overrides: list[str] | None = None) -> ReproduceConfig:
    """Read a reproduction YAML and apply ``--set`` overrides.

    Raises:
        DataFormatError: unreadable YAML, not a mapping, or a validation error, naming the file and field.
    """
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a mapping at the top level")
    try:
        apply_overrides(data, overrides or [])
    except ValueError as exc:
        raise DataFormatError(path, str(exc)) from exc
    try:
        return ReproduceConfig.model_validate(data)
    except ValidationError as exc:
        field, message = validation_problems(exc)[0]
        raise DataFormatError(path, f"{message} ({len(exc.errors())} error(s))", field=field or None) from exc
