"""Gradient caching (``train.cached``, spladekit.train.cached): the gradients of every parameter equal
those of the uncached full batch, within a float32 bound derived below, with dropout on, the FLOPS
regulariser in the loss, the plain and the fused head, fp16 with a gradient scaler, and gradient
accumulation combined.

The reference ("uncached full batch") builds the graph of the whole batch at once and calls one
``backward`` on the loss. Its documents are encoded mini-batch by mini-batch (with the graph kept),
in the cached step's order from the same random state: dropout then draws the same masks as the
cached step's first pass, which is what makes the two comparable with dropout on (one encoding of
all B·G documents would draw its masks in another layout). Without dropout, the chunked reference
and a single encoding of the batch differ only by float32 rounding of the padded lengths
(``tests/train/test_trainer.py::test_gradient_accumulation_gives_the_same_losses``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spladekit.train import distributed as D  # noqa: E402
from spladekit.train.cached import mini_batch_bounds  # noqa: E402
from spladekit.train.data import global_batch  # noqa: E402
from spladekit.train.step import _Encoder, attach_query_weights, compute_loss, load_model, train_step  # noqa: E402
from tests.train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402

U = 2.0**-24  # float32 unit roundoff
LAMBDA_Q, LAMBDA_D = 0.05, 0.08  # large enough that the FLOPS terms weigh in the gradient


def gamma(n: int) -> float:
    """Higham's γ_n = n·u / (1 − n·u) (Accuracy and Stability of Numerical Algorithms, 2002, §3.1)."""
    return n * U / (1 - n * U)


@pytest.fixture(scope="module")
def dropout_model(tmp_path_factory) -> Path:
    # untied decoder: every parameter is used once per encoding (see assert_within_bound)
    return make_tiny_model(tmp_path_factory.mktemp("gc") / "model", dropout=0.1, tie=False)


def _setup(model_dir: Path, batch_size: int = 8, **overrides):
    config = tiny_config(model_dir, batch_size=batch_size, **overrides)
    model, tokenizer, _ = load_model(config)
    examples = make_examples()
    if config.model.query_encoder == "inference-free":
        attach_query_weights(model, tokenizer, examples, config)
    model.train()
    encoder = _Encoder(model, tokenizer, config, torch.device("cpu"))
    need_teacher = config.loss.kind != "infonce"
    batch = global_batch(examples, 0, batch_size, config.data.num_negatives, config.seed, need_teacher)
    return config, model, encoder, batch


def _params(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def cached_gradients(model_dir: Path, seed: int = 1, scale: float | None = None, **overrides):
    """Parameter gradients of one cached ``train_step`` (the trainer's own code)."""
    config, model, encoder, batch = _setup(model_dir, **overrides)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale) if scale is not None else None
    torch.manual_seed(seed)
    parts, tensors = train_step(encoder, batch, config, D.DistInfo(0, 1, 0), LAMBDA_Q, LAMBDA_D, scaler)
    return parts, tensors, {n: None if p.grad is None else p.grad.clone() for n, p in _params(model)}


def reference_gradients(model_dir: Path, seed: int = 1, scale: float = 1.0, **overrides):
    """The uncached full batch: one graph, one backward; also each mini-batch side's own contribution
    ``G_k = (∂v_k/∂θ)ᵀ ∂L/∂v_k`` (for the bound) and the vectors."""
    config, model, encoder, batch = _setup(model_dir, **overrides)
    m, g = config.model, batch.group
    mini = config.cached.mini_batch_size if config.cached is not None else None
    bounds = mini_batch_bounds(len(batch.queries), mini, config.grad_accum)
    torch.manual_seed(seed)
    vectors = []
    for lo, hi in bounds:  # the cached step's order: queries then documents of each mini-batch
        vectors.append(encoder.query(encoder.query_tokens(batch.queries[lo:hi], m.query_max_length)))
        vectors.append(encoder(encoder.tokens(batch.docs[lo * g : hi * g], m.doc_max_length)))
    q, d = torch.cat(vectors[0::2]), torch.cat(vectors[1::2])
    teacher = torch.tensor(batch.teacher, dtype=torch.float32) if batch.teacher is not None else None
    total, parts = compute_loss(q, d, teacher, g, config, LAMBDA_Q, LAMBDA_D)
    params = _params(model)
    if q.requires_grad:
        grad_q, grad_d = torch.autograd.grad(total * scale, [q, d], retain_graph=True)
    else:  # a frozen inference-free query side
        grad_q, (grad_d,) = torch.zeros_like(q), torch.autograd.grad(total * scale, [d], retain_graph=True)
    contributions = []  # one per (mini-batch, side): 2K terms reach each parameter (K when queries are frozen)
    q_at = d_at = 0
    for k, v in enumerate(vectors):
        if k % 2 == 0:
            gv, q_at = grad_q[q_at : q_at + len(v)], q_at + len(v)
        else:
            gv, d_at = grad_d[d_at : d_at + len(v)], d_at + len(v)
        if not v.requires_grad:  # a frozen inference-free query side: no term
            continue
        grads = torch.autograd.grad(v, [p for _, p in params], gv, retain_graph=True, allow_unused=True)
        contributions.append([torch.zeros_like(p) if gr is None else gr for (_, p), gr in zip(params, grads)])
    (total * scale).backward()
    full = {n: None if p.grad is None else p.grad.clone() for n, p in params}
    abs_sum = {n: sum(c[i].abs() for c in contributions) for i, (n, _) in enumerate(params)}
    return {
        "parts": {"loss": float(total.detach()), **parts},
        "grads": full,
        "abs_sum": abs_sum,
        "terms": len(contributions),
        "q": q.detach(),
        "d": d.detach(),
    }


