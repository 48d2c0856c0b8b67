"""The Markdown body of a model card (:func:`spladekit.publish.card.build_model_card` adds the front
matter). Each section is written only from records the folder has; nothing is guessed."""

from __future__ import annotations

import math

CITATIONS = {
    "splade": """@inproceedings{formal2021splade,
  title     = {SPLADE: Sparse Lexical and Expansion Model for First Stage Ranking},
  author    = {Formal, Thibault and Piwowarski, Benjamin and Clinchant, St{\\'e}phane},
  booktitle = {Proceedings of the 44th International ACM SIGIR Conference on Research and Development in Information Retrieval},
  pages     = {2288--2292},
  year      = {2021},
  doi       = {10.1145/3404835.3463098}
}""",
    "splade-v2": """@misc{formal2021spladev2,
  title         = {SPLADE v2: Sparse Lexical and Expansion Model for Information Retrieval},
  author        = {Formal, Thibault and Lassance, Carlos and Piwowarski, Benjamin and Clinchant, St{\\'e}phane},
  year          = {2021},
  eprint        = {2109.10086},
  archivePrefix = {arXiv}
}""",
    "rescaling": """@misc{rescaling2026mlmhead,
  title         = {Rescaling MLM-Head for Neural Sparse Retrieval},
  year          = {2026},
  eprint        = {2606.18811},
  archivePrefix = {arXiv}
}""",
    "flops": """@inproceedings{paria2020flops,
  title     = {Minimizing FLOPs to Learn Efficient Sparse Representations},
  author    = {Paria, Biswajit and Yeh, Chih-Kuan and Yen, Ian E. H. and Xu, Ning and Ravikumar, Pradeep and P{\\'o}czos, Barnab{\\'a}s},
  booktitle = {International Conference on Learning Representations},
  year      = {2020}
}""",
    "inference-free": """@misc{geng2024inferencefree,
  title         = {Towards Competitive Search Relevance For Inference-Free Learned Sparse Retrievers},
  author        = {Geng, Zhichao and others},
  year          = {2024},
  eprint        = {2411.04403},
  archivePrefix = {arXiv}
}""",
    "sentence-transformers": """@inproceedings{reimers-2019-sentence-bert,
  title     = {Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks},
  author    = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing},
  year      = {2019},
  url       = {https://arxiv.org/abs/1908.10084}
}""",
}
ACTIVATION_FORMULA = {"relu": "log(1 + ReLU(z))", "log1p_relu": "log(1 + log(1 + ReLU(z)))"}


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.6g}"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_number(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _inference_free_text(sk: dict) -> list[str]:
    """The card's paragraph on an inference-free query side: a table of weights, and where they come from."""
    record = (sk.get("extra") or {}).get("inference_free") or {}
    how = ""
    if record.get("idf_documents"):
        how = f" The weights are the IDF of {record['idf_documents']} documents"
        how += (f", {record['formula']}" if record.get("formula") else "") + "."
    elif record.get("init"):
        how = f" The weights start from the {record['init']}" + (
            ", trained jointly with the documents." if record.get("trained") else "."
        )
    return [
        "",
        "Queries are **inference-free**: a query's vector is the bag of its tokens, each weighted by its "
        "entry in a table (`query_weights.safetensors`); only documents go through the model." + how,
    ]


