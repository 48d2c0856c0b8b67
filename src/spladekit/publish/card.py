"""The model card (``README.md``) of a saved spladekit model, built from the folder's own records.

:func:`write_model_card` is the one entry point; ``train`` (``model/``, ``last/``), ``rescale``,
``inference-free`` and ``export-model`` call it on every model folder they save, and ``spladekit
card FOLDER`` (re)writes it on demand. An existing ``README.md`` is never replaced unless
``overwrite=True`` (command line: ``spladekit card FOLDER --overwrite``).

What the card says, and where each part is read (files only: no model is loaded):

- front matter (built with ``huggingface_hub``'s :class:`~huggingface_hub.ModelCardData`, which
  writes the YAML and the ``model-index``): ``library_name: sentence-transformers`` where the folder
  holds sentence-transformers' ``modules.json`` (else ``onnx`` for an ONNX export, or none),
  ``pipeline_tag: feature-extraction``, tags ``sparse-encoder``, ``splade`` or ``inference-free``,
  ``spladekit``; ``base_model`` (``spladekit.json`` ``source`` when it is a hub id), ``datasets``
  (training data with a hub id), ``language``/``license`` (given, or inherited from the base model
  folder's own card); ``model-index``: one result per measure and sparsity statistic of each
  evaluation given (an ``evaluate --out`` folder: ``metrics.json`` + ``config.json``) and of the
  selected dev evaluation of a training run on a named dev set. No evaluation: no ``model-index``.
- the MLM-head record: ``config.json`` ``spladekit_rescale`` (every rescaling: mode, factor, decoder
  row norms before/after, :mod:`spladekit.model.calibrate.rescale`), ``rescale_config.json``, and a
  ``diagnosis.json`` (:func:`spladekit.model.calibrate.outputs.run_diagnose`) found in the folder or given;
- training: the model folder's ``config.yaml`` and ``spladekit.json`` ``extra.training``; the dev
  curve and ``best.json``/``result.json`` of the run folder (the parent of ``model/``/``last/``);
- framework versions (``importlib.metadata``), citations.

Dataset ids: a BEIR dataset known by name (:data:`BEIR_HUB_IDS`) gets its hub id ``BeIR/<name>``;
any other dataset is named by its folder name (what the evaluation read), never left null.
"""

from __future__ import annotations

import math
import platform
import re
import warnings
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path

from spladekit.errors import CardMismatchError, DataFormatError
from spladekit.io import atomic_write, read_json, read_jsonl, read_yaml

CARD_FILE = "README.md"
#: BEIR datasets and their readable names; each is published on the hub as ``BeIR/<name>``.
BEIR_HUB_IDS = {
    "msmarco": "MS MARCO",
    "trec-covid": "TREC-COVID",
    "nfcorpus": "NFCorpus",
    "nq": "Natural Questions",
    "hotpotqa": "HotpotQA",
    "fiqa": "FiQA-2018",
    "arguana": "ArguAna",
    "webis-touche2020": "Touché-2020",
    "cqadupstack": "CQADupStack",
    "quora": "Quora",
    "dbpedia-entity": "DBPedia",
    "scidocs": "SCIDOCS",
    "fever": "FEVER",
    "climate-fever": "Climate-FEVER",
    "scifact": "SciFact",
}
#: metrics.json keys of sparsity, with the model-index metric types sentence-transformers' cards use.
SPARSITY = {
    "avg_query_terms": ("query_active_dims", "active terms per query"),
    "avg_doc_terms": ("corpus_active_dims", "active terms per document"),
    "flops": ("flops", "FLOPS (expected multiplications per query-document pair)"),
}
TASK = ("sparse-information-retrieval", "Sparse Information Retrieval")
VERSIONS = ("spladekit", "torch", "transformers", "sentence-transformers", "tokenizers", "huggingface_hub")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Evaluation:
    """One evaluation of the model: dataset id and readable name, split, and the ``metrics.json``
    record (measures, ``conventions``, sparsity), with where it came from."""

    dataset_id: str
    dataset_name: str
    split: str
    metrics: dict
    source: str
    measures: list[str] = field(default_factory=list)


