"""``SpladeEncoder``: texts → sparse SPLADE vectors (``scipy.sparse.csr_matrix``, float32).

Rows are texts in input order; columns are vocabulary ids of the model's tokenizer. Queries and
documents have separate maximum lengths (defaults 64 and 256 tokens, SPLADE's usual setting),
saved with the model in ``spladekit.json`` and read back by :meth:`SpladeEncoder.from_pretrained`.

Edge cases (documented outputs, never an exception; each text's vector does not depend on the other
texts of its batch, since padding positions are masked in the pooling):
- an empty, whitespace-only or control-character-only text tokenizes to ``[CLS] [SEP]`` and gets the
  vector of those two positions; emoji-only text becomes ``[UNK]`` (BERT WordPiece) and gets the
  vector of ``[CLS] [UNK] [SEP]``; a vector may have zero active terms (an all-zero row);
- texts longer than the max length are truncated (special tokens included in the count); their
  number is in :attr:`SpladeEncoder.last_truncated` after each :meth:`SpladeEncoder.encode`;
- an empty list gives a ``[0, V]`` matrix; a non-string item is converted with ``str``.

Vocabulary columns of special tokens: the ``[PAD]`` column (``tokenizer.pad_token_id``) is always 0
in the output (:meth:`SpladeEncoder.encode_dense` zeroes it), so padding can never carry weight,
neither as a position nor as a term. ``[CLS]``/``[SEP]``/``[UNK]``/``[MASK]`` columns are not masked,
as in naver/splade and sentence-transformers' ``SparseEncoder``; a trained SPLADE model gives them
(near) zero weight anyway. The zeroing is done here, on the encoder output, not in the SPLADE head
(plain or fused), so training and the heads are unchanged. A model whose folder says so
(``EncoderMetadata.zero_special_tokens``: OpenSearch's doc-only layout, :mod:`spladekit.model.folders`)
gets every special-token column zeroed the same way.

Pooling and activation (max/sum, relu/log1p_relu) are the model's (``EncoderMetadata.pooling`` /
``.activation``, :mod:`spladekit.model.pooling`), read from its folder, as are its head options: a
cap on each position's expansion (``position_top_k``) and a folded vocabulary (``fold``,
:mod:`spladekit.model.folding`). With a fold, a vector's columns are the ``V'`` folded terms:
:attr:`SpladeEncoder.vocab_size` is ``V'``, :attr:`SpladeEncoder.vocabulary` their names (what an
index built with the encoder stores, what :meth:`SpladeEncoder.decode` shows), and the ``[PAD]`` and
special-token columns zeroed are their terms (each alone in its own term).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from spladekit.data.numbers import check_int
from spladekit.model.inference_free import encode_bag
from spladekit.model.metadata import (
    INFERENCE_FREE,
    METADATA_FILE,
    EncoderMetadata,
    _first_line,
    check_top_k,
    damaged_weights_error,
)
from spladekit.model.pruning import of_record, prune, record_of
from spladekit.model.splade import SpladeModel


def weights_to_csr(weights: torch.Tensor, top_k: int | None = None) -> sp.csr_matrix:
    """Convert dense SPLADE weights ``[B, V]`` to CSR, keeping entries > 0 (and the top-k per row).

    Ties at the k-th weight are broken by the lower vocabulary id (``torch.topk`` on a stable sort).

    Raises:
        ValueError: ``top_k`` is not None and not an integer ≥ 1.
    """
    check_top_k(top_k)
    weights = weights.detach().float().cpu()
    if top_k is not None and top_k < weights.shape[1]:
        order = torch.sort(weights, dim=1, descending=True, stable=True).indices[:, :top_k]
        kept = torch.zeros_like(weights)
        kept.scatter_(1, order, weights.gather(1, order))
        weights = kept
    rows, cols = torch.nonzero(weights > 0, as_tuple=True)  # row-major order: already CSR's order
    values = weights[rows, cols].numpy()
    indptr = np.zeros(weights.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows.numpy(), minlength=weights.shape[0]), out=indptr[1:])
    index_dtype = np.int32 if max(weights.shape[1], len(values)) < 2**31 else np.int64
    return sp.csr_matrix(
        (values, cols.numpy().astype(index_dtype), indptr.astype(index_dtype)), shape=tuple(weights.shape), copy=False
    )


def load_masked_lm(
    location: str, dtype: torch.dtype | None = None, allow_random_head: bool = False, trust_remote_code: bool = False
):
    """``AutoModelForMaskedLM.from_pretrained(location)``, refusing checkpoints without MLM-head weights.

    The one loader of masked-LM weights; model folders are read first by :func:`load_model_folder`
    (the encoder, training (``train.step.load_model``), the reproduction runner and calibration all
    load through it), which calls this with the folder that holds the masked LM.

    transformers fills weights missing from a checkpoint with random values and only logs it; a
    backbone-only checkpoint (``BertModel``, a sentence encoder) would so get a random MLM head and
    produce meaningless SPLADE vectors. Here any parameter that transformers reports as missing
    (``output_loading_info=True``, ``missing_keys``: newly initialised) outside the backbone
    (``model.base_model_prefix``) is an error, unless ``allow_random_head`` (training option
    ``model.allow_random_head: true``), which only warns. ``trust_remote_code`` is passed on to
    transformers (a folder's own model classes, ``config.json`` ``auto_map``; refused before this by
    :func:`~spladekit.model.folders.read_model_folder` unless trusted).

    Raises:
        ResolutionError: the folder has no weights file (or transformers cannot find it).
        DataFormatError: a weights file exists but cannot be read (truncated, damaged); names the file.
        HeadNotFoundError: MLM-head parameters are missing from the checkpoint (and not ``allow_random_head``).
    """
    import warnings

    from transformers import AutoModelForMaskedLM

    from spladekit.errors import DataFormatError, HeadNotFoundError, ResolutionError

    kwargs = {"dtype": dtype} if dtype else {}
    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(
            location, output_loading_info=True, trust_remote_code=trust_remote_code, **kwargs
        )
    except Exception as exc:
        if isinstance(exc, MemoryError):
            raise
        damaged = _unreadable_weights(location)  # a weights file exists but safetensors / torch.load fail on it
        if damaged is not None:
            raise damaged_weights_error(damaged, exc) from exc
        if isinstance(exc, OSError):  # e.g. "no file named model.safetensors ... found in directory"
            raise ResolutionError(f"model {location}: cannot load its weights ({_first_line(exc)})") from exc
        # transformers' own errors on a config.json it cannot build the model from (a vocab_size that
        # the weights contradict, "num_hidden_layers": "2", ...)
        raise DataFormatError(
            Path(location) / "config.json",
            f"transformers cannot load the masked LM of {location} ({type(exc).__name__}: {_first_line(exc)})",
        ) from exc
    prefix = getattr(mlm, "base_model_prefix", "") + "."
    head_missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(prefix))
    if head_missing:
        message = (
            f"model {location}: the checkpoint has no MLM-head weights ({len(head_missing)} missing, e.g. "
            f"{head_missing[0]!r}); it is not a masked-LM checkpoint (a backbone or sentence encoder?)"
        )
        if not allow_random_head:
            raise HeadNotFoundError(
                message + "; to train from a randomly initialised MLM head on purpose, set "
                "model.allow_random_head: true"
            )
        warnings.warn(
            message + "; starting from a random MLM head (model.allow_random_head)", RuntimeWarning, stacklevel=2
        )
    return mlm


def _unreadable_weights(location: str) -> Path | None:
    """The weights file of a local folder that cannot be read: the first safetensors file whose header
    safetensors cannot parse (a truncated or damaged file), else the one ``pytorch_model*.bin`` file
    (torch.load's errors do not say which); ``None`` when none can be named."""
    from safetensors import safe_open

    folder = Path(location)
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except Exception:  # safetensors' own error type, whatever its name in this version
            return path
    pickled = sorted(folder.glob("pytorch_model*.bin"))
    return pickled[0] if len(pickled) == 1 else None


def load_model_folder(
    location: str, dtype: torch.dtype | None = None, allow_random_head: bool = False, trust_remote_code: bool = False
):
    """The one loader of model folders: ``(mlm, tokenizer, folder)``.

    ``folder`` is :func:`spladekit.model.folders.read_model_folder` of ``location`` (read first, so
    an unsupported layout is refused before any weights load); the masked LM is loaded from where it
    says (the root or a sentence-transformers module's subfolder) by :func:`load_masked_lm`, the
    tokenizer from its folder.

    Raises:
        ResolutionError: no weights or no tokenizer in ``location``.
        UnsupportedModelError, DataFormatError: see :func:`~spladekit.model.folders.read_model_folder`
            (also: a folder run by custom sentence-transformers modules, which has no masked LM to give).
        HeadNotFoundError: see :func:`load_masked_lm`.
    """
    from spladekit.model.folders import read_model_folder
    from spladekit.model.remote_code import CUSTOM_LAYOUT, masked_lm_refusal

    folder = read_model_folder(location, trust_remote_code)
    if folder.layout == CUSTOM_LAYOUT:
        raise masked_lm_refusal(folder)
    return (*_load_weights(folder, dtype, allow_random_head), folder)


def _query_weights(folder, meta, tokenizer, model, location):
    """The inference-free query side's weights per vocabulary entry (None for a SPLADE query side).

    Raises:
        DataFormatError: ``spladekit.json`` names an unknown ``query_encoder``.
        UnsupportedModelError: a folded vocabulary with an inference-free query side.
    """
    query_weights = None
    if meta.query_encoder == INFERENCE_FREE:
        query_weights = folder.load_query_weights(tokenizer, model.vocab_size)
    elif meta.query_encoder != "splade":
        from spladekit.errors import DataFormatError

        raise DataFormatError(
            Path(location) / METADATA_FILE,
            f"unknown query_encoder {meta.query_encoder!r}; expected 'splade' or {INFERENCE_FREE!r}",
            field="query_encoder",
        )
    if query_weights is not None and model.fold is not None:
        from spladekit.errors import UnsupportedModelError

        raise UnsupportedModelError(
            Path(location) / METADATA_FILE,
            "a folded vocabulary with an inference-free query "
            "side (its weights are per vocabulary entry, not per term)",
            field="fold",
        )
    return query_weights


def _load_weights(folder, dtype: torch.dtype | None = None, allow_random_head: bool = False):
    """``(mlm, tokenizer)`` from where a :class:`~spladekit.model.folders.ModelFolder` says they are."""
    from transformers import AutoTokenizer

    from spladekit.errors import DataFormatError, ResolutionError
    from spladekit.model.folders import check_tokenizer_files

    mlm = load_masked_lm(folder.mlm_dir, dtype, allow_random_head, folder.trust_remote_code)
    if Path(folder.tokenizer_dir).is_dir():  # (a hub id: transformers resolves it)
        check_tokenizer_files(Path(folder.tokenizer_dir))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder.tokenizer_dir, trust_remote_code=folder.trust_remote_code)
    except OSError as exc:
        raise ResolutionError(f"model {folder.root}: cannot load its tokenizer ({_first_line(exc)})") from exc
    except MemoryError:
        raise
    except Exception as exc:  # transformers' errors on a tokenizer file it cannot build from
        raise DataFormatError(
            folder.tokenizer_dir,
            f"transformers cannot load the tokenizer of {folder.root} ({type(exc).__name__}: {_first_line(exc)})",
        ) from exc
    check_vocabulary_sizes(len(tokenizer), int(mlm.config.vocab_size), folder.tokenizer_dir)
    return mlm, tokenizer


