"""Gateway configuration: a YAML file, overridden by `SPARK_GATEWAY_*` environment variables.

Nested fields use `__` in the environment, e.g. `SPARK_GATEWAY_TIMEOUTS__CONNECT_S=2`. A validation error
names the file, the line and the field (`deploy/gateway.yaml:12: backends.1.url: ...`): the YAML node
marks map each pydantic error location back to the line it came from (gateway/yaml_lines.py).

Relative paths in the file (`policy`, `state_dir`, any path field) are relative to the file's folder, so
a config means the same thing from any working directory; paths from the environment or from a caller's
overrides are the process's own, relative to its working directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.records.endpoints import Endpoint
from gateway.redact import without_credentials
from gateway.yaml_lines import Loc, dotted, locate

log = logging.getLogger(__name__)

APP_DIR = "spark-gateway"
# Enough of the config path's hash that two configs of the same name never share a state folder.
_PATH_HASH_CHARS = 12

Flavor = Literal["vllm", "sglang", "llamacpp", "openai"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendConfig(_Strict):
    """One engine instance the gateway may send requests to."""

    name: str = Field(min_length=1)
    # May carry basic-auth credentials (http://user:password@host:port), sent to the engine only.
    url: str = Field(description="base URL without /v1, e.g. http://127.0.0.1:8101")
    flavor: Flavor = "vllm"
    # Sent as "Authorization: Bearer ..." to this backend only; never shown (repr included).
    api_key: str | None = Field(default=None, repr=False)
    max_concurrency: int | None = Field(default=None, ge=1)
    # Declared capabilities win over what the prober discovers (e.g. a vLLM vision build: /v1/models
    # does not say whether it can see).
    context_length: int | None = Field(default=None, ge=1)
    modalities: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()
    # Backends naming the same device share one accelerator: their loads add up (adaptive routing
    # predicts at the device's load, since a request on one slows the other down).
    device: str | None = None
    # Seconds this backend takes from start to ready, until the gateway has seen it warm up (then it
    # learns them); default: its flavor's (backends/flavors.py). Feeds the warm-up ETA and Retry-After.
    warmup_s: float | None = Field(default=None, gt=0)
    # The client APIs it serves natively (chat, messages, responses, embeddings, ...); default: its
    # flavor's (backends/flavors.py). Requests for an API no backend of the pool serves get a 400.
    endpoints: frozenset[Endpoint] | None = None
    # A backend serving chat but not Messages: the gateway translates /v1/messages to chat and back.
    # None: on for such backends; false: Messages never go there.
    translate_messages: bool | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    def __repr_args__(self) -> Any:
        # A config printed in a log or a traceback shows the URL without its credentials.
        for name, value in super().__repr_args__():
            yield name, without_credentials(value) if name == "url" and isinstance(value, str) else value

    @field_validator("api_key")
    @classmethod
    def _one_credential(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A request carries one Authorization header: the key's Bearer or the URL's basic auth, never
        both (the HTTP client refuses the pair, so the engine would never be reached)."""
        url = info.data.get("url")
        if value and isinstance(url, str) and "@" in urlsplit(url).netloc:
            raise ValueError(
                "cannot be combined with credentials in the backend's url (user:password@): the engine "
                "gets one Authorization header, so keep either the api_key or the url's credentials"
            )
        return value


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
    """What one client request may cost before it is refused at the door (docs/reliability.md, Limits).
    The defaults protect a 2-core box and are far above what a real OpenAI request needs."""

    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_attempts: int = Field(default=3, ge=1, description="backends tried per request before giving up")
    connections: int = Field(default=1024, ge=1, description="upstream connection pool size")
    # The request head (request line and headers): 431 past either limit, before auth and the body.
    max_head_bytes: int = Field(default=64 * 1024, ge=1024, description="request line + all headers")
    max_header_line_bytes: int = Field(default=16 * 1024, ge=256, description="one header or the URL")
    # A head or body still arriving this long after it began gets 408 and the connection is closed.
    read_timeout_s: float = Field(default=30.0, gt=0)
    max_messages: int = Field(default=4096, ge=1)
    max_tools: int = Field(default=1024, ge=1)
    max_parts: int = Field(default=1024, ge=1, description="content parts in one message")
    # orjson writes at most 254 levels, and the gateway re-encodes bodies it rewrites.
    max_depth: int = Field(default=64, ge=8, le=200, description="JSON nesting of a body")
    # Bodies at least this big are parsed and checked off the event loop, so streams keep flowing.
    parse_offload_bytes: int = Field(default=256 * 1024, ge=0)
    # Bytes of body being parsed off the loop at once (a parsed tree is ~15x its JSON): more wait.
    parse_budget_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)