def dataset_identity(data: str) -> tuple[str, str]:
    """``(id, readable name)`` of a dataset given as a name or a folder: ``("BeIR/scifact", "SciFact")``
    for a known BEIR name, else the folder's name twice."""
    name = Path(str(data).rstrip("/")).name or str(data)
    key = name.lower()
    if key in BEIR_HUB_IDS:
        return f"BeIR/{key}", BEIR_HUB_IDS[key]
    return name, name


def read_evaluation(path: str | Path) -> Evaluation:
    """Read an ``evaluate --out`` folder (or its ``metrics.json``): the metrics and, from the
    ``config.json`` beside them, the dataset and split.

    Raises:
        DataFormatError: no ``metrics.json``, or no ``config.json`` stating ``data`` and ``split``
            (a card never names an unknown dataset), or a measure that is not a number.
    """
    path = Path(path)
    folder = path.parent if path.name == "metrics.json" else path
    metrics_path, config_path = folder / "metrics.json", folder / "config.json"
    if not metrics_path.is_file():
        raise DataFormatError(metrics_path, "not found: give an `spladekit evaluate --out` folder")
    metrics = read_json(metrics_path)
    config = read_json(config_path) if config_path.is_file() else {}
    for key in ("data", "split"):
        if not isinstance(config.get(key), str) or not config.get(key):
            raise DataFormatError(
                config_path,
                "the evaluated dataset and split are needed for the model card "
                "(`spladekit evaluate --model --data --split --out` writes them)",
                field=key,
            )
    measures = [m for m in config.get("measures") or [] if m in metrics]
    if not config.get("measures"):  # an older record: the measures are the keys named like one (nDCG@10, MAP)
        measures = [k for k in metrics if "@" in k or k in ("MAP", "AP", "MRR", "RR")]
    for name in measures:
        if not isinstance(metrics[name], (int, float)) or isinstance(metrics[name], bool):
            raise DataFormatError(metrics_path, f"measure {name} is not a number", field=name)
    dataset_id, dataset_name = dataset_identity(config["data"])
    return Evaluation(dataset_id, dataset_name, config["split"], metrics, str(folder), measures)