def assert_within_bound(cached: dict, ref: dict) -> float:
    """Assert ``|cached − reference| ≤ 2·γ_{n−1}·Σ_k |G_k|`` elementwise (n = 2K terms) and return the
    largest ratio of the difference to the bound.

    Derivation. Both compute ``∂L/∂θ = Σ_k G_k`` over the K mini-batches' query and document sides
    (n = 2K terms; each parameter is used once per encoding, the test model's decoder being untied
    from the word embeddings, so G_k is exactly what one encoding adds to the parameter's gradient
    buffer; a tied matrix would receive two parts per encoding, which the two computations may
    group differently). Each term is computed identically in both: the same modules, shapes, inputs and
    random state, forward and backward, and the same loss gradient at the vectors, because the
    cached step's no-graph vectors equal the graph's (checked exactly by ``assert_same_vectors``:
    autograd records a graph but does not change the kernels; SpladeModel's threaded inference path
    is off in training mode). What differs is the order in which the n terms are added into the
    parameter's gradient: autograd's buffer in the reference, ``.grad`` accumulation mini-batch by
    mini-batch in the cached step. Any order of a float32 sum of n terms has
    ``|ŝ − s| ≤ γ_{n−1} Σ|G_k|`` (Higham 2002, eq. 4.4 and §4.2), so two orders differ by at most
    twice that. The fp16 loss scale is a power of two: scaling is exact and adds nothing.
    """
    worst = 0.0
    factor = 2 * gamma(ref["terms"] - 1)
    assert set(cached) == set(ref["grads"])
    for name, expected in ref["grads"].items():
        if expected is None:  # a parameter the SPLADE vectors do not use (the untied model's spare MLM bias)
            assert cached[name] is None, name
            continue
        bound = factor * ref["abs_sum"][name]
        diff = (cached[name] - expected).abs()
        assert bool((diff <= bound).all()), f"{name}: max excess {float((diff - bound).max()):.3g}"
        if float(bound.max()) > 0:
            worst = max(worst, float((diff / bound.clamp_min(1e-30)).max()))
    return worst


def assert_same_vectors(tensors: dict, ref: dict) -> None:
    # exact by construction: the same forward on the same inputs with the same random state, once
    # under no_grad (the cached step's first pass) and once with the graph (the reference)
    assert torch.equal(tensors["q"], ref["q"]) and torch.equal(tensors["d"], ref["d"])


@pytest.mark.parametrize("head", ["plain", "fused"])
def test_cached_gradients_equal_the_full_batch_with_dropout_and_flops(dropout_model, head, monkeypatch):
    settings = dict(model__head_impl=head, cached={"mini_batch_size": 3})  # 8 queries: mini-batches 3, 3, 2
    parts, tensors, cached = cached_gradients(dropout_model, **settings)
    ref = reference_gradients(dropout_model, **settings)
    assert_same_vectors(tensors, ref)
    assert ref["terms"] == 6
    for key in ("loss", "loss_rank", "reg_q", "reg_d"):  # the whole batch's loss and FLOPS terms
        assert parts[key] == ref["parts"][key], key  # exact: the same vectors into the same loss code
    assert parts["loss_reg_d"] > 0.01 * parts["loss"]  # the FLOPS term is a real part of the gradient
    assert_within_bound(cached, ref)

    # the bound is tight enough to catch a wrong replay: re-encoding without the saved random state
    # draws other dropout masks, and the gradients leave the bound by orders of magnitude
    import spladekit.train.cached as cached_module

    config, model, encoder, batch = _setup(dropout_model, **settings)
    monkeypatch.setattr(cached_module.RandomState, "__enter__", lambda self: self)  # no replay
    monkeypatch.setattr(cached_module.RandomState, "__exit__", lambda self, *exc: None)
    torch.manual_seed(1)
    train_step(encoder, batch, config, D.DistInfo(0, 1, 0), LAMBDA_Q, LAMBDA_D)
    with pytest.raises(AssertionError):
        assert_within_bound({n: p.grad for n, p in _params(model)}, ref)