class BreakerSettings(_Strict):
    """Circuit breaker per backend (docs/reliability.md): only transport errors, timeouts and 5xx count."""

    failure_threshold: int = Field(default=5, ge=1, description="consecutive failures that open it")
    window_s: float = Field(default=30.0, gt=0)
    min_window_requests: int = Field(default=20, ge=1)
    failure_rate: float = Field(default=0.5, gt=0, le=1, description="failure share that opens it")
    cooldown_s: float = Field(default=5.0, gt=0)
    max_cooldown_s: float = Field(default=120.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)


class StallSettings(_Strict):
    """Hang detection from what the gateway measures (docs/reliability.md, Stalled backends): a backend
    whose in-flight streams produce no byte for far longer than it usually takes is stalled; new requests
    avoid it and the requests waiting there for their first content fail over."""

    enabled: bool = True
    # The floor of the silence allowed, whatever the backend measured so far (a few seconds).
    min_silence_s: float = Field(default=3.0, gt=0)
    # The silence allowed is this multiple of the backend's recent p95 first-token and inter-token times.
    multiple: float = Field(default=4.0, ge=1)
    # The prompts waiting for their first content, N tokens in all (estimated at 4 bytes of body per
    # token), add N / this many seconds: prefill is silence too. Below a GB10's rate for a 27B model
    # (~6,000 tok/s), so a slower device or a bigger model is not taken for a hung one.
    prefill_tokens_per_s: float = Field(default=2000.0, gt=0)
    check_interval_s: float = Field(default=0.25, gt=0, description="how often in-flight work is checked")


class QueueSettings(_Strict):
    """The bounded wait queue per pool: requests wait there for a slot or for a warming backend."""

    max_queue: int = Field(default=64, ge=0, description="waiters per pool; one more gets 429")
    timeout_s: float = Field(default=30.0, ge=0, description="a waiter's deadline; then 503")
    # Every backend that could serve the request is warming up: how long it waits for the first to be
    # ready before 503 backends_warming with the expected time left. None: the same as timeout_s.
    warming_wait_s: float | None = Field(default=None, ge=0)
    retry_after_s: int = Field(default=1, ge=0)


class ShutdownSettings(_Strict):
    drain_timeout_s: float = Field(default=30.0, ge=0, description="SIGTERM: longest wait for streams")


class MeasurementConfig(_Strict):
    """Live measurement (docs/measurement.md). How adaptive routing uses it (min_samples, explore_epsilon,
    tolerance, contended_share) is the policy's: its `adaptive` block, reloaded with it."""

    window_s: float = Field(default=600.0, gt=0, description="samples older than this expire")
    scrape_interval_s: float = Field(default=1.0, gt=0, description="engine /metrics poll interval")
    snapshot_interval_s: float = Field(default=60.0, gt=0, description="live-stats.json save interval")

    @model_validator(mode="before")
    @classmethod
    def _routing_knobs_are_the_policys(cls, data: Any) -> Any:
        """A config written for an earlier version names them here: say where they went."""
        if isinstance(data, dict):
            for key in ("min_samples", "explore_epsilon"):
                if key in data:
                    message = (
                        f"moved to the policy file: set `adaptive: {{{key}: {data[key]}}}` there "
                        "(docs/policy.md; reloaded with the policy)"
                    )
                    raise ConfigConflict(("measurement", key), message)
        return data


class EngineConfig(_Strict):
    """A managed engine (gateway/engines/, docs/engines.md): the container the gateway creates, starts when
    a request needs it and stops after its idle TTL, within its device's memory budget."""

    name: str = Field(min_length=1, description="also the backend's name")
    model: str = Field(min_length=1, description="the model name clients send (its pool)")
    served_name: str | None = Field(default=None, description="the name the engine serves, if different")
    image: str = Field(min_length=1)
    command: tuple[str, ...] = ()
    environment: dict[str, str] = Field(default_factory=dict)
    # host path -> container path, with ":ro" appended for a read-only mount
    volumes: dict[str, str] = Field(default_factory=dict)
    # Docker device requests as the Engine API takes them, e.g. {driver: nvidia, count: -1,
    # capabilities: [[gpu]]}
    device_requests: tuple[dict[str, Any], ...] = ()
    working_dir: str | None = None
    port: int = Field(ge=1, le=65535, description="where it listens on 127.0.0.1 (host network)")
    flavor: Flavor = "vllm"
    max_concurrency: int | None = Field(default=None, ge=1)
    memory_gib: float = Field(gt=0, description="its resident footprint on its device")
    device: str = Field(default="spark", min_length=1)
    warmup_s: float | None = Field(default=None, gt=0, description="warm-up budget: start to ready")
    pinned: bool = False  # never evicted, never stopped for idleness
    idle_ttl_s: float | None = Field(default=600.0, gt=0, description="None: never stopped when idle")


