"""Code from a model folder: found, refused unless the user says ``trust_remote_code``, run as its
library runs it when they do.

A model folder can name Python classes that live in its own files (or in an installed package):

* sentence-transformers modules (``modules.json`` / a Router's ``router_config.json`` ``types``)
  outside the ``sentence_transformers.`` namespace, e.g. ``"custom_pooling.MyPooling"`` for the
  class ``MyPooling`` of ``custom_pooling.py`` in the folder: sentence-transformers 6 imports them
  only with ``trust_remote_code=True`` (``import_module_class``); spladekit then runs the folder as
  sentence-transformers does (:class:`RemoteCodeEncoder`: its ``SparseEncoder`` computes the vectors);
* transformers classes of the folder's ``config.json`` / ``tokenizer_config.json`` ``auto_map``
  (``"AutoModelForMaskedLM": "modeling_x.XForMaskedLM"``), in the folder itself or a module folder
  one or two levels down, under any auto class (a teacher loads ``AutoModelForSequenceClassification``,
  a tokenizer may be named in ``config.json``): transformers imports them only with
  ``trust_remote_code=True``, which spladekit passes on (the masked LM is then used as any other).

:func:`find_custom_code` reads JSON files only, so a folder is refused before anything is imported,
by :func:`refusal`: the class, the file, and how to accept it (``--trust-remote-code`` on the command
line, ``trust_remote_code=True`` in Python). Every loader reads folders through
:func:`spladekit.model.folders.read_model_folder`, which asks here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import scipy.sparse as sp

from spladekit.errors import DataFormatError, UnsupportedModelError
from spladekit.model.metadata import EncoderMetadata, check_top_k

#: the layout :func:`~spladekit.model.folders.read_model_folder` gives a trusted folder with custom modules
CUSTOM_LAYOUT = "sentence-transformers-custom-code"
FLAG = "--trust-remote-code (trust_remote_code=True in Python)"
#: the files whose ``auto_map`` names classes transformers would import from the folder
CODE_MAPS = ("config.json", "tokenizer_config.json")


@dataclass(frozen=True)
class CustomCode:
    """One class a folder names outside its library: ``kind`` ``"module"`` (sentence-transformers) or
    ``"auto_map"`` (transformers); ``reference`` as written (``"file.Class"``); ``named_in`` the JSON
    file that names it and ``field`` where; ``file`` the Python file it would run (None: not in the
    folder, an installed module of that name would be imported); ``module`` the sentence-transformers
    module's id."""

    kind: str
    reference: str
    named_in: Path
    field: str
    file: Path | None
    module: str | None = None

    @property
    def class_name(self) -> str:
        return self.reference.rsplit(".", 1)[-1]


def _code_file(folder: Path, reference: str) -> Path | None:
    """The file of ``"module.Class"`` (``"repo--module.Class"``: another hub repository's) in ``folder``;
    None when there is none there (a name that would leave the folder included)."""
    module = reference.split("--")[-1].rsplit(".", 1)[0]
    path = (folder / (module.replace(".", "/") + ".py")).resolve()
    return path if folder.resolve() in path.parents and path.is_file() else None


def _module_types(root: Path) -> list[tuple[Path, str, str]]:
    """``(file, module id, type)`` of every sentence-transformers module type of ``root`` (modules.json
    and, for a Router, its router_config.json ``types``)."""
    from spladekit.io import read_json

    found = []
    modules = read_json(root / "modules.json")
    if not isinstance(modules, list):
        raise DataFormatError(root / "modules.json", "expected a JSON array")
    for number, module in enumerate(modules):
        if isinstance(module, dict) and isinstance(module.get("type"), str):
            found.append((root / "modules.json", str(module.get("name", number)), module["type"]))
            if module["type"].endswith(".Router"):
                path = (root / str(module.get("path") or "")) / "router_config.json"
                types = read_json(path).get("types") if path.is_file() else None
                for key, value in types.items() if isinstance(types, dict) else ():
                    if isinstance(value, str):
                        found.append((path, str(key), value))
    return found


