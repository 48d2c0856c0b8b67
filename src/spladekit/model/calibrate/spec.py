"""The one rescaling specification: :class:`RescaleSpec` (typed, pydantic) and its one translation
into the keyword arguments of :func:`spladekit.model.calibrate.rescale_mlm_head`.

Used by training (``rescale:`` of a :class:`~spladekit.train.config.TrainConfig`), by the
reproduction grid (a treatment's ``rescale:``) and by ``spladekit rescale``
(:class:`~spladekit.model.calibrate.run.RescaleConfig`), so a factor, a norm match or a calibrated
target means the same thing everywhere (arXiv 2606.18811, §3, eq. 3: the decoder projection is
multiplied by a constant F before training).
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field, model_validator

from spladekit.settings import Settings


class RescaleSpec(Settings):
    """How to rescale the MLM head.

    ``mode=None`` leaves the head unchanged; ``factor`` alone means ``mode="factor"``.
    ``"factor"`` needs ``factor`` (> 0); ``"match_norm"`` needs ``reference`` (a model path/id or a
    mean decoder row norm); ``"target_logit"`` needs ``target`` (the value the logit ``statistic``
    should reach on sample text, e.g. ``p99``).

    Raises (at validation):
        ValueError: a mode without the value it needs.
    """

    mode: Literal["factor", "match_norm", "target_logit"] | None = None
    factor: float | None = Field(None, gt=0.0)
    reference: str | float | None = Field(None, description="match_norm: a model path/id or a mean row norm")
    target: float | None = Field(None, description="target_logit: the value the logit statistic should reach")
    statistic: str = "p99"
    scale_bias: bool = False
    force: bool = Field(False, description="rescale an already rescaled model (the factors compound)")

    @model_validator(mode="after")
    def _needs(self) -> "RescaleSpec":
        if self.factor is not None and self.mode is None:
            self.__dict__["mode"] = "factor"
        if self.mode is not None:
            need = {"factor": "factor", "match_norm": "reference", "target_logit": "target"}[self.mode]
            if getattr(self, need) is None:
                raise ValueError(f"rescale mode {self.mode!r} needs {need!r}")
        return self

    def kwargs(self, tokenizer=None, texts: Sequence[str] | None = None, calibration: dict | None = None,
               force: bool | None = None) -> dict:
        """The keyword arguments of :func:`rescale_mlm_head` for this spec.

        Args:
            tokenizer, texts, calibration: sample text for ``target_logit`` (ignored otherwise).
            force: overrides ``self.force`` when not None.

        Raises:
            ValueError: ``mode`` is None (nothing to apply).
        """
        if self.mode is None:
            raise ValueError("no rescaling mode: nothing to apply")
        args: dict = {"mode": self.mode, "scale_bias": self.scale_bias, "force": self.force if force is None else force}
        if self.mode == "factor":
            args["factor"] = self.factor
        elif self.mode == "match_norm":
            args["reference"] = self.reference
        else:
            args.update(target=self.target, statistic=self.statistic, tokenizer=tokenizer, texts=list(texts or []))
            if calibration:
                args["calibration"] = dict(calibration)
        return args

    def apply(self, mlm, tokenizer=None, texts: Sequence[str] | None = None, calibration: dict | None = None,
              force: bool | None = None) -> float | None:
        """Rescale ``mlm`` in place; the factor applied, or None when ``mode`` is None.

        Raises:
            ValueError, AlreadyRescaledError, CalibrationError, ResolutionError, HeadNotFoundError:
                from :func:`rescale_mlm_head`.
        """
        from spladekit.model.calibrate.rescale import rescale_mlm_head

        if self.mode is None:
            return None
        return float(rescale_mlm_head(mlm, **self.kwargs(tokenizer, texts, calibration, force)))
