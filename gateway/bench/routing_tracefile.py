"""Trace files for `bench routing --trace FILE`: request classes and the phases that send them.

YAML (or JSON, which YAML reads), validated here; every problem is reported as `file:line: location: message`:

    name: mixed-content
    classes:
      novel:  {prompt_tokens: 2048, max_tokens: 256, endpoint: chat}            # content: novel
      edit:   {prompt_tokens: 3072, max_tokens: 512, endpoint: chat, content: repetitive}
      quote:  {prompt_tokens: 1024, max_tokens: 256, content: repetitive, repeat: 0.5, stream: false}
      look:   {prompt_tokens: 512, max_tokens: 128, endpoint: chat, image: true}
    phases:                       # run one after the other; the streams of a phase run together
      - [{class: novel, users: 4, requests: 16}]                   # closed loop: 4 clients
      - [{class: edit, rate_per_s: 0.5, requests: 10},             # open loop: one every 2 s
         {class: quote, arrivals_s: [0, 1, 1.5, 8], requests: 4}]  # open loop: at these times

Times are simulated seconds from the phase's start. `content: repetitive` gives the class `repeat: 0.8`
unless set (the share of the prompt that is one passage given twice); `novel` means `repeat: 0`.
`prompt_tokens: 0` asks for an over-length prompt (the fleet's largest context + 1024).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.bench.routing_trace import RequestClass, Stream, Trace
from gateway.yaml_lines import YamlFileError, load_model

REPETITIVE_SHARE = 0.8


class TraceError(YamlFileError):
    """An unusable trace file; one `file:line: location: message` line per problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ClassSpec(_Strict):
    prompt_tokens: int = Field(ge=0, le=1_000_000)
    max_tokens: int = Field(ge=1, le=65_536)
    endpoint: Literal["chat", "completions"] = "completions"
    stream: bool = True
    image: bool = False
    content: Literal["novel", "repetitive"] = "novel"
    repeat: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _consistent(self) -> ClassSpec:
        if self.image and self.endpoint != "chat":
            raise ValueError("image requests need endpoint: chat")
        if self.content == "novel" and self.repeat:
            raise ValueError("a novel class repeats nothing: drop repeat or say content: repetitive")
        return self


class StreamSpec(_Strict):
    cls: str = Field(alias="class", min_length=1)
    requests: int = Field(ge=1, le=100_000)
    users: int | None = Field(default=None, ge=1, le=1_024)
    rate_per_s: float | None = Field(default=None, gt=0)
    arrivals_s: list[float] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_arrival_kind(self) -> StreamSpec:
        given = [k for k in ("users", "rate_per_s", "arrivals_s") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of users, rate_per_s, arrivals_s (got {given or 'none'})")
        if self.arrivals_s is not None:
            if any(t < 0 for t in self.arrivals_s):
                raise ValueError("arrivals_s are simulated seconds from the phase's start: not negative")
            if len(self.arrivals_s) < self.requests:
                raise ValueError(f"{self.requests} requests but only {len(self.arrivals_s)} arrivals_s")
        return self


class TraceSpec(_Strict):
    name: str = Field(default="trace", min_length=1)
    description: str = ""
    classes: dict[str, ClassSpec] = Field(min_length=1)
    phases: list[list[StreamSpec]] = Field(min_length=1)

    @field_validator("phases")
    @classmethod
    def _known_classes(cls, phases: list[list[StreamSpec]], info: ValidationInfo) -> list[list[StreamSpec]]:
        classes = info.data.get("classes") or {}  # absent when the classes themselves were invalid
        for i, phase in enumerate(phases):
            if not phase:
                raise ValueError(f"phase {i} is empty")
            for stream in phase:
                if classes and stream.cls not in classes:
                    raise ValueError(
                        f"phase {i} names class {stream.cls!r}; classes: {', '.join(sorted(classes))}"
                    )
        return phases

    def trace(self) -> Trace:
        classes = {name: _request_class(name, c) for name, c in self.classes.items()}
        phases = tuple(tuple(_stream(s) for s in phase) for phase in self.phases)
        return Trace(classes, phases, self.name)


def _request_class(name: str, c: ClassSpec) -> RequestClass:
    repeat = c.repeat if c.repeat is not None else (REPETITIVE_SHARE if c.content == "repetitive" else 0.0)
    return RequestClass(name, c.prompt_tokens, c.max_tokens, c.endpoint, c.image, c.stream, repeat)


def _stream(s: StreamSpec) -> Stream:
    return Stream(s.cls, s.users or 0, s.requests, s.rate_per_s, tuple(s.arrivals_s or ()))


def load_trace(path: str | Path) -> Trace:
    """Read and validate a trace file: TraceError names file and line (an unreadable one raises OSError)."""
    return load_model(path, TraceSpec, TraceError).trace()
