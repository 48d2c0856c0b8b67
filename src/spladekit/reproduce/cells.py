"""The real work of a grid cell, with spladekit's own stages.

- backbone: :func:`spladekit.data.resolve.resolve_model`; when ``emulate`` is set, the head is
  inflated with :func:`spladekit.model.calibrate.emulate_large_head` (``inflate``: multiplied by that
  factor with :func:`spladekit.model.calibrate.rescale_mlm_head`, ``mode="factor"``) and saved, to
  emulate a backbone whose MLM head has a large norm;
- init: :func:`spladekit.model.calibrate.diagnose_mlm_head` before and after
  :func:`~spladekit.model.calibrate.rescale_mlm_head` (arXiv 2606.18811, §3, eq. 3);
- train: :func:`spladekit.train.train`;
- evaluate: :func:`spladekit.evaluate.retrieval.evaluate_splade` (an :class:`~spladekit.index.index.Index` of the
  corpus searched with ``evaluation.backend``, ir_measures); the retrieval settings record is saved in
  ``config.json`` under ``search``.
"""

from __future__ import annotations

from pathlib import Path

from spladekit.reproduce.config import EvalDatasetSpec, ReproduceConfig


def resolve_file(path: str | Path) -> Path:
    """A data file named in a config: as given (absolute or relative to the working directory), else
    relative to each shared data root (:func:`spladekit.data.resolve.shared_roots`).

    Raises:
        ResolutionError: not found; the message lists where it looked.
    """
    from spladekit.data.resolve import shared_roots
    from spladekit.errors import ResolutionError

    path = Path(path).expanduser()
    tried = [path]
    if path.exists():
        return path
    if not path.is_absolute():
        for root in shared_roots():
            candidate = root / path
            tried.append(candidate)
            if candidate.exists():
                return candidate
    raise ResolutionError(f"file {str(path)!r} not found; looked in: " + ", ".join(map(str, tried)))


def load_eval_dataset(spec: EvalDatasetSpec, download: bool = True):
    """The :class:`~spladekit.data.beir.BeirDataset` of an evaluation spec: the BEIR folder's corpus,
    with ``spec.qrels`` / ``spec.queries`` (TREC qrels, ``id<TAB>text`` topics) replacing the folder's
    own when given; only judged queries are kept.

    Raises:
        ResolutionError: the folder or a file is missing.
        DataFormatError: malformed files, or judged queries without text.
    """
    from spladekit.data.beir import BeirDataset, find_file, load_beir, read_corpus, read_queries
    from spladekit.data.resolve import resolve_dataset
    from spladekit.data.trec import read_qrels
    from spladekit.data.tsv import read_tsv
    from spladekit.errors import DataFormatError

    folder = resolve_dataset(spec.path, download=download)
    if spec.qrels is None and spec.queries is None:
        dataset = load_beir(folder, spec.split)
        dataset.name = spec.name
        return reduce_corpus(dataset, spec.max_docs)
    qrels_path = resolve_file(spec.qrels) if spec.qrels else folder / "qrels" / f"{spec.split}.tsv"
    qrels = read_qrels(qrels_path)
    queries_path = resolve_file(spec.queries) if spec.queries else find_file(folder, "queries")
    queries = read_tsv(queries_path) if spec.queries else read_queries(queries_path)
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise DataFormatError(
            qrels_path, f"{len(missing)} judged query ids have no text in {queries_path}, e.g. {missing[0]!r}"
        )
    corpus = read_corpus(find_file(folder, "corpus"))
    dataset = BeirDataset(
        path=folder,
        corpus=corpus,
        queries={q: queries[q] for q in qrels},
        qrels=qrels,
        split=spec.split,
        name=spec.name,
    )
    return reduce_corpus(dataset, spec.max_docs)


def reduce_corpus(dataset, max_docs: int | None):
    """Keep at most ``max_docs`` documents: every document judged (any grade) for a judged query,
    then the first other documents in corpus order; corpus order is kept. ``None``: unchanged.

    Raises:
        ValueError: more judged documents than ``max_docs``.
    """
    if max_docs is None or len(dataset.corpus) <= max_docs:
        return dataset
    judged = {d for docs in dataset.qrels.values() for d in docs if d in dataset.corpus}
    if len(judged) > max_docs:
        raise ValueError(f"{dataset.name}: max_docs={max_docs} is below the {len(judged)} judged documents")
    room = max_docs - len(judged)
    kept = {}
    for doc_id, text in dataset.corpus.items():
        if doc_id in judged:
            kept[doc_id] = text
        elif room > 0:
            kept[doc_id] = text
            room -= 1
    dataset.corpus = kept
    return dataset