def _metric_type(name: str) -> str:
    """``nDCG@10`` → ``ndcg_at_10`` (the hub's metric type spelling)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower().replace("@", "_at_")).strip("_")


def eval_results(evaluations: list[Evaluation]):
    """The :class:`~huggingface_hub.EvalResult` of each measure and sparsity number of each evaluation
    (``metric_name`` is the ``metrics.json`` key, ``metric_value`` its value)."""
    from huggingface_hub import EvalResult

    results = []
    for ev in evaluations:
        names = [(m, _metric_type(m)) for m in ev.measures]
        names += [(key, kind) for key, (kind, _) in SPARSITY.items() if isinstance(ev.metrics.get(key), (int, float))]
        names = [(key, kind) for key, kind in names if math.isfinite(ev.metrics[key])]  # the hub takes no NaN
        conventions = ev.metrics.get("conventions") or {}
        args = {"conventions": conventions.get("name")} if conventions.get("name") else None
        for key, kind in names:
            results.append(
                EvalResult(
                    task_type=TASK[0],
                    task_name=TASK[1],
                    dataset_type=ev.dataset_id,
                    dataset_name=ev.dataset_name,
                    dataset_split=ev.split,
                    metric_type=kind,
                    metric_name=key,
                    metric_value=ev.metrics[key],
                    dataset_args=args,
                )
            )
    return results


# ----------------------------------------------------------------------------------- folder records
@dataclass
class FolderRecords:
    """What a model folder (and its training run) records, read from files."""

    folder: Path
    spladekit: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    sentence_transformers: bool = False
    onnx: dict | None = None
    rescale: dict | None = None
    rescale_config: dict | None = None
    diagnosis: dict | None = None
    train_config: dict | None = None
    training: dict | None = None
    run_dir: Path | None = None
    dev_records: list[dict] = field(default_factory=list)
    best: dict | None = None

    @property
    def inference_free(self) -> bool:
        from spladekit.model.metadata import INFERENCE_FREE  # here: the model package loads torch

        return self.spladekit.get("query_encoder") == INFERENCE_FREE

    @property
    def source(self) -> str:
        return str(self.spladekit.get("source") or "")


def _optional_json(path: Path):
    return read_json(path) if path.is_file() else None


def read_records(
    folder: str | Path, run_dir: str | Path | None = None, diagnosis: str | Path | None = None
) -> FolderRecords:
    """The records of ``folder`` (see the module docstring). ``run_dir``: the training run's folder
    (default: the parent of a ``model/`` or ``last/`` folder holding ``metrics.jsonl``).

    Raises:
        DataFormatError: a record file is malformed (names the file and line).
        FileNotFoundError: ``folder`` is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder (give a saved model folder)")
    records = FolderRecords(
        folder,
        spladekit=_optional_json(folder / "spladekit.json") or {},
        config=_optional_json(folder / "config.json") or {},
        sentence_transformers=(folder / "modules.json").is_file(),
    )
    extra = records.spladekit.get("extra") or {}
    records.onnx = extra.get("onnx") if (folder / "model.onnx").is_file() else None
    records.rescale = records.config.get("spladekit_rescale") or extra.get("rescale")
    records.rescale_config = _optional_json(folder / "rescale_config.json")
    if diagnosis is not None:
        diagnosis = Path(diagnosis) / "diagnosis.json" if Path(diagnosis).is_dir() else Path(diagnosis)
        if not diagnosis.is_file():
            raise FileNotFoundError(
                f"{diagnosis}: no such file (give a `spladekit diagnose --out` folder or its diagnosis.json)"
            )
    records.diagnosis = _optional_json(diagnosis or folder / "diagnosis.json")
    records.training = extra.get("training")
    if (folder / "config.yaml").is_file():
        records.train_config = read_yaml(folder / "config.yaml")
    elif records.training:
        records.train_config = records.training.get("config")
    if run_dir is None and folder.name in ("model", "last") and (folder.parent / "metrics.jsonl").is_file():
        run_dir = folder.parent
    if run_dir is not None:
        records.run_dir = Path(run_dir)
        log = records.run_dir / "metrics.jsonl"
        if log.is_file():
            records.dev_records = [r for _, r in read_jsonl(log) if isinstance(r, dict) and r.get("split") == "dev"]
        best = _optional_json(records.run_dir / "best.json")
        records.best = best if folder.name == "model" else None
    return records


def model_facts(records: FolderRecords) -> dict:
    """What a card states about its model, ``{fact: JSON scalar}`` (facts a folder does not record left
    out): where it was made from, backbone, vocabulary, pooling, activation, max lengths, top-k, an
    inference-free query side, the head's rescaling and shift, its per-position cap and folded
    vocabulary, the training step, the selected dev score and the training config (a SHA-256 of it,
    first 12 digits), the ONNX opset and quantisation. Two folders with
    the same facts get the same card (the framework versions and the snippets' path aside); written in
    the card's record line (:mod:`spladekit.publish.card_record`)."""
    import hashlib
    import json

    sk, config, onnx, training = records.spladekit, records.config, records.onnx or {}, records.training or {}
    selected = training.get("selected") or {}
    train_config = records.train_config
    facts = {
        "made from": records.source,
        "backbone": ", ".join(config.get("architectures") or []) or config.get("model_type"),
        "vocabulary size": config.get("vocab_size") or onnx.get("vocab_size"),
        "pooling": sk.get("pooling"),
        "activation": sk.get("activation"),
        "query max length": sk.get("query_max_length"),
        "document max length": sk.get("doc_max_length"),
        "query top-k": sk.get("query_top_k"),
        "document top-k": sk.get("doc_top_k"),
        "inference-free queries": records.inference_free or None,
        "head rescaling factor": (records.rescale or {}).get("total_factor"),
        "head shift": (records.rescale or {}).get("total_shift") or None,
        "rescaled before training": (training.get("rescale") or {}).get("factor"),
        "shifted before training": (training.get("rescale") or {}).get("shift") or None,
        "pooled per position": sk.get("position_top_k"),
        "folded terms": len(sk["fold"].get("terms") or []) if isinstance(sk.get("fold"), dict) else None,
        "training steps": training.get("steps"),
        "selected": f"{selected.get('metric')} {selected.get('value')} at step {selected.get('step')}"
        if selected
        else None,
        "training config": (
            hashlib.sha256(json.dumps(train_config, sort_keys=True, default=str).encode()).hexdigest()[:12]
            if train_config
            else None
        ),
        "ONNX opset": onnx.get("opset"),
        "ONNX quantisation": onnx.get("quantize"),
    }
    return {
        name: value if isinstance(value, (str, int, float, bool)) else str(value)
        for name, value in facts.items()
        if value not in (None, "")
    }


