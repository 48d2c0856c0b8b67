"""``--set key.sub=value`` overrides of nested config dicts (shared by train and reproduce configs).

Values are parsed as YAML (``steps=7`` → int, ``seeds=[3]`` → list); an empty value is ``""``.
"""

from __future__ import annotations

from typing import Any

import yaml


def _parse_value(text: str, item: str) -> Any:
    """``text`` read by PyYAML's safe loader (plain data: a ``!!python/...`` tag is refused, never run)."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise ValueError(f"override {item!r}: not a YAML value ({getattr(exc, 'problem', None) or exc})") from None


def _index(node: list, part: str, item: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ValueError(f"override {item!r}: {part!r} is not an index of a {len(node)}-item list")
    return int(part)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a nested dict, in place.

    A numeric part indexes a list (``backbones.0.path=...``).

    Raises:
        ValueError: an override without ``=``, a path through something that is not a mapping/list, or a
            value that is not plain YAML (a ``!!python/...`` tag).
    """
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        *parents, last = key.strip().split(".")
        node: Any = data
        for part in parents:
            node = node[_index(node, part, item)] if isinstance(node, list) else node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise ValueError(f"override {item!r}: {part!r} is not a section")
        if isinstance(node, list):
            node[_index(node, last, item)] = _parse_value(value, item)
        else:
            node[last] = _parse_value(value, item)
    return data
