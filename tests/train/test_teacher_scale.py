"""The teacher-score scale check of MarginMSE / KL distillation at the first step."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from spladekit.train.monitor import score_scale_check
from tests.train_helpers import make_examples, make_tiny_model, tiny_config


def _one_query(pos: float, neg: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q = e_0, documents pos·e_0 and neg·e_0: student scores exactly ``pos`` and ``neg``."""
    return torch.tensor([[1.0, 0.0]]), torch.tensor([[pos, 0.0], [neg, 0.0]])


def test_issue_3540_numbers_warn_with_both_scales():
    q, d = _one_query(20.0, 12.0)  # sentence-transformers #3540: student 20 / 12, teacher 0.9 / 0.1
    stats, message = score_scale_check(q, d, torch.tensor([[0.9, 0.1]]))
    assert stats["student_score_spread"] == 8.0  # 20 − 12, exact in floating point
    assert stats["teacher_score_spread"] == pytest.approx(0.8, abs=1e-7)  # 0.9 − 0.1 in float32
    assert stats["score_scale_ratio"] == pytest.approx(10.0, rel=1e-6)
    assert message is not None
    for number in ("12…20", "0.1…0.9", "8", "0.8"):
        assert number in message, message


def test_matched_scales_do_not_warn():
    q, d = _one_query(20.0, 12.0)
    logit = math.log(9.0)  # the teacher's logits for probabilities 0.9 / 0.1: ±ln 9
    stats, message = score_scale_check(q, d, torch.tensor([[logit, -logit]]))
    assert message is None
    assert stats["score_scale_ratio"] == pytest.approx(8.0 / (2 * logit), rel=1e-6)  # 1.82
    # the threshold either way: a teacher 4.5× wider also warns
    assert score_scale_check(q, d, torch.tensor([[36.0, 0.0]]))[1] is not None


def test_constant_teacher_and_empty_student():
    q, d = _one_query(20.0, 12.0)
    assert "constant" in score_scale_check(q, d, torch.tensor([[0.5, 0.5]]))[1]
    stats, message = score_scale_check(torch.zeros(1, 2), d, torch.tensor([[0.9, 0.1]]))
    assert message is None and stats["score_scale_ratio"] is None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-scale") / "model")


def _student_teacher(model_dir: Path, examples, factor: float):
    """Teacher scores = ``factor`` × the untrained student's own dot products (computed here, apart
    from the loop), so the expected ratio of spreads is exactly 1 / factor."""
    from spladekit.model.encoder import SpladeEncoder

    enc = SpladeEncoder.from_pretrained(
        model_dir, head_impl="plain", device="cpu", query_max_length=16, doc_max_length=24
    )
    out = []
    for e in examples:
        docs = e.positives + e.negatives
        qv = enc.encode_queries([e.query])
        dv = enc.encode_documents([t for _, t in docs])
        scores = (qv @ dv.T).toarray()[0]
        e.teacher = {doc_id: factor * float(s) for (doc_id, _), s in zip(docs, scores)}
        out.append(e)
    return out


@pytest.mark.parametrize("kind", ["margin_mse", "kl"])
def test_the_loop_checks_the_first_step(tiny, tmp_path, kind):
    from spladekit.train import train

    for factor, warns in ((1.0, False), (0.01, True)):
        examples = _student_teacher(tiny, make_examples(8, negatives=2, seed=1), factor)
        config = tiny_config(tiny, steps=2, loss__kind=kind, regularizer__lambda_q=0.0, regularizer__lambda_d=0.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = train(config, tmp_path / f"{kind}-{factor}", examples=examples, show_progress=False)
        fired = [str(w.message) for w in caught if "another scale" in str(w.message)]
        assert bool(fired) == warns, fired
        import json

        first = json.loads((result.metrics_path).read_text().splitlines()[0])
        # the student's first-step scores are those of the untrained model: ratio 1/factor (float32 sums)
        assert first["score_scale_ratio"] == pytest.approx(1.0 / factor, rel=1e-4)
        assert first["teacher_score_spread"] == pytest.approx(factor * first["student_score_spread"], rel=1e-4)
        assert any("another scale" in a for a in result.alarms) == warns
