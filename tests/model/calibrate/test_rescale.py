"""MLM-head diagnosis and rescaling (arXiv 2606.18811): every claim checked against explicit W·h + b."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf

from spladekit.model.calibrate import (
    AlreadyRescaledError,
    CalibrationError,
    calibrated_factor,
    diagnose_mlm_head,
    match_norm_factor,
    rescale_mlm_head,
    rescale_record,
)
from spladekit.model.calibrate.stats import parse_statistic, quantile
from spladekit.model.heads import find_mlm_head
from tests.mlm_families import FAMILIES, TEXTS, batch, tiny_mlm, tiny_tokenizer


# ---------------------------------------------------------------------------------------------- helpers
def snapshot(model):
    """Clones of W, b and the input embeddings, before anything changes."""
    head = find_mlm_head(model)
    return {
        "W": head.weight.detach().clone().double(),
        "b": None if head.bias is None else head.bias.detach().clone().double(),
        "E": model.get_input_embeddings().weight.detach().clone(),
        "backbone": {k: v.detach().clone() for k, v in head.backbone.state_dict().items()},
    }


def transformed_hidden(model, inputs):
    """h = transform(backbone(x)) [B, L, H'] in float64 (the decoder input)."""
    head = find_mlm_head(model)
    with torch.no_grad():
        return head.transform(head.backbone(**inputs, return_dict=True).last_hidden_state).double()


def expected_logits(h, W, b, factor, scale_bias):
    """F·(W h) + b, or F·(W h + b): the paper's eq. 3, computed by hand."""
    logits = factor * torch.einsum("blh,vh->blv", h, W)
    if b is not None:
        logits = logits + (factor * b if scale_bias else b)
    return logits


def model_logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits.double()


def token_logits(model, tokenizer, texts=TEXTS):
    """Explicit logits [N_tokens, V] of all non-padding tokens from W, b, h (no sampling)."""
    inputs = batch(tokenizer, texts)
    head = find_mlm_head(model)
    h = transformed_hidden(model, inputs)[inputs["attention_mask"].bool()]
    logits = h @ head.weight.detach().double().T
    if head.bias is not None:
        logits = logits + head.bias.detach().double()
    return logits.numpy()


# ---------------------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_quantile_matches_numpy(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    for q in (0.0, 0.01, 0.5, 0.9, 0.99, 1.0):
        assert quantile(x, q) == pytest.approx(float(np.quantile(x.double().numpy(), q)), rel=1e-12, abs=1e-12)


def test_statistic_names():
    assert parse_statistic("p99") == ("percentile", 0.99)
    assert parse_statistic("p99.9")[1] == pytest.approx(0.999)
    for bad in ("median", "p", "p101", "99"):
        with pytest.raises(ValueError, match="unknown logit statistic"):
            parse_statistic(bad)


# ---------------------------------------------------------------------------------------------- rescale
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scale_bias", [False, True])
def test_rescale_factor_all_families(family, scale_bias):
    model = tiny_mlm(family)
    inputs = batch(tiny_tokenizer())
    before = snapshot(model)
    h = transformed_hidden(model, inputs)
    factor = 0.37
    assert rescale_mlm_head(model, factor=factor, scale_bias=scale_bias) == factor
    mask = inputs["attention_mask"].bool()
    expected = expected_logits(h, before["W"], before["b"], factor, scale_bias)
    torch.testing.assert_close(model_logits(model, inputs)[mask], expected[mask], rtol=1e-5, atol=1e-5)
    # the input embeddings and the backbone are bit-identical; the decoder is untied
    assert torch.equal(model.get_input_embeddings().weight, before["E"])
    head = find_mlm_head(model)
    for key, value in head.backbone.state_dict().items():
        assert torch.equal(value, before["backbone"][key]), key
    assert head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    assert model.config.tie_word_embeddings is False
    # tie_weights() (as called by resize_token_embeddings, accelerate...) must not re-tie
    model.tie_weights()
    assert torch.equal(model.get_input_embeddings().weight, before["E"])
    torch.testing.assert_close(find_mlm_head(model).weight.double(), factor * before["W"])


def test_bert_bias_alias_is_split_and_kept_equal():
    model = tiny_mlm("bert")
    assert model.cls.predictions.bias is model.cls.predictions.decoder.bias
    rescale_mlm_head(model, factor=2.0, scale_bias=True)
    assert model.cls.predictions.bias is not model.cls.predictions.decoder.bias
    assert torch.equal(model.cls.predictions.bias, model.cls.predictions.decoder.bias)
    assert rescale_record(model)["history"][0]["untied"] == [
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_saved_model_reloads_with_transformers_and_spladekit(family, tmp_path):
    from spladekit.model.encoder import SpladeEncoder
    from spladekit.model.splade import SpladeModel

    model = tiny_mlm(family)
    tokenizer = tiny_tokenizer()
    inputs = batch(tokenizer)
    before = snapshot(model)
    h = transformed_hidden(model, inputs)
    rescale_mlm_head(model, factor=4.0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert config["spladekit_rescale"]["total_factor"] == 4.0

    reloaded = tf.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.get_input_embeddings().weight, before["E"])
    mask = inputs["attention_mask"].bool()
    expected = expected_logits(h, before["W"], before["b"], 4.0, False)
    torch.testing.assert_close(model_logits(reloaded, inputs)[mask], expected[mask], rtol=1e-5, atol=1e-5)
    # exact by construction: the reloaded weights are the saved float32 tensors, through the same
    # forward on the same inputs in this process
    torch.testing.assert_close(model_logits(reloaded, inputs), model_logits(model, inputs), rtol=0, atol=0)
    assert rescale_record(reloaded) == rescale_record(model)

    encoder = SpladeEncoder.from_pretrained(tmp_path, head_impl="plain", device="cpu")
    with torch.no_grad():
        in_memory = SpladeModel(model, head_impl="plain")(inputs["input_ids"], inputs["attention_mask"])
    vectors = encoder.encode(TEXTS, max_length=64).toarray()
    np.testing.assert_allclose(vectors, in_memory.numpy(), rtol=1e-5, atol=1e-6)
    # SPLADE weights from the explicit logits: max over real tokens of log(1 + ReLU(z))
    explicit = torch.log1p(torch.relu(expected.masked_fill(~mask.unsqueeze(-1), -1e9))).amax(dim=1)
    np.testing.assert_allclose(vectors, explicit.numpy(), rtol=1e-4, atol=1e-5)


def test_second_rescale_refused_unless_forced_then_compounds():
    model = tiny_mlm("roberta")
    inputs = batch(tiny_tokenizer())
    before = snapshot(model)
    h = transformed_hidden(model, inputs)
    rescale_mlm_head(model, factor=0.5)
    with pytest.raises(AlreadyRescaledError, match="force"):
        rescale_mlm_head(model, factor=0.5)
    torch.testing.assert_close(find_mlm_head(model).weight.double(), 0.5 * before["W"])  # refusal changed nothing
    rescale_mlm_head(model, factor=3.0, scale_bias=True, force=True)
    record = rescale_record(model)
    assert [step["factor"] for step in record["history"]] == [0.5, 3.0]
    assert [step["forced"] for step in record["history"]] == [False, True]
    assert record["total_factor"] == pytest.approx(1.5) and record["total_bias_factor"] == pytest.approx(3.0)
    assert record["history"][1]["norms_before"]["row_norm_mean"] == pytest.approx(
        record["history"][0]["norms_after"]["row_norm_mean"]
    )
    # z = 3·(0.5·W h + b)
    mask = inputs["attention_mask"].bool()
    expected = 3.0 * (0.5 * torch.einsum("blh,vh->blv", h, before["W"]) + before["b"])
    torch.testing.assert_close(model_logits(model, inputs)[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_rescale_through_a_splade_model_wrapper():
    from spladekit.model.splade import SpladeModel

    model = tiny_mlm("xlm-roberta")
    W = find_mlm_head(model).weight.detach().double().clone()
    wrapper = SpladeModel(model, head_impl="plain")
    assert rescale_mlm_head(wrapper, factor=0.2) == 0.2
    torch.testing.assert_close(wrapper.head.weight.double(), 0.2 * W)
    assert rescale_record(wrapper) == rescale_record(model)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_invalid_factor(bad):
    with pytest.raises(ValueError, match="finite and > 0"):
        rescale_mlm_head(tiny_mlm("bert"), factor=bad)


def test_mode_arguments_are_checked():
    model = tiny_mlm("bert")
    with pytest.raises(ValueError, match="unknown rescaling mode"):
        rescale_mlm_head(model, factor=2.0, mode="double")
    with pytest.raises(ValueError, match="needs reference"):
        rescale_mlm_head(model, mode="match_norm")
    with pytest.raises(ValueError, match="needs target"):
        rescale_mlm_head(model, mode="target_logit", target=1.0)
    with pytest.raises(ValueError, match="do not pass factor"):
        rescale_mlm_head(model, factor=2.0, mode="match_norm", reference=1.0)
    assert rescale_record(model) is None


def test_match_norm_to_a_number_and_to_a_model():
    model = tiny_mlm("bert")
    rows = lambda m: np.linalg.norm(find_mlm_head(m).weight.detach().double().numpy(), axis=1)  # noqa: E731
    own = rows(model).mean()
    assert match_norm_factor(model, 2.0) == pytest.approx(2.0 / own)
    factor = rescale_mlm_head(model, mode="match_norm", reference=2.0)
    assert factor == pytest.approx(2.0 / own)
    assert rows(model).mean() == pytest.approx(2.0, rel=1e-6)
    assert rescale_record(model)["history"][0]["reference_row_norm_mean"] == 2.0

    other = tiny_mlm("electra", seed=3)
    target = rows(other).mean()
    model2 = tiny_mlm("distilbert")
    rescale_mlm_head(model2, mode="match_norm", reference=other)
    assert rows(model2).mean() == pytest.approx(target, rel=1e-6)


@pytest.mark.parametrize("statistic", ["p99", "max", "mean", "p90"])
@pytest.mark.parametrize("scale_bias", [False, True])
def test_target_logit_hits_the_target(statistic, scale_bias):
    model = tiny_mlm("bert")
    tokenizer = tiny_tokenizer()
    now = token_logits(model, tokenizer)
    stat = {
        "max": np.max,
        "mean": np.mean,
        "p99": lambda x: np.quantile(x, 0.99),
        "p90": lambda x: np.quantile(x, 0.9),
    }[statistic]
    b = find_mlm_head(model).bias.detach().double().numpy()
    # reachable by construction: the statistic of the logits rescaled by hand with F = 1.7
    target = float(stat(1.7 * now if scale_bias else 1.7 * (now - b) + b))
    factor = rescale_mlm_head(
        model,
        mode="target_logit",
        target=target,
        statistic=statistic,
        tokenizer=tokenizer,
        texts=TEXTS,
        scale_bias=scale_bias,
        calibration={"max_tokens": None},
    )
    assert factor > 0
    after = token_logits(model, tokenizer)
    assert float(stat(after)) == pytest.approx(target, abs=1e-4)
    step = rescale_record(model)["history"][0]
    assert (step["mode"], step["statistic"], step["target"]) == ("target_logit", statistic, target)


def test_calibrated_factor_does_not_change_the_model_and_rejects_unreachable_targets():
    model = tiny_mlm("modernbert")
    tokenizer = tiny_tokenizer()
    before = snapshot(model)
    # |W h| is O(10) here, so for F ≤ 1e4 the max logit stays far above -1e6
    with pytest.raises(CalibrationError, match="scale_bias"):
        calibrated_factor(model, tokenizer, TEXTS, target=-1e6, statistic="max", max_tokens=None)
    with pytest.raises(CalibrationError):
        calibrated_factor(model, tokenizer, TEXTS, target=-1.0, statistic="std", scale_bias=True)
    assert torch.equal(find_mlm_head(model).weight.double(), before["W"])


# ---------------------------------------------------------------------------------------------- diagnose
def test_diagnose_weight_and_text_statistics():
    model = tiny_mlm("bert")
    tokenizer = tiny_tokenizer()
    W = find_mlm_head(model).weight.detach().double().numpy()
    b = find_mlm_head(model).bias.detach().double().numpy()
    rows = np.linalg.norm(W, axis=1)
    diagnosis = diagnose_mlm_head(model, tokenizer, TEXTS, max_tokens=None, reference=rows.mean() / 4)
    head = diagnosis.head
    assert head.family == "bert" and head.tied and (head.vocab_size, head.hidden_size) == W.shape
    assert head.frobenius == pytest.approx(np.linalg.norm(W), rel=1e-9)
    assert head.row_norm["mean"] == pytest.approx(rows.mean()) and head.row_norm["median"] == pytest.approx(
        np.median(rows)
    )
    assert head.row_norm["p99"] == pytest.approx(np.quantile(rows, 0.99)) and head.row_norm["max"] == pytest.approx(
        rows.max()
    )
    assert head.bias["mean"] == pytest.approx(b.mean()) and head.bias["max"] == pytest.approx(b.max())
    gain = model.cls.predictions.transform.LayerNorm.weight.detach().double().numpy()
    assert head.transform["norm_gain"]["mean"] == pytest.approx(gain.mean())

    logits = token_logits(model, tokenizer)
    stats = diagnosis.logits
    assert stats.n_tokens == logits.shape[0] and stats.n_texts == len(TEXTS)
    assert stats.mean == pytest.approx(logits.mean(), abs=1e-5) and stats.std == pytest.approx(logits.std(), rel=1e-5)
    assert stats.p99 == pytest.approx(np.quantile(logits, 0.99), abs=1e-5) and stats.max == pytest.approx(
        logits.max(), abs=1e-5
    )
    assert stats.frac_positive == pytest.approx((logits > 0).mean(), abs=1e-9)

    # SPLADE at initialisation, from explicit logits: w = max_t log(1 + ReLU(z)) per text
    inputs = batch(tokenizer)
    mask = inputs["attention_mask"].bool()
    h = transformed_hidden(model, inputs)
    z = expected_logits(h, torch.from_numpy(W), torch.from_numpy(b), 1.0, False).masked_fill(~mask.unsqueeze(-1), -1e9)
    weights = torch.log1p(torch.relu(z)).amax(dim=1).numpy()
    active = (weights > 0).sum(axis=1)
    assert diagnosis.splade.active_terms["mean"] == pytest.approx(active.mean())
    assert diagnosis.splade.active_fraction == pytest.approx(active.mean() / W.shape[0])
    gram = weights @ weights.T
    n = len(TEXTS)
    assert diagnosis.splade.score_pairs == "text-text"
    assert diagnosis.splade.score_mean == pytest.approx((gram.sum() - np.trace(gram)) / (n * (n - 1)), rel=1e-4)

    assert diagnosis.scale_ratio == pytest.approx(4.0)
    assert diagnosis.suggested_factor == pytest.approx(0.25)
    assert "head scale 4×" in diagnosis.verdict and "collapse" in diagnosis.verdict
    json.dumps(diagnosis.to_dict())  # JSON-ready
    assert "mean decoder row norm" in diagnosis.table()


def test_diagnose_query_document_scores_and_reference_diagnosis():
    model = tiny_mlm("distilbert")
    tokenizer = tiny_tokenizer()
    queries, documents = TEXTS[:2], TEXTS[2:]
    ref = diagnose_mlm_head(tiny_mlm("distilbert", seed=5), tokenizer, queries=queries, documents=documents, name="ref")
    diagnosis = diagnose_mlm_head(model, tokenizer, queries=queries, documents=documents, reference=ref)

    def vectors(texts):
        inputs = batch(tokenizer, texts)
        head = find_mlm_head(model)
        z = expected_logits(
            transformed_hidden(model, inputs), head.weight.detach().double(), head.bias.detach().double(), 1.0, False
        )
        z = z.masked_fill(~inputs["attention_mask"].bool().unsqueeze(-1), -1e9)
        return torch.log1p(torch.relu(z)).amax(dim=1).numpy()

    assert diagnosis.splade.score_pairs == "query-document"
    assert diagnosis.splade.score_mean == pytest.approx((vectors(queries) @ vectors(documents).T).mean(), rel=1e-4)
    assert diagnosis.scale_ratio == pytest.approx(diagnosis.head.row_norm["mean"] / ref.head.row_norm["mean"])
    assert diagnosis.reference["name"] == "ref" and diagnosis.reference["logits"]["p99"] == ref.logits.p99


def test_diagnose_after_rescale_shows_the_record_and_scale():
    model = tiny_mlm("electra")
    original = diagnose_mlm_head(model)
    rescale_mlm_head(model, factor=10.0)
    diagnosis = diagnose_mlm_head(model, reference=original)
    assert diagnosis.scale_ratio == pytest.approx(10.0)
    assert not diagnosis.head.tied and diagnosis.head.rescale["total_factor"] == 10.0
    assert diagnosis.suggested_factor == pytest.approx(0.1)
    assert "already rescaled" in diagnosis.verdict


def test_diagnose_needs_a_tokenizer_for_text():
    with pytest.raises(ValueError, match="tokenizer"):
        diagnose_mlm_head(tiny_mlm("bert"), None, TEXTS)


# ---------------------------------------------------------------------------------------------- real checkpoint
def test_real_checkpoint_rescale_save_reload(tmp_path, splade_tiny):
    from safetensors.torch import load_file

    from spladekit.model.encoder import SpladeEncoder

    folder = splade_tiny
    tensors = load_file(folder / "model.safetensors")
    E0 = tensors["bert.embeddings.word_embeddings.weight"].double()  # tied: this is also the decoder weight
    b0 = next(tensors[k] for k in ("cls.predictions.bias", "cls.predictions.decoder.bias") if k in tensors).double()
    model = tf.AutoModelForMaskedLM.from_pretrained(folder).eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(folder)
    texts = ["what causes heart disease", "aspirin lowers the risk of a second heart attack in adults"]
    inputs = batch(tokenizer, texts)
    rescale_mlm_head(model, factor=0.25)
    SpladeEncoder(model, tokenizer, device="cpu").save_pretrained(tmp_path)

    reloaded = tf.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.get_input_embeddings().weight.double(), E0)
    h = transformed_hidden(reloaded, inputs)
    mask = inputs["attention_mask"].bool()
    expected = expected_logits(h, E0, b0, 0.25, False)
    torch.testing.assert_close(model_logits(reloaded, inputs)[mask], expected[mask], rtol=1e-5, atol=1e-4)
    encoder = SpladeEncoder.from_pretrained(tmp_path, head_impl="plain", device="cpu")
    z = expected.masked_fill(~mask.unsqueeze(-1), -1e9)
    np.testing.assert_allclose(
        encoder.encode(texts, 64).toarray(), torch.log1p(torch.relu(z)).amax(dim=1).numpy(), rtol=1e-4, atol=1e-4
    )
    assert encoder.metadata.extra["rescale"] == rescale_record(reloaded) == rescale_record(model)
    assert rescale_record(reloaded)["history"][0]["norms_before"]["row_norm_mean"] == pytest.approx(
        np.linalg.norm(E0.numpy(), axis=1).mean()
    )


# ---------------------------------------------------------------------------------------------- CLI
def _save_tiny(folder, family="bert", seed=0):
    tiny_mlm(family, seed=seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def _tiny_beir(folder):
    folder.mkdir()
    with open(folder / "corpus.jsonl", "w") as handle:
        for i, text in enumerate(TEXTS):
            handle.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for i, text in enumerate(["protein cancer", "heart drug", "gene expression"]):
            handle.write(json.dumps({"_id": f"q{i}", "text": text}) + "\n")
    return folder


def test_sample_beir_texts(tmp_path):
    from spladekit.data.texts import read_text_lines, sample_beir_texts

    folder = _tiny_beir(tmp_path / "beir")
    queries, docs = sample_beir_texts(folder, n_queries=2, n_docs=4, seed=1)
    assert len(queries) == 2 and len(docs) == 4 and set(docs) <= set(TEXTS)
    assert (queries, docs) == sample_beir_texts(folder, n_queries=2, n_docs=4, seed=1)
    assert sample_beir_texts(folder, 10, 10)[1] == TEXTS  # all, in file order
    (tmp_path / "t.txt").write_text("a\n\n  b c \n")
    assert read_text_lines(tmp_path / "t.txt") == ["a", "b c"]
    (tmp_path / "empty.txt").write_text("\n \n")
    from spladekit.errors import DataFormatError

    with pytest.raises(DataFormatError, match="empty.txt"):
        read_text_lines(tmp_path / "empty.txt")


def test_cli_diagnose_and_rescale(tmp_path):
    from typer.testing import CliRunner

    from spladekit.cli import app

    runner = CliRunner()
    model_dir = _save_tiny(tmp_path / "model")
    ref_dir = _save_tiny(tmp_path / "ref", family="roberta", seed=7)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    W = find_mlm_head(tiny_mlm("bert")).weight.detach().double().numpy()
    rows = np.linalg.norm(W, axis=1)

    result = runner.invoke(
        app,
        [
            "diagnose",
            str(model_dir),
            "--texts",
            str(texts),
            "--reference",
            str(ref_dir),
            "--out",
            str(tmp_path / "diag"),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "diag" / "diagnosis.json").read_text())
    assert report["head"]["row_norm"]["mean"] == pytest.approx(rows.mean())
    ref_rows = np.linalg.norm(find_mlm_head(tiny_mlm("roberta", seed=7)).weight.detach().double().numpy(), axis=1)
    assert report["scale_ratio"] == pytest.approx(rows.mean() / ref_rows.mean())
    assert report["logits"]["n_texts"] == len(TEXTS) and report["reference"]["logits"] is not None
    for name in ("diagnosis.txt", "row_norms.png", "logits.png", "config.json"):
        assert (tmp_path / "diag" / name).stat().st_size > 0
    source = json.loads((tmp_path / "diag" / "config.json").read_text())["source"]
    assert source["texts"] == str(texts) and source["n_queries"] is None and source["n_docs"] is None

    beir = _tiny_beir(tmp_path / "beir")
    result = runner.invoke(app, ["diagnose", str(model_dir), "--data", str(beir), "--out", str(tmp_path / "diag2")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "diag2" / "diagnosis.json").read_text())["splade"]["score_pairs"] == "query-document"
    assert json.loads((tmp_path / "diag2" / "config.json").read_text())["source"]["n_queries"] == 64

    out = tmp_path / "rescaled"
    result = runner.invoke(app, ["rescale", str(model_dir), "--out", str(out), "--match-norm", "2.5"])
    assert result.exit_code == 0, result.output
    reloaded = tf.AutoModelForMaskedLM.from_pretrained(out)
    assert np.linalg.norm(find_mlm_head(reloaded).weight.detach().double().numpy(), axis=1).mean() == pytest.approx(
        2.5, rel=1e-6
    )
    assert json.loads((out / "spladekit.json").read_text())["extra"]["rescale"]["history"][0]["mode"] == "match_norm"
    assert json.loads((out / "rescale_config.json").read_text())["match_norm"] == "2.5"

    again = runner.invoke(app, ["rescale", str(out), "--out", str(tmp_path / "again"), "--factor", "2"])
    assert again.exit_code == 2 and "already rescaled" in again.output
    forced = runner.invoke(app, ["rescale", str(out), "--out", str(tmp_path / "again"), "--factor", "2", "--force"])
    assert forced.exit_code == 0, forced.output
    record = json.loads((tmp_path / "again" / "config.json").read_text())["spladekit_rescale"]
    assert record["total_factor"] == pytest.approx(2.0 * 2.5 / rows.mean())

    target = runner.invoke(
        app,
        [
            "rescale",
            str(model_dir),
            "--out",
            str(tmp_path / "t"),
            "--target-logit",
            "3",
            "--statistic",
            "max",
            "--texts",
            str(texts),
        ],
    )
    assert target.exit_code == 0, target.output
    assert token_logits(
        tf.AutoModelForMaskedLM.from_pretrained(tmp_path / "t"), tiny_tokenizer()
    ).max() == pytest.approx(3.0, abs=1e-4)

    for bad in (["--factor", "2", "--match-norm", "1"], [], ["--target-logit", "3"]):
        result = runner.invoke(app, ["rescale", str(model_dir), "--out", str(tmp_path / "bad"), *bad])
        assert result.exit_code == 2, (bad, result.output)
    assert not (tmp_path / "bad").exists()


def test_diagnose_reports_modernbert_final_norm():
    model = tiny_mlm("modernbert")
    with torch.no_grad():
        model.model.final_norm.weight.mul_(3.0)
    diagnosis = diagnose_mlm_head(model)
    gain = model.model.final_norm.weight.detach().double().numpy()
    assert diagnosis.head.final_norm["mean"] == pytest.approx(gain.mean()) and diagnosis.head.family == "modernbert"
    assert diagnosis.head.transform["norm_gain"]["mean"] == pytest.approx(
        model.head.norm.weight.detach().double().mean().item()
    )
    assert diagnose_mlm_head(tiny_mlm("bert")).head.final_norm is None


# ---------------------------------------------------------------------------------------------- diagnose: reference, phases
@pytest.mark.slow
def test_builtin_reference_is_splade_tiny_measured_on_scifact(shared):
    """The derivation of BUILTIN_REFERENCE, kept: splade-tiny diagnosed on the SciFact sample the
    docstring names. Tolerance: the values are rounded to 6 significant digits (relative 5e-6), and
    two float32 evaluations of the backbone on other BLAS paths differ by a few ulps per layer, far
    below 1e-5 relative on these statistics; the active-term count is exact (no pooled logit of this
    sample lies within 1e-4 of zero, checked by the suggestion's shift staying below that)."""
    from spladekit.data.texts import sample_beir_texts
    from spladekit.model.calibrate.diagnose import BUILTIN_REFERENCE
    from spladekit.model.encoder import SpladeEncoder

    encoder = SpladeEncoder.from_pretrained(shared / "models" / "splade-tiny", head_impl="plain", device="cpu")
    queries, documents = sample_beir_texts(shared / "data" / "beir" / "scifact", 64, 64, 0)
    got = diagnose_mlm_head(
        encoder.model, encoder.tokenizer, queries=queries, documents=documents, max_length=128, max_tokens=1024, seed=0
    )
    ref = BUILTIN_REFERENCE
    assert got.head.row_norm["mean"] == pytest.approx(ref["row_norm_mean"], rel=1e-5)
    for key in ("mean", "std", "p99", "max", "frac_positive"):
        assert getattr(got.logits, key) == pytest.approx(ref["logits"][key], rel=1e-5), key
    assert got.logits.n_tokens == ref["logits"]["n_tokens"] and got.splade.n_texts == ref["splade"]["n_texts"]
    assert got.splade.active_terms["mean"] == pytest.approx(ref["splade"]["active_terms"]["mean"], rel=5e-6)
    # against itself every ratio is 1: healthy, and the suggestion is (1, ~0)
    assert got.suggestion["healthy"] and got.suggested_factor == pytest.approx(1.0, rel=1e-4)
    assert abs(got.suggested_shift) < 1e-4 and "no rescaling needed" in got.verdict


def test_diagnose_without_reference_judges_against_the_builtin_one_and_suggests_f_and_s():
    from spladekit.model.calibrate.diagnose import BUILTIN_REFERENCE, HEALTHY_RANGES

    model, tokenizer = tiny_mlm("bert"), tiny_tokenizer()
    rescale_mlm_head(model, factor=40.0)  # an inflated head
    texts = [f"{a} {b} {c}" for a, b, c in zip(TEXTS, TEXTS[1:], TEXTS[2:])] + TEXTS
    diagnosis = diagnose_mlm_head(model, tokenizer, texts, max_tokens=None)
    assert diagnosis.reference["name"] == BUILTIN_REFERENCE["name"]
    ratio = diagnosis.head.row_norm["mean"] / BUILTIN_REFERENCE["row_norm_mean"]
    assert diagnosis.scale_ratio == pytest.approx(ratio)
    low, high = HEALTHY_RANGES["logit std"]
    std_ratio = diagnosis.logits.std / BUILTIN_REFERENCE["logits"]["std"]
    word = "inflated logits" if std_ratio > high else "weak logits" if std_ratio < low else "healthy"
    assert f"logit std {std_ratio:.3g}× (healthy {low:g}–{high:g}×): {word}" in diagnosis.verdict
    assert f"head scale {ratio:.3g}× (healthy 0.5–2×): expect inflated logits" in diagnosis.verdict
    assert diagnosis.suggestion["method"] == "match the logits' std and the active terms per text"
    assert diagnosis.suggested_factor is not None and diagnosis.suggested_shift is not None
    # the suggestion, applied, reaches the reference's std (closed form) and the active terms the vocabulary allows
    target_active = diagnosis.suggestion["targets"]["active_terms"]
    rescale_mlm_head(model, factor=diagnosis.suggested_factor, shift=diagnosis.suggested_shift, force=True)
    logits = token_logits(model, tokenizer, texts)
    assert logits.std() == pytest.approx(BUILTIN_REFERENCE["logits"]["std"], rel=1e-5)
    after = diagnose_mlm_head(model, tokenizer, texts, max_tokens=None)
    assert abs(after.splade.active_terms["mean"] - target_active) <= 1 / (2 * len(texts)) + 1e-9
    assert json.dumps(diagnosis.to_dict()) and "suggested shift s" in diagnosis.table()
    without_text = diagnose_mlm_head(tiny_mlm("bert"))
    assert without_text.suggested_factor == pytest.approx(
        BUILTIN_REFERENCE["row_norm_mean"] / without_text.head.row_norm["mean"]
    )
    assert without_text.suggested_shift is None and "needs sample text" in without_text.table()


def test_cli_diagnose_says_each_phase_in_order(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    model_dir = _save_tiny(tmp_path / "model")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    src = str(Path(__file__).resolve().parents[3] / "src")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from spladekit.cli import main; main()",
            "diagnose",
            str(model_dir),
            "--texts",
            str(texts),
            "--out",
            str(tmp_path / "diag"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": src},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.replace("\r", "\n").splitlines() if line and "%|" not in line]
    phases = [
        "diagnose ",
        "sample text: 6 texts",
        "loading ",
        "MLM head: decoder",
        "logits on 6 texts",
        "SPLADE vectors at initialisation",
        "suggesting a factor and a shift",
        "writing ",
    ]
    found = [next(i for i, line in enumerate(lines) if line.startswith(p)) for p in phases]
    assert found == sorted(found), lines
    assert "suggested shift s" in proc.stdout and "verdict:" in proc.stdout


def test_logit_histogram_marks_the_tail_the_sample_cuts(tmp_path, monkeypatch):
    import spladekit.plots as plots

    seen = {}
    real = plots._save
    monkeypatch.setattr(
        plots,
        "_save",
        lambda fig, path: seen.update(title=fig.axes[0].get_title(), xlim=fig.axes[0].get_xlim()) or real(fig, path),
    )
    sample = np.random.default_rng(0).normal(-7.6, 2.9, 10_000)
    plots.head_logits({"m": sample}, tmp_path / "l.png", marks={"max of all logits": 12.24}, note="a sample of 10,000")
    assert (tmp_path / "l.png").stat().st_size > 0
    assert "a sample of 10,000" in seen["title"] and "the sample cuts the tail" in seen["title"]
    assert seen["xlim"][1] > 12.24  # the axis reaches the mark
    plots.head_logits({"m": sample}, tmp_path / "k.png", marks={"p99": float(np.quantile(sample, 0.99))})
    assert "cuts the tail" not in seen["title"]  # a mark inside the sample's range: nothing to say