def find_custom_code(root: str | Path) -> list[CustomCode]:
    """The classes a local model folder names outside sentence-transformers and transformers (module
    docstring), in file order; ``[]`` for a hub id (transformers refuses remote code there itself).

    Raises:
        DataFormatError: a JSON file read is not what its library writes (``modules.json`` not an array).
    """
    from spladekit.io import read_json

    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    if (root / "modules.json").is_file():
        for path, module_id, reference in _module_types(root):
            if not reference.startswith("sentence_transformers."):
                found.append(CustomCode("module", reference, path, "type", _code_file(root, reference), module_id))
    for folder in _config_folders(root):
        for name in CODE_MAPS:
            config = read_json(folder / name) if (folder / name).is_file() else None
            auto_map = config.get("auto_map") if isinstance(config, dict) else None
            for key, refs in auto_map.items() if isinstance(auto_map, dict) else ():
                for reference in [refs] if isinstance(refs, str) else refs if isinstance(refs, list) else []:
                    if isinstance(reference, str):
                        found.append(
                            CustomCode(
                                "auto_map", reference, folder / name, f"auto_map.{key}", _code_file(folder, reference)
                            )
                        )
    return found


def _config_folders(root: Path) -> list[Path]:
    """``root`` and the folders one or two levels below it (sentence-transformers modules, a Router's
    routes) that hold a file of :data:`CODE_MAPS`, sorted."""
    found = {root}
    for pattern in ("*", "*/*"):
        found.update(p.parent for name in CODE_MAPS for p in root.glob(f"{pattern}/{name}"))
    return sorted(found)


def refusal(code: CustomCode) -> UnsupportedModelError:
    """The error of a folder whose custom code the user did not trust: names the class, its file and the flag."""
    where = (
        f"{code.file.name} in {code.file.parent}"
        if code.file
        else f"the Python module {code.reference.rsplit('.', 1)[0]!r} (not in the folder)"
    )
    library = (
        f"module {code.module!r}: the sentence-transformers module"
        if code.kind == "module"
        else "the transformers class"
    )
    return UnsupportedModelError(
        code.named_in,
        f"{library} {code.class_name!r} ({code.reference}) is code from {where}; "
        f"spladekit runs a model folder's code only when asked: {FLAG}",
        field=code.field,
    )


def masked_lm_refusal(folder) -> UnsupportedModelError:
    """The error of a command that needs the masked LM of a folder run by its custom modules."""
    classes = ", ".join(sorted({c.class_name for c in folder.custom_code if c.kind == "module"}))
    return UnsupportedModelError(
        Path(folder.root) / "modules.json",
        f"the model's custom sentence-transformers modules "
        f"({classes}) compute its vectors: spladekit encodes with it through sentence-transformers "
        "(encode, index, search, evaluate, serve) but has no masked LM of it to train, calibrate "
        "or export",
        field="type",
    )