def dev_evaluation(records: FolderRecords) -> Evaluation | None:
    """The dev evaluation of the saved model as an :class:`Evaluation`, when it was run on a named
    dev set (``dev.data``) with every query and document (no ``max_queries``/``max_docs`` proxy);
    the held-out training queries are no dataset a card can name. The record is the best's
    (``model/``) or the last one (``last/``, or a run without selection)."""
    dev = (records.train_config or {}).get("dev") or {}
    if not records.dev_records or not dev.get("data") or dev.get("max_queries") or dev.get("max_docs"):
        return None
    step = (records.best or {}).get("step")
    chosen = next((r for r in records.dev_records if r.get("step") == step), None) if step is not None else None
    chosen = chosen or records.dev_records[-1]
    dataset_id, dataset_name = dataset_identity(dev["data"])
    measures = [m for m in dev.get("measures") or [] if isinstance(chosen.get(m), (int, float))]
    return Evaluation(
        dataset_id,
        dataset_name,
        dev.get("split") or "dev",
        dict(chosen),
        f"training dev evaluation at step {chosen.get('step')}",
        measures,
    )


def _inherited_card_data(source: str) -> dict:
    """``license`` (with ``license_name``/``license_link``)/``language`` of the base model's own card when
    it is a local folder with one; a licence the Hub would refuse is not inherited (a warning says so)."""
    path = Path(source) / CARD_FILE if source else None
    if not path or not path.is_file():
        return {}
    from huggingface_hub import ModelCard

    from spladekit.publish.licenses import license_problem

    try:
        data = ModelCard.load(path).data
    except Exception:  # a malformed card of the base model: nothing inherited (the new card is still valid)
        return {}
    found = {
        key: getattr(data, key)
        for key in ("license", "license_name", "license_link", "language")
        if getattr(data, key, None)
    }
    problem = license_problem(found["license"], found.get("license_name")) if "license" in found else None
    if problem:
        warnings.warn(f"{path}: {problem}; not inherited (give --license)", UserWarning, stacklevel=2)
        found = {key: value for key, value in found.items() if not key.startswith("license")}
    return found


def training_datasets(train_config: dict | None) -> list[str]:
    """Hub ids of the training data: a ``format: hf`` path, or a BEIR dataset known by name."""
    data = (train_config or {}).get("data") or {}
    path = str(data.get("path") or "")
    if data.get("format") == "hf" and _HUB_ID.match(path) and not Path(path).exists():
        return [path]
    if data.get("format") == "beir":
        dataset_id, _ = dataset_identity(path)
        if dataset_id.startswith("BeIR/"):
            return [dataset_id]
    return []


