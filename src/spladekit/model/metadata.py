"""What spladekit stores next to a model (``spladekit.json``: :class:`EncoderMetadata`) and the checks
its fields and the model's weights files share.

A module below :mod:`spladekit.model.encoder`, :mod:`spladekit.model.folders` and
:mod:`spladekit.model.inference_free`, which all read it (it imports none of them; no torch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from spladekit.data.numbers import check_int

METADATA_FILE = "spladekit.json"
INFERENCE_FREE = "inference-free"
"""``EncoderMetadata.query_encoder`` of a model whose queries are a bag of their tokens weighted by
``query_weights.safetensors`` (:mod:`spladekit.model.inference_free`); the other value is ``"splade"``."""


@dataclass
class EncoderMetadata:
    """What spladekit stores next to a model (``spladekit.json``).

    Attributes:
        query_max_length: max tokens per query (special tokens included).
        doc_max_length: max tokens per document.
        query_top_k: keep only the k largest weights per query vector (None: keep all).
        doc_top_k: the same for documents.
        source: model id or path it was loaded from.
        extra: anything else (rescaling record, training config hash...).
        query_encoder: ``"splade"`` (queries through the model, like documents) or
            ``"inference-free"`` (queries are a bag of their tokens weighted by
            ``query_weights.safetensors``, see :mod:`spladekit.model.inference_free`).
        pooling: SPLADE pooling over positions, ``"max"`` (SPLADE v2) or ``"sum"`` (SPLADE v1).
        activation: ``"relu"`` (``log(1 + ReLU(x))``) or ``"log1p_relu"`` (``log(1 + log(1 + ReLU(x)))``),
            sentence-transformers' ``SpladePooling`` names (see :mod:`spladekit.model.pooling`).
        zero_special_tokens: document (and model-encoded query) vectors get 0 in every special-token
            column (``tokenizer.all_special_ids``), as OpenSearch's doc-only models are used; the
            ``[PAD]`` column is 0 in any case.
        position_top_k: SPLADE pooling over each token position's ``k`` largest vocabulary entries only
            (:mod:`spladekit.model.pooling`); None: all of them.
        fold: the folded vocabulary (``{"rule", "columns", "terms"}``, :mod:`spladekit.model.folding`):
            vectors have one column per term; None: one per vocabulary entry.
        query_pruning: a pruning rule applied to every query vector after ``query_top_k``
            (:class:`spladekit.model.pruning.PruningRule` as its record ``{"kind", "value"}``; None: none).
            A rule (or its ``KIND=VALUE`` text) given to the constructor is stored as its record.
        doc_pruning: the same for document vectors (after ``doc_top_k``).
    """

    query_max_length: int = 64
    doc_max_length: int = 256
    query_top_k: int | None = None
    doc_top_k: int | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)
    query_encoder: str = "splade"
    pooling: str = "max"
    activation: str = "relu"
    zero_special_tokens: bool = False
    position_top_k: int | None = None
    fold: dict | None = None
    query_pruning: dict | None = None
    doc_pruning: dict | None = None

    def __post_init__(self) -> None:
        from spladekit.model.pruning import record_of

        self.query_pruning, self.doc_pruning = record_of(self.query_pruning), record_of(self.doc_pruning)

    @classmethod
    def load(cls, folder: str | Path) -> EncoderMetadata:
        """Read ``folder/spladekit.json``; defaults when it does not exist.

        Raises:
            DataFormatError: not a JSON object, a key that is not a field (:meth:`save` writes exactly
                the fields; anything else belongs in ``extra``), or a field of the wrong type (lengths
                integers ≥ 2, top-k and ``position_top_k`` null or integers ≥ 1, ``zero_special_tokens``
                a boolean, ``extra`` an object, ``fold`` null or an object, the pruning rules null or a
                valid rule, the others strings); names the file and the field.
        """
        path = Path(folder) / METADATA_FILE
        if not path.exists():
            return cls()
        from spladekit.errors import DataFormatError
        from spladekit.io import read_json

        data = read_json(path)  # a damaged file is a DataFormatError naming it
        if not isinstance(data, dict):
            raise DataFormatError(path, "expected a JSON object")
        for key, value in data.items():
            if key not in cls.__dataclass_fields__:
                raise DataFormatError(
                    path,
                    f"unknown key {key!r}; spladekit.json has {', '.join(cls.__dataclass_fields__)} "
                    "(anything else goes into 'extra')",
                    field=key,
                )
            problem = _field_problem(key, value)
            if problem:
                raise DataFormatError(path, f"must be {problem}, got {value!r}", field=key)
        return cls(**data)

    def save(self, folder: str | Path) -> None:
        """Write ``folder/spladekit.json`` atomically."""
        from spladekit.io import write_json

        write_json(Path(folder) / METADATA_FILE, asdict(self))


def _field_problem(key: str, value) -> str | None:
    """What ``value`` of :class:`EncoderMetadata` field ``key`` must be, or None when it is that."""

    def integer(minimum):
        return not isinstance(value, bool) and isinstance(value, int) and value >= minimum

    if key in ("query_max_length", "doc_max_length"):
        return None if integer(2) else "an integer >= 2 (special tokens included)"
    if key in ("query_top_k", "doc_top_k", "position_top_k"):
        return None if value is None or integer(1) else "null or an integer >= 1"
    if key == "zero_special_tokens":
        return None if isinstance(value, bool) else "true or false (a JSON boolean)"
    if key == "extra":
        return None if isinstance(value, dict) else "a JSON object"
    if key in ("query_pruning", "doc_pruning"):
        from spladekit.model.pruning import record_problem

        return record_problem(value)
    if key == "fold":  # its content is checked where the model loads (VocabularyFold.from_record, with V)
        return None if value is None or isinstance(value, dict) else "null or a JSON object"
    return None if isinstance(value, str) else "a string"


def check_top_k(top_k, name: str = "top_k") -> None:
    """Raise ``ValueError`` unless ``top_k`` is None or an integer ≥ 1 (0 would empty every vector,
    a negative value would cut from the wrong end)."""
    if top_k is not None:
        check_int(top_k, name, 1, note=" or None (keep every term)")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0]


def damaged_weights_error(path: Path, exc: BaseException):
    """The ``DataFormatError`` for a weights file that safetensors / torch cannot read (``exc``)."""
    from spladekit.errors import DataFormatError

    return DataFormatError(
        path,
        f"cannot read the model's weights ({type(exc).__name__}: {_first_line(exc)}); the "
        "file is damaged or truncated (download or save it again)",
    )


def max_positions(hf_config) -> int | None:
    """The most tokens a model with this transformers config accepts (its position embeddings; None
    when unbounded/unknown). RoBERTa-style models start their positions after ``padding_idx``."""
    limit = getattr(hf_config, "max_position_embeddings", None)
    if limit and getattr(hf_config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= (getattr(hf_config, "pad_token_id", None) or 0) + 1
    return int(limit) if limit else None
