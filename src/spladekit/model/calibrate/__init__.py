"""MLM-head calibration (arXiv 2606.18811): diagnose the head's scale, rescale its projection.

- :mod:`~spladekit.model.calibrate.stats`: decoder norms, token hidden states, logit statistics;
- :mod:`~spladekit.model.calibrate.diagnose`: :func:`diagnose_mlm_head` → :class:`Diagnosis`;
- :mod:`~spladekit.model.calibrate.rescale`: :func:`rescale_mlm_head`, :func:`calibrated_factor`,
  :func:`match_norm_factor`, :func:`untie_mlm_decoder`, :func:`rescale_record`;
- :mod:`~spladekit.model.calibrate.emulate`: :func:`emulate_large_head` (inflate a head to emulate a
  large-norm backbone, for experiments: uniform, per-row log-normal, LayerNorm gain).
- :mod:`~spladekit.model.calibrate.spec`: :class:`RescaleSpec`, the one typed rescaling specification.
"""

from spladekit.model.calibrate.diagnose import Diagnosis, HeadStats, LogitStats, SpladeStats, diagnose_mlm_head
from spladekit.model.calibrate.emulate import (
    EMULATIONS,
    AlreadyEmulatedError,
    emulate_large_head,
    emulation_record,
    row_factors,
)
from spladekit.model.calibrate.rescale import (
    MODES,
    AlreadyRescaledError,
    CalibrationError,
    calibrated_factor,
    match_norm_factor,
    reference_row_norm,
    rescale_mlm_head,
    rescale_record,
    untie_mlm_decoder,
)
from spladekit.model.calibrate.spec import RescaleSpec

__all__ = [
    "EMULATIONS",
    "AlreadyEmulatedError",
    "emulate_large_head",
    "emulation_record",
    "row_factors",
    "Diagnosis",
    "HeadStats",
    "LogitStats",
    "SpladeStats",
    "diagnose_mlm_head",
    "MODES",
    "RescaleSpec",
    "AlreadyRescaledError",
    "CalibrationError",
    "calibrated_factor",
    "match_norm_factor",
    "reference_row_norm",
    "rescale_mlm_head",
    "rescale_record",
    "untie_mlm_decoder",
]
