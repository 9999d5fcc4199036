"""Fleet files: which simulated engines to run, on which devices, with which faults.

A fleet file is YAML validated by FleetSpec. Each engine embeds its performance parameters (`perf:`, a
PerfSpec) and names the device it shares (`device:`, a key of the top-level `devices:` map of DeviceSpec).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.sim.perf import DeviceSpec, PerfSpec
from gateway.yaml_lines import YamlFileError, load_model

Flavor = Literal["vllm", "sglang", "llamacpp"]


class FaultSpec(BaseModel):
    """Faults injected on the simulated clock (seconds since the fleet started)."""

    model_config = ConfigDict(extra="forbid")

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)  # requests answered with the flavor's 500
    # Streams that fail after their first chunk: an error event inside the already-started stream.
    stream_error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    crash_at_s: float | None = Field(default=None, ge=0.0)  # stop listening: connections refused
    hang_at_s: float | None = Field(default=None, ge=0.0)  # accept connections, never answer
    slowdown_at_s: float | None = Field(default=None, ge=0.0)
    slowdown_factor: float = Field(default=1.0, ge=1.0)  # step-time multiplier from slowdown_at_s on


class EngineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    flavor: Flavor = "vllm"
    port: int = Field(default=0, ge=0, le=65535)  # 0: any free port
    served_model_name: str = Field(min_length=1)
    # Checkpoint the engine loaded (vLLM's `root`, llama.cpp's model path); defaults to the served name.
    checkpoint: str | None = None
    context_length: int = Field(default=32_768, ge=16)
    vision: bool = False
    # Thinking model with a reasoning parser: the first tokens of a chat answer are reasoning.
    reasoning: bool = False
    # Serves /v1/embeddings (llama.cpp `--embeddings`, a vLLM pooling model, SGLang `--is-embedding`).
    embeddings: bool = False
    # Serves /v1/rerank (llama.cpp `--reranking`, a vLLM or SGLang cross-encoder).
    reranking: bool = False
    device: str = "spark"
    warmup_s: float = Field(default=0.0, ge=0.0)  # simulated load + compile + graph capture time
    faults: FaultSpec = Field(default_factory=FaultSpec)
    seed: int = 0
    # Performance parameters of the step model, tuned per engine against the seed measurements.
    perf: PerfSpec = Field(default_factory=PerfSpec)

    @model_validator(mode="after")
    def _context_fits_kv_pool(self) -> EngineSpec:
        # Engines refuse to start when one request of the full context cannot fit the KV cache.
        if self.context_length > self.perf.kv_capacity_tokens:
            raise ValueError(
                f"context_length {self.context_length} exceeds perf.kv_capacity_tokens "
                f"{self.perf.kv_capacity_tokens}"
            )
        return self

    @property
    def model_path(self) -> str:
        return self.checkpoint or self.served_model_name


class FleetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    policy: str | None = None  # policy file for a gateway in front of this fleet, relative to the repo
    devices: dict[str, DeviceSpec] = Field(default_factory=lambda: {"spark": DeviceSpec()})
    engines: list[EngineSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> FleetSpec:
        names = [e.name for e in self.engines]
        if len(set(names)) != len(names):
            raise ValueError(f"engine names must be unique: {names}")
        ports = [e.port for e in self.engines if e.port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"engine ports must be unique: {ports}")
        for engine in self.engines:
            if engine.device not in self.devices:
                raise ValueError(
                    f"engine {engine.name!r} names device {engine.device!r}; devices: {sorted(self.devices)}"
                )
        return self

    def engine(self, name: str) -> EngineSpec:
        for engine in self.engines:
            if engine.name == name:
                return engine
        raise KeyError(
            f"no engine {name!r} in fleet {self.name!r}; engines: {[e.name for e in self.engines]}"
        )


class FleetError(YamlFileError):
    """A fleet file that cannot be used; `str()` gives one `file:line: location: message` line per problem."""


def load_fleet(path: str | Path) -> FleetSpec:
    """Read and validate a fleet file: FleetError names file and line (an unreadable one raises OSError)."""
    return load_model(path, FleetSpec, FleetError)
