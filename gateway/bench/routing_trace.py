"""The mixed trace `bench routing` replays, the in-process ASGI client it replays it with, and the blind
baseline routers it compares against the policy router.

Request classes are seed 003's four shapes plus image requests and over-length prompts. The trace arrives
in phases: each class alone (A, B, C, D, as `vllm bench serve --max-concurrency` would run them), then all
of them mixed. Every stream is a closed loop: `users` clients each send their next request when the
previous one ends, so a faster routing finishes the phase sooner and aggregate tok/s measures it. A trace
file (routing_tracefile.py) may also give open-loop streams: arrivals at a rate or at listed times.

Content: a class's prompts are novel prose (random words: no 4-gram repeats) or repetitive, where a share
`repeat` of the prompt is one passage given twice (a file and the tool result quoting it back), the kind
of content where speculative drafts are accepted (gateway/repetition.py, docs/twin.md).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import ASGIApp, Message

from gateway.api.asgi import http_scope
from gateway.clock import monotonic
from gateway.records import BackendSnapshot, Decision
from gateway.sim.fleet import FleetSpec
from gateway.sim.text import make_prompt

IMAGE = (  # a 1x1 PNG: engines count an image's tokens by its slot, not its bytes
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@dataclass(frozen=True)
class RequestClass:
    name: str
    prompt_tokens: int  # 0 for over-length: the fleet's largest context + 1024
    max_tokens: int
    endpoint: str = "completions"
    image: bool = False
    stream: bool = True
    repeat: float = 0.0  # share of the prompt that is a passage given twice (0: novel prose)

    def prompt_for(self, spec: FleetSpec) -> int:
        return self.prompt_tokens or max(e.context_length for e in spec.engines) + 1024

    def servable_by(self, spec: FleetSpec) -> list[str]:
        """Engines that can take this class at all (vision, context)."""
        need = self.prompt_for(spec) + self.max_tokens
        return [e.name for e in spec.engines if (e.vision or not self.image) and need <= e.context_length]


CLASSES: dict[str, RequestClass] = {
    "A": RequestClass("A", 512, 512),
    "B": RequestClass("B", 8192, 256),
    "C": RequestClass("C", 2048, 512),
    "D": RequestClass("D", 2048, 256, endpoint="chat"),
    "image": RequestClass("image", 512, 128, endpoint="chat", image=True),
    "overlong": RequestClass("overlong", 0, 64),
}


@dataclass(frozen=True)
class Stream:
    """`users` closed-loop clients, or open-loop arrivals: every 1 / rate_per_s simulated seconds, or at
    the listed simulated times from the phase's start (`arrivals_s`)."""

    cls: str
    users: int
    requests: int
    rate_per_s: float | None = None
    arrivals_s: tuple[float, ...] = ()

    def arrival_offsets(self) -> list[float] | None:
        """Simulated seconds from the phase's start of each request (open loop), or None (closed loop)."""
        if self.arrivals_s:
            return sorted(self.arrivals_s)[: self.requests]
        if self.rate_per_s:
            return [i / self.rate_per_s for i in range(self.requests)]
        return None


@dataclass(frozen=True)
class Trace:
    """What one replay sends: the request classes and the phases (streams of a phase run together)."""

    classes: Mapping[str, RequestClass]
    phases: tuple[tuple[Stream, ...], ...]
    name: str = "built-in"

    def requests(self) -> int:
        return trace_requests(self.phases)

    def capable(self, spec: FleetSpec) -> dict[str, list[str]]:
        """Class -> the engines that can take it (the blind strategies' pre-call check)."""
        return {name: c.servable_by(spec) for name, c in self.classes.items()}


# Seed 003's concurrencies per shape; the mixed phase halves the stress users so it stays a mix.
TRACE: tuple[tuple[Stream, ...], ...] = (
    (Stream("A", 1, 6),),
    (Stream("B", 4, 12),),
    (Stream("C", 16, 48),),
    (Stream("D", 2, 12), Stream("image", 1, 4)),
    (
        Stream("A", 1, 4),
        Stream("B", 4, 8),
        Stream("C", 8, 24),
        Stream("D", 2, 8),
        Stream("image", 1, 4),
        Stream("overlong", 1, 2),
    ),
)


def trace_requests(trace: Sequence[Sequence[Stream]] = TRACE) -> int:
    return sum(s.requests for phase in trace for s in phase)


DEFAULT_TRACE = Trace(CLASSES, TRACE)


