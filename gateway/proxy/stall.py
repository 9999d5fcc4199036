"""Hang detection: a backend is stalled when its engine makes no progress, not when one request hears
nothing for a while.

A hung engine (a stopped process, a wedged device) often still accepts connections, and a wedged one
still answers /health, so neither the connect timeout nor the prober tells in time. Every byte it sends
goes through dispatch, and the scraper reads its own counters (backends/scraper.py), so the gateway can
tell a slow engine from a stuck one in two steps (allowances: proxy/stall_pace.py):

- Suspected: a request there waits longer than its work explains while the engine is quiet: a stream
  waiting for its first content past floor + (its prompt + the prompts ahead of it) / prefill rate, or a
  stream under way silent past the floor, the engine having shown no progress for the floor either. A
  stream's head is no sign of life: an engine's HTTP server may send it (and vLLM its role frame) while
  the engine behind it is hung.
- Cleared by progress: the engine progresses again before it is confirmed (a byte of any of its
  requests, or its /metrics counters moving): it was slow, not stalled. Counted and logged.
- Confirmed (stalled): no progress of any kind for floor + one step of the prompts waiting there /
  prefill rate. Also when only whole (non-streamed) requests wait there, which send nothing until done:
  the engine's counters, read by the scraper, stood still that long while requests wait.
  Not while every other backend of its requests' pools is suspected, stalled or out too: that is
  evidence against the detector (a busy host slows every engine at once), and failing over in a circle
  turns slow answers into none; the requests wait for the first engine that answers. Once confirmed, a
  request with no other backend of its pool to go to stays where it is all the same.
- Unresponsive: a backend with requests in flight that has shown no sign of life (content, an answer,
  an answered probe or /metrics scrape) for the floor, while its control plane left
  calls unanswered for `UNANSWERED_S` in all since (backends/control_plane.py). A stopped process
  answers nothing; a busy engine still answers its health endpoint and /metrics, so it never is.
- A stalled backend: the registry marks it (`Registry.note_stalled`), the router sees it out for now
  like an open breaker, failover skips it, and the attempts waiting there for their first content (a
  whole answer included) are cut (their timeout scope expires now, which cancels the upstream call) and
  fail over: the relay holds a stream's head and role frame until the first content, so nothing reached
  their clients. Streams under way there, silent past the floor, end with an error frame. The same
  happens to attempts waiting on a backend the prober declared dead.
- Recovery is at once: progress clears the mark; an unresponsive one is also cleared by an answered
  probe or scrape. A wedged engine answers those too, so a stall found without progress, once nothing
  is left there to show any, lifts after `RECHECK_S` (doubled each time it is found stalled again) and
  its next request tells.

Checks run on a timer (`check_interval_s`) only while attempts are in flight, so the hot path pays a
set insertion per attempt and nothing per chunk: content is noticed from the stream meter's frame count.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.backends.registry import Registry, Status
from gateway.clock import monotonic
from gateway.proxy.stall_pace import BYTES_PER_TOKEN, Pace, prior_rate
from gateway.proxy.stream import SseMeter
from gateway.settings import StallSettings

log = logging.getLogger("gateway.stall")

# Control-plane calls left unanswered, in seconds in all, before a silent backend is unresponsive: one
# timed-out probe (5 s by default) or two /metrics scrapes in a row (0.8 s each at the default 1 s
# interval); one slow scrape on a loaded host is not enough. (A settings knob to come: stall.unanswered_s.)
UNANSWERED_S = 1.5
# A stalled backend with nothing left in flight is given its next request after this wait, doubled each
# time it is found stalled again without progress in between, up to the most.
RECHECK_S = 30.0
RECHECK_MAX_S = 300.0


@dataclass(eq=False, slots=True)
class Watched:
    """One attempt in flight on one backend, as the watch sees it."""

    backend: str
    stream: bool
    started: float  # the watch's clock
    sent: float  # gateway.clock.monotonic, the stream meter's clock
    prompt_tokens: int
    peers: tuple[str, ...] = ()  # the other backends of its pool: where it could fail over
    order: int = 0  # when it entered, among all attempts (the queue ahead of it on its backend)
    ahead_tokens: int = 0  # the prompts waiting for their first content there when it entered
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


@dataclass(frozen=True, slots=True)
class StallCounts:
    """What the watch did on one backend, since the gateway started."""

    suspected: int  # times its requests waited longer than their work explains
    confirmed: int  # times it was found stalled
    cleared: int  # suspicions cleared by the engine's progress: slow, not stalled
    moved: int  # attempts waiting for their first content there, cut to fail over
    ended: int  # streams under way there, ended with an error frame


@dataclass(eq=False, slots=True)
class _Backend:
    pace: Pace
    attempts: set[Watched] = field(default_factory=set)
    streams: int = 0
    quiet_from: float = 0.0  # the last progress, or when it became busy or was cleared
    marked: bool = False  # this watch found it stalled (and nobody has cleared it since)
    suspected_at: float | None = None  # when the current suspicion began; None: not suspected
    suspect_detail: str = ""
    held: bool = False  # confirmation held: no other backend could take its requests
    busy_from: float = 0.0  # when its attempts in flight went from none to some
    heard_at: float = 0.0  # its last sign of life of any kind: content, an answer, a probe or scrape answered
    unanswered_s: float = 0.0  # control-plane wait left unanswered since `heard_at`
    unresponsive: bool = False  # the mark is for an unresponsive control plane (a scrape answer lifts it)
    rechecks: int = 0  # marks lifted without progress since its last progress
    suspected: int = 0
    stalls: int = 0
    cleared: int = 0
    moved: int = 0
    ended: int = 0


class StallWatch:
    """The hang watch over one registry; one per gateway, made with the reliability state."""

    def __init__(
        self, config: StallSettings, registry: Registry, clock: Callable[[], float] | None = None
    ) -> None:
        self.config = config
        self.registry = registry
        self.clock = clock or registry.clock  # the registry's clock: stalled_since and `since` compare
        self._backends: dict[str, _Backend] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._order = itertools.count()

    def enter(
        self, backend: str, stream: bool, body_bytes: int, pool: tuple[str, ...] | None = None
    ) -> Watched:
        """An attempt is about to be sent to `backend`; `pool`: the backends its request may go to (by
        default, those of every pool `backend` is in)."""
        now = self.clock()
        if pool is None:
            pools = [each.backends for each in self.registry.pools if backend in each.backends]
            pool = tuple(dict.fromkeys(p for backends in pools for p in backends))  # a backend once
        peers = tuple(p for p in pool if p != backend)
        tokens = body_bytes // BYTES_PER_TOKEN
        watched = Watched(backend, stream, now, monotonic(), tokens, peers, next(self._order))
        watched.last_seen = now
        b = self._backend(backend)
        watched.ahead_tokens = sum(w.prompt_tokens for w in b.attempts if _waiting(w))
        if not b.attempts:
            b.busy_from = now
            b.quiet_from = max(b.quiet_from, now)  # silence counts from when it became busy
        if stream:
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
        self._alive(watched.backend, "answered a request")

    def control_answered(self, backend: str) -> None:
        """A probe or scrape of `backend` was answered: its server runs (backends/control_plane.py)."""
        b = self._backend(backend)
        now = b.heard_at = self.clock()
        b.unanswered_s = 0.0
        if not b.marked:
            return
        if b.unresponsive:  # it answers again (a stopped process continued): back at once
            if self.registry.note_unstalled(backend, "answered a probe or scrape"):
                b.marked = False
            return
        # A wedged engine answers its control plane too: only progress lifts this mark. With nothing
        # left there nothing can show progress, so after a wait, longer each time it proves no better,
        # the mark lifts and its next request tells.
        since = self.registry.backends[backend].stalled_since
        wait = min(RECHECK_MAX_S, RECHECK_S * 2**b.rechecks)
        if b.attempts or since is None or now - since < wait:
            return
        if self.registry.note_unstalled(backend, f"nothing in flight there for {now - since:.0f}s"):
            b.marked, b.rechecks = False, b.rechecks + 1

    def control_unanswered(self, backend: str, waited_s: float) -> None:
        """A probe or scrape of `backend` got no answer within `waited_s`."""
        self._backend(backend).unanswered_s += waited_s

    def engine_progress(self, backend: str, moved: bool) -> None:
        """A /metrics scrape of `backend` read its progress counters; `moved`: they changed since the
        previous scrape (backends/engine_metrics.py: `progressed`)."""
        b = self._backend(backend)
        b.pace.counters_at = self.clock()
        if moved:
            self._alive(backend, "its engine counters moved")

    def leave(self, watched: Watched) -> None:
        """The attempt is over: forget it, and keep what it measured."""
        b = self._backends[watched.backend]
        b.attempts.discard(watched)
        if watched.stream:
            b.streams -= 1
        meter = watched.meter
        if meter is None or meter.first_token_at is None or watched.cut is not None:
            return  # nothing measured, or cut for its silence: no sign of life, no sample
        # What the engine prefilled before this first token: its prompt and those that waited ahead.
        prefilled = watched.ahead_tokens + watched.prompt_tokens
        b.pace.measured(prefilled, meter.first_token_at - watched.sent, meter.itl)
        if meter.content_frames != watched.frames:  # content since the last check
            self._alive(watched.backend, "produced tokens")

    def allowed_silence(self, backend: str) -> float:
        """How long `backend` may show no progress, with what waits there now, before it is stalled."""
        return self._allowed_silence(self._backend(backend))

    def first_content_allowed(self, watched: Watched) -> float:
        """How long `watched` may wait for its first content: its prompt and those ahead of it, prefilled."""
        b = self._backend(watched.backend)
        ahead = sum(w.prompt_tokens for w in b.attempts if _waiting(w) and w.order < watched.order)
        return b.pace.first_content(self.config, ahead + watched.prompt_tokens)

    def check(self) -> None:
        """One round: find suspect and stalled backends, clear those that came back, cut what waits on
        stalled or dead ones."""
        now = self.clock()
        judged = [(name, b) for name, b in self._backends.items() if name in self.registry.backends]
        for name, b in judged:  # every suspicion first: a confirmation asks whether others are suspect
            self._suspect(name, b, now)
        for name, b in judged:
            self._check(name, b, now)

    def counts(self) -> dict[str, StallCounts]:
        """Per backend, for Prometheus and /gateway/backends."""
        return {
            name: StallCounts(b.suspected, b.stalls, b.cleared, b.moved, b.ended)
            for name, b in self._backends.items()
        }

    def details(self, backend: str) -> dict[str, Any]:
        """The watch's view of one backend, for /gateway/backends."""
        b = self._backend(backend)
        counts = self.counts()[backend]
        return {
            "suspected": b.suspected_at is not None,
            "suspect_detail": b.suspect_detail,
            "suspicions": counts.suspected,
            "stalls": counts.confirmed,
            "cleared_by_progress": counts.cleared,
            "prefill_tokens_per_s": round(b.pace.rate(self.config), 1),
            "allowed_silence_s": round(self.allowed_silence(backend), 2),
        }

    def _backend(self, name: str) -> _Backend:
        b = self._backends.get(name)
        if b is None:
            state = self.registry.backends.get(name)
            flavor = state.config.flavor if state is not None else "vllm"
            b = self._backends[name] = _Backend(Pace(prior_rate(self.config, flavor)))
        return b

    def _tick(self) -> None:
        self._timer = None
        self.check()
        if any(b.attempts for b in self._backends.values()):
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.config.check_interval_s, self._tick)

    def _suspect(self, name: str, b: _Backend, now: float) -> None:
        """Note what came since the last round, and suspect a ready backend whose requests wait past
        what their work explains."""
        state = self.registry.backends[name]
        if b.marked and state.stalled_since is None:  # a probe or an answer brought it back
            b.marked, b.quiet_from, b.suspected_at = False, now, None
        for watched in b.attempts:
            frames = watched.meter.content_frames if watched.meter is not None else 0
            if frames != watched.frames:
                watched.frames, watched.last_seen = frames, now
                self._alive(name, "produced tokens")
        if not self.config.enabled or state.status is not Status.READY:
            return
        overdue = self._overdue(b, now)
        if overdue is None:
            b.suspected_at, b.held = None, False
        elif b.suspected_at is None:
            b.suspected_at, b.suspect_detail, b.suspected = now, overdue, b.suspected + 1
            log.info("backend %s suspected of a stall: %s", name, overdue)

    def _check(self, name: str, b: _Backend, now: float) -> None:
        state = self.registry.backends[name]
        if not self.config.enabled:
            return
        if state.status is Status.READY:
            self._confirm(name, b, now)
            self._judge_unresponsive(name, b, now)
        if state.stalled_since is not None:
            why = f"backend {name} stalled: {state.stall_detail}"
            self._cut(b, state.stalled_since, now, why, streams_too=True, keep_stranded=not b.unresponsive)
        elif state.status is Status.DEAD:
            self._cut(b, state.since, now, f"backend {name} is down: {state.detail}")

    def _confirm(self, name: str, b: _Backend, now: float) -> None:
        """Confirm a suspect backend stalled once its engine has made no progress for the allowed silence,
        unless no other backend could take its requests."""
        quiet, allowed = now - b.quiet_from, self.allowed_silence(name)
        if now - b.heard_at < allowed:  # its server answered meanwhile: busy more likely than hung
            allowed = max(allowed, self.config.answering_silence_s)
        if b.suspected_at is None or quiet <= allowed or b.marked:
            return
        if not any(self._could_move(w) for w in b.attempts):
            if not b.held:
                b.held = True
                log.warning(
                    "backend %s: no progress for %.1fs, but no other backend could take its requests: "
                    "they wait for the first engine that answers",
                    name,
                    quiet,
                )
            return
        detail = f"{b.suspect_detail}; no progress for {quiet:.1f}s (allowed {allowed:.1f}s)"
        self._mark(name, b, detail, False)

    def _overdue(self, b: _Backend, now: float) -> str | None:
        """Why the backend's requests wait longer than their work explains; None when they do not."""
        floor = b.pace.floor(self.config)
        engine_quiet = now - b.quiet_from
        waiting_whole = 0
        for w in b.attempts:
            if w.cut is not None:
                continue
            if w.committed:
                silent = now - max(w.last_seen, b.quiet_from)
                if silent > floor:
                    return f"a stream under way silent for {silent:.1f}s (allowed {floor:.1f}s)"
            elif _waiting(w) and w.stream:
                waited, allowed = now - w.started, self.first_content_allowed(w)
                if waited > allowed and engine_quiet > floor:
                    return (
                        f"no first token for {waited:.1f}s (allowed {allowed:.1f}s for ~{w.prompt_tokens} "
                        f"prompt tokens and those ahead)"
                    )
            elif _waiting(w):
                waiting_whole += 1
        # Whole answers send nothing until done: judged on the engine's counters, when it has some.
        allowed = self._allowed_silence(b)
        counters_read = now - b.pace.counters_at <= allowed
        if waiting_whole and counters_read and engine_quiet > allowed:
            return f"{waiting_whole} whole requests waiting while its engine counters stand still"
        return None

    def _allowed_silence(self, b: _Backend) -> float:
        return b.pace.no_progress(self.config, sum(w.prompt_tokens for w in b.attempts if _waiting(w)))

    def _could_move(self, watched: Watched) -> bool:
        """Some other backend of its request's pool is ready, and neither stalled nor suspected."""
        for peer in watched.peers:
            state = self.registry.backends.get(peer)
            other = self._backends.get(peer)
            suspect = other is not None and other.suspected_at is not None
            serves = state is not None and state.status is Status.READY and state.stalled_since is None
            if serves and not suspect:
                return True
        return False

    def _judge_unresponsive(self, name: str, b: _Backend, now: float) -> None:
        """Requests in flight, no sign of life of any kind for the floor (so a loaded engine slow to
        answer anything is given its time), and its control plane left calls unanswered for
        `UNANSWERED_S` since: a stopped process."""
        quiet = now - max(b.heard_at, b.busy_from)
        allowed = b.pace.floor(self.config)  # a health endpoint answers beside a long prefill
        if b.attempts and b.unanswered_s >= UNANSWERED_S and quiet > allowed and not b.marked:
            detail = (
                f"answers nothing: {b.unanswered_s:.1f}s of health probes and metrics scrapes unanswered, "
                f"nothing from {len(b.attempts)} requests for {quiet:.1f}s (allowed {allowed:.1f}s)"
            )
            if b.suspected_at is None:
                b.suspected_at, b.suspect_detail, b.suspected = now, detail, b.suspected + 1
            self._mark(name, b, detail, unresponsive=True)

    def _mark(self, name: str, b: _Backend, detail: str, unresponsive: bool) -> None:
        if self.registry.note_stalled(name, detail):
            b.marked, b.unresponsive, b.stalls = True, unresponsive, b.stalls + 1
        elif b.marked and not unresponsive:
            b.unresponsive = False  # silent requests too: only progress or an answered probe lifts it now

    def _cut(
        self,
        b: _Backend,
        since: float,
        now: float,
        why: str,
        streams_too: bool = False,
        keep_stranded: bool = False,
    ) -> None:
        """Cut the attempts waiting for their first content that were there before `since`, or have
        waited longer than their first-content allowance since (sent to it when nothing else could take
        them): they fail over. With `streams_too` (a stalled backend), also the streams under way that
        have been silent longer than the floor: they end with an error frame now, not at the idle
        timeout. With `keep_stranded` (a stall judged on progress, which a slow engine may yet show),
        an attempt no other backend of its pool could take stays: cutting it would turn a slow answer
        into an error and throw its prefill away."""
        loop = asyncio.get_running_loop()
        floor = b.pace.floor(self.config)
        for watched in b.attempts:
            scope = watched.scope
            if scope is None or watched.cut is not None:
                continue
            if keep_stranded and not self._could_move(watched):
                continue
            if watched.committed:
                cut = streams_too and now - watched.last_seen > floor
            else:
                allowed = self.first_content_allowed(watched)
                cut = watched.started <= since or now - watched.started > allowed
            if cut:
                watched.cut = why
                if watched.committed:
                    b.ended += 1
                else:
                    b.moved += 1
                scope.reschedule(loop.time())  # its timeout expires now

    def _alive(self, backend: str, how: str) -> None:
        """Progress: a byte or an answer from one of its requests, or its engine counters moving."""
        b = self._backend(backend)
        now = self.clock()
        b.quiet_from = b.heard_at = b.pace.progress_at = now
        b.unanswered_s, b.rechecks = 0.0, 0
        if b.marked:
            if self.registry.note_unstalled(backend, how):
                b.marked = False
        elif b.suspected_at is not None:
            b.cleared += 1
            log.info(
                "backend %s: suspicion cleared by progress after %.1fs (%s): slow, not stalled (%s)",
                backend,
                now - b.suspected_at,
                how,
                b.suspect_detail,
            )
        b.suspected_at, b.held = None, False


def _waiting(watched: Watched) -> bool:
    return watched.scope is not None and not watched.committed
