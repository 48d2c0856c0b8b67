"""Folded vocabularies: after pooling, the vocabulary entries of a byte-level BPE tokenizer that
differ only by case or by the word-start marker become one term.

Byte-level BPE (GPT-2's, RoBERTa's, ModernBERT's) spells one word several ways: ``the``, ``The``,
``Ġthe``, ``ĠThe`` (``Ġ`` is the byte of the space before a word, shown through GPT-2's byte-to-
character table), each with its own decoder row. SPARSEUP's model card folds them after pooling
(ModernBERT's 50k entries → about 34k terms); so does this module, by one rule:

**The key of a column.** A column's token is turned back into its bytes (GPT-2's byte-to-unicode
table inverted, :func:`byte_decoder`), the bytes decoded as UTF-8; one leading space (the word-start
marker) is dropped when text remains; the text is lower-cased (``str.lower``). Columns with one key
become one term, named by the key. Left alone, each its own term:

- special and added tokens (``tokenizer.added_tokens_decoder``: ``[CLS]``, ``<s>``, ``[PAD]``...),
  named by their token;
- tokens whose bytes are not whole UTF-8 (a piece of a multi-byte character), named by their bytes
  as ``<0XE3><0X81>`` (an upper-case ``X``, which no lower-cased key holds);
- columns the tokenizer does not name (vocabulary padding), named ``[spladekit:ID]``.

Two of these names that coincide are refused (:class:`ValueError`), never merged.

**The folded weight.** With max pooling the term's weight is the max of its columns' weights: the
max over positions and over the columns of the term, exactly what max pooling of the merged columns
gives. With sum pooling it is the sum of its columns' weights, ``Σ_{j ∈ term} Σ_t a(logit_tj)``: sum
pooling over positions and over the columns of the term, the same rule stated for sums. Both are
taken on the ``[B, V]`` vectors, after pooling (and after any per-position cap), in every head.

**The map** (:class:`VocabularyFold`) is saved with the model in ``spladekit.json`` (field
``fold``: ``{"rule", "columns": [V term ids], "terms": [V' names]}``) and read back by
:meth:`VocabularyFold.from_record`, which refuses a map it does not understand, naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

import torch

#: the one folding rule (its name is stored with the map).
FOLD_RULE = "byte-level-bpe:case+word-start"


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: character → byte (OpenAI's GPT-2 ``encoder.py``,
    ``bytes_to_unicode``; the table of the ``tokenizers`` ByteLevel pre-tokenizer). Printable
    Latin-1 bytes stand for themselves; the other 68 bytes are shifted to ``chr(256 + n)`` in order
    (the space, 0x20, becomes ``Ġ``)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def is_byte_level_bpe(tokenizer) -> bool:
    """Whether ``tokenizer`` is a fast byte-level BPE tokenizer (a ``BPE`` model behind a
    ``ByteLevel`` pre-tokenizer, alone or in a ``Sequence``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    data = json.loads(backend.to_str())
    pre = data.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return (data.get("model") or {}).get("type") == "BPE" and any(p.get("type") == "ByteLevel" for p in parts)


def column_name(token: str | None, column: int, alone: bool) -> tuple[str, bool]:
    """``(name, folds)`` of one column by the module docstring's rule: ``folds`` is False for the
    columns left alone (special/added tokens, partial UTF-8, unnamed)."""
    if token is None:
        return f"[spladekit:{column}]", False
    if alone:
        return token, False
    table = byte_decoder()
    if any(ch not in table for ch in token):  # not a byte-level token (an added piece): alone
        return token, False
    raw = bytes(table[ch] for ch in token)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(f"<0X{b:02X}>" for b in raw), False
    if text.startswith(" ") and len(text) > 1:
        text = text[1:]
    return text.lower(), True


@dataclass
class VocabularyFold:
    """Which term each vocabulary column folds into (module docstring).

    Attributes:
        columns: ``[V]`` term id of each column of the MLM head.
        terms: ``[V']`` term names, unique.
        rule: :data:`FOLD_RULE`.
    """

    columns: list[int]
    terms: list[str]
    rule: str = FOLD_RULE
    _groups: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        """``V'``, the number of terms (columns of a folded vector)."""
        return len(self.terms)

    def groups(self) -> torch.Tensor:
        """``[V', G]`` int64: the columns of each term, padded with ``V`` (an all-zero column), ``G``
        the largest term's number of columns."""
        if self._groups is None:
            vocab = len(self.columns)
            members: list[list[int]] = [[] for _ in self.terms]
            for column, term in enumerate(self.columns):
                members[term].append(column)
            width = max(len(m) for m in members)
            self._groups = torch.tensor([m + [vocab] * (width - len(m)) for m in members], dtype=torch.long)
        return self._groups

    def apply(self, weights: torch.Tensor, pooling: str = "max", fill: float = 0.0) -> torch.Tensor:
        """Fold SPLADE weights ``[..., V]`` (≥ 0) into ``[..., V']``: the max of each term's columns
        (``pooling="max"``), their sum (``"sum"``). Differentiable; traceable (gathers and
        elementwise max/add, one per member rank). ``fill``: the value of the padding column (0 for
        weights, ``-inf`` to fold raw pooled logits by max)."""
        groups = self.groups().to(weights.device)
        padded = torch.cat([weights, weights.new_full((*weights.shape[:-1], 1), fill)], dim=-1)
        out = padded[..., groups[:, 0]]
        for rank in range(1, groups.shape[1]):
            member = padded[..., groups[:, rank]]
            out = torch.maximum(out, member) if pooling == "max" else out + member
        return out

    def to_record(self) -> dict:
        """The JSON form saved in ``spladekit.json`` (field ``fold``)."""
        return {"rule": self.rule, "columns": list(map(int, self.columns)), "terms": list(self.terms)}

    @classmethod
    def from_record(cls, record, where, vocab_size: int | None = None) -> VocabularyFold:
        """Read and check a saved map (``spladekit.json`` field ``fold``).

        Args:
            record: the JSON value. where: the file (for messages).
            vocab_size: ``V`` of the model's head, when known (the map must cover exactly its columns).

        Raises:
            DataFormatError: not an object with exactly ``rule``, ``columns``, ``terms``; an unknown
                rule; ``terms`` not a list of distinct strings; ``columns`` not a list of integers in
                ``[0, V')``; a term no column folds into; ``V`` columns expected and another number given.
        """
        from spladekit.errors import DataFormatError

        def bad(message: str, name: str = "fold"):
            return DataFormatError(where, message, field=name)

        if not isinstance(record, dict) or set(record) != {"rule", "columns", "terms"}:
            raise bad("must be an object with exactly the keys rule, columns, terms")
        if record["rule"] != FOLD_RULE:
            raise bad(f"unknown folding rule {record['rule']!r}; this spladekit knows {FOLD_RULE!r}", "fold.rule")
        terms, columns = record["terms"], record["columns"]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms) or not terms:
            raise bad("must be a non-empty list of strings", "fold.terms")
        if len(set(terms)) != len(terms):
            raise bad("repeats a term name (two terms that would read as one)", "fold.terms")
        if not isinstance(columns, list) or not all(type(c) is int and 0 <= c < len(terms) for c in columns):
            raise bad(f"must be a list of integers in [0, {len(terms)}) (term ids)", "fold.columns")
        if vocab_size is not None and len(columns) != vocab_size:
            raise bad(f"maps {len(columns)} columns but the MLM head has {vocab_size}", "fold.columns")
        if len(set(columns)) != len(terms):
            raise bad("names a term that no column folds into", "fold.terms")
        return cls(columns=list(columns), terms=list(terms), rule=FOLD_RULE)