def test_cached_with_accumulation_margin_mse_and_fp16_scaler(dropout_model):
    # grad_accum 2 cuts the 8 queries in 4 + 4, mini_batch_size 3 each part in 3 + 1: four mini-batches
    assert mini_batch_bounds(8, 3, 2) == [(0, 3), (3, 4), (4, 7), (7, 8)]
    settings = dict(
        model__head_impl="fused",
        cached={"mini_batch_size": 3},
        grad_accum=2,
        precision="fp16",
        loss={"kind": "margin_mse"},
    )
    scale = 2.0**10
    parts, tensors, cached = cached_gradients(dropout_model, scale=scale, **settings)
    ref = reference_gradients(dropout_model, scale=scale, **settings)  # same autocast: the encoder's own
    assert_same_vectors(tensors, ref)
    assert ref["terms"] == 8
    assert parts["loss"] == ref["parts"]["loss"]  # exact: the same vectors into the same loss code
    assert_within_bound(cached, ref)


@pytest.mark.parametrize("trained", [True, False])
def test_cached_inference_free_query_side(dropout_model, trained):
    # the bag-of-tokens query side: trained jointly (its θ gets a gradient) or frozen (no graph on
    # the query side: only the documents are re-encoded and back-propagated)
    settings = dict(
        model__query_encoder="inference-free", model__train_query_weights=trained, cached={"mini_batch_size": 3}
    )
    parts, tensors, cached = cached_gradients(dropout_model, **settings)
    ref = reference_gradients(dropout_model, **settings)
    assert_same_vectors(tensors, ref)
    assert any("query_weights" in name for name in cached) == trained
    assert_within_bound(cached, ref)


def test_mini_batch_bounds_and_config():
    assert mini_batch_bounds(8, None) == [(0, 8)]
    assert mini_batch_bounds(8, 8) == [(0, 8)] == mini_batch_bounds(8, 100)
    assert mini_batch_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert mini_batch_bounds(6, None, 3) == [(0, 2), (2, 4), (4, 6)]
    with pytest.raises(ValueError, match="accumulation"):
        mini_batch_bounds(7, 2, 2)
    from spladekit.errors import DataFormatError
    from spladekit.train.config import load_config

    assert load_config(None, ["cached.mini_batch_size=16"]).cached.mini_batch_size == 16
    assert load_config(None).cached is None
    with pytest.raises(DataFormatError, match="cached"):
        load_config(None, ["cached.mini_batch_size=0"])


def test_cached_training_logs_the_same_records(tmp_path):
    # a short train() run: the logged loss parts, FLOPS, active terms and monitoring statistics are
    # those of the whole batch, as without caching (no dropout: the uncached step encodes at once)
    from spladekit.train import train

    model_dir = make_tiny_model(tmp_path / "model")
    examples = make_examples()
    train(tiny_config(model_dir, steps=2), tmp_path / "plain", examples=examples, show_progress=False)
    train(
        tiny_config(model_dir, steps=2, cached={"mini_batch_size": 1}),
        tmp_path / "cached",
        examples=examples,
        show_progress=False,
    )
    import json

    read = lambda p: [json.loads(x) for x in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    a, b = read(tmp_path / "plain"), read(tmp_path / "cached")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2]
    for x, y in zip(a, b):
        # rel 1e-4: the uncached step pads the 4 queries to one length, the cached one each alone;
        # the float32 products of the backbone then round differently (relative ~1e-6 per value),
        # carried through one AdamW step (lr 1e-3) into step 2
        for key in ("loss", "loss_rank", "reg_q", "reg_d", "grad_norm", "batch_flops", "margin", "logit_max"):
            assert y[key] == pytest.approx(x[key], rel=1e-4), key
        # exact: counts of weights > 0; the tiny model's max logits sit ≥ 0.8 above 0 (bias +1)
        assert (y["active_q"], y["active_d"]) == (x["active_q"], x["active_d"])
    assert (tmp_path / "cached" / "config.yaml").read_text().count("mini_batch_size: 1") == 1


def test_with_dropout_a_cached_run_is_another_draw_of_the_noise(dropout_model, tmp_path):
    """What docs/training.md states: the logged losses of a mini-batch-1 run equal an uncached run's only
    without dropout (test_cached_training_logs_the_same_records, rel 1e-4); with dropout each mini-batch
    draws its own masks, so step 1's loss leaves that tolerance (the same data, weights and seed)."""
    import json

    from spladekit.train import train

    examples = make_examples()
    for name, extra in (("plain", {}), ("cached", {"cached": {"mini_batch_size": 1}})):
        train(tiny_config(dropout_model, steps=1, **extra), tmp_path / name, examples=examples, show_progress=False)
    plain, cached = (
        json.loads((tmp_path / n / "metrics.jsonl").read_text().splitlines()[0]) for n in ("plain", "cached")
    )
    assert cached["loss"] != pytest.approx(plain["loss"], rel=1e-4)
    text = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    assert "Without dropout the loss and gradients are those of the\n  uncached batch" in text
