"""Settings from a YAML file with the environment on top, and every problem as a `file:line:` line."""

from __future__ import annotations

import logging
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gateway.settings.root import Settings
from gateway.settings.state_dir import default_state_dir
from gateway.yaml_lines import YamlFileError, at_line, locate, parse_yaml, validation_lines

log = logging.getLogger(__name__)


class SettingsError(YamlFileError):
    """Invalid configuration; `str()` gives one `file:line: field: message` line per problem."""


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    settings: Settings
    warnings: tuple[str, ...] = ()  # `file:line: warning: ...` lines: worth a look, not fatal


CONFIG_FIELDS = "deploy/gateway.example.yaml"  # every field, commented: where an unknown key's message points


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Settings from `path` (YAML) with the environment on top; `overrides` are extra file-level keys.
    Warnings about the config (load_config) are logged."""
    loaded = load_config(path, **overrides)
    for line in loaded.warnings:
        log.warning("%s", line)
    return loaded.settings


def load_config(path: Path | str | None = None, **overrides: Any) -> LoadedConfig:
    """Settings and warnings; raises SettingsError with one `file:line: field: message` per problem."""
    text = Path(path).read_text(encoding="utf-8") if path is not None else ""
    # Without a file every value comes from the environment or the caller: no line to name.
    source = str(path) if path is not None else "(environment)"
    root, data = parse_yaml(text, source, SettingsError)
    if path is not None:
        _resolve_paths(Settings, data, Path(path).parent)
        # An explicit `state_dir: null` keeps no state; a config that says nothing gets its own folder.
        data.setdefault("state_dir", str(default_state_dir(Path(path))))
    data.update(overrides)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise SettingsError(validation_lines(exc, root, source, CONFIG_FIELDS)) from exc
    return LoadedConfig(settings, tuple(_config_warnings(settings, root, source)))


def _resolve_paths(model: type[BaseModel], data: dict[str, Any], base: Path) -> None:
    """Make the file's relative path fields relative to `base` (its folder), in place, nested models too."""
    for name, field in model.model_fields.items():
        value = data.get(name)
        if isinstance(value, str) and _is_path(field.annotation):
            data[name] = str(base / Path(value).expanduser())  # an absolute path stays as it is
        elif isinstance(value, dict) and _is_model(field.annotation):
            _resolve_paths(field.annotation, value, base)


def _is_path(annotation: Any) -> bool:
    return annotation is Path or Path in typing.get_args(annotation)


def _is_model(annotation: Any) -> typing.TypeGuard[type[BaseModel]]:
    plain_class = isinstance(annotation, type) and typing.get_origin(annotation) is None
    return plain_class and issubclass(annotation, BaseModel)


def _config_warnings(settings: Settings, root: yaml.Node | None, source: str) -> list[str]:
    pooled = {name for pool in settings.pools for name in pool.backends}
    lines = []
    for i, backend in enumerate(settings.backends):
        if backend.name not in pooled:
            line, _ = locate(root, ("backends", i))
            message = f"backend {backend.name!r} is in no pool, so no request can reach it"
            lines.append(f"{at_line(source, line)}: warning: backends.{i}: {message}")
    return lines