def _what(records, name: str, base_model: str | None) -> str:
    sk, config = records.spladekit, records.config
    arch = ", ".join(config.get("architectures") or []) or config.get("model_type") or "a masked-language model"
    pooling, activation = sk.get("pooling", "max"), sk.get("activation", "relu")
    vocab = config.get("vocab_size") or (records.onnx or {}).get("vocab_size")
    lines = [
        f"# {name}",
        "",
        f"A SPLADE learned sparse retriever made with spladekit: every text "
        f"becomes a vector over the {vocab or 'model'}-token vocabulary, w_j = {pooling} over positions of "
        f"{ACTIVATION_FORMULA.get(activation, activation)} applied to the MLM-head logits z, and a query scores a "
        "document by the dot product of their vectors (no normalisation).",
    ]
    if records.inference_free:
        lines += _inference_free_text(sk)
    if records.onnx is not None:
        onnx = records.onnx
        lines += [""]
        lines.append(
            f"This folder is an **ONNX export** (`{onnx.get('file', 'model.onnx')}`, opset {onnx.get('opset')}): "
            f"inputs {', '.join(onnx.get('inputs') or [])}, output `{onnx.get('output')}` = the pooled "
            "vectors `[batch, vocabulary]`" + (f", {onnx['quantize']} quantised" if onnx.get("quantize") else "") + "."
        )
    rows = [
        ["backbone", arch],
        ["pooling", pooling],
        ["activation", activation],
        [
            "max length (tokens): queries / documents",
            f"{sk['query_max_length']} / {sk['doc_max_length']}"
            if "query_max_length" in sk and "doc_max_length" in sk
            else "64 / 256 in spladekit (its defaults: the folder states none)",
        ],
    ]
    if sk.get("query_top_k") or sk.get("doc_top_k"):
        rows.append(["top-k kept: queries / documents", f"{sk.get('query_top_k')} / {sk.get('doc_top_k')}"])
    if sk.get("position_top_k"):
        rows.append(["pooled per position", f"its {sk['position_top_k']} largest logits (`position_top_k`)"])
    if isinstance(sk.get("fold"), dict):
        rows.append(
            [
                "folded vocabulary",
                f"{len(sk['fold'].get('terms') or [])} terms: case and word-start variants "
                "of one word are one term (`spladekit.json` `fold`)",
            ]
        )
    if base_model or records.source:
        rows.append(["made from", f"`{base_model or records.source}`"])
    lines += ["", _table(["", ""], rows)]
    return "\n".join(lines)


def _usage(records, reference: str) -> str:
    lines = ["## Usage", ""]
    loadable = records.sentence_transformers or records.onnx is not None or bool(records.config)
    if not loadable:  # an engine's export (no config.json): its own calls are in HOW_TO_LOAD.md
        if (records.folder / "HOW_TO_LOAD.md").is_file():
            return "\n".join(
                lines
                + [
                    "The engine's own register/import calls, the index mapping and the query body: "
                    "[HOW_TO_LOAD.md](HOW_TO_LOAD.md)."
                ]
            )
        return "\n".join(lines + ["This folder is an export for a serving engine; spladekit does not load it."])
    if records.sentence_transformers:
        lines += [
            "With [sentence-transformers](https://www.sbert.net) (`pip install sentence-transformers`):",
            "",
            "```python",
            "from sentence_transformers import SparseEncoder",
            "",
            f"model = SparseEncoder({reference!r})",
            'queries = model.encode_query(["what is a sparse retriever?"])',
            'documents = model.encode_document(["SPLADE expands a text into weighted vocabulary terms.", '
            '"Paris is the capital of France."])',
            "scores = model.similarity(queries, documents)  # dot products, [1, 2]",
            "print(scores)",
            "```",
            "",
        ]
    if records.onnx is not None:
        lines += [
            "With spladekit (`pip install 'spladekit[onnx]'`, onnxruntime runs the graph):",
            "",
            "```python",
            "from spladekit.model.onnx_export import OnnxSpladeEncoder",
            "",
            f"encoder = OnnxSpladeEncoder({reference!r})",
        ]
    else:
        lines += [
            "With spladekit (`pip install spladekit`):",
            "",
            "```python",
            "from spladekit import SpladeEncoder",
            "",
            f"encoder = SpladeEncoder.from_pretrained({reference!r})",
        ]
    lines += [
        'queries = encoder.encode_queries(["what is a sparse retriever?"])  # scipy.sparse CSR [1, V]',
        'documents = encoder.encode_documents(["SPLADE expands a text into weighted vocabulary terms.", '
        '"Paris is the capital of France."])',
        "scores = (queries @ documents.T).toarray()  # dot products, [1, 2]",
        "print(scores)",
        "```",
        "",
        "From the command line: `spladekit index --model MODEL --data CORPUS --out INDEX`, then "
        "`spladekit search` / `spladekit serve`; `spladekit evaluate --model MODEL --data DATA --out EVAL` scores it.",
    ]
    return "\n".join(lines)


def _rescale_row(i: int, step: dict) -> list:
    """Row ``i`` of the rescaling history table: the mode (and what it matched), F, whether the bias was scaled,
    the shift, and the mean decoder-row norm before and after."""
    how = step.get("mode")
    if step.get("mode") == "match_norm":
        how += f" (reference {step.get('reference')}, row norm {_number(step.get('reference_row_norm_mean'))})"
    elif step.get("mode") in ("target_logit", "joint"):
        how += f" ({step.get('statistic')} = {_number(step.get('target'))} on {step.get('n_texts')} texts)"
    if step.get("shift_mode") == "activity":
        how += (
            f"; shift: {step.get('activity_statistic')} {_number(step.get('activity_reached'))} "
            f"(target {_number(step.get('activity_target'))})"
        )
    before = (step.get("norms_before") or {}).get("row_norm_mean")
    after = (step.get("norms_after") or {}).get("row_norm_mean")
    return [
        i,
        how,
        step.get("factor"),
        "yes" if step.get("scale_bias") else "no",
        step.get("shift", 0.0),
        before,
        after,
    ]


