"""The regularisers in training (spladekit.train.step, trainer, callbacks, checkpoints): each new kind
trains and its logged value is its formula, by hand, on the first batch's vectors; DF-FLOPS'
estimate is refreshed on its schedule (counted) and restored on resume, bit for bit; the anti-zero
term enters the loss and its gradient as its formula says (not for an inference-free query side)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.train import train  # noqa: E402
from spladekit.train.callbacks import DocumentFrequencyRefresh  # noqa: E402
from spladekit.train.data import global_batch  # noqa: E402
from spladekit.train.distributed import DistInfo  # noqa: E402
from spladekit.train.examples import training_documents  # noqa: E402
from spladekit.train.step import _Encoder, attach_query_weights, load_model, train_step  # noqa: E402
from spladekit.train.trainer import Trainer  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402

# Float32 sums of N·V ≤ 8·155 non-negative terms (the regularisers, by hand in float64 on the very same
# float32 vectors: the trainer's encoding of the same tokens by the same model is repeated exactly) carry a
# relative error ≤ (N + V + 2)·2⁻²⁴ ≈ 165 · 6e-8 ≈ 1e-5 (Higham §3.1, no cancellation): rtol 2e-5.
RTOL = 2e-5
DF = {"alpha": 0.3, "beta": 2.0, "refresh_every": 2, "sample_docs": 100, "encode_batch_size": 8}
KINDS = {"flops_l0": {"regularizer__threshold": 80.0}, "idf_flops": {}, "df_flops": {"regularizer__df": DF}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny model whose vectors use about 60 % of the terms (DF shares spread over (0, 1))."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", bias=-0.1)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _first_batch_vectors(model_dir: Path, config) -> tuple[np.ndarray, np.ndarray, _Encoder]:
    """The start model's query and document vectors of step 1's batch, encoded as the trainer does."""
    model, tokenizer, _ = load_model(config)
    model.train()
    encoder = _Encoder(model, tokenizer, config, torch.device("cpu"))
    batch = global_batch(make_examples(), 0, config.batch_size, config.data.num_negatives, config.seed)
    with torch.no_grad():
        q = encoder(encoder.tokens(batch.queries, config.model.query_max_length))
        d = encoder(encoder.tokens(batch.docs, config.model.doc_max_length))
    return q.double().numpy(), d.double().numpy(), encoder


def _idf_by_hand(tokenizer, documents: list[str], vocab: int) -> np.ndarray:
    """ln(1 + (N − df + 0.5)/(df + 0.5)); df counted from each document's token set; special tokens df = N."""
    df = np.zeros(vocab)
    for text in documents:
        for j in set(tokenizer(text, add_special_tokens=False)["input_ids"]):
            df[j] += 1
    df[list(tokenizer.all_special_ids)] = len(documents)
    n = len(documents)
    return np.log(1 + (n - df + 0.5) / (df + 0.5))


def _df_weights_by_hand(encoder: _Encoder, documents: list[str], config) -> np.ndarray:
    """a(DF_j/n) = 1/(1 + (x^(log_α 2) − 1)^β) over every training document (sample_docs ≥ their number),
    encoded in eval mode in the trainer's chunks of encode_batch_size (the same padding, the same floats)."""
    encoder.model.eval()
    counts = np.zeros(encoder.model.output_size)
    size = config.regularizer.df.encode_batch_size
    with torch.no_grad():
        for lo in range(0, len(documents), size):
            counts += (
                (encoder(encoder.tokens(documents[lo : lo + size], config.model.doc_max_length)) > 0).sum(0).numpy()
            )
    encoder.model.train()
    x, alpha, beta = counts / len(documents), config.regularizer.df.alpha, config.regularizer.df.beta
    with np.errstate(divide="ignore"):
        base = np.where(x > 0, np.power(np.where(x > 0, x, 1.0), math.log(2) / math.log(alpha)) - 1, np.inf)
    return np.where(x > 0, 1 / (1 + np.maximum(base, 0) ** beta), 0.0)


