"""One model loader, one guard: every path that loads a masked-LM refuses a checkpoint without MLM-head
weights (a saved ``BertModel``), unless ``model.allow_random_head``; one rescale specification."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from spladekit.errors import HeadNotFoundError
from tests.train_helpers import make_examples, make_tiny_model, tiny_config

NEEDLE = "no MLM-head weights"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    """``(complete masked-LM folder, backbone-only folder of the same architecture)``."""
    from transformers import BertConfig, BertModel

    root = tmp_path_factory.mktemp("loading")
    good = make_tiny_model(root / "mlm")
    backbone = root / "backbone"
    BertModel(BertConfig.from_pretrained(good)).save_pretrained(backbone)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (good / name).exists():
            shutil.copy(good / name, backbone / name)
    return good, backbone


def test_loader_reports_missing_head_weights(models):
    from spladekit.model.encoder import load_masked_lm, load_masked_lm_and_tokenizer

    good, backbone = models
    with pytest.raises(HeadNotFoundError, match=NEEDLE) as err:
        load_masked_lm(str(backbone))
    assert "model.allow_random_head" in str(err.value)  # the error names the opt-in
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a complete checkpoint loads without the random-head warning
        load_masked_lm(str(good))
    with pytest.warns(RuntimeWarning, match=NEEDLE):
        mlm, tokenizer = load_masked_lm_and_tokenizer(str(backbone), allow_random_head=True)
    assert mlm.config.vocab_size == len(tokenizer)


def test_training_refuses_a_random_head_unless_asked(models, tmp_path):
    from spladekit.train import train
    from spladekit.train.step import load_model

    good, backbone = models
    with pytest.raises(HeadNotFoundError, match=NEEDLE):
        load_model(tiny_config(backbone))
    with pytest.raises(HeadNotFoundError, match=NEEDLE):
        train(tiny_config(backbone, steps=1), tmp_path / "refused", examples=make_examples(), show_progress=False)
    assert not (tmp_path / "refused" / "model").exists()  # no model trained from a random head
    with pytest.warns(RuntimeWarning, match=NEEDLE):
        result = train(
            tiny_config(backbone, steps=1, model__allow_random_head=True),
            tmp_path / "opt-in",
            examples=make_examples(),
            show_progress=False,
        )
    assert result.model_dir is not None and result.model_dir.is_dir()
    load_model(tiny_config(good))


def test_train_cli_refuses_a_backbone(models, tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    _, backbone = models
    triples = tmp_path / "triples.tsv"
    triples.write_text("w1 w2\tw1 w2 w3\tw9 w8\n", encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--out",
            str(out),
            "--no-progress",
            "--set",
            f"model.path={backbone}",
            "--set",
            "data.format=triples",
            "--set",
            f"data.path={triples}",
            "--set",
            "steps=1",
            "--set",
            "batch_size=1",
        ],
    )
    assert result.exit_code == 2, result.output
    assert NEEDLE in result.output and "Traceback" not in result.output
    assert not (out / "model").exists()


def test_reproduce_runner_refuses_a_backbone(models, tmp_path):
    from spladekit.reproduce.cells import SpladekitRunner
    from spladekit.reproduce.config import BackboneSpec

    _, backbone = models
    runner = SpladekitRunner(show_progress=False)
    with pytest.raises(HeadNotFoundError, match=NEEDLE):  # inflate loads the model
        runner.prepare_backbone(BackboneSpec(name="b", path=str(backbone), inflate=2.0), None, tmp_path / "b")
    with pytest.raises(HeadNotFoundError, match=NEEDLE):  # each cell loads its base model
        runner.init_cell(None, str(backbone), None, tmp_path / "c")


def test_calibration_and_encoder_refuse_a_backbone(models, tmp_path):
    from spladekit.model.calibrate.outputs import RescaleConfig, run_rescale
    from spladekit.model.calibrate.rescale import reference_row_norm
    from spladekit.model.encoder import SpladeEncoder

    good, backbone = models
    with pytest.raises(HeadNotFoundError, match=NEEDLE):
        SpladeEncoder.from_pretrained(backbone)
    with pytest.raises(HeadNotFoundError, match=NEEDLE):
        run_rescale(RescaleConfig(model=str(backbone), factor=0.5), tmp_path / "r")
    assert not (tmp_path / "r").exists()
    with pytest.raises(HeadNotFoundError, match=NEEDLE):
        reference_row_norm(str(backbone))


# ------------------------------------------------------------------------------------ one rescale spec
def test_one_rescale_spec_everywhere():
    from spladekit.model.calibrate import RescaleSpec
    from spladekit.model.calibrate.outputs import RescaleConfig as CliRescale
    from spladekit.reproduce.config import TreatmentSpec
    from spladekit.train.config import TrainRescaleConfig as TrainRescale

    train_spec = TrainRescale(factor=0.25)
    assert isinstance(train_spec, RescaleSpec) and train_spec.mode == "factor"
    treatment = TreatmentSpec(name="t", rescale={"mode": "factor", "factor": 0.25})
    assert type(treatment.rescale) is RescaleSpec
    cli_spec = CliRescale(model="m", factor=0.25).spec()
    expected = {"mode": "factor", "factor": 0.25, "scale_bias": False, "force": False}
    for spec in (train_spec, treatment.rescale, cli_spec):
        assert spec.kwargs() == expected
    assert CliRescale(model="m", match_norm="1.5").spec().kwargs()["reference"] == 1.5  # a number, not a model id
    target = RescaleSpec(mode="target_logit", target=3.0, statistic="std").kwargs(None, ["a"], {"max_length": 8})
    assert target == {
        "mode": "target_logit",
        "target": 3.0,
        "statistic": "std",
        "tokenizer": None,
        "texts": ["a"],
        "scale_bias": False,
        "force": False,
        "calibration": {"max_length": 8},
    }
    with pytest.raises(ValueError, match="needs 'target'"):
        RescaleSpec(mode="target_logit")
    with pytest.raises(ValueError, match="needs 'reference'"):
        TrainRescale(mode="match_norm")


def test_spec_apply_scales_the_decoder(models):
    from spladekit.model.calibrate import RescaleSpec
    from spladekit.model.encoder import load_masked_lm
    from spladekit.model.heads import find_mlm_head

    good, _ = models
    mlm = load_masked_lm(str(good))
    before = find_mlm_head(mlm).weight.detach().clone()
    bias = find_mlm_head(mlm).bias.detach().clone()
    assert RescaleSpec(factor=0.5).apply(mlm) == 0.5
    # ×0.5 is exact in binary floating point, so equality holds by construction
    assert torch.equal(find_mlm_head(mlm).weight.detach(), before * 0.5)
    assert torch.equal(find_mlm_head(mlm).bias.detach(), bias)  # scale_bias=False
    assert RescaleSpec().apply(mlm) is None


def test_a_folder_with_its_own_code_is_refused_before_anything_runs(models, tmp_path):
    """config.json mapping the model to the folder's own modeling_evil.py (auto_map), whose import writes
    a marker: refused without trust_remote_code naming config.json, the auto_map entry, the class, its file
    and the flag, before transformers would import it (or ask on the terminal); the same in
    tokenizer_config.json; the judge: transformers with trust_remote_code=True runs it."""
    import json
    import os
    import subprocess
    import sys

    from spladekit.errors import UnsupportedModelError
    from spladekit.model.encoder import SpladeEncoder

    good, _ = models
    folder, marker = tmp_path / "custom", tmp_path / "marker"
    shutil.copytree(good, folder)
    (folder / "modeling_evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "from transformers import BertForMaskedLM as EvilForMaskedLM\n"
    )
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "auto_map": {"AutoModelForMaskedLM": "modeling_evil.EvilForMaskedLM"}})
    )
    with pytest.raises(
        UnsupportedModelError,
        match=r"config.json: field 'auto_map.AutoModelForMaskedLM': .*'EvilForMaskedLM' "
        r"\(modeling_evil.EvilForMaskedLM\) is code from modeling_evil.py .*--trust-remote-code",
    ):
        SpladeEncoder.from_pretrained(str(folder))
    assert not marker.exists()
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({**tokenizer, "auto_map": {"AutoTokenizer": [None, "tokenization_evil.Evil"]}})
    )
    with pytest.raises(
        UnsupportedModelError,
        match=r"tokenizer_config.json: field 'auto_map.AutoTokenizer': .*'Evil' .*--trust-remote-code",
    ):
        SpladeEncoder.from_pretrained(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (folder / "config.json").write_text(
        json.dumps({**config, "auto_map": {"AutoModelForMaskedLM": "modeling_evil.EvilForMaskedLM"}})
    )
    # the judge: transformers with trust_remote_code=True runs the code (in another process: it registers
    # the folder's class for BERT configs in this process's auto classes)
    judge = f"from transformers import AutoModelForMaskedLM; AutoModelForMaskedLM.from_pretrained({str(folder)!r}, trust_remote_code=True)"
    subprocess.run(
        [sys.executable, "-c", judge],
        check=True,
        capture_output=True,
        timeout=300,
        env=dict(os.environ, HF_MODULES_CACHE=str(tmp_path / "modules")),
    )
    assert marker.exists()


def test_pickled_weights_that_would_run_code_are_refused(models, tmp_path):
    """pytorch_model.bin holding an object whose __reduce__ runs a command: torch's weights_only loader
    (transformers') refuses it naming the file; the command never runs; torch.load without it would run it."""
    import os

    from spladekit.errors import DataFormatError
    from spladekit.model.encoder import SpladeEncoder

    good, _ = models
    folder, marker = tmp_path / "pickled", tmp_path / "marker"
    shutil.copytree(good, folder)
    (folder / "model.safetensors").unlink()

    class WritesMarker:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    torch.save({"bert.embeddings.word_embeddings.weight": WritesMarker()}, folder / "pytorch_model.bin")
    with pytest.raises(DataFormatError, match=r"pytorch_model.bin: cannot read the model's weights \(UnpicklingError"):
        SpladeEncoder.from_pretrained(str(folder))
    assert not marker.exists()
    torch.load(folder / "pytorch_model.bin", weights_only=False)  # the judge
    assert marker.exists()
