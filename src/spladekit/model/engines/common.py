"""What every engine writer shares: the model's SPLADE variant, refusals by name (a pruning rule
among them: no engine's encoder applies one), the CPU copy that is traced, and the files every export
folder holds (``spladekit.json``, ``HOW_TO_LOAD.md``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch

from spladekit.errors import require_extra
from spladekit.model.onnx_export import check_pooling

HOW_TO_LOAD = "HOW_TO_LOAD.md"


@dataclass
class Variant:
    """The computation an export must reproduce: spladekit's vector of one text.

    Attributes:
        engine: the ``--format`` name (for messages).
        family: the MLM family (:data:`spladekit.model.heads.SUPPORTED_FAMILIES`).
        pooling: ``"max"`` or ``"sum"``; activation ``"relu"`` (log(1 + ReLU(x))) or ``"log1p_relu"``.
        zero_ids: vocabulary columns set to 0 in every vector: ``[PAD]`` always, every special token
            when the model's metadata sets ``zero_special_tokens`` (as :meth:`SpladeEncoder._weights`).
        inference_free: the query side is a table look-up (``query_weights``), not the model.
        source: the model's folder or id (for messages).
        position_top_k: the model's cap on each position's expansion (None: none, or one at least V).
        folded: the model folds its vocabulary (its vectors' columns are terms, not token ids).
    """

    engine: str
    family: str
    pooling: str
    activation: str
    vocab_size: int
    zero_ids: list[int] = field(default_factory=list)
    inference_free: bool = False
    source: str = ""
    position_top_k: int | None = None
    folded: bool = False

    def keep(self) -> torch.Tensor:
        """``[V]`` float32: 0 in the zeroed columns, 1 elsewhere."""
        keep = torch.ones(self.vocab_size)
        keep[[j for j in self.zero_ids if 0 <= j < self.vocab_size]] = 0.0
        return keep


def variant(encoder, engine: str, pooling: str | None = None, activation: str | None = None) -> Variant:
    """The :class:`Variant` of ``encoder`` (``pooling``/``activation`` override the model's own).

    ``vocab_size`` is the head's ``V`` (the columns ``zero_ids`` name); a folded model's vectors
    have ``V'`` columns after the fold.

    Raises:
        ValueError: unknown pooling or activation.
        UnsupportedModelError: the model sets a pruning rule (:func:`refuse_pruning`).
    """
    meta = encoder.metadata
    pooling = pooling or meta.pooling
    activation = activation or meta.activation
    check_pooling(pooling, activation)
    tokenizer = encoder.tokenizer
    zero = []
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is not None:
        zero.append(int(pad))
    if meta.zero_special_tokens:
        zero += [int(j) for j in getattr(tokenizer, "all_special_ids", []) or []]
    model = encoder.model
    cap = model.position_top_k if model.position_top_k is not None and model.position_top_k < model.vocab_size else None
    v = Variant(
        engine=engine,
        family=model.head.family,
        pooling=pooling,
        activation=activation,
        vocab_size=model.vocab_size,
        zero_ids=sorted(set(zero)),
        inference_free=encoder.query_weights is not None,
        source=meta.source,
        position_top_k=cap,
        folded=model.fold is not None,
    )
    refuse_pruning(v, meta)
    return v


def refuse_pruning(v: Variant, meta) -> None:
    """Refuse a model whose metadata sets a pruning rule (``query_pruning`` / ``doc_pruning``,
    :mod:`spladekit.model.pruning`): an engine runs its own encoder, which applies no spladekit rule,
    so its vectors would not be the pruned ones.

    Raises:
        UnsupportedModelError: naming the rule (see :func:`refuse`).
    """
    from spladekit.model.pruning import of_record

    for key in ("query_pruning", "doc_pruning"):
        rule = getattr(meta, key, None)
        if rule:
            refuse(
                v,
                f"the pruning rule {key} {of_record(rule)}: the engine's encoder cannot apply it (export the "
                f"model without it, or prune the vectors spladekit writes: `spladekit export`)",
            )


def refuse(v: Variant, what: str) -> None:
    """Raise :class:`~spladekit.errors.UnsupportedModelError` naming the engine, the model and why."""
    from spladekit.errors import UnsupportedModelError

    raise UnsupportedModelError(Path(v.source or "."), f"cannot export for {v.engine}: {what}", field="--format")


def cpu_model(encoder, attention: str | None = None):
    """A float32 CPU copy of ``encoder.model`` in eval mode (the encoder itself is unchanged);
    ``attention`` sets transformers' attention implementation (``"eager"``, ``"sdpa"``)."""
    model = copy.deepcopy(encoder.model).cpu().float().eval()
    if attention is not None:
        model.mlm.set_attn_implementation(attention)
    return model


def backbone_accepts(model, name: str) -> bool:
    """Whether the backbone's forward takes the keyword ``name`` (``token_type_ids``, ``position_ids``)."""
    import inspect

    return name in inspect.signature(model.head.backbone.forward).parameters


def hidden_states(model, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
    """``[B, L, H']``: the backbone (with ``token_type_ids`` where it takes them) then the MLM-head
    transform, as :meth:`SpladeModel.hidden_states` (which passes none: all zeros, the same)."""
    head = model.head
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "return_dict": True}
    if token_type_ids is not None and backbone_accepts(model, "token_type_ids"):
        kwargs["token_type_ids"] = token_type_ids
    return head.transform(head.backbone(**kwargs).last_hidden_state)


def write_metadata(encoder, folder: Path, engine: str, record: dict) -> None:
    """``spladekit.json``: the model's metadata with ``extra[engine] = record``."""
    from spladekit.model.encoder import EncoderMetadata

    meta = copy.deepcopy(encoder.metadata)
    meta = EncoderMetadata(**{k: getattr(meta, k) for k in EncoderMetadata.__dataclass_fields__})
    meta.extra = dict(meta.extra, **{engine: record})
    meta.save(folder)


def write_how_to(folder: Path, text: str) -> None:
    """``HOW_TO_LOAD.md`` (atomic write)."""
    from spladekit.io import atomic_write

    with atomic_write(folder / HOW_TO_LOAD) as fh:
        fh.write(text.strip() + "\n")


def sample_batch(encoder, texts=("spladekit engine export", "a")) -> dict:
    """A padded tokenized batch (two texts of different lengths) to trace with."""
    return encoder.tokenize(list(texts), max_length=16)


def require_onnx(engine: str) -> None:
    """Raise :class:`~spladekit.errors.MissingExtraError` (an ``ImportError`` with the install line)
    when the ``onnx`` package (torch.onnx's writer) is missing."""
    require_extra("onnx", f"the {engine} export (it writes ONNX)", "the onnx package", "onnx")
