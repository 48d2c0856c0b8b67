"""find_mlm_head on every supported family: transform + decoder on the backbone output = model(...).logits."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from spladekit.errors import HeadNotFoundError
from spladekit.model.heads import SUPPORTED_FAMILIES, find_mlm_head
from tests.mlm_families import FAMILIES, batch, tiny_mlm, tiny_tokenizer

EXPECTED_DECODER = {
    "bert": "cls.predictions.decoder",
    "distilbert": "vocab_projector",
    "roberta": "lm_head.decoder",
    "xlm-roberta": "lm_head.decoder",
    "modernbert": "decoder",
    "electra": "generator_lm_head",
}


def _explicit_logits(model, head, inputs):
    """W·h + b from the loaded tensors, with h = transform(backbone(...)) (independent of nn.Linear)."""
    hidden = head.backbone(**inputs, return_dict=True).last_hidden_state
    h = head.transform(hidden)
    logits = torch.einsum("blh,vh->blv", h.double(), head.decoder.weight.double())
    if head.decoder.bias is not None:
        logits = logits + head.decoder.bias.double()
    return logits


@pytest.mark.parametrize("family", FAMILIES)
def test_head_reproduces_model_logits(family):
    model = tiny_mlm(family)
    tokenizer = tiny_tokenizer()
    inputs = batch(tokenizer)
    assert inputs["attention_mask"].min() == 0  # padding is exercised
    head = find_mlm_head(model)
    assert head.family == family
    assert head.decoder is model.get_submodule(EXPECTED_DECODER[family]) is model.get_output_embeddings()
    assert head.prefix == EXPECTED_DECODER[family]
    with torch.no_grad():
        reference = model(**inputs).logits
        via_head = head.logits(head.backbone(**inputs, return_dict=True).last_hidden_state)
        explicit = _explicit_logits(model, head, inputs)
    mask = inputs["attention_mask"].bool()
    torch.testing.assert_close(via_head[mask], reference[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(explicit[mask], reference[mask].double(), rtol=1e-4, atol=1e-4)
    # the decoder is tied to the input embeddings in every family
    assert head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert head.bias is not None and head.bias.abs().sum() > 0


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_modernbert_attention_implementations(attn):
    model = tiny_mlm("modernbert")
    model.config._attn_implementation = attn
    inputs = batch(tiny_tokenizer())
    head = find_mlm_head(model)
    # ModernBERT applies final_norm inside the backbone: last_hidden_state is already normalised
    assert hasattr(head.backbone, "final_norm")
    with torch.no_grad():
        reference = model(**inputs).logits
        explicit = _explicit_logits(model, head, inputs)
    mask = inputs["attention_mask"].bool()
    torch.testing.assert_close(explicit[mask], reference[mask].double(), rtol=1e-4, atol=1e-4)


def test_unsupported_model_names_the_families():
    config = tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=32)
    with pytest.raises(HeadNotFoundError) as info:
        find_mlm_head(tf.GPT2LMHeadModel(config))
    for family in SUPPORTED_FAMILIES:
        assert family in str(info.value)


def test_backbone_without_head_is_refused():
    model = tf.BertModel(tiny_mlm("bert").config)
    with pytest.raises(HeadNotFoundError, match="AutoModelForMaskedLM"):
        find_mlm_head(model)


def test_real_checkpoint_head(splade_tiny):
    folder = splade_tiny
    model = tf.AutoModelForMaskedLM.from_pretrained(folder).eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(folder)
    inputs = batch(
        tokenizer, ["what causes heart disease", "aspirin lowers the risk of a second heart attack in adults"]
    )
    head = find_mlm_head(model)
    assert head.family == "bert" and tuple(head.weight.shape) == (30522, 128)
    with torch.no_grad():
        reference = model(**inputs).logits
        explicit = _explicit_logits(model, head, inputs)
    mask = inputs["attention_mask"].bool()
    torch.testing.assert_close(explicit[mask], reference[mask].double(), rtol=1e-4, atol=1e-4)