def _head(records) -> str:
    lines = [
        "## MLM head: diagnosis and rescaling",
        "",
        "SPLADE's activations follow the scale of the MLM head's decoder; spladekit measures it and, where "
        "asked, multiplies the head projection by a constant F before training (arXiv 2606.18811).",
    ]
    rescale = records.rescale
    if rescale and rescale.get("history"):
        rows = [_rescale_row(i, step) for i, step in enumerate(rescale["history"], 1)]
        lines += [
            "",
            _table(["#", "mode", "F", "bias scaled", "shift s", "mean decoder-row norm before", "after"], rows),
            "",
            f"Total factor {_number(rescale.get('total_factor'))}, total shift {_number(rescale.get('total_shift', 0.0))} "
            "(the decoder bias is b·F_bias − s; recorded in `config.json` `spladekit_rescale`"
            + (", settings in `rescale_config.json`" if records.rescale_config else "")
            + ").",
        ]
    elif records.training and (records.training.get("rescale") or {}).get("factor") is not None:
        r = records.training["rescale"]
        lines += ["", f"Rescaled before training: mode {r.get('mode')}, F = {_number(r.get('factor'))}."]
    else:
        lines += ["", "The head was not rescaled (no `spladekit_rescale` record)."]
    diagnosis = records.diagnosis
    if diagnosis:
        head = diagnosis.get("head") or {}
        norm = head.get("row_norm") or {}
        rows = [
            ["family", head.get("family")],
            ["decoder ‖W‖_F", head.get("frobenius")],
            ["mean decoder-row norm", norm.get("mean")],
        ]
        splade = diagnosis.get("splade") or {}
        if splade.get("active_terms"):
            rows.append(["active terms per text at initialisation", (splade["active_terms"] or {}).get("mean")])
        if diagnosis.get("scale_ratio") is not None:
            rows.append(["head scale / reference", diagnosis["scale_ratio"]])
        lines += [
            "",
            f"Diagnosis (`spladekit diagnose`, {diagnosis.get('model')}):",
            "",
            _table(["", ""], rows),
            "",
            f"Verdict: {diagnosis.get('verdict')}",
        ]
    return "\n".join(lines)


def _training(records) -> str | None:
    config = records.train_config
    if not config:
        return None
    data, loss, reg = config.get("data") or {}, config.get("loss") or {}, config.get("regularizer") or {}
    model = config.get("model") or {}
    rows = [
        ["base model", f"`{model.get('path')}`"],
        [
            "training data",
            f"{data.get('format')} `{data.get('path')}` split {data.get('split')}, "
            f"{data.get('num_negatives')} hard negative(s) per query ({data.get('negatives')})",
        ],
        [
            "loss",
            f"{loss.get('kind')} (temperature {loss.get('temperature')}, in-batch negatives "
            f"{loss.get('in_batch_negatives')})",
        ],
        [
            "regulariser",
            f"{reg.get('kind')}: λ_q = {reg.get('lambda_q')}, λ_d = {reg.get('lambda_d')}, quadratic "
            f"warm-up over {reg.get('warmup_steps')} steps",
        ],
        ["steps", config.get("steps")],
        ["batch (queries per step)", config.get("batch_size")],
        [
            "learning rate",
            f"{config.get('lr')} (AdamW, weight decay {config.get('weight_decay')}, "
            f"{config.get('warmup_steps')} warm-up steps, linear decay)",
        ],
        ["precision", config.get("precision")],
        ["seed", config.get("seed")],
    ]
    rescale = config.get("rescale") or {}
    if rescale.get("mode"):
        rows.append(["head rescaling before training", rescale.get("mode")])
    training = records.training or {}
    if training.get("steps") is not None:
        rows.append(["step of this model", training["steps"]])
    if training.get("selected"):
        sel = training["selected"]
        rows.append(
            ["model selected", f"best {sel.get('metric')} = {_number(sel.get('value'))} at step {sel.get('step')}"]
        )
    lines = ["## Training", "", _table(["", ""], rows)]
    if records.dev_records:
        lines += _dev_curve(config, records.dev_records)
    return "\n".join(lines)