#: the most rows a vocabulary is padded by: padding to a multiple of m adds at most m - 1 rows, and the
#: largest multiple in use is Megatron-LM's 128 × tensor-parallel degree 8 = 1024 (ModernBERT pads
#: 50280 → 50368 (64), T5 32100 → 32128, phi-2 50295 → 51200)
VOCAB_PADDING = 1024


def check_vocabulary_sizes(tokens: int, head_rows: int, tokenizer_dir) -> None:
    """Refuse a tokenizer that does not fit the MLM head.

    Rule: ``head_rows - VOCAB_PADDING < tokens <= head_rows`` and ``tokens >= head_rows / 2``, with
    ``tokens`` = ``len(tokenizer)`` (its vocabulary plus added tokens) and ``head_rows`` = the MLM head's
    vocabulary (``config.vocab_size``). More ids than rows: some tokens have no logit (an index error or
    wrong columns). Fewer: models pad the embedding matrix (and so the decoder) to a multiple of 8/64/128
    for speed, leaving rows no token reaches, fewer than :data:`VOCAB_PADDING`; a larger gap, or a
    tokenizer under half the head, is another model's tokenizer (or transformers' 5 special tokens).

    Raises:
        DataFormatError: naming the tokenizer folder and both sizes.
    """
    from spladekit.errors import DataFormatError

    if tokens > head_rows or head_rows - tokens >= VOCAB_PADDING or 2 * tokens < head_rows:
        raise DataFormatError(
            tokenizer_dir,
            f"the tokenizer has {tokens} tokens but the MLM head {head_rows} rows "
            f"(config.json vocab_size); a tokenizer fits when it has at most as many and fewer than "
            f"{VOCAB_PADDING} less (vocabulary padding), and at least half: is it the model's tokenizer?",
        )


