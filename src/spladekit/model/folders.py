"""Reading model folders: what a folder says its SPLADE model computes, before any weights load.

The one way spladekit reads a model folder (:func:`read_model_folder`); every loader
(:func:`spladekit.model.encoder.load_model_folder`, hence the encoder, training, diagnose, rescale,
inference-free, export-model and reproduce) goes through it. It reads files only, so whatever
cannot be represented is refused before any work, naming the file, the module and the field
(:class:`~spladekit.errors.UnsupportedModelError`).

Layouts read (checked in this order):

``sentence-transformers`` (``modules.json``; what ``SparseEncoder.save`` writes, 5.x and 6.x module names)
    * ``[Transformer (transformer_task "fill-mask") | MLMTransformer, SpladePooling]``: the masked
      LM at the module's path (the folder itself for path ``""``), ``SpladePooling``'s
      ``pooling_strategy`` (``max``/``sum``) and ``activation_function`` (``relu``/``log1p_relu``)
      become ``pooling``/``activation``;
    * ``[Router]`` with ``router_config.json``: the ``document`` route must be the two modules
      above; the ``query`` route either the same modules (one encoder) or a ``SparseStaticEmbedding``
      (older name ``IDF``), which becomes spladekit's inference-free query side with its weights
      (``model.safetensors`` tensor ``weight``, or the ``idf.json`` its config names);
    * ``config_sentence_transformers.json``: ``max_active_dims`` becomes the top-k of both sides;
      a non-empty prompt, a ``model_type`` other than ``SparseEncoder`` or a similarity other than
      the dot product is refused;
    * the max length: ``max_seq_length`` of the Transformer's ``sentence_bert_config.json``, else
      the tokenizer's ``model_max_length`` capped at the model's ``max_position_embeddings`` (the
      rule of sentence-transformers' ``Transformer``), for queries and documents alike (one length, as
      there). A ``SparseStaticEmbedding`` truncates at its own tokenizer's ``model_max_length``.
    * refused: any other module (``Pooling`` mean/CLS, ``Dense``, ``Normalize``, ``SparseAutoEncoder``
      (CSR), ``Asym``...), a Router whose two routes are two different encoders, a Router with
      ``route_mappings``, ``do_lower_case: true``, a query tokenizer whose vocabulary differs
      from the document tokenizer's.

``opensearch-doc-only`` (``config.json`` + tokenizer + ``idf.json``, no ``modules.json``)
    as the model cards of ``opensearch-project/opensearch-neural-sparse-encoding-doc-v1/v2-*``
    describe it: documents through the masked LM (max pooling, ``relu``), special-token columns set
    to 0 in document vectors; queries are the bag of their tokens weighted by ``idf.json``
    (``{token: weight}``, tokens it does not list weigh 0, special tokens 0). The tokenizer's
    ``model_max_length`` (capped at the model's positions) truncates both.

``spladekit`` / ``masked-lm`` (``config.json``, optionally ``spladekit.json``)
    a spladekit folder, a naver/splade checkpoint or any Hugging Face ``*ForMaskedLM`` folder: max
    pooling and ``relu`` unless ``spladekit.json`` says otherwise, spladekit's lengths (64/256)
    unless it says otherwise.

A spladekit folder that also carries sentence-transformers files (spladekit writes both): the
lengths, top-k and query side of ``spladekit.json`` are used, and its ``pooling``/``activation``
must agree with ``SpladePooling``'s, and its ``doc_max_length`` with a ``max_seq_length`` stated in
``sentence_bert_config.json`` (spladekit writes the one as the other; else it is refused: the two
libraries would compute different vectors).

Every layout, also refused (``DataFormatError`` / ``UnsupportedModelError`` naming file and field):
a ``spladekit.json`` key that is not an :class:`~spladekit.model.encoder.EncoderMetadata` field (its
writer writes exactly those; free-form data goes into ``extra``) or a field of the wrong type; a
``SpladePooling`` ``config.json`` key sentence-transformers' ``SpladePooling`` does not take; a
module folder (or a static query side's ``path``) that does not exist; ``idf.json`` beside
``spladekit.json`` (two query sides: spladekit never writes ``idf.json``, so which is meant is
unclear); an ``idf.json`` weight outside float32's finite range; an object field of another type.

Tokenizer (checked when it loads, after the weights, so a folder without either names the weights
first): the tokenizer folder must hold one of :data:`TOKENIZER_FILES` (transformers builds a
tokenizer of its special tokens alone from ``config.json`` otherwise: ``ResolutionError``), and
fit the MLM head (:func:`spladekit.model.encoder.check_vocabulary_sizes`: no more ids
than head rows, fewer only by vocabulary padding, under 1024 rows, and at least half of them).

Max lengths above the model's position embeddings (``max_seq_length``, ``spladekit.json`` or an
argument) are lowered to them when the encoder loads, with a warning
(:meth:`~spladekit.model.encoder.SpladeEncoder.check_max_length`), so the recorded settings are those used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from spladekit.data.numbers import FLOAT32_MAX
from spladekit.errors import DataFormatError, UnsupportedModelError

MODULES_FILE = "modules.json"
ROUTER_FILE = "router_config.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
IDF_FILE = "idf.json"

#: transformers' placeholder ``model_max_length`` when a tokenizer states none (``VERY_LARGE_INTEGER``).
_UNBOUNDED = 10**12
_TRANSFORMERS = ("Transformer", "MLMTransformer")
_STATIC = ("SparseStaticEmbedding", "IDF")
#: the keys sentence-transformers' SpladePooling takes (``config_keys``, the 5.x name
#: ``word_embedding_dimension``, ``chunk_size``); it would refuse any other (an unknown keyword argument)
_POOLING_KEYS = (
    "pooling_strategy",
    "activation_function",
    "embedding_dimension",
    "word_embedding_dimension",
    "chunk_size",
)
#: files one of which a tokenizer folder needs to have a vocabulary (without any, transformers builds a
#: tokenizer of the 5 special tokens its class names, and every word becomes [UNK])
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "sentencepiece.bpe.model",
    "spiece.model",
    "tokenizer.model",
)


@dataclass
class QuerySide:
    """Where an inference-free query side's weights are: ``kind`` ``"spladekit"``
    (``query_weights.safetensors``), ``"safetensors"`` (a ``SparseStaticEmbedding``'s weight file) or
    ``"idf.json"`` (``{token: weight}``); ``path`` the file; ``tokenizer_dir`` the query tokenizer;
    ``zero_special``: special tokens weigh 0 (OpenSearch doc-only; a ``SparseStaticEmbedding`` uses
    its weights as they are, as sentence-transformers does)."""

    kind: str
    path: Path
    tokenizer_dir: Path | None = None
    zero_special: bool = False


@dataclass
class ModelFolder:
    """What a model folder says (see the module docstring for each layout).

    Attributes:
        root: the folder (or hub id) read.
        layout: ``"sentence-transformers"``, ``"sentence-transformers-router"``,
            ``"opensearch-doc-only"``, ``"spladekit"`` or ``"masked-lm"``.
        mlm_dir: folder of the masked LM (``config.json`` + weights): the root or a subfolder.
        tokenizer_dir: folder of the (document) tokenizer.
        pooling: ``"max"`` or ``"sum"``; activation: ``"relu"`` or ``"log1p_relu"``.
        max_length: the one max length the folder states for both sides (tokens), or None.
        query_max_length: a query-side max length of its own (``SparseStaticEmbedding``'s tokenizer), or None.
        top_k: ``max_active_dims`` (both sides), or None.
        query_side: the inference-free query side, or None (queries through the model).
        zero_special_tokens: document vectors get 0 in special-token columns (OpenSearch doc-only).
        spladekit_json: ``spladekit.json``'s content, or None when the folder has none.
        max_length_file: the file that states :attr:`max_length` (``sentence_bert_config.json``'s
            ``max_seq_length``), None when it comes from the tokenizer or is unknown.
        custom_code: the classes of the folder's own code (:func:`~spladekit.model.remote_code.find_custom_code`),
            run only when ``trust_remote_code`` (the loaders pass it on to transformers).
    """

    root: str
    layout: str
    mlm_dir: str
    tokenizer_dir: str
    pooling: str = "max"
    activation: str = "relu"
    max_length: int | None = None
    query_max_length: int | None = None
    top_k: int | None = None
    query_side: QuerySide | None = None
    zero_special_tokens: bool = False
    spladekit_json: dict | None = field(default=None, repr=False)
    max_length_file: Path | None = None
    custom_code: list = field(default_factory=list, repr=False)
    trust_remote_code: bool = False

    def metadata(self):
        """The :class:`~spladekit.model.encoder.EncoderMetadata` of the model: ``spladekit.json``
        where the folder has one, what the other files say otherwise.

        Raises:
            DataFormatError: ``spladekit.json`` is not a JSON object or its pooling/activation are unknown.
            UnsupportedModelError: ``spladekit.json`` and the sentence-transformers files disagree.
        """
        from spladekit.model.metadata import INFERENCE_FREE, METADATA_FILE, EncoderMetadata
        from spladekit.model.pooling import ACTIVATIONS, POOLINGS

        meta = EncoderMetadata()
        if self.spladekit_json is not None:
            path = Path(self.root) / METADATA_FILE
            meta = EncoderMetadata.load(self.root)
            for name, allowed in (("pooling", POOLINGS), ("activation", ACTIVATIONS)):
                if getattr(meta, name) not in allowed:
                    raise DataFormatError(
                        path, f"unknown {name} {getattr(meta, name)!r}; expected one of {allowed}", field=name
                    )
            if self.layout.startswith("sentence-transformers"):
                for name in ("pooling", "activation"):
                    written = self.spladekit_json.get(name, "max" if name == "pooling" else "relu")
                    if written != getattr(self, name):
                        raise UnsupportedModelError(
                            path,
                            f"says {name} {written!r} but the sentence-transformers "
                            f"SpladePooling module says {getattr(self, name)!r}; the two "
                            "libraries would compute different vectors",
                            field=name,
                        )
                for name in ("position_top_k", "fold"):  # the writer leaves the module files out for these
                    if getattr(meta, name) is not None:
                        raise UnsupportedModelError(
                            path,
                            f"sets {name}, which sentence-transformers' SpladePooling "
                            "(the folder's module files) does not compute; the two libraries "
                            "would compute different vectors",
                            field=name,
                        )
                # spladekit writes max_seq_length = doc_max_length (model.st_modules); sentence-transformers
                # truncates both sides there, spladekit documents at doc_max_length
                if self.max_length_file is not None and meta.doc_max_length != self.max_length:
                    raise UnsupportedModelError(
                        path,
                        f"says doc_max_length {meta.doc_max_length} but "
                        f"{self.max_length_file} says max_seq_length {self.max_length}; the "
                        "two libraries would truncate documents differently",
                        field="doc_max_length",
                    )
            return meta
        meta.pooling, meta.activation = self.pooling, self.activation
        meta.zero_special_tokens = self.zero_special_tokens
        if self.max_length is not None:
            meta.query_max_length = meta.doc_max_length = self.max_length
        if self.query_max_length is not None:
            meta.query_max_length = self.query_max_length
        meta.query_top_k = meta.doc_top_k = self.top_k
        if self.query_side is not None:
            meta.query_encoder = INFERENCE_FREE
        return meta

    def load_query_weights(self, tokenizer, vocab_size: int):
        """The ``[V]`` float32 weights of the inference-free query side (None without one); special
        tokens set to 0 where the layout says so (:attr:`QuerySide.zero_special`).

        Raises:
            DataFormatError: the weight file is missing or not ``[V]``, a weight is negative or not
                finite, an ``idf.json`` token is not in the vocabulary.
        """
        import torch

        from spladekit.model.inference_free import _zero_special, load_query_weights, read_weight_file

        side = self.query_side
        if side is None:
            return None
        if side.kind == "spladekit":
            weights = load_query_weights(side.path.parent, vocab_size)
        elif side.kind == "safetensors":
            weights = read_weight_file(side.path, vocab_size)
        else:
            weights = _read_idf_json(side.path, tokenizer, vocab_size)
        if bool((weights < 0).any()):
            j = int(torch.nonzero(weights < 0)[0])
            raise DataFormatError(
                side.path,
                f"query weight of token id {j} is negative ({float(weights[j])}); "
                "spladekit keeps only positive weights, so its vectors would differ",
                field="weight",
            )
        if side.zero_special:
            weights = weights.clone()
            _zero_special(weights, tokenizer)
        return weights


def _read_idf_json(path: Path, tokenizer, vocab_size: int):
    """``[V]`` weights from ``{token: weight}`` (OpenSearch's ``idf.json``); unlisted tokens weigh 0."""
    import math

    import torch

    from spladekit.io import read_json

    table = read_json(path)
    if not isinstance(table, dict):
        raise DataFormatError(path, "expected a JSON object {token: weight}")
    vocab = tokenizer.get_vocab()
    weights = torch.zeros(vocab_size, dtype=torch.float32)
    for token, value in table.items():
        if token not in vocab or not 0 <= vocab[token] < vocab_size:
            raise DataFormatError(path, "token not in the tokenizer's vocabulary", field=token)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataFormatError(path, f"weight must be a finite number, got {value!r}", field=token)
        if abs(value) > FLOAT32_MAX:  # float32 weights: it would become inf (torch raises an overflow)
            raise DataFormatError(
                path, f"weight {value!r} is not finite in float32 (|w| <= {FLOAT32_MAX:.4g})", field=token
            )
        weights[vocab[token]] = float(value)
    return weights


# ------------------------------------------------------------------------------------------ reading
def _json_object(path: Path, kind: str = "object"):
    from spladekit.io import read_json

    data = read_json(path)
    expected = dict if kind == "object" else list
    if not isinstance(data, expected):
        raise DataFormatError(path, f"expected a JSON {kind}")
    return data


def _class_name(type_path, path: Path, where: str) -> str:
    """The class of a module's dotted type; refuses types outside sentence-transformers."""
    if not isinstance(type_path, str) or not type_path.startswith("sentence_transformers."):
        raise UnsupportedModelError(
            path,
            f"{where}: module type {type_path!r} is not a sentence-transformers module spladekit knows",
            field="type",
        )
    return type_path.rsplit(".", 1)[-1]


def _refuse_modules(path: Path, where: str, modules: list[tuple[str, str]]) -> None:
    """Raise naming every ``(module id, class)`` of ``modules`` and why it is refused (nothing when empty)."""
    if not modules:
        return
    reasons = {
        "Pooling": "dense pooling (mean/CLS/...) of hidden states, not SPLADE pooling of MLM logits",
        "SparseAutoEncoder": "a sparse auto-encoder (CSR) over dense embeddings, not SPLADE",
        "Dense": "a dense projection, not SPLADE",
        "Normalize": "normalised vectors (spladekit scores by an unnormalised dot product)",
        "Asym": "the pre-5.0 asymmetric layout (re-save it with sentence-transformers >= 5 as a Router)",
        "StaticEmbedding": "dense static embeddings, not SPLADE",
    }
    said = "; ".join(
        f"module {module_id!r} ({name}) is {reasons.get(name, 'a module spladekit cannot compute')}"
        for module_id, name in modules
    )
    raise UnsupportedModelError(path, f"{where}: {said}; refused", field="type")


def _module_dir(
    root: Path, relative, named_in: Path | None = None, field: str = "path", kind: str | None = None
) -> Path:
    """``root / relative``, which must stay inside ``root`` (and exist, as a ``kind`` ``"folder"`` or
    ``"file"``, unless ``kind`` is None); errors name ``named_in`` (the file that says the path; default
    ``root/modules.json``) and ``field``."""
    from spladekit.data.paths import path_inside

    named_in = named_in if named_in is not None else root / MODULES_FILE
    relative = "" if relative in (None, ".", "") else str(relative)
    folder = path_inside(root, relative, named_in, field)
    if kind is not None and not (folder.is_dir() if kind == "folder" else folder.is_file()):
        raise DataFormatError(named_in, f"{kind} {relative!r} does not exist in {root}", field=field)
    return folder


def _json_int(path: Path, key: str) -> int | None:
    """A positive integer ``key`` of the JSON object in ``path``; None when the file or key is absent,
    or the value is transformers' unbounded placeholder (``model_max_length`` of a tokenizer that states none)."""
    if not path.exists():
        return None
    value = _json_object(path).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataFormatError(path, f"must be a positive integer, got {value!r}", field=key)
    return None if value >= _UNBOUNDED else value


def _tokenizer_length(folder: Path) -> int | None:
    """``model_max_length`` of ``folder/tokenizer_config.json``."""
    return _json_int(folder / "tokenizer_config.json", "model_max_length")


def _capped_length(folder: Path) -> int | None:
    """The tokenizer's ``model_max_length`` capped at ``max_position_embeddings`` (sentence-transformers' rule)."""
    lengths = [
        n
        for n in (_tokenizer_length(folder), _json_int(folder / "config.json", "max_position_embeddings"))
        if n is not None
    ]
    return min(lengths) if lengths else None


def _read_transformer(folder: Path, name: str, where: str) -> tuple[int | None, Path | None]:
    """Check a Transformer/MLMTransformer module; return its max length (None: unknown) and the file
    that states it (``sentence_bert_config.json``; None when it comes from the tokenizer)."""
    config_path = folder / TRANSFORMER_CONFIG_FILE
    config = _json_object(config_path) if config_path.exists() else {}
    task = config.get("transformer_task", "fill-mask" if name == "MLMTransformer" else "feature-extraction")
    if task != "fill-mask":
        raise UnsupportedModelError(
            config_path,
            f"{where} ({name}) has transformer_task {task!r}: it "
            "gives hidden states, not MLM logits; SPLADE needs 'fill-mask'",
            field="transformer_task",
        )
    modality = config.get("modality_config") or {}
    text = modality.get("text", {}) if isinstance(modality, dict) else None
    if not isinstance(text, dict):
        raise DataFormatError(
            config_path,
            "expected an object {modality: {method_output_name: ...}}",
            field="modality_config" if text is None else "modality_config.text",
        )
    output = text.get("method_output_name", "logits")
    if output != "logits":
        raise UnsupportedModelError(
            config_path, f"{where} ({name}) reads {output!r}, not the MLM logits", field="modality_config"
        )
    if config.get("do_lower_case"):
        raise UnsupportedModelError(
            config_path,
            f"{where} ({name}) lowercases the text before its tokenizer; spladekit does not change text",
            field="do_lower_case",
        )
    if not (folder / "config.json").exists():
        raise DataFormatError(folder / "config.json", f"{where} ({name}) has no masked-LM config.json")
    stated = config.get("max_seq_length")
    if stated is None:
        key = "processor_kwargs" if config.get("processor_kwargs") else "tokenizer_args"
        kwargs = config.get(key) or {}
        if not isinstance(kwargs, dict):
            raise DataFormatError(config_path, "expected an object of tokenizer arguments", field=key)
        stated = kwargs.get("model_max_length")
    if stated is not None and (isinstance(stated, bool) or not isinstance(stated, int) or stated < 2):
        raise DataFormatError(
            config_path, f"max_seq_length must be an integer >= 2, got {stated!r}", field="max_seq_length"
        )
    return (stated, config_path) if stated is not None else (_capped_length(folder), None)


def _read_pooling(folder: Path, where: str) -> tuple[str, str]:
    from spladekit.model.pooling import ACTIVATIONS, POOLINGS

    path = folder / "config.json"
    config = _json_object(path) if path.exists() else {}
    unknown = sorted(set(config) - set(_POOLING_KEYS))
    if unknown:
        raise DataFormatError(
            path,
            f"{where}: SpladePooling takes {', '.join(_POOLING_KEYS)}; unknown key "
            f"{unknown[0]!r} (sentence-transformers would refuse it)",
            field=unknown[0],
        )
    pooling = config.get("pooling_strategy", "max")
    activation = config.get("activation_function", "relu")
    if pooling not in POOLINGS:
        raise UnsupportedModelError(
            path,
            f"{where}: SpladePooling pooling_strategy {pooling!r}; spladekit computes {' and '.join(POOLINGS)}",
            field="pooling_strategy",
        )
    if activation not in ACTIVATIONS:
        raise UnsupportedModelError(
            path,
            f"{where}: SpladePooling activation_function {activation!r}; spladekit "
            f"computes {' and '.join(ACTIVATIONS)}",
            field="activation_function",
        )
    return pooling, activation


def _read_encoder_route(
    entries: list[tuple[str, str, Path]], path: Path, where: str, root: Path, layout: str, top_k: int | None
) -> ModelFolder:
    """The :class:`ModelFolder` (layout ``layout``) of a sentence-transformers document encoder, from its
    ``[(name, class, folder)]`` modules ``[Transformer (fill-mask), SpladePooling]`` as ``path`` lists
    them at ``where`` (``modules.json`` or a Router's route); ``top_k``: ``max_active_dims``.

    Raises:
        UnsupportedModelError: other modules; DataFormatError: a module folder that does not exist.
    """
    names = [name for _, name, _ in entries]
    if len(entries) != 2 or names[0] not in _TRANSFORMERS or names[1] != "SpladePooling":
        _refuse_modules(path, where, [(i, n) for i, n, _ in entries if n not in _TRANSFORMERS + ("SpladePooling",)])
        raise UnsupportedModelError(
            path,
            f"{where}: modules {names}; spladekit reads a SPLADE encoder as [Transformer (fill-mask), SpladePooling]",
            field="modules",
        )
    (mlm_id, name, mlm_dir), (pool_id, _, pool_dir) = entries
    field = "path" if path.name == MODULES_FILE else "structure"
    for module_dir in (mlm_dir, pool_dir):  # a missing folder would read as defaults
        if not module_dir.is_dir():
            raise DataFormatError(
                path,
                f"{where}: module folder {str(module_dir.relative_to(path.parent.resolve()))!r} "
                f"does not exist in {path.parent}",
                field=field,
            )
    length = _read_transformer(mlm_dir, name, f"{where}, module {mlm_id!r}")
    pooling, activation = _read_pooling(pool_dir, f"{where}, module {pool_id!r}")
    return ModelFolder(
        root=str(root),
        layout=layout,
        mlm_dir=str(mlm_dir),
        tokenizer_dir=str(mlm_dir),
        pooling=pooling,
        activation=activation,
        max_length=length[0],
        max_length_file=length[1],
        top_k=top_k,
    )


def _read_st_config(root: Path) -> int | None:
    """Check ``config_sentence_transformers.json``; return ``max_active_dims`` (None when unset)."""
    path = root / ST_CONFIG_FILE
    if not path.exists():
        return None
    config = _json_object(path)
    model_type = config.get("model_type", "SparseEncoder")
    if model_type != "SparseEncoder":
        raise UnsupportedModelError(
            path, f"model_type {model_type!r}; spladekit reads sparse encoders (SparseEncoder)", field="model_type"
        )
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict):
        raise DataFormatError(path, "expected an object {name: prompt}", field="prompts")
    for name, prompt in prompts.items():
        if prompt:
            raise UnsupportedModelError(
                path,
                f"prompt {prompt!r} is put before every {name} text; spladekit encodes the text as given",
                field=f"prompts.{name}",
            )
    similarity = config.get("similarity_fn_name")
    if similarity not in (None, "dot"):
        raise UnsupportedModelError(
            path, f"similarity {similarity!r}; spladekit scores by the dot product", field="similarity_fn_name"
        )
    top_k = config.get("max_active_dims")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise DataFormatError(path, f"must be a positive integer or null, got {top_k!r}", field="max_active_dims")
    return top_k


def check_tokenizer_files(folder: Path) -> None:
    """Raise ``ResolutionError`` unless ``folder`` holds one of :data:`TOKENIZER_FILES`.

    transformers' ``AutoTokenizer`` does not refuse a folder without them: it builds the class that
    ``config.json`` names with only its special tokens (5 for BERT), and every word encodes as
    ``[UNK]``, so SPLADE vectors would be garbage without any error.
    """
    from spladekit.errors import ResolutionError

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ResolutionError(
            f"model folder {folder} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}; "
            "tokenizer_config.json alone has no vocabulary); copy the tokenizer that the model was "
            "trained with into it"
        )


def _same_vocabulary(query_dir: Path, document_dir: Path, path: Path) -> None:
    from transformers import AutoTokenizer

    check_tokenizer_files(query_dir)
    try:
        query = AutoTokenizer.from_pretrained(str(query_dir)).get_vocab()
        document = AutoTokenizer.from_pretrained(str(document_dir)).get_vocab()
    except (OSError, ValueError) as exc:
        raise DataFormatError(query_dir, f"cannot load the query tokenizer ({exc})") from exc
    if query != document:
        raise UnsupportedModelError(
            path,
            "the query route's tokenizer has another vocabulary than the document "
            "route's; spladekit encodes both sides with one tokenizer",
            field="structure.query",
        )


def _router_routes(path: Path) -> tuple[dict, dict]:
    """``(types, structure)`` of a Router's ``router_config.json``: exactly a 'query' and a 'document' route.

    Raises:
        DataFormatError: a field of the wrong type.
        UnsupportedModelError: route mappings, or routes other than 'query' and 'document'.
    """
    config = _json_object(path)
    types, structure = config.get("types"), config.get("structure")
    if not isinstance(types, dict) or not isinstance(structure, dict):
        raise DataFormatError(path, "expected objects 'types' and 'structure'", field="structure")
    parameters = config.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise DataFormatError(path, "expected an object", field="parameters")
    if parameters.get("route_mappings"):
        raise UnsupportedModelError(
            path,
            "route_mappings send inputs to routes by task and modality; spladekit reads "
            "exactly a 'query' and a 'document' route",
            field="parameters.route_mappings",
        )
    if set(structure) != {"query", "document"}:
        raise UnsupportedModelError(
            path, f"routes {sorted(structure)}; spladekit reads exactly 'query' and 'document'", field="structure"
        )
    return types, structure


def _static_query_side(query_dir: Path, module_id: str) -> QuerySide:
    """The Router's query route, one ``SparseStaticEmbedding`` module: its weights in an ``idf.json`` named by
    its ``config.json``, else its weight file.

    Raises:
        DataFormatError: no weight file.
    """
    static_config_path = query_dir / "config.json"
    static_config = _json_object(static_config_path) if static_config_path.exists() else {}
    json_path = static_config.get("path")
    if isinstance(json_path, str) and json_path.endswith(".json"):
        side = QuerySide("idf.json", _module_dir(query_dir, json_path, static_config_path, kind="file"), query_dir)
    else:
        weights = [query_dir / n for n in ("model.safetensors", "pytorch_model.bin") if (query_dir / n).exists()]
        if not weights:
            raise DataFormatError(
                query_dir / "model.safetensors",
                f"route 'query', module {module_id!r}: SparseStaticEmbedding has no weight file",
            )
        side = QuerySide("safetensors", weights[0], query_dir)
    return side


def _read_router(root: Path, router_dir: Path, top_k: int | None) -> ModelFolder:
    path = router_dir / ROUTER_FILE
    if not path.exists():
        raise DataFormatError(path, "the Router module has no router_config.json")
    types, structure = _router_routes(path)

    def entries(route: str) -> list[tuple[str, str, Path]]:
        ids = structure[route]
        if not isinstance(ids, list) or not ids:
            raise DataFormatError(path, "expected a non-empty list of module ids", field=f"structure.{route}")
        out = []
        for module_id in ids:
            if module_id not in types:
                raise DataFormatError(path, f"module {module_id!r} has no type", field="types")
            out.append(
                (
                    module_id,
                    _class_name(types[module_id], path, f"route {route!r}, module {module_id!r}"),
                    _module_dir(router_dir, module_id, path, f"structure.{route}"),
                )
            )
        return out

    document = entries("document")
    folder = _read_encoder_route(document, path, "route 'document'", root, "sentence-transformers-router", top_k)
    query = entries("query")
    if [q[0] for q in query] == [d[0] for d in document]:
        return folder  # one encoder for both sides
    if len(query) == 1 and query[0][1] in _STATIC:
        module_id, _, query_dir = query[0]
        side = _static_query_side(query_dir, module_id)
        _same_vocabulary(query_dir, Path(folder.mlm_dir), path)
        folder.query_side = side
        folder.query_max_length = _tokenizer_length(query_dir)
        return folder
    _refuse_modules(
        path, "route 'query'", [(i, n) for i, n, _ in query if n not in _TRANSFORMERS + ("SpladePooling",) + _STATIC]
    )
    raise UnsupportedModelError(
        path,
        f"the query route {[q[0] for q in query]} is another encoder than the document "
        f"route {[d[0] for d in document]}; spladekit has one document model and, for queries, "
        "either the same model or a SparseStaticEmbedding",
        field="structure.query",
    )


def _read_sentence_transformers(root: Path) -> ModelFolder:
    path = root / MODULES_FILE
    modules = _json_object(path, "array")
    top_k = _read_st_config(root)
    entries = []
    for number, module in enumerate(modules):
        if not isinstance(module, dict) or "type" not in module:
            raise DataFormatError(path, f"entry {number} is not an object with a 'type'", field="type")
        name = _class_name(module["type"], path, f"module {module.get('name', number)!r}")
        entries.append((str(module.get("name", number)), name, _module_dir(root, module.get("path", ""))))
    if len(entries) == 1 and entries[0][1] == "Router":
        return _read_router(root, entries[0][2], top_k)
    return _read_encoder_route(entries, path, "modules.json", root, "sentence-transformers", top_k)


def read_model_folder(location: str | Path, trust_remote_code: bool = False) -> ModelFolder:
    """What the model at ``location`` (a folder, or a hub id that transformers resolves itself) says.

    Reads JSON files only (and, for a Router's query side, the two tokenizers' vocabularies). A folder
    naming classes of its own code (:mod:`spladekit.model.remote_code`) is refused unless
    ``trust_remote_code``; trusted, one with custom sentence-transformers modules has the layout
    :data:`~spladekit.model.remote_code.CUSTOM_LAYOUT` (sentence-transformers runs it) and is not read further.

    Raises:
        ResolutionError: a folder without ``config.json`` or ``modules.json``.
        UnsupportedModelError: a layout that spladekit cannot compute exactly (module docstring), or
            custom code not trusted (naming the class, its file and ``--trust-remote-code``).
        DataFormatError: a damaged file (naming it and the field).
    """
    from spladekit.model.metadata import INFERENCE_FREE, METADATA_FILE
    from spladekit.model.remote_code import CUSTOM_LAYOUT, find_custom_code, refusal

    root = Path(location)
    if not root.is_dir():  # a hub id resolved by transformers: a plain masked LM
        return ModelFolder(
            root=str(location),
            layout="masked-lm",
            mlm_dir=str(location),
            tokenizer_dir=str(location),
            trust_remote_code=trust_remote_code,
        )
    custom = find_custom_code(root)
    if custom and not trust_remote_code:
        raise refusal(custom[0])
    if any(code.kind == "module" for code in custom):
        return ModelFolder(
            root=str(root),
            layout=CUSTOM_LAYOUT,
            mlm_dir=str(root),
            tokenizer_dir=str(root),
            custom_code=custom,
            trust_remote_code=trust_remote_code,
        )
    own = root / METADATA_FILE
    spladekit_json = _json_object(own) if own.exists() else None
    if spladekit_json is not None and (root / IDF_FILE).exists():
        raise UnsupportedModelError(
            root / IDF_FILE,
            f"the folder has both {IDF_FILE} (an OpenSearch doc-only query "
            f"side) and {METADATA_FILE} (a spladekit model, which never writes {IDF_FILE}); "
            "which query side is meant is unclear: remove one of them",
        )
    folder = _read_layout(root, spladekit_json)
    folder.spladekit_json, folder.custom_code, folder.trust_remote_code = spladekit_json, custom, trust_remote_code
    if spladekit_json is not None and spladekit_json.get("query_encoder") == INFERENCE_FREE:
        from spladekit.model.inference_free import QUERY_WEIGHTS_FILE

        folder.query_side = QuerySide("spladekit", root / QUERY_WEIGHTS_FILE, root)
    return folder


def _read_layout(root: Path, spladekit_json: dict | None) -> ModelFolder:
    """The folder ``root`` by its files: sentence-transformers (``modules.json``), OpenSearch doc-only
    (``config.json`` and ``idf.json``), spladekit (``spladekit.json``) or a plain masked LM.

    Raises:
        ResolutionError: neither ``config.json`` nor ``modules.json``.
    """
    from spladekit.errors import ResolutionError

    if (root / MODULES_FILE).exists():
        folder = _read_sentence_transformers(root)
    elif (root / "config.json").exists() and (root / IDF_FILE).exists() and spladekit_json is None:
        folder = ModelFolder(
            root=str(root),
            layout="opensearch-doc-only",
            mlm_dir=str(root),
            tokenizer_dir=str(root),
            max_length=_capped_length(root),
            query_side=QuerySide("idf.json", root / IDF_FILE, root, zero_special=True),
            zero_special_tokens=True,
        )
    elif (root / "config.json").exists():
        folder = ModelFolder(
            root=str(root),
            layout="spladekit" if spladekit_json is not None else "masked-lm",
            mlm_dir=str(root),
            tokenizer_dir=str(root),
        )
    else:
        raise ResolutionError(
            f"model folder {root} has neither config.json (a masked LM) nor modules.json (sentence-transformers)"
        )
    return folder
