"""Typed configuration of a reproduction grid (pydantic, unknown keys are errors), read from YAML.

A grid is backbone × head treatment × seed (arXiv 2606.18811, the comparison of §4: no rescaling,
a constant factor, a calibrated factor). Each cell diagnoses the MLM head, rescales it (or not),
trains with :func:`spladekit.train.train`, then evaluates in-domain and out-of-domain sets with
:func:`spladekit.pipeline.evaluate_splade`.

``train`` is a partial :class:`spladekit.train.TrainConfig` shared by all cells; the grid fills in
``model.path`` (the cell's initial model), ``seed`` and an empty ``rescale`` (rescaling is done by the
grid before training, so it is recorded once, in the cell's ``init/``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spladekit.errors import DataFormatError
from spladekit.model.calibrate.spec import RescaleSpec  # noqa: F401  (the one rescale specification)
from spladekit.overrides import apply_overrides

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"name {value!r} must be letters, digits, '.', '_', '+' or '-' (it names a folder)")
    return value


class BackboneSpec(_Strict):
    """One backbone of the grid.

    Attributes:
        name: label in tables and folder names.
        path: model folder or hub id (:func:`spladekit.data.resolve.resolve_model`).
        inflate: multiply the MLM-head decoder by this factor before anything else
            (``rescale_mlm_head(mode="factor")``), to emulate a backbone whose head has a large norm.
        treatments: names of the treatments run on this backbone (default: all of them).
    """

    name: str
    path: str
    inflate: float | None = Field(None, gt=0.0)
    treatments: list[str] | None = None

    _name = field_validator("name")(_check_name)


class TreatmentSpec(_Strict):
    """A head treatment: ``rescale: null`` leaves the head as it is; otherwise a
    :class:`~spladekit.model.calibrate.spec.RescaleSpec` (``force`` is set by the grid: a backbone
    with ``inflate`` is rescaled again on purpose)."""

    name: str
    rescale: RescaleSpec | None = None

    _name = field_validator("name")(_check_name)


class DiagnosisSpec(_Strict):
    """Sample text for :func:`diagnose_mlm_head` and for calibrated rescaling: the first
    ``num_texts`` documents of ``dataset``'s corpus (BEIR folder or name)."""

    dataset: str
    num_texts: int = Field(32, ge=1)
    max_length: int = Field(128, ge=4)
    max_tokens: int = Field(1024, ge=1)


class EvalDatasetSpec(_Strict):
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
    def _metric_measured(self) -> "EvalDatasetSpec":
        if self.metric not in self.measures:
            self.measures = [self.metric, *self.measures]
        return self


class EvaluationSpec(_Strict):
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
    evaluate_init: bool = Field(False, description="also evaluate each cell's model before training")

    def datasets(self) -> list[tuple[str, EvalDatasetSpec]]:
        """``[(role, spec)]`` with role ``"in_domain"`` or ``"out_of_domain"``, in-domain first."""
        return [("in_domain", d) for d in self.in_domain] + [("out_of_domain", d) for d in self.out_of_domain]


class ReproduceConfig(_Strict):
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
    device: str | None = None

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _check(self) -> "ReproduceConfig":
        for what, items in (("backbone", self.backbones), ("treatment", self.treatments),
                            ("dataset", [d for _, d in self.evaluation.datasets()])):
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
        for key in ("seed", "rescale"):
            if key in self.train:
                raise ValueError(f"train.{key} is set by the grid (seeds / treatments); remove it from train")
        self.train_config(self.backbones[0].path, self.seeds[0])  # validates the train section
        return self

    def treatments_of(self, backbone: BackboneSpec) -> list[TreatmentSpec]:
        """The treatments run on ``backbone``, in config order."""
        wanted = backbone.treatments
        return [t for t in self.treatments if wanted is None or t.name in wanted]

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
            first = exc.errors()[0]
            raise ValueError("train." + ".".join(str(p) for p in first["loc"]) + ": " + first["msg"]) from None


def load_reproduce_config(path: str | Path, overrides: list[str] | None = None) -> ReproduceConfig:
    """Read a reproduction YAML and apply ``--set`` overrides.

    Raises:
        DataFormatError: unreadable YAML, not a mapping, or a validation error, naming the file and field.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise DataFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise DataFormatError(path, f"not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a mapping at the top level")
    try:
        apply_overrides(data, overrides or [])
    except ValueError as exc:
        raise DataFormatError(path, str(exc)) from exc
    try:
        return ReproduceConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise DataFormatError(path, f"{message} ({len(exc.errors())} error(s))", field=field) from exc