class RemoteCodeEncoder:
    """A folder with custom sentence-transformers modules, run by sentence-transformers itself
    (``SparseEncoder(folder, trust_remote_code=True)``), behind the encoding interface of
    :class:`~spladekit.model.encoder.SpladeEncoder` (what indexing, search, evaluation, serving and
    the PyTerrier and MTEB adapters use): :meth:`encode_queries` / :meth:`encode_documents` are its
    ``encode_query`` / ``encode_document`` (its prompts, routes, truncation at its ``max_seq_length``
    and ``max_active_dims`` top-k), as ``[N, V]`` float32 CSR. The vectors are the library's own: no
    column is zeroed. :attr:`model` is the ``SparseEncoder``; commands that need a masked LM
    (training, calibration, model exports, an inference-free query side) refuse it
    (:func:`require_masked_lm`).
    """

    def __init__(self, st_model, folder, metadata: EncoderMetadata, batch_size: int = 32):
        self.model = st_model
        self.folder = folder
        self.tokenizer = st_model.tokenizer
        self.metadata = metadata
        self.batch_size = batch_size
        self.device = st_model.device
        self.query_weights = None
        self.last_truncated = 0
        self._vocab: list[str] | None = None
        self._vocab_size: int | None = None

    @classmethod
    def load(
        cls,
        folder,
        *,
        max_lengths=(None, None),
        query_top_k=None,
        doc_top_k=None,
        batch_size: int = 32,
        device=None,
        source: str = "",
    ):
        """Load a trusted :data:`CUSTOM_LAYOUT` folder with sentence-transformers (its code runs here).

        Args:
            max_lengths: ``(query, document)`` max lengths asked (None: the model's ``max_seq_length``);
                sentence-transformers has one, so two different ones are refused.

        Raises:
            MissingExtraError: sentence-transformers is not installed.
            ValueError: two different max lengths, or a bad top-k.
        """
        from spladekit.errors import require_extra

        sparse = require_extra(
            "sentence_transformers.sparse_encoder", "a model folder with custom modules", "sentence-transformers", "st"
        )
        check_top_k(query_top_k), check_top_k(doc_top_k)
        asked = {n for n in max_lengths if n is not None}
        if len(asked) > 1:
            raise ValueError(
                f"a model with custom modules has one max length (sentence-transformers' max_seq_length), "
                f"not {sorted(asked)}"
            )
        model = sparse.SparseEncoder(str(folder.root), trust_remote_code=True, device=device)
        if asked:
            model.max_seq_length = asked.pop()
        length, top_k = int(model.max_seq_length), model.max_active_dims
        meta = EncoderMetadata(
            query_max_length=length,
            doc_max_length=length,
            source=source or str(folder.root),
            query_top_k=query_top_k or top_k,
            doc_top_k=doc_top_k or top_k,
            extra={"custom_code": sorted({c.reference for c in folder.custom_code})},
        )
        return cls(model, folder, meta, batch_size)

    @property
    def vocab_size(self) -> int:
        """V: the columns of every vector (the model's output dimension)."""
        if self._vocab_size is None:
            self._vocab_size = int(
                self.model.encode_document([""], convert_to_sparse_tensor=True, show_progress_bar=False).shape[1]
            )
        return self._vocab_size

    @property
    def vocabulary(self) -> list[str]:
        """Token string of each column id (``[spladekit:ID]`` for ids the tokenizer does not name)."""
        if self._vocab is None:
            tokens = self.tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
            self._vocab = [t if isinstance(t, str) else f"[spladekit:{j}]" for j, t in enumerate(tokens)]
        return self._vocab

    def _encode_side(
        self, texts, document: bool, top_k, batch_size=None, show_progress=False, desc="encoding", on_batch=None
    ):
        from tqdm.auto import tqdm

        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a sequence of strings, got a single string (wrap it in a list)")
        texts, size = list(texts), batch_size or self.batch_size
        run = self.model.encode_document if document else self.model.encode_query
        blocks = []
        for start in tqdm(range(0, len(texts), size), desc=desc, disable=not show_progress, unit="batch"):
            chunk = texts[start : start + size]
            blocks.append(
                _csr(
                    run(
                        chunk,
                        batch_size=size,
                        convert_to_sparse_tensor=True,
                        max_active_dims=top_k,
                        show_progress_bar=False,
                    )
                )
            )
            if on_batch is not None:
                on_batch(len(chunk))
        self.last_truncated = self._truncated(texts)
        return sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, self.vocab_size), dtype="float32")

    def _truncated(self, texts) -> int:
        """How many of ``texts`` are longer than the model's ``max_seq_length`` tokens."""
        if not texts:
            return 0
        lengths = self.tokenizer(list(texts), truncation=False, add_special_tokens=True, verbose=False)["input_ids"]
        return sum(len(ids) > self.model.max_seq_length for ids in lengths)

    def encode(
        self, texts, max_length=None, top_k=None, batch_size=None, show_progress=False, desc="encoding", on_batch=None
    ):
        """Documents' vectors (``encode_document``).

        Raises:
            ValueError: ``max_length`` other than the model's ``max_seq_length`` (where it truncates).
        """
        if max_length is not None and max_length != self.model.max_seq_length:
            raise ValueError(
                f"a model with custom modules truncates at its max_seq_length {self.model.max_seq_length}, not {max_length}"
            )
        return self._encode_side(texts, True, top_k, batch_size, show_progress, desc, on_batch)

    def encode_queries(self, queries, **kwargs):
        """Queries' vectors (``encode_query``, top k ``metadata.query_top_k``)."""
        return self._encode_side(queries, False, self.metadata.query_top_k, desc="queries", **kwargs)

    def encode_documents(self, documents, **kwargs):
        """Documents' vectors (``encode_document``, top k ``metadata.doc_top_k``)."""
        return self._encode_side(documents, True, self.metadata.doc_top_k, desc="documents", **kwargs)

    def save_pretrained(self, folder) -> None:
        """Refused: sentence-transformers saves such a model (``encoder.model.save(folder)``)."""
        raise masked_lm_refusal(self.folder)


def _csr(tensor) -> sp.csr_matrix:
    """A ``torch`` sparse ``[N, V]`` tensor as float32 CSR (canonical: sorted, summed, no zeros)."""
    import numpy as np

    coo = tensor.detach().cpu().coalesce()
    rows, cols = coo.indices().numpy()
    matrix = sp.csr_matrix((coo.values().float().numpy(), (rows, cols)), shape=tuple(coo.shape), dtype=np.float32)
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def require_masked_lm(encoder) -> None:
    """Refuse an encoder that has no masked LM (:class:`RemoteCodeEncoder`): for the commands that
    change or export the masked LM and its head.

    Raises:
        UnsupportedModelError: :func:`masked_lm_refusal`.
    """
    if isinstance(encoder, RemoteCodeEncoder):
        raise masked_lm_refusal(encoder.folder)
