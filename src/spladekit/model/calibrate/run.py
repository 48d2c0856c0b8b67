"""Folder-to-folder runs of diagnosis and rescaling, with typed configs saved next to the outputs.

The CLI (``spladekit diagnose`` / ``spladekit rescale``) is a thin layer over :func:`run_diagnose`
and :func:`run_rescale`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from spladekit.model.calibrate.diagnose import Diagnosis, diagnose_mlm_head
from spladekit.model.calibrate.spec import RescaleSpec


@dataclass
class TextSource:
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

    def __post_init__(self):
        if self.data:
            self.n_queries = 64 if self.n_queries is None else self.n_queries
            self.n_docs = 64 if self.n_docs is None else self.n_docs
        else:
            self.n_queries = self.n_docs = None

    def load(self) -> tuple[list[str], list[str]] | None:
        """``(queries_or_texts, documents)`` (documents empty for a text file), or None without a source.

        Raises:
            ValueError: both a text file and a BEIR folder were given, or a BEIR sample of a
                negative size or of no text at all (``n_queries`` and ``n_docs`` both 0).
        """
        if self.texts and self.data:
            raise ValueError("give either a text file or a BEIR folder, not both")
        if self.data and (self.n_queries < 0 or self.n_docs < 0 or self.n_queries + self.n_docs == 0):
            raise ValueError(f"--n-queries and --n-docs must be ≥ 0, not both 0; got {self.n_queries} and {self.n_docs}")
        if self.texts:
            from spladekit.data.texts import read_text_lines

            return read_text_lines(self.texts), []
        if self.data:
            from spladekit.data.texts import sample_beir_texts

            return sample_beir_texts(self.data, self.n_queries, self.n_docs, self.seed)
        return None


@dataclass
class DiagnoseConfig:
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


@dataclass
class RescaleConfig:
    """Settings of :func:`run_rescale` (saved as ``rescale_config.json`` next to the model).

    Exactly one of ``factor``, ``match_norm`` (model or number) and ``target_logit`` is set;
    ``statistic`` and ``source`` serve ``target_logit``.
    """

    model: str
    factor: float | None = None
    match_norm: str | None = None
    target_logit: float | None = None
    statistic: str = "p99"
    scale_bias: bool = False
    force: bool = False
    source: TextSource | None = None
    max_length: int = 128
    max_tokens: int = 1024
    batch_size: int = 16
    trust_remote_code: bool = False  # run the model folder's own code (spladekit.model.remote_code)

    def mode(self) -> str:
        """``"factor"``, ``"match_norm"`` or ``"target_logit"``.

        Raises:
            ValueError: not exactly one of them is set.
        """
        chosen = [name for name in ("factor", "match_norm", "target_logit") if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError("give exactly one of --factor, --match-norm, --target-logit")
        return chosen[0]

    def spec(self) -> RescaleSpec:
        """The command-line options as the one :class:`~spladekit.model.calibrate.spec.RescaleSpec`.

        Raises:
            ValueError: not exactly one mode (see :meth:`mode`), or an invalid value for it.
        """
        from pydantic import ValidationError

        from spladekit.errors import validation_problems

        try:
            return RescaleSpec(mode=self.mode(), factor=self.factor, reference=_number_or_name(self.match_norm),
                               target=self.target_logit, statistic=self.statistic, scale_bias=self.scale_bias,
                               force=self.force)
        except ValidationError as exc:
            field, message = validation_problems(exc)[0]
            raise ValueError(f"rescale: {message} ({field or 'options'})") from None


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


def run_diagnose(config: DiagnoseConfig, out: str | Path) -> Diagnosis:
    """Diagnose ``config.model`` (and its reference, on the same text); write into ``out``:
    ``diagnosis.json``, ``diagnosis.txt`` (table), ``row_norms.png``, ``logits.png`` (with text), ``config.json``.

    Raises:
        ResolutionError, HeadNotFoundError, DataFormatError, ValueError: see the functions called.
    """
    import spladekit.plots as plots
    from spladekit.io import atomic_write, ensure_folder, write_json

    out = Path(out)
    _check_sizes(config)
    if out.exists() and not out.is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    sample = config.source.load()
    kwargs = dict(max_length=config.max_length, max_tokens=config.max_tokens, batch_size=config.batch_size, seed=config.source.seed)

    def measure(name: str, reference=None) -> Diagnosis:
        encoder = _load(name, config.trust_remote_code)
        text_args = {"queries": sample[0], "documents": sample[1]} if sample else {}
        return diagnose_mlm_head(encoder.model, encoder.tokenizer, name=name, reference=reference, **text_args, **kwargs)

    reference = _number_or_name(config.reference)
    if isinstance(reference, str):
        reference = measure(reference)
    diagnosis = measure(config.model, reference)
    write_json(out / "config.json", asdict(config))
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
        plots.head_logits(logits, out / "logits.png")
    return diagnosis


def run_rescale(config: RescaleConfig, out: str | Path) -> float:
    """Load ``config.model``, rescale its MLM head, save model + tokenizer + ``spladekit.json`` into ``out``.

    The rescaling record is in the saved ``config.json`` (``spladekit_rescale``) and in
    ``spladekit.json`` (``extra.rescale``); the run's settings in ``rescale_config.json``.

    Returns:
        The factor applied.

    Raises:
        ValueError: not exactly one mode, ``target_logit`` without text or not finite, a factor not
            finite and > 0, a size option out of range (all before the model is loaded).
        OutputPathError: ``out`` is an existing file.
        AlreadyRescaledError, CalibrationError, ResolutionError, HeadNotFoundError: see :func:`rescale_mlm_head`.
    """
    from spladekit.io import ensure_folder, write_json

    mode = config.mode()
    _check_sizes(config)
    if Path(out).exists() and not Path(out).is_dir():
        ensure_folder(out)  # raises OutputPathError before any work
    if mode == "target_logit" and not math.isfinite(config.target_logit):
        raise ValueError(f"--target-logit must be a finite number, got {config.target_logit}")
    if mode == "factor" and not (math.isfinite(config.factor) and config.factor > 0):  # before loading the model
        raise ValueError(f"the factor must be finite and > 0, got {config.factor}")
    spec = config.spec()
    encoder = _load(config.model, config.trust_remote_code)
    texts = calibration = None
    if mode == "target_logit":
        sample = config.source.load() if config.source else None
        if not sample:
            raise ValueError("--target-logit needs sample text: --texts FILE or --data DIR")
        texts = sample[0] + sample[1]
        calibration = {"max_length": config.max_length, "max_tokens": config.max_tokens, "batch_size": config.batch_size,
                       "seed": config.source.seed}
    factor = spec.apply(encoder.model.mlm, encoder.tokenizer, texts, calibration)
    encoder.save_pretrained(out)  # copies the record into spladekit.json (extra.rescale)
    write_json(Path(out) / "rescale_config.json", asdict(config))
    return factor