@dataclass
class Outcome:
    """One request as the client saw it; times are wall-clock seconds from sending."""

    cls: str
    status: int = 0
    ttft: float | None = None
    e2e: float = 0.0
    output_tokens: int = 0
    error: str = ""
    backend: str = ""
    sent_at: float = 0.0  # the twin's clock (simulated seconds since the fleet started) when sent

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error and self.ttft is not None


def request_body(cls: RequestClass, model: str, prompt_tokens: int, seed: int) -> dict[str, Any]:
    """A request of the class; `user` names the class (the oracle routers read it)."""
    body: dict[str, Any] = {"model": model, "max_tokens": cls.max_tokens, "stream": cls.stream}
    body["user"] = cls.name
    if cls.stream:
        body["stream_options"] = {"include_usage": True}
    body["ignore_eos"] = True
    fresh, passage = _prompt_parts(prompt_tokens, cls.repeat, seed)
    if cls.endpoint == "completions":
        body["prompt"] = " ".join(p for p in (passage, fresh, passage) if p)
        return body
    messages: list[dict[str, Any]] = []
    if passage:  # the file, then the tool result that quotes it back, then the new request
        messages.append({"role": "user", "content": passage})
        messages.append({"role": "assistant", "content": "ok"})
        messages.append({"role": "user", "content": passage})
    content: Any = fresh or "go"
    if cls.image:
        content = [{"type": "text", "text": content}, {"type": "image_url", "image_url": {"url": IMAGE}}]
    messages.append({"role": "user", "content": content})
    body["messages"] = messages
    return body


def _prompt_parts(prompt_tokens: int, repeat: float, seed: int) -> tuple[str, str]:
    """(novel text, a passage given twice) adding up to `prompt_tokens` toy tokens."""
    passage_tokens = int(prompt_tokens * repeat / 2)
    fresh_tokens = prompt_tokens - 2 * passage_tokens
    passage = make_prompt(passage_tokens, seed=seed * 7919 + 1) if passage_tokens else ""
    return make_prompt(fresh_tokens, seed=seed), passage


@dataclass
class _Exchange:
    outcome: Outcome
    started: float
    chat: bool
    buffer: bytes = b""
    stream: bool = True
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.outcome.status = message["status"]
            headers = dict(message.get("headers", []))
            self.outcome.backend = headers.get(b"x-gateway-backend", b"").decode()
            return
        if message["type"] != "http.response.body":
            return
        self.buffer += message.get("body", b"")
        if not self.stream:
            if not message.get("more_body", False):
                self._whole(self.buffer)
                self.outcome.e2e = monotonic() - self.started
                self.done.set()
            return
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())
        if not message.get("more_body", False):
            self._line(self.buffer.strip())
            self.outcome.e2e = monotonic() - self.started
            self.done.set()

    def _whole(self, raw: bytes) -> None:
        """A non-streamed answer: its first token is only seen with the whole answer (TTFT = e2e)."""
        if self.outcome.status != 200:
            self.outcome.error = raw[:200].decode(errors="replace") or f"status {self.outcome.status}"
            return
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.outcome.error = "unparseable answer"
            return
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.outcome.output_tokens = usage["completion_tokens"]
            self.outcome.ttft = monotonic() - self.started
        else:
            self.outcome.error = "answer without usage"

    def _line(self, line: bytes) -> None:
        if self.outcome.status != 200:
            if line and not self.outcome.error:
                self.outcome.error = line[:200].decode(errors="replace")
            return
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            return
        try:
            event = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            self.outcome.error = "unparseable event"
            return
        if "error" in event:
            self.outcome.error = str(event["error"])[:200]
            return
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.outcome.output_tokens = usage["completion_tokens"]
        for choice in event.get("choices") or []:
            text = choice.get("delta", {}).get("content") if self.chat else choice.get("text")
            if text and self.outcome.ttft is None:
                self.outcome.ttft = monotonic() - self.started


def stream_bodies(trace: Trace, spec: FleetSpec, model: str) -> dict[tuple[int, int], list[bytes]]:
    """Every request body of the trace, serialized, keyed by (phase, stream) in sending order.

    Built once per fleet, before any replay: an 8k-token prompt takes milliseconds to make, and made on
    the replay's event loop it held up the twin's steps and every stream in flight (lateness the loop
    sampler then charged to the fleet). Seeds follow the trace's order, so every replay and every
    strategy sends the same prompts.
    """
    seeds = itertools.count()
    bodies: dict[tuple[int, int], list[bytes]] = {}
    for p, phase in enumerate(trace.phases):
        for s, stream in enumerate(phase):
            cls = trace.classes[stream.cls]
            tokens = cls.prompt_for(spec)
            bodies[(p, s)] = [
                orjson.dumps(request_body(cls, model, tokens, next(seeds))) for _ in range(stream.requests)
            ]
    return bodies


