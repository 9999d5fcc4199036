"""Gateway configuration: a YAML file, overridden by `SPARK_GATEWAY_*` environment variables.

Nested fields use `__` in the environment, e.g. `SPARK_GATEWAY_TIMEOUTS__CONNECT_S=2`. A validation error
names the file, the line and the field (`deploy/gateway.yaml:12: backends.1.url: ...`): the YAML node
marks map each pydantic error location back to the line it came from (gateway/yaml_lines.py).

Relative paths in the file (`policy`, `state_dir`, any path field) are relative to the file's folder, so
a config means the same thing from any working directory; paths from the environment or from a caller's
overrides are the process's own, relative to its working directory.

One module per concern: `backends` (backends and pools), `limits` (timeouts, request limits, the wait
queue, shutdown), `health` (probes, breaker, stall detection), `measurement`, `engines` (engines on
demand, devices, engine control), `auth`, `root` (`Settings` and the checks across sections),
`loading` (file + environment, `file:line:` errors) and `state_dir`. Everything is importable from
`gateway.settings` itself.
"""

from gateway.settings.auth import AuthConfig, AuthNeed
from gateway.settings.backends import BackendConfig, Flavor, PoolConfig
from gateway.settings.engines import DeviceConfig, EngineConfig, EngineControl
from gateway.settings.health import BreakerSettings, ProbeConfig, StallSettings
from gateway.settings.limits import Limits, QueueSettings, ShutdownSettings, Timeouts
from gateway.settings.loading import LoadedConfig, SettingsError, load_config, load_settings
from gateway.settings.measurement import MeasurementConfig
from gateway.settings.root import Settings
from gateway.settings.state_dir import APP_DIR, default_state_dir

__all__ = [
    "APP_DIR",
    "AuthConfig",
    "AuthNeed",
    "BackendConfig",
    "BreakerSettings",
    "DeviceConfig",
    "EngineConfig",
    "EngineControl",
    "Flavor",
    "LoadedConfig",
    "Limits",
    "MeasurementConfig",
    "PoolConfig",
    "ProbeConfig",
    "QueueSettings",
    "Settings",
    "SettingsError",
    "ShutdownSettings",
    "StallSettings",
    "Timeouts",
    "default_state_dir",
    "load_config",
    "load_settings",
]
