"""Folder-to-folder runs of diagnosis and rescaling, with typed configs saved next to the outputs.

The CLI (``spladekit diagnose`` / ``spladekit rescale``) is a thin layer over :func:`run_diagnose`
and :func:`run_rescale`. The configs are settings records (:class:`spladekit.settings.Settings`):
unknown keys, non-finite numbers and booleans for numbers are refused when one is made.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import model_validator

from spladekit.model.calibrate.diagnose import Diagnosis, diagnose_mlm_head
from spladekit.model.calibrate.rescale import rescale_record
from spladekit.model.calibrate.spec import HeadSpec, RescaleSpec
from spladekit.settings import Settings


class TextSource(Settings):
    """Where sample text comes from: a file with one text per line, or a BEIR folder (sampled).

    Attributes:
        texts: path of a text file (one text per line), or None.
        data: BEIR folder or dataset name, or None; ``n_queries`` queries and ``n_docs`` documents
            are sampled with ``seed`` (default 64 each). Without ``data`` the sample sizes mean
            nothing and are stored as None, so a saved config never records unused sizes.
    """

    texts: str | None = None
    data: str | None = None
    n_queries: int | None = None
    n_docs: int | None = None
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _sample_sizes(cls, values):
        """64 queries and 64 documents by default with ``data``; no sizes without it."""
        if isinstance(values, dict):
            values = dict(values)
            for key in ("n_queries", "n_docs"):
                values[key] = (64 if values.get(key) is None else values[key]) if values.get("data") else None
        return values

    def load(self) -> tuple[list[str], list[str]] | None:
        """``(queries_or_texts, documents)`` (documents empty for a text file), or None without a source.

        Raises:
            ValueError: both a text file and a BEIR folder were given, or a BEIR sample of a
                negative size or of no text at all (``n_queries`` and ``n_docs`` both 0).
        """
        if self.texts and self.data:
            raise ValueError("give either a text file or a BEIR folder, not both")
        if self.data and (self.n_queries < 0 or self.n_docs < 0 or self.n_queries + self.n_docs == 0):
            raise ValueError(
                f"--n-queries and --n-docs must be ≥ 0, not both 0; got {self.n_queries} and {self.n_docs}"
            )
        if self.texts:
            from spladekit.data.texts import read_text_lines

            return read_text_lines(self.texts), []
        if self.data:
            from spladekit.data.texts import sample_beir_texts

            return sample_beir_texts(self.data, self.n_queries, self.n_docs, self.seed)
        return None


class DiagnoseConfig(Settings):
    """Settings of :func:`run_diagnose` (saved as ``config.json`` in the output folder).

    Attributes:
        model: model folder or hub id. reference: another model, a number (mean row norm), or None.
        source: sample text. max_length, max_tokens, batch_size: see :func:`diagnose_mlm_head`.
    """

    model: str
    source: TextSource
    reference: str | None = None
    max_length: int = 128
    max_tokens: int = 1024
    batch_size: int = 16
    trust_remote_code: bool = False  # run the model folders' own code (spladekit.model.remote_code)


class RescaleConfig(Settings):
    """Settings of :func:`run_rescale` (saved as ``rescale_config.json`` next to the model).

    At most one factor mode: ``factor``, ``match_norm`` (model or number), ``target_logit`` or
    ``joint`` (with ``reference``, a model, or the numbers ``target_logit`` (its std) and
    ``target_activity``); a shift with any of them or alone: ``shift``, or ``target_activity`` (a
    number, or a model whose activity on the same text is the target, by ``activity_statistic``).
    ``statistic`` and ``source`` serve the calibrations; ``position_top_k`` and ``fold_vocabulary``
    are the head options recorded with the model (:class:`~spladekit.model.calibrate.spec.HeadSpec`).

    Raises:
        ValueError (pydantic's ``ValidationError``): an unknown field, a non-finite number, a boolean
            for a number (the rules of :class:`~spladekit.settings.Settings`), naming the field.
    """

    model: str
    factor: float | None = None
    match_norm: str | None = None
    target_logit: float | None = None
    joint: bool = False
    reference: str | None = None
    statistic: str = "p99"
    scale_bias: bool = False
    shift: float | None = None
    target_activity: str | None = None
    activity_statistic: str = "active_terms"
    position_top_k: int | None = None
    fold_vocabulary: bool | None = None
    force: bool = False
    source: TextSource | None = None
    max_length: int = 128
    max_tokens: int = 1024
    batch_size: int = 16
    trust_remote_code: bool = False  # run the model folder's own code (spladekit.model.remote_code)

    def mode(self) -> str | None:
        """``"factor"``, ``"match_norm"``, ``"target_logit"``, ``"joint"`` or None (a shift or head options alone).

        Raises:
            ValueError: more than one factor mode, or nothing to do.
        """
        if self.joint:
            if self.factor is not None or self.match_norm is not None:
                raise ValueError("--joint chooses the factor itself: not with --factor or --match-norm")
            return "joint"
        chosen = [name for name in ("factor", "match_norm", "target_logit") if getattr(self, name) is not None]
        if len(chosen) > 1:
            raise ValueError("give at most one of --factor, --match-norm, --target-logit, --joint")
        if not chosen and self.shift is None and self.target_activity is None and not self.head().changes_head:
            raise ValueError(
                "nothing to do: give --factor, --match-norm, --target-logit, --joint, --shift, "
                "--target-activity, --position-top-k or --fold-vocabulary"
            )
        return chosen[0] if chosen else None

    def spec(self) -> RescaleSpec:
        """The command-line options as the one :class:`~spladekit.model.calibrate.spec.RescaleSpec`.

        Raises:
            ValueError: see :meth:`mode`, or an invalid value for the mode.
        """
        from pydantic import ValidationError

        from spladekit.errors import validation_problems

        mode = self.mode()
        reference = _number_or_name(self.match_norm) if mode == "match_norm" else self.reference
        try:
            return RescaleSpec(
                mode=mode,
                factor=self.factor,
                reference=reference,
                target=self.target_logit,
                statistic="std" if mode == "joint" else self.statistic,
                scale_bias=self.scale_bias,
                force=self.force,
                shift=self.shift,
                activity=_number_or_name(self.target_activity),
                activity_statistic=self.activity_statistic,
            )
        except ValidationError as exc:
            field, message = validation_problems(exc)[0]
            raise ValueError(f"rescale: {message} ({field or 'options'})") from None

    def head(self) -> HeadSpec:
        """The head options as a :class:`~spladekit.model.calibrate.spec.HeadSpec`."""
        return HeadSpec(position_top_k=self.position_top_k, fold_vocabulary=self.fold_vocabulary)


def _check_sizes(config) -> None:
    """Raise ``ValueError`` unless ``max_length`` ≥ 2 and ``max_tokens``, ``batch_size`` ≥ 1."""
    for name, low in (("max_length", 2), ("max_tokens", 1), ("batch_size", 1)):
        if getattr(config, name) < low:
            raise ValueError(f"--{name.replace('_', '-')} must be ≥ {low}, got {getattr(config, name)}")


def _number_or_name(value: str | None):
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def _load(name: str, trust_remote_code: bool = False):
    """The plain-head encoder of ``name``; refused when it has no masked LM (custom modules run it)."""
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.remote_code import require_masked_lm

    encoder = SpladeEncoder.from_pretrained(name, head_impl="plain", trust_remote_code=trust_remote_code)
    require_masked_lm(encoder)
    return encoder


def run_diagnose(config: DiagnoseConfig, out: str | Path, progress=None) -> Diagnosis:
    """Diagnose ``config.model`` (and its reference, on the same text; the built-in splade-tiny
    reference without one); write into ``out``: ``diagnosis.json``, ``diagnosis.txt`` (table),
    ``row_norms.png``, ``logits.png`` (with text), ``config.json``.

    Args:
        progress: called with a line as each phase starts (loading, each measurement, the reference,
            the files; the encodings also show a bar); None: silent.

    Raises:
        ResolutionError, HeadNotFoundError, DataFormatError, ValueError: see the functions called.
    """
    from spladekit.io import ensure_folder, write_json

    say = progress or (lambda line: None)
    out = Path(out)
    _check_sizes(config)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    say(
        f"diagnose {config.model}"
        + (f" against {config.reference}" if config.reference else " against the built-in splade-tiny reference")
        + f" → {out}"
    )
    sample = config.source.load()
    if sample:
        say(f"sample text: {len(sample[0]) + len(sample[1])} texts")
    kwargs = dict(
        max_length=config.max_length,
        max_tokens=config.max_tokens,
        batch_size=config.batch_size,
        seed=config.source.seed,
    )

    def measure(name: str, reference=None) -> Diagnosis:
        say(f"loading {name}")
        encoder = _load(name, config.trust_remote_code)
        text_args = {"queries": sample[0], "documents": sample[1]} if sample else {}
        return diagnose_mlm_head(
            encoder.model, encoder.tokenizer, name=name, reference=reference, progress=progress, **text_args, **kwargs
        )

    reference = _number_or_name(config.reference)
    if isinstance(reference, str):
        reference = measure(reference)
    diagnosis = measure(config.model, reference)
    say(f"writing {out}: diagnosis.json, diagnosis.txt, row_norms.png" + (", logits.png" if diagnosis.logits else ""))
    write_json(out / "config.json", config.model_dump())
    _write_diagnosis(diagnosis, reference, out)
    return diagnosis


def _write_diagnosis(diagnosis: Diagnosis, reference, out: Path) -> None:
    """``diagnosis.json``, ``diagnosis.txt`` and the plots (the histogram marks the full sample's
    p99 and max, beyond the drawn random sample's range when the tail is cut)."""
    import spladekit.plots as plots
    from spladekit.io import atomic_write, write_json

    write_json(out / "diagnosis.json", diagnosis.to_dict())
    with atomic_write(out / "diagnosis.txt") as handle:
        handle.write(diagnosis.table())
    norms = {diagnosis.model: diagnosis.row_norms}
    if isinstance(reference, Diagnosis):
        norms[reference.model] = reference.row_norms
    plots.head_row_norms(norms, out / "row_norms.png")
    if diagnosis.logit_sample is not None:
        logits = {diagnosis.model: diagnosis.logit_sample}
        if isinstance(reference, Diagnosis) and reference.logit_sample is not None:
            logits[reference.model] = reference.logit_sample
        stats = diagnosis.logits
        total = stats.n_tokens * diagnosis.head.vocab_size
        marks = {f"p99 of all {total:,} logits": stats.p99, f"max of all {total:,} logits": stats.max}
        plots.head_logits(
            logits,
            out / "logits.png",
            marks=marks,
            note=f"histogram: a random sample of {len(diagnosis.logit_sample):,} of the {total:,} logits",
        )


def run_rescale(config: RescaleConfig, out: str | Path) -> dict:
    """Load ``config.model``, set its head up (options, factor, shift), save model + tokenizer +
    ``spladekit.json`` into ``out``.

    The rescaling record is in the saved ``config.json`` (``spladekit_rescale``) and in
    ``spladekit.json`` (``extra.rescale``), the head options in ``spladekit.json``
    (``position_top_k``, ``fold``); the run's settings in ``rescale_config.json``.

    Returns:
        ``{"mode", "factor", "shift"}`` of the step applied (factor 1 and shift 0 for head options alone).

    Raises:
        ValueError: more than one factor mode or nothing to do, a calibration without text, a target
            or shift not finite, a factor not finite and > 0, a size option out of range (all before
            the model is loaded); folding a tokenizer that is not byte-level BPE.
        OutputPathError: ``out`` is an existing file.
        AlreadyRescaledError, CalibrationError, ResolutionError, HeadNotFoundError: see :func:`rescale_mlm_head`.
    """
    from spladekit.io import ensure_folder, write_json

    spec = config.spec()
    _check_sizes(config)
    if Path(out).exists() and not Path(out).is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    for name in ("target_logit", "shift"):
        value = getattr(config, name)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    if spec.mode == "factor" and not (math.isfinite(config.factor) and config.factor > 0):  # before loading the model
        raise ValueError(f"the factor must be finite and > 0, got {config.factor}")
    sample = config.source.load() if config.source else None
    if spec.needs_text and not sample:
        raise ValueError("--target-logit, --joint and --target-activity need sample text: --texts FILE or --data DIR")
    encoder = _load(config.model, config.trust_remote_code)
    head = config.head()
    if head.changes_head:  # before the calibration: the activity counts what the capped, folded head outputs
        encoder.model.configure_head(
            **head.resolve(encoder.metadata, encoder.tokenizer, encoder.model.vocab_size, config.model)
        )
    texts = calibration = None
    if spec.needs_text:
        texts = sample[0] + sample[1]
        calibration = {
            "max_length": config.max_length,
            "max_tokens": config.max_tokens,
            "batch_size": config.batch_size,
            "seed": config.source.seed,
        }
    applied = {"mode": None, "factor": 1.0, "shift": 0.0}
    if spec.changes_head:
        factor = spec.apply(encoder.model, encoder.tokenizer, texts, calibration)
        step = rescale_record(encoder.model)["history"][-1]
        applied = {"mode": step["mode"], "factor": factor, "shift": step.get("shift", 0.0)}
    encoder.save_pretrained(out)  # the one writer: the record into extra.rescale, the head options
    write_json(Path(out) / "rescale_config.json", config.model_dump())
    return applied
