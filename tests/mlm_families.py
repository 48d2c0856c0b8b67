"""Tiny random masked-LM models of every supported family, and a matching tiny tokenizer (built in code)."""

from __future__ import annotations

import torch
import transformers as tf

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the a of and to in is was for on with as by at from protein cell gene cancer risk study patients "
    "effect increased reduced blood heart brain drug dose trial mouse human level expression response"
).split()
VOCAB = SPECIAL + WORDS + [f"tok{i}" for i in range(64 - len(SPECIAL) - len(WORDS))]
V = len(VOCAB)  # 64
H = 32

TEXTS = [
    "the protein of cancer cell",
    "increased risk of heart drug dose in patients",
    "mouse brain gene expression response",
    "a study of blood level",
    "human trial with reduced effect",
    "the cell",
]

FAMILIES = ("bert", "distilbert", "roberta", "xlm-roberta", "modernbert", "electra")


def tiny_tokenizer():
    """A WordPiece tokenizer over :data:`VOCAB` (pad 0, unk 1, cls 2, sep 3, mask 4)."""
    return tf.BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)})


def tiny_config(family: str, **overrides):
    """A 1-layer config of ``family`` with vocabulary :data:`V` and width :data:`H`."""
    common = dict(
        vocab_size=V,
        hidden_size=H,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    if family == "bert":
        config = tf.BertConfig(**common)
    elif family == "roberta":
        config = tf.RobertaConfig(**common, pad_token_id=0)
    elif family == "xlm-roberta":
        config = tf.XLMRobertaConfig(**common, pad_token_id=0)
    elif family == "distilbert":
        config = tf.DistilBertConfig(
            vocab_size=V, dim=H, n_layers=1, n_heads=2, hidden_dim=64, max_position_embeddings=64
        )
    elif family == "modernbert":
        config = tf.ModernBertConfig(
            **common,
            global_attn_every_n_layers=1,
            local_attention=16,
            pad_token_id=0,
            cls_token_id=2,
            sep_token_id=3,
            bos_token_id=2,
            eos_token_id=3,
            mask_token_id=4,
        )
    elif family == "electra":  # a generator whose embedding width differs from its hidden width
        config = tf.ElectraConfig(**common, embedding_size=16)
    else:
        raise ValueError(family)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def tiny_mlm(family: str, seed: int = 0, **overrides):
    """A random ``*ForMaskedLM`` of ``family`` (eval mode), with a non-zero decoder bias."""
    torch.manual_seed(seed)
    model = tf.AutoModelForMaskedLM.from_config(tiny_config(family, **overrides)).eval()
    decoder = model.get_output_embeddings()
    if decoder.bias is not None:  # default init is zero: make the bias visible in every check
        with torch.no_grad():
            decoder.bias.copy_(torch.randn(decoder.bias.shape, generator=torch.Generator().manual_seed(seed + 1)))
    return model


def batch(tokenizer, texts=TEXTS):
    """input_ids and attention_mask only (some families reject token_type_ids)."""
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
