"""What a request may cost and how long it may wait: upstream timeouts, request limits, the wait queue,
the shutdown drain."""

from __future__ import annotations

from pydantic import Field

from gateway.settings.strict import Strict


class Timeouts(Strict):
    """Upstream timeouts in seconds. First byte is long on purpose: a 128k-token prefill takes minutes."""

    connect_s: float = Field(default=5.0, gt=0)
    # From sending until the first content token: covers the engine's own queue and the prefill.
    first_byte_s: float = Field(default=600.0, gt=0)
    idle_s: float = Field(default=120.0, gt=0, description="longest gap between chunks after the first")


class Limits(Strict):
    """What one client request may cost before it is refused at the door (docs/reliability.md, Limits).
    The defaults protect a 2-core box and are far above what a real OpenAI request needs."""

    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_attempts: int = Field(default=3, ge=1, description="backends tried per request before giving up")
    resume_streams: bool = Field(
        default=True,
        description="a stream that breaks after content went out (its engine died, hung or reset) is "
        "continued on another backend of its pool from the text the client has (proxy/resume.py)",
    )
    connections: int = Field(default=1024, ge=1, description="upstream connection pool size")
    # Client connections held at once (api/connections.py): past it the longest-idle one is closed, or the
    # newcomer gets a 503 when all are busy. None: what the open-files limit (raised to its hard limit at
    # start) leaves after the upstream pool and a reserve of 64.
    max_client_connections: int | None = Field(default=None, ge=16)
    # One SSE frame from an engine (a token's is ~200 bytes; a Responses stream's last event repeats the
    # answer): past it the stream is broken (failover or continuation), never buffered further.
    max_sse_frame_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    # The request head (request line and headers): 431 past either limit, before auth and the body.
    max_head_bytes: int = Field(default=64 * 1024, ge=1024, description="request line + all headers")
    max_header_line_bytes: int = Field(default=16 * 1024, ge=256, description="one header or the URL")
    # A head or body still arriving this long after it began gets 408 and the connection is closed.
    read_timeout_s: float = Field(default=30.0, gt=0)
    max_messages: int = Field(default=4096, ge=1)
    max_tools: int = Field(default=1024, ge=1)
    max_parts: int = Field(default=1024, ge=1, description="content parts in one message")
    # Values in a whole body, any field (token ids in `prompt`, an unknown array): counted as its commas
    # and brackets before parsing, so a refusal costs milliseconds; a parse then costs at most ~0.3 s.
    max_values: int = Field(default=1 << 20, ge=1024, description="JSON values in one body, any field")
    # orjson writes at most 254 levels, and the gateway re-encodes bodies it rewrites.
    max_depth: int = Field(default=64, ge=8, le=200, description="JSON nesting of a body")
    # Bodies at least this big are parsed under the byte budget below, checked in a worker thread and
    # freed in steps, so streams keep flowing.
    parse_offload_bytes: int = Field(default=256 * 1024, ge=0)
    # Bytes of big bodies being read and parsed at once (a parsed tree is ~15x its JSON): more wait.
    parse_budget_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)


class QueueSettings(Strict):
    """The bounded wait queue per pool: requests wait there for a slot or for a warming backend."""

    max_queue: int = Field(default=64, ge=0, description="waiters per pool; one more gets 429")
    timeout_s: float = Field(default=30.0, ge=0, description="a waiter's deadline; then 503")
    # Every backend that could serve the request is warming up: how long it waits for the first to be
    # ready before 503 backends_warming with the expected time left. None: the same as timeout_s.
    warming_wait_s: float | None = Field(default=None, ge=0)
    retry_after_s: int = Field(default=1, ge=0)


class ShutdownSettings(Strict):
    drain_timeout_s: float = Field(default=30.0, ge=0, description="SIGTERM: longest wait for streams")
