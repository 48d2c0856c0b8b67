"""The licence identifiers the Hugging Face Hub accepts in a model card's ``license`` field, and the
check of a card's ``license`` (used by ``spladekit card`` and ``push``)."""

from __future__ import annotations

import difflib
import re

#: Source: the table of https://huggingface.co/docs/hub/repositories-licenses ("License identifier (to use
#: in repo card)"): every id of the hub-docs copy read at commit 008d54d, plus newer ids not checked against
#: a copy here. An id the Hub adds later is refused here until it is added to this list. A card whose
#: ``license`` is not on the Hub's list is refused by the Hub.
HUB_LICENSES = frozenset(
    """
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0
cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0
cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0
cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0
gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc h-research intel-research lppl-1.3c ms-pl apple-ascl
apple-amlr mpl-2.0 odc-by odbl openmdw-1.0 openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl
lgpl-lr deepfloyd-if-license fair-noncommercial-research-license llama2 llama3 llama3.1 llama3.2 llama3.3
llama4 grok2-community gemma unknown other
""".split()
)

LICENSES_PAGE = "https://huggingface.co/docs/hub/repositories-licenses"


def suggest_license(value: str) -> str | None:
    """The Hub identifier closest to ``value`` (``"Apache 2.0"`` → ``apache-2.0``), or None."""
    words = re.sub(r"[\s_]+", "-", value.strip().lower())
    for candidate in (words, re.sub(r"-?licen[cs]e-?", "", words), words.replace("-v", "-")):
        if candidate in HUB_LICENSES:
            return candidate
    close = difflib.get_close_matches(words, sorted(HUB_LICENSES), n=1, cutoff=0.75)
    return close[0] if close else None


def license_problem(value, license_name=None) -> str | None:
    """Why ``value`` cannot be a card's ``license`` on the Hub (None when it can): not a Hub identifier
    (with the closest one when there is one), or ``other`` without ``license_name``."""
    if not isinstance(value, str) or value not in HUB_LICENSES:
        guess = suggest_license(value) if isinstance(value, str) else None
        hint = f"; did you mean {guess!r}?" if guess else ""
        return (
            f"license {value!r} is not a Hugging Face Hub licence identifier{hint} (the Hub refuses it; the "
            f"identifiers, all lowercase: {LICENSES_PAGE})"
        )
    if value == "other" and not license_name:
        return (
            "license 'other' needs license_name (and license_link) in the card's front matter, which the Hub "
            f"requires ({LICENSES_PAGE})"
        )
    return None


def check_license(value: str) -> str:
    """``value`` when the card writer can write it as the ``license`` (a Hub identifier, not ``other``).

    Raises:
        ValueError: not a Hub identifier (suggesting the close one), or ``other`` (the card writer takes
            no license_name/license_link: write the card, then add them to its front matter by hand).
    """
    if value == "other":
        raise ValueError(
            "license 'other' needs license_name (and license_link), which `spladekit card` does not "
            "take: write the card without --license, then add license: other, license_name and "
            f"license_link to its front matter by hand ({LICENSES_PAGE})"
        )
    problem = license_problem(value)
    if problem:
        raise ValueError(problem)
    return value