def _by_hand(kind: str, w: np.ndarray, config, idf=None, a=None) -> float:
    n = w.shape[0]
    if kind == "flops_l0":
        mask = ((w != 0).sum(axis=1) > config.regularizer.threshold).astype(float)
        return float((((mask[:, None] * w).sum(axis=0) / n) ** 2).sum())
    if kind == "idf_flops":
        return float(((w.sum(axis=0) / n / idf) ** 2).sum())
    return float(((a * w.sum(axis=0) / n) ** 2).sum())


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_new_regularizer_trains_and_logs_its_formula(tiny, tmp_path, kind):
    config = tiny_config(tiny, steps=2, regularizer__kind=kind, **KINDS[kind])
    result = train(config, tmp_path / "out", examples=make_examples(), show_progress=False)
    records = _records(tmp_path / "out")
    assert [r["step"] for r in records] == [1, 2] and result.model_dir is not None
    for r in records:
        assert r["loss"] == pytest.approx(r["loss_rank"] + r["loss_reg_q"] + r["loss_reg_d"], rel=1e-6)
        assert r["loss_reg_d"] == pytest.approx(r["lambda_d"] * r["reg_d"], rel=1e-6)
        assert "loss_anti_zero" not in r  # anti_zero 0: off
    q, d, encoder = _first_batch_vectors(tiny, config)
    documents = training_documents(make_examples())
    idf = _idf_by_hand(encoder.tokenizer, documents, encoder.model.vocab_size) if kind == "idf_flops" else None
    a = _df_weights_by_hand(encoder, documents, config) if kind == "df_flops" else None
    if kind == "df_flops":
        assert 0.05 < a.mean() < 0.95  # the DF shares of this model spread the weights (not a plain FLOPS)
    if kind == "flops_l0":  # the threshold leaves some documents out, not all
        assert 0 < ((d != 0).sum(axis=1) > config.regularizer.threshold).sum() < len(d)
    assert records[0]["reg_q"] == pytest.approx(_by_hand(kind, q, config, idf, a), rel=RTOL)
    assert records[0]["reg_d"] == pytest.approx(_by_hand(kind, d, config, idf, a), rel=RTOL)


def test_idf_flops_refuses_a_folded_vocabulary_and_an_inference_free_query_side():
    with pytest.raises(ValueError, match="idf_flops with head.fold_vocabulary"):
        tiny_config(Path("unused"), regularizer__kind="idf_flops", head__fold_vocabulary=True)
    with pytest.raises(ValueError, match="idf_flops with model.query_encoder inference-free.*use kind flops"):
        tiny_config(Path("unused"), regularizer__kind="idf_flops", model__query_encoder="inference-free")


def test_df_refresh_happens_on_its_schedule(tiny, tmp_path):
    """refresh_every 2 over 5 steps: estimates of the model after 0, 2 and 4 updates (before steps 1, 3, 5)."""
    config = tiny_config(tiny, steps=5, seed=3, regularizer__kind="df_flops", regularizer__df={**DF, "sample_docs": 10})
    refresh = DocumentFrequencyRefresh()
    trainer = Trainer(config, tmp_path / "out", examples=make_examples(), callbacks=[refresh])
    trainer.fit()
    assert refresh.refreshes == 3
    records = _records(tmp_path / "out")
    assert [(r["step"], r["df_refresh_step"]) for r in records if "df_refresh_step" in r] == [(1, 0), (3, 2), (5, 4)]
    assert all(r["df_sample_docs"] == 10 for r in records if "df_refresh_step" in r)
    documents = training_documents(trainer.train_examples)
    chosen = np.sort(np.random.default_rng(3).choice(len(documents), size=10, replace=False))  # the config's seed
    assert trainer.df_estimate.texts == [documents[i] for i in chosen]
    assert trainer.df_estimate.step == 4


def test_a_trainer_without_the_refresh_callback_gets_one(tiny, tmp_path):
    config = tiny_config(tiny, steps=1, regularizer__kind="df_flops", regularizer__df=DF)
    trainer = Trainer(config, tmp_path / "out", examples=make_examples())
    assert [type(c) for c in trainer.callbacks] == [DocumentFrequencyRefresh]
    trainer.fit()
    assert _records(tmp_path / "out")[0]["df_refresh_step"] == 0


def _drop_regularizer_state(checkpoint: Path) -> None:
    state = torch.load(checkpoint / "trainer.pt", weights_only=True)
    state.pop("regularizer")
    torch.save(state, checkpoint / "trainer.pt")