def diagnosis_texts(config: ReproduceConfig) -> list[str]:
    """The first ``diagnosis.num_texts`` documents of the diagnosis dataset's corpus (file order),
    ``title + " " + text`` as in :func:`spladekit.data.beir.read_corpus`; the corpus is streamed, not read whole.

    Raises:
        DataFormatError: a line read is not JSON or lacks ``_id`` or ``text``.
    """
    from spladekit.data.beir import iter_corpus
    from spladekit.data.resolve import resolve_dataset

    texts = []
    for _, text in iter_corpus(resolve_dataset(config.diagnosis.dataset)):
        texts.append(text)
        if len(texts) >= config.diagnosis.num_texts:
            break
    return texts


def _save_model(mlm, tokenizer, folder: Path, source) -> Path:
    """Save a masked-LM (or a :class:`~spladekit.model.splade.SpladeModel` with head options) and its
    tokenizer into ``folder`` atomically (temporary folder, then rename) by the one model-folder writer,
    with a ``spladekit.json`` keeping the pooling and activation of ``source`` (the
    :class:`~spladekit.model.folders.ModelFolder` it was loaded from) and the head options, so training
    from it keeps them."""
    from spladekit.io import atomic_folder
    from spladekit.model.encoder import EncoderMetadata
    from spladekit.model.splade import SpladeModel
    from spladekit.model.writer import write_model_folder

    described = source.metadata()
    model = mlm if isinstance(mlm, SpladeModel) else SpladeModel(mlm, "plain", described.pooling, described.activation)
    with atomic_folder(folder) as tmp:
        write_model_folder(tmp, model, tokenizer, EncoderMetadata(source=str(source.root)))
    return folder


def _treated_model(mlm, tokenizer, source, treatment):
    """The cell's :class:`~spladekit.model.splade.SpladeModel`: the start folder's pooling and
    activation, and its head options under the treatment's ``head`` (an activity target and the
    diagnosis count what this head outputs); ``treatment`` None: the start folder's head."""
    from spladekit.model.calibrate.spec import HeadSpec
    from spladekit.model.splade import SpladeModel

    meta = source.metadata()
    head = treatment.head if treatment is not None and treatment.head is not None else HeadSpec()
    options = head.resolve(meta, tokenizer, int(mlm.config.vocab_size), source.root)
    return SpladeModel(mlm, "plain", meta.pooling, meta.activation, **options)


def read_metrics_log(path: str | Path) -> list[dict]:
    """The training records (not validation) of a ``metrics.jsonl`` log, in step order.

    Raises:
        DataFormatError: a line is not JSON.
    """
    from spladekit.io import read_jsonl

    records = []
    path = Path(path)
    if not path.exists():
        return records
    for _, record in read_jsonl(path):
        if record.get("split", "train") == "train":
            records.append(record)
    return sorted(records, key=lambda r: r.get("step", 0))


SUMMARY_KEYS = ("loss", "grad_norm", "active_q", "active_d", "batch_flops", "head_norm", "logit_p99", "logit_max")


def summarize_training(records: list[dict]) -> dict:
    """First/last values of the main training statistics and the largest gradient norm.

    Returns:
        ``{"steps", "first": {...}, "last": {...}, "max_grad_norm", "train_seconds"}``; keys absent
        from the log are left out.
    """
    if not records:
        return {"steps": 0}
    pick = lambda r: {k: r[k] for k in SUMMARY_KEYS if isinstance(r.get(k), (int, float))}  # noqa: E731
    norms = [r["grad_norm"] for r in records if isinstance(r.get("grad_norm"), (int, float))]
    times = [r["step_time_s"] for r in records if isinstance(r.get("step_time_s"), (int, float))]
    return {
        "steps": records[-1].get("step", len(records)),
        "first": pick(records[0]),
        "last": pick(records[-1]),
        "max_grad_norm": max(norms) if norms else None,
        "train_seconds": sum(times) if times else None,
    }


