"""What happened to one request, from arrival to the last byte: the one completion record every observer
(Prometheus, the live windows, the router's token estimator) reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request; everything a recorder needs, in seconds and token counts."""

    request_id: str
    model: str
    endpoint: str
    profile: str
    stream: bool
    backend: str | None = None
    status: int = 0
    attempts: int = 0
    inflight_at_dispatch: int = 0  # the backend's in-flight count including this request
    device_inflight_at_dispatch: int = 0  # the same over every backend sharing its device
    device_shared_s: float = 0.0  # seconds of the attempt during which another backend of its device was busy
    load_s: float = 0.0  # the backend's in-flight count integrated over the attempt (this request included)
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    tpot: float | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    e2e: float = 0.0
    overhead: float = 0.0  # the gateway's own time before the upstream request went out, queueing excluded
    queue_wait: float = 0.0  # time spent taking admission slots: waiting in the pool's queue, comebacks
    error: str | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)  # (backend, why) per failed attempt
    # Backends whose stream of it broke mid-answer, the answer continued elsewhere (proxy/resume.py).
    resumed_from: list[str] = field(default_factory=list)
    # (backend, cause) per stream that broke after content went out: a reset, an end before the answer's
    # finish and `[DONE]`, the engine's error frame, a stall (proxy/relay.py); continued or not.
    stream_breaks: list[tuple[str, str]] = field(default_factory=list)
    # Those of them whose stream did not break but was cut to finish on a faster engine (proxy/moves.py).
    moved_from: list[str] = field(default_factory=list)
    # Each moved attempt as far as it went (backend, its own record): a sample of that engine's pace.
    moved_attempts: list[tuple[str, RequestRecord]] = field(default_factory=list)
    ended_by_gateway: bool = False  # ended early by the gateway itself (a shutdown's drain deadline)
    # The parsed request, for recorders that relate usage to the prompt (the router's token estimator);
    # a reference, read after the answer went out, so the request path pays nothing for it.
    body: Mapping[str, Any] | None = field(default=None, repr=False)
