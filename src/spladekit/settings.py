"""The one base of typed settings records (training, reproduction grid, MLM-head rescaling).

Every record saved next to an output (``config.yaml``, ``grid.yaml``) is a pydantic model derived
from :class:`Settings`, which adds three rules to pydantic's lax parsing of YAML values:

- unknown keys are refused (``extra="forbid"``): a misspelt key would otherwise fall back to its
  default in silence;
- non-finite numbers (``.inf``, ``.nan``) are refused (``allow_inf_nan=False``): a learning rate of
  ``.inf`` passed ``gt=0`` and stopped the run at its second step with a non-finite loss;
- a boolean where a number is expected is refused: pydantic's lax mode reads ``steps: true`` as 1.

Assignments are validated too (``validate_assignment=True``), so ``--set`` overrides and code that
edits a record after loading obey the same constraints.
"""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _accepted_types(annotation) -> set:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(_accepted_types(arg) for arg in typing.get_args(annotation)))
    if typing.get_origin(annotation) is typing.Annotated:
        return _accepted_types(typing.get_args(annotation)[0])
    return {annotation}


class Settings(BaseModel):
    """Base of settings records (see the module rules)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value, info: ValidationInfo):
        if isinstance(value, bool) and info.field_name in cls.model_fields:
            accepted = _accepted_types(cls.model_fields[info.field_name].annotation)
            if bool not in accepted and accepted & {int, float}:
                raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
        return value
