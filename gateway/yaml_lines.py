"""YAML files read into pydantic models, every problem reported at its line: a location path (a pydantic
error's `loc`, or one a cross-check builds, such as `("profiles", 2, "prefer", 0)`) mapped back to its
line, for `file:line: location: message` lines.

The gateway config (gateway/settings/loading.py), the policy (gateway/policy/load.py), the twin's fleet
files (gateway/sim/fleet.py) and the routing bench's trace files (gateway/bench/routing_tracefile.py) all
report problems this way, so they share this one walk over PyYAML's node tree (`yaml.compose`, which
keeps marks); all but the policy, which keeps issues of its own, also share the reading and the error
(`load_model`, or `parse_yaml` and `validation_lines` for a loader with more steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Loc = tuple[int | str, ...]
Model = TypeVar("Model", bound=BaseModel)


class YamlFileError(ValueError):
    """A YAML file that cannot be used; `str()` gives one `file:line: location: message` line per
    problem. Each kind of file has its subclass, so a caller can tell which file was at fault."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class LocatedError(ValueError):
    """A problem between fields, raised by a model validator with the location of the field at fault:
    such an error has no location of its own, and `file:line:` messages need one."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def load_model(path: str | Path, model: type[Model], error: type[YamlFileError] = YamlFileError) -> Model:
    """Read a YAML file (UTF-8) and validate it as `model`; `error` lists every problem at its line (an
    unreadable file raises OSError)."""
    text = Path(path).read_text(encoding="utf-8")
    root, data = parse_yaml(text, str(path), error)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(validation_lines(exc, root, str(path))) from exc


def parse_yaml(
    text: str, source: str, error: type[YamlFileError] = YamlFileError
) -> tuple[yaml.Node | None, dict[str, Any]]:
    """(the node tree, for `locate`; the data). A document with nothing in it is an empty mapping; a
    syntax error, or a document that is not a mapping, raises `error` naming `source` and the line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
        data = yaml.safe_load(text) if root is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = at_line(source, mark.line + 1 if mark is not None else None)
        raise error([f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}"]) from exc
    if not isinstance(data, dict):
        raise error([f"{at_line(source, 1)}: the file must hold a mapping"])
    return root, data


def unknown_field(listed_by: str | None = None) -> str:
    """The one wording for a key no field has, in every file the gateway reads (config, policy, fleet):
    pydantic's own ("Extra inputs are not permitted") does not say what to do."""
    if listed_by is None:
        return "unknown field (check the spelling)"
    return f"unknown field (check the spelling; {listed_by} lists the fields)"


def validation_lines(
    exc: ValidationError, root: yaml.Node | None, source: str, listed_by: str | None = None
) -> list[str]:
    """One `source:line: location: message` per validation error, in the file's line order (pydantic
    reports them in field order); a LocatedError raised by a validator is reported at its own location.
    `listed_by` names where the fields are listed, for an unknown key's message."""
    found: list[tuple[int, str]] = []
    for error in exc.errors():
        located = error.get("ctx", {}).get("error")
        if isinstance(located, LocatedError):
            loc, message = located.loc, str(located)
        elif error["type"] == "extra_forbidden":
            loc, message = tuple(error["loc"]), unknown_field(listed_by)
        else:
            loc, message = tuple(error["loc"]), error["msg"]
        line, _ = locate(root, loc)
        found.append((line or 0, f"{at_line(source, line)}: {dotted(loc) or '(root)'}: {message}"))
    return [text for _, text in sorted(found, key=lambda item: item[0])]  # stable: same line, same order


def at_line(source: str, line: int | None) -> str:
    """`source:line`, or `source` alone when the problem has no line (nothing was read from a file)."""
    return source if line is None else f"{source}:{line}"


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
