"""The record line at the end of a model card spladekit writes: what the card says about its model, and
whether the card was edited since spladekit wrote it.

A card spladekit writes ends with one HTML comment line (invisible on the hub)::

    <!-- spladekit-card {"sha256": "<SHA-256 of every character before this line>", "model": {FACT: VALUE, ...}} -->

``model`` holds the facts of :func:`spladekit.publish.card.model_facts` (the model's source, lengths,
training step, selected dev score, ONNX record...). When a command writes a card where one exists,
:func:`read_card_record` tells the cases apart: a card without a readable record line (written by hand),
one spladekit wrote and nobody changed (its digest matches), and one edited by hand (its digest
differs), whose ``model`` facts are then compared with the new model's (:func:`fact_differences`).

A card comes from outside (a hub download): the line is read with :func:`json.loads` only, its size
bounded, its structure checked; anything else is no record.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

PREFIX = "<!-- spladekit-card "
SUFFIX = " -->"
#: the longest record line read (a card's facts take a few hundred characters)
MAX_LINE = 64 * 1024
_HEX = re.compile(r"^[0-9a-f]{64}$")
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class CardRecord:
    """A card's record line, read back: ``facts`` (the ``model`` facts) and ``edited`` (the text
    before the line no longer has the recorded digest)."""

    facts: dict
    edited: bool


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sign_card(text: str, facts: dict) -> str:
    """``text`` (a card ending with a newline, added when missing) followed by its record line.

    ``<`` and ``>`` inside the JSON are written as ``\\u003c``/``\\u003e`` (json reads them back), so no
    value can close the HTML comment early.
    """
    text = text if text.endswith("\n") else text + "\n"
    payload = json.dumps({"sha256": _digest(text), "model": facts}, ensure_ascii=True, sort_keys=True)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e")
    return f"{text}{PREFIX}{payload}{SUFFIX}\n"


def read_card_record(text: str) -> CardRecord | None:
    """The record line of a card's ``text`` (its last line that starts with :data:`PREFIX`), or None
    when there is none or it cannot be read (malformed JSON, too long, too deep, values that are not
    scalars, no 64-digit hex digest).

    ``edited``: the text before that line no longer has the recorded digest, or text other than white
    space follows the line.
    """
    if text.startswith(PREFIX):
        start = 0
    else:
        start = text.rfind("\n" + PREFIX) + 1
        if start == 0:
            return None
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    if len(line) > MAX_LINE or not line.rstrip("\r").endswith(SUFFIX):
        return None
    try:
        payload = json.loads(line.rstrip("\r")[len(PREFIX) : -len(SUFFIX)])
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("sha256"), str) or not _HEX.match(payload["sha256"]):
        return None
    facts = payload.get("model")
    if not isinstance(facts, dict) or not all(isinstance(v, _SCALARS) for v in facts.values()):
        return None
    after = "" if end < 0 else text[end + 1 :]
    return CardRecord(facts, edited=_digest(text[:start]) != payload["sha256"] or bool(after.strip()))


def canonical_facts(facts: dict) -> dict:
    """``facts`` as they read back from a record line (a JSON round trip), for comparing with one read."""
    return json.loads(json.dumps(facts, sort_keys=True))


def fact_differences(card: dict, model: dict) -> list[str]:
    """Each fact on which a card's record (``card``) and a model's (``model``) differ, as
    ``"FACT: X in the card, Y in this model"`` (``none`` where one side lacks it), in the model's order
    and then the card's."""
    model = canonical_facts(model)
    names = list(model) + [name for name in card if name not in model]
    return [
        f"{name}: {card.get(name, 'none')!s} in the card, {model.get(name, 'none')!s} in this model"
        for name in names
        if card.get(name) != model.get(name)
    ]