def load_masked_lm_and_tokenizer(
    location: str, dtype: torch.dtype | None = None, allow_random_head: bool = False, trust_remote_code: bool = False
):
    """``(mlm, tokenizer)`` of :func:`load_model_folder`, for callers that use only the MLM head
    (the pooling and activation of the folder are in :func:`load_model_folder`'s third value).

    Raises:
        See :func:`load_model_folder`.
    """
    mlm, tokenizer, _ = load_model_folder(location, dtype, allow_random_head, trust_remote_code)
    return mlm, tokenizer


def saved_fold(meta: EncoderMetadata, location, vocab_size: int, tokenizer=None):
    """The :class:`~spladekit.model.folding.VocabularyFold` a model folder's metadata saves (None without one).

    ``tokenizer``: the folder's own; when given, the map must be the one the folding rule gives for it
    (:func:`~spladekit.model.folding.check_saved_fold`).

    Raises:
        DataFormatError: a map :meth:`~spladekit.model.folding.VocabularyFold.from_record` refuses
            (naming ``spladekit.json`` and the field), one that does not cover the head's ``vocab_size``
            columns, or one that is not the tokenizer's fold.
    """
    if meta.fold is None:
        return None
    from spladekit.model.folding import VocabularyFold, check_saved_fold

    where = Path(str(location)) / METADATA_FILE
    fold = VocabularyFold.from_record(meta.fold, where, vocab_size)
    if tokenizer is not None:
        check_saved_fold(fold, tokenizer, where)
    return fold


