"""Training inputs refused before the first step (found by a bad-input review): distillation groups that
cannot be completed with teacher scores, and max lengths above the model's positions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from train_helpers import make_examples, make_tiny_model, tiny_config  # noqa: E402

from spladekit.errors import DataFormatError  # noqa: E402
from spladekit.train import train  # noqa: E402
from spladekit.train.data import check_distillation, global_batch  # noqa: E402


def test_distillation_with_too_few_scored_negatives_is_refused_before_out(tmp_path):
    """3 hard negatives a query and num_negatives 4: global_batch would complete each group with another
    query's positive, which has no teacher score for it, and fail at a step; train refuses first, naming
    the data and the field, and writes nothing."""
    model = make_tiny_model(tmp_path / "m")
    examples = make_examples(n=8, negatives=3)
    config = tiny_config(model, loss__kind="margin_mse", data__num_negatives=4, data__path="mined/dataset")
    with pytest.raises(ValueError, match="teacher scores for every sampled document"):  # what the step would do
        global_batch(examples, 0, 4, 4, 0, need_teacher=True)
    out = tmp_path / "out"
    with pytest.raises(DataFormatError, match=r"mined/dataset: field 'data.num_negatives': query 'q\d+' has 3 hard "
                                              r"negatives, data.num_negatives is 4 \(8 queries have fewer\)"):
        train(config, out, examples=examples, show_progress=False)
    assert not out.exists()
    check_distillation(examples, 3, "ok")  # 3 scored negatives each: nothing to say


def test_distillation_with_an_unscored_negative_is_refused(tmp_path):
    examples = make_examples(n=4, negatives=3)
    del examples[2].teacher[examples[2].negatives[1][0]]
    with pytest.raises(DataFormatError, match=r"scores.pkl: query 'q2' has no teacher score for document 'n2-1'"):
        check_distillation(examples, 2, "scores.pkl")
    examples[2].teacher = None
    with pytest.raises(DataFormatError, match="query 'q2' has no teacher score for document 'p2'"):
        check_distillation(examples, 2, "scores.pkl")


def test_infonce_pads_short_groups_as_before(tmp_path):
    """The check is for distillation only: InfoNCE completes short groups with random positives."""
    examples = make_examples(n=8, negatives=1)
    batch = global_batch(examples, 0, 4, 3, 0, need_teacher=False)
    assert batch.group == 4 and len(batch.docs) == 16


def test_doc_max_length_above_the_model_positions_is_refused(tmp_path):
    """The tiny model has 64 positions (make_tiny_model); doc_max_length 256 made transformers fail at the
    first step with a tensor-size error; now the field and the limit are named."""
    import json

    model = make_tiny_model(tmp_path / "m")
    limit = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    config = tiny_config(model, model__doc_max_length=limit + 1)
    with pytest.raises(DataFormatError, match=rf"config\.json: field 'max_position_embeddings': model.doc_max_length "
                                              rf"{limit + 1} exceeds the model's {limit} positions"):
        train(config, tmp_path / "out", examples=make_examples(n=8), show_progress=False)
