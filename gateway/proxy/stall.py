"""Hang detection from what the gateway measures: a backend whose in-flight streams produce no byte for far
longer than it usually takes is stalled.

A hung engine (a stopped process, a wedged device) often still accepts connections, so neither the
connect timeout nor a refused connection tells; its readiness probe only times out, and a serving backend
is called dead only after several of those in a row (backends/prober.py). Meanwhile every byte it sends
goes through dispatch, so the gateway knows at once when none come:

- Silence: the time since the backend last produced anything (a content frame, a whole answer) while
  it has streams in flight, counted from when it became busy. A stream's head is no sign of life: an
  engine's HTTP server may send it (and vLLM its role frame) while the engine behind it is hung. A
  backend with only whole (non-streamed) answers in flight sends nothing until each is done, so it is
  never judged on silence.
- Allowed silence: `multiple` x the larger of its recent p95 first-token time and p95 inter-token gap
  (measured here from its own streams), at least `min_silence_s`, plus the prefill of the prompts
  waiting there for their first content (estimated at 4 bytes of body per token, at
  `prefill_tokens_per_s`): a long prefill is silence too.
- Unresponsive: a backend with requests in flight (streamed or whole) that has shown no sign of life (a
  content frame, a whole answer, an answered probe or /metrics scrape) for the allowed silence, while its
  control plane left calls unanswered for `UNANSWERED_S` in all since (backends/control_plane.py: the
  prober and the scraper report). A stopped process answers nothing; a busy engine, even one deep in a
  long prefill with only whole answers in flight, still answers its health endpoint and /metrics, so it
  never is. This is what finds a hang when no stream is in flight to fall silent.
- Stalled: silence past the allowed silence, or unresponsive. The registry marks it
  (`Registry.note_stalled`), the router sees it out for now like an open breaker
  (BackendSnapshot.stalled), failover skips it, and the attempts waiting there for their first content
  (a whole answer included) are cut (their timeout scope expires now, which cancels the upstream call)
  and fail over: the relay holds a stream's head and role frame until the first content, so nothing
  reached their clients.
  The same happens to attempts waiting on a backend the prober declared dead.
- Recovery is at once: a byte from it (a request's, or a readiness probe's answer) clears the mark; an
  unresponsive one is also cleared by an answered scrape.

Checks run on a timer (`check_interval_s`) only while attempts are in flight, so the hot path pays a
set insertion per attempt and nothing per chunk: content is noticed from the stream meter's frame count.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.backends.registry import Registry, Status
from gateway.clock import monotonic
from gateway.proxy.stream import SseMeter
from gateway.settings import StallSettings

BYTES_PER_TOKEN = 4  # a prompt's size in tokens, roughly, from its body's bytes
_TTFT_SAMPLES = 64  # recent first-token times kept per backend
_ITL_SAMPLES = 256  # recent inter-token gaps kept per backend
_ITL_PER_STREAM = 32  # the newest gaps taken from one finished stream
# Control-plane calls left unanswered, in seconds in all, before a silent backend is unresponsive: one
# timed-out probe (5 s by default) or two /metrics scrapes in a row (0.8 s each at the default 1 s
# interval); one slow scrape on a loaded host is not enough. (A settings knob to come: stall.unanswered_s.)
UNANSWERED_S = 1.5


@dataclass(eq=False, slots=True)
class Watched:
    """One attempt in flight on one backend, as the watch sees it."""

    backend: str
    stream: bool
    started: float  # the watch's clock
    sent: float  # gateway.clock.monotonic, the stream meter's clock
    prompt_tokens: int
    # Set while it may be cut: waiting for its first content (cutting it fails over), or a stream under
    # way (`committed`: cutting it ends the stream with an error frame).
    scope: asyncio.Timeout | None = None
    committed: bool = False
    meter: SseMeter | None = None
    frames: int = 0  # the meter's content frames at the last check
    last_seen: float = 0.0  # when that count last changed (the watch's clock)
    heard: bool = False  # the backend answered something for it
    cut: str | None = None  # why the watch cut it, once it did
    moving: bool = False  # cut to be continued on a faster engine (proxy/moves.py), not for a fault


@dataclass(eq=False, slots=True)
class _Backend:
    attempts: set[Watched] = field(default_factory=set)
    streams: int = 0
    quiet_from: float = 0.0  # the last sign of life, or when it became busy
    marked: bool = False  # this watch found it stalled (and nobody has cleared it since)
    ttft: deque[float] = field(default_factory=lambda: deque(maxlen=_TTFT_SAMPLES))
    itl: deque[float] = field(default_factory=lambda: deque(maxlen=_ITL_SAMPLES))
    busy_from: float = 0.0  # when its attempts in flight went from none to some
    heard_at: float = 0.0  # its last sign of life of any kind: content, an answer, a probe or scrape answered
    unanswered_s: float = 0.0  # control-plane wait left unanswered since `heard_at`
    unresponsive: bool = False  # the mark is for an unresponsive control plane (a scrape answer lifts it)
    stalls: int = 0  # times it was found stalled
    moved: int = 0  # attempts waiting for their first content there, cut to fail over
    ended: int = 0  # streams under way there, ended with an error frame


class StallWatch:
    """The hang watch over one registry; one per gateway, made with the reliability state."""

    def __init__(
        self, config: StallSettings, registry: Registry, clock: Callable[[], float] | None = None
    ) -> None:
        self.config = config
        self.registry = registry
        self.clock = clock or registry.clock  # the registry's clock: stalled_since and `since` compare
        self._backends = {name: _Backend() for name in registry.backends}
        self._timer: asyncio.TimerHandle | None = None

    def enter(self, backend: str, stream: bool, body_bytes: int) -> Watched:
        """An attempt is about to be sent to `backend`."""
        now = self.clock()
        watched = Watched(backend, stream, now, monotonic(), body_bytes // BYTES_PER_TOKEN)
        watched.last_seen = now
        b = self._backends.setdefault(backend, _Backend())
        if not b.attempts:
            b.busy_from = now
        if stream:
            if b.streams == 0:
                b.quiet_from = max(b.quiet_from, now)  # silence counts from when it became busy
            b.streams += 1
        b.attempts.add(watched)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.config.check_interval_s, self._tick)
        return watched

    def heard(self, watched: Watched) -> None:
        """The backend answered this attempt whole. A stream's head is no sign of life: an engine's HTTP
        server may send it (and vLLM its role frame) while the engine behind it is hung."""
        watched.heard = True
        self._alive(watched.backend, "answered")

    def control_answered(self, backend: str) -> None:
        """A probe or scrape of `backend` was answered: its server runs (backends/control_plane.py)."""
        b = self._backends.setdefault(backend, _Backend())
        b.heard_at, b.unanswered_s = self.clock(), 0.0
        lifted = b.marked and b.unresponsive  # a stall found on silent streams waits for their bytes
        if lifted and self.registry.note_unstalled(backend, "answered a probe or scrape"):
            b.marked = False

    def control_unanswered(self, backend: str, waited_s: float) -> None:
        """A probe or scrape of `backend` got no answer within `waited_s`."""
        self._backends.setdefault(backend, _Backend()).unanswered_s += waited_s

    def leave(self, watched: Watched) -> None:
        """The attempt is over: forget it, and keep what it measured."""
        b = self._backends[watched.backend]
        b.attempts.discard(watched)
        if watched.stream:
            b.streams -= 1
        meter = watched.meter
        if meter is None or meter.first_token_at is None or watched.cut is not None:
            return  # nothing measured, or cut for its silence: no sign of life, no sample
        b.ttft.append(meter.first_token_at - watched.sent)
        b.itl.extend(meter.itl[-_ITL_PER_STREAM:])
        if meter.content_frames != watched.frames:  # content since the last check
            self._alive(watched.backend, "produced tokens")

    def allowed_silence(self, backend: str) -> float:
        """How long `backend` may stay silent with streams in flight before it is called stalled."""
        b, config = self._backends[backend], self.config
        usual = max(_p95(b.ttft), _p95(b.itl)) * config.multiple
        # The waiting prompts are prefilled one after another (an engine's per-step token budget): all
        # of them may pass before the first content of any.
        prompt = sum(w.prompt_tokens for w in b.attempts if _waiting(w))
        return max(config.min_silence_s, usual) + prompt / config.prefill_tokens_per_s

    def check(self) -> None:
        """One round: find stalled backends, clear those that came back, cut what waits on stalled or
        dead ones."""
        now = self.clock()
        for name, b in self._backends.items():
            if name in self.registry.backends:
                self._check(name, b, now)

    def counts(self) -> dict[str, tuple[int, int, int]]:
        """Per backend, for Prometheus: times found stalled, waiting attempts moved elsewhere, streams
        under way ended."""
        return {name: (b.stalls, b.moved, b.ended) for name, b in self._backends.items()}

    def _tick(self) -> None:
        self._timer = None
        self.check()
        if any(b.attempts for b in self._backends.values()):
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.config.check_interval_s, self._tick)

    def _check(self, name: str, b: _Backend, now: float) -> None:
        state = self.registry.backends[name]
        if b.marked and state.stalled_since is None:  # a probe or an answer brought it back
            b.marked, b.quiet_from = False, now
        for watched in b.attempts:
            frames = watched.meter.content_frames if watched.meter is not None else 0
            if frames != watched.frames:
                watched.frames, watched.last_seen = frames, now
                self._alive(name, "produced tokens")
        if not self.config.enabled:
            return
        allowed = self.allowed_silence(name)
        if state.status is Status.READY:
            self._judge(name, b, now, allowed)
        if state.stalled_since is not None:
            why = f"backend {name} stalled: {state.stall_detail}"
            self._cut(b, state.stalled_since, now, allowed, why, streams_too=True)
        elif state.status is Status.DEAD:
            self._cut(b, state.since, now, allowed, f"backend {name} is down: {state.detail}")

    def _judge(self, name: str, b: _Backend, now: float, allowed: float) -> None:
        """Mark a ready backend stalled: streams silent past the allowed silence, or unresponsive (requests
        in flight, no sign of life of any kind for the allowed silence, so a loaded engine slow to answer
        anything is given the time it usually takes, and its control plane left calls unanswered for
        `UNANSWERED_S` since)."""
        silence = now - b.quiet_from
        if b.streams and silence > allowed:
            detail = f"no bytes for {silence:.1f}s from {len(b.attempts)} requests (allowed {allowed:.1f}s)"
            self._mark(name, b, detail, unresponsive=False)
        quiet = now - max(b.heard_at, b.busy_from)
        if b.attempts and b.unanswered_s >= UNANSWERED_S and quiet > allowed and not b.marked:
            detail = (
                f"answers nothing: {b.unanswered_s:.1f}s of health probes and metrics scrapes unanswered, "
                f"nothing from {len(b.attempts)} requests for {quiet:.1f}s (allowed {allowed:.1f}s)"
            )
            self._mark(name, b, detail, unresponsive=True)

    def _mark(self, name: str, b: _Backend, detail: str, unresponsive: bool) -> None:
        if self.registry.note_stalled(name, detail):
            b.marked, b.unresponsive, b.stalls = True, unresponsive, b.stalls + 1
        elif b.marked and not unresponsive:
            b.unresponsive = False  # silent streams too: only a byte or an answered probe lifts it now

    def _cut(
        self, b: _Backend, since: float, now: float, allowed: float, why: str, streams_too: bool = False
    ) -> None:
        """Cut the attempts waiting for their first content that were there before `since`, or have
        waited longer than the allowed silence since (sent to it when nothing else could take them): they
        fail over. With `streams_too` (a stalled backend), also the streams under way that have been
        silent longer than the allowed silence: they end with an error frame now, not at the idle
        timeout."""
        loop = asyncio.get_running_loop()
        for watched in b.attempts:
            scope = watched.scope
            if scope is None or watched.cut is not None:
                continue
            if watched.committed:
                cut = streams_too and now - watched.last_seen > allowed
            else:
                cut = watched.started <= since or now - watched.started > allowed
            if cut:
                watched.cut = why
                if watched.committed:
                    b.ended += 1
                else:
                    b.moved += 1
                scope.reschedule(loop.time())  # its timeout expires now

    def _alive(self, backend: str, how: str) -> None:
        b = self._backends[backend]
        b.quiet_from = b.heard_at = self.clock()
        b.unanswered_s = 0.0
        if b.marked and self.registry.note_unstalled(backend, how):
            b.marked = False


def _waiting(watched: Watched) -> bool:
    return watched.scope is not None and not watched.committed


def _p95(samples: deque[float]) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[int(0.95 * (len(ordered) - 1))]