class DeviceConfig(_Strict):
    memory_gib: float = Field(gt=0, description="what resident engines may use together")


class EngineControl(_Strict):
    """How the gateway drives engine containers (the `engine_control:` section)."""

    # The Docker Engine API (docker or podman's); None: DOCKER_HOST, else the default socket.
    docker_url: str | None = None
    min_residency_s: float = Field(default=60.0, ge=0, description="a started engine stays this long")
    drain_timeout_s: float = Field(default=30.0, ge=0, description="longest wait for in-flight to end")
    stop_timeout_s: float = Field(default=10.0, ge=0, description="SIGTERM to SIGKILL")
    resync_s: float = Field(default=30.0, gt=0, description="full container listing, besides events")
    # A start that must evict gathers the requests for its model this long at most, until they outweigh
    # what the eviction costs the victims' clients (engines/budget.py); 0: it evicts at once.
    batch_wait_s: float = Field(default=0.0, ge=0, description="longest wait to batch a swap's requests")


AuthNeed = Literal["open", "client", "admin"]  # who may call a path: anyone, a client key, the admin key
_KEY_HASH = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


class AuthConfig(_Strict):
    """The `auth:` section: API keys as SHA-256 hashes (api/auth.py enforces them)."""

    client_key_hashes: tuple[str, ...] = Field(default=(), max_length=10_000)
    admin_key_hash: str | None = None
    metrics: AuthNeed = "open"

    @field_validator("client_key_hashes")
    @classmethod
    def _client_digests(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_key_digest(v) for v in values)

    @field_validator("admin_key_hash")
    @classmethod
    def _admin_digest(cls, value: str | None) -> str | None:
        return None if value is None else _key_digest(value)


def _key_digest(value: str) -> str:
    match = _KEY_HASH.match(value.strip().lower())
    if match is None:
        raise ValueError("must be a SHA-256 hex digest, optionally prefixed 'sha256:' (see hash-key)")
    return match.group(1)


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
    state_dir: Path | None = Field(
        default=None,
        description="live-measurement snapshots; None: none kept. A config file that does not name one "
        "gets a folder of its own in the user cache (default_state_dir)",
    )
    measurement: MeasurementConfig = MeasurementConfig()
    breaker: BreakerSettings = BreakerSettings()
    stall: StallSettings = StallSettings()
    queue: QueueSettings = QueueSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    auth: AuthConfig = AuthConfig()
    engines: tuple[EngineConfig, ...] = ()
    devices: dict[str, DeviceConfig] = Field(default_factory=dict)
    engine_control: EngineControl = EngineControl()

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
        _unique_backend_names(self.backends)
        names = {b.name for b in self.backends}
        for i, pool in enumerate(self.pools):
            named: list[tuple[Loc, str]] = [
                (("pools", i, "backends", j), b) for j, b in enumerate(pool.backends)
            ]
            named += [(("pools", i, "served_names", b), b) for b in pool.served_names]
            for loc, backend in named:
                if backend not in names:
                    raise ConfigConflict(loc, f"pool {pool.model!r} names unknown backend {backend!r}")
        _unique_model_names(self.pools)
        _engines_fit(self)
        return self

    def backend(self, name: str) -> BackendConfig:
        return next(b for b in self.backends if b.name == name)