class SpladekitRunner:
    """The real :class:`~spladekit.reproduce.grid.CellRunner` (see the module docstring).

    Args:
        show_progress: tqdm bars for training and encoding.
    """

    def __init__(self, show_progress: bool = True, trust_remote_code: bool = False):
        self.show_progress = show_progress
        self.trust_remote_code = trust_remote_code  # run the model folders' own code (spladekit.model.remote_code)
        self._texts: list[str] | None = None
        self._datasets: dict[str, object] = {}

    def _diagnosis_texts(self, config: ReproduceConfig) -> list[str]:
        if self._texts is None:
            self._texts = diagnosis_texts(config)
        return self._texts

    def prepare_backbone(self, backbone, config: ReproduceConfig, folder: Path) -> dict:
        from spladekit.data.resolve import resolve_model
        from spladekit.model.calibrate.spec import RescaleSpec
        from spladekit.model.encoder import load_model_folder

        location = resolve_model(backbone.path)
        if (
            backbone.inflate is None and backbone.emulate is None
        ):  # init_cell loads it (and refuses a checkpoint without MLM-head weights)
            return {"model": location, "source": location}
        from spladekit.model.calibrate import emulate_large_head

        mlm, tokenizer, source = load_model_folder(location, trust_remote_code=self.trust_remote_code)
        if backbone.emulate is not None:
            e = backbone.emulate
            done = {"emulation": emulate_large_head(mlm, e.kind, e.factor, sigma=e.sigma, seed=e.seed)}
        else:
            done = {"inflate": RescaleSpec(factor=backbone.inflate).apply(mlm)}
        model = _save_model(mlm, tokenizer, folder / "model", source)
        return {"model": str(model), "source": location, **done}

    def init_cell(self, cell, base_model: str, config: ReproduceConfig, folder: Path) -> dict:
        from spladekit.model.calibrate import diagnose_mlm_head, rescale_record
        from spladekit.model.encoder import load_model_folder

        mlm, tokenizer, source = load_model_folder(base_model, trust_remote_code=self.trust_remote_code)
        texts = self._diagnosis_texts(config)
        d = config.diagnosis
        kwargs = dict(max_length=d.max_length, max_tokens=d.max_tokens)
        before = diagnose_mlm_head(
            _treated_model(mlm, tokenizer, source, None), tokenizer, texts, name=cell.backbone.name, **kwargs
        )  # the start model's head
        model = _treated_model(mlm, tokenizer, source, cell.treatment)
        result = {"model": base_model, "factor": None, "diagnosis_before": before.to_dict(), "diagnosis_after": None}
        spec = cell.treatment.rescale
        if spec is not None or cell.treatment.head is not None:
            if spec is not None:
                result["factor"] = spec.apply(
                    model,
                    tokenizer,
                    texts,
                    {"max_length": d.max_length, "max_tokens": d.max_tokens},
                    force=spec.force or cell.backbone.inflate is not None,
                )
                result["shift"] = (rescale_record(model) or {}).get("history", [{}])[-1].get("shift")
            after = diagnose_mlm_head(
                model, tokenizer, texts, name=f"{cell.backbone.name}+{cell.treatment.name}", **kwargs
            )
            result["diagnosis_after"] = after.to_dict()
            result["model"] = str(_save_model(model, tokenizer, folder / "model", source))
        return result

    def train_cell(self, cell, init_model: str, config: ReproduceConfig, folder: Path) -> dict:
        from spladekit.train import train

        train_config = config.train_config(init_model, cell.seed)
        if self.trust_remote_code:
            train_config.model.trust_remote_code = True
        result = train(train_config, folder, show_progress=self.show_progress)
        records = read_metrics_log(result.metrics_path)
        return {
            "model": str(result.model_dir),
            "metrics_path": str(result.metrics_path),
            "alarms": list(result.alarms),
            "summary": summarize_training(records),
        }

    def evaluate(self, model: str, dataset: EvalDatasetSpec, config: ReproduceConfig, folder: Path) -> dict:
        from spladekit.evaluate.retrieval import evaluate_splade
        from spladekit.evaluate.systems import write_system
        from spladekit.index.index import searcher_config
        from spladekit.model.encoder import SpladeEncoder

        ev = config.evaluation
        encoder = SpladeEncoder.from_pretrained(
            model,
            query_max_length=ev.query_max_length,
            doc_max_length=ev.doc_max_length,
            query_top_k=dataset.query_top_k,
            doc_top_k=dataset.doc_top_k,
            batch_size=ev.batch_size,
            head_impl=ev.head_impl,
            device=config.device,
            trust_remote_code=self.trust_remote_code,
        )
        key = dataset.model_dump_json(include={"path", "split", "qrels", "queries", "max_docs"})
        if key not in self._datasets:
            self._datasets[key] = load_eval_dataset(dataset)
        result = evaluate_splade(
            encoder,
            self._datasets[key],
            k=ev.k,
            measures=dataset.measures,
            show_progress=self.show_progress,
            name=dataset.name,
            searcher=searcher_config(ev.backend),
        )
        write_system(
            result,
            folder,
            {
                "model": model,
                "dataset": dataset.model_dump(),
                "query_max_length": encoder.metadata.query_max_length,
                "doc_max_length": encoder.metadata.doc_max_length,
                "k": ev.k,
                "pooling": encoder.metadata.pooling,
                "activation": encoder.metadata.activation,
                "query_top_k": dataset.query_top_k,
                "doc_top_k": dataset.doc_top_k,
            },
        )
        metrics = dict(result.metrics)
        metrics["wall_time_s"] = round(result.seconds, 3)
        return metrics
