"""`Settings`, the whole configuration: its sections, the environment over the file, and the checks that
span sections (names unique, pools naming known backends, engines fitting their devices)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.settings.auth import AuthConfig
from gateway.settings.backends import BackendConfig, PoolConfig
from gateway.settings.engines import DeviceConfig, EngineConfig, EngineControl
from gateway.settings.health import BreakerSettings, ProbeConfig, StallSettings
from gateway.settings.limits import Limits, QueueSettings, ShutdownSettings, Timeouts
from gateway.settings.measurement import MeasurementConfig
from gateway.yaml_lines import Loc, LocatedError, dotted


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
                    raise LocatedError(loc, f"pool {pool.model!r} names unknown backend {backend!r}")
        _unique_model_names(self.pools)
        _engines_fit(self)
        return self

    def backend(self, name: str) -> BackendConfig:
        return next(b for b in self.backends if b.name == name)


def _unique_backend_names(backends: Sequence[BackendConfig]) -> None:
    first: dict[str, int] = {}
    for i, backend in enumerate(backends):
        if backend.name in first:
            message = f"backend name {backend.name!r} is already used by backends.{first[backend.name]}"
            raise LocatedError(("backends", i, "name"), message)
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
                raise LocatedError(loc, f"model name {name!r} is already {owner[name]}")
            kind = "the model" if loc[-1] == "model" else "an alias"
            owner[name] = f"{kind} of pool {pool.model!r} ({dotted(loc)})"


def _engines_fit(settings: Settings) -> None:
    """Engine names are backend names too, and an engine must fit its device's budget on its own."""
    taken = {b.name for b in settings.backends}
    for i, engine in enumerate(settings.engines):
        if engine.name in taken:
            raise LocatedError(("engines", i, "name"), f"name {engine.name!r} is already a backend's")
        taken.add(engine.name)
        device = settings.devices.get(engine.device)
        if device is not None and engine.memory_gib > device.memory_gib:
            budget = f"device {engine.device!r}'s {device.memory_gib:g} GiB"
            message = f"{engine.memory_gib:g} GiB is over {budget}"
            raise LocatedError(("engines", i, "memory_gib"), message)
