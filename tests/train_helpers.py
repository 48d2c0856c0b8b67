"""Tiny models and data for the training tests (built in code, no downloads)."""

from __future__ import annotations

from pathlib import Path

WORDS = [f"w{i}" for i in range(150)]


def make_tiny_model(folder: Path, dropout: float = 0.0, seed: int = 0, tie: bool = True, bias: float = 1.0) -> Path:
    """A 1-layer BERT masked-LM (V = 155, H = 32) with a word-level tokenizer, saved to ``folder``
    (``tie``: the decoder shares the word embeddings, as in BERT; ``bias`` added to the decoder bias:
    the default +1 makes every term active, −0.1 about 60 % of them)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        tie_word_embeddings=tie,
    )
    model = BertForMaskedLM(config)
    with torch.no_grad():  # a positive decoder bias so that vectors start non-empty
        model.cls.predictions.bias.add_(bias)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_examples(n: int = 12, negatives: int = 3, seed: int = 0):
    """Synthetic training examples: the query shares words with its positive."""
    import random

    from spladekit.train.data import TrainingExample

    rng = random.Random(seed)
    examples = []
    for i in range(n):
        topic = rng.sample(WORDS, 6)
        query = " ".join(topic[:3])
        pos = " ".join(topic + rng.sample(WORDS, 4))
        negs = [(f"n{i}-{k}", " ".join(rng.sample(WORDS, 8))) for k in range(negatives)]
        teacher = {f"p{i}": 10.0, **{d: float(rng.uniform(0, 8)) for d, _ in negs}}
        examples.append(TrainingExample(f"q{i}", query, [(f"p{i}", pos)], negs, teacher))
    return examples


def tiny_config(model_dir: Path, **overrides):
    from spladekit.train.config import TrainConfig

    data = {
        "model": {"path": str(model_dir), "head_impl": "plain", "query_max_length": 16, "doc_max_length": 24},
        "data": {"format": "triples", "path": "unused", "num_negatives": 1},
        "regularizer": {"lambda_q": 1e-2, "lambda_d": 1e-2, "warmup_steps": 2},
        "steps": 4,
        "batch_size": 4,
        "lr": 1e-3,
        "seed": 0,
        "monitor": {"logit_sample": 1},
        "curves": False,
    }
    for key, value in overrides.items():
        node = data
        parts = key.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return TrainConfig.model_validate(data)


def ddp_worker(rank: int, world: int, port: int, model_dir: str, out: str, df_model_dir: str | None = None) -> None:
    """One process of the 2-process gloo test: one train_step (loss, gradients), DF-FLOPS' document
    frequencies with ``df_model_dir`` (default ``model_dir``), then a 2-step train()."""
    import os

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step_result = one_step(Path(model_dir), grad_accum=2)
        cached_result = one_step(Path(model_dir), cached={"mini_batch_size": 1})  # gradient cache over gathered vectors
        counts = document_frequencies(Path(df_model_dir or model_dir))  # each process a shard, counts summed
        if rank == 0:
            torch.save(step_result, Path(out) / "step.pt")
            torch.save(cached_result, Path(out) / "step-cached.pt")
            torch.save(counts, Path(out) / "df-counts.pt")
        from spladekit.train import train

        train(
            tiny_config(Path(model_dir), steps=1, checkpoint_every=1),
            Path(out) / "run",
            examples=make_examples(),
            show_progress=False,
        )
    finally:
        dist.destroy_process_group()


def one_step(model_dir: Path, grad_accum: int = 1, **overrides) -> dict:
    """Loss parts and parameter gradients of one global-batch step (after averaging over processes)."""
    import torch

    from spladekit.train import distributed as D
    from spladekit.train.data import global_batch
    from spladekit.train.step import _Encoder, load_model, train_step

    config = tiny_config(model_dir, grad_accum=grad_accum, **overrides)
    info = D.init_distributed()
    model, tokenizer, _ = load_model(config)
    model.train()
    encoder = _Encoder(model, tokenizer, config, torch.device("cpu"))
    batch = global_batch(make_examples(), 0, config.batch_size, config.data.num_negatives, config.seed)
    parts, _ = train_step(encoder, batch, config, info, 0.01, 0.02)
    D.average_gradients(list(model.parameters()))
    return {"parts": parts, "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}}


def document_frequencies(model_dir: Path, encode_batch_size: int = 8):
    """``(counts, num_docs)`` of :func:`spladekit.train.step.sample_document_frequencies` over every
    document of :func:`make_examples`, with this process's share (all of them with one process)."""
    import torch

    from spladekit.train import distributed as D
    from spladekit.train.examples import training_documents
    from spladekit.train.step import _Encoder, load_model, sample_document_frequencies

    config = tiny_config(
        model_dir,
        regularizer__kind="df_flops",
        regularizer__df={"alpha": 0.3, "beta": 2.0, "encode_batch_size": encode_batch_size},
    )
    model, tokenizer, _ = load_model(config)
    encoder = _Encoder(model, tokenizer, config, torch.device("cpu"))
    return sample_document_frequencies(encoder, training_documents(make_examples()), config, D.init_distributed())