def check_saved_fold(fold: VocabularyFold, tokenizer, where) -> None:
    """Refuse a saved map (:meth:`VocabularyFold.from_record`) that is not the fold this module's rule
    gives for the model's own ``tokenizer``: every column must fold into the term its token's key names
    (:func:`fold_vocabulary`). A map from elsewhere could otherwise merge unrelated words into one term
    (a silent wrong vector) or put most columns into one term (``groups`` is ``[V', G]``: quadratic).

    Raises:
        DataFormatError: naming ``where`` (``spladekit.json``), the field ``fold.columns`` and the
            first column whose term differs; a tokenizer that is not byte-level BPE (``fold``).
    """
    from spladekit.errors import DataFormatError

    try:
        expected = fold_vocabulary(tokenizer, len(fold.columns))
    except ValueError as exc:
        raise DataFormatError(
            where, f"a folded vocabulary for this tokenizer cannot be made: {exc}", field="fold"
        ) from None
    for column, (got, want) in enumerate(zip(fold.columns, expected.columns)):
        if fold.terms[got] != expected.terms[want]:
            raise DataFormatError(
                where,
                f"column {column} folds into term {fold.terms[got]!r}; the tokenizer's token there "
                f"({tokenizer.convert_ids_to_tokens(column)!r}) folds into {expected.terms[want]!r} by {FOLD_RULE!r}",
                field="fold.columns",
            )


def fold_vocabulary(tokenizer, vocab_size: int) -> VocabularyFold:
    """The fold of a byte-level BPE tokenizer's ``vocab_size`` columns (module docstring's rule).

    Terms are numbered in the order of their first column; a term is named by its key.

    Raises:
        ValueError: the tokenizer is not a fast byte-level BPE tokenizer, or two names coincide.
    """
    if not is_byte_level_bpe(tokenizer):
        raise ValueError(
            "vocabulary folding is defined for byte-level BPE tokenizers (RoBERTa's, ModernBERT's: a BPE "
            f"model behind a ByteLevel pre-tokenizer); {type(tokenizer).__name__} is not one"
        )
    alone = {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {})}
    alone |= {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    index: dict[str, int] = {}
    folds: dict[str, bool] = {}
    columns: list[int] = []
    for column, token in enumerate(tokens):
        name, merge = column_name(token if isinstance(token, str) else None, column, column in alone)
        if name in index and not (merge and folds[name]):
            raise ValueError(
                f"vocabulary folding: column {column} ({token!r}) and column {columns.index(index[name])} "
                f"are both named {name!r} but are not case or word-start variants of one word"
            )
        if name not in index:
            index[name], folds[name] = len(index), merge
        columns.append(index[name])
    return VocabularyFold(columns=columns, terms=list(index))
