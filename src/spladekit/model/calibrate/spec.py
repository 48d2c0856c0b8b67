"""The head set-up's typed specifications: :class:`RescaleSpec`, the one rescaling specification, and
its one translation into the keyword arguments of :func:`spladekit.model.calibrate.rescale_mlm_head`
(a factor, a shift, or both); :class:`HeadSpec`, the head's options (a per-position cap, a folded vocabulary).

Used by training (``rescale:`` of a :class:`~spladekit.train.config.TrainConfig`), by the
reproduction grid (a treatment's ``rescale:``) and by ``spladekit rescale``
(:class:`~spladekit.model.calibrate.outputs.RescaleConfig`), so a factor, a norm match or a calibrated
target means the same thing everywhere (arXiv 2606.18811, §3, eq. 3: the decoder projection is
multiplied by a constant F before training).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from spladekit.settings import Settings


class RescaleSpec(Settings):
    """How to rescale (and shift) the MLM head.

    ``mode=None`` leaves the factor at 1; ``factor`` alone means ``mode="factor"``.
    ``"factor"`` needs ``factor`` (> 0); ``"match_norm"`` needs ``reference`` (a model path/id or a
    mean decoder row norm); ``"target_logit"`` needs ``target`` (the value the logit ``statistic``
    should reach on sample text, e.g. ``p99``); ``"joint"`` chooses the factor and the shift together
    (:mod:`spladekit.model.calibrate.rescale`): ``F`` so that the logits' ``std`` reaches ``target``
    and ``s`` so that the activity reaches ``activity``, either number taken from ``reference`` (a
    model path/id) where not given.

    A shift of every logit goes with any mode, or alone: ``shift`` (a number), or ``activity`` (a
    target for ``activity_statistic`` on sample text: a number, or a model path/id whose activity on
    the same text is the target), :mod:`spladekit.model.calibrate.shift`.

    Raises (at validation):
        ValueError: a mode without the value it needs, ``shift`` with ``activity`` or ``"joint"``,
            ``"joint"`` with a ``statistic`` other than ``std``.
    """

    mode: Literal["factor", "match_norm", "target_logit", "joint"] | None = None
    factor: float | None = Field(None, gt=0.0)
    reference: str | float | None = Field(
        None,
        description="match_norm: a model path/id or a mean row norm; "
        "joint: a model path/id whose std and activity are the targets",
    )
    target: float | None = Field(
        None, description="target_logit: the value the logit statistic should reach; joint: the std"
    )
    statistic: str = "p99"
    scale_bias: bool = False
    force: bool = Field(False, description="rescale an already rescaled model (the factors compound)")
    shift: float | None = Field(None, description="subtract s from every logit (the decoder bias becomes b - s)")
    activity: float | str | None = Field(
        None,
        description="calibrate the shift so that activity_statistic reaches "
        "this number, or that of this model (path/id) on the same text",
    )
    activity_statistic: Literal["active_terms", "frac_positive"] = "active_terms"

    @model_validator(mode="after")
    def _needs(self) -> RescaleSpec:
        if self.factor is not None and self.mode is None:
            self.__dict__["mode"] = "factor"
        if self.mode in ("factor", "match_norm", "target_logit"):
            need = {"factor": "factor", "match_norm": "reference", "target_logit": "target"}[self.mode]
            if getattr(self, need) is None:
                raise ValueError(f"rescale mode {self.mode!r} needs {need!r}")
        if self.shift is not None and (self.activity is not None or self.mode == "joint"):
            raise ValueError("give a shift, or calibrate it (activity, or mode 'joint'), not both")
        if self.mode == "joint":
            if "statistic" in self.model_fields_set and self.statistic != "std":
                raise ValueError(
                    f"mode 'joint' calibrates the factor on the logits' std (a shift does not move it), "
                    f"not on {self.statistic!r}"
                )
            if (self.target is None or self.activity is None) and not isinstance(self.reference, str):
                raise ValueError("mode 'joint' needs a reference model, or both target (the std) and activity")
        return self

    @property
    def changes_head(self) -> bool:
        """Whether applying this spec changes the head (a mode, a shift or an activity target)."""
        return self.mode is not None or self.shift is not None or self.activity is not None

    @property
    def needs_text(self) -> bool:
        """Whether it calibrates on sample text (``target_logit``, ``joint``, an activity target)."""
        return self.mode in ("target_logit", "joint") or self.activity is not None

    def kwargs(
        self,
        tokenizer=None,
        texts: Sequence[str] | None = None,
        calibration: dict | None = None,
        force: bool | None = None,
    ) -> dict:
        """The keyword arguments of :func:`rescale_mlm_head` for this spec.

        Args:
            tokenizer: the model's tokenizer, for the calibrations' sample text (ignored otherwise).
            texts: the sample text of the calibrations (ignored otherwise).
            calibration: the calibrations' keyword arguments (``max_length``, ``max_tokens``,
                ``batch_size``, ``seed``; ignored otherwise).
            force: overrides ``self.force`` when not None.

        Raises:
            ValueError: nothing to apply (no mode, shift or activity).
        """
        if not self.changes_head:
            raise ValueError("no rescaling mode, shift or activity: nothing to apply")
        args: dict = {"mode": self.mode, "scale_bias": self.scale_bias, "force": self.force if force is None else force}
        if self.shift is not None:
            args["shift"] = self.shift
        if self.activity is not None or self.mode == "joint":
            args.update(activity=self.activity, activity_statistic=self.activity_statistic)
        if self.mode == "factor":
            args["factor"] = self.factor
        elif self.mode == "match_norm":
            args["reference"] = self.reference
        elif self.mode == "target_logit":
            args.update(target=self.target, statistic=self.statistic)
        elif self.mode == "joint":
            args.update(target=self.target, statistic="std", reference=self.reference)
        if self.needs_text:
            args.update(tokenizer=tokenizer, texts=list(texts or []))
            if calibration:
                args["calibration"] = dict(calibration)
        return args

    def apply(
        self,
        mlm,
        tokenizer=None,
        texts: Sequence[str] | None = None,
        calibration: dict | None = None,
        force: bool | None = None,
    ) -> float | None:
        """Rescale (and shift) ``mlm`` in place; the factor applied, or None when the spec changes nothing
        (the shift applied is in the record's last step, ``rescale_record(mlm)["history"][-1]["shift"]``).

        Raises:
            ValueError, AlreadyRescaledError, CalibrationError, ResolutionError, HeadNotFoundError:
                from :func:`rescale_mlm_head`.
        """
        from spladekit.model.calibrate.rescale import rescale_mlm_head

        if not self.changes_head:
            return None
        return float(rescale_mlm_head(mlm, **self.kwargs(tokenizer, texts, calibration, force)))


class HeadSpec(Settings):
    """The SPLADE head's options, beside its rescaling: a cap on each position's expansion and a
    folded vocabulary (:mod:`spladekit.model.pooling`, :mod:`spladekit.model.folding`). Used by
    training (``head:`` of a :class:`~spladekit.train.config.TrainConfig`), the reproduction grid (a
    treatment's ``head:``) and ``spladekit rescale``; the model folder written records them in
    ``spladekit.json`` (``position_top_k``, ``fold``), so encoding and every export follow.

    Attributes:
        position_top_k: pool only each token position's ``k`` largest vocabulary entries; 0: no cap;
            None: the start model's (no cap for a plain masked LM).
        fold_vocabulary: fold the entries of a byte-level BPE vocabulary that differ only by case or
            by the word-start marker into one term; None: the start model's (no fold for a plain masked LM).
    """

    position_top_k: int | None = Field(
        None, ge=0, description="pool each position's k largest logits only (0: no cap; None: the start model's)"
    )
    fold_vocabulary: bool | None = Field(
        None,
        description="fold case and word-start variants of a byte-level BPE "
        "vocabulary into one term (None: the start model's)",
    )

    @property
    def changes_head(self) -> bool:
        """Whether it sets anything (a field that is not None)."""
        return self.position_top_k is not None or self.fold_vocabulary is not None

    def resolve(self, meta, tokenizer, vocab_size: int, where: str = "") -> dict:
        """``{"position_top_k", "fold"}`` for :class:`~spladekit.model.splade.SpladeModel`: these
        options over the start model's metadata ``meta`` (an
        :class:`~spladekit.model.metadata.EncoderMetadata`).

        Raises:
            ValueError: ``fold_vocabulary`` for a tokenizer that is not byte-level BPE.
            DataFormatError: the start model's saved fold is malformed (naming ``where``'s ``spladekit.json``).
        """
        from spladekit.model.encoder import saved_fold
        from spladekit.model.folding import fold_vocabulary

        cap = meta.position_top_k if self.position_top_k is None else (self.position_top_k or None)
        if self.fold_vocabulary is None:
            fold = saved_fold(meta, where, vocab_size)
        else:
            fold = fold_vocabulary(tokenizer, vocab_size) if self.fold_vocabulary else None
        return {"position_top_k": cap, "fold": fold}
