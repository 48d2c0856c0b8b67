"""Teacher scores from cross-encoders (sentence-transformers' ``CrossEncoder``), in resumable chunks.

Each teacher scores every ``(query, document)`` pair with ``CrossEncoder.predict`` (batches of
``batch_size`` pairs); with several teachers the score is their mean (an ensemble, as SPLADE-v3's
teachers are combined). ``activation``: ``identity`` returns the raw logits (the default: a sigmoid
squashes the margins MarginMSE learns from), ``sigmoid`` the probabilities, ``model`` the
cross-encoder's own default activation.

Resuming: the queries are scored ``chunk_queries`` at a time; each finished chunk is written
(atomically) to ``work/teacher-NNNNN.json`` with a SHA-256 digest of its teachers (names and the
SHA-256 of every file in their folders), activation, max length and pairs, and a later run with the
same digest reads it instead of scoring again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from spladekit.io import read_json, write_json


def load_cross_encoder(
    name: str,
    activation: str = "identity",
    max_length: int | None = None,
    device: str | None = None,
    trust_remote_code: bool = False,
):
    """A sentence-transformers ``CrossEncoder`` with the chosen activation (see the module docstring),
    checked by :func:`check_loaded_cross_encoder`; ``trust_remote_code`` passed on (a folder's own code
    is refused before by :func:`check_teacher_files` unless it is set).

    Raises:
        ResolutionError: the model folder or hub id cannot be found (:func:`spladekit.data.resolve.resolve_model`).
        DataFormatError: the folder does not load (the loader's first line, which names the file);
            more than one label; no trained classifier head.
    """
    import torch
    from sentence_transformers import CrossEncoder

    from spladekit.data.resolve import resolve_model
    from spladekit.errors import DataFormatError

    activation_fn = {"identity": torch.nn.Identity(), "sigmoid": torch.nn.Sigmoid(), "model": None}[activation]
    folder = resolve_model(name)
    try:
        model = CrossEncoder(
            folder,
            activation_fn=activation_fn,
            max_length=max_length,
            device=device,
            trust_remote_code=trust_remote_code,
        )
    except (OSError, ValueError, KeyError) as exc:  # transformers' "no file named model.safetensors ...", a bad config
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise DataFormatError(_transformer_folder(Path(folder)), f"teacher {name!r} does not load: {first}") from None
    check_loaded_cross_encoder(model, name, Path(folder))
    return model


def _transformer_folder(folder: Path) -> Path:
    """The folder of a sentence-transformers model's Transformer module (``modules.json``; the folder
    itself when there is none).

    Raises:
        DataFormatError: the module's path leaves the model folder (naming ``modules.json``).
    """
    from spladekit.data.paths import path_inside

    modules = folder / "modules.json"
    if modules.is_file():
        listed = read_json(modules)
        for module in listed if isinstance(listed, list) else []:
            if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer"):
                return path_inside(folder, str(module.get("path") or ""), modules, "path")
    return folder


def checkpoint_keys(folder: Path) -> tuple[Path, set[str]] | None:
    """``(weight file, parameter names)`` of the checkpoint in ``folder``: a sharded checkpoint's
    ``.index.json``, ``model.safetensors`` or ``pytorch_model.bin``; ``None`` when none can be read."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            weight_map = (read_json(folder / index) or {}).get("weight_map")
            return (folder / index, set(weight_map)) if isinstance(weight_map, dict) else None
    if (folder / "model.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), "pt") as weights:
            return folder / "model.safetensors", set(weights.keys())
    if (folder / "pytorch_model.bin").is_file():
        import torch

        try:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # an old (non-zip) or foreign format: its names cannot be listed cheaply
            return None
        return (folder / "pytorch_model.bin", set(state)) if isinstance(state, dict) else None
    return None


def check_loaded_cross_encoder(model, name: str, folder: Path) -> None:
    """Refuse a loaded ``CrossEncoder`` whose scores would not be relevance: more than one label
    (relevance needs one score a pair), or a classifier head (the parameters of its transformers model
    outside ``base_model_prefix``) absent from the checkpoint, so initialised at random. The check of
    the head is skipped only when the checkpoint's parameter names cannot be read.

    Raises:
        DataFormatError: naming the teacher's ``config.json`` (labels) or its weight file (head).
    """
    from spladekit.errors import DataFormatError

    home = _transformer_folder(folder)
    if model.num_labels != 1:
        raise DataFormatError(
            home / "config.json",
            f"teacher {name!r} has {model.num_labels} labels; relevance needs "
            "one score a pair (a cross-encoder with num_labels 1)",
            field="id2label",
        )
    hf = getattr(model, "model", None)
    prefix = getattr(hf, "base_model_prefix", "") or ""
    if hf is None or not prefix or getattr(hf, prefix, hf) is hf:
        return  # no transformers model with a head of its own (nothing to check)
    head = [n for n, _ in hf.named_parameters() if not n.startswith(prefix + ".")]
    found = checkpoint_keys(home)
    if found is None or not head:
        return
    weights, keys = found
    missing = [n for n in head if n not in keys]
    if missing:
        raise DataFormatError(
            weights,
            f"teacher {name!r}: its classifier head ({', '.join(missing)}) is not in the "
            "checkpoint, so it would score with random weights; give a trained cross-encoder "
            "(a *ForSequenceClassification checkpoint with its head)",
        )


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_teacher_files(name: str, trust_remote_code: bool = False) -> None:
    """Refuse, from its files and without loading its weights, a teacher that could not score or would
    run code not trusted: the folder's own code (``auto_map`` classes, custom modules:
    :func:`spladekit.model.remote_code.find_custom_code`) without ``trust_remote_code``, not a
    one-label cross-encoder (:func:`check_cross_encoder`), no weight file, or a tokenizer giving ids
    past the embedding's rows (``config.json``'s ``vocab_size``: an ``IndexError`` in the middle of
    scoring otherwise). A mining run checks every teacher so before it mines candidates or writes anything.

    Raises:
        ResolutionError: the teacher cannot be found. UnsupportedModelError: code not trusted (naming
            the class, its file and ``--trust-remote-code``). DataFormatError: naming the teacher's file.
    """
    from transformers import AutoTokenizer

    from spladekit.data.resolve import resolve_model
    from spladekit.errors import DataFormatError
    from spladekit.model.remote_code import find_custom_code, refusal

    root = Path(resolve_model(name))
    custom = find_custom_code(root)
    if custom and not trust_remote_code:
        raise refusal(custom[0])
    check_cross_encoder(name)
    home = _transformer_folder(root)
    if not any((home / f).is_file() for f in WEIGHT_FILES):
        raise DataFormatError(home, f"teacher {name!r} has no weights (none of {', '.join(WEIGHT_FILES)})")
    rows = (read_json(home / "config.json") or {}).get("vocab_size") if (home / "config.json").is_file() else None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(home), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise DataFormatError(home, f"teacher {name!r}: its tokenizer does not load: {first}") from None
    ids = max(tokenizer.get_vocab().values(), default=-1) + 1
    if isinstance(rows, int) and ids > rows:
        source = next((home / f for f in ("tokenizer.json", "vocab.txt") if (home / f).is_file()), home)
        raise DataFormatError(
            source,
            f"teacher {name!r}: its tokenizer has {ids} token ids, its embedding {rows} rows "
            "(config.json vocab_size): a text with a later id could not be scored; give the tokenizer "
            "the model was trained with",
            field="vocab",
        )


def teacher_fingerprint(name: str) -> list:
    """What a teacher's scores depend on in its folder: every file its loaders may read (weights,
    config, every tokenizer file such as ``vocab.txt``, the sentence-transformers module files), by
    size and SHA-256 (:func:`spladekit.data.resolve.fingerprint_files`): a teacher changed at the
    same path is not taken for the old one."""
    from spladekit.data.resolve import fingerprint_files, resolve_model

    return fingerprint_files(resolve_model(name))


def check_cross_encoder(name: str) -> None:
    """Refuse, from its ``config.json``, a teacher that is not a sequence-classification model (a masked
    LM or a bi-encoder would load in ``CrossEncoder`` with a new, random classifier head: scores of
    nothing) or that has more than one label (``id2label``). A config without ``architectures`` passes
    here: :func:`check_loaded_cross_encoder` then looks for the head in the checkpoint.

    Raises:
        DataFormatError: naming the teacher's ``config.json`` and its ``architectures`` or ``id2label``.
    """
    from spladekit.data.resolve import resolve_model
    from spladekit.errors import DataFormatError

    config = _transformer_folder(Path(resolve_model(name))) / "config.json"
    if not config.is_file():
        return  # CrossEncoder itself names what is missing
    settings = read_json(config) or {}
    architectures = settings.get("architectures") or []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise DataFormatError(
            config,
            f"teacher {name!r} is a {', '.join(architectures)}, not a cross-encoder "
            "(a *ForSequenceClassification model, as sentence-transformers' CrossEncoder saves): its "
            "classifier head would be random",
            field="architectures",
        )
    labels = settings.get("id2label")
    if architectures and isinstance(labels, dict) and len(labels) > 1:
        raise DataFormatError(
            config,
            f"teacher {name!r} has {len(labels)} labels; relevance needs one score a pair "
            "(a cross-encoder with num_labels 1)",
            field="id2label",
        )


def _digest(
    teachers: Sequence[str],
    activation: str,
    pairs: list[tuple[str, str]],
    max_length: int | None = None,
    fingerprints: list | None = None,
) -> str:
    digest = hashlib.sha256(json.dumps([list(teachers), activation, max_length, fingerprints]).encode())
    for query, doc in pairs:
        digest.update(b"\x00" + query.encode() + b"\x01" + doc.encode())
    return digest.hexdigest()


def score_pairs(
    groups: list[list[tuple[str, str]]],
    teachers: Sequence[str],
    work: Path,
    activation: str = "identity",
    batch_size: int = 32,
    chunk_queries: int = 256,
    max_length: int | None = None,
    device: str | None = None,
    show_progress: bool = True,
    trust_remote_code: bool = False,
) -> list[list[float]]:
    """Teacher scores of each query's pairs: ``groups[i]`` is query i's ``[(query text, doc text)]``.
    Each teacher is loaded when a chunk needs it (a resumed run whose chunks are all done loads none);
    ``trust_remote_code``: a teacher folder's own code may run (:func:`check_teacher_files`).

    Returns:
        ``scores[i][j]``: the mean over ``teachers`` of the score of ``groups[i][j]`` (float32
        logits of the cross-encoder, as Python floats).

    Raises:
        ValueError: no teacher; a non-finite score (naming the teacher and the pair).
        DataFormatError: a teacher that is no one-label cross-encoder with its trained head, or cannot
            score (:func:`check_teacher_files`, :func:`check_loaded_cross_encoder`).
    """
    import math

    from tqdm.auto import tqdm

    if not teachers:
        raise ValueError("no teacher given")
    for name in teachers:
        check_teacher_files(name, trust_remote_code)
    fingerprints = [teacher_fingerprint(name) for name in teachers]
    work.mkdir(parents=True, exist_ok=True)
    models: dict[str, object] = {}
    out: list[list[float]] = []
    total = sum(len(g) for g in groups)
    with tqdm(total=total, desc="teacher scores", unit="pair", disable=not show_progress) as bar:
        for start in range(0, len(groups), chunk_queries):
            chunk = groups[start : start + chunk_queries]
            flat = [pair for group in chunk for pair in group]
            digest = _digest(teachers, activation, flat, max_length, fingerprints)
            path = work / f"teacher-{start // chunk_queries:05d}.json"
            if path.exists():
                stored = read_json(path)
                if isinstance(stored, dict) and stored.get("digest") == digest:
                    out.extend(stored["scores"])
                    bar.update(len(flat))
                    continue
            sums = [0.0] * len(flat)
            for name in teachers:
                if name not in models:
                    models[name] = load_cross_encoder(name, activation, max_length, device, trust_remote_code)
                if flat:
                    predicted = models[name].predict(
                        flat, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True
                    )
                    for k, value in enumerate(predicted.reshape(len(flat)).tolist()):
                        if not math.isfinite(value):
                            raise ValueError(f"teacher {name}: non-finite score {value} for pair {flat[k]!r}")
                        sums[k] += value
            means = [s / len(teachers) for s in sums]
            scores, k = [], 0
            for group in chunk:
                scores.append(means[k : k + len(group)])
                k += len(group)
            write_json(path, {"digest": digest, "scores": scores})
            out.extend(scores)
            bar.update(len(flat))
    return out
