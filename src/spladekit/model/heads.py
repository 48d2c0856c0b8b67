"""Find the MLM head of each supported encoder family.

An MLM head maps the backbone's last hidden states ``[B, L, H]`` to vocabulary logits ``[B, L, V]``
in two parts: a *transform* (dense → activation → LayerNorm, ``[B, L, H] → [B, L, H']``) and a
*decoder* (``nn.Linear(H', V)``: weight ``[V, H']``, usually tied to the input embeddings, and a
bias ``[V]``). SPLADE (Formal et al., SIGIR 2021, eq. 1-2) reads these logits.

Supported families and where their parts live in ``transformers``:

=============  =====================  ==================================================  ==========================
family         backbone               transform                                           decoder
=============  =====================  ==================================================  ==========================
bert           ``model.bert``         ``cls.predictions.transform``                       ``cls.predictions.decoder``
distilbert     ``model.distilbert``   ``vocab_transform`` → ``activation`` → ``vocab_layer_norm``  ``vocab_projector``
roberta        ``model.roberta``      ``lm_head.dense`` → GELU → ``lm_head.layer_norm``    ``lm_head.decoder``
xlm-roberta    ``model.roberta``      as roberta                                          as roberta
modernbert     ``model.model``        ``head`` (dense → act → norm)                       ``decoder``
electra        ``model.electra``      ``generator_predictions``                           ``generator_lm_head``
=============  =====================  ==================================================  ==========================

ModernBERT (and Ettin, which uses the ModernBERT architecture) applies ``final_norm`` inside the
backbone, so the backbone's ``last_hidden_state`` is already normalised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from spladekit.errors import HeadNotFoundError

SUPPORTED_FAMILIES = ("bert", "distilbert", "roberta", "xlm-roberta", "modernbert", "electra")


class _Transform(nn.Module):
    """dense → activation → norm, holding references to the model's own modules (no copies)."""

    def __init__(self, dense: nn.Module, activation, norm: nn.Module):
        super().__init__()
        self.dense = dense
        self.norm = norm
        self._activation = activation

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self._activation(self.dense(hidden)))


@dataclass
class MLMHead:
    """The parts of a masked-language model that SPLADE uses.

    Attributes:
        family: one of :data:`SUPPORTED_FAMILIES`.
        backbone: module called as ``backbone(input_ids=..., attention_mask=...)`` whose output's
            ``last_hidden_state`` is ``[B, L, H]``.
        transform: module ``[B, L, H] → [B, L, H']`` (the head's dense/activation/norm).
        decoder: the ``nn.Linear`` vocabulary projection, weight ``[V, H']``, bias ``[V]`` or None.
        prefix: attribute path of the decoder in the model (e.g. ``"cls.predictions.decoder"``).
    """

    family: str
    backbone: nn.Module
    transform: nn.Module
    decoder: nn.Linear
    prefix: str

    @property
    def weight(self) -> torch.Tensor:
        """Decoder weight ``[V, H']``."""
        return self.decoder.weight

    @property
    def bias(self) -> torch.Tensor | None:
        """Decoder bias ``[V]`` or None."""
        return self.decoder.bias

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits ``[B, L, V]`` from last hidden states ``[B, L, H]``."""
        return self.decoder(self.transform(hidden))


def _family(model: nn.Module) -> str:
    model_type = getattr(getattr(model, "config", None), "model_type", "")
    return str(model_type).replace("_", "-")


def find_mlm_head(model: nn.Module) -> MLMHead:
    """Locate backbone, transform and decoder of a ``*ForMaskedLM`` model.

    Args:
        model: a ``transformers`` masked-LM model (BERT, DistilBERT, RoBERTa, XLM-R, ModernBERT,
            Ettin, ELECTRA generator).

    Raises:
        HeadNotFoundError: the model is not one of the supported families or lacks its MLM head.
    """
    family = _family(model)
    try:
        if family == "bert" and hasattr(model, "cls"):
            pred = model.cls.predictions
            return MLMHead("bert", model.bert, pred.transform, pred.decoder, "cls.predictions.decoder")
        if family == "distilbert" and hasattr(model, "vocab_projector"):
            transform = _Transform(model.vocab_transform, model.activation, model.vocab_layer_norm)
            return MLMHead("distilbert", model.distilbert, transform, model.vocab_projector, "vocab_projector")
        if family in ("roberta", "xlm-roberta", "camembert") and hasattr(model, "lm_head"):
            head = model.lm_head
            transform = _Transform(head.dense, nn.functional.gelu, head.layer_norm)
            return MLMHead(family, model.roberta, transform, head.decoder, "lm_head.decoder")
        if family == "modernbert" and hasattr(model, "decoder"):
            return MLMHead("modernbert", model.model, model.head, model.decoder, "decoder")
        if family == "electra" and hasattr(model, "generator_lm_head"):
            return MLMHead(
                "electra", model.electra, model.generator_predictions, model.generator_lm_head, "generator_lm_head"
            )
    except AttributeError as exc:
        raise HeadNotFoundError(f"{type(model).__name__}: MLM head of family {family!r} is incomplete ({exc})") from exc
    raise HeadNotFoundError(
        f"{type(model).__name__} (model_type={family!r}) has no supported MLM head; "
        f"supported families: {', '.join(SUPPORTED_FAMILIES)} (load the model with AutoModelForMaskedLM)"
    )
