"""Streams under way moved off an engine seen running slower than measured: proxy/move_choice.py decides
which, proxy/resume.py continues them on the engine the request fails over to.

Every `interval_s` while resumable streams are under way, the streams of each backend are put to the
planner (`MovePlanner`: the adaptive scorer, which moves nothing unless the engine is seen slowed beyond
doubt, proxy/move_choice.py `moving_off`). A stream it moves is cut the way the hang watch cuts
one (its attempt's timeout scope expires now): the relay raises StreamCut with nothing more sent, and
dispatch continues it elsewhere as it would a broken one, except that the engine is not blamed: no
breaker failure, no error sample (it was slow, not failing; the slow-down already speaks for that).

Only a stream whose answer can be continued now is moved (plain text under way, unfinished), checked in
the same turn of the event loop as the cut, so nothing can change in between.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.backends.registry import Registry, Status
from gateway.policy.schema import Adaptive
from gateway.proxy.exchange import Exchange
from gateway.proxy.move_choice import MoveQuestion, Underway
from gateway.proxy.stall import Watched

log = logging.getLogger(__name__)

# The adaptive knobs of a profile routed adaptively, None for one that is not (nothing of it moves).
KnobsFor = Callable[[str], Adaptive | None]


class MovePlanner(Protocol):
    def moves(self, question: MoveQuestion) -> list[bool]: ...


@dataclass(eq=False, slots=True)
class _Tracked:
    watched: Watched
    exchange: Exchange


class StreamMoves:
    """The stream mover over one registry; one per gateway with adaptive routing."""

    def __init__(
        self,
        registry: Registry,
        planner: MovePlanner,
        knobs_for: KnobsFor,
        interval_s: float = 1.0,
        hold_s: float = 600.0,
    ) -> None:
        self.registry = registry
        self.planner = planner
        self.knobs_for = knobs_for
        self.interval_s = interval_s
        self.moved = 0  # streams moved so far
        # Backends streams were moved off, and when: none is moved onto one for `hold_s` (its fits soon
        # describe the slowed engine, and a reading against them would call it recovered and bounce the
        # streams back). Requests routed there meanwhile still go: the router weighs it as measured.
        self.left: dict[str, float] = {}
        self.hold_s = hold_s
        self._tracked: dict[Watched, _Tracked] = {}
        self._timer: asyncio.TimerHandle | None = None

    def track(self, watched: Watched, exchange: Exchange) -> None:
        """An attempt of a resumable stream is about to be sent (`watched.backend`)."""
        self._tracked[watched] = _Tracked(watched, exchange)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def untrack(self, watched: Watched) -> None:
        self._tracked.pop(watched, None)

    def check(self) -> int:
        """One round: move what the planner says should move; returns how many streams were cut."""
        groups: dict[tuple[str, str, str, str], list[_Tracked]] = {}
        for t in self._tracked.values():
            if not _movable(t):
                continue
            to = self._destination(t)
            if to is not None:
                key = (t.watched.backend, t.exchange.job.profile, to, t.exchange.job.pool.model)
                groups.setdefault(key, []).append(t)
        return sum(self._move(*key, group) for key, group in groups.items())

    def _move(self, backend: str, profile: str, to: str, model: str, group: list[_Tracked]) -> int:
        knobs = self.knobs_for(profile)
        if knobs is None:
            return 0
        if self.registry.clock() - self.left.get(to, -math.inf) < self.hold_s:
            return 0
        pool = group[0].exchange.job.pool
        streams = [_underway(t) for t in group]
        question = MoveQuestion(backend, profile, streams, self.registry.snapshots(pool), to, knobs)
        chosen = self.planner.moves(question)
        loop = asyncio.get_running_loop()
        cut = 0
        for t, move in zip(group, chosen, strict=True):
            scope = t.watched.scope
            if not move or scope is None:
                continue
            t.watched.cut = f"moved to {to}: {backend} runs slower than measured"
            t.watched.moving = True
            scope.reschedule(loop.time())  # its timeout expires now: the relay raises StreamCut
            cut += 1
        if cut:
            self.moved += cut
            self.left[backend] = self.registry.clock()
            log.info("moving %d of %d streams of %s (%s) to %s", cut, len(group), backend, model, to)
        return cut

    def _destination(self, t: _Tracked) -> str | None:
        """Where the stream would be continued: the next backend of the request's ranking it has not
        been on (dispatch's failover takes the ranking's next), if it is ready now and can count the
        answer's tokens (a continuation needs its /tokenize: one that cannot would end the stream with
        an error frame, where staying would have finished it)."""
        record = t.exchange.record
        been = {t.watched.backend, *record.resumed_from, *(b for b, _ in record.failures)}
        for name in t.exchange.job.ranked:
            state = self.registry.backends.get(name)
            if name in been or state is None:
                continue
            ready = state.status is Status.READY and state.stalled_since is None
            able = ready and "tokenize" in state.native_endpoints
            return name if able and not self.registry.breaker_open(name) else None
        return None

    def _tick(self) -> None:
        self._timer = None
        try:
            self.check()
        except Exception:  # a broken round must not stop the next: streams keep going where they are
            log.exception("stream mover round failed")
        if self._tracked:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._tick)


def _movable(t: _Tracked) -> bool:
    """A stream under way whose answer another engine can write from here (proxy/resume.py)."""
    w, resume = t.watched, t.exchange.resume
    meter = w.meter
    if not w.committed or w.scope is None or w.cut is not None or meter is None or resume is None:
        return False
    return meter.content_frames > 0 and resume.can_continue(answered=True)


def _underway(t: _Tracked) -> Underway:
    """The stream as far as it has gone: frames stand for tokens (a speculative engine's frame may carry
    several: then it has gone further than counted, and is moved less eagerly). Without a token limit
    in the request what is left is unknown here (None): the planner reads it from the profile's
    finished answers (proxy/move_choice.py `expected_left`)."""
    job, meter, resume = t.exchange.job, t.watched.meter, t.exchange.resume
    generated = (meter.content_frames if meter is not None else 0) + (resume.generated if resume else 0)
    limit = job.body.get("max_tokens", job.body.get("max_completion_tokens"))
    if not isinstance(limit, int) or isinstance(limit, bool):
        return Underway(job.prompt_tokens, generated, None)
    return Underway(job.prompt_tokens, generated, max(limit - generated, 0))