def override_metadata(
    meta: EncoderMetadata,
    *,
    query_max_length: int | None,
    doc_max_length: int | None,
    query_top_k: int | None,
    doc_top_k: int | None,
    query_pruning,
    doc_pruning,
) -> None:
    """Set on ``meta`` (read from a model folder) the loading options a caller of ``from_pretrained``
    gave: each one that is not None replaces the folder's value; the pruning rules are stored as their
    records (:func:`spladekit.model.pruning.record_of`). Changes ``meta`` in place."""
    for key, value in dict(
        query_max_length=query_max_length,
        doc_max_length=doc_max_length,
        query_top_k=query_top_k,
        doc_top_k=doc_top_k,
        query_pruning=record_of(query_pruning),
        doc_pruning=record_of(doc_pruning),
    ).items():
        if value is not None:
            setattr(meta, key, value)


class SpladeEncoder:
    """Encode texts into SPLADE sparse vectors.

    Args:
        model: a :class:`SpladeModel` (or a ``*ForMaskedLM`` model, wrapped automatically).
        tokenizer: the model's ``transformers`` tokenizer.
        metadata: max lengths and top-k pruning (see :class:`EncoderMetadata`).
        batch_size: texts per forward pass.
        device: torch device; default: CUDA when available, else CPU.
        query_weights: ``[V]`` weights of an inference-free query side (then
            :meth:`encode_queries` needs no forward pass; see :mod:`spladekit.model.inference_free`).

    Example::

        >>> from spladekit import SpladeEncoder
        >>> encoder = SpladeEncoder.from_pretrained("rasyosef/splade-tiny")
        >>> docs = encoder.encode_documents(["proteins do most of the work in cells", "the moon orbits the earth"])
        >>> query = encoder.encode_queries(["what do proteins do"])
        >>> docs.shape, docs.dtype  # one row per text, one column per vocabulary entry
        ((2, 30522), dtype('float32'))
        >>> scores = (query @ docs.T).toarray()[0]  # SPLADE scores are dot products
        >>> bool(scores[0] > scores[1])
        True
    """

    def __init__(
        self,
        model,
        tokenizer,
        metadata: EncoderMetadata | None = None,
        batch_size: int = 32,
        device=None,
        query_weights: torch.Tensor | None = None,
    ):
        metadata = metadata or EncoderMetadata()
        if not isinstance(model, SpladeModel):  # a bare masked LM: the metadata describes its head
            model = SpladeModel(
                model,
                pooling=metadata.pooling,
                activation=metadata.activation,
                position_top_k=metadata.position_top_k,
                fold=saved_fold(metadata, metadata.source or ".", int(model.config.vocab_size)),
            )
        # the model computes, the metadata records: they say the same
        metadata.pooling, metadata.activation = model.pooling, model.activation
        metadata.position_top_k = model.position_top_k
        metadata.fold = None if model.fold is None else model.fold.to_record()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.batch_size = batch_size
        self._vocab: list[str] | None = None
        self.last_truncated = 0
        self._lowered: set[int] = set()
        self.query_weights = query_weights

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        query_max_length: int | None = None,
        doc_max_length: int | None = None,
        query_top_k: int | None = None,
        doc_top_k: int | None = None,
        batch_size: int = 32,
        device=None,
        dtype: torch.dtype | None = None,
        head_impl: str | None = None,
        trust_remote_code: bool = False,
        query_pruning=None,
        doc_pruning=None,
    ) -> SpladeEncoder:
        """Load a model folder or hub id (resolved by :func:`spladekit.data.resolve.resolve_model`) in
        any layout :func:`spladekit.model.folders.read_model_folder` reads (spladekit, Hugging Face
        masked LM, naver/splade, sentence-transformers ``SparseEncoder`` incl. ``Router``, OpenSearch doc-only).

        Arguments left as None come from the folder (``spladekit.json``, else what the
        sentence-transformers or OpenSearch files say, else the defaults 64/256); pooling, activation
        and the inference-free query side always come from the folder. ``query_pruning`` /
        ``doc_pruning``: a :class:`~spladekit.model.pruning.PruningRule` (or its record or
        ``KIND=VALUE`` text) applied after the top-k (None: the folder's).

        Code from the folder runs only with ``trust_remote_code`` (:mod:`spladekit.model.remote_code`):
        a folder of custom sentence-transformers modules then gives a
        :class:`~spladekit.model.remote_code.RemoteCodeEncoder` (sentence-transformers computes its
        vectors; one max length; ``head_impl`` does not apply), custom transformers classes a
        :class:`SpladeEncoder` as usual.

        Raises:
            ResolutionError: the model cannot be found, or its folder lacks weights or tokenizer.
            UnsupportedModelError: the folder describes something spladekit cannot compute (before any
                weights load; see :mod:`spladekit.model.folders`), or names code of its own and not
                ``trust_remote_code``.
            HeadNotFoundError: it is not a supported masked-LM family, or its checkpoint has no
                MLM-head weights (see :func:`load_masked_lm`).
        """
        from spladekit.data.resolve import resolve_model
        from spladekit.model.folders import read_model_folder

        location = resolve_model(name_or_path)
        from spladekit.model.remote_code import CUSTOM_LAYOUT, RemoteCodeEncoder

        folder = read_model_folder(location, trust_remote_code)
        if folder.layout == CUSTOM_LAYOUT:
            if query_pruning is not None or doc_pruning is not None:
                raise ValueError(
                    "query_pruning / doc_pruning: a folder of custom sentence-transformers modules is encoded by "
                    "sentence-transformers, which applies no pruning rule; prune the vectors instead (spladekit.model.pruning.prune)"
                )
            return RemoteCodeEncoder.load(
                folder,
                max_lengths=(query_max_length, doc_max_length),
                query_top_k=query_top_k,
                doc_top_k=doc_top_k,
                batch_size=batch_size,
                device=device,
                source=str(name_or_path),
            )
        meta = folder.metadata()  # refusals before any weights load
        mlm, tokenizer = _load_weights(folder, dtype)
        meta.source = meta.source or str(name_or_path)
        override_metadata(
            meta,
            query_max_length=query_max_length,
            doc_max_length=doc_max_length,
            query_top_k=query_top_k,
            doc_top_k=doc_top_k,
            query_pruning=query_pruning,
            doc_pruning=doc_pruning,
        )
        model = SpladeModel(
            mlm,
            head_impl,
            pooling=meta.pooling,
            activation=meta.activation,
            position_top_k=meta.position_top_k,
            fold=saved_fold(meta, location, int(mlm.config.vocab_size), tokenizer),
        )
        query_weights = _query_weights(folder, meta, tokenizer, model, location)
        encoder = cls(model, tokenizer, meta, batch_size=batch_size, device=device, query_weights=query_weights)
        # a length above the model's positions (max_seq_length, spladekit.json, an argument) is lowered
        # to them here, with a warning, so that the metadata recorded (index, run config) is what runs
        meta.query_max_length = encoder.check_max_length(meta.query_max_length)
        meta.doc_max_length = encoder.check_max_length(meta.doc_max_length)
        return encoder

    def save_pretrained(self, folder: str | Path, *, config: dict | None = None) -> None:
        """Write the encoder as a model folder (:func:`spladekit.model.writer.write_model_folder`) into ``folder``.

        ``config``: the configuration that made the model (a training run's), saved as ``config.yaml``
        beside it when given. The writes go straight into ``folder``; a caller wanting the folder whole
        or not at all wraps the call in :func:`spladekit.io.atomic_folder`.
        """
        from spladekit.model.writer import write_model_folder

        write_model_folder(folder, self.model, self.tokenizer, self.metadata, self.query_weights, config=config)

    # ------------------------------------------------------------------ encoding
    @property
    def vocab_size(self) -> int:
        """Number of columns of every vector: ``V``, or ``V'`` terms with a folded vocabulary."""
        return self.model.output_size

    def tokenize(self, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        """Tokenize with truncation to ``max_length`` and padding to the longest text of the batch."""
        return self.tokenizer(list(texts), max_length=max_length, truncation=True, padding=True, return_tensors="pt")

    def encode_dense(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """One forward pass: ``[len(texts), V]`` float32 weights on the CPU, ``[PAD]`` column zeroed."""
        return self._weights(self.tokenize(texts, max_length))

    @torch.no_grad()
    def _weights(self, batch) -> torch.Tensor:
        """``[B, V]`` float32 weights on the CPU of one tokenized batch (:meth:`tokenize`'s output)."""
        weights = self.model(batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device))
        weights = weights.float().cpu()
        vocab = self.model.vocab_size  # token ids are vocabulary columns; their output column is their term's
        pad_id = getattr(self.tokenizer, "pad_token_id", None)
        if pad_id is not None and 0 <= pad_id < vocab:
            weights[:, self.model.output_column(pad_id)] = 0.0
        if self.metadata.zero_special_tokens:
            special = [
                self.model.output_column(j)
                for j in getattr(self.tokenizer, "all_special_ids", []) or []
                if 0 <= j < vocab
            ]
            weights[:, special] = 0.0
        return weights

    @property
    def max_positions(self) -> int | None:
        """The most tokens the model accepts (its position embeddings; None when unbounded/unknown)."""
        from spladekit.model.metadata import max_positions

        return max_positions(self.model.mlm.config)

    def check_max_length(self, max_length: int) -> int:
        """The max length to use: ``max_length``, lowered to :attr:`max_positions` (with a ``UserWarning``,
        once per encoder and length).

        Raises:
            ValueError: ``max_length`` is not an integer ≥ 2 (``[CLS]`` and ``[SEP]`` need two
                positions; transformers would silently not truncate at all below that).
        """
        check_int(max_length, "max_length", 2, note=" (special tokens included)")
        limit = self.max_positions
        if limit is not None and max_length > limit:
            import warnings

            if max_length in self._lowered:  # warn once per encoder and length
                return limit
            self._lowered.add(max_length)
            warnings.warn(
                f"max_length {max_length} exceeds the model's {limit} positions; texts are truncated to {limit} tokens",
                stacklevel=3,
            )
            return limit
        return max_length

    def _count_truncated(self, texts: Sequence[str], max_length: int, batch=None) -> int:
        """Texts of ``texts`` longer than ``max_length`` tokens (special tokens included).

        From ``batch`` (their :meth:`tokenize` output) when a fast tokenizer made it: its Rust
        encodings keep what truncation cut off in ``overflowing`` (non-empty exactly when the text
        had more than ``max_length`` tokens), so no second tokenization is needed; otherwise the
        texts are tokenized again without truncation.
        """
        encodings = getattr(batch, "encodings", None) if batch is not None else None
        if encodings is not None and len(encodings) == len(texts):
            return sum(bool(e.overflowing) for e in encodings)
        lengths = self.tokenizer(list(texts), truncation=False, add_special_tokens=True, verbose=False)["input_ids"]
        return sum(len(ids) > max_length for ids in lengths)

    def encode(
        self,
        texts: Sequence[str],
        max_length: int,
        top_k: int | None = None,
        batch_size: int | None = None,
        show_progress: bool = False,
        desc: str = "encoding",
        on_batch: Callable[[int], None] | None = None,
        pruning=None,
    ) -> sp.csr_matrix:
        """Encode ``texts`` into a ``[len(texts), V]`` CSR matrix (float32); ``on_batch(n)`` is called
        after each batch of ``n`` texts (e.g. a caller's progress bar). ``pruning``: a
        :class:`~spladekit.model.pruning.PruningRule` (or its record or text) applied to each vector
        after ``top_k`` (:func:`spladekit.model.pruning.prune`).

        Texts are processed in order of length (less padding), and rows are returned in input order.
        The number of texts longer than ``max_length`` tokens is stored in ``self.last_truncated``.

        Raises:
            TypeError: ``texts`` is a single string, or one of them is None or bytes (numbers are encoded as their text).
            ValueError: ``max_length`` < 2, ``top_k`` or ``batch_size`` < 1 (see
                :meth:`check_max_length`; a ``max_length`` above the model's positions is lowered to
                them with a warning).
        """
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a sequence of strings, got a single string (wrap it in a list)")
        check_top_k(top_k)
        pruning = of_record(pruning)
        max_length = self.check_max_length(max_length)
        batch_size = batch_size or self.batch_size
        check_int(batch_size, "batch_size", 1)
        texts = list(texts)
        bad = next((i for i, t in enumerate(texts) if t is None or isinstance(t, (bytes, bytearray))), None)
        if bad is not None:  # str() would encode the text "None" / "b'...'": a vector of the wrong text
            raise TypeError(f"texts[{bad}] is {type(texts[bad]).__name__} ({texts[bad]!r:.60}), not a string")
        texts = [t if isinstance(t, str) else str(t) for t in texts]  # numbers: their decimal text
        order = np.argsort([-len(t) for t in texts], kind="stable")
        blocks, truncated = [], 0
        for start in tqdm(range(0, len(texts), batch_size), desc=desc, disable=not show_progress, unit="batch"):
            chunk = [texts[i] for i in order[start : start + batch_size]]
            batch = self.tokenize(chunk, max_length)
            truncated += self._count_truncated(chunk, max_length, batch)
            blocks.append(prune(weights_to_csr(self._weights(batch), top_k), pruning))
            if on_batch is not None:
                on_batch(len(chunk))
        self.last_truncated = truncated
        if not blocks:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        if len(texts) == 1:  # one block, one row: already in input order (a query per call)
            return blocks[0]
        stacked = sp.vstack(blocks, format="csr")
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return stacked[inverse].astype(np.float32)

    def encode_queries(self, queries: Sequence[str], **kwargs) -> sp.csr_matrix:
        """Encode queries with ``query_max_length``, ``query_top_k`` and ``query_pruning``; see :meth:`encode`.

        With an inference-free query side (:attr:`query_weights`), no forward pass: each query is
        the bag of its tokens weighted by ``query_weights``
        (:func:`spladekit.model.inference_free.encode_bag`; ``batch_size`` and ``show_progress`` do not apply).
        """
        if self.query_weights is not None:
            if isinstance(queries, (str, bytes)):
                raise TypeError("texts must be a sequence of strings, got a single string (wrap it in a list)")
            max_length = self.check_max_length(self.metadata.query_max_length)
            matrix, self.last_truncated = encode_bag(
                self.tokenizer, list(queries), self.query_weights, max_length, self.metadata.query_top_k
            )
            return prune(matrix, self.metadata.query_pruning)
        return self.encode(
            queries,
            self.metadata.query_max_length,
            self.metadata.query_top_k,
            desc="queries",
            pruning=self.metadata.query_pruning,
            **kwargs,
        )

    def encode_documents(self, documents: Sequence[str], **kwargs) -> sp.csr_matrix:
        """Encode documents with ``doc_max_length``, ``doc_top_k`` and ``doc_pruning``; see :meth:`encode`."""
        return self.encode(
            documents,
            self.metadata.doc_max_length,
            self.metadata.doc_top_k,
            desc="documents",
            pruning=self.metadata.doc_pruning,
            **kwargs,
        )

    # ------------------------------------------------------------------ reading vectors
    @property
    def vocabulary(self) -> list[str]:
        """The name of each column: its term under a folded vocabulary (``metadata.fold``), else the
        token string of the id (``[spladekit:ID]`` for ids the tokenizer does not name)."""
        if self._vocab is None and self.metadata.fold is not None:
            self._vocab = list(self.metadata.fold["terms"])
        if self._vocab is None:
            tokens = self.tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
            # ids the tokenizer does not name (padded vocabularies, gaps) get a placeholder, as in
            # spladekit.index.export.model_vocabulary, so vocab.json stays a list of strings
            self._vocab = [t if isinstance(t, str) else f"[spladekit:{j}]" for j, t in enumerate(tokens)]
        return self._vocab

    def decode(self, row, top_k: int | None = None) -> list[tuple[str, float]]:
        """The ``(token, weight)`` pairs of one vector, heaviest first (ties: lower id first).

        Args:
            row: a 1-row CSR matrix, a 1-D dense array/tensor of length V.
            top_k: keep the first ``top_k`` pairs (None: all active terms).
        """
        if sp.issparse(row):
            row = row.tocsr()
            ids, weights = row.indices, row.data
        else:
            dense = np.asarray(row.detach().cpu() if isinstance(row, torch.Tensor) else row, dtype=np.float32).ravel()
            ids = np.nonzero(dense > 0)[0]
            weights = dense[ids]
        order = sorted(range(len(ids)), key=lambda i: (-float(weights[i]), int(ids[i])))
        if top_k is not None:
            order = order[:top_k]
        vocab = self.vocabulary
        return [(vocab[int(ids[i])], float(weights[i])) for i in order]