def versions() -> dict[str, str]:
    """Installed versions of Python and the frameworks in :data:`VERSIONS` (those not installed left out)."""
    found = {"Python": platform.python_version()}
    for name in VERSIONS:
        try:
            found[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return found


# ----------------------------------------------------------------------------------------- the card
def build_model_card(
    folder: str | Path,
    *,
    evaluations: list[str | Path | Evaluation] = (),
    run_dir=None,
    diagnosis=None,
    reference: str | None = None,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    language: str | list[str] | None = None,
    license: str | None = None,
    model_name: str | None = None,
    engine: str | None = None,
    library_name: str | None = None,
    usage: str | None = None,
):
    """The :class:`~huggingface_hub.ModelCard` of ``folder`` (not written).

    Args:
        folder: a saved model folder (spladekit, sentence-transformers or an ``export-model`` output).
        evaluations: ``evaluate --out`` folders (or :class:`Evaluation` records) for the ``model-index``.
        run_dir: the training run's folder (default: found beside ``model/``/``last/``).
        diagnosis: a ``diagnose --out`` folder or its ``diagnosis.json`` (default: one in ``folder``).
        reference: what the usage snippets load (a hub repo id, or the final folder's path when ``folder``
            is a temporary folder about to replace it; default: ``folder``'s absolute path).
        base_model, datasets, language, license: front-matter values that the records do not hold.
        model_name: the card's title and ``model-index`` name (default: the folder's name, or ``reference``).
        engine, library_name, usage: for an engine's export (``export-model --format ...``): a tag naming the
            engine (``elasticsearch``...), the front matter's ``library_name`` (default: ``sentence-transformers``
            with ``modules.json``, ``onnx`` for spladekit's ONNX export, else none) and the Markdown of the usage
            section (default: the snippets for sentence-transformers and spladekit, or a pointer to the
            folder's ``HOW_TO_LOAD.md`` where spladekit cannot load the folder).

    Raises:
        DataFormatError: a record or evaluation file is malformed or incomplete (names file and field).
        ValueError: ``license`` is not a Hub licence identifier, or is ``other``
            (:func:`spladekit.publish.licenses.check_license`).
    """
    from huggingface_hub import ModelCard, ModelCardData

    from spladekit.publish import card_text
    from spladekit.publish.licenses import check_license

    if license is not None:
        check_license(license)

    markers = ("config.json", "modules.json", "model.onnx", "spladekit.json")
    if Path(folder).is_dir() and not any((Path(folder) / name).is_file() for name in markers):
        raise DataFormatError(folder, f"not a model folder (no {' or '.join(markers)})")
    records = read_records(folder, run_dir, diagnosis)
    evals = [ev if isinstance(ev, Evaluation) else read_evaluation(ev) for ev in evaluations]
    dev = dev_evaluation(records)
    if dev is not None:
        evals.append(dev)
    reference = reference or str(Path(folder).resolve())
    name = model_name or (
        reference if _HUB_ID.match(reference) and not Path(reference).exists() else Path(reference).name
    )
    source = records.source
    if base_model is None and _HUB_ID.match(source) and not Path(source).exists():
        base_model = source
    inherited = _inherited_card_data(source)
    tags = ["sparse-encoder", "inference-free" if records.inference_free else "splade", "spladekit"]
    if records.onnx is not None:
        tags.append("onnx")
    if engine:
        tags.append(engine)
    library = library_name or (
        "sentence-transformers" if records.sentence_transformers else "onnx" if records.onnx is not None else None
    )
    results = eval_results(evals) or None
    data = ModelCardData(
        library_name=library,
        pipeline_tag="feature-extraction",
        tags=tags,
        base_model=base_model,
        datasets=datasets or training_datasets(records.train_config) or None,
        language=language or inherited.get("language"),
        license=license or inherited.get("license"),
        **({} if license else {k: inherited[k] for k in ("license_name", "license_link") if k in inherited}),
        eval_results=results,
        model_name=name if results else None,  # the model-index's name (without results it would be a bare key)
    )
    body = card_text.body(
        records, evals, name=name, reference=reference, base_model=base_model, versions=versions(), usage=usage
    )
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")  # ModelCard parses it back (a check of the YAML)


def existing_card(folder: str | Path) -> str | None:
    """The text of ``folder/README.md`` when there is one (read before a command replaces the folder
    whole, to be handed to :func:`write_model_card` as ``keep``), else None."""
    path = Path(folder) / CARD_FILE
    return path.read_text(encoding="utf-8") if path.is_file() else None


def write_model_card(
    folder: str | Path,
    *,
    overwrite: bool = False,
    keep: str | None = None,
    previous: str | Path | None = None,
    remedy: str | None = None,
    **card_options,
) -> Path | None:
    """Write ``folder/README.md`` (atomically), ending with its record line
    (:mod:`spladekit.publish.card_record`). A card already there (or ``keep``, or ``previous``'s) is:

    - rewritten from this model's records when spladekit wrote it and nobody edited it since;
    - kept (a warning says so) when it was edited by hand and its record still matches this model
      (:func:`model_facts`), or when it holds no spladekit record (a card written by hand: what it
      describes cannot be checked);
    - refused (:class:`~spladekit.errors.CardMismatchError`, nothing written) when it was edited by hand
      and its record names another model;

    and replaced in every case when ``overwrite``.

    Args:
        folder: the saved model folder.
        overwrite: replace an existing ``README.md``.
        keep: the text of the card the folder had before a command replaced it whole (:func:`existing_card`).
        previous: the folder that ``folder`` (a temporary folder) is about to replace; its ``README.md``
            is treated as the existing card (the same as ``keep=existing_card(previous)``).
        remedy: the end of a refusal's message, what was (not) written and what to do (default: the card is
            left as it was, ``spladekit card FOLDER --overwrite`` replaces it).
        card_options: see :func:`build_model_card`.

    Returns:
        The path written, or None when an existing card was kept.

    Raises:
        CardMismatchError: an edited card describes another model. DataFormatError, ValueError: see
        :func:`build_model_card`. OutputPathError: the file cannot be written.
    """
    from spladekit.publish.card_record import canonical_facts, fact_differences, read_card_record, sign_card

    path = Path(folder) / CARD_FILE
    if keep is None and previous is not None:
        keep = existing_card(previous)
    existing = keep if keep is not None else existing_card(folder)
    shown = Path(card_options.get("reference") or folder) / CARD_FILE
    if card_options.get("license") is not None:  # a bad --license is refused even when the card is kept
        from spladekit.publish.licenses import check_license

        check_license(card_options["license"])
    facts = model_facts(read_records(folder, card_options.get("run_dir"), card_options.get("diagnosis")))
    record = read_card_record(existing) if existing is not None and not overwrite else None
    if existing is not None and not overwrite and (record is None or record.edited):
        if record is not None and record.facts != canonical_facts(facts):
            raise CardMismatchError(
                shown,
                fact_differences(record.facts, facts),
                remedy
                or f"the card is left as it was: `spladekit card {shown.parent} --overwrite` "
                "replaces it with this model's card (move it away first to keep your edits)",
            )
        if keep is not None and not path.exists():
            with atomic_write(path) as handle:
                handle.write(keep)
        why = (
            "edited by hand; its record matches this model"
            if record is not None
            else "it holds no spladekit record, so what it describes is not checked against this model"
        )
        warnings.warn(
            f"{shown}: the existing model card is kept ({why}; `spladekit card FOLDER --overwrite` "
            "rewrites it from this model's records)",
            UserWarning,
            stacklevel=2,
        )
        return None
    card = build_model_card(folder, **card_options)
    with atomic_write(path) as handle:
        handle.write(sign_card(str(card), facts))
    return path


def write_model_cards(folders, **card_options) -> list[Path]:
    """:func:`write_model_card` on each folder of ``folders`` that is not None (train's ``model/`` and
    ``last/``); the cards written (kept ones left out)."""
    written = [write_model_card(folder, **card_options) for folder in folders if folder is not None]
    return [path for path in written if path is not None]