async def post(
    app: ASGIApp, cls: RequestClass, body: Mapping[str, Any] | bytes, sent_at: float = 0.0
) -> Outcome:
    """POST one request straight into the ASGI app (no client socket: the bench measures routing).

    `body` is the request, or its JSON already serialized (stream_bodies: streamed as the class says).
    """
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    streamed = cls.stream if isinstance(body, bytes) else body.get("stream") is True
    path = "/v1/chat/completions" if cls.endpoint == "chat" else "/v1/completions"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    scope = http_scope("POST", path, headers)
    exchange = _Exchange(Outcome(cls.name, sent_at=sent_at), monotonic(), cls.endpoint == "chat")
    exchange.stream = streamed
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await exchange.done.wait()
        return {"type": "http.disconnect"}

    await app(scope, receive, exchange.send)
    if not exchange.done.is_set():
        exchange.outcome.e2e = monotonic() - exchange.started
        exchange.done.set()
    return exchange.outcome


class Lifespan:
    """Runs an ASGI app's lifespan (startup on enter, shutdown on exit) without a server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Lifespan:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._task = asyncio.ensure_future(self.app(scope, self._inbox.get, self._outbox.put))
        await self._inbox.put({"type": "lifespan.startup"})
        message = await self._outbox.get()
        if message["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"gateway startup failed: {message.get('message')}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._outbox.get()
        if self._task is not None:
            await self._task


def _profile(body: Mapping[str, Any], fallback: str) -> str:
    user = body.get("user")
    return user if isinstance(user, str) else fallback


class RoundRobinRouter:
    """Blind rotation over the backends that can take the request's class (`capable`: class -> engines,
    the vision and context check every gateway makes before a call); the whole pool when none can."""

    def __init__(self, capable: Mapping[str, Sequence[str]] | None = None) -> None:
        self._turn = itertools.count()
        self.capable = dict(capable or {})

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        names = [b.name for b in _able(self.capable, body, backends)]
        start = next(self._turn) % len(names)
        return Decision(_profile(body, "round_robin"), tuple(names[start:] + names[:start]))


class LeastInflightRouter:
    """Blind least-loaded: of the backends that can take the class, the one with the fewest requests in
    flight (rotation breaks ties)."""

    def __init__(self, capable: Mapping[str, Sequence[str]] | None = None) -> None:
        self._turn = itertools.count()
        self.capable = dict(capable or {})

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        turn = next(self._turn)
        able = _able(self.capable, body, backends)
        order = sorted(range(len(able)), key=lambda i: (able[i].inflight, (i - turn) % len(able)))
        return Decision(_profile(body, "least_inflight"), tuple(able[i].name for i in order))


def _able(
    capable: Mapping[str, Sequence[str]], body: Mapping[str, Any], backends: Sequence[BackendSnapshot]
) -> list[BackendSnapshot]:
    """The backends that can take the body's class; all of them for a class none can take (it is refused
    wherever it goes) or one the map does not know."""
    names = capable.get(_profile(body, ""), ())
    able = [b for b in backends if b.name in names]
    return able or list(backends)


class AssignmentRouter:
    """Each request class to one fixed backend (the oracle's candidates); others follow as failover."""

    def __init__(self, assignment: Mapping[str, str]) -> None:
        self.assignment = dict(assignment)

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        names = [b.name for b in backends]
        chosen = self.assignment.get(_profile(body, ""), names[0])
        return Decision(_profile(body, "oracle"), (chosen, *(n for n in names if n != chosen)))


class SplitRouter:
    """Each request class spread over backends in fixed fractions (the split oracle's candidates).

    Deterministic interleaving: the next request of a class goes to the backend furthest behind its
    share (largest fraction x (sent + 1) - its count), so 0.75/0.25 sends 3, 1, 3, 1, ... in order.
    """

    def __init__(self, fractions: Mapping[str, Mapping[str, float]]) -> None:
        self.fractions = {cls: dict(f) for cls, f in fractions.items()}
        self._sent: dict[str, dict[str, int]] = {}

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        names = [b.name for b in backends]
        cls = _profile(body, "")
        shares = self.fractions.get(cls) or {names[0]: 1.0}
        counts = self._sent.setdefault(cls, {})
        total = sum(counts.values()) + 1
        chosen = max(shares, key=lambda b: (shares[b] * total - counts.get(b, 0), shares[b]))
        counts[chosen] = counts.get(chosen, 0) + 1
        return Decision(_profile(body, "split_oracle"), (chosen, *(n for n in names if n != chosen)))
