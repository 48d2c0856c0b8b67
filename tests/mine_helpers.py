"""Tiny random models for the mining tests, built in code and saved: a cross-encoder (sentence-transformers'
``CrossEncoder`` over a 1-layer BERT, identity activation recorded in its config) and a dense
``SentenceTransformer`` (1-layer BERT + mean pooling), both on the word vocabulary of train_helpers."""

from __future__ import annotations

import random
from pathlib import Path

from tests.train_helpers import WORDS, make_tiny_model


def make_cross_encoder(folder: Path, seed: int = 1, num_labels: int = 1) -> Path:
    """A random 1-layer BERT sequence classifier (``num_labels`` labels, 1 by default), saved as a sentence-transformers CrossEncoder
    whose recorded activation is ``torch.nn.Identity`` (so predict returns raw logits)."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    base = folder.parent / f"{folder.name}-base"
    make_tiny_model(base)  # for its tokenizer
    tokenizer = BertTokenizerFast.from_pretrained(str(base))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
        initializer_range=0.3,
    )  # wide weights: well-spread logits (no near-ties)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():  # spread the logits so that ranks are well separated
        model.classifier.weight.mul_(10.0)
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    CrossEncoder(str(base), activation_fn=torch.nn.Identity(), device="cpu").save(str(folder))
    return folder


def make_dense_model(folder: Path, seed: int = 2):
    """A random dense SentenceTransformer (1-layer BERT, mean pooling), saved to ``folder``; returned loaded."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    base = folder.parent / f"{folder.name}-base"
    make_tiny_model(base)
    tokenizer = BertTokenizerFast.from_pretrained(str(base))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(base)
    transformer = models.Transformer(str(base))
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    model.save(str(folder))
    return model


def make_texts(n_queries: int = 8, n_docs: int = 40, seed: int = 0):
    """``(pairs, corpus)``: (query, positive) text pairs (query 0 has two positives) and ``{doc_id: text}``
    holding every positive; texts are words of the tiny vocabulary, queries share words with positives."""
    rng = random.Random(seed)
    corpus = {f"d{i}": " ".join(rng.sample(WORDS, 8)) for i in range(n_docs)}
    ids = list(corpus)
    pairs = []
    for q in range(n_queries):
        doc = ids[q * 3]
        words = corpus[doc].split()
        query = " ".join(words[:3] + rng.sample(WORDS, 1))
        pairs.append((query, corpus[doc]))
        if q == 0:
            pairs.append((query, corpus[ids[1]]))
    return pairs, corpus
