"""A griffe extension of the documentation site (mkdocs.yml, mkdocstrings' ``extensions``): the reST parts
of spladekit's docstrings read as Markdown.

The docstrings are Google style with two reST habits, which Markdown would print as they are:

- a role, ``:func:`~spladekit.index.fusion.fuse```: becomes a link to the object's entry when the site
  documents it (mkdocs-autorefs' optional reference), its name in code otherwise; a name without a
  package (``:class:`SpladeModel```) is looked up from the docstring's object outwards, as Python would;
- a literal block, a paragraph ending in ``::`` and an indented block: the paragraph ends in ``:`` and
  the block becomes a fenced block at the paragraph's indentation, Python after ``Example...::``, plain
  text (a folder layout, a formula, a command) otherwise.

Only the text griffe parses changes; the source files are left as they are.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(~?)([\w.]+)(?:\(\))?`")
LITERAL = re.compile(
    r"^(?P<indent>[ \t]*)(?P<text>\S.*?)::[ \t]*\n(?P<blank>[ \t]*\n)+(?P<block>(?:(?P=indent)[ \t]+\S.*\n|[ \t]*\n)+)",
    re.M,
)


def _target(obj: griffe.Object, name: str) -> str:
    """The path of ``name`` seen from ``obj`` (its members, then its parents'), or ``name`` itself."""
    if name.startswith("spladekit."):
        return name
    first, _, rest = name.partition(".")
    scope = obj
    while scope is not None:
        member = scope.members.get(first)
        if member is not None:
            path = member.target_path if member.is_alias else member.path
            return f"{path}.{rest}" if rest else path
        scope = scope.parent
    return name


def _role(obj: griffe.Object, match: re.Match) -> str:
    short, name = match.group(1), match.group(2)
    title = name.rsplit(".", 1)[-1] if short else name
    return f'<autoref identifier="{_target(obj, name)}" optional><code>{title}</code></autoref>'


def _fence(match: re.Match) -> str:
    indent = match.group("indent")
    block = match.group("block")
    trailing = len(block) - len(block.rstrip("\n")) - 1
    lines = block.rstrip("\n").split("\n")
    width = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    body = "\n".join(indent + line[width:] if line.strip() else "" for line in lines)
    language = "python" if match.group("text").startswith("Example") else "text"
    return f"{indent}{match.group('text')}:\n\n{indent}```{language}\n{body}\n{indent}```\n" + "\n" * trailing


def markdown(obj: griffe.Object, text: str) -> str:
    """``text``, a docstring of ``obj``, with its roles and literal blocks in Markdown."""
    text = LITERAL.sub(_fence, text + "\n")[:-1]
    return ROLE.sub(lambda match: _role(obj, match), text)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of the package once it is loaded (:func:`markdown`)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj, obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