def _dev_curve(config: dict, dev: list[dict]) -> list[str]:
    """The card's dev curve: where the dev queries come from, and a row per evaluation (the best one marked)."""
    settings = config.get("dev") or {}
    measures = [m for m in settings.get("measures") or [] if any(m in r for r in dev)]
    where = (
        f"`{settings['data']}` split {settings.get('split')}"
        if settings.get("data")
        else "held-out training queries against the training corpus"
    )
    proxy = ""
    if settings.get("max_queries") or settings.get("max_docs"):
        proxy = f" (a proxy: max_queries {settings.get('max_queries')}, max_docs {settings.get('max_docs')})"
    rows = [
        [r.get("step")]
        + [r.get(m) for m in measures]
        + [r.get("avg_query_terms"), r.get("avg_doc_terms"), r.get("flops"), "best" if r.get("best") else ""]
        for r in dev
    ]
    return [
        "",
        f"Dev curve: {where}{proxy}, every {config.get('eval_every')} steps.",
        "",
        _table(["step", *measures, "active terms q", "active terms d", "FLOPS", ""], rows),
    ]


def _evaluation(evals) -> str | None:
    if not evals:
        return None
    measures: list[str] = []
    for ev in evals:
        measures += [m for m in ev.measures if m not in measures]
    rows = [
        [f"{ev.dataset_name} (`{ev.dataset_id}`)", ev.split]
        + [ev.metrics.get(m, "") for m in measures]
        + [
            ev.metrics.get("avg_query_terms", ""),
            ev.metrics.get("avg_doc_terms", ""),
            ev.metrics.get("flops", ""),
            ev.metrics.get("num_queries", ev.metrics.get("dev_queries", "")),
        ]
        for ev in evals
    ]
    lines = [
        "## Evaluation",
        "",
        _table(["dataset", "split", *measures, "active terms q", "active terms d", "FLOPS", "queries"], rows),
        "",
        "Active terms: mean non-zero entries per query / document vector. FLOPS: the expected number of "
        "multiplications of a query-document dot product, Σ_j p_q(j)·p_d(j) with p(j) the share of "
        "vectors where term j is active (Paria et al., 2020).",
        "",
    ]
    for ev in evals:
        conv = ev.metrics.get("conventions") or {}
        if conv:
            levels = conv.get("relevance_levels") or {}
            lines.append(
                f"- {ev.dataset_name} {ev.split} ({ev.source}): conventions `{conv.get('name')}`: relevant = "
                f"grade ≥ {conv.get('relevance_level')}"
                + (f" ({levels})" if levels else "")
                + f" for binary measures, nDCG {conv.get('ndcg_gains')}; {conv.get('averaging')}; ties: "
                f"{conv.get('tie_break')}"
                + ("; the query's own id removed from its ranking" if conv.get("remove_query_id") else "")
                + "."
            )
        else:
            lines.append(
                f"- {ev.dataset_name} {ev.split} ({ev.source}): scored as `spladekit evaluate` scores it "
                "(ir_measures; conventions: the preset matching the dataset's name)."
            )
    return "\n".join(lines)


def body(
    records,
    evals,
    *,
    name: str,
    reference: str,
    base_model: str | None,
    versions: dict[str, str],
    usage: str | None = None,
) -> str:
    """The card's Markdown body (see the module docstring of :mod:`spladekit.publish.card`); ``usage``
    replaces the usage section's text (under its heading)."""
    usage_section = f"## Usage\n\n{usage.strip()}" if usage else _usage(records, reference)
    sections = [_what(records, name, base_model), usage_section, _head(records), _training(records), _evaluation(evals)]
    sections.append("## Framework versions\n\n" + "\n".join(f"- {k}: {v}" for k, v in versions.items()))
    keys = ["splade", "splade-v2", "rescaling"]
    reg = ((records.train_config or {}).get("regularizer") or {}).get("kind")
    if reg == "flops":
        keys.append("flops")
    if records.inference_free:
        keys.append("inference-free")
    if records.sentence_transformers:
        keys.append("sentence-transformers")
    sections.append("## Citation\n\n" + "\n\n".join(f"```bibtex\n{CITATIONS[k]}\n```" for k in keys))
    return "\n\n".join(s for s in sections if s) + "\n"
