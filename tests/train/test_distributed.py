"""Data parallelism on the CPU (gloo, 2 processes): same loss and gradients as 1 process on the
same global batch, including the global-batch FLOPS term and in-batch negatives, also with
accumulation and with gradient caching (``cached``) over the gathered vectors; DF-FLOPS' document
frequencies counted by shards and summed equal one process's count."""

from __future__ import annotations

import json
import socket

import pytest
import torch

from tests.train_helpers import ddp_worker, document_frequencies, make_examples, make_tiny_model, one_step, tiny_config  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_gloo_processes_match_one(tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    model_dir = make_tiny_model(tmp_path / "model")
    df_model = make_tiny_model(tmp_path / "model-df", bias=-0.1)  # about 60 % of the terms active: counts spread
    mp.spawn(ddp_worker, args=(2, _free_port(), str(model_dir), str(tmp_path), str(df_model)), nprocs=2, join=True)

    single = one_step(model_dir, grad_accum=1)
    for saved in ("step.pt", "step-cached.pt"):  # grad_accum 2; cached.mini_batch_size 1 (2 mini-batches per process)
        double = torch.load(tmp_path / saved, weights_only=False)
        for key in ("loss", "loss_rank", "reg_q", "reg_d"):
            assert double["parts"][key] == pytest.approx(single["parts"][key], rel=1e-5), (saved, key)
        assert set(double["grads"]) == set(single["grads"])
        for name, grad in single["grads"].items():
            torch.testing.assert_close(double["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{saved}: {name}")

    from spladekit.train import train

    train(tiny_config(model_dir, steps=1), tmp_path / "one", examples=make_examples(), show_progress=False)
    read = lambda p: [json.loads(x) for x in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    a, b = read(tmp_path / "one"), read(tmp_path / "run")
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=1e-5)
    # exact: counts of weights > 0, and every max logit of this tiny model sits ≥ 0.8 above 0 (its
    # bias is +1), far beyond the float32 rounding (~1e-6) that could flip a term between the two runs
    assert [r["active_d"] for r in b] == [r["active_d"] for r in a]
    assert (tmp_path / "run" / "checkpoints" / "step-0000001" / "rng-1.pt").exists()

    # DF-FLOPS' estimate: each process encodes its share of the sample (other batches, other padding), the
    # counts are summed. Exact: a term flips only if its largest logit lies within float32 rounding (~1e-8)
    # of 0; of this model's 48 × 155 maxima, spread over ~0.2, that is a chance of order 1e-4.
    two_counts, two_docs = torch.load(tmp_path / "df-counts.pt", weights_only=True)
    one_counts, one_docs = document_frequencies(df_model, encode_batch_size=1000)
    assert two_docs == one_docs == 48 and torch.equal(two_counts, one_counts)
    assert 0 < int((0 < one_counts).sum()) and int(((one_counts > 0) & (one_counts < 48)).sum()) > 20
