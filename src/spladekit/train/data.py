"""Training data: readers (streaming, strict) and the deterministic batch sampler.

Readers turn each supported layout into :class:`TrainingExample` records (a query, its positive
documents, its hard negatives, and optional teacher scores):

- BEIR training qrels (``qrels/train.tsv``) with hard negatives mined by BM25 (bm25s) or by a
  spladekit model: :func:`read_beir_training`;
- the naver/splade layout (``triplets/raw.tsv``; or ``qrel/qrel.json`` + queries +
  ``full_collection/raw.tsv`` + teacher scores ``{qid: {docid: score}}``): :func:`read_naver`;
- MS MARCO-style ``query<TAB>positive<TAB>negative`` triples: :func:`iter_triples`;
- Hugging Face ``datasets`` with the sentence-transformers column conventions:
  :func:`spladekit.train.hf.read_hf_dataset`.

A malformed line raises :class:`~spladekit.errors.DataFormatError` naming the file and the line;
nothing is skipped silently.

Sampling (:func:`global_batch`) is a pure function of (seed, step): the stream of examples is the
concatenation of one seeded permutation per epoch, and the positive/negatives of the example at
stream position ``p`` are drawn with a generator seeded by (seed, p). So the global batch does not
depend on the number of processes, and a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from spladekit.data.numbers import finite_number
from spladekit.errors import DataFormatError
from spladekit.io import iter_lines, read_json
from spladekit.train.examples import TrainingExample
from spladekit.train.published import read_score_pickle


# ------------------------------------------------------------------------------------ triples
def iter_triples(path: str | Path) -> Iterator[TrainingExample]:
    """Stream an MS MARCO-style triples TSV: ``query<TAB>positive<TAB>negative`` per line.

    Query and document ids are ``"<line>"``, ``"<line>+"`` and ``"<line>-"``.

    Raises:
        DataFormatError: a line without exactly three tab-separated fields, an empty field, or an
            empty file (naming the file and line).
    """
    path = Path(path)
    if not path.exists():
        raise DataFormatError(path, "missing: triples file not found")
    empty = True
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise DataFormatError(
                path, f"expected 3 tab-separated fields (query, positive, negative), got {len(parts)}", line=number
            )
        if not all(p.strip() for p in parts):
            raise DataFormatError(path, "empty query, positive or negative text", line=number)
        empty = False
        q, pos, neg = parts
        yield TrainingExample(str(number), q, [(f"{number}+", pos)], [(f"{number}-", neg)])
    if empty:
        raise DataFormatError(path, "file is empty")


# ------------------------------------------------------------------------------------ naver layout
def _read_json(path: Path) -> dict:
    if not path.exists():
        raise DataFormatError(path, "missing")
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataFormatError(path, "expected a JSON object {qid: {docid: value}}")
    return data


def read_score_file(path: str | Path) -> dict[str, dict[str, float]]:
    """Read teacher scores or qrels in the naver/splade JSON form ``{qid: {docid: number}}``, or
    its pickle (``.pkl``/``.pkl.gz``: :func:`spladekit.train.published.read_score_pickle`).

    Ids by :func:`spladekit.data.ids.unique_ids` (the pickles' rule: ``" 10"`` and ``"10"`` are one
    id, refused when both are keys of one object).

    Raises:
        DataFormatError: not JSON, not a nested object, two keys that are one id, or a non-numeric or
            non-finite value (NaN, Infinity, 1e400; naming the field ``qid.docid``).
    """
    path = Path(path)
    if path.name.endswith((".pkl", ".pkl.gz", ".pickle")):  # naver/splade's published pickles
        return read_score_pickle(path)
    from spladekit.data.ids import unique_ids

    out: dict[str, dict[str, float]] = {}
    for qid, docs in unique_ids(_read_json(path).items(), path, "query").items():
        if not isinstance(docs, dict):
            raise DataFormatError(path, "expected an object {docid: score}", field=qid)
        out[qid] = {
            docid: finite_number(value, path, f"{qid}.{docid}")
            for docid, value in unique_ids(docs.items(), path, "document", qid).items()
        }
    return out


def read_naver(
    folder: str | Path, teacher_scores: str | Path | None = None, queries: str | Path | None = None
) -> list[TrainingExample]:
    """Read the naver/splade training layout.

    Without ``teacher_scores``: the text triples ``folder/triplets/raw.tsv``.
    With ``teacher_scores`` (``{qid: {docid: score}}``): queries (``queries`` or
    ``folder/train_queries/raw.tsv``), ``folder/full_collection/raw.tsv``, ``folder/qrel/qrel.json``;
    positives are the qrel documents, negatives the other scored documents, and ``teacher`` the scores.

    Queries that give no training pair (scored without a relevant document in ``qrel.json``, or
    relevant documents without a teacher-score entry) are skipped with a warning (count, first ids).

    Raises:
        DataFormatError: a missing or malformed file (a non-finite score or grade included); a qid or
            docid that the queries/collection lack; a qrel positive without a teacher score.
    """
    from spladekit.data.tsv import read_tsv

    folder = Path(folder)
    if teacher_scores is None:
        return list(iter_triples(folder / "triplets" / "raw.tsv"))
    scores_path = Path(teacher_scores)
    if not scores_path.is_absolute() and not scores_path.exists():
        scores_path = folder / scores_path
    scores = read_score_file(scores_path)
    qrel_path = folder / "qrel" / "qrel.json"
    qrels = read_score_file(qrel_path)
    queries_path = Path(queries) if queries else folder / "train_queries" / "raw.tsv"
    if queries and not queries_path.is_absolute() and not queries_path.exists():
        queries_path = folder / queries_path
    if not queries_path.exists():
        raise DataFormatError(queries_path, "missing: give data.queries (an id<TAB>text file)")
    query_text = read_tsv(queries_path)
    collection_path = folder / "full_collection" / "raw.tsv"
    collection = read_tsv(collection_path)
    examples, no_positive = [], []
    for qid, scored in scores.items():
        if qid not in query_text:
            raise DataFormatError(queries_path, f"query id {qid!r} of {scores_path.name} is missing")
        positives = [d for d, grade in qrels.get(qid, {}).items() if grade > 0]
        if not positives:
            no_positive.append(qid)  # a scored query without a relevant document cannot give a training pair
            continue
        for docid in scored:
            if docid not in collection:
                raise DataFormatError(collection_path, f"document id {docid!r} of {scores_path.name} is missing")
        missing = [d for d in positives if d not in scored]
        if missing:
            raise DataFormatError(scores_path, f"no teacher score for relevant document {missing[0]!r}", field=qid)
        negatives = [d for d in scored if d not in positives]
        examples.append(
            TrainingExample(
                qid,
                query_text[qid],
                [(d, collection[d]) for d in positives],
                [(d, collection[d]) for d in negatives],
                dict(scored),
            )
        )
    if not examples:
        raise DataFormatError(scores_path, "no query has both a relevant document in qrel.json and teacher scores")
    unscored = [q for q, docs in qrels.items() if q not in scores and any(g > 0 for g in docs.values())]
    for skipped, why in (
        (no_positive, f"scored in {scores_path.name} without a relevant document in qrel.json"),
        (unscored, f"with a relevant document in qrel.json but no entry in {scores_path.name}"),
    ):
        if skipped:
            warnings.warn(
                f"{scores_path}: {len(skipped)} queries {why} skipped (no training pair), e.g. "
                f"{_first_ids(skipped)}; {len(examples)} queries read",
                stacklevel=2,
            )
    return examples


def _first_ids(ids: Sequence[str], n: int = 5) -> str:
    return ", ".join(repr(i) for i in ids[:n]) + (" …" if len(ids) > n else "")


# ------------------------------------------------------------------------------------ BEIR
def mine_negatives_bm25(query_texts: Sequence[str], doc_texts: Sequence[str], depth: int) -> list[list[int]]:
    """BM25 (bm25s) top-``depth`` document indices per query (see :func:`spladekit.index.bm25.bm25_search`)."""
    from spladekit.index.bm25 import bm25_search

    return [[i for i, _ in hits] for hits in bm25_search(query_texts, doc_texts, k=depth)]


def mine_negatives_model(model: str, queries: dict[str, str], corpus: dict[str, str], depth: int) -> list[list[str]]:
    """Top-``depth`` document ids per query (``queries`` order) by a spladekit model: the corpus is
    indexed in a temporary :class:`~spladekit.index.index.Index` and searched exactly (ties broken
    by document id, the rule of every spladekit search)."""
    import tempfile

    from spladekit.index.index import Index
    from spladekit.model.encoder import SpladeEncoder

    encoder = SpladeEncoder.from_pretrained(model)
    with tempfile.TemporaryDirectory(prefix="spladekit-mining-") as scratch:
        index = Index.build(encoder, corpus, Path(scratch) / "index", show_progress=True, distributed=False)
        hits = index.search(queries, k=depth, encoder=encoder).hits
        del index  # close the memory maps before the folder goes
    return [[doc_id for doc_id, _ in row] for row in hits]


def read_beir_training(
    path: str | Path,
    split: str = "train",
    negatives: str = "bm25",
    depth: int = 30,
    negatives_model: str | None = None,
    teacher_scores: str | Path | None = None,
    max_queries: int | None = None,
) -> list[TrainingExample]:
    """BEIR training qrels (grade > 0 = positive) with mined hard negatives.

    Negatives are the top-``depth`` documents of the miner (``bm25``, ``model``) that are not judged
    relevant. With ``teacher_scores`` (``{qid: {docid: score}}``, every id a query of the split and a
    document of the corpus) they are those of the miner's documents that have a teacher score (a
    warning counts the scored documents left out, outside the miner's top-``depth``), or, with
    ``negatives="teacher"``, every scored document that is not judged relevant (the naver layout's
    rule; in the file's order, no depth cut).

    Raises:
        DataFormatError / ResolutionError: from :func:`spladekit.data.beir.load_beir`; a query
            without any relevant document; a teacher-score file that is malformed or names a query or
            document the dataset lacks (naming the file and ``qid``/``qid.docid``).
        ValueError: ``negatives="model"`` without ``negatives_model``; ``negatives="teacher"``
            without ``teacher_scores``.
    """
    from spladekit.data.beir import load_beir

    dataset = load_beir(path, split)
    qids = [q for q in dataset.queries if any(g > 0 for g in dataset.qrels[q].values())]
    if max_queries is not None:
        qids = qids[:max_queries]
    if not qids:
        raise DataFormatError(dataset.path / "qrels" / f"{split}.tsv", "no query with a relevant document")
    if negatives == "teacher" and not teacher_scores:
        raise ValueError("data.negatives='teacher' needs data.teacher_scores")
    teacher = None
    if teacher_scores:  # read and checked before mining (the miner may take long)
        teacher_path = Path(teacher_scores)
        teacher = read_score_file(teacher_path)
        _check_teacher_ids(teacher, teacher_path, dataset)
    mined = _mined(negatives, qids, dataset, depth, negatives_model)
    examples = []
    left_out = scored_total = queries_short = 0
    for qid, hits in zip(qids, mined):
        relevant = {d for d, g in dataset.qrels[qid].items() if g > 0}
        missing = [d for d in relevant if d not in dataset.corpus]
        if missing:
            raise DataFormatError(
                dataset.path / "qrels" / f"{split}.tsv", f"document {missing[0]!r} not in the corpus", field=qid
            )
        negs = [d for d in hits if d not in relevant][:depth]
        scores = None
        if teacher is not None:
            scores = teacher.get(qid, {})
            scored = [d for d in scores if d not in relevant]
            if negatives == "teacher":
                negs = scored
            elif negatives != "none":
                negs = [d for d in negs if d in scores]
                left_out += len(scored) - len(negs)
                scored_total += len(scored)
                queries_short += len(negs) < len(scored)
        examples.append(
            TrainingExample(
                qid,
                dataset.queries[qid],
                [(d, dataset.corpus[d]) for d in sorted(relevant)],
                [(d, dataset.corpus[d]) for d in negs],
                scores,
            )
        )
    if left_out:
        warnings.warn(
            f"{teacher_scores}: {left_out:,} of the {scored_total:,} scored non-relevant documents of "
            f"{len(qids):,} queries ({queries_short:,} queries affected) are not among the {negatives} "
            f"miner's top-{depth} and are not used as negatives; data.negatives: teacher uses every scored "
            "document (or raise data.mining_depth)",
            stacklevel=2,
        )
    return examples


def _mined(negatives: str, qids: list[str], dataset, depth: int, negatives_model: str | None) -> list[list[str]]:
    """Each query's top ``depth + 20`` document ids by the miner ``negatives`` (none for ``none`` and ``teacher``).

    Raises:
        ValueError: ``model`` without ``negatives_model``; an unknown miner.
    """
    doc_ids = list(dataset.corpus)
    doc_texts = [dataset.corpus[d] for d in doc_ids]
    query_texts = [dataset.queries[q] for q in qids]
    if negatives == "bm25":
        mined = [[doc_ids[i] for i in hits] for hits in mine_negatives_bm25(query_texts, doc_texts, depth + 20)]
    elif negatives == "model":
        if not negatives_model:
            raise ValueError("data.negatives='model' needs data.negatives_model")
        mined = mine_negatives_model(negatives_model, {q: dataset.queries[q] for q in qids}, dataset.corpus, depth + 20)
    elif negatives in ("none", "teacher"):
        mined = [[] for _ in qids]
    else:
        raise ValueError(f"unknown negative miner {negatives!r}")
    return mined


def _check_teacher_ids(teacher: dict[str, dict[str, float]], path: Path, dataset) -> None:
    """Refuse teacher scores for a query that ``dataset``'s split lacks or a document not in its corpus."""
    for qid, docs in teacher.items():
        if qid not in dataset.queries:
            raise DataFormatError(
                path,
                f"query id {qid!r} is not a query of {dataset.path / 'qrels' / (dataset.split + '.tsv')}",
                field=qid,
            )
        for docid in docs:
            if docid not in dataset.corpus:
                raise DataFormatError(
                    path, f"document id {docid!r} is not in the corpus of {dataset.path}", field=f"{qid}.{docid}"
                )


def short_negatives_hint(config) -> str:
    """Why queries may have few hard negatives under a :class:`~spladekit.train.config.DataConfig`:
    BEIR with teacher scores keeps only the miner's documents that have a score (see
    :func:`read_beir_training`); empty for any other data."""
    if config.format != "beir" or not config.teacher_scores or config.negatives == "teacher":
        return ""
    if config.negatives == "none":
        return "; data.negatives is none (no hard negatives): data.negatives: teacher takes the scored documents"
    return (
        f"; with data.teacher_scores the hard negatives are the {config.negatives} miner's top-"
        f"{config.mining_depth} documents that have a teacher score (a warning counted the scored documents "
        "outside them): data.negatives: teacher uses every scored document, or raise data.mining_depth"
    )


def load_training_examples(config) -> list[TrainingExample]:
    """Read the examples a :class:`~spladekit.train.config.DataConfig` describes."""
    if config.format == "beir":  # max_queries before mining, so only those queries are mined
        return read_beir_training(
            config.path,
            config.split,
            config.negatives,
            config.mining_depth,
            config.negatives_model,
            config.teacher_scores,
            config.max_queries,
        )
    if config.format == "hf":  # a lazy view over memory-mapped Arrow, max_queries applied inside
        from spladekit.train.hf import read_hf_dataset

        return read_hf_dataset(config)
    if config.format in ("st-hard-negatives", "st-margin-mse"):  # published score files (spladekit.train.published)
        from spladekit.train.published import load_published

        examples = load_published(config)
    elif config.format == "triples" and str(config.path).startswith("irds:"):  # ir_datasets docpairs
        from spladekit.train.published import read_irds_docpairs

        return read_irds_docpairs(str(config.path)[len("irds:") :], config.max_queries)
    elif config.format == "triples":
        examples = list(iter_triples(config.path))
    else:
        examples = read_naver(config.path, config.teacher_scores, config.queries)
    return examples[: config.max_queries]


def split_validation(examples: Sequence[TrainingExample], fraction: float, seed: int) -> tuple[Sequence, Sequence]:
    """Hold out ``round(fraction·N)`` queries (a seeded choice, by query id) for validation.

    ``examples`` is a list, or a lazy view with ``qids()`` and ``subset(indices)`` (a Hugging Face
    dataset, :class:`spladekit.train.hf.DatasetExamples`), which stays lazy.

    Returns:
        ``(train, validation)``, each in the original order (lists, or views for a view).
    """
    if fraction <= 0:
        return examples, []
    all_qids = examples.qids() if hasattr(examples, "qids") else [e.qid for e in examples]
    qids = sorted(set(all_qids))
    random.Random(seed).shuffle(qids)
    held = set(qids[: max(1, round(fraction * len(qids)))])
    train_idx = [i for i, q in enumerate(all_qids) if q not in held]
    val_idx = [i for i, q in enumerate(all_qids) if q in held]
    if not train_idx:
        raise ValueError(f"validation_fraction={fraction} leaves no training query")
    if hasattr(examples, "subset"):
        return examples.subset(train_idx), examples.subset(val_idx)
    return [examples[i] for i in train_idx], [examples[i] for i in val_idx]


# ------------------------------------------------------------------------------------ sampling
@dataclass
class Batch:
    """A batch: ``B`` queries, ``B·G`` documents (each query's positive then negatives), teacher ``[B][G]``."""

    queries: list[str]
    docs: list[str]
    teacher: list[list[float]] | None
    group: int

    def slice(self, start: int, stop: int) -> Batch:
        """Queries ``start:stop`` with their document groups."""
        g = self.group
        return Batch(
            self.queries[start:stop],
            self.docs[start * g : stop * g],
            self.teacher[start:stop] if self.teacher is not None else None,
            g,
        )


@functools.lru_cache(maxsize=4)
def _permutation(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
    return tuple(order)


def check_distillation(examples: Sequence[TrainingExample], num_negatives: int, source: str, hint: str = "") -> None:
    """Refuse, before training, examples that :func:`global_batch` could not give teacher scores for.

    Distillation needs a teacher score for every sampled document: each positive and hard negative
    must have one, and each query needs ``num_negatives`` hard negatives (a short group is completed
    with other queries' positives, which have no teacher score for this query).

    Args:
        hint: appended to the refusal of a query short of negatives (:func:`short_negatives_hint`).

    Raises:
        DataFormatError: naming ``source`` (the data's path), the query and ``data.num_negatives``.
    """
    short = unscored = None
    count = 0
    for example in examples:
        if unscored is None:
            scored = example.teacher or {}
            missing = [d for d, _ in (*example.positives, *example.negatives) if d not in scored]
            if missing:
                unscored = (example.qid, missing[0])
        if len(example.negatives) < num_negatives:
            count += 1
            short = short or (example.qid, len(example.negatives))
    if unscored is not None:
        raise DataFormatError(
            source,
            f"query {unscored[0]!r} has no teacher score for document {unscored[1]!r}; "
            "distillation (loss.kind margin_mse/kl) needs one for every positive and negative",
        )
    if short is not None:
        raise DataFormatError(
            source,
            f"query {short[0]!r} has {short[1]} hard negatives, data.num_negatives is "
            f"{num_negatives} ({count} queries have fewer); distillation cannot complete a group "
            "with other queries' positives (they have no teacher score for it): lower "
            f"data.num_negatives{hint}",
            field="data.num_negatives",
        )


def global_batch(
    examples: Sequence[TrainingExample],
    step: int,
    batch_size: int,
    num_negatives: int,
    seed: int,
    need_teacher: bool = False,
) -> Batch:
    """The global batch of optimiser step ``step`` (0-based); see the module docstring.

    An example with fewer hard negatives than ``num_negatives`` is completed with the positives of
    other random examples (random negatives).

    Raises:
        ValueError: ``need_teacher`` and an example lacks a teacher score for a chosen document.
    """
    n = len(examples)
    if n == 0:
        raise ValueError("no training examples")
    queries, docs, teacher = [], [], []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        example = examples[_permutation(n, seed, epoch)[offset]] if n > 1 else examples[0]
        rng = random.Random(f"{seed}/pos/{position}")
        chosen = [rng.choice(example.positives)]
        pool = example.negatives
        if len(pool) >= num_negatives:
            chosen += rng.sample(pool, num_negatives)
        else:
            chosen += list(pool)
            while len(chosen) < 1 + num_negatives:
                other = examples[rng.randrange(n)]
                if other.qid != example.qid or n == 1:
                    chosen.append(rng.choice(other.positives))
        queries.append(example.query)
        docs.extend(text for _, text in chosen)
        if need_teacher:
            if example.teacher is None or any(d not in example.teacher for d, _ in chosen):
                raise ValueError(f"query {example.qid!r}: distillation needs teacher scores for every sampled document")
            teacher.append([example.teacher[d] for d, _ in chosen])
    return Batch(queries, docs, teacher if need_teacher else None, 1 + num_negatives)