class ConfigConflict(ValueError):
    """A problem between fields, with the location of the field at fault: a model validator's error has
    no location of its own, and `file:line:` messages need one."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _unique_backend_names(backends: Sequence[BackendConfig]) -> None:
    first: dict[str, int] = {}
    for i, backend in enumerate(backends):
        if backend.name in first:
            message = f"backend name {backend.name!r} is already used by backends.{first[backend.name]}"
            raise ConfigConflict(("backends", i, "name"), message)
        first[backend.name] = i


def _unique_model_names(pools: Sequence[PoolConfig]) -> None:
    """A model name (a pool's model or alias) picks one pool: the same name twice would make the pool a
    request reaches depend on the order of the file."""
    owner: dict[str, str] = {}  # model name -> where it was first given
    for i, pool in enumerate(pools):
        names: list[tuple[Loc, str]] = [(("pools", i, "model"), pool.model)]
        names += [(("pools", i, "aliases", k), alias) for k, alias in enumerate(pool.aliases)]
        for loc, name in names:
            if name in owner:
                raise ConfigConflict(loc, f"model name {name!r} is already {owner[name]}")
            kind = "the model" if loc[-1] == "model" else "an alias"
            owner[name] = f"{kind} of pool {pool.model!r} ({dotted(loc)})"


def _engines_fit(settings: Settings) -> None:
    """Engine names are backend names too, and an engine must fit its device's budget on its own."""
    taken = {b.name for b in settings.backends}
    for i, engine in enumerate(settings.engines):
        if engine.name in taken:
            raise ConfigConflict(("engines", i, "name"), f"name {engine.name!r} is already a backend's")
        taken.add(engine.name)
        device = settings.devices.get(engine.device)
        if device is not None and engine.memory_gib > device.memory_gib:
            budget = f"device {engine.device!r}'s {device.memory_gib:g} GiB"
            message = f"{engine.memory_gib:g} GiB is over {budget}"
            raise ConfigConflict(("engines", i, "memory_gib"), message)


class SettingsError(ValueError):
    """Invalid configuration; `str()` gives one `file:line: field: message` line per problem."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    settings: Settings
    warnings: tuple[str, ...] = ()  # `file:line: warning: ...` lines: worth a look, not fatal


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Settings from `path` (YAML) with the environment on top; `overrides` are extra file-level keys.
    Warnings about the config (load_config) are logged."""
    loaded = load_config(path, **overrides)
    for line in loaded.warnings:
        log.warning("%s", line)
    return loaded.settings


def load_config(path: Path | str | None = None, **overrides: Any) -> LoadedConfig:
    """Settings and warnings; raises SettingsError with one `file:line: field: message` per problem."""
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
    if path is not None:
        _resolve_paths(Settings, data, Path(path).parent)
        # An explicit `state_dir: null` keeps no state; a config that says nothing gets its own folder.
        data.setdefault("state_dir", str(default_state_dir(Path(path))))
    data.update(overrides)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise SettingsError(_located(exc, root, path)) from exc
    return LoadedConfig(settings, tuple(_config_warnings(settings, root, path)))


def default_state_dir(config: Path) -> Path:
    """A config file's own state folder: <user cache>/spark-gateway/<file stem>-<hash of its path>.

    One folder per config file, so two gateways (or a gateway and a test or a bench) never read each
    other's measurements; in the user cache rather than beside the file, because config folders are
    often read-only (/etc, a bind mount) or a source checkout. The path is made absolute but symlinks are
    kept: a config mounted through a symlink swapped on update keeps its folder.
    """
    absolute = os.path.normpath(Path(config).absolute())
    digest = hashlib.sha256(absolute.encode()).hexdigest()[:_PATH_HASH_CHARS]
    cache = _user_cache()
    if cache is None:  # no usable home: beside the file is the only place left
        return Path(config).parent / f"{Path(config).stem}.state"
    return cache / APP_DIR / f"{Path(config).stem}-{digest}"


def _user_cache() -> Path | None:
    """$XDG_CACHE_HOME, else ~/.cache; None when there is no home directory."""
    cache = os.environ.get("XDG_CACHE_HOME")
    if cache:
        return Path(cache)
    try:
        return Path.home() / ".cache"
    except RuntimeError:
        return None


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


def _config_warnings(settings: Settings, root: yaml.Node | None, path: Path | str | None) -> list[str]:
    pooled = {name for pool in settings.pools for name in pool.backends}
    lines = []
    for i, backend in enumerate(settings.backends):
        if backend.name not in pooled:
            line, _ = locate(root, ("backends", i))
            message = f"backend {backend.name!r} is in no pool, so no request can reach it"
            lines.append(f"{_where(path, line)}: warning: backends.{i}: {message}")
    return lines


def _located(exc: ValidationError, root: yaml.Node | None, path: Path | str | None) -> list[str]:
    lines = []
    for error in exc.errors():
        conflict = error.get("ctx", {}).get("error")
        if isinstance(conflict, ConfigConflict):
            loc, message = conflict.loc, str(conflict)
        else:
            loc, message = tuple(error["loc"]), error["msg"]
        line, _ = locate(root, loc)
        lines.append(f"{_where(path, line)}: {dotted(loc) or '(root)'}: {message}")
    return lines


def _where(path: Path | str | None, line: int | None) -> str:
    if line is None:
        return "(environment)" if path is None else str(path)
    return f"{path}:{line}"