def test_resume_with_df_flops_is_bit_identical(tiny, tmp_path):
    """Estimates after 0 and 3 updates; a run stopped after step 2 resumes with the step-0 estimate from its
    checkpoint and makes the step-3 one as the uninterrupted run did: the same computation, bit for bit.
    Without the saved estimate the resumed run would estimate again at once (after 2 updates) and differ."""
    config = tiny_config(
        tiny,
        steps=4,
        checkpoint_every=2,
        regularizer__kind="df_flops",
        regularizer__df={**DF, "refresh_every": 3},
        monitor__dense_fraction=0.9,
    )
    examples = make_examples()
    full = train(config, tmp_path / "full", examples=examples, show_progress=False)
    train(config, tmp_path / "resumed", examples=examples, show_progress=False, stop_after=2)
    saved = torch.load(tmp_path / "resumed" / "checkpoints" / "step-0000002" / "trainer.pt", weights_only=True)
    assert saved["regularizer"]["step"] == 0 and saved["regularizer"]["counts"].dtype == torch.int64
    resumed = train(config, tmp_path / "resumed", examples=examples, show_progress=False)
    a, b = _records(tmp_path / "full"), _records(tmp_path / "resumed")
    assert [r.get("df_refresh_step") for r in a] == [r.get("df_refresh_step") for r in b] == [0, None, None, 3]
    # exact by construction (test_train.test_exact_resume), the DF counts restored as saved
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    from safetensors.torch import load_file

    sa, sb = load_file(full.model_dir / "model.safetensors"), load_file(resumed.model_dir / "model.safetensors")
    assert all(torch.equal(sa[k], sb[k]) for k in sa)

    train(config, tmp_path / "lost", examples=examples, show_progress=False, stop_after=2)
    _drop_regularizer_state(tmp_path / "lost" / "checkpoints" / "step-0000002")
    train(config, tmp_path / "lost", examples=examples, show_progress=False)
    c = _records(tmp_path / "lost")
    assert [r.get("df_refresh_step") for r in c] == [0, None, 2, 3]
    assert c[2]["loss"] != a[2]["loss"]  # the saved state is what keeps the resume exact


def test_a_checkpoint_with_a_bad_regularizer_state_is_refused_by_name(tiny, tmp_path):
    config = tiny_config(tiny, steps=2, checkpoint_every=1, regularizer__kind="df_flops", regularizer__df=DF)
    train(config, tmp_path / "out", examples=make_examples(), show_progress=False, stop_after=1)
    path = tmp_path / "out" / "checkpoints" / "step-0000001" / "trainer.pt"
    state = torch.load(path, weights_only=True)
    state["regularizer"]["counts"] = torch.full((7,), 10**6, dtype=torch.int64)  # wrong size, beyond num_docs
    torch.save(state, path)
    with pytest.raises(DataFormatError, match="trainer.pt.*regularizer state"):
        train(config, tmp_path / "out", examples=make_examples(), show_progress=False)


# ----------------------------------------------------------------------------------- anti-zero
def _step(model_dir: Path, anti_zero: float, inference_free: bool = False):
    overrides = {"model__query_encoder": "inference-free"} if inference_free else {}
    config = tiny_config(model_dir, regularizer__anti_zero=anti_zero, **overrides)
    model, tokenizer, _ = load_model(config)
    examples = make_examples()
    if inference_free:
        attach_query_weights(model, tokenizer, examples, config)
    model.train()
    encoder = _Encoder(model, tokenizer, config, torch.device("cpu"))
    batch = global_batch(examples, 0, config.batch_size, config.data.num_negatives, config.seed)
    parts, tensors = train_step(encoder, batch, config, DistInfo(0, 1, 0), 0.01, 0.02)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return parts, tensors, grads, (model, encoder, batch, config)


def test_anti_zero_term_is_its_formula_in_the_loss_and_the_gradient(tiny):
    mu = 50.0
    parts, tensors, grads, (model, encoder, batch, config) = _step(tiny, mu)
    q, d = tensors["q"].double(), tensors["d"].double()
    want = mu / q.sum() ** 2 + mu / d.sum() ** 2  # naver/splade: 1/(Σ_i Σ_j w_ij)² per side
    assert parts["loss_anti_zero"] == pytest.approx(float(want), rel=RTOL)
    assert parts["loss"] == pytest.approx(
        parts["loss_rank"] + parts["loss_reg_q"] + parts["loss_reg_d"] + parts["loss_anti_zero"], rel=1e-6
    )
    off, _, grads_off, _ = _step(tiny, 0.0)
    assert off["loss_rank"] == parts["loss_rank"] and "loss_anti_zero" not in off
    # the gradient the term adds: autograd of μ/(Σq)² + μ/(Σd)² alone, through the same encoding
    model.zero_grad()
    q_new = encoder(encoder.tokens(batch.queries, config.model.query_max_length))
    d_new = encoder(encoder.tokens(batch.docs, config.model.doc_max_length))
    (mu / q_new.sum() ** 2 + mu / d_new.sum() ** 2).backward()
    added = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    scale = max(float(g.abs().max()) for g in grads.values())
    for name, g in added.items():
        # float32 gradients of two sums of ~10³ terms: differences below 1e-5 of the largest gradient
        torch.testing.assert_close(grads[name] - grads_off[name], g, rtol=1e-3, atol=1e-5 * scale, msg=name)
    assert max(float(g.abs().max()) for g in added.values()) > 1e-3 * scale  # the term does move the weights


def test_no_anti_zero_on_an_inference_free_query_side(tiny):
    mu = 50.0
    parts, tensors, _, _ = _step(tiny, mu, inference_free=True)
    d = tensors["d"].double()
    assert parts["loss_anti_zero"] == pytest.approx(float(mu / d.sum() ** 2), rel=RTOL)
