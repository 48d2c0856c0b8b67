"""A real byte-level BPE tokenizer trained in code (the ``tokenizers`` library) on local text from
``../shared`` (SciFact's corpus), and a tiny random ModernBERT built on it: the vocabulary folding tests'
model (ModernBERT's own tokenizer is byte-level BPE; the hub is not reached)."""

from __future__ import annotations

import itertools
from pathlib import Path

import torch

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def scifact_texts(shared: Path, n: int = 400) -> list[str]:
    """The first ``n`` SciFact corpus documents (title + text), file order."""
    from spladekit.data.beir import iter_corpus

    return [text for _, text in itertools.islice(iter_corpus(shared / "data" / "beir" / "scifact"), n)]


def byte_level_tokenizer(texts: list[str], vocab_size: int = 800):
    """A ``PreTrainedTokenizerFast`` over a byte-level BPE trained on ``texts`` (``Ġ`` word-start
    marker, cased), adding ``[CLS] … [SEP]`` as ModernBERT's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(texts, trainer)
    cls, sep = bpe.token_to_id("[CLS]"), bpe.token_to_id("[SEP]")
    bpe.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_max_length=64,
    )


def tiny_modernbert(tokenizer, seed: int = 0, hidden: int = 32):
    """A random 1-layer ``ModernBertForMaskedLM`` over ``tokenizer``'s vocabulary (decoder bias ~ N(0, 1))."""
    import transformers as tf

    torch.manual_seed(seed)
    config = tf.ModernBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        global_attn_every_n_layers=1,
        local_attention=16,
        pad_token_id=tokenizer.pad_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        mask_token_id=tokenizer.mask_token_id,
    )
    model = tf.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():
        model.decoder.bias.copy_(
            torch.randn(model.decoder.bias.shape, generator=torch.Generator().manual_seed(seed + 1))
        )
    return model
