"""Gateway configuration: a YAML file, overridden by `SPARK_GATEWAY_*` environment variables.

Nested fields use `__` in the environment, e.g. `SPARK_GATEWAY_TIMEOUTS__CONNECT_S=2`. A validation error
names the file, the line and the field (`deploy/gateway.yaml:12: backends.1.url: ...`): the YAML node
marks map each pydantic error location back to the line it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.api.auth import AuthConfig

Flavor = Literal["vllm", "sglang", "llamacpp", "openai"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendConfig(_Strict):
    """One engine instance the gateway may send requests to."""

    name: str = Field(min_length=1)
    url: str = Field(description="base URL without /v1, e.g. http://127.0.0.1:8101")
    flavor: Flavor = "vllm"
    api_key: str | None = None
    max_concurrency: int | None = Field(default=None, ge=1)
    # Declared capabilities win over what the prober discovers (e.g. a vLLM vision build: /v1/models
    # does not say whether it can see).
    context_length: int | None = Field(default=None, ge=1)
    modalities: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()
    # Backends naming the same device share one accelerator: their loads add up (adaptive routing
    # predicts at the device's load, since a request on one slows the other down).
    device: str | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")


class PoolConfig(_Strict):
    """A model name clients send (plus aliases), served by a list of backends."""

    model: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    backends: tuple[str, ...] = Field(min_length=1)
    # backend name -> the model name that backend expects, when it differs from `model`.
    served_names: dict[str, str] = Field(default_factory=dict)

    def served_name(self, backend: str) -> str:
        return self.served_names.get(backend, self.model)


class Timeouts(_Strict):
    """Upstream timeouts in seconds. First byte is long on purpose: a 128k-token prefill takes minutes."""

    connect_s: float = Field(default=5.0, gt=0)
    # From sending until the first content token: covers the engine's own queue and the prefill.
    first_byte_s: float = Field(default=600.0, gt=0)
    idle_s: float = Field(default=120.0, gt=0, description="longest gap between chunks after the first")


class ProbeConfig(_Strict):
    interval_s: float = Field(default=5.0, gt=0)
    starting_interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=5.0, gt=0)
    # Engines compile CUDA graphs for 5-8 minutes and refuse connections meanwhile: that is "starting".
    startup_grace_s: float = Field(default=600.0, ge=0)
    # Passive health: a probe timeout is no proof of death for a backend that answered a request this
    # recently, and a serving backend is called dead only after this many probe timeouts in a row.
    passive_window_s: float = Field(default=15.0, ge=0)
    timeouts_to_dead: int = Field(default=3, ge=1)


class Limits(_Strict):
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_attempts: int = Field(default=3, ge=1, description="backends tried per request before giving up")
    connections: int = Field(default=1024, ge=1, description="upstream connection pool size")


class BreakerSettings(_Strict):
    """Circuit breaker per backend (docs/reliability.md): only transport errors, timeouts and 5xx count."""

    failure_threshold: int = Field(default=5, ge=1, description="consecutive failures that open it")
    window_s: float = Field(default=30.0, gt=0)
    min_window_requests: int = Field(default=20, ge=1)
    failure_rate: float = Field(default=0.5, gt=0, le=1, description="failure share that opens it")
    cooldown_s: float = Field(default=5.0, gt=0)
    max_cooldown_s: float = Field(default=120.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)


class QueueSettings(_Strict):
    """The bounded wait queue per pool: requests wait there for a slot or for a warming backend."""

    max_queue: int = Field(default=64, ge=0, description="waiters per pool; one more gets 429")
    timeout_s: float = Field(default=30.0, ge=0, description="a waiter's deadline; then 503")
    retry_after_s: int = Field(default=1, ge=0)


class ShutdownSettings(_Strict):
    drain_timeout_s: float = Field(default=30.0, ge=0, description="SIGTERM: longest wait for streams")


class MeasurementConfig(_Strict):
    """Live measurement and adaptive routing (docs/measurement.md)."""

    window_s: float = Field(default=600.0, gt=0, description="samples older than this expire")
    scrape_interval_s: float = Field(default=1.0, gt=0, description="engine /metrics poll interval")
    snapshot_interval_s: float = Field(default=60.0, gt=0, description="live-stats.json save interval")
    min_samples: int = Field(default=5, ge=1, description="samples a cell needs before it predicts")
    # Exploration stops once a cell has min_samples, so this only sets how soon the cost is paid.
    explore_epsilon: float = Field(default=0.25, ge=0, le=0.5)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPARK_GATEWAY_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    backends: tuple[BackendConfig, ...] = ()
    pools: tuple[PoolConfig, ...] = ()
    policy: Path | None = None
    timeouts: Timeouts = Timeouts()
    probe: ProbeConfig = ProbeConfig()
    limits: Limits = Limits()
    state_dir: Path | None = Field(default=None, description="snapshots; default ~/.cache/spark-gateway")
    measurement: MeasurementConfig = MeasurementConfig()
    breaker: BreakerSettings = BreakerSettings()
    queue: QueueSettings = QueueSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    auth: AuthConfig = AuthConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's content arrives as init kwargs; the environment must win over it.
        return env_settings, init_settings

    @model_validator(mode="after")
    def _pools_name_known_backends(self) -> Settings:
        names = [b.name for b in self.backends]
        if len(set(names)) != len(names):
            raise ValueError(f"backend names must be unique: {names}")
        seen: set[str] = set()
        for pool in self.pools:
            for backend in (*pool.backends, *pool.served_names):
                if backend not in names:
                    raise ValueError(f"pool {pool.model!r} names unknown backend {backend!r}")
            for name in (pool.model, *pool.aliases):
                if name in seen:
                    raise ValueError(f"model name {name!r} is used by two pools")
                seen.add(name)
        return self

    def backend(self, name: str) -> BackendConfig:
        return next(b for b in self.backends if b.name == name)


class SettingsError(ValueError):
    """Invalid configuration; `str()` gives one `file:line: field: message` line per problem."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Settings from `path` (YAML) with the environment on top; `overrides` are extra file-level keys."""
    text = Path(path).read_text() if path is not None else ""
    try:
        root = yaml.compose(text) if text.strip() else None
        data = yaml.safe_load(text) if root is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise SettingsError([f"{path}:{line}: {exc}"]) from exc
    if not isinstance(data, dict):
        raise SettingsError([f"{path}:1: the file must hold a mapping"])
    data.update(overrides)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise SettingsError(_located(exc, root, path)) from exc


def _located(exc: ValidationError, root: yaml.Node | None, path: Path | str | None) -> list[str]:
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        field = ".".join(str(part) for part in loc) or "(root)"
        line = _line_of(root, loc)
        where = f"{path}:{line}" if line else ("(environment)" if path is None else f"{path}")
        lines.append(f"{where}: {field}: {error['msg']}")
    return lines


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """1-based line of the deepest YAML node on the path `loc`; None if the path is not in the file."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child = _child(node, part)
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def _child(node: yaml.Node | None, part: int | str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                # Point at the key's line: for a nested block the value starts on the next line.
                return value if isinstance(value, yaml.ScalarNode) else _with_mark(value, key)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    return None


def _with_mark(value: yaml.Node, key: yaml.Node) -> yaml.Node:
    clone = type(value)(value.tag, value.value, key.start_mark, value.end_mark)
    return clone
