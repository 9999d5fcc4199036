"""Where a value sits in a YAML file: a location path (a pydantic error's `loc`, or one a cross-check
builds, such as `("profiles", 2, "prefer", 0)`) mapped back to its line, for `file:line:` messages.

The gateway config (gateway/settings.py) and the policy (gateway/policy/load.py) both report problems
this way, so they share this one walk over PyYAML's node tree (`yaml.compose`, which keeps marks).
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

Loc = tuple[int | str, ...]


def locate(root: yaml.Node | None, loc: Sequence[int | str]) -> tuple[int | None, Loc]:
    """(1-based line of the deepest node on the path `loc`, the parts of `loc` found in the document).

    Parts that are not in the document are skipped, so the path stays readable: pydantic's union-member
    tags such as `function-after[...]`, or a field the file leaves to its default. A mapping entry is
    reported at its key's line: a nested block's value only starts on the next line. The line is None
    only when there is no document at all.
    """
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    kept: list[int | str] = []
    for part in loc:
        child = _child(node, part)
        if child is None:
            continue
        key, node = child
        line = (key or node).start_mark.line + 1
        kept.append(part)
    return line, tuple(kept)


def _child(node: yaml.Node | None, part: int | str) -> tuple[yaml.Node | None, yaml.Node] | None:
    """(key node or None, value node) of `part` under `node`, or None when it is not there."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None


def dotted(loc: Sequence[int | str]) -> str:
    """`profiles.2.prefer.0`: how messages spell a location."""
    return ".".join(str(part) for part in loc)
